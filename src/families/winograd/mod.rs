//! The Winograd families: convolutions of stride 1, no dilation and no groups by Winograd's
//! minimal filtering F(m×m, r×r) ([`minimal`]), in three passes of one compute pass.
//! `winograd` runs tiles of 2×2 outputs (F(2×2, 3×3) and F(2×2, 5×5)), `winograd-f4` tiles
//! of 4×4 (F(4×4, 3×3) and F(4×4, 5×5)), `winograd-f6` tiles of 6×6 (F(6×6, 3×3)). The input
//! transform (`input_transform.wgsl`, the kernel's staging pass) rewrites each n×n input
//! patch `d` (n = m + r − 1) as `V = Bᵀ d B`; the tiled kernel (`crate::families::tiled`, the
//! config's tile) multiplies, for each of the n² components, the transformed inputs by the
//! transformed weights `U = G g Gᵀ` (packed at `Conv2d::new`), as a 1×1 convolution of n²
//! groups; the output transform (`output_transform.wgsl`, the finishing pass) turns each
//! tile's n² products into its m×m outputs `Y = Aᵀ M A`, adds the bias and the activation.
//!
//! F(2×2, 3×3): 16 multiply-adds per 2×2 outputs against 36 (2.25× fewer), for transformed
//! inputs 4× the input's size and products 4× the output's, written and read once each.
//! F(4×4, 3×3): 36 per 4×4 against 144 (4×), for 2.25× the input and the output. F(6×6,
//! 3×3): 64 per 6×6 against 324 (5.06×), for 1.78×. F(2×2, 5×5): 36 per 2×2 against 100
//! (2.8×), for 9× the input and the output. F(4×4, 5×5): 64 per 4×4 against 400 (6.25×),
//! for 4×. f32 throughout; the larger tiles' transforms multiply by up to 5 (n = 6) or 5.25
//! (n = 8) (inputs) and 8 or 32 (outputs), which costs accuracy: on random inputs F(2×2,
//! 3×3) stays near 3e-7 relative L2 error, the n = 6 algorithms near 3–5e-6 at 256–512 input
//! channels, 7–8e-6 at 1024 and 1e-5 at 2048, so they refuse more than 512, and the n = 8
//! ones near 4–5e-6 at 96–128 and 6–7e-6 at 256, so they refuse more than 128
//! ([`Minimal::f32_channels`]; tested ≤ 1e-5, the F32 contract).
//! Configs are tile configs (`winograd:m64n64k16-t8x4-w4-s3`): the GEMM's.

pub(crate) mod minimal;

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::tiled::{self, default_sweep, pass_workgroup_refusal, DerivedRun, TileConfig};
use crate::kernel::{
    compose, ConvParams, Family, Finishing, Kernel, KernelConfig, Packed, Precision, Shaped, Staging, Target,
    ALL_TARGETS, FINISHING_WEIGHT_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};
pub(crate) use minimal::Minimal;

const INPUT_TRANSFORM_WGSL: &str = include_str!("input_transform.wgsl");
const OUTPUT_TRANSFORM_WGSL: &str = include_str!("output_transform.wgsl");

/// Invocations per workgroup of the transforms.
const TRANSFORM_WG: u32 = 256;

/// A Winograd family: the side of its output tiles.
#[derive(Debug)]
pub(crate) struct Winograd {
    name: &'static str,
    /// Outputs per tile side (m).
    out: u32,
    /// Whether the benchmark's sweeps and autotune time it ([`Family::benchmarked`]).
    benchmarked: bool,
}

/// `winograd`: F(2×2, 3×3) and F(2×2, 5×5) in f32.
pub(crate) static WINOGRAD: Winograd = Winograd { name: "winograd", out: 2, benchmarked: true };

/// `winograd-f4`: F(4×4, 3×3) and F(4×4, 5×5) in f32.
pub(crate) static WINOGRAD_F4: Winograd = Winograd { name: "winograd-f4", out: 4, benchmarked: true };

