//! Split-K on the matrix units (`coop-splitk-f16`): f16 convolutions whose output grid is
//! too small to fill the device (deep layers, small batches: at batch 1 ResNet-50's 3×3
//! layers make 8–49 workgroup tiles of 64×64 on a GPU of 132 multiprocessors, each
//! walking all of K). As the f32 split-K family (`crate::families::splitk`), K is cut into
//! S slices of whole input channels: the channels-last f16 kernel (`crate::families::nhwc`,
//! the config's tile; its staging pass reads the caller's tensor in any form, and an f16
//! channels-last one of whole vectors of channels per slice, unpadded or zero-padded around
//! windows of at most 31 taps, it reads in place) runs them as
//! one convolution of S groups, group s reading input channels s·C/S … (s+1)·C/S − 1 and
//! writing f32 partial sums of all K outputs (S× the tiles, each 1/S of the work), and a
//! finishing pass (`reduce.wgsl`) sums each output's S partial sums in a fixed order, adds
//! the bias and the activation and writes the caller's tensor (NCHW or channels last, f32
//! or f16): deterministic, no atomics. The operands are the f16 kernel's (rounded to f16,
//! range-checked and flagged), the sums f32: the f16 precision's accuracy.
//!
//! Configs are the split-K family's ([`SplitConfig`]) with a channels-last tile config:
//! `m64n64k64-t4x8-w4-s1-k4`. The
//! family runs ungrouped convolutions whose input channels are a multiple of 8·S (whole
//! vectors of 8 per slice) and whose output channels are a multiple of 4 (the reduction
//! reads and writes quads).

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::coop::coop_missing;
use crate::families::nhwc;
use crate::families::splitk::{slice_params, slice_weights, sliced_problem, sliced_spec, SplitConfig};
use crate::families::tiled::{pass_workgroup_refusal, sources_in_every_form, DerivedRun, TileConfig};
use crate::kernel::{
    compose_operands, Family, Finishing, Kernel, KernelConfig, Operands, Packed, Precision, Shaped, Target, TensorForm,
    COOPERATIVE_TARGETS,
};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};

const REDUCE_WGSL: &str = include_str!("reduce.wgsl");

/// Invocations per workgroup of the reduction.
const REDUCE_WG: u32 = 256;
/// Channels per staged vector: each slice holds whole vectors.
const VEC: u32 = 8;
/// Output channels per invocation of the reduction.
const QUAD: u32 = 4;

/// The family.
#[derive(Debug)]
pub(crate) struct CoopSplitK;

/// `coop-splitk-f16`.
pub(crate) static COOP_SPLITK_F16: CoopSplitK = CoopSplitK;

/// The family's reference config: the channels-last kernel's 64×64 block in 4 slices.
pub const COOP_SPLIT_REFERENCE: SplitConfig =
    SplitConfig { tile: TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1), slices: 4 };

/// The configs the benchmark and the tuner try, the reference first: the channels-last
/// kernel's 64×64 block (K steps of 64, 4 warps) in 2, 4, 8 and 16 slices and its 128×128
/// block (K steps of 32, 4 warps) in 2, 4 and 8.
pub fn coop_split_sweep() -> Vec<SplitConfig> {
    let small = TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1);
    let large = TileConfig::with_thread_tile(128, 128, 32, 16, 8, 1);
    let mut sweep = vec![COOP_SPLIT_REFERENCE];
    for (tile, slices) in [(small, 2), (small, 8), (small, 16), (large, 2), (large, 4), (large, 8)] {
        sweep.push(SplitConfig { tile, slices });
    }
    sweep
}

impl Family for CoopSplitK {
    fn name(&self) -> &'static str {
        "coop-splitk-f16"
    }
    fn precision(&self) -> Precision {
        Precision::F16Accum32
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(self.with(SplitConfig::parse_slices(config)?))
    }
    fn reference(&'static self) -> Kernel {
        self.with(COOP_SPLIT_REFERENCE)
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        coop_split_sweep().into_iter().map(|cfg| self.with(cfg)).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
}

