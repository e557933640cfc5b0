//! Shader composition and the pipeline cache.
//!
//! Every kernel is one WGSL source under `shaders/` plus `shaders/params.wgsl`; the tiled
//! family is specialised by a header of `const`s written from a [`TileConfig`] (WGSL
//! `override`s cannot size the function-scope register arrays the kernel needs).

use crate::config::TileConfig;
use crate::error::{Error, Result};
use bytemuck::{Pod, Zeroable};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const PARAMS_WGSL: &str = include_str!("../shaders/params.wgsl");
const GATHER_WGSL: &str = include_str!("../shaders/gather.wgsl");
const TILED_WGSL: &str = include_str!("../shaders/conv_tiled.wgsl");
const COOP_WGSL: &str = include_str!("../shaders/conv_coop.wgsl");
const COOP_OPERANDS_F16_WGSL: &str = include_str!("../shaders/coop_operands_f16.wgsl");
const COOP_OPERANDS_F16X3_WGSL: &str = include_str!("../shaders/coop_operands_f16x3.wgsl");
const BAND_WGSL: &str = include_str!("../shaders/conv_band.wgsl");
const STEM_WGSL: &str = include_str!("../shaders/conv_stem.wgsl");
const DIRECT_WGSL: &str = include_str!("../shaders/conv_direct.wgsl");

/// Which kernel runs a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum KernelKind {
    /// The tiled implicit GEMM on f32 operands.
    Tiled(TileConfig),
    /// The same kernel with operands rounded to f16, f32 accumulation (devices with
    /// `SHADER_F16` but no cooperative matrices, e.g. lavapipe).
    TiledF16(TileConfig),
    /// The tiled implicit GEMM on cooperative matrices: f16 operands, f32 accumulation.
    Coop(TileConfig),
    /// The same kernel with every operand split into two f16 halves and three products
    /// per step ([`Precision::F16x3`]): f32-accurate results from the matrix units.
    CoopSplit(TileConfig),
    /// The row-band implicit GEMM on cooperative matrices (`shaders/conv_band.wgsl`): the
    /// input band of a few output rows is staged once per workgroup and A fragments are
    /// loaded from it directly. For convolutions without column dilation whose column
    /// stride fits the band depth (`block_k`); f16 operands, f32 accumulation. Opt-in: slower
    /// than [`KernelKind::Coop`] on the H100 (BENCHMARKS.md). Where KW is not a multiple of
    /// the column stride, a NaN input also makes NaN the outputs up to one stride beyond its
    /// receptive field (the padded taps meet zero weights; 0 × NaN is NaN).
    CoopBand(TileConfig),
    /// The stem kernel on cooperative matrices (`shaders/conv_stem.wgsl`): space-to-depth by
    /// the strides; warps that multiply, their weights held in registers, beside helper warps
    /// that stage input rows into a ring and store output rows, one row apart (see
    /// [`crate::config::StemLayout`]). For convolutions without dilation whose K after the
    /// layout fits [`crate::stem::MAX_STEM_K_FRAGS`] fragments (few input channels per group:
    /// a network's first layer); f16 operands, f32 accumulation. Where KH or KW is not a
    /// multiple of its stride, a NaN input also makes NaN the outputs up to one stride
    /// beyond its receptive field (the padded taps meet zero weights; 0 × NaN is NaN). Its
    /// two roles reach the workgroup barrier from two loops, which SPIR-V does not promise
    /// to support: a default only on NVIDIA ([`crate::stem::STEM_DEFAULT_VENDOR`]), where it
    /// is tested.
    CoopStem(TileConfig),
    /// One output per invocation: the oracle and the fallback.
    Direct,
}

