//! The row-band family (`coop-band-f16`, `band.wgsl`): an implicit GEMM on cooperative
//! matrices that stages the input rows a workgroup needs once and loads A fragments straight
//! from them. Opt-in: slower than `coop-f16` on the H100 (its ~45 KiB of workgroup memory
//! allow one workgroup per SM under NVIDIA's Vulkan driver), so selection never picks it.
//! It applies where the column dilation is 1 and the column stride ≤ the band depth. When
//! KW is not a multiple of the column stride, a NaN input also turns into NaN the outputs up
//! to one stride beyond its receptive field (its padded taps meet zero weights, and
//! 0 × NaN is NaN). Here: its config, which convolutions it runs, its geometry for a
//! problem, its packed weights, and a CPU twin of the shader's indexing that the tests
//! compare with the reference (lavapipe has no cooperative matrices, so the shader itself
//! only runs on GPUs that do).

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::coop::coop_missing;
use crate::families::coop::f16_bytes;
use crate::families::coop::fragments::{fragment_layout, fragment_modules, FragmentCode};
use crate::kernel::{
    compose, workgroups_u32, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, RowGrid, Shaped, Target,
    COOPERATIVE_TARGETS, GRID_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem};

const BAND_WGSL: &str = include_str!("band.wgsl");

/// Accumulator fragments one warp may own: its operands come from workgroup memory without
/// a gather, so registers go to a larger warp tile (fewer operand loads per multiply).
pub const MAX_BAND_FRAGMENTS: u32 = 12;

/// The row-band kernel's config, named like `m128n96d16-w8-s1`: `block_m` output positions
/// (whole 16-column fragments of up to `block_m / 16` rows) × `block_n` channels per
/// workgroup, band depth `block_k` (channel × column-phase slots per band column, a multiple
/// of 16), `warps`, and `stages` (1 or 2) buffers of kernel-row weights (with 2 the next
/// row's weights are copied while the current row multiplies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BandConfig {
    /// Output positions per workgroup.
    pub block_m: u32,
    /// Output channels per workgroup.
    pub block_n: u32,
    /// The band depth CP.
    pub block_k: u32,
    /// Warps per workgroup.
    pub warps: u32,
    /// Weight buffers.
    pub stages: u32,
}

impl BandConfig {
    /// The reference config: 8 warps of 2×3 fragments over 128 positions × 96 channels, the
    /// family's fastest on AlexNet conv1 on the H100.
    pub const REFERENCE: BandConfig = BandConfig { block_m: 128, block_n: 96, block_k: 16, warps: 8, stages: 1 };

    const fn new(block_m: u32, block_n: u32, block_k: u32, warps: u32, stages: u32) -> Self {
        BandConfig { block_m, block_n, block_k, warps, stages }
    }

    fn refuse(&self, reason: impl Into<String>) -> Error {
        Error::KernelRefused { kernel: format!("coop-band-f16:{self}"), reason: reason.into() }
    }

    /// Invocations per workgroup.
    pub fn invocations(&self) -> u32 {
        self.warps.saturating_mul(32)
    }

    /// The warp layout `(warps_m, warps_n, fm, fn)`, as the cooperative kernels'.
    pub fn band_layout(&self) -> Result<(u32, u32, u32, u32)> {
        for (name, v) in [("block_m", self.block_m), ("block_n", self.block_n), ("block_k", self.block_k)] {
            if v == 0 || v > 4096 || !v.is_multiple_of(16) {
                return Err(self.refuse(format!("{name} must be a multiple of 16 in 16..=4096, got {v}")));
            }
        }
        if ![2, 4, 8, 16].contains(&self.warps) {
            return Err(self.refuse(format!("warps must be one of [2, 4, 8, 16], got {}", self.warps)));
        }
        if !(1..=2).contains(&self.stages) {
            return Err(self.refuse(format!("the row-band kernel has 1 or 2 weight stages, got {}", self.stages)));
        }
        if self.block_k > 128 {
            return Err(self.refuse(format!("band depth must be at most 128, got {}", self.block_k)));
        }
        fragment_layout(self.block_m / 16, self.block_n / 16, self.warps, MAX_BAND_FRAGMENTS, &self.to_string())
    }

