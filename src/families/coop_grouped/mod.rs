//! Grouped convolutions on the matrix units (`coop-grouped-f16`): groups that each take as
//! many input as output channels, 8 or 16 of them (ResNeXt-50's 3×3 layers of 32 groups at
//! 256 and 512 channels). The channels-last kernel runs such a layer one group per block of
//! 16 columns: a group of 8 pads half of each fragment, and a layer makes thousands of small
//! workgroups, each paying the kernel's prologue, its few K steps' load latency and its
//! epilogue for 8 or 16 channels (on the H100: 10–28 TFLOP/s, about a tenth of the
//! layer's bytes floor).
//!
//! This family takes `block_n` channels at a time, several groups: each K step is one tap
//! of the block's `block_k` = `block_n` input channels, the block's weights are
//! block-diagonal, and a warp multiplies its columns `16·j … 16·j + 15` only by A's
//! channels `16·j … 16·j + 15` against the diagonal 16×16 block `j` of B (zero outside its
//! groups: a group of 8 fills half of it, one of 16 all of it). The GEMM is the
//! channels-last kernel's (`crate::families::nhwc`, `DIAGONAL`), on the problem regrouped
//! into blocks of `block_n` channels, with weights packed per block and tap as their
//! diagonal blocks only ([`crate::families::nhwc::pack_diagonal`]); its staging pass, its
//! in-place read of f16 channels-last tensors and its epilogue are that kernel's. The
//! operands are rounded to f16, the sums f32: the f16 precision's accuracy.
//!
//! Configs are channels-last tile configs with `block_k` = `block_n`, e.g.
//! `m128n64k64-t8x8-w4-s1`.

use crate::caps::KernelLimits;
use crate::error::{Error, Result};
use crate::families::coop::{f16_bytes, TileFamily};
use crate::families::nhwc;
use crate::families::tiled::{DerivedRun, TileConfig};
use crate::kernel::{ConvParams, Family, Kernel, KernelConfig, Packed, Shaped, TensorForm};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};

/// The channel counts per group the family runs: whole vectors of 8 that tile a fragment's
/// 16 channels.
pub(crate) const GROUP_CHANNELS: [u32; 2] = [8, 16];

/// `coop-grouped-f16`.
pub(crate) static COOP_GROUPED_F16: TileFamily =
    TileFamily { name: "coop-grouped-f16", sweep: grouped_sweep, kernel: |tile| Kernel::new(GroupedKernel { tile }) };

/// The family's configs, the reference first: 64 rows × 64 channels on 4 warps of 2×2
/// fragments, in one buffer and in two; 32 × 64 on 2 warps of 2×2; 128 × 64 on 4 warps of
/// 4×2; 64 × 32 and 32 × 32 blocks for layers of fewer channels.
pub fn grouped_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        T::with_thread_tile(64, 64, 64, 4, 8, 1),
        T::with_thread_tile(64, 64, 64, 4, 8, 2),
        T::with_thread_tile(32, 64, 64, 4, 8, 1),
        T::with_thread_tile(128, 64, 64, 8, 8, 1),
        T::with_thread_tile(64, 32, 32, 4, 4, 1),
        T::with_thread_tile(32, 32, 32, 4, 4, 1),
    ]
}

/// A kernel of the family.
#[derive(Debug)]
pub(crate) struct GroupedKernel {
    tile: TileConfig,
}

/// The grouped problem as the GEMM runs it: groups of `block_n` channels.
fn blocked_spec(spec: &Conv2dSpec, block_n: u32) -> Conv2dSpec {
    spec.groups(spec.out_channels / block_n)
}

/// The GEMM's parameters: the convolution's, regrouped into blocks of `block_n` channels.
fn blocked_params(p: &ConvParams, block_n: u32) -> ConvParams {
    ConvParams {
        c_in_per_group: block_n,
        c_out_per_group: block_n,
        groups: p.c_out / block_n,
        k_total: p.kh * p.kw * block_n,
        ..*p
    }
}

