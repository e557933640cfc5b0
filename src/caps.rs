//! What a device can do, read once from the device itself: the one value every kernel
//! family and the selection consult (features, limits, vendor, subgroup size).

/// The limits a kernel config is checked against: the device's, from `wgpu::Limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    /// `max_compute_workgroup_storage_size`, bytes.
    pub workgroup_storage_bytes: u32,
    /// `max_compute_invocations_per_workgroup`.
    pub invocations_per_workgroup: u32,
    /// `max_compute_workgroup_size_x` (every kernel is one-dimensional in x).
    pub workgroup_size_x: u32,
}

impl KernelLimits {
    /// A device with `workgroup_storage_bytes` of workgroup memory and 1024 invocations per
    /// workgroup: for geometry checks of representative problems and in tests.
    pub const fn with_workgroup_bytes(workgroup_storage_bytes: u32) -> Self {
        KernelLimits { workgroup_storage_bytes, invocations_per_workgroup: 1024, workgroup_size_x: 1024 }
    }
}

impl KernelLimits {
    /// The WebGPU name of the limit that bounds invocations per workgroup here (the smaller
    /// of the two), for refusals that must name the limit.
    pub fn invocations_limit_name(&self) -> &'static str {
        if self.workgroup_size_x < self.invocations_per_workgroup {
            "max_compute_workgroup_size_x"
        } else {
            "max_compute_invocations_per_workgroup"
        }
    }
}

impl From<&wgpu::Limits> for KernelLimits {
    fn from(l: &wgpu::Limits) -> Self {
        KernelLimits {
            workgroup_storage_bytes: l.max_compute_workgroup_storage_size,
            invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            workgroup_size_x: l.max_compute_workgroup_size_x,
        }
    }
}

/// PCI vendor id of NVIDIA adapters.
pub const VENDOR_NVIDIA: u32 = 0x10de;

/// What the cooperative-matrix kernels need, for refusals.
pub(crate) const COOP_NEEDS: &str = "(f16 A/B, f32 C, 16x16x16, subgroup size 32)";

/// The capabilities of one device as wgconv's kernels see them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeviceCaps {
    /// The adapter's name, e.g. "NVIDIA H100 80GB HBM3" or "llvmpipe (LLVM 15.0.6, 256 bits)".
    pub name: String,
    /// PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel; 0x10005 Mesa for lavapipe).
    pub vendor: u32,
    /// Discrete, integrated, CPU, …
    pub device_type: wgpu::DeviceType,
    /// Vulkan, Metal, DX12, GL or BrowserWebGpu.
    pub backend: wgpu::Backend,
    /// The driver's name and version, where the backend reports them.
    pub driver: String,
    /// The features the device was created with (not merely those the adapter offers).
    pub features: wgpu::Features,
    /// The limits the device was created with.
    pub limits: wgpu::Limits,
    /// Subgroup sizes the device may run with (`min`, `max`); equal when fixed.
    pub subgroup_size: (u32, u32),
    /// Whether the f16×f16→f32 16×16×16 cooperative-matrix kernels can run: the device has
    /// the experimental feature enabled and subgroups of exactly 32.
    pub coop_f16: bool,
    /// Whether the adapter offers those cooperative matrices at all (enabled or not);
    /// `None` where the adapter is unknown (a device the caller created).
    pub coop_f16_offered: Option<bool>,
    /// The features the adapter offers (the device may have enabled fewer); `None` where
    /// the adapter is unknown (see [`crate::Gpu::from_device_with_adapter`]).
    pub adapter_features: Option<wgpu::Features>,
}

impl DeviceCaps {
    /// The capabilities of a device, from the device alone (also for devices the caller
    /// created). Cooperative matrices count where the device enabled the feature and runs
    /// subgroups of 32; the matrix configurations themselves are an adapter property, which
    /// [`DeviceCaps::with_adapter`] checks where the adapter is at hand.
    pub fn of_device(device: &wgpu::Device) -> Self {
        let info = device.adapter_info();
        let features = device.features();
        let coop = features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32;
        DeviceCaps::from_parts(&info, features, device.limits(), coop)
    }

    /// The fields every constructor fills alike.
    fn from_parts(info: &wgpu::AdapterInfo, features: wgpu::Features, limits: wgpu::Limits, coop_f16: bool) -> Self {
        DeviceCaps {
            name: adapter_name(info),
            vendor: info.vendor,
            device_type: info.device_type,
            backend: info.backend,
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            features,
            limits,
            subgroup_size: (info.subgroup_min_size, info.subgroup_max_size),
            coop_f16,
            coop_f16_offered: None,
            adapter_features: None,
        }
    }