impl KernelKind {
    pub fn config(&self) -> Option<TileConfig> {
        match self {
            KernelKind::Tiled(c)
            | KernelKind::TiledF16(c)
            | KernelKind::Coop(c)
            | KernelKind::CoopSplit(c)
            | KernelKind::CoopBand(c)
            | KernelKind::CoopStem(c) => Some(*c),
            KernelKind::Direct => None,
        }
    }
    pub fn precision(&self) -> Precision {
        match self {
            KernelKind::Tiled(_) | KernelKind::Direct => Precision::F32,
            KernelKind::TiledF16(_) | KernelKind::Coop(_) | KernelKind::CoopBand(_) | KernelKind::CoopStem(_) => {
                Precision::F16Accum32
            }
            KernelKind::CoopSplit(_) => Precision::F16x3,
        }
    }
    /// Whether the kernel runs on cooperative matrices (needs the feature; SPIR-V only; its
    /// warps own 16×16 fragments rather than a register tile).
    pub fn is_cooperative(&self) -> bool {
        matches!(
            self,
            KernelKind::Coop(_) | KernelKind::CoopSplit(_) | KernelKind::CoopBand(_) | KernelKind::CoopStem(_)
        )
    }
    /// Whether the kernel is composed per problem (its [`Geometry`] comes from the input
    /// size): the row-band and stem kernels. They stage their own operands.
    pub fn is_shaped(&self) -> bool {
        matches!(self, KernelKind::CoopBand(_) | KernelKind::CoopStem(_))
    }
    /// The same kind with another config (the tuner's neighbours).
    pub fn with_config(&self, c: TileConfig) -> KernelKind {
        match self {
            KernelKind::Tiled(_) => KernelKind::Tiled(c),
            KernelKind::TiledF16(_) => KernelKind::TiledF16(c),
            KernelKind::Coop(_) => KernelKind::Coop(c),
            KernelKind::CoopSplit(_) => KernelKind::CoopSplit(c),
            KernelKind::CoopBand(_) => KernelKind::CoopBand(c),
            KernelKind::CoopStem(_) => KernelKind::CoopStem(c),
            KernelKind::Direct => KernelKind::Direct,
        }
    }
    /// The kind of a family name ([`KernelKind::family`]) with a config: how the tuning
    /// cache names the kernel a decision was measured on. `None` for an unknown name.
    pub fn from_family(family: &str, config: TileConfig) -> Option<KernelKind> {
        let kinds = [
            KernelKind::Tiled(config),
            KernelKind::TiledF16(config),
            KernelKind::Coop(config),
            KernelKind::CoopSplit(config),
            KernelKind::CoopBand(config),
            KernelKind::CoopStem(config),
            KernelKind::Direct,
        ];
        kinds.into_iter().find(|k| k.family() == family)
    }
    /// The same blocks over another warp count, BLOCK sizes (and so the grid) unchanged:
    /// a re-derived register tile for the SIMT kernels ([`TileConfig::with_warps`]), a
    /// re-split of the fragments for the cooperative ones
    /// ([`TileConfig::with_fragment_warps`]). Refused where the kernel cannot split the
    /// block that way. Used by the tuner.
    pub fn with_warps(&self, warps: u32) -> Result<KernelKind> {
        let Some(c) = self.config() else {
            return Err(Error::Unsupported(format!("{self} has no warp count to change")));
        };
        let c = if self.is_cooperative() { c.with_fragment_warps(warps)? } else { c.with_warps(warps)? };
        let kind = self.with_config(c);
        kind.check_shape()?;
        Ok(kind)
    }
    /// Checks the kind's config against a device's limits.
    pub fn validate(&self, limits: &crate::config::KernelLimits) -> Result<()> {
        match self {
            KernelKind::Tiled(c) | KernelKind::TiledF16(c) => c.validate(limits),
            KernelKind::Coop(c) => c.validate_coop(limits, 1),
            KernelKind::CoopSplit(c) => c.validate_coop(limits, 2),
            KernelKind::CoopBand(c) => c.validate_band(limits),
            KernelKind::CoopStem(c) => c.validate_stem(limits),
            KernelKind::Direct => Ok(()),
        }
    }
    /// The device-independent checks of [`KernelKind::validate`]: the config forms this
    /// kernel's tiles (a register tile for the SIMT kernels, a fragment layout for the
    /// cooperative ones).
    pub fn check_shape(&self) -> Result<()> {
        match self {
            KernelKind::Tiled(c) | KernelKind::TiledF16(c) => c.check_shape(),
            KernelKind::Coop(c) | KernelKind::CoopSplit(c) => c.coop_layout().map(|_| ()),
            KernelKind::CoopBand(c) => c.band_layout().map(|_| ()),
            KernelKind::CoopStem(c) => c.stem_layout().map(|_| ()),
            KernelKind::Direct => Ok(()),
        }
    }
    /// Workgroup memory of the kernel, where it follows from the config alone (the
    /// row-band kernel's band depends on the problem: `None`, as for the direct kernel).
    pub fn workgroup_bytes(&self) -> Option<u64> {
        match self {
            KernelKind::Tiled(c) | KernelKind::TiledF16(c) => Some(c.workgroup_bytes()),
            KernelKind::Coop(c) => Some(c.coop_workgroup_bytes(1)),
            KernelKind::CoopSplit(c) => Some(c.coop_workgroup_bytes(2)),
            KernelKind::CoopBand(_) | KernelKind::CoopStem(_) | KernelKind::Direct => None,
        }
    }
}

impl KernelKind {
    /// The kernel's family, the first word of its display name: `tiled`, `tiled-f16`,
    /// `coop-f16`, `coop-f16x3`, `coop-band-f16`, `coop-stem-f16` or `direct`.
    pub fn family(&self) -> &'static str {
        match self {
            KernelKind::Tiled(_) => "tiled",
            KernelKind::TiledF16(_) => "tiled-f16",
            KernelKind::Coop(_) => "coop-f16",
            KernelKind::CoopSplit(_) => "coop-f16x3",
            KernelKind::CoopBand(_) => "coop-band-f16",
            KernelKind::CoopStem(_) => "coop-stem-f16",
            KernelKind::Direct => "direct",
        }
    }
}

/// The family and the config: `tiled m64n96k16-t4x12-w4-s1`, or `direct`.
impl std::fmt::Display for KernelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.config() {
            Some(c) => write!(f, "{} {c}", self.family()),
            None => f.write_str(self.family()),
        }
    }
}

