//! Implicit GEMM on the matrix units over a channels-last input (`coop-nhwc-f16`): a staging
//! pass (`stage.wgsl`) rewrites the chunk's input (NCHW or NHWC, f32 or f16) as f16
//! `[n][HP][WP][C8]` vectors of 8 channels with the padding written out, so that the GEMM
//! kernel (`nhwc.wgsl`) loads A as 16-byte runs of channels with no bounds test and no
//! border logic (but where it reads an input in place: below); K walks the group's
//! channels (padded to whole vectors) in chunks of one K step, each chunk through every tap
//! ([`StagedGeometry::k_order`]). The tile vocabulary is `TileConfig`'s; each warp owns
//! 16×16 accumulator fragments (`coop::fragments`). An f16 channels-last input of whole
//! vectors of channels per group is that layout already but for the padding:
//! `coop-nhwc-f16` reads it in place, with no staging pass, and where there is zero padding
//! each row of the block keeps a mask of its window's taps inside the image and loads only
//! those (`BORDER_TAPS`).
//!
//! Why a separate pass: the gathering kernels (`coop-f16`) round and gather A one element
//! at a time, and that staging work, not the matrix units, bounds them. Rewriting the input
//! once costs a read of it and a write of its padded f16 copy.

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::Result;
use crate::families::coop::fragments::{fragment_layout, fragment_modules, FragmentCode};
use crate::families::coop::{coop_missing, f16_bytes, split_weights, MAX_FRAGMENTS};
use crate::families::tiled::TileConfig;
use crate::kernel::{
    compose_operands, workgroups_u32, ConvParams, Family, Kernel, KernelConfig, Operands, Packed, Precision, Shaped,
    Staging, Target, TensorForm, COOPERATIVE_TARGETS, F16_TENSORS, GRID_BINDING, INPUT_MAX_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem};

const NHWC_WGSL: &str = include_str!("nhwc.wgsl");
const STAGE_WGSL: &str = include_str!("stage.wgsl");

/// Channels per staged vector (16 bytes of f16).
const VEC: u32 = 8;
/// Invocations per workgroup of the staging pass.
const STAGE_WG: u32 = 256;
/// The binding of the K table (one row per K vector).
pub(crate) const KTAB_BINDING: u32 = 4;
/// A K vector past the group's K.
const NO_TAP: u32 = u32::MAX;
/// Channels per output store of an f16 channels-last output (`QUAD_STORES`).
const QUAD: u32 = 4;
/// Taps of a window the in-place kernel's border masks hold (`BORDER_TAPS`): one bit each
/// in a u32, bit 31 kept for the K vectors past K.
const MAX_BORDER_TAPS: u32 = 31;

/// How the channels-last kernel reads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputRead {
    /// A copy written by the staging pass, its padding written out.
    Staged,
    /// The caller's f16 channels-last tensor, which has nothing to pad.
    InPlace,
    /// The caller's f16 channels-last tensor with zero padding around it: each row's taps
    /// inside the image are a mask (`BORDER_TAPS`), and only those are loaded.
    InPlaceBordered,
}

/// The channels-last cooperative family.
#[derive(Debug)]
pub(crate) struct Nhwc {
    variant: Variant,
}

/// The family's three kernels, by how operands enter the products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Rounded to f16 (`coop-nhwc-f16`).
    F16,
    /// Split into two f16 halves (`coop-nhwc-f16x3`: f32-accurate, inputs clamped to f16's
    /// range and flagged).
    F16x3,
    /// Split after the input is scaled into f16's range (`coop-nhwc-f32`: `Precision::F32`).
    F32,
}

impl Variant {
    fn operands(self) -> Operands {
        match self {
            Variant::F16 => Operands::F16,
            Variant::F16x3 => Operands::F16x3,
            Variant::F32 => Operands::F16x3Scaled,
        }
    }
}

/// `coop-nhwc-f16`.
pub(crate) static COOP_NHWC_F16: Nhwc = Nhwc { variant: Variant::F16 };
/// `coop-nhwc-f16x3`.
pub(crate) static COOP_NHWC_F16X3: Nhwc = Nhwc { variant: Variant::F16x3 };
/// `coop-nhwc-f32`: [`Precision::F32`] on the matrix units. The f16x3 kernel with an
/// input-maximum pass before the staging pass, which scales each chunk's input by a power of
/// two into f16's range (so no input is out of range), infinities and NaN staged as they
/// are, and weights split so that each half carries its weight's sign and is non-zero for a
/// non-zero weight: every product with an infinite input then has the sign f32's would, and
/// special values propagate as in the f32 kernels. Finite weights only (selection sends
/// others elsewhere; named explicitly, it refuses them). The signs rely on the matrix units
/// keeping f16 subnormals (a weight's half may be the smallest one), as NVIDIA's do: named
/// on a device that flushes them, an infinite input may give NaN where f32 gives ±inf.
pub(crate) static COOP_NHWC_F32: Nhwc = Nhwc { variant: Variant::F32 };

impl Nhwc {
    /// Operands split into two f16 halves.
    fn split(&self) -> bool {
        self.variant != Variant::F16
    }
    /// The input scaled by the input-maximum pass's power of two.
    fn scaled(&self) -> bool {
        self.variant == Variant::F32
    }
    /// f16 halves per operand: 1, or 2 for the split kernels.
    fn halves(&self) -> u64 {
        1 + self.split() as u64
    }
}

impl Family for Nhwc {
    fn name(&self) -> &'static str {
        match self.variant {
            Variant::F16 => "coop-nhwc-f16",
            Variant::F16x3 => "coop-nhwc-f16x3",
            Variant::F32 => "coop-nhwc-f32",
        }
    }
    fn precision(&self) -> Precision {
        match self.variant {
            Variant::F16 => Precision::F16Accum32,
            Variant::F16x3 => Precision::F16x3,
            Variant::F32 => Precision::F32,
        }
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(NhwcKernel { family: self, tile: TileConfig::parse(config)? }))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(NhwcKernel { family: self, tile: nhwc_sweep(self.split())[0] })
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        nhwc_sweep(self.split()).into_iter().map(|tile| Kernel::new(NhwcKernel { family: self, tile })).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
    fn takes_non_finite_weights(&self) -> bool {
        self.variant != Variant::F32
    }
}

/// The declared sweep of the f16 (`split` false) or f16x3 kernel, the reference first:
/// 8 warps of 4×2 fragments over 128 positions × 128 channels, with K steps of 64 in one
/// buffer for f16 (the fastest on the H100's VGG-16 layers) and of 32 for f16x3 (whose
/// doubled tiles leave no room for more), then (f16) the same block on 4 warps of 4×4
/// fragments with K steps of 32, small enough in workgroup memory for two workgroups per
/// multiprocessor (faster where 128×128 tiles fill about one and a half waves of one), then
/// smaller blocks for small grids (f16: the 64×64 ones in one buffer, which ran faster than
/// in two on 75 of 77 network layers on the H100), K steps of 16 in one buffer for
/// short K, and (f16) blocks of 16 and 32 columns for groups of that few output channels.
pub fn nhwc_sweep(split: bool) -> Vec<TileConfig> {
    use TileConfig as T;
    match split {
        false => vec![
            T::with_thread_tile(128, 128, 64, 8, 8, 1),
            T::with_thread_tile(128, 128, 32, 16, 8, 1),
            T::with_thread_tile(128, 128, 32, 8, 8, 2),
            T::with_thread_tile(128, 128, 16, 8, 8, 2),
            T::with_thread_tile(128, 64, 32, 8, 8, 2),
            T::with_thread_tile(64, 128, 32, 8, 8, 2),
            T::with_thread_tile(64, 64, 32, 4, 8, 1),
            T::with_thread_tile(64, 64, 64, 4, 8, 1),
            T::with_thread_tile(32, 64, 32, 4, 8, 2),
            T::with_thread_tile(128, 128, 16, 8, 8, 1),
            T::with_thread_tile(128, 64, 16, 8, 8, 1),
            T::with_thread_tile(64, 128, 32, 8, 8, 1),
            T::with_thread_tile(128, 16, 16, 4, 4, 1),
            T::with_thread_tile(128, 32, 16, 8, 4, 1),
            T::with_thread_tile(128, 32, 32, 8, 4, 1),
        ],
        true => vec![
            T::with_thread_tile(128, 128, 32, 8, 8, 1),
            T::with_thread_tile(128, 64, 32, 8, 8, 1),
            T::with_thread_tile(64, 128, 32, 8, 8, 1),
            T::with_thread_tile(64, 64, 32, 4, 8, 2),
            T::with_thread_tile(64, 64, 64, 4, 8, 1),
            T::with_thread_tile(32, 64, 32, 4, 8, 2),
            T::with_thread_tile(64, 64, 16, 4, 8, 1),
        ],
    }
}