/// `winograd-f6`: F(6×6, 3×3) in f32, where named: 1.27× fewer multiply-adds than F(4×4,
/// 3×3) and transforms 0.79× its size, but 8×8 tiles (whose transforms cost more per
/// element) and coarser edges. On lavapipe (batch 1, 2026-11-28) it ran ResNet-50's and
/// VGG-16's 64–128-channel layers in 0.92–0.95× F(4×4, 3×3)'s time on four and 1.15× on two
/// (VGG-16's 112×112 layers), each at its faster tile; on an H200 (Vulkan 580.159.04,
/// 2026-11-28, three GEMM tiles each) 1.06–1.33× slower than `winograd-f4` on the 64–128-channel
/// layers of VGG-16 and ResNet-50 but VGG-16's 224×224 one (0.4 % faster). So no rule picks
/// it, and the benchmark's sweeps and autotune leave it out.
pub(crate) static WINOGRAD_F6: Winograd = Winograd { name: "winograd-f6", out: 6, benchmarked: false };

impl Family for Winograd {
    fn name(&self) -> &'static str {
        self.name
    }
    fn precision(&self) -> Precision {
        Precision::F32
    }
    fn unavailable(&self, _caps: &DeviceCaps) -> Option<String> {
        None
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(self.with_tile_config(TileConfig::parse(config)?))
    }
    fn reference(&'static self) -> Kernel {
        self.with_tile_config(TileConfig::seed())
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        default_sweep().into_iter().map(|tile| self.with_tile_config(tile)).collect()
    }
    fn targets(&self) -> &'static [Target] {
        ALL_TARGETS
    }
    fn takes_non_finite_weights(&self) -> bool {
        false
    }
    fn benchmarked(&self) -> bool {
        self.benchmarked
    }
}

impl Winograd {
    /// This family's kernel of a tile.
    pub(crate) fn with_tile_config(&'static self, tile: TileConfig) -> Kernel {
        Kernel::new(WinogradKernel { family: self, tile })
    }

    /// The kernel sides this family's algorithms take.
    fn kernel_sides(&self) -> Vec<u32> {
        minimal::ALL.iter().filter(|a| a.out == self.out).map(|a| a.kernel).collect()
    }

    /// The algorithm that runs a spec, or why none does (stride 1, no dilation, no groups,
    /// a square kernel of a side one of this family's algorithms takes, and no more input
    /// channels than the algorithm keeps [`Precision::F32`]'s contract for,
    /// [`Minimal::f32_channels`]).
    pub(crate) fn algorithm(&self, spec: &Conv2dSpec) -> std::result::Result<&'static Minimal, String> {
        let [kh, kw] = spec.kernel;
        let found = minimal::of(self.out, kh).filter(|_| kh == kw);
        match found {
            Some(a) if spec.stride == [1, 1] && spec.dilation == [1, 1] && spec.groups == 1 => {
                if spec.in_channels > a.f32_channels {
                    return Err(format!(
                        "{} keeps f32's 1e-5 relative error up to {} input channels, not {} (its error grows \
                         with the channels)",
                        a.name(),
                        a.f32_channels,
                        spec.in_channels
                    ));
                }
                Ok(a)
            }
            _ => {
                let sides: Vec<String> = self.kernel_sides().iter().map(|r| format!("{r}x{r}")).collect();
                let names: Vec<String> = minimal::ALL.iter().filter(|a| a.out == self.out).map(|a| a.name()).collect();
                let verb = if names.len() > 1 { "run" } else { "runs" };
                Err(format!(
                    "{} {verb} {} kernels of stride 1, no dilation and no groups, not {}x{} stride {}x{} dilation \
                     {}x{} groups {}",
                    names.join(" and "),
                    sides.join(" or "),
                    kh,
                    kw,
                    spec.stride[0],
                    spec.stride[1],
                    spec.dilation[0],
                    spec.dilation[1],
                    spec.groups
                ))
            }
        }
    }
}

/// A kernel of a Winograd family: the GEMM's tile.
#[derive(Debug)]
pub(crate) struct WinogradKernel {
    family: &'static Winograd,
    tile: TileConfig,
}

/// The GEMM of a spec: a 1×1 convolution of n² groups from n²·C_in to n²·C_out channels.
pub(crate) fn gemm_spec(spec: &Conv2dSpec, alg: &Minimal) -> Conv2dSpec {
    // Saturating: asked of specs not yet validated (whose channel counts may be anything).
    let components = alg.components();
    let (c, k) = (components.saturating_mul(spec.in_channels), components.saturating_mul(spec.out_channels));
    Conv2dSpec::new(c, k, 1).groups(components)
}

