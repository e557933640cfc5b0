//! The stem family (`coop-stem-f16`, `stem.wgsl`): an implicit GEMM on cooperative matrices
//! for convolutions with few input channels per group — a network's first layer. It lays
//! the input out space-to-depth by the strides; warps that multiply hold their weights in
//! registers beside helper warps that stage input rows into a ring and store output rows,
//! one row apart (see [`StemLayout`]). It runs convolutions without dilation whose K after
//! the layout fits [`MAX_STEM_K_FRAGS`] fragments. Where KH or KW is not a multiple of its
//! stride, a NaN input also makes NaN the outputs up to one stride beyond its receptive
//! field (the padded taps meet zero weights; 0 × NaN is NaN). Its two roles reach the
//! workgroup barrier from two loops, which SPIR-V does not promise to support: selection
//! makes it a default only on NVIDIA, where it is tested.
//!
//! Here: its config, which convolutions it runs, its geometry for a problem, its packed
//! weights, and a CPU twin of the shader's indexing that the tests compare with the
//! reference (lavapipe has no cooperative matrices, so the shader itself only runs on GPUs
//! that do).
//!
//! The kernel holds each multiplying warp's weights in registers, so it runs convolutions
//! whose K after the space-to-depth layout is small: few input channels per group, as in a
//! network's first layer (AlexNet conv1: 27 K fragments, K = 432).

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::coop::{coop_missing, f16_bytes};
use crate::kernel::{
    compose, workgroups_u32, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, RowGrid, Shaped, Target,
    COOPERATIVE_TARGETS, GRID_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem};

const STEM_WGSL: &str = include_str!("stem.wgsl");

/// Accumulator fragments one multiplying warp may own (its registers also hold the warp's
/// weights).
pub const MAX_STEM_FRAGMENTS: u32 = 4;

/// The stem kernel's config, named like `m32n96-f2-h6`: a workgroup row of `block_m` output
/// columns (whole 16-column fragments) × `block_n` channels; multiplying warps of `fm` M
/// fragments each, one per N fragment and share of the row; and `helpers` more warps that
/// stage rows and store outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StemConfig {
    /// Output columns per workgroup row.
    pub block_m: u32,
    /// Output channels per workgroup.
    pub block_n: u32,
    /// M fragments per multiplying warp.
    pub fm: u32,
    /// Helper warps.
    pub helpers: u32,
}

/// How the stem kernel's warps share a workgroup's row of `block_m` output columns ×
/// `block_n` channels ([`StemConfig::stem_layout`]). Warps `0 .. warps_m·warps_n` multiply:
/// warp w owns M fragments (w mod warps_m)·fm .. and N fragment w / warps_m, whose weights
/// it holds in registers. The `helpers` after them stage input rows and store output rows,
/// so that while the multiplying warps work on row i, the helpers store row i − 1 and
/// stage row i + TY: one barrier per row, and the phases overlap instead of adding up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StemLayout {
    /// M (output-column) fragments per multiplying warp.
    pub fm: u32,
    /// Multiplying warps along M.
    pub warps_m: u32,
    /// N fragments: one per multiplying warp.
    pub warps_n: u32,
    /// Warps that stage and store.
    pub helpers: u32,
}

impl StemLayout {
    /// Multiplying warps.
    pub fn mma_warps(&self) -> u32 {
        self.warps_m * self.warps_n
    }
}

impl StemConfig {
    /// The reference config: 32 output columns × 96 channels; 6 warps multiply (2 M
    /// fragments of one N fragment each), 6 stage and store.
    pub const REFERENCE: StemConfig = StemConfig { block_m: 32, block_n: 96, fm: 2, helpers: 6 };

    const fn new(block_m: u32, block_n: u32, fm: u32, helpers: u32) -> Self {
        StemConfig { block_m, block_n, fm, helpers }
    }

    fn refuse(&self, reason: impl Into<String>) -> Error {
        Error::KernelRefused { kernel: format!("coop-stem-f16:{self}"), reason: reason.into() }
    }

    /// Warps per workgroup: the multiplying ones and the helpers.
    pub fn warps(&self) -> u32 {
        let mma = (self.block_m / 16 / self.fm.max(1)).saturating_mul(self.block_n / 16);
        mma.saturating_add(self.helpers)
    }
    /// Invocations per workgroup.
    pub fn invocations(&self) -> u32 {
        self.warps().saturating_mul(32)
    }

