//! A GEMM kernel (the tiled kernel, or the channels-last one on the matrix units) run on a
//! problem derived from the convolution, between a family's own passes: Winograd's 16 GEMMs
//! on transformed inputs, split-K's slices of input channels. The family composes the
//! kernel for the derived problem and gives the parameters it reads; the passes around it
//! are the family's.

use crate::caps::KernelLimits;
use crate::error::Result;
use crate::kernel::{ConvParams, Finishing, Shaped, Staging, TensorForm};

/// How a family derives the GEMM kernel's parameters from the convolution's, per chunk.
pub(crate) type DeriveParams = Box<dyn Fn(&ConvParams) -> ConvParams + Send + Sync>;

/// The GEMM kernel composed for a derived problem, with the family's staging and finishing
/// passes around it.
pub(crate) struct DerivedRun {
    /// The GEMM kernel composed for the derived problem.
    pub gemm: Box<dyn Shaped>,
    /// Its parameters from the convolution's.
    pub params: DeriveParams,
    /// The pass before it, where the family has one (its output is the kernel's input).
    pub staging: Option<Staging>,
    /// The pass after it, where the family has one (it reads the kernel's output).
    pub finishing: Option<Finishing>,
}

impl Shaped for DerivedRun {
    fn source(&self) -> Result<String> {
        self.gemm.source()
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        self.gemm.tables()
    }
    fn grid(&self, params: &ConvParams) -> Result<(Vec<u8>, u64)> {
        self.gemm.grid(params)
    }
    fn staging(&self) -> Option<&Staging> {
        self.staging.as_ref()
    }
    fn finishing(&self) -> Option<&Finishing> {
        self.finishing.as_ref()
    }
    fn kernel_params(&self, p: &ConvParams) -> ConvParams {
        (self.params)(p)
    }
}

/// Why a family's own pass of `workgroup_size` invocations per workgroup (`pass`: "the
/// reduction's", "the transforms'") cannot run on a device with these limits, or `None`.
pub(crate) fn pass_workgroup_refusal(limits: &KernelLimits, workgroup_size: u32, pass: &str) -> Option<String> {
    let most = limits.invocations_per_workgroup.min(limits.workgroup_size_x);
    (workgroup_size > most).then(|| {
        format!(
            "{pass} {workgroup_size} invocations per workgroup exceed the device's {most} ({})",
            limits.invocations_limit_name()
        )
    })
}

/// The sources a family composes over every tensor form (what the naga check validates):
/// the GEMM kernel's once (NCHW f32) and each form's staging and finishing passes, from
/// `shape` of a form.
pub(crate) fn sources_in_every_form(shape: impl Fn(TensorForm) -> Result<Box<dyn Shaped>>) -> Result<Vec<String>> {
    let mut sources = Vec::new();
    for channels_last in [false, true] {
        for f16 in [false, true] {
            let shaped = shape(TensorForm { channels_last, f16 })?;
            if !channels_last && !f16 {
                sources.push(shaped.source()?);
            }
            sources.extend(shaped.staging().map(|s| s.source.clone()));
            sources.extend(shaped.finishing().map(|f| f.source.clone()));
        }
    }
    Ok(sources)
}