/// Why F(2×2, 3×3) cannot run a spec's shape (3×3 kernels of stride 1, no dilation, no
/// groups only), or `None`: the shapes of the family on the matrix units.
pub(crate) fn shape_refusal(spec: &Conv2dSpec) -> Option<String> {
    let fits = WINOGRAD.algorithm(spec).is_ok_and(|a| *a == minimal::F2X2_3X3);
    (!fits).then(|| {
        format!(
            "F(2×2, 3×3) runs 3×3 kernels of stride 1, no dilation and no groups, not {}x{} stride {}x{} \
             dilation {}x{} groups {}",
            spec.kernel[0],
            spec.kernel[1],
            spec.stride[0],
            spec.stride[1],
            spec.dilation[0],
            spec.dilation[1],
            spec.groups
        )
    })
}

/// Tiles of m×m outputs over an output plane: `[TH, TW]`.
pub(crate) fn tiles(problem: &ConvProblem, alg: &Minimal) -> [u32; 2] {
    [problem.output.h.div_ceil(alg.out), problem.output.w.div_ceil(alg.out)]
}

/// The GEMM's rows per component: N·TH·TW.
pub(crate) fn gemm_rows(problem: &ConvProblem, alg: &Minimal) -> u64 {
    let [th, tw] = tiles(problem, alg);
    problem.input.n as u64 * th as u64 * tw as u64
}

/// The GEMM's problem: the transformed input as `[N, n²·C, TH, TW]` (the channels-last GEMM
/// of `coop-winograd-f32` stages it so).
pub(crate) fn gemm_problem(problem: &ConvProblem, alg: &Minimal) -> Result<ConvProblem> {
    let [th, tw] = tiles(problem, alg);
    let c = alg.components().saturating_mul(problem.input.c);
    gemm_spec(&problem.spec, alg).problem(Shape4::new(problem.input.n, c, th, tw))
}

/// Tiles per image in the tiled GEMM's layout: up to [`PADDED_TILES_MAX_CHANNELS`] input
/// channels TH·TW rounded up to a multiple of 4, so that each channel's run of an image is
/// whole vec4s and the GEMM stores its products as vec4s (the tiled kernel's `VEC4_OUTPUT`);
/// the GEMM multiplies the padded rows (3 at most per image), which the input transform never
/// writes (zeros in the freshly allocated scratch, and each row's products depend on its row
/// alone) and the output transform never reads. Beyond, TH·TW.
pub(crate) fn tile_stride(problem: &ConvProblem, alg: &Minimal) -> u32 {
    let [th, tw] = tiles(problem, alg);
    match problem.input.c <= PADDED_TILES_MAX_CHANNELS {
        true => (th * tw).next_multiple_of(4),
        false => th * tw,
    }
}

/// The most input channels for which [`tile_stride`] pads each image's tiles to whole vec4s:
/// the padded rows add GEMM work in proportion to the channels summed, the scalar stores they
/// save do not. On an H200 (Vulkan 580.159.04, 2026-11-28, F(4×4, ·) through the rule, 7×7
/// tiles per image, matrix units off) padding ran AlexNet's 96-channel conv2 1.11× faster,
/// ResNet-50's 128-channel layer at 28×28 1.21× and VGG-16's 256-channel c4_1 1.07×, and
/// VGG-16's 512-channel c4_2 0.98× (its 6 % more rows cost more than its stores saved). The
/// GEMM of conv2 alone ran 1.39× slower with scalar stores than over the same rows in one run.
pub(crate) const PADDED_TILES_MAX_CHANNELS: u32 = 256;

/// The tiled GEMM's problem: the transformed input as `[N, n²·C, 1, TT]`, each image's tiles
/// one row of [`tile_stride`] positions.
pub(crate) fn row_gemm_problem(problem: &ConvProblem, alg: &Minimal) -> Result<ConvProblem> {
    let c = alg.components().saturating_mul(problem.input.c);
    gemm_spec(&problem.spec, alg).problem(Shape4::new(problem.input.n, c, 1, tile_stride(problem, alg)))
}

/// `U = G g Gᵀ` per output and input channel, as the GEMM's weights `[n²·C_out][C_in]` (row
/// ξ·C_out + k for component ξ = n·row + col), from `[C_out, C_in, r, r]`.
pub(crate) fn transform_weights(spec: &Conv2dSpec, weight: &[f32], alg: &Minimal) -> Result<Vec<f32>> {
    transform_weights_padded(spec, weight, spec.out_channels, spec.in_channels, alg)
}