    /// Workgroup memory besides the band and weight stages: one 16×16 f32 scratch fragment
    /// per warp. Those two depend on the problem.
    pub fn band_scratch_bytes(&self) -> u64 {
        self.warps as u64 * 1024
    }

    /// Checks the config against a device's limits (the band itself is checked against the
    /// problem when the op is planned).
    pub fn validate_band(&self, limits: &KernelLimits) -> Result<()> {
        self.band_layout()?;
        let inv = self.invocations();
        if inv > limits.invocations_per_workgroup.min(limits.workgroup_size_x) {
            return Err(self.refuse(format!(
                "{inv} invocations exceed the device's {} per workgroup ({})",
                limits.invocations_per_workgroup.min(limits.workgroup_size_x),
                limits.invocations_limit_name()
            )));
        }
        if self.band_scratch_bytes() > limits.workgroup_storage_bytes as u64 {
            return Err(self.refuse(format!(
                "{} B of workgroup memory exceed the device's {} B (max_compute_workgroup_storage_size)",
                self.band_scratch_bytes(),
                limits.workgroup_storage_bytes
            )));
        }
        Ok(())
    }

    /// Parses the name back.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || Error::ConfigParse(format!("cannot parse row-band config {s:?}: expected e.g. m128n96d16-w8-s1"));
        let num = |t: &str| t.parse::<u32>().map_err(|_| bad());
        let parts: Vec<&str> = s.split('-').collect();
        let [mnd, w, st] = parts[..] else {
            return Err(bad());
        };
        let (m, rest) = mnd.strip_prefix('m').and_then(|r| r.split_once('n')).ok_or_else(bad)?;
        let (n, d) = rest.split_once('d').ok_or_else(bad)?;
        Ok(BandConfig::new(
            num(m)?,
            num(n)?,
            num(d)?,
            num(w.strip_prefix('w').ok_or_else(bad)?)?,
            num(st.strip_prefix('s').ok_or_else(bad)?)?,
        ))
    }
}

impl std::fmt::Display for BandConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "m{}n{}d{}-w{}-s{}", self.block_m, self.block_n, self.block_k, self.warps, self.stages)
    }
}

/// The declared sweep, the reference first.
pub fn band_sweep() -> Vec<BandConfig> {
    use BandConfig as B;
    vec![
        B::REFERENCE,              // 8 warps of 2×3 fragments
        B::new(128, 96, 16, 4, 1), // 4 warps of 4×3
        B::new(64, 96, 16, 4, 1),  // 4 warps of 2×3
        B::new(64, 96, 16, 4, 2),
        B::new(64, 96, 16, 2, 1), // 2 warps of 4×3
        B::new(64, 96, 16, 2, 2),
        B::new(128, 48, 16, 2, 1), // 2 warps of 4×3, half the channels
        B::new(64, 48, 16, 2, 2),  // 2 warps of 2×3
        B::new(128, 96, 32, 4, 1),
        B::new(64, 64, 16, 4, 1),
    ]
}

/// The compile-time geometry of the band, derived from a problem by [`BandGeometry::shape`]:
/// the shader's workgroup arrays are sized by it and its loops over fragments and weight
/// rows have constant bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BandShape {
    /// Input rows in the band.
    pub band_rows: u32,
    /// Band columns.
    pub band_cols: u32,
    /// Column stride.
    pub stride_w: u32,
    /// Row stride.
    pub stride_h: u32,
    /// Row dilation.
    pub dil_h: u32,
    /// Input channels per band.
    pub chunk_ch: u32,
    /// Bands per group.
    pub chunks: u32,
    /// K fragments per kernel row.
    pub k_frags: u32,
    /// Fragments per output row of a workgroup.
    pub fx: u32,
    /// Output rows per workgroup.
    pub wg_rows: u32,
}