/// The staged input's geometry for one problem: channels per group `cg` padded to `cg8`
/// vectors, `c8` vectors per pixel, the padded image `hp × wp` (the caller's `h × w` for an
/// input read in place: [`StagedGeometry::in_place`]), the group's K in f16 padded
/// to whole K steps (`k_pad`), and the vectors of one K step (`step8`), the chunk of
/// channels [`StagedGeometry::k_order`] walks through every tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StagedGeometry {
    pub cg: u32,
    pub cg8: u32,
    pub c8: u32,
    pub hp: u32,
    pub wp: u32,
    pub k_pad: u32,
    pub step8: u32,
}

/// The GEMM's K as the channels-last kernels walk it: taps × each group's channels padded to
/// whole vectors of 8 (saturating: the kernels refuse a K over 2^31 − 1 in `check_spec`).
pub(crate) fn channels_last_k(spec: &Conv2dSpec) -> u64 {
    let channels = (spec.in_channels_per_group() as u64).next_multiple_of(VEC as u64);
    (spec.kernel[0] as u64 * spec.kernel[1] as u64).saturating_mul(channels)
}

impl StagedGeometry {
    pub(crate) fn new(spec: &Conv2dSpec, h: u32, w: u32, block_k: u32) -> StagedGeometry {
        let cg = spec.in_channels_per_group();
        let cg8 = cg.div_ceil(VEC);
        // Saturating: `check_spec` refuses what does not fit (a K of over 2^31 - 1), and a
        // problem's padded extents stay below 2^29; nothing overflows on the way there.
        let k8 = spec.kernel[0].saturating_mul(spec.kernel[1]).saturating_mul(cg8);
        StagedGeometry {
            cg,
            cg8,
            c8: spec.groups.saturating_mul(cg8),
            hp: h.saturating_add(spec.padding.top).saturating_add(spec.padding.bottom),
            wp: w.saturating_add(spec.padding.left).saturating_add(spec.padding.right),
            k_pad: k8.saturating_mul(VEC).checked_next_multiple_of(block_k).unwrap_or(u32::MAX),
            step8: (block_k / VEC).max(1),
        }
    }

    /// The geometry of an input read in place: the caller's tensor, no padding written out.
    fn in_place(spec: &Conv2dSpec, h: u32, w: u32, block_k: u32) -> StagedGeometry {
        StagedGeometry { hp: h, wp: w, ..StagedGeometry::new(spec, h, w, block_k) }
    }

    /// The K order, shared by the K table and the weight packing: per K vector, its tap
    /// (`ky · kw + kx`) and its vector of the group's channels. The channels go in chunks
    /// of one K step, each chunk through every tap before the next, so consecutive K steps
    /// read the same channels at neighbouring taps — mostly the same bytes, while they are
    /// still in the L1 cache. (Tap-major order read each tap's channels K steps apart. The
    /// gain is small: the kernel waits on its loads' latency more than on L2's bandwidth.)
    pub(crate) fn k_order(&self, taps: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let step8 = self.step8;
        (0..self.cg8.div_ceil(step8)).flat_map(move |chunk| {
            let first = chunk * step8;
            let vectors = step8.min(self.cg8 - first);
            (0..taps).flat_map(move |tap| (first..first + vectors).map(move |cv| (tap, cv)))
        })
    }
    /// Staged bytes per image, per operand half.
    fn bytes_per_image(&self) -> u64 {
        self.hp as u64 * self.wp as u64 * self.c8 as u64 * VEC as u64 * 2
    }
    /// The K table: per K vector (in [`StagedGeometry::k_order`]), its offset in vectors
    /// from a window origin; [`NO_TAP`] past K.
    fn k_table(&self, spec: &Conv2dSpec) -> Vec<u32> {
        let kw = spec.kernel[1];
        let mut table: Vec<u32> = self
            .k_order(spec.kernel[0] * kw)
            .map(|(tap, cv)| {
                let (ky, kx) = (tap / kw, tap % kw);
                (ky * spec.dilation[0] * self.wp + kx * spec.dilation[1]) * self.c8 + cv
            })
            .collect();
        table.resize((self.k_pad / VEC) as usize, NO_TAP);
        table
    }
    /// The K table of the bordered in-place kernel: per K vector, its offset (as
    /// [`StagedGeometry::k_table`]'s) and its tap's index in the window, the bit of the rows'
    /// masks that says whether it is inside the image; `[0, 31]` past K (no row's mask has
    /// bit 31: at most [`MAX_BORDER_TAPS`] taps).
    fn k_table_taps(&self, spec: &Conv2dSpec) -> Vec<[u32; 2]> {
        let taps: Vec<u32> = self.k_order(spec.kernel[0] * spec.kernel[1]).map(|(tap, _)| tap).collect();
        self.k_table(spec)
            .into_iter()
            .enumerate()
            .map(|(i, offset)| match taps.get(i) {
                Some(&tap) => [offset, tap],
                None => [0, MAX_BORDER_TAPS],
            })
            .collect()
    }
}

impl TileConfig {
    /// Workgroup memory of the channels-last kernel: the f16 A and B stages (rows padded by
    /// 8) once per operand half (`halves`: 1 for f16, 2 for f16x3), one 16×16 f32 scratch
    /// fragment per warp, and the row table (with the border masks of an input read in place
    /// with padding).
    pub fn nhwc_workgroup_bytes(&self, halves: u64) -> u64 {
        let (bm, bn, bk, st) = (self.block_m as u64, self.block_n as u64, self.block_k as u64, self.stages as u64);
        halves * (st * bm * (bk + 8) * 2 + st * bk * (bn + 8) * 2) + self.warps as u64 * 1024 + bm * 12
    }

    /// The channels-last kernel's structural checks and warp layout
    /// `(warps_m, warps_n, fm, fn)`.
    fn nhwc_layout(&self) -> Result<(u32, u32, u32, u32)> {
        self.check_bounds()?;
        self.check_warps()?;
        self.check_fragment_blocks("channels-last cooperative-matrix")?;
        if !crate::tile::STAGE_RANGE.contains(&self.stages) {
            return Err(self.refuse(format!("stages must be in {:?}, got {}", crate::tile::STAGE_RANGE, self.stages)));
        }
        if ![16, 32, 64].contains(&self.block_k) {
            return Err(self.refuse(format!("block_k must be 16, 32 or 64, got {}", self.block_k)));
        }
        let (inv, bk8) = (self.invocations(), self.block_k / VEC);
        if !inv.is_multiple_of(bk8) || !(self.block_m * bk8).is_multiple_of(inv) {
            return Err(self.refuse(format!(
                "the A loader needs block_k/8 | invocations and invocations | block_m·block_k/8 ({inv} invocations, {}x{})",
                self.block_m, self.block_k
            )));
        }
        fragment_layout(self.block_m / 16, self.block_n / 16, self.warps, MAX_FRAGMENTS, &self.name())
    }
}