/// The arithmetic of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum Precision {
    /// f32 operands, f32 accumulation (relative L2 error ~1e-7 against f64).
    #[default]
    F32,
    /// Operands rounded to f16 inside the kernel, f32 accumulation; tensors stay f32 in
    /// memory. On cooperative-matrix devices this runs on the matrix units. Relative L2
    /// error ~3e-4 on normal data (bound: 1e-3, tested). Values beyond f16's range
    /// (|x| > 65504) never become infinities: weights are refused at upload with
    /// [`crate::Error::F16Range`]; inputs are clamped in the kernel and flagged, `forward`
    /// then returns `F16Range`, and callers of `encode`/`plan` must check
    /// [`crate::Conv2d::take_range_flag`] before using a result. On NVIDIA's cooperative-matrix
    /// devices, convolutions on image inputs (no groups, at most 4 channels) run the stem
    /// kernel ([`KernelKind::CoopStem`]), where a NaN input may also make NaN the outputs up to
    /// one stride beyond its receptive field.
    F16Accum32,
    /// f32-accurate products from the f16 matrix units (cooperative-matrix devices only):
    /// each operand is split into two f16, `x ≈ hi + lo/2048`, keeping 22 of f32's 24
    /// significand bits, and each step sums the three products `hi·hi + (hi·lo + lo·hi)/2048`
    /// in f32 (CUTLASS's 3×TF32 technique with f16 halves). Relative L2 error 1.3e-7 on
    /// AlexNet conv1 against 3.4e-7 for f32 FMAs (bound: 1e-6, tested); three times the
    /// matrix work of [`Precision::F16Accum32`]. Weights are scaled by a power of two at
    /// upload, so their magnitude does not matter. Inputs keep f32's relative precision down
    /// to 2^-14 in magnitude; smaller ones lose it gradually (each keeps an absolute error
    /// of at most about 2^-36). Inputs beyond f16's range are clamped and flagged as in
    /// [`Precision::F16Accum32`].
    F16x3,
}

/// The CLI's names: `f32`, `f16`, `f16x3`.
impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::F16Accum32 => "f16",
            Precision::F16x3 => "f16x3",
        })
    }
}

/// Workgroup size of the direct kernel (`DIRECT_WG` in its source).
pub(crate) const DIRECT_WORKGROUP: u32 = 64;

/// Operands as they are: f32.
const PRELUDE_F32: &str = "fn to_operand(v: f32) -> f32 {\n    return v;\n}\nfn report_range() {}\n";

/// Operands rounded to f16. A value beyond f16's range is clamped, so no infinity enters
/// the sums (NaN stays NaN: `is_nan` tests the bits, a clamp may drop it), and noted in a
/// private flag that `report_range` publishes once at the end: an atomic inside the gather
/// loop kept the compiler from overlapping the loads (the f16 kernel took 1.76 ms instead of
/// 0.96 ms on the H100, BENCHMARKS.md). The host then refuses the result.
const PRELUDE_F16: &str = "fn to_operand(v: f32) -> f32 {
    out_of_range = out_of_range || abs(v) > F16_MAX;
    return select(f32(f16(clamp(v, -F16_MAX, F16_MAX))), v, is_nan(v));
}
";

/// The f16x3 kernel's operands: range-checked as in `PRELUDE_F16`, but not rounded (the
/// split into two f16 happens in its `store_a`).
const PRELUDE_F16X3: &str = "fn to_operand(v: f32) -> f32 {
    out_of_range = out_of_range || abs(v) > F16_MAX;
    return select(clamp(v, -F16_MAX, F16_MAX), v, is_nan(v));
}
";

/// The range flag both f16 preludes share (see `PRELUDE_F16`).
const PRELUDE_RANGE_FLAG: &str = "@group(0) @binding(6) var<storage, read_write> range_flag: atomic<u32>;
const F16_MAX: f32 = 65504.0;
var<private> out_of_range: bool = false;
fn report_range() {
    if (out_of_range) {
        atomicOr(&range_flag, 1u);
    }
}
";

/// The row-band kernel's compile-time geometry (see `crate::band::BandGeometry`, which
/// derives it from a problem), compiled in as constants: its workgroup arrays are sized by
/// it and its loops over fragments and weight rows have constant bounds. All zero for the
/// other kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BandShape {
    pub band_rows: u32,
    pub band_cols: u32,
    pub stride_w: u32,
    pub stride_h: u32,
    pub dil_h: u32,
    pub chunk_ch: u32,
    pub chunks: u32,
    pub k_frags: u32,
    pub fx: u32,
    pub wg_rows: u32,
}

/// The compile-time geometry of the kernels whose workgroup arrays and loops are sized by
/// the problem (the row-band and stem kernels); `None` for the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Geometry {
    #[default]
    None,
    Band(BandShape),
    Stem(crate::stem::StemShape),
}

/// The WGSL of a kernel, ready for naga or wgpu. The row-band and stem kernels, whose
/// geometry comes from a problem, are composed for AlexNet conv1 (the first of their
/// `representative_shapes` that the config can run, else an all-ones geometry).
pub fn source(kind: &KernelKind) -> String {
    let geometry = match kind {
        KernelKind::CoopBand(c) => {
            crate::band::representative_shapes(c).into_iter().next().map_or(Geometry::None, Geometry::Band)
        }
        KernelKind::CoopStem(c) => {
            crate::stem::representative_shapes(c).into_iter().next().map_or(Geometry::None, Geometry::Stem)
        }
        _ => Geometry::None,
    };
    compose(kind, geometry)
}