    /// The warp layout (see [`StemLayout`]).
    pub fn stem_layout(&self) -> Result<StemLayout> {
        for (name, v) in [("block_m", self.block_m), ("block_n", self.block_n)] {
            if v == 0 || v > 4096 || !v.is_multiple_of(16) {
                return Err(self.refuse(format!("{name} must be a multiple of 16 in 16..=4096, got {v}")));
            }
        }
        let (frags_m, warps_n) = (self.block_m / 16, self.block_n / 16);
        let fm = self.fm;
        if fm == 0 || !frags_m.is_multiple_of(fm) {
            return Err(self.refuse(format!("{fm} M fragments per warp do not divide the {frags_m} of a row")));
        }
        if fm > MAX_STEM_FRAGMENTS {
            return Err(self.refuse(format!("{fm} M fragments per warp exceed the stem kernel's {MAX_STEM_FRAGMENTS}")));
        }
        let warps_m = frags_m / fm;
        if self.helpers == 0 || self.helpers > 32 {
            return Err(self.refuse(format!(
                "the stem kernel needs 1..=32 helper warps to stage rows and store outputs, got {}",
                self.helpers
            )));
        }
        if !(self.helpers * 32).is_multiple_of(self.block_m) {
            return Err(self.refuse(format!(
                "the stem kernel's {} helper warps store whole columns: their {} invocations must be \
                 a multiple of block_m {}",
                self.helpers,
                self.helpers * 32,
                self.block_m
            )));
        }
        Ok(StemLayout { fm, warps_m, warps_n, helpers: self.helpers })
    }

    /// Checks the config against a device's limits (its ring of input rows is checked
    /// against the problem when the op is planned).
    pub fn validate_stem(&self, limits: &KernelLimits) -> Result<()> {
        self.stem_layout()?;
        let inv = self.invocations();
        let max = limits.invocations_per_workgroup.min(limits.workgroup_size_x);
        if inv > max {
            return Err(self.refuse(format!(
                "{inv} invocations exceed the device's {max} per workgroup ({})",
                limits.invocations_limit_name()
            )));
        }
        let bytes = stem_scratch_bytes(self);
        if bytes > limits.workgroup_storage_bytes as u64 {
            return Err(self.refuse(format!(
                "{bytes} B of workgroup memory exceed the device's {} B (max_compute_workgroup_storage_size)",
                limits.workgroup_storage_bytes
            )));
        }
        Ok(())
    }

    /// Parses the name back.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || Error::ConfigParse(format!("cannot parse stem config {s:?}: expected e.g. m32n96-f2-h6"));
        let num = |t: &str| t.parse::<u32>().map_err(|_| bad());
        let parts: Vec<&str> = s.split('-').collect();
        let [mn, f, h] = parts[..] else {
            return Err(bad());
        };
        let (m, n) = mn.strip_prefix('m').and_then(|r| r.split_once('n')).ok_or_else(bad)?;
        Ok(StemConfig::new(
            num(m)?,
            num(n)?,
            num(f.strip_prefix('f').ok_or_else(bad)?)?,
            num(h.strip_prefix('h').ok_or_else(bad)?)?,
        ))
    }
}

impl std::fmt::Display for StemConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "m{}n{}-f{}-h{}", self.block_m, self.block_n, self.fm, self.helpers)
    }
}

/// The declared sweep, the reference first.
pub fn stem_sweep() -> Vec<StemConfig> {
    vec![
        StemConfig::REFERENCE,
        StemConfig::new(32, 96, 2, 4), // 6 multiplying warps and 4 helpers
        StemConfig::new(32, 96, 2, 2), // 6 + 2: up to 255 registers a warp
        StemConfig::new(16, 96, 1, 6), // 16-column rows, 6 + 6 warps
        StemConfig::new(16, 96, 1, 2), // 16-column rows, 6 + 2 warps
    ]
}

/// The most 16-deep K fragments a warp holds in registers (4 registers each per invocation:
/// 32 take 128 of the 255 a Vulkan invocation may have on NVIDIA).
pub const MAX_STEM_K_FRAGS: u32 = 32;

/// Workgroups the stem kernel's grid aims at: a batch with fewer (image, column tile,
/// channel tile) combinations splits the output rows into runs (each run restages TY − 1
/// rows). 512 keeps a 132-SM H100 at ≥ 2 resident rounds.
const TARGET_WORKGROUPS: u64 = 512;

/// The K side of the space-to-depth layout, fixed by the spec alone (the weights are packed
/// by it before any input size is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StemK {
    /// The strides (SH, SW): the space-to-depth block.
    pub stride: [u32; 2],
    /// Input channels per group (CG).
    pub cg: u32,
    /// SH·SW·CG: the channel × row-phase × column-phase slots of a space-to-depth pixel.
    pub slots: u32,
    /// `slots` padded to whole 16-deep fragments (CSP).
    pub csp: u32,
    /// f16 elements between band columns in workgroup memory (CST = CSP + 8: an odd number of
    /// 16-byte units, so the 8 rows of a fragment load fall in distinct banks).
    pub cst: u32,
    /// Space-to-depth taps (TY, TX) = (⌈KH/SH⌉, ⌈KW/SW⌉).
    pub taps: [u32; 2],
    /// 16-deep K fragments: TY·TX·CSP/16.
    pub k_frags: u32,
    /// The group's output channels padded to whole `block_n` blocks.
    pub n_pad: u32,
}

