//! An adapter's capabilities named as an NVIDIA H100 through Vulkan, with what its driver
//! offers (f16, subgroups of 32, f16 cooperative matrices): the selection then takes the
//! rules that weigh the declared rates, with this adapter's limits. Shared by the tests
//! (`common`) and the selection benchmark (`benches/select.rs`, by path).

use wgconv::wgpu;
use wgconv::DeviceCaps;

/// `caps` named as an H100 through Vulkan.
pub fn as_h100(caps: &DeviceCaps) -> DeviceCaps {
    let mut h100 = caps.clone();
    h100.name = "NVIDIA H100 80GB HBM3".into();
    h100.vendor = 0x10de; // NVIDIA
    h100.device_type = wgpu::DeviceType::DiscreteGpu;
    h100.backend = wgpu::Backend::Vulkan;
    h100.features |= wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    h100.subgroup_size = (32, 32);
    h100.coop_f16 = true;
    h100.coop_f16_offered = Some(true);
    h100
}