/// [`transform_weights`] with the rows of each component padded to `rows` output channels and
/// the columns to `columns` input channels (zeros), `[n²·rows][columns]`.
pub(crate) fn transform_weights_padded(
    spec: &Conv2dSpec,
    weight: &[f32],
    rows: u32,
    columns: u32,
    alg: &Minimal,
) -> Result<Vec<f32>> {
    if rows < spec.out_channels || columns < spec.in_channels {
        return Err(Error::InvalidOptions(format!(
            "Winograd weights padded to {rows} rows by {columns} columns cannot hold {} by {}",
            spec.out_channels, spec.in_channels
        )));
    }
    let (k_out, c_in) = (spec.out_channels as usize, spec.in_channels as usize);
    let (rows, columns) = (rows as usize, columns as usize);
    let (components, taps) = (alg.components() as usize, (alg.kernel * alg.kernel) as usize);
    let mut u = alloc::zeroed_vec::<f32>(components * rows * columns, "the transformed weights")?;
    for k in 0..k_out {
        for c in 0..c_in {
            let t = alg.transform_kernel(&weight[(k * c_in + c) * taps..][..taps]);
            for (xi, v) in t.into_iter().enumerate() {
                u[(xi * rows + k) * columns + c] = v;
            }
        }
    }
    Ok(u)
}

impl WinogradKernel {
    /// The tiled kernel that runs the GEMM.
    fn gemm(&self) -> Kernel {
        tiled::TILED.with_tile_config(self.tile)
    }

    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: format!("{}:{}", self.family.name, self.tile.name()), reason }
    }

    /// The algorithm of a spec, or the refusal.
    fn algorithm(&self, spec: &Conv2dSpec) -> Result<&'static Minimal> {
        self.family.algorithm(spec).map_err(|reason| self.refuse(reason))
    }
}

/// The WGSL constants every Winograd family's transforms share: the workgroup size `WG`, the
/// channels `C` and `K`, the input and output sizes `H`, `W`, `OH`, `OW` and the tiles per
/// side `TH`, `TW` of an algorithm of `out`×`out` output tiles.
pub(crate) fn transform_geometry(problem: &ConvProblem, workgroup: u32, out: u32) -> String {
    let (oh, ow) = (problem.output.h, problem.output.w);
    format!(
        "const WG: u32 = {workgroup}u;\nconst C: u32 = {c}u;\nconst K: u32 = {k}u;\n\
         const H: u32 = {h}u;\nconst W: u32 = {w}u;\nconst OH: u32 = {oh}u;\nconst OW: u32 = {ow}u;\n\
         const TH: u32 = {th}u;\nconst TW: u32 = {tw}u;\n",
        c = problem.input.c,
        k = problem.output.c,
        h = problem.input.h,
        w = problem.input.w,
        th = oh.div_ceil(out),
        tw = ow.div_ceil(out),
    )
}

/// The output transform's pass (the finishing pass of both f32 Winograd families): one
/// invocation per tile and output channel, reading products whose images' tiles lie `stride`
/// apart per channel (TH·TW, or [`tile_stride`]), with the direct sum for tiles that are not
/// finite.
pub(crate) fn output_transform(problem: &ConvProblem, alg: &Minimal, stride: u32) -> Result<Finishing> {
    let [th, tw] = tiles(problem, alg);
    let k = problem.output.c as u64;
    Ok(Finishing {
        source: transform_source(problem, alg, true, stride)?,
        bytes_per_image: 4 * alg.components() as u64 * k * stride as u64,
        invocations_per_image: k * th as u64 * tw as u64,
        workgroup_size: TRANSFORM_WG,
        direct_fallback: true,
    })
}

/// The transforms' WGSL for a problem (`output`: the output transform, else the input's),
/// each image's tiles `stride` apart per channel (TH·TW, or [`tile_stride`]).
pub(crate) fn transform_source(problem: &ConvProblem, alg: &Minimal, output: bool, stride: u32) -> Result<String> {
    let header = format!(
        "// generated from the convolution's geometry\n{}const TT: u32 = {stride}u;\n{}",
        transform_geometry(problem, TRANSFORM_WG, alg.out),
        alg.wgsl(),
    );
    let (entry, wgsl) = match output {
        false => ("input_transform", INPUT_TRANSFORM_WGSL),
        true => ("output_transform", OUTPUT_TRANSFORM_WGSL),
    };
    compose(entry, &[(entry, wgsl)], vec![("config", header)], Precision::F32, false)
}