impl StemK {
    pub fn of(spec: &Conv2dSpec, cfg: &StemConfig) -> StemK {
        let stride = [spec.stride[0].max(1), spec.stride[1].max(1)];
        let cg = spec.in_channels_per_group();
        let slots = stride[0].saturating_mul(stride[1]).saturating_mul(cg);
        // Saturating: absurd specs must reach the refusals, not overflow on the way.
        let csp = slots.checked_next_multiple_of(16).unwrap_or(u32::MAX - 15);
        let taps = [spec.kernel[0].div_ceil(stride[0]), spec.kernel[1].div_ceil(stride[1])];
        StemK {
            stride,
            cg,
            slots,
            csp,
            cst: csp.saturating_add(8),
            taps,
            k_frags: taps[0].saturating_mul(taps[1]).saturating_mul(csp / 16),
            n_pad: spec.out_channels_per_group().checked_next_multiple_of(cfg.block_n.max(1)).unwrap_or(u32::MAX),
        }
    }
    /// K after the layout: TY·TX·CSP.
    pub fn k_pad(&self) -> u32 {
        self.k_frags * 16
    }
}

/// The stem kernel's compile-time geometry (the shader's header constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StemShape {
    pub stride_h: u32,
    pub stride_w: u32,
    pub cg: u32,
    pub taps_y: u32,
    pub taps_x: u32,
    pub csp: u32,
    pub cst: u32,
    pub band_cols: u32,
}

impl StemShape {
    /// 16-deep K fragments: TY·TX·CSP/16 (as [`StemK::k_frags`]).
    pub fn k_frags(&self) -> u32 {
        self.taps_y * self.taps_x * self.csp / 16
    }
}

/// The stem kernel's geometry for one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StemGeometry {
    /// Workgroups along an output row (`block_m` columns each).
    pub x_tiles: u32,
    /// The largest fragment start: OW − 16 (0 for rows narrower than a fragment).
    pub x_clamp: u32,
    /// Space-to-depth columns a workgroup stages: min(block_m, max(OW, 16)) + TX − 1.
    pub band_cols: u32,
    /// The K side.
    pub k: StemK,
}

impl StemGeometry {
    /// The pipeline's compile-time part.
    pub fn shape(&self) -> StemShape {
        StemShape {
            stride_h: self.k.stride[0],
            stride_w: self.k.stride[1],
            cg: self.k.cg,
            taps_y: self.k.taps[0],
            taps_x: self.k.taps[1],
            csp: self.k.csp,
            cst: self.k.cst,
            band_cols: self.band_cols,
        }
    }
    /// Workgroup memory: the ring of TY + 1 space-to-depth rows (f16) and the epilogue's
    /// ([`stem_scratch_bytes`]).
    pub fn workgroup_bytes(&self, cfg: &StemConfig) -> u64 {
        let ring = (self.k.taps[0] as u64 + 1) * self.band_cols as u64 * self.k.cst as u64 * 2;
        ring + stem_scratch_bytes(cfg)
    }
    /// Runs of output rows per (image, column tile, channel tile): enough for about 512
    /// workgroups in all, at least 4 rows per run, and no empty run.
    pub fn row_tiles(&self, oh: u32, other_tiles: u64) -> u32 {
        let want = TARGET_WORKGROUPS.div_ceil(other_tiles.max(1)).clamp(1, oh.div_ceil(4).max(1) as u64) as u32;
        let run = oh.div_ceil(want);
        oh.div_ceil(run.max(1)).max(1)
    }
}

/// Workgroup memory of the stem kernel's epilogue: two output rows of the tile (the one
/// being multiplied and the one being stored), f32, `block_n` channels of `block_m` + 4
/// columns (the shader's SCR: the 4 channel pairs one fragment store writes at once fall 4
/// banks apart).
pub fn stem_scratch_bytes(cfg: &StemConfig) -> u64 {
    2 * (cfg.block_m as u64 + 4) * cfg.block_n as u64 * 4
}

/// Whether the stem kernel can run a convolution for any input size: it applies, and its
/// geometry for outputs at least one fragment wide (the widest ring) fits the device.
pub(crate) fn stem_runs(spec: &Conv2dSpec, cfg: &StemConfig, limits: &KernelLimits) -> Result<()> {
    stem_geometry(spec, cfg.block_m, cfg, limits).map(|_| ())
}

/// Why the stem kernel cannot run a convolution, if it cannot.
pub fn stem_refusal(spec: &Conv2dSpec, cfg: &StemConfig) -> Option<String> {
    if spec.dilation != [1, 1] {
        return Some(format!("the stem kernel needs dilation 1, got {:?}", spec.dilation));
    }
    let k = StemK::of(spec, cfg);
    if k.k_frags > MAX_STEM_K_FRAGS {
        return Some(format!(
            "the stem kernel holds a warp's weights in registers, at most {MAX_STEM_K_FRAGS} K fragments; \
             this convolution needs {} ({} channels × stride {}×{} in {}×{} taps)",
            k.k_frags, k.cg, k.stride[0], k.stride[1], k.taps[0], k.taps[1]
        ));
    }
    None
}

