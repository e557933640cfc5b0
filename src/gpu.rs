//! The GPU context: adapter choice, a device with the adapter's own limits and the features
//! wgconv uses, its capabilities, the pipeline cache, and read-back. Asynchronous at the
//! core (what the browser needs); the blocking calls wrap it outside wasm32.

use crate::caps::{coop_f16_supported, wanted_features, DeviceCaps, KernelLimits};
use crate::error::{BufferIssue, Error, Result};
use crate::kernel::PipelineCache;
use crate::scope::ErrorScope;

/// The largest staging buffer a read-back uses (bytes): larger ranges are read piece by
/// piece through it (a multiple of wgpu's copy and map alignments).
pub(crate) const READBACK_PIECE: u64 = 32 << 20;

/// How to pick and open a device: `GpuOptions::default().adapter("llvmpipe")`, or set the
/// public fields on a default value.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
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
    /// honours too). Measured cost on the H100: 22× on AlexNet conv1.
    pub runtime_checks: bool,
    /// Enable wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX where the adapter offers f16×f16→f32
    /// 16×16×16 with subgroup size 32 (the matrix-unit path of `Precision::F16Accum32`, and
    /// the only path of `Precision::F16x3`).
    /// Opt-in: wgpu marks the feature experimental (also `WGCONV_COOP=1`).
    pub cooperative_matrix: bool,
}

impl GpuOptions {
    /// Picks the first adapter whose name contains `substring` (case-insensitive): a
    /// `&str`, a `String` or an `Option<String>` (`None`: `WGCONV_ADAPTER`, else the best).
    pub fn adapter(mut self, substring: impl Into<AdapterName>) -> Self {
        self.adapter = substring.into().0;
        self
    }
    /// Searches only these backends.
    pub fn backends(mut self, backends: impl Into<Option<wgpu::Backends>>) -> Self {
        self.backends = backends.into();
        self
    }
    /// Requests these limits instead of the adapter's own.
    pub fn limits(mut self, limits: impl Into<Option<wgpu::Limits>>) -> Self {
        self.limits = limits.into();
        self
    }
    /// Keeps wgpu's runtime bounds checks (see the field).
    pub fn runtime_checks(mut self, on: bool) -> Self {
        self.runtime_checks = on;
        self
    }
    /// Enables cooperative matrices where the adapter offers them (see the field).
    pub fn cooperative_matrix(mut self, on: bool) -> Self {
        self.cooperative_matrix = on;
        self
    }
}

/// An adapter name substring, or none ([`GpuOptions::adapter`]'s argument).
#[derive(Debug, Clone, Default)]
pub struct AdapterName(pub Option<String>);

impl From<&str> for AdapterName {
    fn from(s: &str) -> Self {
        AdapterName(Some(s.to_owned()))
    }
}
impl From<String> for AdapterName {
    fn from(s: String) -> Self {
        AdapterName(Some(s))
    }
}
impl From<Option<String>> for AdapterName {
    fn from(s: Option<String>) -> Self {
        AdapterName(s)
    }
}

/// What wgconv knows about an adapter: reported by `wgconv info` and the benchmark.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "tune", derive(serde::Serialize))]
pub struct AdapterSummary {
    /// The adapter's name.
    pub name: String,
    /// Vulkan, Metal, DX12, GL, BrowserWebGpu.
    pub backend: String,
    /// Discrete, integrated, CPU, …
    pub device_type: String,
    /// The driver's name.
    pub driver: String,
    /// The driver's version.
    pub driver_info: String,
}