impl BandShape {
    /// A geometry every formula of the shader accepts (one row, one column, one fragment).
    const ONES: BandShape = BandShape {
        band_rows: 1,
        band_cols: 16,
        stride_w: 1,
        stride_h: 1,
        dil_h: 1,
        chunk_ch: 1,
        chunks: 1,
        k_frags: 1,
        fx: 1,
        wg_rows: 1,
    };
}

/// The WGSL of a kernel; `geometry` is the row-band or stem kernel's (ignored by the others;
/// an absent one reads as all ones).
pub(crate) fn compose(kind: &KernelKind, geometry: Geometry) -> String {
    let band = match geometry {
        Geometry::Band(b) => b,
        _ => BandShape::ONES,
    };
    let stem = match geometry {
        Geometry::Stem(s) => s,
        _ => crate::stem::StemShape::ONES,
    };
    let Some(c) = kind.config() else {
        return format!("{PARAMS_WGSL}\n{DIRECT_WGSL}");
    };
    let mut enables = String::new();
    if kind.precision() != Precision::F32 {
        enables.push_str("enable f16;\n");
    }
    if kind.is_cooperative() {
        enables.push_str("enable wgpu_cooperative_matrix;\n");
    }
    if matches!(kind, KernelKind::CoopStem(_)) {
        // The stem kernel's warps take roles by their index: its cooperative-matrix operations
        // run in branches uniform per subgroup (as SPIR-V asks), not per workgroup (as naga's
        // uniformity analysis, under this rule's name, would have them).
        enables.push_str("diagnostic(off, derivative_uniformity);\n");
    }
    let mut header = format!(
        "// generated from TileConfig {name}\n\
         const BM: u32 = {bm}u;\nconst BN: u32 = {bn}u;\nconst BK: u32 = {bk}u;\n\
         const TM: u32 = {tm}u;\nconst TN: u32 = {tn}u;\nconst WG: u32 = {wg}u;\n\
         const STAGES: u32 = {st}u;\n",
        name = c.name(),
        bm = c.block_m,
        bn = c.block_n,
        bk = c.block_k,
        tm = c.thread_m,
        tn = c.thread_n,
        wg = c.invocations(),
        st = c.stages,
    );
    let prelude = match kind.precision() {
        Precision::F32 => PRELUDE_F32.to_string(),
        Precision::F16Accum32 => format!("{PRELUDE_RANGE_FLAG}{PRELUDE_F16}"),
        Precision::F16x3 => format!("{PRELUDE_RANGE_FLAG}{PRELUDE_F16X3}"),
    };
    let body = match kind {
        KernelKind::Coop(_) | KernelKind::CoopSplit(_) => {
            // Invalid layouts never reach here: Conv2d validates first. Fall back to one
            // fragment so that `source` itself cannot fail.
            let (wm, wn, fm, fn_) = c.coop_layout().unwrap_or((1, 1, 1, 1));
            header.push_str(&format!(
                "const WARPS_M: u32 = {wm}u;\nconst WARPS_N: u32 = {wn}u;\nconst FM: u32 = {fm}u;\nconst FN: u32 = {fn_}u;\n"
            ));
            coop_body(fm, fn_, matches!(kind, KernelKind::CoopSplit(_)))
        }
        KernelKind::CoopBand(_) => {
            let (wm, wn, fm, fn_) = c.band_layout().unwrap_or((1, 1, 1, 1));
            header.push_str(&format!(
                "const WARPS_M: u32 = {wm}u;\nconst WARPS_N: u32 = {wn}u;\nconst FM: u32 = {fm}u;\nconst FN: u32 = {fn_}u;\n\
                 const BAND_ROWS: u32 = {}u;\nconst BAND_COLS: u32 = {}u;\nconst SW: u32 = {}u;\n\
                 const SH: u32 = {}u;\nconst DH: u32 = {}u;\nconst CHUNK_CH: u32 = {}u;\nconst CHUNKS: u32 = {}u;\n\
                 const K_FRAGS: u32 = {}u;\nconst FX: u32 = {}u;\nconst WG_ROWS: u32 = {}u;\n",
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
            ));
            band_body(fm, fn_)
        }
        KernelKind::CoopStem(_) => {
            let l = c.stem_layout().unwrap_or(crate::config::StemLayout { fm: 1, warps_m: 1, warps_n: 1, helpers: 1 });
            header.push_str(&format!(
                "const WARPS_M: u32 = {}u;\nconst WARPS_N: u32 = {}u;\nconst FM: u32 = {}u;\nconst HELPERS: u32 = {}u;\n\
                 const SH: u32 = {}u;\nconst SW: u32 = {}u;\nconst CG: u32 = {}u;\nconst TY: u32 = {}u;\n\
                 const TX: u32 = {}u;\nconst CSP: u32 = {}u;\nconst CST: u32 = {}u;\nconst BAND_COLS: u32 = {}u;\n\
                 const K_FRAGS: u32 = {}u;\n",
                l.warps_m,
                l.warps_n,
                l.fm,
                l.helpers,
                stem.stride_h,
                stem.stride_w,
                stem.cg,
                stem.taps_y,
                stem.taps_x,
                stem.csp,
                stem.cst,
                stem.band_cols,
                stem.k_frags(),
            ));
            stem_body(l.fm, &stem)
        }
        _ => TILED_WGSL.to_string(),
    };
    // The row-band and stem kernels stage their own operands; the others share gather.wgsl's loaders.
    let loaders = if kind.is_shaped() { "" } else { GATHER_WGSL };
    format!("{enables}{header}{prelude}\n{PARAMS_WGSL}\n{loaders}\n{body}")
}