/// The K side of the row-band layout, fixed by the spec and the config alone (the weights
/// are packed by it before any input size is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BandK {
    /// The column stride S (the phases per band column).
    pub stride_w: u32,
    /// Band columns one output column reads: ⌈KW / S⌉.
    pub taps: u32,
    /// Input channels per band: `block_k / stride_w` (the band depth holds channel × phase).
    pub chunk_ch: u32,
    /// Bands per group: ⌈(C_in/g) / chunk_ch⌉.
    pub chunks: u32,
    /// 16-wide K fragments per kernel row: taps · block_k / 16.
    pub k_frags: u32,
    /// The group's output channels padded to whole `block_n` blocks.
    pub n_pad: u32,
}

impl BandK {
    /// For a convolution [`band_refusal`] accepts (column stride ≤ `block_k`; a larger one is
    /// clamped here so that nothing divides by zero).
    pub fn of(spec: &Conv2dSpec, cfg: &BandConfig) -> BandK {
        let sw = spec.stride[1].clamp(1, cfg.block_k.max(1));
        let taps = spec.kernel[1].div_ceil(sw);
        let chunk_ch = cfg.block_k / sw;
        BandK {
            stride_w: sw,
            taps,
            chunk_ch,
            chunks: spec.in_channels_per_group().div_ceil(chunk_ch),
            // Saturating: absurd specs must reach the refusals, not overflow on the way.
            k_frags: taps.saturating_mul(cfg.block_k) / 16,
            n_pad: spec.out_channels_per_group().checked_next_multiple_of(cfg.block_n).unwrap_or(u32::MAX),
        }
    }
}

/// The row-band kernel's geometry for one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BandGeometry {
    /// 16-column fragments per output row of a workgroup.
    pub fx: u32,
    /// Output rows per workgroup.
    pub wg_rows: u32,
    /// Workgroups along an output row, and along the output rows of an image.
    pub x_tiles: u32,
    pub row_tiles: u32,
    /// The largest fragment start: OW − 16 (0 for rows narrower than a fragment).
    pub x_clamp: u32,
    /// Band columns (of `block_k` slots each).
    pub band_cols: u32,
    /// Input rows in the band.
    pub band_rows: u32,
    /// The K side: channels per band, bands, K fragments per kernel row.
    pub k: BandK,
    /// Band elements: `band_rows · band_cols · block_k` (the shader's `band` array).
    pub band_elems: u32,
}

impl BandGeometry {
    /// The pipeline's compile-time part.
    pub fn shape(&self, spec: &Conv2dSpec) -> BandShape {
        BandShape {
            band_rows: self.band_rows,
            band_cols: self.band_cols,
            stride_w: spec.stride[1],
            stride_h: spec.stride[0],
            dil_h: spec.dilation[0],
            chunk_ch: self.k.chunk_ch,
            chunks: self.k.chunks,
            k_frags: self.k.k_frags,
            fx: self.fx,
            wg_rows: self.wg_rows,
        }
    }
}

/// The geometries of a few real problems for a config, on a device with 48 KiB of workgroup
/// memory, in this order: AlexNet conv1 (11×11, stride 4), a ResNet 3×3 (64 channels,
/// 56×56, stride 1), a 1×1 (256 → 64, 28×28: several channel bands), a 7×7 stride-2 stem
/// with row dilation 2; those the config cannot run are left out. What the naga check
/// validates.
pub fn representative_shapes(cfg: &BandConfig) -> Vec<BandShape> {
    use crate::spec::{Padding, Shape4};
    let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
    let problems = [
        (Conv2dSpec::new(3, 96, 11).stride((4, 4)).padding(Padding::uniform(2)), Shape4::new(1, 3, 224, 224)),
        (Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1)), Shape4::new(1, 64, 56, 56)),
        (Conv2dSpec::new(256, 64, 1), Shape4::new(1, 256, 28, 28)),
        (
            Conv2dSpec::new(3, 64, 7).stride((2, 2)).dilation((2, 1)).padding(Padding::uniform(3)),
            Shape4::new(1, 3, 64, 64),
        ),
    ];
    problems
        .iter()
        .filter_map(|(spec, shape)| {
            let problem = spec.problem(*shape).ok()?;
            let geo = band_geometry(spec, problem.output.h, problem.output.w, cfg, &limits).ok()?;
            Some(geo.shape(spec))
        })
        .collect()
}