impl KernelConfig for WinogradKernel {
    fn family(&self) -> &'static dyn Family {
        self.family
    }
    fn name(&self) -> String {
        self.tile.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.tile.check_shape()
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
        self.gemm().config().check_spec(&gemm_spec(spec, alg), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        match self.family.algorithm(spec) {
            Ok(alg) => self.gemm().config().packed_bytes(&gemm_spec(spec, alg)),
            Err(_) => u64::MAX,
        }
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        let alg = self.algorithm(spec)?;
        pack_transformed(
            spec,
            weight,
            bias,
            alg,
            |r| self.refuse(r),
            |gemm, u, zeros| self.gemm().config().pack(gemm, u, zeros),
        )
    }
    fn extra_bindings(&self) -> &'static [u32] {
        // The tiled kernel's (its gather table and grid) and the weights as given, which the
        // output transform reads (the GEMM's layout declares them; its shader does not).
        const BINDINGS: &[u32] = &[tiled::GATHER_TABLE_BINDING, crate::kernel::GRID_BINDING, FINISHING_WEIGHT_BINDING];
        BINDINGS
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let alg = self.algorithm(&problem.spec)?;
        let gemm_problem = row_gemm_problem(problem, alg)?;
        let gemm = self.gemm().config().shape(&gemm_problem, limits)?;
        let [th, tw] = tiles(problem, alg);
        let stride = tile_stride(problem, alg);
        let c = problem.input.c as u64;
        let (tiles, padded) = (th as u64 * tw as u64, stride as u64);
        let components = alg.components() as u64;
        Ok(Box::new(DerivedRun {
            gemm,
            params: Box::new(move |p| gemm_params(&gemm_problem, p)),
            staging: Some(Staging {
                source: transform_source(problem, alg, false, stride)?,
                bytes_per_image: 4 * components * c * padded,
                invocations_per_image: c * tiles,
                workgroup_size: TRANSFORM_WG,
                scaled_input: false,
            }),
            finishing: Some(output_transform(problem, alg, stride)?),
        }))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let mut sources = Vec::new();
        for r in self.family.kernel_sides() {
            let spec = Conv2dSpec::new(16, 24, r).padding(crate::spec::Padding::uniform(r / 2));
            for hw in [7, 8] {
                let problem = spec.problem(Shape4::new(2, 16, hw, hw))?;
                let shaped = self.shape(&problem, &limits)?;
                sources.push(shaped.source()?);
                sources.extend(shaped.staging().map(|s| s.source.clone()));
                sources.extend(shaped.finishing().map(|f| f.source.clone()));
            }
        }
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.gemm().invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        self.gemm().workgroup_bytes()
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(self.family.with_tile_config(tile))
    }
}

/// A Winograd family's packing around its GEMM kernel's (`gemm_pack`: the GEMM's spec, the
/// transformed weights `U` of [`transform_weights`], its bias of zeros): non-finite weights
/// refused by `refuse` (an infinite or NaN weight would reach every output of its channel
/// through the transforms, as NaN where a direct convolution gives ±inf or finite values);
/// then the bias buffer (the GEMM's n²·C_out zeros, then the biases, which the output
/// transform reads) and the weights as given, for the output transform's direct fallback.
pub(crate) fn pack_transformed(
    spec: &Conv2dSpec,
    weight: &[f32],
    bias: &[f32],
    alg: &Minimal,
    refuse: impl Fn(String) -> Error,
    gemm_pack: impl FnOnce(&Conv2dSpec, &[f32], &[f32]) -> Result<Packed>,
) -> Result<Packed> {
    if let Some(i) = weight.iter().position(|v| !v.is_finite()) {
        return Err(refuse(format!(
            "weight {i} is {}: {} takes finite weights (its transforms would turn it into NaN across the channel's \
             outputs)",
            weight[i],
            alg.name()
        )));
    }
    let gemm = gemm_spec(spec, alg);
    let u = transform_weights(spec, weight, alg)?;
    let zeros = alloc::zeroed_vec::<f32>(gemm.out_channels as usize, "the GEMM's zero bias")?;
    let mut packed = gemm_pack(&gemm, &u, &zeros)?;
    let mut b = zeros;
    b.extend_from_slice(bias);
    packed.bias = Some(alloc::bytes_of(&b, "the bias")?);
    packed.extra.push((FINISHING_WEIGHT_BINDING, "wgconv weights as given", alloc::bytes_of(weight, "the weights")?));
    Ok(packed)
}

