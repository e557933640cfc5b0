//! The GPU context: adapter choice, a device with the adapter's own limits, the pipeline
//! cache, and small helpers (error scopes, read-back) the rest of the crate shares.

use crate::config::KernelLimits;
use crate::error::{Error, Result};
use crate::kernel::PipelineCache;

/// How to pick and open a device.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Pick the first adapter whose name contains this (case-insensitive).
    /// Default: the `WGCONV_ADAPTER` environment variable.
    pub adapter: Option<String>,
    /// Backends to search. Default: `WGPU_BACKEND` (e.g. `vulkan`), else all.
    pub backends: Option<wgpu::Backends>,
    /// Limits to request instead of the adapter's own (each must be within the adapter's).
    /// Tests use this to force batch chunking and grid folding on small shapes.
    pub limits: Option<wgpu::Limits>,
    /// Keep wgpu's runtime bounds checks in the kernels (default off: our kernels guard
    /// every access themselves; also `WGCONV_RUNTIME_CHECKS=1`, which `Gpu::from_device`
    /// honours too). Measured cost on the H100: 22× (BENCHMARKS.md).
    pub runtime_checks: bool,
    /// Enable wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX where the adapter offers f16×f16→f32
    /// 16×16×16 with subgroup size 32 (the matrix-unit path of `Precision::F16Accum32`, and
    /// the only path of `Precision::F16x3`).
    /// Opt-in: wgpu marks the feature experimental (also `WGCONV_COOP=1`).
    pub cooperative_matrix: bool,
}

/// What wgconv knows about an adapter: reported by `wgconv info` and the benchmark.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
}

impl AdapterSummary {
    pub fn of(info: &wgpu::AdapterInfo) -> Self {
        AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
        }
    }
}

/// A device and queue wgconv runs on, created by wgconv or handed in by the caller.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub(crate) pipelines: PipelineCache,
    pub(crate) runtime_checks: bool,
    coop_f16: bool,
}

/// Adapter preference: discrete first, CPU last.
fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// Every adapter wgpu finds for the given backends (default: `WGPU_BACKEND`, else all).
pub fn enumerate_adapters(backends: Option<wgpu::Backends>) -> Vec<wgpu::Adapter> {
    let backends = backends.or_else(wgpu::Backends::from_env).unwrap_or(wgpu::Backends::all());
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(backends))
}

/// Chooses among adapters: a name substring if given, else the best device type.
/// Returns the index and why it was chosen.
pub fn choose_adapter(infos: &[wgpu::AdapterInfo], substring: Option<&str>) -> Result<(usize, String)> {
    if let Some(sub) = substring.filter(|s| !s.is_empty()) {
        let needle = sub.to_lowercase();
        return infos
            .iter()
            .position(|i| i.name.to_lowercase().contains(&needle))
            .map(|i| (i, format!("its name matches {sub:?}")))
            .ok_or_else(|| {
                let names: Vec<_> = infos.iter().map(|i| i.name.as_str()).collect();
                Error::NoAdapter(format!(" whose name contains {sub:?} (found: {names:?})"))
            });
    }
    infos
        .iter()
        .enumerate()
        .min_by_key(|(_, i)| type_rank(i.device_type))
        .map(|(idx, i)| {
            (idx, format!("first {:?} adapter (discrete > integrated > virtual > other > CPU)", i.device_type))
        })
        .ok_or_else(|| Error::NoAdapter(" (is a Vulkan, Metal, DX12 or GL driver installed?)".into()))
}

/// The adapter name substring in force: the one given, else `WGCONV_ADAPTER`.
pub fn adapter_substring(explicit: Option<&str>) -> Option<String> {
    explicit.map(str::to_owned).or_else(|| std::env::var("WGCONV_ADAPTER").ok())
}

/// `WGCONV_RUNTIME_CHECKS=1`: keep wgpu's runtime bounds checks in the kernels.
pub fn runtime_checks_from_env() -> bool {
    std::env::var("WGCONV_RUNTIME_CHECKS").is_ok_and(|v| v != "0")
}

/// Whether an adapter offers what the cooperative-matrix kernel needs: the experimental
/// feature, an f16×f16→f32 16×16×16 configuration, and subgroups of exactly 32 (the kernel
/// derives warps from the invocation index).
pub fn coop_f16_supported(adapter: &wgpu::Adapter) -> bool {
    let info = adapter.get_info();
    adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && adapter.cooperative_matrix_properties().iter().any(|p| {
            p.m_size == 16
                && p.n_size == 16
                && p.k_size == 16
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        })
}

/// The optional features wgconv turns on when an adapter has them.
pub fn wanted_features(adapter: wgpu::Features) -> wgpu::Features {
    let wanted = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    adapter & wanted
}

impl Gpu {
    /// Opens the best adapter (see [`GpuOptions`]).
    pub fn new() -> Result<Self> {
        Gpu::with_options(GpuOptions::default())
    }