impl AdapterSummary {
    /// The summary of an adapter's info.
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

/// Every buffer wgconv creates ([`Gpu::create_buffer`], [`Gpu::buffer_init`]: its weights,
/// parameters, flags and scratch, and the tensors of [`crate::Conv2d::forward`]) is a whole
/// number of these bytes. Why: wgpu sub-allocates buffers from larger blocks of device
/// memory, each at the alignment the driver asks for (16 bytes on NVIDIA), so a buffer whose
/// size is not a multiple of 32 leaves the next one 16 bytes past a 32-byte memory sector.
/// A tensor placed there has every 32-byte run of its stores straddle two sectors: on an
/// H100 a 1×1 layer's channels-last output took twice as long in f32 and 1.3× as long in
/// f16 (BENCHMARKS.md, "Buffer placement"). Callers that allocate their own tensors should
/// keep their sizes whole multiples too.
pub const BUFFER_GRANULE: u64 = 256;

/// A device and queue wgconv runs on, created by wgconv or handed in by the caller.
/// Cheap to clone: clones share the device, the queue and the pipeline cache.
///
/// ```no_run
/// use wgconv::{Gpu, GpuOptions};
/// // The best adapter, with cooperative matrices where it offers them (opt-in: wgpu marks
/// // the feature experimental).
/// let gpu = Gpu::with_options(GpuOptions::default().cooperative_matrix(true))?;
/// println!("{} (cooperative matrices: {})", gpu.caps().name, gpu.caps().coop_f16);
/// # Ok::<(), wgconv::Error>(())
/// ```
#[derive(Clone)]
pub struct Gpu {
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The adapter's info.
    pub info: wgpu::AdapterInfo,
    shared: std::sync::Arc<Shared>,
}

/// What clones of one `Gpu` share.
struct Shared {
    pipelines: PipelineCache,
    runtime_checks: bool,
    /// Whether transposing layout passes may go by tiles (`kernel::layout_pass_tiled`).
    tiled_layout_passes: bool,
    caps: DeviceCaps,
    /// wgpu's reason and message once the device is lost (devices of [`Gpu::new`] only).
    lost: std::sync::Arc<std::sync::OnceLock<(String, String)>>,
    /// Taken while an op's autotuner times its candidates (`Conv2dOptions::autotune`), so
    /// that two ops autotuning at once on this device do not disturb each other's times.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    autotune: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.info.name).field("backend", &self.info.backend).finish()
    }
}

/// The backends of the process-wide instance: every one but GL. wgpu's GL backend opens an
/// EGL/WGL display and context when its instance is created and keeps them for the
/// instance's life; a process-wide instance would hold them in every process, also those
/// that never use GL. A GL request gets an instance of its own, so that buffers from
/// another GL device are not recognised as foreign (see [`shared_instance`]).
const SHARED_BACKENDS: wgpu::Backends = wgpu::Backends::PRIMARY;

/// The wgpu instance every [`Gpu::new`] of this process opens its device on (all
/// backends but GL). Create your own devices from it too: wgpu then knows which device
/// each buffer belongs to, and [`crate::Conv2d::encode`] refuses a buffer of another device
/// with [`crate::Error::Buffer`] (buffers of a device on a separate instance cannot be told
/// apart from this one's).
#[cfg(not(target_arch = "wasm32"))]
pub fn shared_instance() -> &'static wgpu::Instance {
    static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
    INSTANCE.get_or_init(|| new_instance(SHARED_BACKENDS))
}

