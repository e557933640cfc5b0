//! The direct kernel: one output per invocation, weights as given. The GPU-side oracle of
//! the tiled kernels and the fallback where no tile config fits a device.

use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::kernel::{
    compose, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, Shaped, Target, ALL_TARGETS,
};
use crate::spec::{Conv2dSpec, ConvProblem};

/// Invocations per workgroup (`DIRECT_WG` in the shader).
pub(crate) const WORKGROUP: u32 = 64;
const DIRECT_WGSL: &str = include_str!("direct.wgsl");

/// The family.
pub(crate) struct Direct;
/// Its one instance in the registry.
pub(crate) static DIRECT: Direct = Direct;

impl Family for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn precision(&self) -> Precision {
        Precision::F32
    }
    fn unavailable(&self, _caps: &DeviceCaps) -> Option<String> {
        None
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        if config.is_empty() {
            Ok(self.reference())
        } else {
            Err(Error::Parse(format!("the direct kernel has no config, got {config:?}")))
        }
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(DirectKernel)
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        vec![self.reference()]
    }
    fn targets(&self) -> &'static [Target] {
        ALL_TARGETS
    }
}

/// The direct kernel's (empty) config.
#[derive(Debug)]
pub(crate) struct DirectKernel;

impl KernelConfig for DirectKernel {
    fn family(&self) -> &'static dyn Family {
        &DIRECT
    }
    fn name(&self) -> String {
        String::new()
    }
    fn check_shape(&self) -> Result<()> {
        Ok(())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        if WORKGROUP > limits.invocations_per_workgroup.min(limits.workgroup_size_x) {
            return Err(Error::ConfigRefused {
                config: "direct".into(),
                reason: format!("{WORKGROUP} invocations exceed the device's {}", limits.invocations_per_workgroup),
            });
        }
        Ok(())
    }
    fn check_spec(&self, _spec: &Conv2dSpec, _limits: &KernelLimits) -> Result<()> {
        Ok(())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        spec.weight_len() as u64 * 4
    }
    fn pack(&self, _spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        Ok(Packed { weight: bytemuck::cast_slice(weight).to_vec(), extra: Vec::new(), out_scale: 1.0 })
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[]
    }
    fn shape(&self, _problem: &ConvProblem, _limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        Ok(Box::new(DirectShaped))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        Ok(vec![DirectShaped.source()?])
    }
    fn invocations(&self) -> u32 {
        WORKGROUP
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(0)
    }
}

struct DirectShaped;

impl Shaped for DirectShaped {
    fn source(&self) -> Result<String> {
        compose("direct", &[("direct", DIRECT_WGSL)], Vec::new(), Precision::F32, false)
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        Ok((Vec::new(), (p.batch as u64 * p.c_out as u64 * p.oh as u64 * p.ow as u64).div_ceil(WORKGROUP as u64)))
    }
}
