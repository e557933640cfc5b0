//! Winograd's F(4×4, 3×3) and F(4×4, 5×5) with their GEMMs on the matrix units
//! (`coop-winograd-f32`): [`crate::Precision::F32`], the algorithms and refusals of
//! `winograd-f4` ([`winograd::WINOGRAD_F4`]), in three passes of one compute pass. The
//! input transform (`input.wgsl`, the staging pass, after the input-maximum pass of the f32
//! matrix path) writes `V = Bᵀ d B` scaled by the chunk's power-of-two input scale (with 2^8
//! of headroom: V's components reach 100× (n = 6) and 225× (n = 8) the largest input) and
//! split into two f16 halves, in the staged layout of `coop-nhwc-f32`'s GEMM; that kernel
//! ([`nhwc::f32_winograd_gemm`], the config's tile) multiplies them by the transformed
//! weights `U = G g Gᵀ`, split the same way at `Conv2d::new`, as a 1×1 convolution of n²
//! groups (hi·hi + hi·lo + lo·hi, f32 sums), undoes both scales and writes f32 products;
//! the output transform is `winograd-f4`'s (`winograd/output_transform.wgsl`: bias,
//! activation, and the direct fallback for tiles whose products are not finite).
//!
//! Why: on the H200 (Vulkan 580.159.04, 2026-11-28) the tiled kernel ran these GEMMs at
//! 19–35 TFLOP/s — 0.42–0.77 ms of VGG-16's and AlexNet's F(4×4, 3×3) and F(4×4, 5×5) layers'
//! 0.56–1.05 — and `coop-nhwc-f32` ran the same GEMMs (with its own staging pass) 1.1–1.3×
//! faster on 96–512 input channels, 0.6× as fast on 64.
//!
//! Accuracy: the split keeps 22 of f32's 24 bits per operand and drops the lo·lo product; a
//! numpy model of the passes puts the error within 5 % of `winograd-f4`'s (2.0e-6 against
//! 1.9e-6 at 64 channels, 4.5e-6 against 4.4e-6 at 512, F(4×4, 3×3)), so the same channel
//! caps hold ([`crate::families::winograd::Minimal::f32_channels`]).
//!
//! Range: the headroom costs 8 of the scale's bits against `coop-nhwc-f32`'s: inputs below
//! 2^-19 of the chunk's largest get f16-subnormal high halves (their error, relative to the
//! largest, stays that small).
//!
//! Special values: finite weights only (refused otherwise, as `winograd-f4`). An infinite or
//! NaN input is staged as it is, so its tiles' products are not finite and the output
//! transform computes those tiles directly, with f32's semantics.

use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::coop::coop_missing;
use crate::families::nhwc::{self, nhwc_sweep};
use crate::families::tiled::{pass_workgroup_refusal, DerivedRun, TileConfig};
use crate::families::winograd::{self, Minimal, WINOGRAD_F4};
use crate::kernel::{
    compose_operands, Family, Kernel, KernelConfig, Operands, Packed, Precision, Shaped, Staging, Target,
    COOPERATIVE_TARGETS, FINISHING_WEIGHT_BINDING, GRID_BINDING, INPUT_MAX_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};

const INPUT_WGSL: &str = include_str!("input.wgsl");

/// Invocations per workgroup of the transforms.
const TRANSFORM_WG: u32 = 256;
/// Channels per staged vector of the GEMM's input.
const VEC: u32 = 8;

/// The family.
#[derive(Debug)]
pub(crate) struct CoopWinogradF32;

/// `coop-winograd-f32`.
pub(crate) static COOP_WINOGRAD_F32: CoopWinogradF32 = CoopWinogradF32;

impl Family for CoopWinogradF32 {
    fn name(&self) -> &'static str {
        "coop-winograd-f32"
    }
    fn precision(&self) -> Precision {
        Precision::F32
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(CoopWinogradF32Kernel { tile: TileConfig::parse(config)? }))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(CoopWinogradF32Kernel { tile: nhwc_sweep(true)[0] })
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        nhwc_sweep(true).into_iter().map(|tile| Kernel::new(CoopWinogradF32Kernel { tile })).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
    fn takes_non_finite_weights(&self) -> bool {
        false
    }
}

