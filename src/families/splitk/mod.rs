//! The split-K family (`splitk`): f32 convolutions whose output grid is too small to fill the
//! device (deep layers at small batch: ResNet-50's last stage at batch 1 makes 16 workgroup
//! tiles of 32×32 on a GPU of 132 multiprocessors). The GEMM's K (input channels × taps) is
//! cut into S slices of whole input channels: the tiled kernel (`crate::families::tiled`, the
//! config's tile) runs them as one convolution of S groups, group s reading input channels
//! s·C/S … (s+1)·C/S − 1 and writing its own partial sums of all K outputs (S× the tiles,
//! each 1/S of the work), and a finishing pass (`reduce.wgsl`) sums each output's S partial
//! sums in a fixed order, then adds the bias and the activation: deterministic, no atomics.
//!
//! Configs are a tile config and the slices: `splitk:m32n32k32-t4x4-w2-s2-k8`. The family
//! runs ungrouped convolutions whose input channels are a multiple of the slices.

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::tiled::{self, pass_workgroup_refusal, DerivedRun, TileConfig};
use crate::kernel::{
    compose, ConvParams, Family, Finishing, Kernel, KernelConfig, Packed, Precision, Shaped, Target, ALL_TARGETS,
    FLAG_RELU,
};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};

const REDUCE_WGSL: &str = include_str!("reduce.wgsl");

/// Invocations per workgroup of the reduction.
const REDUCE_WG: u32 = 256;

/// The most slices a config may cut K into.
pub(crate) const MAX_SLICES: u32 = 64;

/// The family.
#[derive(Debug)]
pub(crate) struct SplitK;

/// `splitk`: f32.
pub(crate) static SPLITK: SplitK = SplitK;

/// A split-K config: the GEMM's tile and the slices of K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SplitConfig {
    /// The tiled kernel's tile.
    pub tile: TileConfig,
    /// Slices of whole input channels K is cut into (2 to 64).
    pub slices: u32,
}

impl SplitConfig {
    /// The family's reference config: the 32×32 tile, 4 slices.
    pub const REFERENCE: SplitConfig =
        SplitConfig { tile: TileConfig::with_thread_tile(32, 32, 32, 4, 4, 2), slices: 4 };

    /// The config's name, e.g. `m32n32k32-t4x4-w2-s2-k8`.
    pub fn name(&self) -> String {
        format!("{}-k{}", self.tile.name(), self.slices)
    }

    /// Parses a name of [`SplitConfig::name`]'s form.
    pub fn parse(s: &str) -> Result<SplitConfig> {
        let cfg = SplitConfig::parse_slices(s)?;
        cfg.check_shape()?;
        Ok(cfg)
    }

    /// Parses the name and checks the slices, not the tile (whose checks are those of the
    /// kernel that runs the slices: the tiled kernel's, or the channels-last one's for
    /// `coop-splitk-f16`).
    pub(crate) fn parse_slices(s: &str) -> Result<SplitConfig> {
        let bad = || {
            Error::ConfigParse(format!(
                "split-K config {s:?}: expected <tile config>-k<slices>, e.g. m32n32k32-t4x4-w2-s2-k8"
            ))
        };
        let (tile, slices) = s.rsplit_once("-k").ok_or_else(bad)?;
        let cfg = SplitConfig { tile: TileConfig::parse(tile)?, slices: slices.parse().map_err(|_| bad())? };
        cfg.check_slices()?;
        Ok(cfg)
    }

    /// Device-independent checks.
    pub fn check_shape(&self) -> Result<()> {
        self.tile.check_shape()?;
        self.check_slices()
    }

    /// The slices are in range.
    fn check_slices(&self) -> Result<()> {
        if !(2..=MAX_SLICES).contains(&self.slices) {
            return Err(Error::KernelRefused {
                kernel: self.name(),
                reason: format!("{} slices of K: from 2 to {MAX_SLICES}", self.slices),
            });
        }
        Ok(())
    }
}

/// The configs the benchmark and the tuner try, the reference first: the f32 shape rule's
/// 32×32, 64×32 and 64×96 tiles, each cut into 2, 4, 8 and 16 slices.
pub fn split_sweep() -> Vec<SplitConfig> {
    let tiles = [
        TileConfig::with_thread_tile(32, 32, 32, 4, 4, 2),
        TileConfig::with_thread_tile(64, 32, 16, 4, 4, 1),
        TileConfig::with_thread_tile(64, 96, 16, 4, 12, 1),
    ];
    let mut sweep = vec![SplitConfig::REFERENCE];
    for tile in tiles {
        for slices in [2, 4, 8, 16] {
            let cfg = SplitConfig { tile, slices };
            if cfg != SplitConfig::REFERENCE {
                sweep.push(cfg);
            }
        }
    }
    sweep
}