/// What differs between the cooperative-matrix kernels' per-fragment statements.
struct FragmentCode<'a> {
    /// The kernel's source, with the `//@FRAGMENT_*` markers.
    source: &'a str,
    /// Indentation of the `//@FRAGMENT_MMA` marker (the multiply step's loop depth).
    mma_indent: &'a str,
    /// The load of A fragment i and of B fragment j from a staged tile (right-hand sides).
    a_load: &'a dyn Fn(u32, &str) -> String,
    b_load: &'a dyn Fn(u32, &str) -> String,
    /// Operands staged as high and low f16 halves (the f16x3 kernel): each fragment is
    /// loaded from both tiles, and each step forms three products.
    split: bool,
    /// Per-warp statements after the accumulators are zeroed, for fragment row i.
    init_row: &'a dyn Fn(u32) -> String,
    /// The store of accumulator (i, j).
    store: &'a dyn Fn(u32, u32) -> String,
}

/// A cooperative-matrix kernel's source with its per-fragment statements written out at its
/// `//@FRAGMENT_*` markers (WGSL cannot index an array of cooperative matrices): one
/// accumulator per fragment (i, j) of the warp's FM×FN, zeroed; per multiply step FM A and
/// FN B loads and FM·FN multiply-adds; then the stores.
fn splice_fragments(fm: u32, fn_: u32, code: &FragmentCode) -> String {
    let frags: Vec<(u32, u32)> = (0..fm).flat_map(|i| (0..fn_).map(move |j| (i, j))).collect();
    let decls: String =
        frags.iter().map(|(i, j)| format!("var<private> acc_{i}_{j}: coop_mat16x16<f32, C>;\n")).collect();
    let mut init: String = frags.iter().map(|(i, j)| format!("    acc_{i}_{j} = coop_mat16x16<f32, C>();\n")).collect();
    (0..fm).for_each(|i| init.push_str(&(code.init_row)(i)));
    let ind = code.mma_indent;
    let mut mma = String::new();
    for i in 0..fm {
        mma.push_str(&format!("{ind}let a_{i} = {};\n", (code.a_load)(i, "a_tile")));
        if code.split {
            mma.push_str(&format!("{ind}let al_{i} = {};\n", (code.a_load)(i, "a_lo_tile")));
        }
    }
    for j in 0..fn_ {
        mma.push_str(&format!("{ind}let b_{j} = {};\n", (code.b_load)(j, "b_tile")));
        if code.split {
            mma.push_str(&format!("{ind}let bl_{j} = {};\n", (code.b_load)(j, "b_lo_tile")));
        }
    }
    for (i, j) in &frags {
        if code.split {
            // The step's three products go into a fresh partial, small terms first, which is
            // then added to the accumulator in f32: the matrix units' own accumulation is
            // coarser than an f32 add (f16-exact operands: relative L2 4.7e-7 against 3.3e-7
            // for f32 FMAs on the H100, BENCHMARKS.md), and three of its roundings per step
            // against the running sum would triple that error.
            mma.push_str(&format!(
                "{ind}let cross_{i}_{j} = coopMultiplyAdd(a_{i}, bl_{j}, coopMultiplyAdd(al_{i}, b_{j}, coop_mat16x16<f32, C>()));\n\
                 {ind}acc_{i}_{j} = acc_{i}_{j} + coopMultiplyAdd(a_{i}, b_{j}, LO_WEIGHT * cross_{i}_{j});\n"
            ));
        } else {
            mma.push_str(&format!("{ind}acc_{i}_{j} = coopMultiplyAdd(a_{i}, b_{j}, acc_{i}_{j});\n"));
        }
    }
    let store: String = frags.iter().map(|&(i, j)| (code.store)(i, j)).collect();
    code.source
        .replace("//@FRAGMENT_DECLS", &decls)
        .replace(&format!("{ind}//@FRAGMENT_MMA"), &mma)
        .replace("    //@FRAGMENT_INIT", &init)
        .replace("    //@FRAGMENT_STORE", &store)
}

/// conv_coop.wgsl after its operand staging (one f16 per operand, or split into two halves):
/// A fragments column-major and B row-major from the staged tiles; the warp's fragments start
/// at (wm0, wn0).
fn coop_body(fm: u32, fn_: u32, split: bool) -> String {
    let operands = if split { COOP_OPERANDS_F16X3_WGSL } else { COOP_OPERANDS_F16_WGSL };
    let source = COOP_WGSL.replace("//@OPERANDS", operands);
    splice_fragments(
        fm,
        fn_,
        &FragmentCode {
            source: &source,
            mma_indent: "        ",
            a_load: &|i, tile| format!("coopLoad<coop_mat16x16<f16, A>>(&{tile}[a_at + {}u], A_STRIDE)", i * 16),
            b_load: &|j, tile| format!("coopLoadT<coop_mat16x16<f16, B>>(&{tile}[b_at + {}u], B_STRIDE)", j * 16),
            split,
            init_row: &|_| String::new(),
            store: &|i, j| {
                format!(
                    "    coopStore(acc_{i}_{j}, &c_scratch[scratch], FRAG);\n    store_fragment(blk, warp, lane, wm0 + {}u, wn0 + {}u);\n",
                    i * 16,
                    j * 16
                )
            },
        },
    )
}

