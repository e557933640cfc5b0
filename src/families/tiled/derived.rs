//! The tiled kernel run on a problem derived from the convolution, between a family's own
//! passes: Winograd's 16 GEMMs on transformed inputs, split-K's slices of input channels.
//! The family composes the tiled kernel for the derived problem and gives the parameters it
//! reads; the passes around it are the family's.

use crate::error::Result;
use crate::kernel::{ConvParams, Finishing, Shaped, Staging};

/// How a family derives the tiled kernel's parameters from the convolution's, per chunk.
pub(crate) type DeriveParams = Box<dyn Fn(&ConvParams) -> ConvParams + Send + Sync>;

/// The tiled kernel composed for a derived problem, with the family's staging and finishing
/// passes around it.
pub(crate) struct DerivedRun {
    /// The tiled kernel composed for the derived problem.
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