fn new_instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// The instance to search `backends` on: the shared one unless GL is asked for (see
/// `SHARED_BACKENDS`); on wasm32 one per call (wgpu's web types are not `Sync`).
fn instance_for(backends: wgpu::Backends) -> wgpu::Instance {
    #[cfg(not(target_arch = "wasm32"))]
    if SHARED_BACKENDS.contains(backends) {
        return shared_instance().clone();
    }
    new_instance(backends)
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

/// Backend preference among adapters of one type: the native compute APIs first (they
/// offer f16, subgroups and cooperative matrices), GL last (no f16 in naga's GLSL).
fn backend_rank(b: wgpu::Backend) -> u8 {
    match b {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::BrowserWebGpu => 1,
        wgpu::Backend::Gl => 2,
        _ => 3,
    }
}

/// Every adapter wgpu finds for the given backends (default: `WGPU_BACKEND`, else all).
pub async fn enumerate_adapters_async(backends: Option<wgpu::Backends>) -> Vec<wgpu::Adapter> {
    let explicit = backends.or_else(wgpu::Backends::from_env);
    let wanted = explicit.unwrap_or(wgpu::Backends::all());
    let primary = wanted & SHARED_BACKENDS;
    let mut adapters = Vec::new();
    if !primary.is_empty() {
        adapters = instance_for(primary).enumerate_adapters(primary).await;
    }
    // GL (an instance of its own, see `SHARED_BACKENDS`) where asked for, or where nothing
    // else was found: it ranks last among adapters anyway.
    let rest = wanted - SHARED_BACKENDS;
    if !rest.is_empty() && (explicit.is_some() || adapters.is_empty()) {
        adapters.extend(new_instance(rest).enumerate_adapters(rest).await);
    }
    adapters
}

/// [`enumerate_adapters_async`], blocking.
#[cfg(not(target_arch = "wasm32"))]
pub fn enumerate_adapters(backends: Option<wgpu::Backends>) -> Vec<wgpu::Adapter> {
    pollster::block_on(enumerate_adapters_async(backends))
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
        .min_by_key(|(_, i)| (type_rank(i.device_type), backend_rank(i.backend)))
        .map(|(idx, i)| {
            (
                idx,
                format!(
                    "first {:?} {:?} adapter (discrete > integrated > virtual > other > CPU; then Vulkan, Metal, \
                     DX12 > WebGPU > GL)",
                    i.device_type, i.backend
                ),
            )
        })
        .ok_or_else(|| Error::NoAdapter(" (is a Vulkan, Metal, DX12 or GL driver installed?)".into()))
}

/// The adapter name substring in force: the one given, else `WGCONV_ADAPTER`.
pub fn adapter_substring(explicit: Option<&str>) -> Option<String> {
    explicit.map(str::to_owned).or_else(|| std::env::var("WGCONV_ADAPTER").ok())
}

/// `WGCONV_RUNTIME_CHECKS=1`: keep wgpu's runtime bounds checks in the kernels.
pub fn runtime_checks_from_env() -> bool {
    env_flag("WGCONV_RUNTIME_CHECKS")
}

/// Whether a device's transposing layout passes may go by tiles of workgroup memory: on GPUs,
/// and on CPU adapters where `WGCONV_TILED_LAYOUT_PASSES=1` asks for them (there they are
/// slower; the switch lets the tests run them on lavapipe).
fn tiled_layout_passes(caps: &DeviceCaps) -> bool {
    !caps.is_cpu() || env_flag("WGCONV_TILED_LAYOUT_PASSES")
}

/// An environment switch set to anything but `0` (never set on wasm32).
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v != "0")
}