/// conv_band.wgsl: fragment (i, j) of a warp is block fragment `q0 + i` along M, read
/// row-major from the band, and channels `wn0 + 16·j` along N.
fn band_body(fm: u32, fn_: u32) -> String {
    splice_fragments(
        fm,
        fn_,
        &FragmentCode {
            source: BAND_WGSL,
            mma_indent: "                ",
            a_load: &|i, _| format!("coopLoadT<coop_mat16x16<f16, A>>(&band[a_base_{i} + a_off], CP)"),
            b_load: &|j, tile| format!("coopLoadT<coop_mat16x16<f16, B>>(&{tile}[b_at + {}u], B_STRIDE)", j * 16),
            split: false,
            init_row: &|i| format!("    let a_base_{i} = frag_band_offset(t, q0 + {i}u);\n"),
            store: &|i, j| {
                format!(
                    "    coopStore(acc_{i}_{j}, &c_scratch[scratch], FRAG);\n    store_fragment(t, warp, lane, q0 + {i}u, wn0 + {}u);\n",
                    j * 16
                )
            },
        },
    )
}

/// conv_stem.wgsl with its per-fragment statements: a multiplying warp's FM accumulators
/// (two per fragment where FM is 1, each taking every other K fragment: two dependency
/// chains instead of one) and the column offsets of its fragments; its K_FRAGS weight
/// fragments, loaded once; per output row, for each K fragment (ty, tx, j) an A fragment per
/// M fragment from ring row (oy + ty) mod RING; then the sums to scratch buffer `buf`. Each
/// K fragment's statements are a block of their own (their A fragments are named alike).
fn stem_body(fm: u32, shape: &crate::stem::StemShape) -> String {
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
                "        let b_{k} = coopLoadT<coop_mat16x16<f16, B>>(&weight[w_base + {}u * p.n_pad], p.n_pad);\n",
                k * 16
            )
        })
        .collect();
    let reset = |i: u32, ind: &str| -> String {
        (0..chains).map(|c| format!("{ind}acc_{i}_{c} = {};\n", if c == 0 { BIAS_TILE } else { ZERO })).collect()
    };
    let init: String = (0..fm)
        .map(|i| format!("{}        let a_col_{i} = frag_band_col(t, wm * FM + {i}u) * CST;\n", reset(i, "        ")))
        .collect();
    let ind = "                ";
    let mut mma: String =
        (0..ty_n).map(|ty| format!("{ind}let rb_{ty} = ((i + {ty}u) % RING) * ROW_ELEMS;\n")).collect();
    for ty in 0..ty_n {
        for tx in 0..tx_n {
            for j in 0..csp / 16 {
                let k = (ty * tx_n + tx) * (csp / 16) + j;
                let off = tx * cst + 16 * j;
                mma.push_str(&format!("{ind}{{\n"));
                for i in 0..fm {
                    mma.push_str(&format!(
                        "{ind}    let a_{i} = coopLoadT<coop_mat16x16<f16, A>>(&ring[rb_{ty} + a_col_{i} + {off}u], CST);\n"
                    ));
                }
                let c = k % chains;
                for i in 0..fm {
                    mma.push_str(&format!("{ind}    acc_{i}_{c} = coopMultiplyAdd(a_{i}, b_{k}, acc_{i}_{c});\n"));
                }
                mma.push_str(&format!("{ind}}}\n"));
            }
        }
    }
    let scratch: String = (0..fm)
        .map(|i| {
            let sum = (1..chains).fold(format!("acc_{i}_0"), |e, c| format!("{e} + acc_{i}_{c}"));
            format!("{ind}coopStore({sum}, &c_scratch[buf + scratch_at + {}u], SCR);\n{}", i * 16, reset(i, ind))
        })
        .collect();
    let body = STEM_WGSL
        .replace("//@STEM_DECLS", &decls)
        .replace("        //@STEM_WEIGHTS\n", &weights)
        .replace("        //@STEM_INIT\n", &init)
        .replace(&format!("{ind}//@STEM_MMA\n"), &mma)
        .replace(&format!("{ind}//@STEM_SCRATCH\n"), &scratch);
    debug_assert!(!body.lines().any(|l| l.trim_start().starts_with("//@STEM_")), "a stem marker moved");
    body
}