/// A kernel of the family: the GEMM's tile (a `coop-nhwc-f32` config).
#[derive(Debug)]
pub(crate) struct CoopWinogradF32Kernel {
    tile: TileConfig,
}

/// Pairs of channels per component in the staged layout: the input channels padded to whole
/// vectors of 8, halved.
fn pairs(channels: u32) -> u32 {
    channels.div_ceil(VEC) * VEC / 2
}

/// The input transform's lanes per warp: (pairs, tiles) — 8 pairs (a 32-byte sector of
/// words) of 4 tiles where the pairs come in whole blocks of 8, else 4 of 8.
fn transform_lanes(channels: u32) -> (u32, u32) {
    match pairs(channels).is_multiple_of(8) {
        true => (8, 4),
        false => (4, 8),
    }
}

/// The input transform's invocations per image: whole warps of [`transform_lanes`] over the
/// pairs and the tiles.
fn transform_invocations(channels: u32, tiles: u64) -> u64 {
    let (pb, tb) = transform_lanes(channels);
    (pairs(channels) / pb) as u64 * tiles.div_ceil(tb as u64) * (pb * tb) as u64
}

impl CoopWinogradF32Kernel {
    /// The `coop-nhwc-f32` kernel of the same tile (its checks and packing).
    fn gemm(&self) -> Kernel {
        Kernel::new(nhwc::NhwcKernel::f32(self.tile))
    }

    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: format!("{}:{}", COOP_WINOGRAD_F32.name(), self.tile.name()), reason }
    }

    /// The algorithm of a spec (`winograd-f4`'s), or the refusal.
    fn algorithm(&self, spec: &Conv2dSpec) -> Result<&'static Minimal> {
        WINOGRAD_F4.algorithm(spec).map_err(|reason| self.refuse(reason))
    }

    /// The input transform's WGSL for a problem.
    fn input_source(&self, problem: &ConvProblem, alg: &Minimal) -> Result<String> {
        let [th, tw] = winograd::tiles(problem, alg);
        let s = &problem.spec;
        let (pb, tb) = transform_lanes(problem.input.c);
        let header = format!(
            "// generated from the convolution's geometry\n\
             const WG: u32 = {TRANSFORM_WG}u;\nconst C: u32 = {c}u;\nconst H: u32 = {h}u;\nconst W: u32 = {w}u;\n\
             const TH: u32 = {th}u;\nconst TW: u32 = {tw}u;\nconst CP: u32 = {cp}u;\n\
             const PB: u32 = {pb}u;\nconst TB: u32 = {tb}u;\nconst PBLOCKS: u32 = {pblocks}u;\n\
             const TBLOCKS: u32 = {tblocks}u;\n\
             const PT: u32 = {pt}u;\nconst PL: u32 = {pl}u;\n{transforms}",
            c = problem.input.c,
            h = problem.input.h,
            w = problem.input.w,
            cp = pairs(problem.input.c),
            pblocks = pairs(problem.input.c) / pb,
            tblocks = (th * tw).div_ceil(tb),
            pt = s.padding.top,
            pl = s.padding.left,
            transforms = alg.wgsl(),
        );
        compose_operands(
            "input",
            &[("input", INPUT_WGSL)],
            vec![("config", header)],
            Operands::F16x3Scaled,
            false,
            &["WINOGRAD_INPUT"],
        )
    }
}