    pub fn with_options(opts: GpuOptions) -> Result<Self> {
        let adapters = enumerate_adapters(opts.backends);
        let infos: Vec<_> = adapters.iter().map(|a| a.get_info()).collect();
        let (idx, why) = choose_adapter(&infos, adapter_substring(opts.adapter.as_deref()).as_deref())?;
        let adapter = &adapters[idx];
        log::info!("wgconv: using {} ({:?}): {why}", infos[idx].name, infos[idx].backend);
        let limits = opts.limits.clone().unwrap_or_else(|| adapter.limits());
        let mut features = wanted_features(adapter.features());
        let want_coop = opts.cooperative_matrix || std::env::var("WGCONV_COOP").is_ok_and(|v| v != "0");
        let coop_f16 = want_coop && coop_f16_supported(adapter);
        let experimental = if coop_f16 {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu asks callers of experimental features to accept that their
            // implementation may still have bugs. wgconv uses only the cooperative-matrix
            // load / multiply-add / store of 16×16 f16/f32 matrices the adapter reports, and
            // its GPU-vs-CPU tests cover that path on the hardware that has it.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("wgconv"),
            required_features: features,
            required_limits: limits,
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| Error::Device { adapter: infos[idx].name.clone(), reason: e.to_string() })?;
        let checks = opts.runtime_checks || runtime_checks_from_env();
        let mut gpu = Gpu::assemble(device, queue, infos[idx].clone(), checks);
        gpu.coop_f16 = coop_f16;
        Ok(gpu)
    }

    /// Wraps a device and queue the caller created (bring your own device). wgconv uses
    /// whatever limits and features that device was created with.
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let info = device.adapter_info();
        Gpu::assemble(device, queue, info, runtime_checks_from_env())
    }

    fn assemble(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo, runtime_checks: bool) -> Self {
        Gpu { device, queue, info, pipelines: PipelineCache::default(), runtime_checks, coop_f16: false }
    }

    /// Whether the kernels keep wgpu's runtime bounds checks (part of the tuning cache key).
    pub fn runtime_checks(&self) -> bool {
        self.runtime_checks
    }

    /// Whether the f16 path can use cooperative matrices on this device (only known for
    /// devices wgconv opened itself; see [`GpuOptions::cooperative_matrix`]).
    pub fn has_coop_f16(&self) -> bool {
        self.coop_f16
    }

    pub fn summary(&self) -> AdapterSummary {
        AdapterSummary::of(&self.info)
    }
    pub fn limits(&self) -> wgpu::Limits {
        self.device.limits()
    }
    pub fn kernel_limits(&self) -> KernelLimits {
        KernelLimits::from(&self.device.limits())
    }
    pub fn has_timestamps(&self) -> bool {
        self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY)
    }
    pub fn is_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Blocks until the queue is idle.
    pub fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::Wgpu { stage: "poll", message: e.to_string() })
    }

    /// Refuses a buffer the device cannot create or bind whole (`create_buffer_init` would
    /// panic instead of reporting it).
    pub(crate) fn check_buffer(&self, what: &str, bytes: u64, bound_whole: bool) -> Result<()> {
        let l = self.device.limits();
        let cap =
            if bound_whole { l.max_buffer_size.min(l.max_storage_buffer_binding_size) } else { l.max_buffer_size };
        if bytes > cap {
            return Err(Error::TooLarge(format!("{what} needs {bytes} B, over the device's {cap} B")));
        }
        Ok(())
    }

    /// Copies a buffer range back to the host (the buffer needs COPY_SRC).
    pub fn read_buffer<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, offset: u64, len: usize) -> Result<Vec<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::TooLarge(format!("reading {len} elements")))? as u64;
        if bytes == 0 {
            return Ok(Vec::new());
        }
        if !buffer.usage().contains(wgpu::BufferUsages::COPY_SRC) || offset.saturating_add(bytes) > buffer.size() {
            return Err(Error::Unsupported(format!(
                "cannot read {bytes} B at {offset} from a buffer of {} B with usage {:?}",
                buffer.size(),
                buffer.usage()
            )));
        }
        let scope = ErrorScope::push(&self.device);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgconv readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(buffer, offset, &staging, 0, bytes);
        self.queue.submit([enc.finish()]);
        scope.finish("read-back")?;
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv()
            .map_err(|e| Error::Wgpu { stage: "map", message: e.to_string() })?
            .map_err(|e| Error::Wgpu { stage: "map", message: e.to_string() })?;
        let view = slice.get_mapped_range().map_err(|e| Error::Wgpu { stage: "map", message: e.to_string() })?;
        let out = bytemuck::cast_slice::<u8, T>(&view).to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }
}

/// Validation and out-of-memory errors of a stretch of wgpu calls, returned instead of
/// reaching wgpu's default handler (which panics).
pub(crate) struct ErrorScope {
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
}

impl ErrorScope {
    pub fn push(device: &wgpu::Device) -> Self {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        ErrorScope { validation, oom }
    }
    pub fn finish(self, stage: &'static str) -> Result<()> {
        let validation = pollster::block_on(self.validation.pop());
        let oom = pollster::block_on(self.oom.pop());
        match validation.or(oom) {
            Some(e) => Err(Error::Wgpu { stage, message: e.to_string() }),
            None => Ok(()),
        }
    }
}