/// A hash of every shader source: part of the tuning cache's key, so a cached decision
/// goes stale when a kernel changes.
pub fn shader_hash() -> String {
    let mut h = Sha256::new();
    for s in [
        PARAMS_WGSL,
        GATHER_WGSL,
        TILED_WGSL,
        COOP_WGSL,
        COOP_OPERANDS_F16_WGSL,
        COOP_OPERANDS_F16X3_WGSL,
        BAND_WGSL,
        STEM_WGSL,
        DIRECT_WGSL,
        PRELUDE_F32,
        PRELUDE_F16,
        PRELUDE_F16X3,
        PRELUDE_RANGE_FLAG,
    ] {
        h.update(s.as_bytes());
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The shading languages a kernel must translate to: all four for the f32 kernels; for
/// the f16 SIMT kernel those with f16 in naga (not GLSL); only SPIR-V (Vulkan) for
/// cooperative matrices, which naga's other backends do not express.
pub fn portable_targets(kind: &KernelKind) -> &'static [&'static str] {
    match kind {
        k if k.is_cooperative() => &["SPIR-V"],
        KernelKind::TiledF16(_) => &["SPIR-V", "MSL", "HLSL"],
        _ => &["SPIR-V", "MSL", "HLSL", "GLSL"],
    }
}

/// Parses and validates a kernel with naga and translates it to each of
/// [`portable_targets`] (SPIR-V, MSL, HLSL, GLSL compute): the proof that a variant is
/// portable, without any device.
pub fn check_portable(kind: &KernelKind) -> Result<()> {
    // `source` assumes a structurally valid config.
    match kind {
        KernelKind::Tiled(c) | KernelKind::TiledF16(c) => c.check_shape()?,
        KernelKind::Coop(c) | KernelKind::CoopSplit(c) => {
            c.coop_layout()?;
        }
        KernelKind::CoopBand(c) => {
            c.band_layout()?;
        }
        KernelKind::CoopStem(c) => {
            c.stem_layout()?;
        }
        KernelKind::Direct => {}
    }
    match kind {
        // Every geometry of a few real problems, not one nominal one.
        KernelKind::CoopBand(c) | KernelKind::CoopStem(c) => {
            let shapes: Vec<Geometry> = match kind {
                KernelKind::CoopBand(_) => {
                    crate::band::representative_shapes(c).into_iter().map(Geometry::Band).collect()
                }
                _ => crate::stem::representative_shapes(c).into_iter().map(Geometry::Stem).collect(),
            };
            if shapes.is_empty() {
                return Err(Error::ConfigRefused {
                    config: c.to_string(),
                    reason: "no representative problem fits a 48 KiB device".into(),
                });
            }
            shapes.into_iter().try_for_each(|g| check_source(kind, &compose(kind, g)))
        }
        _ => check_source(kind, &source(kind)),
    }
}

/// Parses, validates and translates one composed source (see [`check_portable`]).
fn check_source(kind: &KernelKind, src: &str) -> Result<()> {
    use naga::back;
    let err =
        |stage: &'static str| move |e: &dyn std::fmt::Display| Error::Wgpu { stage, message: format!("{kind}: {e}") };
    let module = naga::front::wgsl::parse_str(src).map_err(|e| err("naga parse")(&e.emit_to_string(src)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| err("naga validate")(&e.emit_to_string(src)))?;
    for target in portable_targets(kind) {
        match *target {
            "SPIR-V" => {
                back::spv::write_vec(&module, &info, &back::spv::Options::default(), None)
                    .map_err(|e| err("SPIR-V")(&e))?;
            }
            "MSL" => {
                back::msl::write_string(&module, &info, &back::msl::Options::default(), &Default::default())
                    .map_err(|e| err("MSL")(&e))?;
            }
            "HLSL" => {
                let mut hlsl = String::new();
                // Shader model 6.2 is the first with 16-bit types.
                let opts = back::hlsl::Options { shader_model: back::hlsl::ShaderModel::V6_2, ..Default::default() };
                let pipe = back::hlsl::PipelineOptions::default();
                back::hlsl::Writer::new(&mut hlsl, &opts, &pipe)
                    .write(&module, &info, None)
                    .map_err(|e| err("HLSL")(&e))?;
            }
            _ => {
                let opts = back::glsl::Options { version: back::glsl::Version::Desktop(430), ..Default::default() };
                let pipe = back::glsl::PipelineOptions {
                    shader_stage: naga::ShaderStage::Compute,
                    entry_point: "main".into(),
                    multiview: None,
                };
                let mut glsl = String::new();
                back::glsl::Writer::new(&mut glsl, &module, &info, &opts, &pipe, Default::default())
                    .and_then(|mut w| w.write().map(|_| ()))
                    .map_err(|e| err("GLSL")(&e))?;
            }
        }
    }
    Ok(())
}

/// The per-dispatch parameters, in the field order of `shaders/params.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct ConvParams {
    pub c_in: u32,
    pub h: u32,
    pub w: u32,
    pub c_out: u32,
    pub oh: u32,
    pub ow: u32,
    pub batch: u32,
    pub m_total: u32,
    pub kh: u32,
    pub kw: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub pad_top: u32,
    pub pad_left: u32,
    pub dil_h: u32,
    pub dil_w: u32,
    pub c_in_per_group: u32,
    pub c_out_per_group: u32,
    pub groups: u32,
    pub k_total: u32,
    pub k_tiles: u32,
    pub n_pad: u32,
    pub m_tiles: u32,
    pub n_tiles: u32,
    pub total_tiles: u32,
    pub in_offset: u32,
    pub out_offset: u32,
    pub flags: u32,
    pub row_tiles: u32,
    pub x_tiles: u32,
    pub x_clamp: u32,
    /// Multiplies the sums before the bias: 1, or the inverse of the f16x3 kernel's weight
    /// scale (a power of two).
    pub out_scale: f32,
}

/// Zeros, with the sums' scale 1: a forgotten `out_scale` must not zero every output.
impl Default for ConvParams {
    fn default() -> Self {
        ConvParams { out_scale: 1.0, ..Zeroable::zeroed() }
    }
}

pub(crate) const FLAG_RELU: u32 = 1;

/// A compiled kernel: its pipeline and the bind group layout every conv kernel shares.
pub(crate) struct Kernel {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// Pipelines by kernel, built once per device.
#[derive(Default)]
pub(crate) struct PipelineCache {
    /// By kernel and geometry (`None` for all but the row-band and stem kernels).
    map: Mutex<HashMap<(KernelKind, Geometry), Arc<Kernel>>>,
}

impl PipelineCache {
    pub fn get_or_build(&self, device: &wgpu::Device, kind: KernelKind, runtime_checks: bool) -> Result<Arc<Kernel>> {
        self.get_or_build_for(device, kind, Geometry::None, runtime_checks)
    }
    /// The row-band and stem kernels need their geometry; other kernels ignore it.
    pub fn get_or_build_for(
        &self,
        device: &wgpu::Device,
        kind: KernelKind,
        geometry: Geometry,
        runtime_checks: bool,
    ) -> Result<Arc<Kernel>> {
        let key = (kind, geometry);
        if let Some(k) = self.map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(k.clone());
        }
        let kernel = Arc::new(build(device, &kind, geometry, runtime_checks)?);
        self.map.lock().unwrap_or_else(|e| e.into_inner()).insert(key, kernel.clone());
        Ok(kernel)
    }
}

fn layout_entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    }
}