impl KernelConfig for CoopWinogradF32Kernel {
    fn family(&self) -> &'static dyn Family {
        &COOP_WINOGRAD_F32
    }
    fn name(&self) -> String {
        self.tile.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.gemm().config().check_shape()
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.gemm().config().check_limits(limits)?;
        match pass_workgroup_refusal(limits, TRANSFORM_WG, "the transforms'") {
            Some(reason) => Err(self.refuse(reason)),
            None => Ok(()),
        }
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        let alg = self.algorithm(spec)?;
        self.gemm().config().check_spec(&winograd::gemm_spec(spec, alg), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        match WINOGRAD_F4.algorithm(spec) {
            Ok(alg) => self.gemm().config().packed_bytes(&winograd::gemm_spec(spec, alg)),
            Err(_) => u64::MAX,
        }
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        let alg = self.algorithm(spec)?;
        winograd::pack_transformed(
            spec,
            weight,
            bias,
            alg,
            |r| self.refuse(r),
            |gemm, u, zeros| {
                // G's rows sum to at most 62/45 (n = 8): weights near f32's largest overflow U,
                // which the split would refuse naming an infinite weight the caller never gave.
                if let Some(i) = u.iter().position(|v| !v.is_finite()) {
                    return Err(self.refuse(format!(
                        "the transformed weights overflow f32 (component {} of output channel {}): {} takes weights \
                     whose transform G g Gᵀ stays finite",
                        i / (spec.out_channels as usize * spec.in_channels as usize),
                        (i / spec.in_channels as usize) % spec.out_channels as usize,
                        alg.name()
                    )));
                }
                self.gemm().config().pack(gemm, u, zeros)
            },
        )
    }
    fn extra_bindings(&self) -> &'static [u32] {
        // The GEMM's (its K table, grid and input maximum) and the weights as given, which
        // the output transform reads.
        const BINDINGS: &[u32] = &[nhwc::KTAB_BINDING, GRID_BINDING, INPUT_MAX_BINDING, FINISHING_WEIGHT_BINDING];
        BINDINGS
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let alg = self.algorithm(&problem.spec)?;
        let gemm_problem = winograd::gemm_problem(problem, alg)?;
        let gemm = nhwc::f32_winograd_gemm(self.tile, &gemm_problem)?;
        let [th, tw] = winograd::tiles(problem, alg);
        let tiles = th as u64 * tw as u64;
        let components = alg.components() as u64;
        let pairs = pairs(problem.input.c) as u64;
        Ok(Box::new(DerivedRun {
            gemm,
            params: Box::new(move |p| winograd::gemm_params(&gemm_problem, p)),
            staging: Some(Staging {
                source: self.input_source(problem, alg)?,
                // Two halves of n²·CP words per tile.
                bytes_per_image: 2 * 4 * components * pairs * tiles,
                invocations_per_image: transform_invocations(problem.input.c, tiles),
                workgroup_size: TRANSFORM_WG,
                scaled_input: true,
            }),
            finishing: Some(winograd::output_transform(problem, alg, th * tw)?),
        }))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let limits = KernelLimits::with_workgroup_bytes(49152);
        let mut sources = Vec::new();
        for r in [3, 5] {
            let spec = Conv2dSpec::new(20, 24, r).padding(crate::spec::Padding::uniform(r / 2));
            let problem = spec.problem(Shape4::new(2, 20, 7, 8))?;
            let shaped = self.shape(&problem, &limits)?;
            sources.push(shaped.source()?);
            sources.extend(shaped.staging().map(|s| s.source.clone()));
            sources.extend(shaped.finishing().map(|f| f.source.clone()));
        }
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        self.gemm().workgroup_bytes()
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(Kernel::new(CoopWinogradF32Kernel { tile }))
    }
    fn operand_halves(&self) -> Option<u32> {
        Some(2)
    }
}

/// The CPU twin of the three passes on an NCHW problem: `winograd-f4`'s, with V and U each
/// held as the two f16 halves the GEMM multiplies (high half, low half of the rest rounded to
/// f16; the power-of-two scales are exact and left out), the products summed in f32.
#[cfg(test)]
pub(crate) fn coop_winograd_f32_twin(
    problem: &ConvProblem,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let alg = WINOGRAD_F4.algorithm(&problem.spec).unwrap();
    let split = |v: f32| {
        let hi = half::f16::from_f32(v).to_f32();
        hi + half::f16::from_f32((v - hi) * 2048.0).to_f32() / 2048.0
    };
    winograd::winograd_twin_rounded(problem, alg, input, weight, bias, split, |v| v)
}