/// Workgroup bytes of the row-band kernel's weight stages: `stages` kernel rows of
/// `k_frags·16` rows × (`block_n` + 8) f16.
pub fn weight_stage_bytes(cfg: &BandConfig, k_frags: u32) -> u64 {
    cfg.stages as u64 * k_frags as u64 * 16 * (cfg.block_n as u64 + 8) * 2
}

/// Why the row-band kernel cannot run a convolution, if it cannot.
pub fn band_refusal(spec: &Conv2dSpec, cfg: &BandConfig) -> Option<String> {
    if spec.dilation[1] != 1 {
        return Some(format!("the row-band kernel needs column dilation 1, got {}", spec.dilation[1]));
    }
    if spec.stride[1] > cfg.block_k {
        return Some(format!("column stride {} exceeds the band depth block_k = {}", spec.stride[1], cfg.block_k));
    }
    None
}

/// The row-band geometry with the widest rows (fewest recomputed columns) whose band fits
/// the device's workgroup memory, trying fragments per row from the most the output width
/// can use down to one.
pub fn band_geometry(
    spec: &Conv2dSpec,
    oh: u32,
    ow: u32,
    cfg: &BandConfig,
    limits: &KernelLimits,
) -> Result<BandGeometry> {
    if let Some(reason) = band_refusal(spec, cfg) {
        return Err(Error::KernelRefused { kernel: cfg.to_string(), reason });
    }
    let frags = cfg.block_m / 16;
    let sh = spec.stride[0];
    let k = BandK::of(spec, cfg);
    let (taps, k_frags) = (k.taps, k.k_frags);
    let span_h = spec.dilation[0] as u64 * (spec.kernel[0] as u64 - 1);
    let room = (limits.workgroup_storage_bytes as u64)
        .saturating_sub(cfg.band_scratch_bytes())
        .saturating_sub(weight_stage_bytes(cfg, k_frags));
    let mut smallest = u64::MAX;
    for fx in (1..=frags.min(ow.div_ceil(16)).max(1)).rev() {
        let wg_rows = frags / fx;
        let band_rows = ((wg_rows as u64).saturating_sub(1) * sh as u64).saturating_add(span_h + 1);
        // Fragment starts span at most the row (they are clamped to OW − 16).
        let band_cols = (16 * fx).min(ow.max(16)) as u64 + taps as u64 - 1;
        let band_elems = band_rows.saturating_mul(band_cols).saturating_mul(cfg.block_k as u64);
        smallest = smallest.min(band_elems);
        if band_elems.saturating_mul(2) > room {
            continue;
        }
        return Ok(BandGeometry {
            fx,
            wg_rows,
            x_tiles: ow.div_ceil(16 * fx),
            row_tiles: oh.div_ceil(wg_rows),
            x_clamp: ow.max(16) - 16,
            band_cols: band_cols as u32,
            band_rows: band_rows as u32,
            k,
            band_elems: band_elems as u32,
        });
    }
    Err(Error::KernelRefused {
        kernel: cfg.to_string(),
        reason: format!(
            "the row-band kernel's band needs {} B of workgroup memory at its smallest, the device has {} B beside its weight stages and scratch",
            smallest.saturating_mul(2),
            room
        ),
    })
}

/// Elements of [`pack_band_weights`]' output.
pub fn band_weight_len(spec: &Conv2dSpec, cfg: &BandConfig) -> u64 {
    let k = BandK::of(spec, cfg);
    spec.groups as u64 * k.chunks as u64 * spec.kernel[0] as u64 * k.k_frags as u64 * 16 * k.n_pad as u64
}