impl CoopSplitK {
    /// This family's kernel of a config.
    pub(crate) fn with(&'static self, cfg: SplitConfig) -> Kernel {
        Kernel::new(CoopSplitKernel { cfg })
    }
}

/// A kernel of the family.
#[derive(Debug)]
pub(crate) struct CoopSplitKernel {
    cfg: SplitConfig,
}

impl CoopSplitKernel {
    /// The channels-last f16 kernel that runs the slices.
    fn gemm(&self) -> Result<Kernel> {
        nhwc::COOP_NHWC_F16.parse(&self.cfg.tile.name())
    }

    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: format!("{}:{}", COOP_SPLITK_F16.name(), self.cfg.name()), reason }
    }

    /// The reduction's WGSL, writing the caller's tensor in `form`.
    fn reduce_source(&self, problem: &ConvProblem, form: TensorForm) -> Result<String> {
        let config = format!(
            "const WG: u32 = {REDUCE_WG}u;\nconst S: u32 = {s}u;\nconst KQ: u32 = {kq}u;\nconst PLANE: u32 = {plane}u;\n",
            s = self.cfg.slices,
            kq = problem.output.c / QUAD,
            plane = problem.output.h * problem.output.w,
        );
        let layout = nhwc::layout_config(form.channels_last);
        compose_operands(
            "reduce",
            &[("reduce", REDUCE_WGSL)],
            vec![("reduce_config", config), layout],
            Operands::F32,
            false,
            nhwc::tensor_defines(form),
        )
    }

    /// The slices and the reduction for the caller's tensors in `form`.
    fn shaped(&self, problem: &ConvProblem, limits: &KernelLimits, form: TensorForm) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let sliced = sliced_problem(problem, self.cfg.slices)?;
        let gemm = nhwc::f16_gemm(self.cfg.tile, &sliced, form, false)?;
        let staging = gemm.staging().cloned();
        let outputs = problem.output.per_image();
        let slices = self.cfg.slices;
        Ok(Box::new(DerivedRun {
            gemm,
            params: Box::new(move |p| slice_params(p, slices)),
            staging,
            finishing: Some(Finishing {
                source: self.reduce_source(problem, form)?,
                bytes_per_image: 4 * slices as u64 * outputs,
                invocations_per_image: outputs / QUAD as u64,
                workgroup_size: REDUCE_WG,
                direct_fallback: false,
            }),
        }))
    }
}

impl KernelConfig for CoopSplitKernel {
    fn family(&self) -> &'static dyn Family {
        &COOP_SPLITK_F16
    }
    fn name(&self) -> String {
        self.cfg.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.gemm()?.config().check_shape()
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.gemm()?.config().check_limits(limits)?;
        match pass_workgroup_refusal(limits, REDUCE_WG, "the reduction's") {
            Some(reason) => Err(self.refuse(reason)),
            None => Ok(()),
        }
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        let s = self.cfg.slices;
        if spec.groups != 1 || !spec.in_channels.is_multiple_of(VEC * s) || !spec.out_channels.is_multiple_of(QUAD) {
            return Err(self.refuse(format!(
                "split-K on the matrix units cuts the input channels of ungrouped convolutions into {s} slices of \
                 whole vectors of {VEC}, over output channels in whole quads: not {} input and {} output \
                 channels in {} group(s)",
                spec.in_channels, spec.out_channels, spec.groups
            )));
        }
        self.gemm()?.config().check_spec(&sliced_spec(spec, s), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        self.gemm().map_or(u64::MAX, |g| g.config().packed_bytes(&sliced_spec(spec, self.cfg.slices)))
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        let sliced = sliced_spec(spec, self.cfg.slices);
        let w = slice_weights(spec, weight, self.cfg.slices)?;
        let zeros = alloc::zeroed_vec::<f32>(sliced.out_channels as usize, "the slices' zero bias")?;
        let mut packed = self.gemm()?.config().pack(&sliced, &w, &zeros)?;
        // The kernel adds the first S·K (zeros); the reduction reads the rest.
        let mut b = zeros;
        b.extend_from_slice(bias);
        packed.bias = Some(alloc::bytes_of(&b, "the bias")?);
        Ok(packed)
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
        // Every form: the staging pass reads either layout and element type, the reduction
        // writes either.
        Some(self.shaped(problem, limits, form))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let spec = Conv2dSpec::new(16 * self.cfg.slices, 24, 3).padding(crate::spec::Padding::uniform(1));
        let limits = KernelLimits::with_workgroup_bytes(49152);
        let problem = spec.problem(Shape4::new(2, spec.in_channels, 7, 8))?;
        let mut sources = sources_in_every_form(|form| self.shaped(&problem, &limits, form))?;
        // An unpadded 1×1 layer on f16 channels-last tensors: the kernel reads them in place
        // (no staging pass) and writes f32 partial sums.
        let pointwise = Conv2dSpec::new(spec.in_channels, 24, 1).problem(Shape4::new(2, spec.in_channels, 7, 8))?;
        let in_place = self.shaped(&pointwise, &limits, TensorForm { channels_last: true, f16: true })?;
        sources.push(in_place.source()?);
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.cfg.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        self.gemm().ok().and_then(|g| g.config().workgroup_bytes())
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.cfg.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(COOP_SPLITK_F16.with(SplitConfig { tile, ..self.cfg }))
    }
    fn operand_halves(&self) -> Option<u32> {
        Some(1)
    }
}