/// CPU twin of input.wgsl's invocation → (image, tile, pair) decomposition, `None` for the
/// invocations it returns early from (past the tiles or the batch).
#[cfg(test)]
fn transform_lane(e: u64, channels: u32, tiles: u64, batch: u64) -> Option<(u64, u64, u64)> {
    let (pb, tb) = transform_lanes(channels);
    let (pb, tb) = (pb as u64, tb as u64);
    let (pblocks, tblocks) = (pairs(channels) as u64 / pb, tiles.div_ceil(tb));
    let block = e / (pb * tb);
    let tile = (block % tblocks) * tb + (e / pb) % tb;
    let cp = ((block / tblocks) % pblocks) * pb + e % pb;
    let img = block / (tblocks * pblocks);
    (img < batch && tile < tiles).then_some((img, tile, cp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Padding;

    /// The input transform's invocations (`transform_invocations` per image) cover every
    /// (image, tile, pair of channels) exactly once, for channel counts in whole blocks of 8
    /// pairs or not and tile counts in whole warps or not; and a warp's 32 lanes write whole
    /// runs of neighbouring words (the pairs innermost).
    #[test]
    fn transform_lanes_cover_each_pair_once() {
        for channels in [1, 8, 12, 16, 24, 96, 259, 512] {
            for tiles in [1, 3, 4, 7, 16, 49, 50] {
                let batch = 3;
                let per_image = transform_invocations(channels, tiles);
                assert_eq!(per_image % 32, 0, "{channels} channels, {tiles} tiles: whole warps");
                let mut seen = std::collections::HashSet::new();
                for e in 0..per_image * batch {
                    if let Some(t) = transform_lane(e, channels, tiles, batch) {
                        assert!(seen.insert(t), "{channels} channels, {tiles} tiles: {t:?} twice");
                    }
                }
                assert_eq!(seen.len() as u64, batch * tiles * pairs(channels) as u64, "{channels}, {tiles}");
                let (pb, _) = transform_lanes(channels);
                let (_, tile, cp) = transform_lane(0, channels, tiles, batch).unwrap();
                let (_, tile1, cp1) = transform_lane(pb as u64 - 1, channels, tiles, batch).unwrap();
                assert_eq!((tile, cp + pb as u64 - 1), (tile1, cp1), "{channels}: a run of {pb} pairs");
            }
        }
    }

    /// The headroom the input scale leaves the transformed input under `WINOGRAD_INPUT`
    /// (input_scale.wgsl's `INPUT_HEADROOM`, 2^8).
    const INPUT_HEADROOM: f64 = 256.0;

    /// Every algorithm's transformed input stays within the headroom the scale leaves it.
    #[test]
    fn headroom_holds_every_algorithm() {
        for alg in [&winograd::minimal::F4X4_3X3, &winograd::minimal::F4X4_5X5] {
            assert!(alg.input_bound() <= INPUT_HEADROOM, "{}: {}", alg.name(), alg.input_bound());
        }
    }

    /// The twin against the f64 reference (`check_twin_within`'s data): within the F32
    /// contract (odd and even sizes, asymmetric padding, channels not whole vectors, 3×3 and
    /// 5×5).
    #[test]
    fn twin_keeps_the_f32_contract() {
        let cases = [
            (Conv2dSpec::new(64, 24, 3).padding(Padding::uniform(1)).with_bias(true), [2, 9, 11]),
            (Conv2dSpec::new(5, 7, 3), [1, 8, 7]),
            (Conv2dSpec::new(19, 6, 5).padding(Padding::new(2, 0, 1, 3)).with_bias(true), [2, 10, 9]),
            (Conv2dSpec::new(96, 16, 5).padding(Padding::uniform(2)), [1, 9, 9]),
        ];
        for (spec, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            let twin = |x: &[f32], w: &[f32], b: Option<&[f32]>| coop_winograd_f32_twin(&problem, x, w, b);
            crate::reference::check_twin_within(&format!("{spec:?}"), &problem, 1e-5, twin);
        }
    }

    #[test]
    fn refusals_name_the_limit() {
        let k = COOP_WINOGRAD_F32.reference();
        let limits = KernelLimits::with_workgroup_bytes(49152);
        let e = k.config().check_spec(&Conv2dSpec::new(4, 4, 3).stride((2, 2)), &limits).unwrap_err().to_string();
        assert!(e.contains("stride 2x2") && e.contains("coop-winograd-f32"), "{e}");
        let e = k.config().check_spec(&Conv2dSpec::new(1024, 4, 3), &limits).unwrap_err().to_string();
        assert!(e.contains("512") && e.contains("1024"), "{e}");
        assert!(k.config().check_spec(&Conv2dSpec::new(4, 4, 5), &limits).is_ok());
        let spec = Conv2dSpec::new(1, 1, 3);
        let mut w = vec![1.0f32; 9];
        w[4] = f32::INFINITY;
        let e = k.config().pack(&spec, &w, &[0.0]).err().unwrap().to_string();
        assert!(e.contains("finite weights"), "{e}");
    }
}