/// What the channels-last kernel's GEMM computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GemmKind {
    /// The convolution (or a family's derived problem) as the K table gathers it.
    Convolution,
    /// The block-diagonal GEMM of `coop-grouped-f16` (`DIAGONAL`, [`f16_diagonal_gemm`]).
    Diagonal,
    /// `coop-nhwc-f32`'s over a Winograd input transform that its family's own staging pass
    /// scaled with 2^8 of headroom (`WINOGRAD_INPUT`, [`f32_winograd_gemm`]).
    WinogradInput,
}

/// A kernel of the channels-last cooperative family.
#[derive(Debug)]
pub(crate) struct NhwcKernel {
    family: &'static Nhwc,
    tile: TileConfig,
}

impl NhwcKernel {
    /// `coop-nhwc-f16` with `tile`.
    pub(crate) fn f16(tile: TileConfig) -> NhwcKernel {
        NhwcKernel { family: &COOP_NHWC_F16, tile }
    }

    /// `coop-nhwc-f32` with `tile`.
    pub(crate) fn f32(tile: TileConfig) -> NhwcKernel {
        NhwcKernel { family: &COOP_NHWC_F32, tile }
    }

    /// The kernel's WGSL, writing the output in `form` (NCHW f32 where the op's passes
    /// convert, else the caller's tensor itself), reading the input as `read` says
    /// ([`NhwcKernel::input_read`]).
    /// `quads` ([`NhwcKernel::stores_quads`]): the output is written 4 f16 at a time.
    /// `watch_sums` ([`watches_sums`]): an input read in place is checked for infinities
    /// from the sums, not at each load.
    /// `gemm`: what the GEMM computes ([`GemmKind`]).
    fn source(
        &self,
        form: TensorForm,
        read: InputRead,
        quads: bool,
        watch_sums: bool,
        gemm: GemmKind,
    ) -> Result<String> {
        let channels_last = form.channels_last;
        let (wm, wn, fm, fn_) = self.tile.nhwc_layout()?;
        let mut header = crate::families::tiled::tile_header(&self.tile);
        header.push_str(&format!(
            "const WARPS_M: u32 = {wm}u;\nconst WARPS_N: u32 = {wn}u;\nconst FM: u32 = {fm}u;\nconst FN: u32 = {fn_}u;\n"
        ));
        let mut generated = fragment_modules(
            fm,
            fn_,
            &FragmentCode {
                a_load: &|i, tile| {
                    format!("coopLoadT<coop_mat16x16<f16, A>>(&{tile}[a_at + {}u * A_QSTRIDE], A_QSTRIDE)", i * 16)
                },
                b_load: &|j, tile| format!("coopLoadT<coop_mat16x16<f16, B>>(&{tile}[b_at + {}u], B_QSTRIDE)", j * 4),
                split: self.family.split(),
                init_row: &|_| String::new(),
                store: &|i, j| {
                    let (m, n) = (i * 16, j * 16);
                    let through_scratch = format!(
                        "coopStore(acc_{i}_{j}, &c_scratch[scratch], FRAG);\n\
                         store_fragment(blk, warp, lane, wm0 + {m}u, wn0 + {n}u);\n"
                    );
                    // A cooperative store writes the fragment's f32: f16 tensors take the
                    // scratch path (each element converted) every time.
                    if quads {
                        return format!(
                            "coopStoreT(acc_{i}_{j}, &c_scratch[scratch], FRAG);\n\
                             store_quads(blk, warp, lane, wm0 + {m}u, wn0 + {n}u, bias_{j});\n"
                        );
                    }
                    if form.f16 {
                        return through_scratch;
                    }
                    // NCHW: column-major, positions apart by 1 and channels by OH·OW;
                    // channels last: row-major, channels apart by 1 and positions by C_out.
                    let (store, stride) = match channels_last {
                        false => ("coopStore", "ohw"),
                        true => ("coopStoreT", "c_out"),
                    };
                    format!(
                        "if (direct) {{\n\
                         \x20   let n_at = blk.n0 + wn0 + {n}u;\n\
                         \x20   let out = u32(row_info[wm0 + {m}u].y) + n_at * out_channel_stride();\n\
                         \x20   {store}(unscale_second() * (unscale_first() * acc_{i}_{j}) + bias_fragment(blk.g * p.c_out_per_group + n_at), &output[out], {stride});\n\
                         }} else {{\n{through_scratch}}}\n"
                    )
                },
            },
        );
        if gemm == GemmKind::Diagonal {
            for module in generated.iter_mut().filter(|(name, _)| *name == "fragment_mma") {
                module.1 = diagonal_mma(fm, fn_);
            }
        }
        generated.push(("config", header));
        generated.push(layout_config(channels_last));
        if quads {
            // Each fragment column's bias quad, loaded once before the first store.
            let bias = (0..fn_).map(|j| format!("let bias_{j} = quad_bias(blk, wn0 + {}u, lane);\n", j * 16)).collect();
            generated.push(("quad_bias", bias));
        }
        let operands = self.family.variant.operands();
        let mut defines = tensor_defines(form).to_vec();
        if read != InputRead::Staged {
            defines.push("IN_PLACE_INPUT");
        }
        if read == InputRead::InPlaceBordered {
            defines.push("BORDER_TAPS");
        }
        if watch_sums {
            defines.push("SUM_WATCH");
        }
        if quads {
            defines.push("QUAD_STORES");
        }
        match gemm {
            GemmKind::Convolution => {}
            GemmKind::Diagonal => defines.push("DIAGONAL"),
            GemmKind::WinogradInput => defines.push("WINOGRAD_INPUT"),
        }
        compose_operands("nhwc", &[("nhwc", NHWC_WGSL)], generated, operands, true, &defines)
    }

    /// How the kernel reads the input. An f16 channels-last tensor whose groups hold whole
    /// vectors of 8 channels is the staged layout itself but for the padding, and
    /// `coop-nhwc-f16` takes its f16 values as they are (the split kernels stage low halves,
    /// the F32 one a scaled input): it reads that tensor in place, with no staging pass (a
    /// pass that reads the input and writes as many bytes), and flags ±inf inputs itself
    /// (those that some window reads: the staging pass flags every input value, also those
    /// a stride longer than the window skips).
    /// Where there is padding, zeros, and a window of at most [`MAX_BORDER_TAPS`] taps, each
    /// row's taps inside the image are a mask and only those are loaded. Other padding modes
    /// and larger windows are staged.
    fn input_read(&self, problem: &ConvProblem, form: TensorForm) -> InputRead {
        let s = &problem.spec;
        let p = &s.padding;
        if self.family.variant != Variant::F16
            || form != (TensorForm { channels_last: true, f16: true })
            || !s.in_channels_per_group().is_multiple_of(VEC)
        {
            return InputRead::Staged;
        }
        if [p.top, p.bottom, p.left, p.right] == [0; 4] {
            return InputRead::InPlace;
        }
        match s.padding_mode == crate::spec::PaddingMode::Zeros && s.kernel[0] * s.kernel[1] <= MAX_BORDER_TAPS {
            true => InputRead::InPlaceBordered,
            false => InputRead::Staged,
        }
    }