impl GroupedKernel {
    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: format!("{}:{}", COOP_GROUPED_F16.name(), self.tile.name()), reason }
    }

    /// The channels-last kernel on the regrouped problem, for the checks it shares.
    fn gemm(&self) -> Kernel {
        Kernel::new(nhwc::NhwcKernel::f16(self.tile))
    }

    /// Workgroup memory: the channels-last kernel's, with 16 rows of B per K step.
    fn workgroup_bytes(&self) -> u64 {
        let t = &self.tile;
        let b_rows_saved = (t.block_k as u64).saturating_sub(16) * (t.block_n as u64 + 8) * 2 * t.stages as u64;
        t.nhwc_workgroup_bytes(1).saturating_sub(b_rows_saved)
    }

    fn shaped(&self, problem: &ConvProblem, limits: &KernelLimits, form: TensorForm) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let bn = self.tile.block_n;
        let blocked = ConvProblem { spec: blocked_spec(&problem.spec, bn), ..*problem };
        let gemm = nhwc::f16_diagonal_gemm(self.tile, &blocked, form)?;
        let staging = gemm.staging().cloned();
        Ok(Box::new(DerivedRun { gemm, params: Box::new(move |p| blocked_params(p, bn)), staging, finishing: None }))
    }
}

impl KernelConfig for GroupedKernel {
    fn family(&self) -> &'static dyn Family {
        &COOP_GROUPED_F16
    }
    fn name(&self) -> String {
        self.tile.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.gemm().config().check_shape()?;
        if self.tile.block_k != self.tile.block_n {
            return Err(self.refuse(format!(
                "each K step is one tap of the block's channels: block_k must equal block_n (got block_k {}, \
                 block_n {})",
                self.tile.block_k, self.tile.block_n
            )));
        }
        Ok(())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.check_shape()?;
        self.tile.check_device(limits, self.workgroup_bytes())
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        let (cin_g, cout_g, bn) = (spec.in_channels_per_group(), spec.out_channels_per_group(), self.tile.block_n);
        if spec.groups < 2 || cin_g != cout_g || !GROUP_CHANNELS.contains(&cin_g) {
            return Err(self.refuse(format!(
                "the family runs groups of as many input as output channels, {GROUP_CHANNELS:?} of them: not {} \
                 group(s) of {cin_g} input and {cout_g} output channels",
                spec.groups
            )));
        }
        if !spec.out_channels.is_multiple_of(bn) {
            return Err(
                self.refuse(format!("{} channels are not whole blocks of {bn} (block_n) channels", spec.out_channels))
            );
        }
        self.gemm().config().check_spec(&blocked_spec(spec, bn), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        // Per block of block_n channels and per tap, 16 rows of block_n f16.
        spec.out_channels as u64 * spec.kernel[0] as u64 * spec.kernel[1] as u64 * 16 * 2
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        let packed = nhwc::pack_diagonal(spec, weight, self.tile.block_n)?;
        Ok(Packed::weights(f16_bytes(packed)?))
    }
    fn extra_bindings(&self) -> &'static [u32] {
        nhwc::COOP_NHWC_F16.reference().config().extra_bindings()
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.shaped(problem, limits, TensorForm::NCHW_F32)
    }
    fn shape_native(
        &self,
        problem: &ConvProblem,
        limits: &KernelLimits,
        form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        // Every form: the staging pass reads either layout and element type, the epilogue
        // writes either.
        Some(self.shaped(problem, limits, form))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let limits = KernelLimits::with_workgroup_bytes(49152);
        let bn = self.tile.block_n;
        let mut sources = Vec::new();
        // Groups of 8 with padding (staged; in place with border masks on f16 channels-last
        // tensors), and of 16 unpadded at stride 2 (in place without masks).
        for spec in [
            Conv2dSpec::new(2 * bn, 2 * bn, 3).padding(1).groups(bn / 4),
            Conv2dSpec::new(2 * bn, 2 * bn, 3).stride(2).groups(bn / 8),
        ] {
            let problem = spec.problem(Shape4::new(2, 2 * bn, 7, 8))?;
            for channels_last in [false, true] {
                for f16 in [false, true] {
                    let shaped = self.shaped(&problem, &limits, TensorForm { channels_last, f16 })?;
                    sources.push(shaped.source()?);
                    sources.extend(shaped.staging().map(|s| s.source.clone()));
                }
            }
        }
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(GroupedKernel::workgroup_bytes(self))
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(Kernel::new(GroupedKernel { tile }))
    }
    fn operand_halves(&self) -> Option<u32> {
        Some(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diagonal GEMM computes the grouped convolution (its CPU twin,
    /// `nhwc::conv_diagonal`: the regrouped problem's K table and row origins, the weights of
    /// `pack_diagonal` at the kernel's offsets, each column block reading its own 16
    /// channels), staged and read in place: groups of 8 and 16, blocks of 16, 32 and 64
    /// channels, stride, dilation, asymmetric padding, 1×1 and 5×5 kernels, bias.
    #[test]
    fn twin_matches_reference() {
        let cases = [
            (Conv2dSpec::new(64, 64, 3).groups(8).padding(1).with_bias(true), Shape4::new(2, 64, 6, 7)),
            (Conv2dSpec::new(64, 64, 3).groups(4).stride(2).padding((1, 2)), Shape4::new(1, 64, 9, 8)),
            (Conv2dSpec::new(32, 32, 3).groups(4).dilation(2).padding([2, 1, 0, 1]), Shape4::new(1, 32, 8, 9)),
            (Conv2dSpec::new(128, 128, 1).groups(16), Shape4::new(1, 128, 4, 5)),
            (Conv2dSpec::new(96, 96, 5).groups(6).stride(2), Shape4::new(2, 96, 9, 11)),
        ];
        for (spec, shape) in cases {
            let problem = spec.problem(shape).unwrap();
            for bn in [16, 32, 64].into_iter().filter(|bn| spec.out_channels.is_multiple_of(*bn)) {
                let tile = TileConfig::with_thread_tile(64, bn, bn, 4, 4, 1);
                for in_place in [false, true] {
                    crate::reference::check_twin(
                        &format!("block_n {bn}, in place {in_place}, {spec:?}"),
                        &problem,
                        |x, w, b| nhwc::conv_diagonal(&problem, &tile, in_place, x, w, b),
                    );
                }
            }
        }
    }

    /// Names round-trip; configs whose K step is not the block's channels, and groups the
    /// family does not run, are refused by name.
    #[test]
    fn names_and_refusals() {
        for tile in grouped_sweep() {
            let k = COOP_GROUPED_F16.parse(&tile.name()).unwrap();
            k.config().check_shape().unwrap_or_else(|e| panic!("{}: {e}", tile.name()));
            let bytes = k.config().workgroup_bytes().unwrap();
            assert!(bytes <= 48 * 1024, "{}: {bytes} B", tile.name());
        }
        let e = COOP_GROUPED_F16.parse("m128n64k32-t8x8-w4-s1").unwrap().config().check_shape().unwrap_err();
        assert!(e.to_string().contains("block_k must equal block_n"), "{e}");
        let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
        let k = COOP_GROUPED_F16.reference();
        for spec in [
            Conv2dSpec::new(64, 64, 3),
            Conv2dSpec::new(64, 128, 3).groups(8),
            Conv2dSpec::new(128, 128, 3).groups(4),
            Conv2dSpec::new(64, 64, 3).groups(16),
        ] {
            let e = k.config().check_spec(&spec, &limits).unwrap_err().to_string();
            assert!(e.contains("as many input as output channels"), "{spec:?}: {e}");
        }
        let e = k.config().check_spec(&Conv2dSpec::new(96, 96, 3).groups(12), &limits).unwrap_err().to_string();
        assert!(e.contains("whole blocks of 64"), "{e}");
        k.config().check_spec(&Conv2dSpec::new(256, 256, 3).groups(32), &limits).unwrap();
    }
}