impl Family for SplitK {
    fn name(&self) -> &'static str {
        "splitk"
    }
    fn precision(&self) -> Precision {
        Precision::F32
    }
    fn unavailable(&self, _caps: &DeviceCaps) -> Option<String> {
        None
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(self.with(SplitConfig::parse(config)?))
    }
    fn reference(&'static self) -> Kernel {
        self.with(SplitConfig::REFERENCE)
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        split_sweep().into_iter().map(|cfg| self.with(cfg)).collect()
    }
    fn targets(&self) -> &'static [Target] {
        ALL_TARGETS
    }
    fn padding_modes(&self) -> bool {
        // Its slices run on the tiled kernel, whose gather reads the border.
        true
    }
}

impl SplitK {
    /// This family's kernel of a config.
    pub(crate) fn with(&'static self, cfg: SplitConfig) -> Kernel {
        Kernel::new(SplitKernel { cfg })
    }
}

/// A kernel of the split-K family.
#[derive(Debug)]
pub(crate) struct SplitKernel {
    cfg: SplitConfig,
}

/// The grouped convolution of a spec's slices: S groups over the input channels, each
/// writing all of the spec's output channels (S·K in all), no bias.
pub(crate) fn sliced_spec(spec: &Conv2dSpec, slices: u32) -> Conv2dSpec {
    // Saturating: asked of specs not yet validated (whose channel counts may be anything).
    Conv2dSpec { out_channels: spec.out_channels.saturating_mul(slices), groups: slices, bias: false, ..*spec }
}

/// The sliced problem: the same input, S·K output channels.
pub(crate) fn sliced_problem(problem: &ConvProblem, slices: u32) -> Result<ConvProblem> {
    sliced_spec(&problem.spec, slices).problem(problem.input)
}

/// The weights of [`sliced_spec`]: group s's output k over its input channel c' is weight
/// `[k][s·C/S + c'][kh][kw]` of `[K, C, KH, KW]`.
pub(crate) fn slice_weights(spec: &Conv2dSpec, weight: &[f32], slices: u32) -> Result<Vec<f32>> {
    let (k_out, c) = (spec.out_channels as usize, spec.in_channels as usize);
    let (s, taps) = (slices as usize, (spec.kernel[0] * spec.kernel[1]) as usize);
    let cs = c / s;
    let mut out = alloc::zeroed_vec::<f32>(weight.len(), "the sliced weights")?;
    for g in 0..s {
        for k in 0..k_out {
            let src = &weight[(k * c + g * cs) * taps..][..cs * taps];
            out[((g * k_out + k) * cs) * taps..][..cs * taps].copy_from_slice(src);
        }
    }
    Ok(out)
}

impl SplitKernel {
    /// The tiled kernel that runs the slices.
    fn gemm(&self) -> Kernel {
        tiled::TILED.with_tile_config(self.cfg.tile)
    }

    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: self.cfg.name(), reason }
    }

    /// The reduction's WGSL for a problem.
    fn reduce_source(&self, problem: &ConvProblem) -> Result<String> {
        let header = format!(
            "// generated from the convolution's geometry\n\
             const WG: u32 = {REDUCE_WG}u;\nconst S: u32 = {s}u;\nconst K: u32 = {k}u;\nconst PLANE: u32 = {plane}u;\n",
            s = self.cfg.slices,
            k = problem.output.c,
            plane = problem.output.h * problem.output.w,
        );
        compose("reduce", &[("reduce", REDUCE_WGSL)], vec![("config", header)], Precision::F32, false)
    }
}