/// The CPU twin: each slice's partial sums of the f16-rounded operands in f64, rounded to
/// f32 as the kernel stores them, summed in slice order in f32 as `reduce.wgsl` sums them,
/// plus the bias.
#[cfg(test)]
fn coop_splitk_twin(
    problem: &ConvProblem,
    slices: u32,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let f16 = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect() };
    crate::families::splitk::splitk_twin(problem, slices, &f16(input), &f16(weight), bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Padding;

    /// The twin within the f16 precision's bound of the reference on random data.
    #[test]
    fn twin_within_f16_accuracy() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for (spec, slices, [n, h, w]) in [
            (Conv2dSpec::new(64, 24, 3).padding(Padding::uniform(1)).with_bias(true), 4, [2, 7, 9]),
            (Conv2dSpec::new(32, 8, 1).stride(2), 2, [1, 9, 8]),
        ] {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            let x: Vec<f32> = (0..problem.input.len()).map(|_| rng.random_range(-1.0..1.0)).collect();
            let wt: Vec<f32> = (0..spec.weight_len()).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..spec.out_channels).map(|_| rng.random_range(-1.0..1.0)).collect();
            let bias = spec.bias.then_some(b.as_slice());
            let got = coop_splitk_twin(&problem, slices, &x, &wt, bias);
            let want = crate::reference::conv2d(&problem, &x, &wt, bias).unwrap();
            let err = crate::reference::relative_l2(&got, &want);
            assert!(err < 1e-3, "{spec:?}: rel L2 {err}");
        }
    }

    /// Names round-trip; slices out of range and channels that do not divide are refused by
    /// name.
    #[test]
    fn names_and_refusals() {
        for cfg in coop_split_sweep() {
            assert_eq!(SplitConfig::parse_slices(&cfg.name()).unwrap(), cfg);
            COOP_SPLITK_F16.with(cfg).config().check_shape().unwrap();
        }
        assert!(SplitConfig::parse_slices("m64n64k64-t4x8-w4-s1-k1").is_err());
        assert!(SplitConfig::parse_slices("m64n64k64-t4x8-w4-s1").is_err());
        let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
        let k = COOP_SPLITK_F16.reference();
        for spec in [Conv2dSpec::new(48, 8, 3), Conv2dSpec::new(64, 6, 3), Conv2dSpec::new(64, 8, 3).groups(2)] {
            let e = k.config().check_spec(&spec, &limits).unwrap_err().to_string();
            assert!(e.contains("4 slices of whole vectors of 8"), "{e}");
        }
        k.config().check_spec(&Conv2dSpec::new(64, 8, 3), &limits).unwrap();
    }
}