/// Weights as the row-band kernel reads them: `[group][chunk][ky][k][n_pad]` with
/// k = kx'·block_k + c·S + ph for tap kx = kx'·S + ph of channel chunk·(block_k/S) + c
/// (S = column stride); zeros for taps past KW, channels past C_in/g and columns past
/// the group's C_out. For convolutions [`band_refusal`] accepts.
pub fn pack_band_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &BandConfig) -> Result<Vec<f32>> {
    let (kh, kw) = (spec.kernel[0] as usize, spec.kernel[1] as usize);
    let k = BandK::of(spec, cfg);
    let cp = cfg.block_k as usize;
    let (sw, chunk_ch, chunks, taps, n_pad) =
        (k.stride_w as usize, k.chunk_ch as usize, k.chunks as usize, k.taps as usize, k.n_pad as usize);
    let cin_g = spec.in_channels_per_group() as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let k_row = taps * cp;
    let mut packed = alloc::zeroed_vec::<f32>(band_weight_len(spec, cfg) as usize, "the packed band weights")?;
    for g in 0..spec.groups as usize {
        for chunk in 0..chunks {
            for ky in 0..kh {
                let row0 = ((g * chunks + chunk) * kh + ky) * k_row;
                for tap in 0..taps {
                    for cl in 0..chunk_ch {
                        let c = chunk * chunk_ch + cl;
                        for ph in 0..sw {
                            let kx = tap * sw + ph;
                            if c >= cin_g || kx >= kw {
                                continue;
                            }
                            let k = row0 + tap * cp + cl * sw + ph;
                            for n in 0..cout_g {
                                packed[k * n_pad + n] = weight[(((g * cout_g + n) * cin_g + c) * kh + ky) * kw + kx];
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(packed)
}

/// The CPU twin of `band.wgsl`'s indexing: the same tiles (walked by nested
/// loops, not the shader's linear tile number), band staging, fragment offsets, packed-weight
/// reads and store rules, in plain loops, with the band sized exactly as the shader's
/// (f64 sums of the operands as given: no f16 rounding). Not modelled: the warps' share
/// of the fragments, and the weights' trip through vec4 loads and `b_tile`. `packed` is [`pack_band_weights`]' output; the result is
/// `[N, C_out, OH, OW]` with untouched outputs left NaN, so a store rule that misses an
/// output shows.
#[cfg(test)]
pub fn conv_band(
    problem: &crate::spec::ConvProblem,
    cfg: &BandConfig,
    geometry: &BandGeometry,
    input: &[f32],
    packed: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let spec = &problem.spec;
    let (c_in, h, w) = (problem.input.c as usize, problem.input.h as i64, problem.input.w as i64);
    let (c_out, oh, ow) = (problem.output.c as usize, problem.output.h as usize, problem.output.w as usize);
    let geo = geometry;
    let cp = cfg.block_k as usize;
    let (sh, sw) = (spec.stride[0] as usize, spec.stride[1] as usize);
    let (kh, dh) = (spec.kernel[0] as usize, spec.dilation[0] as usize);
    let cin_g = spec.in_channels_per_group() as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let band_k = BandK::of(spec, cfg);
    let n_pad = band_k.n_pad as usize;
    let frags = (cfg.block_m / 16) as usize;
    let (fx, wg_rows, band_cols) = (geo.fx as usize, geo.wg_rows as usize, geo.band_cols as usize);
    let x_clamp = geo.x_clamp as usize;
    let n_tiles = n_pad / cfg.block_n as usize;
    let mut out = vec![f32::NAN; problem.output.len() as usize];
    let mut band = vec![0.0f32; geo.band_elems as usize];
    for g in 0..spec.groups as usize {
        for img in 0..problem.input.n as usize {
            for yt in 0..geo.row_tiles as usize {
                for xt in 0..geo.x_tiles as usize {
                    for nt in 0..n_tiles {
                        let (oy0, ox0, n0) = (yt * wg_rows, xt * 16 * fx, nt * cfg.block_n as usize);
                        let xb = ox0.min(x_clamp);
                        let frag_row = |q: usize| (q / fx).min(wg_rows - 1);
                        let nominal = |q: usize| ox0 + (q % fx) * 16;
                        let frag_x = |q: usize| nominal(q).min(x_clamp);
                        let mut acc = vec![0.0f64; frags * 16 * cfg.block_n as usize];
                        for chunk in 0..geo.k.chunks as usize {
                            // stage_band
                            for col in 0..band_cols * sw {
                                let ph = col % sw;
                                let ix = ((xb * sw + col) as i64) - spec.padding.left as i64;
                                for cl in (0..cp.div_ceil(sw)).take_while(|cl| cl * sw + ph < cp) {
                                    let c = chunk * geo.k.chunk_ch as usize + cl;
                                    for br in 0..geo.band_rows as usize {
                                        let iy = (oy0 * sh + br) as i64 - spec.padding.top as i64;
                                        let ok = (0..w).contains(&ix)
                                            && (0..h).contains(&iy)
                                            && cl < geo.k.chunk_ch as usize
                                            && c < cin_g;
                                        let v = if ok {
                                            input[((img * c_in + g * cin_g + c) * h as usize + iy as usize)
                                                * w as usize
                                                + ix as usize]
                                        } else {
                                            0.0
                                        };
                                        band[br * band_cols * cp + (col / sw) * cp + ph + cl * sw] = v;
                                    }
                                }
                            }
                            // the K loop
                            let k_chunk = (g * geo.k.chunks as usize + chunk) * kh * geo.k.k_frags as usize * 16;
                            for ky in 0..kh {
                                for kf in 0..geo.k.k_frags as usize {
                                    let a_off = ky * dh * band_cols * cp + kf * 16;
                                    let b_row = k_chunk + (ky * geo.k.k_frags as usize + kf) * 16;
                                    for q in 0..frags {
                                        let col = (frag_x(q) - xb).min(band_cols + 1 - 16 - band_k.taps as usize);
                                        let a_base = (frag_row(q) * sh * band_cols + col) * cp;
                                        for m in 0..16 {
                                            for k in 0..16 {
                                                let a = band[a_base + a_off + m * cp + k] as f64;
                                                for n in 0..cfg.block_n as usize {
                                                    let b = packed[(b_row + k) * n_pad + n0 + n] as f64;
                                                    acc[(q * 16 + m) * cfg.block_n as usize + n] += a * b;
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        // store_fragment
                        for q in 0..frags {
                            let oy = oy0 + frag_row(q);
                            if q >= fx * wg_rows || oy >= oh {
                                continue;
                            }
                            for m in 0..16 {
                                let ox = frag_x(q) + m;
                                for n in 0..cfg.block_n as usize {
                                    let nn = n0 + n;
                                    if ox < nominal(q) || ox >= ow || nn >= cout_g {
                                        continue;
                                    }
                                    let oc = g * cout_g + nn;
                                    let v = acc[(q * 16 + m) * cfg.block_n as usize + n] as f32
                                        + bias.map_or(0.0, |b| b[oc]);
                                    out[((img * c_out + oc) * oh + oy) * ow + ox] = v;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The family.
pub(crate) struct Band;
/// Its one instance in the registry.
pub(crate) static BAND: Band = Band;

impl Family for Band {
    fn name(&self) -> &'static str {
        "coop-band-f16"
    }
    fn precision(&self) -> Precision {
        Precision::F16Accum32
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(BandKernel(BandConfig::parse(config)?)))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(BandKernel(BandConfig::REFERENCE))
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        band_sweep().into_iter().map(|c| Kernel::new(BandKernel(c))).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
}

/// A kernel of the row-band family.
#[derive(Debug)]
pub(crate) struct BandKernel(BandConfig);

impl KernelConfig for BandKernel {
    fn family(&self) -> &'static dyn Family {
        &BAND
    }
    fn name(&self) -> String {
        self.0.to_string()
    }
    fn check_shape(&self) -> Result<()> {
        self.0.band_layout().map(|_| ())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.0.validate_band(limits)
    }
    /// Runs for every input size where its geometry of one fragment per row (the last one
    /// `band_geometry` tries for every width) fits; a spec refused here might still fit
    /// some widths with wider rows.
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        band_geometry(spec, 1, 1, &self.0, limits).map(|_| ())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        band_weight_len(spec, &self.0).saturating_mul(2)
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        Ok(Packed::weights(f16_bytes(pack_band_weights(spec, weight, &self.0)?)?))
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[GRID_BINDING]
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        let g = band_geometry(&problem.spec, problem.output.h, problem.output.w, &self.0, limits)?;
        Ok(Box::new(BandShaped { cfg: self.0, geometry: g, spec: problem.spec }))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let shapes = representative_shapes(&self.0);
        if shapes.is_empty() {
            return Err(self.0.refuse("no representative problem fits a 48 KiB device"));
        }
        shapes.iter().map(|s| source(&self.0, s)).collect()
    }
    fn invocations(&self) -> u32 {
        self.0.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        None
    }
}

/// The row-band kernel composed for one problem.
struct BandShaped {
    cfg: BandConfig,
    geometry: BandGeometry,
    spec: Conv2dSpec,
}

impl Shaped for BandShaped {
    fn source(&self) -> Result<String> {
        source(&self.cfg, &self.geometry.shape(&self.spec))
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        let b = &self.geometry;
        let n_pad = self.spec.out_channels_per_group().next_multiple_of(self.cfg.block_n);
        let mut g = RowGrid {
            n_pad,
            n_tiles: n_pad / self.cfg.block_n,
            row_tiles: b.row_tiles,
            x_tiles: b.x_tiles,
            x_clamp: b.x_clamp,
            ..Default::default()
        };
        let total = g.n_tiles as u64 * b.x_tiles as u64 * b.row_tiles as u64 * p.batch as u64 * self.spec.groups as u64;
        g.total_tiles = workgroups_u32(total)?;
        Ok((bytemuck::bytes_of(&g).to_vec(), total))
    }
}

/// The kernel's WGSL for a config and band geometry: fragment (i, j) of a warp is block
/// fragment `q0 + i` along M, read row-major from the band, and channels `wn0 + 16·j`
/// along N.
fn source(cfg: &BandConfig, band: &BandShape) -> Result<String> {
    let (wm, wn, fm, fn_) = cfg.band_layout()?;
    let header = format!(
        "const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {}u;\nconst WG: u32 = {}u;\nconst STAGES: u32 = {}u;\n\
         const WARPS_M: u32 = {wm}u;\nconst WARPS_N: u32 = {wn}u;\nconst FM: u32 = {fm}u;\nconst FN: u32 = {fn_}u;\n\
         const BAND_ROWS: u32 = {}u;\nconst BAND_COLS: u32 = {}u;\nconst SW: u32 = {}u;\n\
         const SH: u32 = {}u;\nconst DH: u32 = {}u;\nconst CHUNK_CH: u32 = {}u;\nconst CHUNKS: u32 = {}u;\n\
         const K_FRAGS: u32 = {}u;\nconst FX: u32 = {}u;\nconst WG_ROWS: u32 = {}u;\n",
        cfg.block_m,
        cfg.block_n,
        cfg.block_k,
        cfg.invocations(),
        cfg.stages,
        band.band_rows,
        band.band_cols,
        band.stride_w,
        band.stride_h,
        band.dil_h,
        band.chunk_ch,
        band.chunks,
        band.k_frags,
        band.fx,
        band.wg_rows
    );
    let mut generated = fragment_modules(
        fm,
        fn_,
        &FragmentCode {
            a_load: &|i, _| format!("coopLoadT<coop_mat16x16<f16, A>>(&band[a_base_{i} + a_off], CP)"),
            b_load: &|j, tile| format!("coopLoadT<coop_mat16x16<f16, B>>(&{tile}[b_at + {}u], B_STRIDE)", j * 16),
            split: false,
            init_row: &|i| format!("let a_base_{i} = frag_band_offset(t, q0 + {i}u);\n"),
            store: &|i, j| {
                format!(
                    "coopStore(acc_{i}_{j}, &c_scratch[scratch], FRAG);\nstore_fragment(t, warp, lane, q0 + {i}u, wn0 + {}u);\n",
                    j * 16
                )
            },
        },
    );
    generated.push(("config", header));
    compose("band", &[("band", BAND_WGSL)], generated, Precision::F16Accum32, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Padding, Shape4};

    /// The twin against the reference on shapes that exercise every geometry rule: clamped
    /// last fragments, rows narrower than a fragment, idle fragments, partial row tiles,
    /// several channel chunks, groups, KW not a multiple of the stride, row dilation.
    #[test]
    fn twin_matches_reference() {
        let cases: Vec<(&str, Conv2dSpec, Shape4, BandConfig)> = vec![
            (
                "alexnet_like",
                Conv2dSpec::new(3, 20, 11).stride((4, 4)).padding(Padding::uniform(2)).with_bias(true),
                Shape4::new(2, 3, 63, 75),
                BandConfig::REFERENCE,
            ),
            (
                "narrow_rows_3x3",
                Conv2dSpec::new(5, 17, 3).padding(Padding::new(1, 0, 2, 1)),
                Shape4::new(1, 5, 9, 7),
                BandConfig::new(64, 96, 16, 4, 1),
            ),
            (
                "chunks_groups_rowdil",
                Conv2dSpec::new(40, 34, 3).groups(2).stride((2, 3)).dilation((2, 1)).padding(Padding::uniform(2)),
                Shape4::new(2, 40, 17, 40),
                BandConfig::new(128, 96, 16, 4, 1),
            ),
            (
                "wide_1x1_cp32",
                Conv2dSpec::new(70, 9, 1).with_bias(true),
                Shape4::new(1, 70, 3, 37),
                BandConfig::new(128, 96, 32, 4, 1),
            ),
        ];
        for (name, spec, shape, cfg) in cases {
            let problem = spec.problem(shape).unwrap();
            let geometry = band_geometry(
                &spec,
                problem.output.h,
                problem.output.w,
                &cfg,
                &KernelLimits::with_workgroup_bytes(48 * 1024),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            crate::reference::check_twin(&format!("{name} ({geometry:?})"), &problem, |x, w, bias| {
                conv_band(&problem, &cfg, &geometry, x, &pack_band_weights(&spec, w, &cfg).unwrap(), bias)
            });
        }
    }

    #[test]
    fn geometry_narrows_rows_to_fit_and_refuses_what_cannot() {
        let spec = Conv2dSpec::new(3, 96, 11).stride((4, 4)).padding(Padding::uniform(2));
        let cfg = BandConfig::REFERENCE;
        let g = band_geometry(&spec, 55, 55, &cfg, &KernelLimits::with_workgroup_bytes(48 * 1024)).unwrap();
        assert_eq!((g.fx, g.wg_rows, g.band_rows, g.band_cols, g.k.k_frags, g.k.chunks), (4, 2, 15, 57, 3, 1));
        // Less memory: fewer fragments per row, more rows.
        let g = band_geometry(&spec, 55, 55, &cfg, &KernelLimits::with_workgroup_bytes(40 * 1024)).unwrap();
        let used = g.band_elems as u64 * 2 + cfg.band_scratch_bytes() + weight_stage_bytes(&cfg, g.k.k_frags);
        assert!(g.fx < 4 && used <= 40 * 1024, "{g:?}");
        assert!(band_geometry(&spec, 55, 55, &cfg, &KernelLimits::with_workgroup_bytes(8 * 1024)).is_err());
        let dilated = Conv2dSpec::new(3, 8, 3).dilation((1, 2));
        assert!(band_refusal(&dilated, &cfg).is_some());
        let strided = Conv2dSpec::new(3, 8, 3).stride((1, 17));
        assert!(band_refusal(&strided, &cfg).is_some());
    }
}