    /// Whether the kernel writes the output in quads of 4 f16 channels: an f16 channels-last
    /// output whose groups hold whole quads of channels (then every row, and every chunk's
    /// window, starts on a quad too). Against one 2-byte store per element, a quarter of the
    /// store instructions: ResNet-50 and VGG-16 in f16 on the H100 ran 9 % faster. (Vectors
    /// of 8 channels packed by `pack2x16float`, each lane reading half a scratch row, which
    /// doubles the workgroup-memory conflicts, ran 4 % slower than quads.)
    fn stores_quads(problem: &ConvProblem, form: TensorForm) -> bool {
        form == (TensorForm { channels_last: true, f16: true })
            && problem.spec.out_channels_per_group().is_multiple_of(QUAD)
    }

    /// The kernel composed for a problem: the staging pass and the GEMM, reading and
    /// writing tensors in `form` (NCHW f32 between the op's passes, else the caller's).
    fn shaped(&self, problem: &ConvProblem, form: TensorForm) -> Result<Box<dyn Shaped>> {
        self.shaped_forms(problem, form, form, GemmKind::Convolution)
    }

    /// [`NhwcKernel::shaped`] reading the input in `input`'s form and writing the output in
    /// `output`'s (a derived problem's GEMM writing a family's scratch); `gemm`: what the
    /// GEMM computes ([`GemmKind`]).
    fn shaped_forms(
        &self,
        problem: &ConvProblem,
        input: TensorForm,
        output: TensorForm,
        gemm: GemmKind,
    ) -> Result<Box<dyn Shaped>> {
        let read = self.input_read(problem, input);
        let (h, w, bk) = (problem.input.h, problem.input.w, self.tile.block_k);
        let geometry = match read {
            InputRead::Staged => StagedGeometry::new(&problem.spec, h, w, bk),
            InputRead::InPlace | InputRead::InPlaceBordered => StagedGeometry::in_place(&problem.spec, h, w, bk),
        };
        let quads = Self::stores_quads(problem, output);
        let staging = match read {
            InputRead::InPlace | InputRead::InPlaceBordered => None,
            InputRead::Staged => Some(Staging {
                source: stage_source(problem, &geometry, self.family.variant.operands(), input)?,
                bytes_per_image: geometry.bytes_per_image() * self.family.halves(),
                invocations_per_image: geometry.hp as u64 * geometry.wp as u64 * geometry.c8 as u64,
                workgroup_size: STAGE_WG,
                scaled_input: self.family.scaled(),
            }),
        };
        Ok(Box::new(StagedShaped {
            source: self.source(output, read, quads, watches_sums(problem, read, quads), gemm),
            staging,
            read,
            spec: problem.spec,
            geometry,
            tile: self.tile,
            n_pad: self.n_pad(&problem.spec),
            split: self.family.split(),
            quads,
        }))
    }

    fn n_pad(&self, spec: &Conv2dSpec) -> u32 {
        spec.out_channels_per_group().next_multiple_of(self.tile.block_n)
    }
}

/// Whether the kernel finds infinities in an input read in place from its sums
/// (`SUM_WATCH`) rather than by testing each loaded vector: where it writes quads (the path
/// that watches them) and K is at least 256. The per-load test cost VGG-16's 512-channel
/// layers 5–10 % on the H100, the sums' watch 2–3.5 % on ResNet-50's 1×1 layers of K = 64
/// and 128 (against 7 % gained at K = 1024). The diagonal GEMM watches every fragment
/// column's sums: 1.5–4 % faster than the per-load test on ResNeXt-50's grouped 3×3 layers
/// (K = 576).
fn watches_sums(problem: &ConvProblem, read: InputRead, quads: bool) -> bool {
    read != InputRead::Staged && quads && channels_last_k(&problem.spec) >= 256
}

/// `coop-nhwc-f16` with `tile` as the GEMM of a family's derived problem, reading the input
/// in `input`'s form (in place, with no staging pass, where it is f16 channels last with
/// whole vectors of channels per group: [`NhwcKernel::input_read`]) and writing
/// channels-last output into the family's scratch, f16 (`f16_output`; in quads where the
/// groups allow) or f32.
pub(crate) fn f16_gemm(
    tile: TileConfig,
    problem: &ConvProblem,
    input: TensorForm,
    f16_output: bool,
) -> Result<Box<dyn Shaped>> {
    let kernel = NhwcKernel { family: &COOP_NHWC_F16, tile };
    kernel.shaped_forms(problem, input, TensorForm { channels_last: true, f16: f16_output }, GemmKind::Convolution)
}

/// `coop-nhwc-f16` with `tile` as a block-diagonal GEMM (`DIAGONAL`): `problem` is a grouped
/// convolution whose groups each take `block_n` input and output channels
/// (`coop-grouped-f16`'s groups of 8 or 16 channels, taken `block_n` channels at a time),
/// `block_k` equal to `block_n` (each K step one tap of a block's channels), and the
/// weights packed by [`pack_diagonal`]: of each K step's `block_k × block_n`, only the
/// 16 × 16 blocks on the diagonal. Reads and writes the caller's tensors in `form`.
pub(crate) fn f16_diagonal_gemm(tile: TileConfig, problem: &ConvProblem, form: TensorForm) -> Result<Box<dyn Shaped>> {
    let kernel = NhwcKernel { family: &COOP_NHWC_F16, tile };
    kernel.shaped_forms(problem, form, form, GemmKind::Diagonal)
}

/// `coop-nhwc-f32` with `tile` as the GEMM of `coop-winograd-f32`'s derived problem (a 1×1
/// convolution of n² groups, no padding): it reads the staged layout ([`StagedGeometry`],
/// high halves then low ones) that the family's input transform writes in place of this
/// kernel's staging pass, its values scaled by `input_scale.wgsl`'s scale with
/// `WINOGRAD_INPUT`'s headroom (undone by the same), and writes NCHW f32 products. Its
/// `staging()` is this kernel's own pass, which the family replaces.
pub(crate) fn f32_winograd_gemm(tile: TileConfig, problem: &ConvProblem) -> Result<Box<dyn Shaped>> {
    NhwcKernel::f32(tile).shaped_forms(problem, TensorForm::NCHW_F32, TensorForm::NCHW_F32, GemmKind::WinogradInput)
}

/// The diagonal GEMM's `fragment_mma`: per fragment column j, B's diagonal block j and, per
/// fragment row i, A's rows against the channels of column block j.
fn diagonal_mma(fm: u32, fn_: u32) -> String {
    let mut mma = String::new();
    for j in 0..fn_ {
        mma.push_str(&format!(
            "let b_{j} = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[b_at + {}u], B_QSTRIDE);\n",
            j * 4
        ));
        for i in 0..fm {
            mma.push_str(&format!(
                "acc_{i}_{j} = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&a_tile[a_at + {}u * A_QSTRIDE + {}u], \
                 A_QSTRIDE), b_{j}, acc_{i}_{j});\n",
                i * 16,
                j * 4
            ));
        }
    }
    mma
}