    /// The capabilities a device opened from `adapter` by [`crate::Gpu`] would have
    /// (`cooperative_matrix`: the opt-in of [`crate::GpuOptions::cooperative_matrix`]), for
    /// reports and cache look-ups that open no device.
    pub fn of_adapter(adapter: &wgpu::Adapter, cooperative_matrix: bool) -> Self {
        let coop = cooperative_matrix && coop_f16_supported(adapter);
        let mut features = wanted_features(adapter.features());
        if coop {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let offered = coop_f16_supported(adapter);
        DeviceCaps {
            coop_f16_offered: Some(offered),
            adapter_features: Some(adapter.features()),
            ..DeviceCaps::from_parts(&adapter.get_info(), features, adapter.limits(), coop)
        }
    }

    /// Narrows [`DeviceCaps::coop_f16`] by the adapter's cooperative-matrix configurations.
    pub fn with_adapter(mut self, adapter: &wgpu::Adapter) -> Self {
        let offered = coop_f16_supported(adapter);
        self.coop_f16 = self.coop_f16 && offered;
        self.coop_f16_offered = Some(offered);
        self.adapter_features = Some(adapter.features());
        self
    }

    /// The limits a kernel config is checked against.
    pub fn kernel_limits(&self) -> KernelLimits {
        KernelLimits::from(&self.limits)
    }
    /// Whether the device has `SHADER_F16` enabled.
    pub fn shader_f16(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_F16)
    }
    /// Whether GPU timestamps can be taken.
    pub fn timestamps(&self) -> bool {
        self.features.contains(wgpu::Features::TIMESTAMP_QUERY)
    }
    /// Whether the device is a CPU implementation (lavapipe, WARP, SwiftShader).
    pub fn is_cpu(&self) -> bool {
        self.device_type == wgpu::DeviceType::Cpu
    }
    /// Why an f16 kernel cannot run here, if the device lacks `SHADER_F16`.
    pub(crate) fn shader_f16_missing(&self) -> Option<String> {
        if self.shader_f16() {
            return None;
        }
        let offered = self.adapter_features.map(|f| f.contains(wgpu::Features::SHADER_F16));
        Some(match offered {
            Some(false) => format!("needs the SHADER_F16 feature, which {} does not offer", self.name),
            Some(true) => format!(
                "needs the SHADER_F16 feature, which the device on {} was not created with although the \
                 adapter offers it: add wgpu::Features::SHADER_F16 to DeviceDescriptor::required_features \
                 (Gpu::new does)",
                self.name
            ),
            None => format!(
                "needs the SHADER_F16 feature, which the device on {} was not created with: if \
                 adapter.features() contains wgpu::Features::SHADER_F16, add it to \
                 DeviceDescriptor::required_features (Gpu::new does where the adapter offers it)",
                self.name
            ),
        })
    }
    /// Whether the device is NVIDIA's.
    pub fn is_nvidia(&self) -> bool {
        self.vendor == VENDOR_NVIDIA
    }
    /// The datasheet rates of the adapter, where its name is in [`DECLARED_RATES`].
    pub fn declared_rates(&self) -> Option<DeclaredRates> {
        declared_rates(&self.name)
    }
}

/// An adapter's datasheet rates: what selection weighs kernels with where no device work may
/// be done — the SIMT units against the matrix units, a grid's waves, whether partial sums
/// stay on chip.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct DeclaredRates {
    /// Dense fp32 FMA, TFLOP/s.
    pub fp32_tflops: f64,
    /// Dense f16 × f16 → f32 on the matrix units, TFLOP/s.
    pub f16_matrix_tflops: f64,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// Streaming multiprocessors (compute units): the workgroups of one wave are a multiple
    /// of them.
    pub multiprocessors: u32,
    /// Last-level (L2) cache, MiB: split-K's estimate counts partial sums past half of it as
    /// memory traffic (0: all of them).
    pub l2_mib: u32,
}

/// The datasheet rates of an adapter by its name: where one of the name's words (split at
/// anything not a letter or digit, any case) is a key of [`DECLARED_RATES`] — "NVIDIA
/// A100-SXM4-80GB" is an A100, "NVIDIA RTX A1000" is not.
pub fn declared_rates(adapter_name: &str) -> Option<DeclaredRates> {
    let name = adapter_name.to_lowercase();
    let words: Vec<&str> = name.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    DECLARED_RATES.iter().find(|(key, _)| words.contains(key)).map(|&(_, rates)| rates)
}