fn build(device: &wgpu::Device, kind: &KernelKind, geometry: Geometry, runtime_checks: bool) -> Result<Kernel> {
    let src = compose(kind, geometry);
    let ro = wgpu::BufferBindingType::Storage { read_only: true };
    let scope = crate::gpu::ErrorScope::push(device);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("wgconv conv"),
        entries: &[
            layout_entry(0, wgpu::BufferBindingType::Uniform),
            layout_entry(1, ro),
            layout_entry(2, ro),
            layout_entry(3, ro),
            layout_entry(4, ro),
            layout_entry(5, wgpu::BufferBindingType::Storage { read_only: false }),
            // The f16 kernels' range flag (unused by the f32 kernels).
            layout_entry(6, wgpu::BufferBindingType::Storage { read_only: false }),
        ],
    });
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some("wgconv conv kernel"),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    };
    let module = if runtime_checks {
        device.create_shader_module(desc)
    } else {
        // SAFETY: wgpu's runtime checks guard out-of-bounds indexing. Every global access
        // of our kernels is guarded by its own range test: A by the padding test (sound
        // because `Conv2dSpec::problem` keeps padded extents below 2^29, so the gather
        // table's -2^30 sentinel never lands in range), B and the gather table by host-side
        // zero padding to whole tiles, outputs by m/n tests; chunking keeps every bound
        // window under 2^31 elements. Workgroup arrays are indexed by compile-time-bounded
        // loops, except the stem kernel's ring, whose fragment columns are clamped in the
        // shader (`frag_band_col`) to the band its pipeline was composed for: pipeline and
        // parameters come from the same `StemGeometry`; its bias tiles are padded to whole
        // N fragments at upload. The GPU-vs-CPU suite runs with the checks off. With them on, AlexNet conv1
        // takes 22× longer on the H100 (BENCHMARKS.md).
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    };
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("wgconv conv"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("wgconv conv"),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    scope.finish("pipeline creation")?;
    Ok(Kernel { pipeline, layout })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_match_wgsl_struct() {
        // 31 u32 fields and the f32 `out_scale` last, in the order of shaders/params.wgsl.
        assert_eq!(std::mem::size_of::<ConvParams>(), 32 * 4);
        let fields = PARAMS_WGSL.split("struct Params {").nth(1).unwrap().split('}').next().unwrap();
        assert_eq!(fields.matches(": u32").count(), 31);
        assert!(fields.trim_end().ends_with("out_scale: f32,"));
    }

    #[test]
    fn every_marker_is_filled() {
        let kinds = crate::config::default_sweep()
            .into_iter()
            .flat_map(|c| [KernelKind::Tiled(c), KernelKind::TiledF16(c)])
            .chain(
                crate::config::coop_sweep().into_iter().flat_map(|c| [KernelKind::Coop(c), KernelKind::CoopSplit(c)]),
            )
            .chain(crate::config::band_sweep().into_iter().map(KernelKind::CoopBand))
            .chain(crate::config::stem_sweep().into_iter().map(KernelKind::CoopStem));
        for kind in kinds {
            let src = source(&kind);
            assert!(!src.lines().any(|l| l.trim_start().starts_with("//@")), "{kind}: a marker was left");
        }
    }
}