/// Weights as the diagonal GEMM reads them ([`f16_diagonal_gemm`]): for a grouped `spec`
/// whose groups each take `c` input and output channels (`c` dividing 16), per block of
/// `block_n` channels and per tap, 16 rows × `block_n` columns: column n (the block's output
/// channel n) holds, in row r, its weight from the block's input channel 16·⌊n/16⌋ + r, zero
/// where that channel is another group's.
pub(crate) fn pack_diagonal(spec: &Conv2dSpec, weight: &[f32], block_n: u32) -> Result<Vec<f32>> {
    let taps = (spec.kernel[0] * spec.kernel[1]) as usize;
    let c = spec.in_channels_per_group() as usize;
    let bn = block_n as usize;
    let blocks = spec.out_channels as usize / bn;
    let mut packed = alloc::zeroed_vec::<f32>(blocks * taps * 16 * bn, "the packed weights")?;
    for blk in 0..blocks {
        for tap in 0..taps {
            for n in 0..bn {
                let out = blk * bn + n;
                let group_first = (out / c) * c;
                for r in 0..16 {
                    let input = blk * bn + (n / 16) * 16 + r;
                    if let Some(ci) = input.checked_sub(group_first).filter(|&ci| ci < c) {
                        // PyTorch's [c_out][c][ky][kx].
                        packed[((blk * taps + tap) * 16 + r) * bn + n] = weight[(out * c + ci) * taps + tap];
                    }
                }
            }
        }
    }
    Ok(packed)
}

/// The `layout_config` module: whether the input and output are channels last.
pub(crate) fn layout_config(channels_last: bool) -> (&'static str, String) {
    ("layout_config", format!("const CHANNELS_LAST: bool = {channels_last};\n"))
}

/// The `#define`s of a kernel or pass that reads the tensors in `form`.
pub(crate) fn tensor_defines(form: TensorForm) -> &'static [&'static str] {
    match form.f16 {
        true => &[F16_TENSORS],
        false => &[],
    }
}

/// The staging pass's source for one problem, reading the input in `form`.
fn stage_source(problem: &ConvProblem, g: &StagedGeometry, operands: Operands, form: TensorForm) -> Result<String> {
    let s = &problem.spec;
    let config = format!(
        "const H: u32 = {h}u;\nconst W: u32 = {w}u;\nconst C: u32 = {c}u;\nconst HP: u32 = {hp}u;\n\
         const WP: u32 = {wp}u;\nconst C8: u32 = {c8}u;\nconst CG8: u32 = {cg8}u;\nconst CG: u32 = {cg}u;\n\
         const PT: u32 = {pt}u;\nconst PL: u32 = {pl}u;\nconst STAGE_WG: u32 = {STAGE_WG}u;\n",
        h = problem.input.h,
        w = problem.input.w,
        c = problem.input.c,
        hp = g.hp,
        wp = g.wp,
        c8 = g.c8,
        cg8 = g.cg8,
        cg = g.cg,
        pt = s.padding.top,
        pl = s.padding.left,
    );
    let generated = vec![("stage_config", config), layout_config(form.channels_last)];
    compose_operands("stage", &[("stage", STAGE_WGSL)], generated, operands, false, tensor_defines(form))
}

impl KernelConfig for NhwcKernel {
    fn family(&self) -> &'static dyn Family {
        self.family
    }
    fn name(&self) -> String {
        self.tile.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.tile.nhwc_layout().map(|_| ())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.tile.nhwc_layout()?;
        self.tile.check_device(limits, self.tile.nhwc_workgroup_bytes(self.family.halves()))
    }
    fn check_spec(&self, spec: &Conv2dSpec, _limits: &KernelLimits) -> Result<()> {
        // K in 32-bit indexing.
        let k = channels_last_k(spec);
        if k.next_multiple_of(self.tile.block_k.max(1) as u64) > i32::MAX as u64 {
            return Err(crate::error::Error::KernelRefused {
                kernel: format!("{}:{}", self.family.name(), self.tile.name()),
                reason: format!("K = {k} with each group's channels padded to whole vectors of 8 (at most 2^31 - 1)"),
            });
        }
        Ok(())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        let g = StagedGeometry::new(spec, 1, 1, self.tile.block_k);
        spec.groups as u64 * g.k_pad as u64 * self.n_pad(spec) as u64 * 2 * self.family.halves()
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        // Refusals before any packing work.
        if self.family.scaled() {
            if let Some(v) = weight.iter().find(|v| !v.is_finite()) {
                // Selection sends ops with non-finite weights to the f32 FMA kernels.
                return Err(crate::error::Error::KernelRefused {
                    kernel: format!("{}:{}", self.family.name(), self.tile.name()),
                    reason: format!("a weight is {v}: this kernel takes finite weights (the f32 FMA kernels take any)"),
                });
            }
        } else if let Some(v) = weight.iter().find(|v| v.is_infinite()).filter(|_| self.family.split()) {
            // As coop-f16x3: an infinite weight would give NaN where f32 gives ±inf.
            return Err(crate::error::Error::F16Range { what: "weight", detail: format!(", e.g. {v}") });
        }
        let packed = pack_channels_last(spec, weight, self.tile.block_k, self.n_pad(spec))?;
        if !self.family.split() {
            return Ok(Packed::weights(f16_bytes(packed)?));
        }
        // split_weights interleaves four high and four low halves; this kernel reads all
        // high halves, then all low ones (`Grid.w_lo`).
        let (quads, scale) = split_weights(&packed, self.family.scaled())?;
        let mut bytes = alloc::vec_with_capacity::<u8>(quads.len(), "the split f16x3 weights")?;
        bytes.extend(quads.chunks(16).flat_map(|q| q[..8].iter().copied()));
        bytes.extend(quads.chunks(16).flat_map(|q| q[8..].iter().copied()));
        Ok(Packed { weight: bytes, extra: Vec::new(), out_scale: 1.0 / scale, bias: None })
    }
    fn extra_bindings(&self) -> &'static [u32] {
        match self.family.scaled() {
            false => &[KTAB_BINDING, GRID_BINDING],
            true => &[KTAB_BINDING, GRID_BINDING, INPUT_MAX_BINDING],
        }
    }
    fn shape(&self, problem: &ConvProblem, _limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.shaped(problem, TensorForm::NCHW_F32)
    }
    fn shape_native(
        &self,
        problem: &ConvProblem,
        _limits: &KernelLimits,
        form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        // Every form: the staging pass reads either layout and element type, and the
        // epilogue writes either.
        Some(self.shaped(problem, form))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let problem = Conv2dSpec::new(16, 32, 3).padding(1).problem(crate::spec::Shape4::new(1, 16, 9, 9))?;
        let g = StagedGeometry::new(&problem.spec, 9, 9, self.tile.block_k);
        let mut sources = Vec::new();
        for channels_last in [false, true] {
            for f16 in [false, true] {
                let form = TensorForm { channels_last, f16 };
                sources.push(self.source(form, InputRead::Staged, false, false, GemmKind::Convolution)?);
                if channels_last && f16 {
                    sources.push(self.source(form, InputRead::Staged, true, false, GemmKind::Convolution)?);
                }
                sources.push(stage_source(&problem, &g, self.family.variant.operands(), form)?);
            }
        }
        if self.family.variant == Variant::F16 {
            let f16_nhwc = TensorForm { channels_last: true, f16: true };
            for read in [InputRead::InPlace, InputRead::InPlaceBordered] {
                for (quads, watch) in [(true, true), (true, false), (false, false)] {
                    sources.push(self.source(f16_nhwc, read, quads, watch, GemmKind::Convolution)?);
                }
            }
        }
        if self.family.scaled() {
            for f16 in [false, true] {
                sources.push(crate::kernel::input_max_pass_source(f16)?);
            }
        }
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(self.tile.nhwc_workgroup_bytes(self.family.halves()))
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(Kernel::new(NhwcKernel { family: self.family, tile }))
    }
    fn operand_halves(&self) -> Option<u32> {
        Some(self.family.halves() as u32)
    }
}