/// Datasheet rates by adapter name (a lower-case word of it; see [`declared_rates`]). The
/// ratio of the two rates decides where `Precision::F32` may run on the matrix units (three
/// f16 products per multiply-add): data-centre parts run f16 with f32 accumulation at 15–16×
/// their fp32 rate, GeForce parts at 2× (half rate with f32 accumulation), and adapters not
/// listed never do.
pub const DECLARED_RATES: &[(&str, DeclaredRates)] = &[
    (
        "h100",
        DeclaredRates {
            fp32_tflops: 67.0,
            f16_matrix_tflops: 989.4,
            bandwidth_gbs: 3350.0,
            multiprocessors: 132,
            l2_mib: 50,
        },
    ),
    (
        "h200",
        DeclaredRates {
            fp32_tflops: 67.0,
            f16_matrix_tflops: 989.4,
            bandwidth_gbs: 4800.0,
            multiprocessors: 132,
            l2_mib: 50,
        },
    ),
    (
        "gh200",
        DeclaredRates {
            fp32_tflops: 67.0,
            f16_matrix_tflops: 989.4,
            bandwidth_gbs: 4000.0,
            multiprocessors: 132,
            l2_mib: 50,
        },
    ),
    (
        "a100",
        DeclaredRates {
            fp32_tflops: 19.5,
            f16_matrix_tflops: 312.0,
            bandwidth_gbs: 2039.0,
            multiprocessors: 108,
            l2_mib: 40,
        },
    ),
    (
        "4090",
        DeclaredRates {
            fp32_tflops: 82.6,
            f16_matrix_tflops: 165.2,
            bandwidth_gbs: 1008.0,
            multiprocessors: 128,
            l2_mib: 72,
        },
    ),
];

/// The adapter's name, or where it has none (browsers leave WebGPU's adapter description
/// empty unless asked for it, to limit fingerprinting) a name from what is known: backend,
/// device type and driver, so that reports, refusals and cache keys never say "".
fn adapter_name(info: &wgpu::AdapterInfo) -> String {
    if !info.name.trim().is_empty() {
        return info.name.clone();
    }
    let backend = match info.backend {
        wgpu::Backend::BrowserWebGpu => "WebGPU".to_string(),
        b => format!("{b:?}"),
    };
    let kind = match info.device_type {
        wgpu::DeviceType::Cpu => "CPU (software) adapter",
        wgpu::DeviceType::DiscreteGpu => "discrete GPU",
        wgpu::DeviceType::IntegratedGpu => "integrated GPU",
        wgpu::DeviceType::VirtualGpu => "virtual GPU",
        wgpu::DeviceType::Other => "adapter",
    };
    let driver = format!("{} {}", info.driver, info.driver_info).trim().to_string();
    match driver.is_empty() {
        true => format!("unnamed {backend} {kind}"),
        false => format!("unnamed {backend} {kind} ({driver})"),
    }
}

/// Whether an adapter offers what the cooperative-matrix kernels need: the experimental
/// feature, an f16×f16→f32 16×16×16 configuration, and subgroups of exactly 32 (the kernels
/// derive warps from the invocation index).
pub(crate) fn coop_f16_supported(adapter: &wgpu::Adapter) -> bool {
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
pub(crate) fn wanted_features(adapter: wgpu::Features) -> wgpu::Features {
    let wanted = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    adapter & wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_adapters_get_a_name() {
        let mut info = wgpu::AdapterInfo {
            name: String::new(),
            vendor: 0,
            device: 0,
            device_type: wgpu::DeviceType::Cpu,
            device_pci_bus_id: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            backend: wgpu::Backend::BrowserWebGpu,
            subgroup_min_size: 4,
            subgroup_max_size: 128,
            transient_saves_memory: None,
            limit_bucket: None,
        };
        assert_eq!(adapter_name(&info), "unnamed WebGPU CPU (software) adapter");
        info.device_type = wgpu::DeviceType::Other;
        info.driver = "Dawn".into();
        assert_eq!(adapter_name(&info), "unnamed WebGPU adapter (Dawn)");
        info.name = "SwiftShader Device (Subzero)".into();
        assert_eq!(adapter_name(&info), "SwiftShader Device (Subzero)");
    }
}