/// The GEMM kernel's parameters: a 1×1 convolution of n² groups over the transformed input
/// `g` (the staging scratch, from its start) into the products (the finishing pass's
/// scratch), no activation (the output transform applies it).
pub(crate) fn gemm_params(g: &ConvProblem, p: &ConvParams) -> ConvParams {
    let (c, th, tw) = (g.input.c, g.input.h, g.input.w);
    let components = g.spec.groups;
    ConvParams {
        c_in: c,
        h: th,
        w: tw,
        c_out: g.output.c,
        oh: th,
        ow: tw,
        batch: p.batch,
        m_total: p.batch * th * tw,
        kh: 1,
        kw: 1,
        stride_h: 1,
        stride_w: 1,
        pad_top: 0,
        pad_left: 0,
        dil_h: 1,
        dil_w: 1,
        c_in_per_group: c / components,
        c_out_per_group: g.output.c / components,
        groups: components,
        k_total: c / components,
        in_offset: 0,
        out_offset: 0,
        flags: 0,
        out_scale: p.out_scale,
    }
}

/// The CPU twin of the three passes: the input transform as `input_transform.wgsl` computes
/// it (zeros outside the image), the n² GEMMs with f32 sums in K order (as the tiled kernel's
/// invocations sum theirs), and the output transform as `output_transform.wgsl`, with the
/// packed weights of [`transform_weights`].
#[cfg(test)]
pub(crate) fn winograd_twin(
    problem: &ConvProblem,
    alg: &Minimal,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    winograd_twin_rounded(problem, alg, input, weight, bias, |v| v, |v| v)
}