/// Weights as the channels-last kernel reads them: `[groups][k_pad][n_pad]`, K in the
/// order of [`StagedGeometry::k_order`] with each group's channels padded to whole vectors;
/// zeros beyond.
pub(crate) fn pack_channels_last(spec: &Conv2dSpec, weight: &[f32], block_k: u32, n_pad: u32) -> Result<Vec<f32>> {
    let g = StagedGeometry::new(spec, 1, 1, block_k);
    let taps = (spec.kernel[0] * spec.kernel[1]) as usize;
    let cg = g.cg as usize;
    let (k_pad, n_pad) = (g.k_pad as usize, n_pad as usize);
    let cout_g = spec.out_channels_per_group() as usize;
    let mut packed = alloc::zeroed_vec::<f32>(spec.groups as usize * k_pad * n_pad, "the packed weights")?;
    let order: Vec<(u32, u32)> = g.k_order(taps as u32).collect();
    for grp in 0..spec.groups as usize {
        for n in 0..cout_g {
            // PyTorch's [c_out][c][ky][kx]: tap t of channel c at c · taps + t.
            let src = &weight[(grp * cout_g + n) * cg * taps..][..cg * taps];
            for (kv, &(tap, cv)) in order.iter().enumerate() {
                for i in 0..VEC as usize {
                    let c = cv as usize * VEC as usize + i;
                    if c < cg {
                        packed[(grp * k_pad + kv * VEC as usize + i) * n_pad + n] = src[c * taps + tap as usize];
                    }
                }
            }
        }
    }
    Ok(packed)
}

/// The channels-last kernel's grid, in the field order of `nhwc.wgsl`'s `Grid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable, Default)]
struct StagedGrid {
    k_steps: u32,
    n_pad: u32,
    m_tiles: u32,
    n_tiles: u32,
    total_tiles: u32,
    hp: u32,
    wp: u32,
    c8: u32,
    cg8: u32,
    w_lo: u32,
    _pad: [u32; 2],
}

/// The channels-last kernel composed for one input size.
struct StagedShaped {
    source: Result<String>,
    /// `None` where the kernel reads the caller's input in place.
    staging: Option<Staging>,
    /// How the kernel reads its input: read in place with border masks (`BORDER_TAPS`), its
    /// K table holds each K vector's tap index too.
    read: InputRead,
    spec: Conv2dSpec,
    geometry: StagedGeometry,
    tile: TileConfig,
    n_pad: u32,
    split: bool,
    /// The output is written in quads of channels ([`NhwcKernel::stores_quads`]).
    quads: bool,
}

impl Shaped for StagedShaped {
    fn source(&self) -> Result<String> {
        self.source.clone()
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        let bytes = match self.read {
            InputRead::Staged | InputRead::InPlace => {
                alloc::bytes_of(&self.geometry.k_table(&self.spec), "the K table")?
            }
            InputRead::InPlaceBordered => alloc::bytes_of(&self.geometry.k_table_taps(&self.spec), "the K table")?,
        };
        Ok(vec![(KTAB_BINDING, "wgconv K table", bytes)])
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        if self.quads && !p.out_offset.is_multiple_of(QUAD) {
            // Chunks start at whole images, whose outputs are whole quads: never met.
            return Err(crate::error::Error::unsupported(format!(
                "the channels-last kernel's output offset {} is not a whole quad of channels",
                p.out_offset
            )));
        }
        let g = &self.geometry;
        let mut grid = StagedGrid {
            k_steps: g.k_pad / self.tile.block_k,
            n_pad: self.n_pad,
            m_tiles: p.m_total.div_ceil(self.tile.block_m),
            n_tiles: self.n_pad / self.tile.block_n,
            hp: g.hp,
            wp: g.wp,
            c8: g.c8,
            cg8: g.cg8,
            ..Default::default()
        };
        if self.split {
            let vectors = self.spec.groups as u64 * g.k_pad as u64 * self.n_pad as u64 / VEC as u64;
            grid.w_lo = u32::try_from(vectors).map_err(|_| {
                crate::error::Error::TooLarge(format!("{vectors} vectors of f16x3 weights exceed u32 indexing"))
            })?;
        }
        let total = grid.m_tiles as u64 * grid.n_tiles as u64 * self.spec.groups as u64;
        grid.total_tiles = workgroups_u32(total)?;
        Ok((bytemuck::bytes_of(&grid).to_vec(), total))
    }
    fn staging(&self) -> Option<&Staging> {
        self.staging.as_ref()
    }
}

/// CPU twin of `input_scale.wgsl`'s `input_scale_exponent`: from the bits of a chunk's
/// largest finite magnitude, the exponent of the power of two that puts it in [2^13, 2^14),
/// within f32's normal range.
#[cfg(test)]
fn input_scale_exponent(max_bits: u32) -> i32 {
    (13 - ((max_bits >> 23) as i32 - 127)).clamp(-126, 126)
}

/// CPU twin of `stage.wgsl` (without the f16 rounding): the staged `[n][HP][WP][C8·8]`
/// input of `problem`.
#[cfg(test)]
fn stage_input(problem: &ConvProblem, g: &StagedGeometry, input: &[f32]) -> Vec<f32> {
    let s = &problem.spec;
    let (c, h, w) = (problem.input.c as i64, problem.input.h as i64, problem.input.w as i64);
    let mut out = vec![0.0; problem.input.n as usize * (g.hp * g.wp * g.c8 * VEC) as usize];
    for n in 0..problem.input.n as i64 {
        for y in 0..g.hp as i64 {
            for x in 0..g.wp as i64 {
                let src = |i: i64, len: i64, pad: u32| {
                    let i = i - pad as i64;
                    if (0..len).contains(&i) {
                        Some(i)
                    } else {
                        s.padding_mode.source(i, len)
                    }
                };
                let (Some(iy), Some(ix)) = (src(y, h, s.padding.top), src(x, w, s.padding.left)) else {
                    continue;
                };
                for grp in 0..s.groups as i64 {
                    for ci in 0..g.cg as i64 {
                        let at = ((n * g.hp as i64 + y) * g.wp as i64 + x) * (g.c8 * VEC) as i64
                            + grp * (g.cg8 * VEC) as i64
                            + ci;
                        out[at as usize] = input[(((n * c + grp * g.cg as i64 + ci) * h + iy) * w + ix) as usize];
                    }
                }
            }
        }
    }
    out
}

/// CPU twin of `nhwc.wgsl`: the GEMM over the staged input, the K table and the packed
/// weights, NCHW output with bias.
#[cfg(test)]
fn conv_staged(
    problem: &ConvProblem,
    tile: &TileConfig,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let g = StagedGeometry::new(&problem.spec, problem.input.h, problem.input.w, tile.block_k);
    twin_a_staged(problem, &g, input, bias, dense_weights(&problem.spec, weight, tile))
}

/// CPU twin of `nhwc.wgsl` reading an f16 channels-last input in place (`IN_PLACE_INPUT`,
/// with `BORDER_TAPS` where there is padding): the window origins on the unpadded tensor,
/// each row's mask of taps inside the image ([`window_taps`]), the K table with tap indices
/// and the packed weights; NCHW output with bias. `input` is NCHW (the reference's), laid out
/// channels last here.
#[cfg(test)]
fn conv_in_place(
    problem: &ConvProblem,
    tile: &TileConfig,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let g = StagedGeometry::in_place(&problem.spec, problem.input.h, problem.input.w, tile.block_k);
    twin_a_in_place(problem, &g, input, bias, dense_weights(&problem.spec, weight, tile))
}