/// The stem geometry of a convolution for an output of OH×OW, refused where the kernel does
/// not apply or its workgroup memory exceeds the device's.
pub fn stem_geometry(spec: &Conv2dSpec, ow: u32, cfg: &StemConfig, limits: &KernelLimits) -> Result<StemGeometry> {
    if let Some(reason) = stem_refusal(spec, cfg) {
        return Err(Error::KernelRefused { kernel: cfg.to_string(), reason });
    }
    cfg.stem_layout()?;
    let k = StemK::of(spec, cfg);
    let geometry = StemGeometry {
        x_tiles: ow.div_ceil(cfg.block_m),
        x_clamp: ow.max(16) - 16,
        band_cols: cfg.block_m.min(ow.max(16)) + k.taps[1] - 1,
        k,
    };
    let bytes = geometry.workgroup_bytes(cfg);
    if bytes > limits.workgroup_storage_bytes as u64 {
        return Err(Error::KernelRefused {
            kernel: cfg.to_string(),
            reason: format!(
                "the stem kernel needs {bytes} B of workgroup memory here, the device has {} B",
                limits.workgroup_storage_bytes
            ),
        });
    }
    Ok(geometry)
}

/// The geometries of a few real problems for a config, on a device with 48 KiB of workgroup
/// memory, in this order: AlexNet conv1 (11×11, stride 4, 3 channels), a 7×7 stride-2 stem
/// (3 channels, 224×224), a 3×3 stride-1 conv on 4 channels with a 13-column output; those
/// the config cannot run are left out. What `kernel::source` composes with and what
/// `kernel::check_portable` validates.
pub fn representative_shapes(cfg: &StemConfig) -> Vec<StemShape> {
    use crate::spec::{Padding, Shape4};
    let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
    let problems = [
        (Conv2dSpec::new(3, 96, 11).stride((4, 4)).padding(Padding::uniform(2)), Shape4::new(1, 3, 224, 224)),
        (Conv2dSpec::new(3, 64, 7).stride((2, 2)).padding(Padding::uniform(3)), Shape4::new(1, 3, 224, 224)),
        (Conv2dSpec::new(4, 16, 3).padding(Padding::uniform(1)), Shape4::new(1, 4, 9, 13)),
    ];
    problems
        .iter()
        .filter_map(|(spec, shape)| {
            let problem = spec.problem(*shape).ok()?;
            stem_geometry(spec, problem.output.w, cfg, &limits).ok().map(|g| g.shape())
        })
        .collect()
}

/// Elements of [`pack_stem_weights`]' output.
pub fn stem_weight_len(spec: &Conv2dSpec, cfg: &StemConfig) -> u64 {
    let k = StemK::of(spec, cfg);
    spec.groups as u64 * k.k_pad() as u64 * k.n_pad as u64
}

/// Weights as the stem kernel reads them: `[group][k][n_pad]` with
/// k = (ty·TX + tx)·CSP + (dy·SW + dx)·CG + c for tap (ky, kx) = (ty·SH + dy, tx·SW + dx) of
/// channel c; zeros for taps past the kernel, pad slots and columns past the group's C_out.
pub fn pack_stem_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &StemConfig) -> Result<Vec<f32>> {
    let k = StemK::of(spec, cfg);
    let (kh, kw) = (spec.kernel[0] as usize, spec.kernel[1] as usize);
    let (sh, sw, cg) = (k.stride[0] as usize, k.stride[1] as usize, k.cg as usize);
    let (tx_n, csp, n_pad) = (k.taps[1] as usize, k.csp as usize, k.n_pad as usize);
    let cout_g = spec.out_channels_per_group() as usize;
    let k_pad = k.k_pad() as usize;
    let mut packed = alloc::zeroed_vec::<f32>(stem_weight_len(spec, cfg) as usize, "the packed stem weights")?;
    for g in 0..spec.groups as usize {
        for n in 0..cout_g {
            for c in 0..cg {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let (ty, dy, tx, dx) = (ky / sh, ky % sh, kx / sw, kx % sw);
                        let kk = (ty * tx_n + tx) * csp + (dy * sw + dx) * cg + c;
                        packed[(g * k_pad + kk) * n_pad + n] =
                            weight[(((g * cout_g + n) * cg + c) * kh + ky) * kw + kx];
                    }
                }
            }
        }
    }
    Ok(packed)
}