/// [`winograd_twin`] with the transformed inputs and weights each rounded by `round` and the
/// products by `round_products` (both to f16 for `coop-winograd-f16`; the operands to their
/// two f16 halves for `coop-winograd-f32`).
#[cfg(test)]
pub(crate) fn winograd_twin_rounded(
    problem: &ConvProblem,
    alg: &Minimal,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    round: impl Fn(f32) -> f32,
    round_products: impl Fn(f32) -> f32,
) -> Vec<f32> {
    let spec = &problem.spec;
    let (n, c, h, w) =
        (problem.input.n as usize, problem.input.c as usize, problem.input.h as i64, problem.input.w as i64);
    let (k_out, oh, ow) = (problem.output.c as usize, problem.output.h as usize, problem.output.w as usize);
    let [th, tw] = tiles(problem, alg).map(|t| t as usize);
    let (side, m) = (alg.n() as usize, alg.out as usize);
    let u: Vec<f32> = transform_weights(spec, weight, alg).unwrap().into_iter().map(&round).collect();
    // V = Bᵀ d B of a row-major n×n patch: columns, then rows.
    let transform_2d = |d: &[f32], one: &dyn Fn(&[f32]) -> Vec<f32>, rows: usize| {
        let mut b = vec![0.0f32; rows * side];
        for j in 0..side {
            let column: Vec<f32> = (0..side).map(|i| d[i * side + j]).collect();
            for (i, v) in one(&column).into_iter().enumerate() {
                b[i * side + j] = v;
            }
        }
        (0..rows).flat_map(|i| one(&b[i * side..][..side])).collect::<Vec<f32>>()
    };
    let mut out = vec![f32::NAN; problem.output.len() as usize];
    for img in 0..n {
        for ty in 0..th {
            for tx in 0..tw {
                let y0 = (m * ty) as i64 - spec.padding.top as i64;
                let x0 = (m * tx) as i64 - spec.padding.left as i64;
                // V per input channel.
                let v: Vec<Vec<f32>> = (0..c)
                    .map(|ci| {
                        let at = |i: i64, j: i64| {
                            let (iy, ix) = (y0 + i, x0 + j);
                            match (0..h).contains(&iy) && (0..w).contains(&ix) {
                                true => input[((img * c + ci) as i64 * h * w + iy * w + ix) as usize],
                                false => 0.0,
                            }
                        };
                        let d: Vec<f32> = (0..side * side).map(|e| at((e / side) as i64, (e % side) as i64)).collect();
                        transform_2d(&d, &|x| alg.input_transform(x), side).into_iter().map(&round).collect()
                    })
                    .collect();
                for k in 0..k_out {
                    let products: Vec<f32> = (0..side * side)
                        .map(|xi| {
                            let sum =
                                (0..c).fold(0.0f32, |acc, ci| u[(xi * k_out + k) * c + ci].mul_add(v[ci][xi], acc));
                            round_products(sum)
                        })
                        .collect();
                    let y = transform_2d(&products, &|x| alg.output_transform(x), m);
                    let b = bias.map_or(0.0, |b| b[k]);
                    for r in 0..m {
                        for s in 0..m {
                            let (oy, ox) = (m * ty + r, m * tx + s);
                            if oy < oh && ox < ow {
                                out[((img * k_out + k) * oh + oy) * ow + ox] = y[r * m + s] + b;
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Padding;

    /// The three passes' twin against the reference for every algorithm: odd and even sizes,
    /// asymmetric and no padding, a 1×1 output, bias.
    #[test]
    fn twin_matches_reference() {
        for alg in minimal::ALL {
            let (r, pad) = (alg.kernel, alg.kernel / 2);
            let cases = [
                ("same", Conv2dSpec::new(5, 7, r).padding(Padding::uniform(pad)).with_bias(true), [2, 9, 11]),
                ("valid", Conv2dSpec::new(3, 4, r), [1, 8 + r, 7 + r]),
                ("one", Conv2dSpec::new(4, 2, r), [1, r, r]),
                ("asym", Conv2dSpec::new(2, 3, r).padding(Padding::new(2, 0, 1, 3)).with_bias(true), [2, 6, 5]),
            ];
            for (name, spec, [n, h, w]) in cases {
                let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
                let label = format!("{} {name}", alg.name());
                // The transforms' f32 rounding: up to 1.6e-6 (F(4×4, 5×5)) and 2.5e-6 (F(6×6,
                // 3×3), asymmetric padding) for the n = 8 tiles on these data; the others within
                // the direct twins' 1e-6.
                let tolerance = if alg.n() == 8 { 4e-6 } else { 1e-6 };
                crate::reference::check_twin_within(&label, &problem, tolerance, |x, w, b| {
                    winograd_twin(&problem, alg, x, w, b)
                });
            }
        }
    }

    /// The F32 contract on random data at the most input channels each algorithm takes (the
    /// error grows with the sum's length; the twin sums in f32 in K order): inputs of zero
    /// mean and of positive ones (after a ReLU), every algorithm within 1e-5 relative L2
    /// against the f64 reference.
    #[test]
    fn twin_keeps_the_f32_contract() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for alg in minimal::ALL {
            let (r, c) = (alg.kernel, alg.f32_channels.min(2048));
            let spec = Conv2dSpec::new(c, 4, r).padding(Padding::uniform(r / 2)).with_bias(true);
            let problem = spec.problem(Shape4::new(1, c, 10, 9)).unwrap();
            for low in [-1.0f32, 0.0] {
                let x: Vec<f32> = (0..problem.input.len()).map(|_| rng.random_range(low..1.0)).collect();
                let w: Vec<f32> = (0..spec.weight_len()).map(|_| rng.random_range(-1.0..1.0)).collect();
                let b: Vec<f32> = (0..spec.out_channels).map(|_| rng.random_range(-1.0..1.0)).collect();
                let got = winograd_twin(&problem, alg, &x, &w, Some(&b));
                let want = crate::reference::conv2d(&problem, &x, &w, Some(&b)).unwrap();
                let err = crate::reference::relative_l2(&got, &want);
                eprintln!("{} at {c} channels, inputs from {low}: rel L2 {err:.2e}", alg.name());
                assert!(err < 1e-5, "{}: rel L2 {err}", alg.name());
            }
        }
    }

    /// Each image's tiles: padded to whole vec4s up to the channel bound, as they are beyond.
    #[test]
    fn tile_stride_pads_to_vec4s_up_to_the_channel_bound() {
        let alg = &minimal::F4X4_3X3;
        for (c, hw, want) in [(96, 27, 52), (256, 28, 52), (257, 28, 49), (512, 56, 196), (64, 7, 4), (16, 12, 12)] {
            let spec = Conv2dSpec::new(c, 8, 3).padding(Padding::uniform(1));
            let problem = spec.problem(Shape4::new(2, c, hw, hw)).unwrap();
            assert_eq!(tile_stride(&problem, alg), want, "{c} channels at {hw}x{hw}");
            let g = row_gemm_problem(&problem, alg).unwrap();
            assert_eq!((g.input.n, g.input.c, g.input.h, g.input.w), (2, 36 * c, 1, want));
        }
    }

    /// The padded transform holds the unpadded one's values at the same component, output
    /// and input channel, and zeros in the padding.
    #[test]
    fn padded_weights_hold_the_transform() {
        for alg in minimal::ALL {
            let spec = Conv2dSpec::new(5, 7, alg.kernel);
            let w: Vec<f32> = (0..spec.weight_len()).map(|i| (i % 13) as f32 - 6.0).collect();
            let u = transform_weights(&spec, &w, alg).unwrap();
            let padded = transform_weights_padded(&spec, &w, 8, 8, alg).unwrap();
            let components = alg.components() as usize;
            assert_eq!(padded.len(), components * 8 * 8);
            for xi in 0..components {
                for k in 0..8 {
                    for c in 0..8 {
                        let want = if k < 7 && c < 5 { u[(xi * 7 + k) * 5 + c] } else { 0.0 };
                        assert_eq!(padded[(xi * 8 + k) * 8 + c], want, "{}: component {xi}, k {k}, c {c}", alg.name());
                    }
                }
            }
            // Padding smaller than the weights is an error, not a panic.
            assert!(transform_weights_padded(&spec, &w, 6, 8, alg).is_err());
        }
    }

    /// The GEMM's bindings come first among the family's (its layout is the GEMM's).
    #[test]
    fn bindings_extend_the_gemm_s() {
        for family in [&WINOGRAD, &WINOGRAD_F4, &WINOGRAD_F6] {
            let k = family.reference();
            let gemm = tiled::TILED.with_tile_config(k.tile().unwrap());
            assert_eq!(&k.config().extra_bindings()[..2], gemm.config().extra_bindings());
        }
    }

    #[test]
    fn refusals_name_the_limit() {
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let k = WINOGRAD.reference();
        for (spec, what) in [
            (Conv2dSpec::new(4, 4, 7), "not 7x7"),
            (Conv2dSpec::new(4, 4, 3).kernel_hw((3, 5)), "not 3x5"),
            (Conv2dSpec::new(4, 4, 3).stride((2, 2)), "stride 2x2"),
            (Conv2dSpec::new(4, 4, 5).dilation((2, 2)), "dilation 2x2"),
            (Conv2dSpec::new(4, 4, 3).groups(2), "groups 2"),
        ] {
            let e = k.config().check_spec(&spec, &limits).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("F(2×2, 3×3) and F(2×2, 5×5)") && e.contains("3x3 or 5x5"), "{e}");
        }
        for r in [3, 5] {
            assert!(k.config().check_spec(&Conv2dSpec::new(4, 4, r), &limits).is_ok());
        }
        let f4 = WINOGRAD_F4.reference();
        let e = f4.config().check_spec(&Conv2dSpec::new(4, 4, 7), &limits).unwrap_err().to_string();
        assert!(
            e.contains("winograd-f4")
                && e.contains("F(4×4, 3×3) and F(4×4, 5×5) run 3x3 or 5x5 kernels")
                && e.contains("not 7x7"),
            "{e}"
        );
        for r in [3, 5] {
            assert!(f4.config().check_spec(&Conv2dSpec::new(4, 4, r), &limits).is_ok());
        }
        // More input channels than the n = 6 tiles keep the F32 contract for, by name.
        let e = f4.config().check_spec(&Conv2dSpec::new(2048, 4, 3), &limits).unwrap_err().to_string();
        assert!(e.contains("F(4×4, 3×3) keeps f32's 1e-5") && e.contains("up to 512") && e.contains("not 2048"), "{e}");
        assert!(f4.config().check_spec(&Conv2dSpec::new(512, 4, 3), &limits).is_ok());
        assert!(f4.config().check_spec(&Conv2dSpec::new(513, 4, 3), &limits).is_err());
        let e = f4.config().check_spec(&Conv2dSpec::new(129, 4, 5), &limits).unwrap_err().to_string();
        assert!(e.contains("F(4×4, 5×5) keeps f32's 1e-5") && e.contains("up to 128"), "{e}");
        assert!(f4.config().check_spec(&Conv2dSpec::new(128, 4, 5), &limits).is_ok());
        let e = k.config().check_spec(&Conv2dSpec::new(2048, 4, 5), &limits).unwrap_err().to_string();
        assert!(e.contains("F(2×2, 5×5) keeps f32's 1e-5"), "{e}");
        assert!(k.config().check_spec(&Conv2dSpec::new(4096, 4, 3), &limits).is_ok(), "F(2×2, 3×3): no limit");
        let e = shape_refusal(&Conv2dSpec::new(4, 4, 5)).unwrap();
        assert!(e.contains("F(2×2, 3×3) runs") && e.contains("not 5x5"), "{e}");
        assert!(shape_refusal(&Conv2dSpec::new(4, 4, 3)).is_none());
    }
}