/// CPU twin of `nhwc.wgsl`'s `DIAGONAL` GEMM ([`f16_diagonal_gemm`]) on a grouped
/// `problem` of `coop-grouped-f16`: the problem regrouped into blocks of `block_n`
/// channels, its K table and row origins, the input staged or (`in_place`) read in place
/// with border masks, and per K step the 16 rows of B at the kernel's weight offset in the
/// weights of [`pack_diagonal`], column n reading A's channels `16·⌊n/16⌋ …` of the step
/// only; NCHW output with bias.
#[cfg(test)]
pub(crate) fn conv_diagonal(
    problem: &ConvProblem,
    tile: &TileConfig,
    in_place: bool,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let bn = tile.block_n;
    assert_eq!(tile.block_k, bn, "one tap of the block's channels per K step");
    let blocked = ConvProblem { spec: problem.spec.groups(problem.spec.out_channels / bn), ..*problem };
    let (h, w) = (problem.input.h, problem.input.w);
    let g = match in_place {
        true => StagedGeometry::in_place(&blocked.spec, h, w, bn),
        false => StagedGeometry::new(&blocked.spec, h, w, bn),
    };
    let packed = pack_diagonal(&problem.spec, weight, bn).unwrap();
    let (k_steps, bk8, n8) = (g.k_pad / bn, (bn / VEC) as usize, (bn / VEC) as usize);
    // Per K vector kv: step kv / bk8 (one tap), channel vector kv % bk8 of the block; the
    // kernel's B vectors from w0 = (block · k_steps + step) · 16 rows · (n_pad / 8), row r
    // of column n holding the weight of the step's channel 16·⌊n/16⌋ + r.
    let weights = move |grp: u32, kv: usize, i: usize, n: u32| -> f32 {
        let (step, c) = ((kv / bk8) as u32, (kv % bk8) * VEC as usize + i);
        let Some(r) = c.checked_sub((n as usize / 16) * 16).filter(|&r| r < 16) else {
            return 0.0;
        };
        let w0 = ((grp * k_steps + step) * 16 * (bn / VEC)) as usize;
        let vector = w0 + r * n8 + n as usize / VEC as usize;
        packed[vector * VEC as usize + n as usize % VEC as usize]
    };
    match in_place {
        true => twin_a_in_place(&blocked, &g, input, bias, weights),
        false => twin_a_staged(&blocked, &g, input, bias, weights),
    }
}

/// The weights of [`pack_channels_last`] as the twins' GEMM reads them: per group, K
/// vector, element of the vector and output channel of the group.
#[cfg(test)]
fn dense_weights(spec: &Conv2dSpec, weight: &[f32], tile: &TileConfig) -> impl Fn(u32, usize, usize, u32) -> f32 {
    let n_pad = spec.out_channels_per_group().next_multiple_of(tile.block_n) as usize;
    let k_pad = StagedGeometry::new(spec, 1, 1, tile.block_k).k_pad as usize;
    let packed = pack_channels_last(spec, weight, tile.block_k, n_pad as u32).unwrap();
    move |grp, kv, i, n| packed[(grp as usize * k_pad + kv * VEC as usize + i) * n_pad + n as usize]
}

/// The twins' GEMM over the staged input (`stage_input`) and its K table.
#[cfg(test)]
fn twin_a_staged(
    problem: &ConvProblem,
    g: &StagedGeometry,
    input: &[f32],
    bias: Option<&[f32]>,
    weights: impl Fn(u32, usize, usize, u32) -> f32,
) -> Vec<f32> {
    let s = &problem.spec;
    let staged = stage_input(problem, g, input);
    let table = g.k_table(s);
    let ow = problem.output.w;
    twin_gemm(problem, g, &staged, bias, weights, |img, pos, grp, kv| {
        let (y, x) = ((pos / ow) * s.stride[0], (pos % ow) * s.stride[1]);
        let origin = ((img * g.hp + y) * g.wp + x) * g.c8 + grp * g.cg8;
        (table[kv] != NO_TAP).then(|| (origin + table[kv]) as usize)
    })
}

/// The twins' GEMM over the channels-last input read in place: window origins on the
/// unpadded tensor, masks of the taps inside the image, the K table with tap indices.
#[cfg(test)]
fn twin_a_in_place(
    problem: &ConvProblem,
    g: &StagedGeometry,
    input: &[f32],
    bias: Option<&[f32]>,
    weights: impl Fn(u32, usize, usize, u32) -> f32,
) -> Vec<f32> {
    let s = &problem.spec;
    let (h, w) = (problem.input.h, problem.input.w);
    assert_eq!(g.cg8 * VEC, g.cg, "in place: whole vectors of channels per group");
    let nhwc = crate::reference::to_nhwc(input, problem.input).unwrap();
    let table = g.k_table_taps(s);
    let ow = problem.output.w;
    twin_gemm(problem, g, &nhwc, bias, weights, |img, pos, grp, kv| {
        let y = ((pos / ow) * s.stride[0]) as i64 - s.padding.top as i64;
        let x = ((pos % ow) * s.stride[1]) as i64 - s.padding.left as i64;
        let origin = ((img as i64 * h as i64 + y) * w as i64 + x) * g.c8 as i64 + (grp * g.cg8) as i64;
        let [offset, tap] = table[kv];
        (window_taps(s, h, w, y, x) & (1u32 << tap) != 0).then(|| (origin + offset as i64) as usize)
    })
}

/// The GEMM of the twins: each output's sum over the K vectors that `a_vector(img, pos,
/// group, k vector)` places (its index in vectors of `a`, or `None` for zeros) against
/// `weights(group, k vector, element, output channel)`; NCHW output with bias.
#[cfg(test)]
fn twin_gemm(
    problem: &ConvProblem,
    g: &StagedGeometry,
    a: &[f32],
    bias: Option<&[f32]>,
    weights: impl Fn(u32, usize, usize, u32) -> f32,
    a_vector: impl Fn(u32, u32, u32, usize) -> Option<usize>,
) -> Vec<f32> {
    let s = &problem.spec;
    let (oh, ow) = (problem.output.h, problem.output.w);
    let cout_g = s.out_channels_per_group();
    let vec = VEC as usize;
    let mut out = vec![0.0f32; problem.output.len() as usize];
    for img in 0..problem.input.n {
        for pos in 0..oh * ow {
            for grp in 0..s.groups {
                let vectors: Vec<(usize, usize)> =
                    (0..(g.k_pad / VEC) as usize).filter_map(|kv| Some((kv, a_vector(img, pos, grp, kv)?))).collect();
                for n in 0..cout_g {
                    let mut acc = 0.0f64;
                    for &(kv, at) in &vectors {
                        for i in 0..vec {
                            acc += a[at * vec + i] as f64 * weights(grp, kv, i, n) as f64;
                        }
                    }
                    let oc = grp * cout_g + n;
                    let b = bias.map_or(0.0, |b| b[oc as usize]);
                    out[(((img * s.out_channels + oc) * oh * ow) + pos) as usize] = acc as f32 + b;
                }
            }
        }
    }
    out
}