/// The bias as the stem kernel's accumulators start from it: per group and 16 output
/// channels one 16×16 row-major f32 matrix whose every row is those channels' bias (zeros
/// past the group's C_out, and everywhere without a bias): `[group][n_pad / 16][16][16]`.
pub fn pack_stem_bias(spec: &Conv2dSpec, bias: Option<&[f32]>, cfg: &StemConfig) -> Result<Vec<f32>> {
    let n_pad = StemK::of(spec, cfg).n_pad as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let mut tiles = alloc::zeroed_vec::<f32>(spec.groups as usize * n_pad * 16, "the stem's bias tiles")?;
    let Some(bias) = bias else {
        return Ok(tiles);
    };
    for g in 0..spec.groups as usize {
        for n in 0..cout_g {
            let (frag, col) = ((g * n_pad + n) / 16, n % 16);
            for row in 0..16 {
                tiles[(frag * 16 + row) * 16 + col] = bias[g * cout_g + n];
            }
        }
    }
    Ok(tiles)
}

/// The CPU twin of `stem.wgsl`'s indexing: the same tiles (walked by nested
/// loops, not the shader's linear tile number), row runs, ring of space-to-depth rows,
/// fragment offsets, packed-weight and bias-tile reads and store rules, in plain loops (f64
/// sums of the operands as given: no f16 rounding). Not modelled: the warps' roles and shares
/// of the fragments, and the helpers' path from scratch to the output (`store_row`: column
/// per invocation, channel steps, scratch stride); those only the GPU tests check. `packed`
/// is [`pack_stem_weights`]' output, `bias_tiles` [`pack_stem_bias`]'; the result is
/// `[N, C_out, OH, OW]` with untouched outputs left NaN, so a store rule that misses an output
/// shows.
#[cfg(test)]
pub fn conv_stem(
    problem: &crate::spec::ConvProblem,
    cfg: &StemConfig,
    geometry: &StemGeometry,
    input: &[f32],
    packed: &[f32],
    bias_tiles: &[f32],
) -> Vec<f32> {
    let spec = &problem.spec;
    let (c_in, h, w) = (problem.input.c as usize, problem.input.h as i64, problem.input.w as i64);
    let (c_out, oh, ow) = (problem.output.c as usize, problem.output.h as usize, problem.output.w as usize);
    let geo = geometry;
    let k = geo.k;
    let (sh, sw, cg) = (k.stride[0] as usize, k.stride[1] as usize, k.cg as usize);
    let (ty_n, tx_n, csp, cst) = (k.taps[0] as usize, k.taps[1] as usize, k.csp as usize, k.cst as usize);
    let (bm, bn, n_pad) = (cfg.block_m as usize, cfg.block_n as usize, k.n_pad as usize);
    let (fx, band_cols, x_clamp) = (bm / 16, geo.band_cols as usize, geo.x_clamp as usize);
    let row_elems = band_cols * cst;
    let k_pad = k.k_pad() as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let n_tiles = n_pad / bn;
    let other = spec.groups as u64 * problem.input.n as u64 * geo.x_tiles as u64 * n_tiles as u64;
    let row_tiles = geo.row_tiles(oh as u32, other) as usize;
    let run = oh.div_ceil(row_tiles);
    let mut out = vec![f32::NAN; problem.output.len() as usize];
    // The pad slots hold zeros; everything else is staged before it is read.
    let ring_rows = ty_n + 1;
    let mut ring = vec![f32::NAN; ring_rows * row_elems];
    for g in 0..spec.groups as usize {
        for img in 0..problem.input.n as usize {
            for rt in 0..row_tiles {
                let (r0, r1) = (rt * run, (rt * run + run).min(oh));
                assert!(r0 < r1, "empty row run {rt} of {row_tiles}");
                for xt in 0..geo.x_tiles as usize {
                    for nt in 0..n_tiles {
                        let (ox0, n0) = (xt * bm, nt * bn);
                        let xb = ox0.min(x_clamp);
                        for col in 0..band_cols {
                            for ty in 0..ring_rows {
                                for s in k.slots as usize..csp {
                                    ring[ty * row_elems + col * cst + s] = 0.0;
                                }
                            }
                        }
                        // fetch_row + stash_row
                        let stage = |ring: &mut Vec<f32>, y: usize| {
                            let slot = y % ring_rows;
                            for r in 0..sh * cg {
                                for col in 0..band_cols * sw {
                                    let (dy, c) = (r / cg, r % cg);
                                    let iy = (y * sh + dy) as i64 - spec.padding.top as i64;
                                    let ix = (xb * sw + col) as i64 - spec.padding.left as i64;
                                    let v = if (0..h).contains(&iy) && (0..w).contains(&ix) {
                                        input[((img * c_in + g * cg + c) * h as usize + iy as usize) * w as usize
                                            + ix as usize]
                                    } else {
                                        0.0
                                    };
                                    let s = (dy * sw + col % sw) * cg + c;
                                    ring[slot * row_elems + (col / sw) * cst + s] = v;
                                }
                            }
                        };
                        // The run's first TY rows, then row oy + TY while row oy multiplies
                        // (after it here: the twin has no concurrency).
                        for y in 0..ty_n {
                            stage(&mut ring, r0 + y);
                        }
                        for oy in r0..r1 {
                            for f in 0..fx {
                                let nominal = ox0 + f * 16;
                                let x_start = nominal.min(x_clamp);
                                let a_col = (x_start - xb).min(band_cols + 1 - 16 - tx_n) * cst;
                                // The accumulators start from the bias tiles (row m of each).
                                let mut acc: Vec<f64> = (0..16 * bn)
                                    .map(|i| {
                                        let (m, n) = (i / bn, i % bn);
                                        let frag = (g * n_pad + n0 + n) / 16;
                                        bias_tiles[(frag * 16 + m) * 16 + (n0 + n) % 16] as f64
                                    })
                                    .collect();
                                for ty in 0..ty_n {
                                    let rb = ((oy + ty) % ring_rows) * row_elems;
                                    for tx in 0..tx_n {
                                        for j in 0..csp / 16 {
                                            let kf = (ty * tx_n + tx) * (csp / 16) + j;
                                            for m in 0..16 {
                                                for kk in 0..16 {
                                                    let a = ring[rb + a_col + tx * cst + j * 16 + m * cst + kk] as f64;
                                                    let row = (g * k_pad + kf * 16 + kk) * n_pad + n0;
                                                    for n in 0..bn {
                                                        acc[m * bn + n] += a * packed[row + n] as f64;
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                                // store_row's rules (which outputs, not how)
                                for m in 0..16 {
                                    let ox = x_start + m;
                                    for n in 0..bn {
                                        let nn = n0 + n;
                                        if ox < nominal || ox >= ow || nn >= cout_g {
                                            continue;
                                        }
                                        let oc = g * cout_g + nn;
                                        out[((img * c_out + oc) * oh + oy) * ow + ox] = acc[m * bn + n] as f32;
                                    }
                                }
                            }
                            if oy + 1 < r1 {
                                stage(&mut ring, oy + ty_n);
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
pub(crate) struct Stem;
/// Its one instance in the registry.
pub(crate) static STEM: Stem = Stem;

impl Family for Stem {
    fn name(&self) -> &'static str {
        "coop-stem-f16"
    }
    fn precision(&self) -> Precision {
        Precision::F16Accum32
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(StemKernel(StemConfig::parse(config)?)))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(StemKernel(StemConfig::REFERENCE))
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        stem_sweep().into_iter().map(|c| Kernel::new(StemKernel(c))).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
}

/// A kernel of the stem family.
#[derive(Debug)]
pub(crate) struct StemKernel(pub(crate) StemConfig);

/// The binding of the bias tiles (the accumulators' starting values).
const BIAS_TILES_BINDING: u32 = 4;

impl KernelConfig for StemKernel {
    fn family(&self) -> &'static dyn Family {
        &STEM
    }
    fn name(&self) -> String {
        self.0.to_string()
    }
    fn check_shape(&self) -> Result<()> {
        self.0.stem_layout().map(|_| ())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.0.validate_stem(limits)
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        stem_runs(spec, &self.0, limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        stem_weight_len(spec, &self.0).saturating_mul(2)
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        let tiles = pack_stem_bias(spec, Some(bias), &self.0)?;
        Ok(Packed {
            weight: f16_bytes(pack_stem_weights(spec, weight, &self.0)?)?,
            extra: vec![(BIAS_TILES_BINDING, "wgconv bias tiles", alloc::bytes_of(&tiles, "the stem's bias tiles")?)],
            out_scale: 1.0,
            bias: None,
        })
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[BIAS_TILES_BINDING, GRID_BINDING]
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        let g = stem_geometry(&problem.spec, problem.output.w, &self.0, limits)?;
        Ok(Box::new(StemShaped { cfg: self.0, geometry: g, groups: problem.spec.groups }))
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

/// The stem kernel composed for one problem.
struct StemShaped {
    cfg: StemConfig,
    geometry: StemGeometry,
    groups: u32,
}

impl Shaped for StemShaped {
    fn source(&self) -> Result<String> {
        source(&self.cfg, &self.geometry.shape())
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        let geo = &self.geometry;
        let mut g = RowGrid {
            n_pad: geo.k.n_pad,
            n_tiles: geo.k.n_pad / self.cfg.block_n,
            x_tiles: geo.x_tiles,
            x_clamp: geo.x_clamp,
            ..Default::default()
        };
        let others = g.n_tiles as u64 * geo.x_tiles as u64 * p.batch as u64 * self.groups as u64;
        g.row_tiles = geo.row_tiles(p.oh, others);
        let total = others * g.row_tiles as u64;
        g.total_tiles = workgroups_u32(total)?;
        Ok((bytemuck::bytes_of(&g).to_vec(), total))
    }
}

/// The kernel's WGSL for a config and geometry.
fn source(cfg: &StemConfig, shape: &StemShape) -> Result<String> {
    let l = cfg.stem_layout()?;
    let header = format!(
        "const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst WG: u32 = {}u;\n\
         const WARPS_M: u32 = {}u;\nconst WARPS_N: u32 = {}u;\nconst FM: u32 = {}u;\nconst HELPERS: u32 = {}u;\n\
         const SH: u32 = {}u;\nconst SW: u32 = {}u;\nconst CG: u32 = {}u;\nconst TY: u32 = {}u;\n\
         const TX: u32 = {}u;\nconst CSP: u32 = {}u;\nconst CST: u32 = {}u;\nconst BAND_COLS: u32 = {}u;\n\
         const K_FRAGS: u32 = {}u;\n",
        cfg.block_m,
        cfg.block_n,
        cfg.invocations(),
        l.warps_m,
        l.warps_n,
        l.fm,
        l.helpers,
        shape.stride_h,
        shape.stride_w,
        shape.cg,
        shape.taps_y,
        shape.taps_x,
        shape.csp,
        shape.cst,
        shape.band_cols,
        shape.k_frags(),
    );
    let mut generated = stem_modules(l.fm, shape);
    generated.push(("config", header));
    compose("stem", &[("stem", STEM_WGSL)], generated, Precision::F16Accum32, true)
}

/// The per-fragment statements: a multiplying warp's FM accumulators (two per fragment where
/// FM is 1, each taking every other K fragment: two dependency chains instead of one) and
/// the column offsets of its fragments; its K_FRAGS weight fragments, loaded once; per
/// output row, for each K fragment (ty, tx, j) an A fragment per M fragment from ring row
/// (oy + ty) mod RING; then the sums to scratch buffer `buf`. Each K fragment's statements
/// are a block of their own (their A fragments are named alike).
fn stem_modules(fm: u32, shape: &StemShape) -> Vec<(&'static str, String)> {
    const BIAS_TILE: &str = "coopLoadT<coop_mat16x16<f32, C>>(&bias_tiles[bias_at], FRAG)";
    const ZERO: &str = "coop_mat16x16<f32, C>()";
    let chains = if fm == 1 { 2 } else { 1 };
    let (ty_n, tx_n, csp, cst) = (shape.taps_y, shape.taps_x, shape.csp, shape.cst);
    let decls: String = (0..fm)
        .flat_map(|i| (0..chains).map(move |c| format!("var<private> acc_{i}_{c}: coop_mat16x16<f32, C>;\n")))
        .collect();
    let weights: String = (0..shape.k_frags())
        .map(|k| {
            format!(
                "let b_{k} = coopLoadT<coop_mat16x16<f16, B>>(&weight[w_base + {}u * grid.n_pad], grid.n_pad);\n",
                k * 16
            )
        })
        .collect();
    let reset = |i: u32| -> String {
        (0..chains).map(|c| format!("acc_{i}_{c} = {};\n", if c == 0 { BIAS_TILE } else { ZERO })).collect()
    };
    let init: String =
        (0..fm).map(|i| format!("{}let a_col_{i} = frag_band_col(t, wm * FM + {i}u) * CST;\n", reset(i))).collect();
    let mut mma: String = (0..ty_n).map(|ty| format!("let rb_{ty} = ((i + {ty}u) % RING) * ROW_ELEMS;\n")).collect();
    for ty in 0..ty_n {
        for tx in 0..tx_n {
            for j in 0..csp / 16 {
                let k = (ty * tx_n + tx) * (csp / 16) + j;
                let off = tx * cst + 16 * j;
                mma.push_str("{\n");
                for i in 0..fm {
                    mma.push_str(&format!(
                        "    let a_{i} = coopLoadT<coop_mat16x16<f16, A>>(&ring[rb_{ty} + a_col_{i} + {off}u], CST);\n"
                    ));
                }
                let c = k % chains;
                for i in 0..fm {
                    mma.push_str(&format!("    acc_{i}_{c} = coopMultiplyAdd(a_{i}, b_{k}, acc_{i}_{c});\n"));
                }
                mma.push_str("}\n");
            }
        }
    }
    let scratch: String = (0..fm)
        .map(|i| {
            let sum = (1..chains).fold(format!("acc_{i}_0"), |e, c| format!("{e} + acc_{i}_{c}"));
            format!("coopStore({sum}, &c_scratch[buf + scratch_at + {}u], SCR);\n{}", i * 16, reset(i))
        })
        .collect();
    vec![
        ("stem_decls", decls),
        ("stem_weights", weights),
        ("stem_init", init),
        ("stem_mma", mma),
        ("stem_scratch", scratch),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Padding, Shape4};

    /// The twin against the reference on shapes that exercise every geometry rule: clamped
    /// last fragments, rows narrower than a fragment, several column tiles, row runs, pad
    /// slots, kernels not a multiple of the stride, groups, asymmetric padding.
    #[test]
    fn twin_matches_reference() {
        let cases: Vec<(&str, Conv2dSpec, Shape4, StemConfig)> = vec![
            (
                "alexnet_like",
                Conv2dSpec::new(3, 20, 11).stride((4, 4)).padding(Padding::uniform(2)).with_bias(true),
                Shape4::new(2, 3, 63, 75),
                StemConfig::REFERENCE,
            ),
            (
                "narrow_3x3_pad_slots",
                Conv2dSpec::new(5, 17, 3).padding(Padding::new(1, 0, 2, 1)),
                Shape4::new(1, 5, 9, 7),
                StemConfig::new(16, 96, 1, 2),
            ),
            (
                "groups_stride_2x3_wide",
                Conv2dSpec::new(4, 34, 5).groups(2).stride((2, 3)).padding(Padding::uniform(2)),
                Shape4::new(2, 4, 17, 110),
                StemConfig::new(32, 48, 1, 3),
            ),
            (
                "one_by_one",
                Conv2dSpec::new(7, 9, 1).with_bias(true),
                Shape4::new(1, 7, 3, 37),
                StemConfig::new(64, 48, 4, 2),
            ),
        ];
        for (name, spec, shape, cfg) in cases {
            let problem = spec.problem(shape).unwrap();
            let geometry = stem_geometry(&spec, problem.output.w, &cfg, &KernelLimits::with_workgroup_bytes(48 * 1024))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            crate::reference::check_twin(&format!("{name} ({geometry:?})"), &problem, |x, w, bias| {
                let bias_tiles = pack_stem_bias(&spec, bias, &cfg).unwrap();
                conv_stem(&problem, &cfg, &geometry, x, &pack_stem_weights(&spec, w, &cfg).unwrap(), &bias_tiles)
            });
        }
    }

    /// The stem vocabulary: the register tile names a multiplying warp's fragments, the warps
    /// beyond the multiplying ones are helpers, and the helpers store whole columns.
    #[test]
    fn stem_layouts() {
        let default = StemConfig::REFERENCE;
        assert_eq!(default.to_string(), "m32n96-f2-h6");
        assert_eq!(default.warps(), 12);
        assert_eq!(default.stem_layout().unwrap(), StemLayout { fm: 2, warps_m: 1, warps_n: 6, helpers: 6 });
        assert_eq!(
            StemConfig::new(64, 48, 2, 2).stem_layout().unwrap(),
            StemLayout { fm: 2, warps_m: 2, warps_n: 3, helpers: 2 }
        );
        // No helpers; helpers whose invocations are not a multiple of block_m (1 × 32 < 64);
        // M fragments per warp that do not divide the row's.
        let refused = |cfg: StemConfig| cfg.stem_layout().unwrap_err().to_string();
        assert!(refused(StemConfig::new(32, 96, 2, 0)).contains("stage rows"));
        assert!(refused(StemConfig::new(64, 96, 2, 1)).contains("block_m 64"));
        assert!(refused(StemConfig::new(48, 96, 2, 3)).contains("do not divide"));
        assert_eq!(StemConfig::parse("m32n96-f2-h6").unwrap(), default);
        assert!(StemConfig::parse("m32n96k16-t4x4-w12-s1").is_err());
        for cfg in stem_sweep() {
            cfg.stem_layout().unwrap_or_else(|e| panic!("{cfg}: {e}"));
        }
    }

    #[test]
    fn alexnet_geometry_and_refusals() {
        let spec = Conv2dSpec::new(3, 96, 11).stride((4, 4)).padding(Padding::uniform(2));
        let cfg = StemConfig::REFERENCE;
        let g = stem_geometry(&spec, 55, &cfg, &KernelLimits::with_workgroup_bytes(48 * 1024)).unwrap();
        assert_eq!((g.k.slots, g.k.csp, g.k.cst, g.k.taps, g.k.k_frags), (48, 48, 56, [3, 3], 27));
        assert_eq!((g.x_tiles, g.x_clamp, g.band_cols), (2, 39, 34));
        // The ring (4 rows × 34 columns × 56 f16) and two rows of scratch (96 × (32 + 4) f32).
        assert_eq!(g.workgroup_bytes(&cfg), 4 * 34 * 56 * 2 + 2 * 96 * 36 * 4);
        // 256 images of 2 column tiles: one run of 55 rows each (512 workgroups); one image:
        // 14 runs of 4 rows.
        assert_eq!(g.row_tiles(55, 512), 1);
        assert_eq!(g.row_tiles(55, 2), 14);
        assert!(stem_geometry(&spec, 55, &cfg, &KernelLimits::with_workgroup_bytes(40 * 1024)).is_err());
        let deep = Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1));
        assert!(stem_refusal(&deep, &cfg).unwrap().contains("36"), "{:?}", stem_refusal(&deep, &cfg));
        assert!(stem_refusal(&Conv2dSpec::new(3, 8, 3).dilation((2, 1)), &cfg).is_some());
    }
}