impl KernelConfig for SplitKernel {
    fn family(&self) -> &'static dyn Family {
        &SPLITK
    }
    fn name(&self) -> String {
        self.cfg.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.cfg.check_shape()
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.cfg.check_shape()?;
        self.gemm().config().check_limits(limits)?;
        match pass_workgroup_refusal(limits, REDUCE_WG, "the reduction's") {
            Some(reason) => Err(self.refuse(reason)),
            None => Ok(()),
        }
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        let s = self.cfg.slices;
        if spec.groups != 1 || !spec.in_channels.is_multiple_of(s) {
            return Err(self.refuse(format!(
                "split-K cuts the input channels of ungrouped convolutions into {s} equal slices: not {} input \
                 channels in {} group(s)",
                spec.in_channels, spec.groups
            )));
        }
        self.gemm().config().check_spec(&sliced_spec(spec, s), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        self.gemm().config().packed_bytes(&sliced_spec(spec, self.cfg.slices))
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        let sliced = sliced_spec(spec, self.cfg.slices);
        let w = slice_weights(spec, weight, self.cfg.slices)?;
        let zeros = alloc::zeroed_vec::<f32>(sliced.out_channels as usize, "the slices' zero bias")?;
        let mut packed = self.gemm().config().pack(&sliced, &w, &zeros)?;
        // The tiled kernel adds the first S·K (zeros); the reduction reads the rest.
        let mut b = zeros;
        b.extend_from_slice(bias);
        packed.bias = Some(alloc::bytes_of(&b, "the bias")?);
        Ok(packed)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        self.gemm().config().extra_bindings()
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let sliced = sliced_problem(problem, self.cfg.slices)?;
        let gemm = self.gemm().config().shape(&sliced, limits)?;
        let outputs = problem.output.per_image();
        let slices = self.cfg.slices;
        Ok(Box::new(DerivedRun {
            gemm,
            params: Box::new(move |p| slice_params(p, slices)),
            staging: None,
            finishing: Some(Finishing {
                source: self.reduce_source(problem)?,
                bytes_per_image: 4 * slices as u64 * outputs,
                invocations_per_image: outputs,
                workgroup_size: REDUCE_WG,
                direct_fallback: false,
            }),
        }))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let spec = Conv2dSpec::new(16, 24, 3).padding(crate::spec::Padding::uniform(1));
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let problem = spec.problem(Shape4::new(2, 16, 7, 7))?;
        let shaped =
            SplitKernel { cfg: SplitConfig { slices: 4, ..SplitConfig::REFERENCE } }.shape(&problem, &limits)?;
        let mut sources = vec![shaped.source()?];
        sources.extend(shaped.finishing().map(|f| f.source.clone()));
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.gemm().invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        self.gemm().workgroup_bytes()
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.cfg.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(SPLITK.with(SplitConfig { tile, ..self.cfg }))
    }
}

/// The GEMM kernel's parameters for the slices: S groups of C/S input channels each writing
/// every output (to the reduction's scratch, from its start), no activation (the reduction
/// applies it).
pub(crate) fn slice_params(p: &ConvParams, s: u32) -> ConvParams {
    ConvParams {
        c_out: p.c_out * s,
        c_in_per_group: p.c_in / s,
        c_out_per_group: p.c_out,
        groups: s,
        k_total: p.k_total / s,
        out_offset: 0,
        flags: p.flags & !FLAG_RELU,
        ..*p
    }
}

/// The CPU twin: each slice's partial sums in f64 (the reference's order within a slice),
/// rounded to f32 as the kernel stores them, summed in slice order in f32 as `reduce.wgsl`
/// sums them, plus the bias.
#[cfg(test)]
pub(crate) fn splitk_twin(
    problem: &ConvProblem,
    slices: u32,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let sliced = sliced_problem(problem, slices).unwrap();
    let w = slice_weights(&problem.spec, weight, slices).unwrap();
    let partials = crate::reference::conv2d(&sliced, input, &w, None).unwrap();
    let (k, plane) = (problem.output.c as usize, (problem.output.h * problem.output.w) as usize);
    let s = slices as usize;
    let mut out = vec![0.0f32; problem.output.len() as usize];
    for img in 0..problem.output.n as usize {
        for within in 0..k * plane {
            let mut acc = 0.0f32;
            for slice in 0..s {
                acc += partials[(img * s + slice) * k * plane + within];
            }
            out[img * k * plane + within] = acc + bias.map_or(0.0, |b| b[within / plane]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Padding;

    /// The twin against the reference: 3×3 with padding and bias, 1×1 strided, odd sizes.
    #[test]
    fn twin_matches_reference() {
        let cases = [
            ("same", Conv2dSpec::new(8, 7, 3).padding(Padding::uniform(1)).with_bias(true), 4, [2, 9, 11]),
            ("pointwise_s2", Conv2dSpec::new(12, 5, 1).stride(2), 3, [1, 7, 6]),
            ("dilated", Conv2dSpec::new(6, 4, 3).dilation(2).padding(Padding::new(2, 1, 0, 2)), 2, [2, 8, 9]),
        ];
        for (name, spec, slices, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            crate::reference::check_twin(name, &problem, |x, w, b| splitk_twin(&problem, slices, x, w, b));
        }
    }

    /// Names round-trip; slices out of range and channels that do not divide are refused by
    /// name.
    #[test]
    fn names_and_refusals() {
        for cfg in split_sweep() {
            assert_eq!(SplitConfig::parse(&cfg.name()).unwrap(), cfg);
        }
        assert!(SplitConfig::parse("m32n32k32-t4x4-w2-s2-k1").is_err());
        assert!(SplitConfig::parse("m32n32k32-t4x4-w2-s2").is_err());
        let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
        let e = SPLITK.reference().config().check_spec(&Conv2dSpec::new(6, 8, 3), &limits).unwrap_err();
        assert!(e.to_string().contains("4 equal slices") && e.to_string().contains("6 input"), "{e}");
        let grouped = Conv2dSpec::new(8, 8, 3).groups(2);
        assert!(SPLITK.reference().config().check_spec(&grouped, &limits).is_err());
    }
}
