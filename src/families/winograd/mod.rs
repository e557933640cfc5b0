//! The Winograd family (`winograd`): 3×3 convolutions of stride 1, no dilation and no groups
//! by Winograd's minimal filtering F(2×2, 3×3), in three passes of one compute pass. The
//! input transform (`input_transform.wgsl`, the kernel's staging pass) rewrites each 4×4
//! input patch `d` as `V = Bᵀ d B`; the tiled kernel (`crate::families::tiled`, the config's
//! tile) multiplies, for each of the 16 components, the transformed inputs by the
//! transformed weights `U = G g Gᵀ` (packed at `Conv2d::new`), as a 1×1 convolution of 16
//! groups; the output transform (`output_transform.wgsl`, the finishing pass) turns each
//! tile's 16 products into its 2×2 outputs `Y = Aᵀ M A`, adds the bias and the activation.
//!
//! 16 multiplies per 2×2 outputs against 36: the products' arithmetic falls 2.25×, for
//! transformed inputs 4× the input's size and products 4× the output's, written and read
//! once each. f32 throughout (the transforms add and subtract at most four values, and G's
//! halves are exact): on random inputs the relative L2 error stays ~3e-7 (tested ≤ 1e-5).
//! Configs are tile configs (`winograd:m64n64k16-t8x4-w4-s3`): the GEMM's.

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::tiled::{self, default_sweep, pass_workgroup_refusal, DerivedRun, TileConfig};
use crate::kernel::{
    compose, ConvParams, Family, Finishing, Kernel, KernelConfig, Packed, Precision, Shaped, Staging, Target,
    ALL_TARGETS, FINISHING_WEIGHT_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};

const INPUT_TRANSFORM_WGSL: &str = include_str!("input_transform.wgsl");
const OUTPUT_TRANSFORM_WGSL: &str = include_str!("output_transform.wgsl");

/// Invocations per workgroup of the transforms.
const TRANSFORM_WG: u32 = 256;

/// Components of a transformed tile (4×4).
pub(crate) const COMPONENTS: u32 = 16;

/// The family.
#[derive(Debug)]
pub(crate) struct Winograd;

/// `winograd`: F(2×2, 3×3) in f32.
pub(crate) static WINOGRAD: Winograd = Winograd;

impl Family for Winograd {
    fn name(&self) -> &'static str {
        "winograd"
    }
    fn precision(&self) -> Precision {
        Precision::F32
    }
    fn unavailable(&self, _caps: &DeviceCaps) -> Option<String> {
        None
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(WinogradKernel { tile: TileConfig::parse(config)? }))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(WinogradKernel { tile: TileConfig::seed() })
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        default_sweep().into_iter().map(|tile| Kernel::new(WinogradKernel { tile })).collect()
    }
    fn targets(&self) -> &'static [Target] {
        ALL_TARGETS
    }
}

impl Winograd {
    /// This family's kernel of a tile.
    pub(crate) fn with_tile_config(&'static self, tile: TileConfig) -> Kernel {
        Kernel::new(WinogradKernel { tile })
    }
}

/// A kernel of the Winograd family: the GEMM's tile.
#[derive(Debug)]
pub(crate) struct WinogradKernel {
    tile: TileConfig,
}

/// The GEMM of a spec: a 1×1 convolution of 16 groups from 16·C_in to 16·C_out channels.
fn gemm_spec(spec: &Conv2dSpec) -> Conv2dSpec {
    // Saturating: asked of specs not yet validated (whose channel counts may be anything).
    let (c, k) = (COMPONENTS.saturating_mul(spec.in_channels), COMPONENTS.saturating_mul(spec.out_channels));
    Conv2dSpec::new(c, k, 1).groups(COMPONENTS)
}