impl Gpu {
    /// Opens the best adapter (see [`GpuOptions`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Self> {
        Gpu::with_options(GpuOptions::default())
    }

    /// Opens an adapter as `opts` say.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_options(opts: GpuOptions) -> Result<Self> {
        pollster::block_on(Gpu::new_async(opts))
    }

    /// Opens an adapter as `opts` say (the browser's way: nothing blocks).
    pub async fn new_async(opts: GpuOptions) -> Result<Self> {
        let adapters = enumerate_adapters_async(opts.backends).await;
        let infos: Vec<_> = adapters.iter().map(|a| a.get_info()).collect();
        let (idx, why) = choose_adapter(&infos, adapter_substring(opts.adapter.as_deref()).as_deref())?;
        let adapter = &adapters[idx];
        log::info!("wgconv: using {} ({:?}): {why}", infos[idx].name, infos[idx].backend);
        let limits = opts.limits.clone().unwrap_or_else(|| adapter.limits());
        let mut features = wanted_features(adapter.features());
        let want_coop = opts.cooperative_matrix || env_flag("WGCONV_COOP");
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
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgconv"),
                required_features: features,
                required_limits: limits,
                experimental_features: experimental,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| Error::Device { adapter: infos[idx].name.clone(), reason: e.to_string() })?;
        // wgpu's default handler panics on an error that reaches no error scope. wgconv's
        // own calls run inside scopes and return typed errors; what escapes them (e.g. a
        // buffer left invalid after a driver's shader compiler failed, used by a later
        // read-back, which then returns its own error) is logged instead of aborting the
        // caller. Devices brought by the caller keep their own handler.
        device.on_uncaptured_error(std::sync::Arc::new(|e: wgpu::Error| {
            log::error!("wgconv: a wgpu error outside wgconv's error scopes: {e}");
        }));
        let checks = opts.runtime_checks || runtime_checks_from_env();
        let caps = DeviceCaps::of_device(&device).with_adapter(adapter);
        let gpu = Gpu::assemble(device, queue, infos[idx].clone(), caps, checks);
        // wgpu drops the errors of a lost device's calls (no error scope reports them): the
        // callback records the loss, which wgconv's calls then report as `DeviceLost`.
        let lost = gpu.shared.lost.clone();
        gpu.device.set_device_lost_callback(move |reason, message| {
            log::error!("wgconv: the device was lost ({reason:?}): {message}");
            let _ = lost.set((format!("{reason:?}"), message));
        });
        Ok(gpu)
    }

    /// Wraps a device and queue the caller created (bring your own device). wgconv uses
    /// whatever limits and features that device was created with, cooperative matrices
    /// included where the device enabled them (with subgroups of 32).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let info = device.adapter_info();
        let caps = DeviceCaps::of_device(&device);
        Gpu::assemble(device, queue, info, caps, runtime_checks_from_env())
    }

    /// [`Gpu::from_device`] for a device opened from `adapter`: refusals of features the
    /// device lacks can then say whether the adapter offers them.
    pub fn from_device_with_adapter(device: wgpu::Device, queue: wgpu::Queue, adapter: &wgpu::Adapter) -> Self {
        let info = device.adapter_info();
        let caps = DeviceCaps::of_device(&device).with_adapter(adapter);
        Gpu::assemble(device, queue, info, caps, runtime_checks_from_env())
    }

    fn assemble(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        caps: DeviceCaps,
        runtime_checks: bool,
    ) -> Self {
        let tiled_layout_passes = tiled_layout_passes(&caps);
        let lost = Default::default();
        let shared = Shared {
            pipelines: PipelineCache::default(),
            runtime_checks,
            tiled_layout_passes,
            caps,
            lost,
            autotune: std::sync::Mutex::new(()),
        };
        Gpu { device, queue, info, shared: std::sync::Arc::new(shared) }
    }

    /// How many compiled pipelines this device's cache holds (at most
    /// [`crate::advanced::PIPELINE_CACHE_CAPACITY`]; a `Conv2d` keeps its own alive too).
    pub fn cached_pipelines(&self) -> usize {
        self.pipelines().len()
    }

    /// `DeviceLost` once wgpu has reported the device lost (on devices of [`Gpu::new`]).
    pub(crate) fn check_alive(&self) -> Result<()> {
        match self.shared.lost.get() {
            Some((reason, message)) => Err(Error::DeviceLost { reason: reason.clone(), message: message.clone() }),
            None => Ok(()),
        }
    }

    /// `error`, or `DeviceLost` where wgpu reported the device lost meanwhile (the likelier
    /// cause: wgpu's calls on a lost device fail with other errors, or none). It does not
    /// poll the device itself: a poll would run the caller's pending map callbacks inside
    /// wgconv's call; wgpu reports the loss at the next poll or submission.
    pub(crate) fn lost_or(&self, error: Error) -> Error {
        self.check_alive().err().unwrap_or(error)
    }

    /// What the device can do, as the kernels and the selection see it.
    pub fn caps(&self) -> &DeviceCaps {
        &self.shared.caps
    }

    /// The device's autotune turn: held while one op times its candidates.
    #[cfg(feature = "tune")]
    pub(crate) fn autotune_turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared.autotune.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn pipelines(&self) -> &PipelineCache {
        &self.shared.pipelines
    }

    /// Whether the kernels keep wgpu's runtime bounds checks (part of the tuning cache key).
    pub fn runtime_checks(&self) -> bool {
        self.shared.runtime_checks
    }

    /// Whether transposing layout passes may go by tiles of workgroup memory.
    pub(crate) fn tiled_layout_passes(&self) -> bool {
        self.shared.tiled_layout_passes
    }

    /// Whether the f16 paths can use cooperative matrices on this device (see
    /// [`GpuOptions::cooperative_matrix`]).
    pub fn has_coop_f16(&self) -> bool {
        self.shared.caps.coop_f16
    }

    /// The adapter's name, backend and driver.
    pub fn summary(&self) -> AdapterSummary {
        AdapterSummary::of(&self.info)
    }
    /// The device's limits.
    pub fn limits(&self) -> wgpu::Limits {
        self.device.limits()
    }
    /// The limits kernel configs are checked against.
    pub fn kernel_limits(&self) -> KernelLimits {
        self.shared.caps.kernel_limits()
    }
    /// Whether GPU timestamps can be taken.
    pub fn has_timestamps(&self) -> bool {
        self.shared.caps.timestamps()
    }
    /// Whether the device is a CPU implementation (lavapipe, WARP, SwiftShader).
    pub fn is_cpu(&self) -> bool {
        self.shared.caps.is_cpu()
    }

    /// Blocks until the queue is idle.
    pub fn wait(&self) -> Result<()> {
        self.poll_until(None)
    }

    /// Blocks until submission `index` has run.
    pub fn wait_for(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.poll_until(Some(index))
    }

    /// Blocks until `index`, or the latest submission, has run.
    fn poll_until(&self, index: Option<wgpu::SubmissionIndex>) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait { submission_index: index, timeout: None })
            .map(|_| ())
            .map_err(|e| Error::Wgpu { stage: "poll", message: e.to_string() })
    }

    /// Refuses a buffer the device cannot create or bind whole (`create_buffer_init` would
    /// panic instead of reporting it).
    pub fn check_buffer(&self, what: &str, bytes: u64, bound_whole: bool) -> Result<()> {
        let l = self.device.limits();
        let cap =
            if bound_whole { l.max_buffer_size.min(l.max_storage_buffer_binding_size) } else { l.max_buffer_size };
        if bytes > cap {
            return Err(Error::TooLarge(format!("{what} needs {bytes} B, over the device's {cap} B")));
        }
        Ok(())
    }

    /// Creates a buffer in its own error scopes: a device out of memory is
    /// [`Error::OutOfMemory`] naming `label` and `size`. Its size is `size` rounded up to a
    /// whole number of [`BUFFER_GRANULE`] bytes (see there).
    pub fn create_buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        let (scope, buffer) = self.create_scoped(label, size, usage, false);
        scope.finish_buffer(label, size)?;
        Ok(buffer)
    }

    /// [`Gpu::create_buffer`] without blocking.
    pub async fn create_buffer_async(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        let (scope, buffer) = self.create_scoped(label, size, usage, false);
        scope.finish_buffer_async(label, size).await?;
        Ok(buffer)
    }

    /// A buffer created inside freshly pushed error scopes, which the caller finishes
    /// (blocking or not) to learn whether the creation failed.
    fn create_scoped(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
        mapped_at_creation: bool,
    ) -> (ErrorScope, wgpu::Buffer) {
        let scope = ErrorScope::push(&self.device);
        // Past the device's largest buffer the creation fails anyway, naming the size asked.
        let whole = size.next_multiple_of(BUFFER_GRANULE);
        let size = if whole <= self.device.limits().max_buffer_size { whole } else { size };
        let buffer =
            self.device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation });
        (scope, buffer)
    }

    /// A buffer holding `contents` (mapped at creation, in its own error scopes): what
    /// wgpu's `create_buffer_init` does, except that a creation the device cannot satisfy is
    /// [`Error::OutOfMemory`] naming the buffer instead of a panic on the unmappable buffer.
    pub fn buffer_init(&self, label: &str, contents: &[u8], usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        // Mapped-at-creation buffers need a size that is a non-zero multiple of 4.
        let size =
            (contents.len() as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT).max(wgpu::COPY_BUFFER_ALIGNMENT);
        let (scope, buffer) = self.create_scoped(label, size, usage, true);
        scope.finish_buffer(label, size)?;
        {
            let mut view = buffer.get_mapped_range_mut(..).map_err(|e| Error::OutOfMemory {
                stage: "buffer creation",
                what: label.to_string(),
                bytes: size,
                message: format!("cannot map it for its contents: {e}"),
            })?;
            view.slice(..contents.len()).copy_from_slice(contents);
        }
        buffer.unmap();
        Ok(buffer)
    }

    /// Copies a buffer range back to the host (the buffer needs COPY_SRC).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_buffer<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, offset: u64, len: usize) -> Result<Vec<T>> {
        pollster::block_on(self.read_buffer_async(buffer, offset, len))
    }

    /// Copies a buffer range back to the host (the buffer needs COPY_SRC). The host vector
    /// is allocated fallibly: a size beyond the host's memory is [`Error::OutOfMemory`], not
    /// an abort.
    pub async fn read_buffer_async<T: bytemuck::Pod>(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        len: usize,
    ) -> Result<Vec<T>> {
        let mut out = crate::alloc::zeroed_vec::<T>(len, "the read-back")?;
        self.read_buffer_into_async(buffer, offset, &mut out).await?;
        Ok(out)
    }

    /// Copies a buffer range into `out` (the buffer needs COPY_SRC), without a host
    /// allocation of its own: [`Conv2d::forward`](crate::Conv2d::forward) reads each
    /// chunk straight into the output it reserved once.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_buffer_into<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, offset: u64, out: &mut [T]) -> Result<()> {
        pollster::block_on(self.read_buffer_into_async(buffer, offset, out))
    }

    /// [`Gpu::read_buffer_into`] without blocking.
    pub async fn read_buffer_into_async<T: bytemuck::Pod>(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        out: &mut [T],
    ) -> Result<()> {
        let bytes = std::mem::size_of_val(out) as u64;
        if bytes == 0 {
            return Ok(());
        }
        if !buffer.usage().contains(wgpu::BufferUsages::COPY_SRC) {
            return Err(Error::Buffer {
                buffer: "read-back",
                issue: BufferIssue::missing(wgpu::BufferUsages::COPY_SRC, buffer),
            });
        }
        if offset.saturating_add(bytes) > buffer.size() {
            let issue = BufferIssue::TooSmall { needed: offset.saturating_add(bytes), size: buffer.size() };
            return Err(Error::Buffer { buffer: "read-back", issue });
        }
        // Through one staging buffer of at most READBACK_PIECE bytes, piece by piece: the
        // host then holds the output and one piece, not a second copy of the whole range.
        let label = "wgconv readback";
        let piece = bytes.min(READBACK_PIECE);
        let staging =
            self.create_buffer_async(label, piece, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST).await?;
        let out = bytemuck::cast_slice_mut::<T, u8>(out);
        let mut done = 0u64;
        while done < bytes {
            let n = piece.min(bytes - done);
            let scope = ErrorScope::push(&self.device);
            let mut enc = self.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(buffer, offset + done, &staging, 0, n);
            self.queue.submit([enc.finish()]);
            scope.finish_async("read-back").await?;
            let slice = staging.slice(..n);
            let mapped = crate::scope::MapFuture::new(&slice);
            #[cfg(not(target_arch = "wasm32"))]
            self.wait()?;
            let map_err = |e: String| Error::Wgpu { stage: "map", message: format!("{label} ({piece} B): {e}") };
            mapped.await.map_err(|e| map_err(e.to_string()))?;
            {
                let view = slice.get_mapped_range().map_err(|e| map_err(e.to_string()))?;
                out[done as usize..(done + n) as usize].copy_from_slice(&view);
            }
            staging.unmap();
            done += n;
        }
        Ok(())
    }
}
