//! The direct kernel: one output per invocation, weights as given (`direct`: f32 operands;
//! `direct-f16`: operands rounded to f16, f32 accumulation). The GPU-side oracle of the
//! tiled kernels, the fallback where no tile config fits a device, and selection's kernel
//! for depthwise convolutions too wide for the depthwise family (see `select::depthwise_rule`).

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::tiled::round_to_f16;
use crate::kernel::{
    compose, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, Shaped, SimtOperands, Target,
};
use crate::spec::{Conv2dSpec, ConvProblem};

/// Invocations per workgroup (`DIRECT_WG` in the shader).
pub(crate) const WORKGROUP: u32 = 64;
const DIRECT_WGSL: &str = include_str!("direct.wgsl");

/// The family, with f32 or f16-rounded operands.
#[derive(Debug)]
pub(crate) struct Direct {
    /// f32 operands, or rounded to f16 (`direct-f16`).
    operands: SimtOperands,
}
/// `direct`.
pub(crate) static DIRECT: Direct = Direct { operands: SimtOperands { f16: false } };
/// `direct-f16`.
pub(crate) static DIRECT_F16: Direct = Direct { operands: SimtOperands { f16: true } };

impl Family for Direct {
    fn name(&self) -> &'static str {
        self.operands.name("direct", "direct-f16")
    }
    fn precision(&self) -> Precision {
        self.operands.precision()
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        self.operands.unavailable(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        if config.is_empty() {
            Ok(self.reference())
        } else {
            Err(Error::ConfigParse(format!("the {} kernel has no config, got {config:?}", self.name())))
        }
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(DirectKernel { family: self })
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        vec![self.reference()]
    }
    fn targets(&self) -> &'static [Target] {
        self.operands.targets()
    }
    fn padding_modes(&self) -> bool {
        // Each output reads its taps through the mode's index map.
        true
    }
    fn benchmarked(&self) -> bool {
        false
    }
}

/// The direct kernel's config: only its family.
#[derive(Debug)]
pub(crate) struct DirectKernel {
    family: &'static Direct,
}

impl KernelConfig for DirectKernel {
    fn family(&self) -> &'static dyn Family {
        self.family
    }
    fn name(&self) -> String {
        String::new()
    }
    fn check_shape(&self) -> Result<()> {
        Ok(())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        if WORKGROUP > limits.invocations_per_workgroup.min(limits.workgroup_size_x) {
            return Err(Error::KernelRefused {
                kernel: self.family.name().into(),
                reason: format!(
                    "{WORKGROUP} invocations exceed the device's {} per workgroup ({})",
                    limits.invocations_per_workgroup.min(limits.workgroup_size_x),
                    limits.invocations_limit_name()
                ),
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
        if !self.family.operands.f16 {
            return Packed::f32_weights(weight);
        }
        let mut weight = alloc::copy_of(weight, "the f16-rounded weights")?;
        round_to_f16(&mut weight, "weight")?;
        Packed::f32_weights(&weight)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[]
    }
    fn shape(&self, _problem: &ConvProblem, _limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        Ok(Box::new(DirectShaped(self.family.precision())))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        Ok(vec![DirectShaped(self.family.precision()).source()?])
    }
    fn invocations(&self) -> u32 {
        WORKGROUP
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(0)
    }
}

/// The direct kernel at a precision (its source does not depend on the problem).
struct DirectShaped(Precision);

impl Shaped for DirectShaped {
    fn source(&self) -> Result<String> {
        compose("direct", &[("direct", DIRECT_WGSL)], Vec::new(), self.0, false)
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        Ok((Vec::new(), (p.batch as u64 * p.c_out as u64 * p.oh as u64 * p.ow as u64).div_ceil(WORKGROUP as u64)))
    }
}
