//! The stem kernel's host side (`shaders/conv_stem.wgsl`): which convolutions it runs, its
//! geometry for a problem, its packed weights, and a CPU twin of the shader's indexing that
//! the tests compare with the reference (lavapipe has no cooperative matrices, so the
//! shader itself only runs on GPUs that do).
//!
//! The kernel holds each multiplying warp's weights in registers, so it runs convolutions
//! whose K after the space-to-depth layout is small: few input channels per group, as in a
//! network's first layer (AlexNet conv1: 27 K fragments, K = 432).

use crate::config::{KernelLimits, TileConfig};
use crate::error::{Error, Result};
use crate::spec::Conv2dSpec;

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
    pub fn of(spec: &Conv2dSpec, cfg: &TileConfig) -> StemK {
        let stride = [spec.stride[0].max(1), spec.stride[1].max(1)];
        let cg = spec.in_channels_per_group();
        let slots = stride[0].saturating_mul(stride[1]).saturating_mul(cg);
        let csp = slots.next_multiple_of(16);
        let taps = [spec.kernel[0].div_ceil(stride[0]), spec.kernel[1].div_ceil(stride[1])];
        StemK {
            stride,
            cg,
            slots,
            csp,
            cst: csp + 8,
            taps,
            k_frags: taps[0].saturating_mul(taps[1]).saturating_mul(csp / 16),
            n_pad: spec.out_channels_per_group().next_multiple_of(cfg.block_n.max(1)),
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
    /// A geometry every formula of the shader accepts (one channel, one tap, one fragment).
    pub const ONES: StemShape =
        StemShape { stride_h: 1, stride_w: 1, cg: 1, taps_y: 1, taps_x: 1, csp: 16, cst: 24, band_cols: 16 };
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
    pub fn workgroup_bytes(&self, cfg: &TileConfig) -> u64 {
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
pub fn stem_scratch_bytes(cfg: &TileConfig) -> u64 {
    2 * (cfg.block_m as u64 + 4) * cfg.block_n as u64 * 4
}

/// Input channels up to which an f16 `Conv2d` on a cooperative-matrix device runs the stem
/// kernel by default (ungrouped convolutions only): image inputs (gray, RGB, RGBA), the first
/// layer it was built for. It runs deeper convolutions too (within [`MAX_STEM_K_FRAGS`]) when named, but is
/// measured only on AlexNet conv1 (BENCHMARKS.md).
pub const STEM_DEFAULT_MAX_CHANNELS: u32 = 4;

/// PCI vendor id of the adapters on which the stem kernel is an f16 default: NVIDIA's, where it
/// is measured and tested. Its two roles of warps reach the workgroup barrier from two loops
/// (equally often); SPIR-V asks every invocation to reach the same barrier instruction, and
/// NVIDIA's hardware barrier, which counts arrivals, is the one this is known to work on
/// (`shaders/conv_stem.wgsl`). Elsewhere the stem kernel runs only when named.
pub const STEM_DEFAULT_VENDOR: u32 = 0x10de;

/// Whether an f16 `Conv2d` runs the stem kernel by default on this adapter (given
/// cooperative matrices and a convolution [`stem_by_default`] takes).
pub fn stem_default_adapter(info: &wgpu::AdapterInfo) -> bool {
    info.vendor == STEM_DEFAULT_VENDOR
}

/// Whether an f16 `Conv2d` runs the stem kernel by default for this convolution (where the
/// device has cooperative matrices and the workgroup memory it needs): no groups, at most
/// [`STEM_DEFAULT_MAX_CHANNELS`] input channels, and a convolution it runs. Depthwise and
/// grouped layers keep the gathering kernel: the stem kernel's 96-channel blocks would pad
/// their few channels per group (unmeasured, so not the default).
pub fn stem_by_default(spec: &Conv2dSpec) -> bool {
    spec.groups == 1
        && spec.in_channels <= STEM_DEFAULT_MAX_CHANNELS
        && stem_refusal(spec, &crate::config::default_stem_config()).is_none()
}

/// Whether an f16 `Conv2d` on a device with these limits (and cooperative matrices, on
/// NVIDIA: [`stem_default_adapter`]) runs the stem kernel by default: [`stem_by_default`], and
/// the default config fits the device for every input size.
pub fn stem_fits_by_default(spec: &Conv2dSpec, limits: &KernelLimits) -> bool {
    let cfg = crate::config::default_stem_config();
    stem_by_default(spec) && cfg.validate_stem(limits).is_ok() && crate::conv2d::stem_runs(spec, &cfg, limits).is_ok()
}

/// Whether an f16 `Conv2d` on `gpu` runs the stem kernel by default for this convolution:
/// cooperative matrices, an NVIDIA adapter ([`stem_default_adapter`]) and
/// [`stem_fits_by_default`] with the device's limits. What `Conv2d` decides, and what the
/// tests expect.
pub fn stem_is_default(gpu: &crate::Gpu, spec: &Conv2dSpec) -> bool {
    gpu.has_coop_f16() && stem_default_adapter(&gpu.info) && stem_fits_by_default(spec, &gpu.kernel_limits())
}

/// Why the stem kernel cannot run a convolution, if it cannot.
pub fn stem_refusal(spec: &Conv2dSpec, cfg: &TileConfig) -> Option<String> {
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
pub fn stem_geometry(spec: &Conv2dSpec, ow: u32, cfg: &TileConfig, limits: &KernelLimits) -> Result<StemGeometry> {
    if let Some(reason) = stem_refusal(spec, cfg) {
        return Err(Error::ConfigRefused { config: cfg.to_string(), reason });
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
        return Err(Error::ConfigRefused {
            config: cfg.to_string(),
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
pub fn representative_shapes(cfg: &TileConfig) -> Vec<StemShape> {
    use crate::spec::{Padding, Shape4};
    let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
    let problems = [
        (Conv2dSpec::new(3, 96, 11).stride(4, 4).padding(Padding::uniform(2)), Shape4::new(1, 3, 224, 224)),
        (Conv2dSpec::new(3, 64, 7).stride(2, 2).padding(Padding::uniform(3)), Shape4::new(1, 3, 224, 224)),
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
pub fn stem_weight_len(spec: &Conv2dSpec, cfg: &TileConfig) -> u64 {
    let k = StemK::of(spec, cfg);
    spec.groups as u64 * k.k_pad() as u64 * k.n_pad as u64
}

/// Weights as the stem kernel reads them: `[group][k][n_pad]` with
/// k = (ty·TX + tx)·CSP + (dy·SW + dx)·CG + c for tap (ky, kx) = (ty·SH + dy, tx·SW + dx) of
/// channel c; zeros for taps past the kernel, pad slots and columns past the group's C_out.
pub fn pack_stem_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &TileConfig) -> Vec<f32> {
    let k = StemK::of(spec, cfg);
    let (kh, kw) = (spec.kernel[0] as usize, spec.kernel[1] as usize);
    let (sh, sw, cg) = (k.stride[0] as usize, k.stride[1] as usize, k.cg as usize);
    let (tx_n, csp, n_pad) = (k.taps[1] as usize, k.csp as usize, k.n_pad as usize);
    let cout_g = spec.out_channels_per_group() as usize;
    let k_pad = k.k_pad() as usize;
    let mut packed = vec![0.0f32; stem_weight_len(spec, cfg) as usize];
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
    packed
}

/// The bias as the stem kernel's accumulators start from it: per group and 16 output
/// channels one 16×16 row-major f32 matrix whose every row is those channels' bias (zeros
/// past the group's C_out, and everywhere without a bias): `[group][n_pad / 16][16][16]`.
pub fn pack_stem_bias(spec: &Conv2dSpec, bias: Option<&[f32]>, cfg: &TileConfig) -> Vec<f32> {
    let n_pad = StemK::of(spec, cfg).n_pad as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let mut tiles = vec![0.0f32; spec.groups as usize * n_pad * 16];
    let Some(bias) = bias else {
        return tiles;
    };
    for g in 0..spec.groups as usize {
        for n in 0..cout_g {
            let (frag, col) = ((g * n_pad + n) / 16, n % 16);
            for row in 0..16 {
                tiles[(frag * 16 + row) * 16 + col] = bias[g * cout_g + n];
            }
        }
    }
    tiles
}

/// The CPU twin of `shaders/conv_stem.wgsl`'s indexing: the same tiles (walked by nested
/// loops, not the shader's linear tile number), row runs, ring of space-to-depth rows,
/// fragment offsets, packed-weight and bias-tile reads and store rules, in plain loops (f64
/// sums of the operands as given: no f16 rounding). Not modelled: the warps' roles and shares
/// of the fragments, and the helpers' path from scratch to the output (`store_row`: column
/// per invocation, channel steps, scratch stride); those only the GPU tests check. `packed`
/// is [`pack_stem_weights`]' output, `bias_tiles` [`pack_stem_bias`]'; the result is
/// `[N, C_out, OH, OW]` with untouched outputs left NaN, so a store rule that misses an output
/// shows.
pub fn conv_stem(
    problem: &crate::spec::ConvProblem,
    cfg: &TileConfig,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Padding, Shape4};

    /// The twin against the reference on shapes that exercise every geometry rule: clamped
    /// last fragments, rows narrower than a fragment, several column tiles, row runs, pad
    /// slots, kernels not a multiple of the stride, groups, asymmetric padding.
    #[test]
    fn twin_matches_reference() {
        let cases: Vec<(&str, Conv2dSpec, Shape4, TileConfig)> = vec![
            (
                "alexnet_like",
                Conv2dSpec::new(3, 20, 11).stride(4, 4).padding(Padding::uniform(2)).with_bias(true),
                Shape4::new(2, 3, 63, 75),
                crate::config::default_stem_config(),
            ),
            (
                "narrow_3x3_pad_slots",
                Conv2dSpec::new(5, 17, 3).padding(Padding::new(1, 0, 2, 1)),
                Shape4::new(1, 5, 9, 7),
                TileConfig::new_stem(16, 96, 1, 2),
            ),
            (
                "groups_stride_2x3_wide",
                Conv2dSpec::new(4, 34, 5).groups(2).stride(2, 3).padding(Padding::uniform(2)),
                Shape4::new(2, 4, 17, 110),
                TileConfig::new_stem(32, 48, 1, 3),
            ),
            (
                "one_by_one",
                Conv2dSpec::new(7, 9, 1).with_bias(true),
                Shape4::new(1, 7, 3, 37),
                TileConfig::new_stem(64, 48, 4, 2),
            ),
        ];
        for (name, spec, shape, cfg) in cases {
            let problem = spec.problem(shape).unwrap();
            let geometry = stem_geometry(&spec, problem.output.w, &cfg, &KernelLimits::with_workgroup_bytes(48 * 1024))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            crate::reference::check_twin(&format!("{name} ({geometry:?})"), &problem, |x, w, bias| {
                let bias_tiles = pack_stem_bias(&spec, bias, &cfg);
                conv_stem(&problem, &cfg, &geometry, x, &pack_stem_weights(&spec, w, &cfg), &bias_tiles)
            });
        }
    }

    /// The stem vocabulary: the register tile names a multiplying warp's fragments, the warps
    /// beyond the multiplying ones are helpers, and the helpers store whole columns.
    #[test]
    fn stem_layouts() {
        use crate::config::StemLayout;
        let default = crate::config::default_stem_config();
        assert_eq!(default.to_string(), "m32n96k16-t4x4-w12-s1");
        assert_eq!(default.stem_layout().unwrap(), StemLayout { fm: 2, warps_m: 1, warps_n: 6, helpers: 6 });
        assert_eq!(
            TileConfig::new_stem(64, 48, 2, 2).stem_layout().unwrap(),
            StemLayout { fm: 2, warps_m: 2, warps_n: 3, helpers: 2 }
        );
        // No helpers; helpers whose invocations are not a multiple of block_m (1 × 32 < 64);
        // a register tile of no whole fragment.
        let refused = |cfg: TileConfig| cfg.stem_layout().unwrap_err().to_string();
        assert!(refused(TileConfig::with_thread_tile(32, 96, 16, 4, 4, 1)).contains("stage rows"));
        assert!(refused(TileConfig::new_stem(64, 96, 2, 1)).contains("block_m 64"));
        assert!(refused(TileConfig::with_thread_tile(32, 96, 16, 2, 2, 1)).contains("whole 16×16 fragments"));
        for cfg in crate::config::stem_sweep() {
            cfg.stem_layout().unwrap_or_else(|e| panic!("{cfg}: {e}"));
        }
    }

    #[test]
    fn alexnet_geometry_and_refusals() {
        let spec = Conv2dSpec::new(3, 96, 11).stride(4, 4).padding(Padding::uniform(2));
        let cfg = crate::config::default_stem_config();
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
        assert!(stem_refusal(&Conv2dSpec::new(3, 8, 3).dilation(2, 1), &cfg).is_some());
    }
}