/// CPU twin of `nhwc.wgsl`'s `window_taps`: bit `ky · kw + kx` set where that tap of the
/// window whose top-left pixel is (y, x) lies inside the `h × w` image.
#[cfg(test)]
fn window_taps(s: &Conv2dSpec, h: u32, w: u32, y: i64, x: i64) -> u32 {
    let mut taps = 0;
    for ky in 0..s.kernel[0] {
        for kx in 0..s.kernel[1] {
            let (yy, xx) = (y + (ky * s.dilation[0]) as i64, x + (kx * s.dilation[1]) as i64);
            if (0..h as i64).contains(&yy) && (0..w as i64).contains(&xx) {
                taps |= 1 << (ky * s.kernel[1] + kx);
            }
        }
    }
    taps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{PaddingMode, Shape4};

    /// The staged layout, K table and weight packing compute the convolution (the GPU
    /// kernel's indexing, on the CPU) across strides, dilation, groups, padding modes and
    /// channel counts that are not whole vectors.
    #[test]
    fn twin_matches_reference() {
        let cases = [
            (Conv2dSpec::new(3, 8, 3).padding(1), Shape4::new(2, 3, 7, 6)),
            (Conv2dSpec::new(16, 24, 3).stride(2).padding((1, 2)), Shape4::new(1, 16, 9, 11)),
            (Conv2dSpec::new(12, 10, 3).kernel_hw((3, 2)).dilation(2).padding([2, 1, 0, 1]), Shape4::new(2, 12, 8, 9)),
            (Conv2dSpec::new(20, 12, 3).groups(2).padding(1).with_bias(true), Shape4::new(1, 20, 5, 5)),
            (Conv2dSpec::new(8, 8, 1), Shape4::new(3, 8, 4, 4)),
            // Channels in several K-step chunks, the last one partial (5 vectors in chunks of
            // 4 at K steps of 32).
            (Conv2dSpec::new(38, 6, 3).padding(1), Shape4::new(1, 38, 5, 6)),
            (Conv2dSpec::new(5, 7, 3).padding(2).padding_mode(PaddingMode::Reflect), Shape4::new(1, 5, 6, 6)),
            (Conv2dSpec::new(9, 4, 3).padding(1).padding_mode(PaddingMode::Circular), Shape4::new(1, 9, 5, 7)),
        ];
        for (spec, shape) in cases {
            let problem = spec.problem(shape).unwrap();
            for tile in [
                nhwc_sweep(false)[0],
                TileConfig::with_thread_tile(64, 64, 32, 4, 8, 2),
                TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1),
            ] {
                crate::reference::check_twin(&format!("{} {spec:?}", tile.name()), &problem, |x, w, b| {
                    conv_staged(&problem, &tile, x, w, b)
                });
            }
        }
    }

    /// Reading an f16 channels-last input in place computes the convolution: window origins
    /// outside the image, masks of the taps inside it, across padding (asymmetric too),
    /// strides, dilation, groups of whole vectors, a 5×5 window and K vectors past K.
    #[test]
    fn in_place_twin_matches_reference() {
        let cases = [
            (Conv2dSpec::new(8, 8, 3).padding(1), Shape4::new(2, 8, 7, 6)),
            (Conv2dSpec::new(16, 24, 3).stride(2).padding((1, 2)), Shape4::new(1, 16, 9, 11)),
            (Conv2dSpec::new(16, 10, 3).kernel_hw((3, 2)).dilation(2).padding([2, 1, 0, 1]), Shape4::new(2, 16, 8, 9)),
            (Conv2dSpec::new(32, 12, 3).groups(2).padding(1).with_bias(true), Shape4::new(1, 32, 5, 5)),
            (Conv2dSpec::new(24, 6, 5).padding(2), Shape4::new(1, 24, 6, 5)),
            (Conv2dSpec::new(8, 8, 1), Shape4::new(3, 8, 4, 4)),
        ];
        for (spec, shape) in cases {
            let problem = spec.problem(shape).unwrap();
            let kernel = NhwcKernel { family: &COOP_NHWC_F16, tile: nhwc_sweep(false)[0] };
            let f16_nhwc = TensorForm { channels_last: true, f16: true };
            let pad = &problem.spec.padding;
            let padded = [pad.top, pad.left, pad.bottom, pad.right] != [0; 4];
            let read = kernel.input_read(&problem, f16_nhwc);
            assert_eq!(read, [InputRead::InPlace, InputRead::InPlaceBordered][padded as usize], "{spec:?}");
            for tile in [nhwc_sweep(false)[0], TileConfig::with_thread_tile(64, 64, 32, 4, 8, 2)] {
                crate::reference::check_twin(&format!("{} {spec:?}", tile.name()), &problem, |x, w, b| {
                    conv_in_place(&problem, &tile, x, w, b)
                });
            }
        }
    }

    /// Other padding modes, windows of more than 31 taps and groups of partial vectors stay
    /// staged, as do the split kernels.
    #[test]
    fn staged_where_in_place_cannot_read() {
        let f16_nhwc = TensorForm { channels_last: true, f16: true };
        let f16 = NhwcKernel { family: &COOP_NHWC_F16, tile: nhwc_sweep(false)[0] };
        let f16x3 = NhwcKernel { family: &COOP_NHWC_F16X3, tile: nhwc_sweep(true)[0] };
        let read = |k: &NhwcKernel, spec: Conv2dSpec, form| {
            k.input_read(&spec.problem(Shape4::new(1, 16, 12, 12)).unwrap(), form)
        };
        let reflect = Conv2dSpec::new(16, 8, 3).padding(1).padding_mode(PaddingMode::Reflect);
        assert_eq!(read(&f16, reflect, f16_nhwc), InputRead::Staged);
        assert_eq!(read(&f16, Conv2dSpec::new(16, 8, 7).padding(3), f16_nhwc), InputRead::Staged);
        assert_eq!(read(&f16, Conv2dSpec::new(16, 8, 3).groups(4).padding(1), f16_nhwc), InputRead::Staged);
        assert_eq!(read(&f16x3, Conv2dSpec::new(16, 8, 3).padding(1), f16_nhwc), InputRead::Staged);
        assert_eq!(read(&f16, Conv2dSpec::new(16, 8, 3).padding(1), TensorForm::NCHW_F32), InputRead::Staged);
        assert_eq!(read(&f16, Conv2dSpec::new(16, 8, 5).padding(2), f16_nhwc), InputRead::InPlaceBordered);
        // 31 taps fit the masks (bit 31 marks K vectors past K), 32 do not.
        let taps = |kh, kw| Conv2dSpec::new(16, 8, 1).kernel_hw((kh, kw)).padding((0, 10));
        assert_eq!(read(&f16, taps(1, 31), f16_nhwc), InputRead::InPlaceBordered);
        assert_eq!(read(&f16, taps(4, 8), f16_nhwc), InputRead::Staged);
    }

    /// The input scale puts the largest magnitude in [2^13, 2^14) and stays a normal f32 at
    /// the edges: an all-zero chunk, a subnormal maximum, the smallest normal, f32's largest.
    #[test]
    fn input_scale_exponent_edges() {
        for max in [1.0f32, 0.75, 8191.0, 8192.0, 3e-20, 1e30, 65504.0 * 3.0] {
            let scaled = max as f64 * 2f64.powi(input_scale_exponent(max.to_bits()));
            assert!((8192.0..16384.0).contains(&scaled), "{max}: scaled to {scaled}");
        }
        assert_eq!(input_scale_exponent(0), 126);
        assert_eq!(input_scale_exponent(1), 126);
        assert_eq!(input_scale_exponent(f32::MIN_POSITIVE.to_bits()), 126);
        assert_eq!(input_scale_exponent(f32::MAX.to_bits()), -114);
    }

    #[test]
    fn sweep_is_well_formed() {
        for split in [false, true] {
            for t in nhwc_sweep(split) {
                t.nhwc_layout().unwrap_or_else(|e| panic!("{}: {e}", t.name()));
                let bytes = t.nhwc_workgroup_bytes(1 + split as u64);
                assert!(bytes <= 48 * 1024, "{}: {bytes} B", t.name());
            }
        }
    }
}