/// Why F(2×2, 3×3) cannot run a spec's shape (3×3 kernels of stride 1, no dilation, no
/// groups only), or `None`.
pub(crate) fn shape_refusal(spec: &Conv2dSpec) -> Option<String> {
    let fits = spec.kernel == [3, 3] && spec.stride == [1, 1] && spec.dilation == [1, 1] && spec.groups == 1;
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

/// Tiles of 2×2 outputs over an output plane: `[TH, TW]`.
pub(crate) fn tiles(problem: &ConvProblem) -> [u32; 2] {
    [problem.output.h.div_ceil(2), problem.output.w.div_ceil(2)]
}

/// The GEMM's problem: the transformed input as `[N, 16·C, TH, TW]`.
pub(crate) fn gemm_problem(problem: &ConvProblem) -> Result<ConvProblem> {
    let [th, tw] = tiles(problem);
    gemm_spec(&problem.spec).problem(Shape4::new(problem.input.n, COMPONENTS * problem.input.c, th, tw))
}

/// `U = G g Gᵀ` per output and input channel, as the GEMM's weights `[16·C_out][C_in]`
/// (row ξ·C_out + k for component ξ = 4·row + col), from `[C_out, C_in, 3, 3]`.
pub(crate) fn transform_weights(spec: &Conv2dSpec, weight: &[f32]) -> Result<Vec<f32>> {
    transform_weights_padded(spec, weight, spec.out_channels, spec.in_channels)
}

/// [`transform_weights`] with the rows of each component padded to `rows` output channels and
/// the columns to `columns` input channels (zeros), `[16·rows][columns]`.
pub(crate) fn transform_weights_padded(spec: &Conv2dSpec, weight: &[f32], rows: u32, columns: u32) -> Result<Vec<f32>> {
    let (k_out, c_in) = (spec.out_channels as usize, spec.in_channels as usize);
    let (rows, columns) = (rows as usize, columns as usize);
    let mut u = alloc::zeroed_vec::<f32>(COMPONENTS as usize * rows * columns, "the transformed weights")?;
    for k in 0..k_out {
        for c in 0..c_in {
            let g = &weight[(k * c_in + c) * 9..][..9];
            // G g: 4×3, G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1].
            let mut gg = [[0.0f32; 3]; 4];
            for j in 0..3 {
                let (g0, g1, g2) = (g[j], g[3 + j], g[6 + j]);
                gg[0][j] = g0;
                gg[1][j] = 0.5 * (g0 + g1 + g2);
                gg[2][j] = 0.5 * (g0 - g1 + g2);
                gg[3][j] = g2;
            }
            for (i, row) in gg.iter().enumerate() {
                let (a, b, c2) = (row[0], row[1], row[2]);
                let t = [a, 0.5 * (a + b + c2), 0.5 * (a - b + c2), c2];
                for (j, v) in t.into_iter().enumerate() {
                    u[((i * 4 + j) * rows + k) * columns + c] = v;
                }
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
        Error::KernelRefused { kernel: self.tile.name(), reason }
    }

    /// The transforms' WGSL for a problem.
    fn transform_source(&self, problem: &ConvProblem, output: bool) -> Result<String> {
        let [th, tw] = tiles(problem);
        let header = format!(
            "// generated from the convolution's geometry\n\
             const WG: u32 = {TRANSFORM_WG}u;\nconst C: u32 = {c}u;\nconst K: u32 = {k}u;\n\
             const H: u32 = {h}u;\nconst W: u32 = {w}u;\nconst OH: u32 = {oh}u;\nconst OW: u32 = {ow}u;\n\
             const TH: u32 = {th}u;\nconst TW: u32 = {tw}u;\n",
            c = problem.input.c,
            k = problem.output.c,
            h = problem.input.h,
            w = problem.input.w,
            oh = problem.output.h,
            ow = problem.output.w,
        );
        let (entry, wgsl) = match output {
            false => ("input_transform", INPUT_TRANSFORM_WGSL),
            true => ("output_transform", OUTPUT_TRANSFORM_WGSL),
        };
        compose(entry, &[(entry, wgsl)], vec![("config", header)], Precision::F32, false)
    }
}

impl KernelConfig for WinogradKernel {
    fn family(&self) -> &'static dyn Family {
        &WINOGRAD
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
        if let Some(reason) = shape_refusal(spec) {
            return Err(self.refuse(reason));
        }
        self.gemm().config().check_spec(&gemm_spec(spec), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        self.gemm().config().packed_bytes(&gemm_spec(spec))
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        // An infinite or NaN weight would reach every output of its channel through the
        // transforms (as NaN where a direct convolution gives ±inf or finite values).
        if let Some(i) = weight.iter().position(|v| !v.is_finite()) {
            return Err(self.refuse(format!(
                "weight {i} is {}: F(2×2, 3×3) takes finite weights (its transforms would turn it into NaN \
                 across the channel's outputs)",
                weight[i]
            )));
        }
        let gemm = gemm_spec(spec);
        let u = transform_weights(spec, weight)?;
        let zeros = alloc::zeroed_vec::<f32>(gemm.out_channels as usize, "the GEMM's zero bias")?;
        let mut packed = self.gemm().config().pack(&gemm, &u, &zeros)?;
        // The GEMM adds the first 16·C_out (zeros); the output transform reads the rest.
        let mut b = zeros;
        b.extend_from_slice(bias);
        packed.bias = Some(alloc::bytes_of(&b, "the bias")?);
        // The weights as given, for the output transform's direct fallback.
        packed.extra.push((
            FINISHING_WEIGHT_BINDING,
            "wgconv weights as given",
            alloc::bytes_of(weight, "the weights")?,
        ));
        Ok(packed)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        // The tiled kernel's (its gather table and grid) and the weights as given, which the
        // output transform reads (the GEMM's layout declares them; its shader does not).
        const BINDINGS: &[u32] = &[tiled::GATHER_TABLE_BINDING, crate::kernel::GRID_BINDING, FINISHING_WEIGHT_BINDING];
        BINDINGS
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let gemm_problem = gemm_problem(problem)?;
        let gemm = self.gemm().config().shape(&gemm_problem, limits)?;
        let [th, tw] = tiles(problem);
        let (c, k) = (problem.input.c as u64, problem.output.c as u64);
        let tiles = th as u64 * tw as u64;
        Ok(Box::new(DerivedRun {
            gemm,
            params: Box::new(move |p| gemm_params(&gemm_problem, p)),
            staging: Some(Staging {
                source: self.transform_source(problem, false)?,
                bytes_per_image: 4 * COMPONENTS as u64 * c * tiles,
                invocations_per_image: c * tiles,
                workgroup_size: TRANSFORM_WG,
                scaled_input: false,
            }),
            finishing: Some(Finishing {
                source: self.transform_source(problem, true)?,
                bytes_per_image: 4 * COMPONENTS as u64 * k * tiles,
                invocations_per_image: k * tiles,
                workgroup_size: TRANSFORM_WG,
                direct_fallback: true,
            }),
        }))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let spec = Conv2dSpec::new(16, 24, 3).padding(crate::spec::Padding::uniform(1));
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let mut sources = Vec::new();
        for hw in [7, 8] {
            let problem = spec.problem(Shape4::new(2, 16, hw, hw))?;
            let shaped = self.shape(&problem, &limits)?;
            sources.push(shaped.source()?);
            sources.extend(shaped.staging().map(|s| s.source.clone()));
            sources.extend(shaped.finishing().map(|f| f.source.clone()));
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
        Some(Kernel::new(WinogradKernel { tile }))
    }
}

/// The GEMM kernel's parameters: a 1×1 convolution of 16 groups over the transformed input
/// `g` (the staging scratch, from its start) into the products (the finishing pass's
/// scratch), no activation (the output transform applies it).
pub(crate) fn gemm_params(g: &ConvProblem, p: &ConvParams) -> ConvParams {
    let (c, th, tw) = (g.input.c, g.input.h, g.input.w);
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
        c_in_per_group: c / COMPONENTS,
        c_out_per_group: g.output.c / COMPONENTS,
        groups: COMPONENTS,
        k_total: c / COMPONENTS,
        in_offset: 0,
        out_offset: 0,
        flags: 0,
        out_scale: p.out_scale,
    }
}

/// The CPU twin of the three passes: the input transform as `input_transform.wgsl` computes
/// it (zeros outside the image), the 16 GEMMs in f32 (the tiled kernel's own twin is the
/// reference GEMM), and the output transform as `output_transform.wgsl`, with the packed
/// weights of [`transform_weights`].
#[cfg(test)]
pub(crate) fn winograd_twin(problem: &ConvProblem, input: &[f32], weight: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    winograd_twin_rounded(problem, input, weight, bias, |v| v)
}

/// [`winograd_twin`] with the transformed inputs, the transformed weights and the products
/// each rounded by `round` (to f16 for `coop-winograd-f16`).
#[cfg(test)]
pub(crate) fn winograd_twin_rounded(
    problem: &ConvProblem,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    round: impl Fn(f32) -> f32,
) -> Vec<f32> {
    let spec = &problem.spec;
    let (n, c, h, w) =
        (problem.input.n as usize, problem.input.c as usize, problem.input.h as i64, problem.input.w as i64);
    let (k_out, oh, ow) = (problem.output.c as usize, problem.output.h as usize, problem.output.w as usize);
    let [th, tw] = tiles(problem).map(|t| t as usize);
    let u: Vec<f32> = transform_weights(spec, weight).unwrap().into_iter().map(&round).collect();
    let mut out = vec![f32::NAN; problem.output.len() as usize];
    for img in 0..n {
        for ty in 0..th {
            for tx in 0..tw {
                let y0 = (2 * ty) as i64 - spec.padding.top as i64;
                let x0 = (2 * tx) as i64 - spec.padding.left as i64;
                // V per input channel.
                let v: Vec<[f32; 16]> = (0..c)
                    .map(|ci| {
                        let at = |i: i64, j: i64| {
                            let (iy, ix) = (y0 + i, x0 + j);
                            match (0..h).contains(&iy) && (0..w).contains(&ix) {
                                true => input[((img * c + ci) as i64 * h * w + iy * w + ix) as usize],
                                false => 0.0,
                            }
                        };
                        let mut b = [[0.0f32; 4]; 4];
                        for j in 0..4 {
                            let col = [at(0, j), at(1, j), at(2, j), at(3, j)];
                            b[0][j as usize] = col[0] - col[2];
                            b[1][j as usize] = col[1] + col[2];
                            b[2][j as usize] = col[2] - col[1];
                            b[3][j as usize] = col[1] - col[3];
                        }
                        let mut v = [0.0f32; 16];
                        for i in 0..4 {
                            v[i * 4] = round(b[i][0] - b[i][2]);
                            v[i * 4 + 1] = round(b[i][1] + b[i][2]);
                            v[i * 4 + 2] = round(b[i][2] - b[i][1]);
                            v[i * 4 + 3] = round(b[i][1] - b[i][3]);
                        }
                        v
                    })
                    .collect();
                for k in 0..k_out {
                    let mut m = [[0.0f32; 4]; 4];
                    for (xi, mv) in m.iter_mut().flatten().enumerate() {
                        let sum = (0..c).map(|ci| u[(xi * k_out + k) * c + ci] as f64 * v[ci][xi] as f64).sum::<f64>();
                        *mv = round(sum as f32);
                    }
                    let mut t = [[0.0f32; 4]; 2];
                    for j in 0..4 {
                        t[0][j] = m[0][j] + m[1][j] + m[2][j];
                        t[1][j] = m[1][j] - m[2][j] - m[3][j];
                    }
                    let b = bias.map_or(0.0, |b| b[k]);
                    for (r, row) in t.iter().enumerate() {
                        let ys = [row[0] + row[1] + row[2] + b, row[1] - row[2] - row[3] + b];
                        for (s, y) in ys.into_iter().enumerate() {
                            let (oy, ox) = (2 * ty + r, 2 * tx + s);
                            if oy < oh && ox < ow {
                                out[((img * k_out + k) * oh + oy) * ow + ox] = y;
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

    /// The three passes' twin against the reference: odd and even sizes, asymmetric and
    /// no padding, a 1×1 output, bias.
    #[test]
    fn twin_matches_reference() {
        let cases = [
            ("same", Conv2dSpec::new(5, 7, 3).padding(Padding::uniform(1)).with_bias(true), [2, 9, 11]),
            ("valid", Conv2dSpec::new(3, 4, 3), [1, 8, 7]),
            ("one", Conv2dSpec::new(4, 2, 3), [1, 3, 3]),
            ("asym", Conv2dSpec::new(2, 3, 3).padding(Padding::new(2, 0, 1, 3)).with_bias(true), [2, 6, 5]),
        ];
        for (name, spec, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            crate::reference::check_twin(name, &problem, |x, w, b| winograd_twin(&problem, x, w, b));
        }
    }

    /// The padded transform holds the unpadded one's values at the same component, output
    /// and input channel, and zeros in the padding.
    #[test]
    fn padded_weights_hold_the_transform() {
        let spec = Conv2dSpec::new(5, 7, 3);
        let w: Vec<f32> = (0..spec.weight_len()).map(|i| (i % 13) as f32 - 6.0).collect();
        let (u, padded) = (transform_weights(&spec, &w).unwrap(), transform_weights_padded(&spec, &w, 8, 8).unwrap());
        assert_eq!(padded.len(), 16 * 8 * 8);
        for xi in 0..16 {
            for k in 0..8 {
                for c in 0..8 {
                    let want = if k < 7 && c < 5 { u[(xi * 7 + k) * 5 + c] } else { 0.0 };
                    assert_eq!(padded[(xi * 8 + k) * 8 + c], want, "component {xi}, k {k}, c {c}");
                }
            }
        }
    }

    /// The GEMM's bindings come first among the family's (its layout is the GEMM's).
    #[test]
    fn bindings_extend_the_gemm_s() {
        let k = WINOGRAD.reference();
        let gemm = tiled::TILED.with_tile_config(k.tile().unwrap());
        assert_eq!(&k.config().extra_bindings()[..2], gemm.config().extra_bindings());
    }

    #[test]
    fn refusals_name_the_limit() {
        let k = WINOGRAD.reference();
        let limits = KernelLimits::with_workgroup_bytes(16384);
        for (spec, what) in [
            (Conv2dSpec::new(4, 4, 5), "not 5x5"),
            (Conv2dSpec::new(4, 4, 3).stride((2, 2)), "stride 2x2"),
            (Conv2dSpec::new(4, 4, 3).dilation((2, 2)), "dilation 2x2"),
            (Conv2dSpec::new(4, 4, 3).groups(2), "groups 2"),
        ] {
            let e = k.config().check_spec(&spec, &limits).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("F(2×2, 3×3)"), "{e}");
        }
        assert!(k.config().check_spec(&Conv2dSpec::new(4, 4, 3), &limits).is_ok());
    }
}
