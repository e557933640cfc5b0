//! The tiled implicit GEMM on the SIMT units (`tiled`: f32 operands; `tiled-f16`: operands
//! rounded to f16, f32 accumulation), and what the cooperative-matrix `coop` families share
//! with it: the operand gather (`gather.wgsl`), the weight packing and the gather table.
//! Both speak the tile vocabulary of `crate::tile` ([`TileConfig`]).

pub use crate::tile::{default_sweep, TileConfig};

mod derived;
pub(crate) use derived::{pass_workgroup_refusal, sources_in_every_form, DerivedRun};

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::kernel::{
    compose_defined, workgroups_u32, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, Shaped, SimtOperands,
    Target, TensorForm, F16_TENSORS, GRID_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem};

/// The operand loaders the tiled and cooperative kernels share.
pub(crate) const GATHER_WGSL: &str = include_str!("gather.wgsl");
const BORDER_TAPS_WGSL: &str = include_str!("border_taps.wgsl");

/// The `border_taps` module of `gather.wgsl`: the padding modes' border loads where the
/// problem's mode is not zeros (`modes`), else nothing.
pub(crate) fn border_taps(modes: bool) -> (&'static str, String) {
    ("border_taps", if modes { BORDER_TAPS_WGSL.to_string() } else { String::new() })
}

/// Whether a problem needs the padding modes' border loads.
pub(crate) fn has_padding_mode(problem: &ConvProblem) -> bool {
    problem.spec.padding_mode != crate::spec::PaddingMode::Zeros
}
const TILED_WGSL: &str = include_str!("tiled.wgsl");

/// The SIMT tiled family, with f32 or f16-rounded operands.
#[derive(Debug)]
pub(crate) struct Tiled {
    /// f32 operands, or rounded to f16 (`tiled-f16`).
    operands: SimtOperands,
}

/// `tiled`: f32 operands.
pub(crate) static TILED: Tiled = Tiled { operands: SimtOperands { f16: false } };
/// `tiled-f16`: operands rounded to f16, f32 accumulation (devices with `SHADER_F16` but no
/// cooperative matrices, e.g. lavapipe).
pub(crate) static TILED_F16: Tiled = Tiled { operands: SimtOperands { f16: true } };

impl Family for Tiled {
    fn name(&self) -> &'static str {
        self.operands.name("tiled", "tiled-f16")
    }
    fn precision(&self) -> Precision {
        self.operands.precision()
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        self.operands.unavailable(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(TiledKernel { family: self, tile: TileConfig::parse(config)? }))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(TiledKernel { family: self, tile: TileConfig::seed() })
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        default_sweep().into_iter().map(|tile| Kernel::new(TiledKernel { family: self, tile })).collect()
    }
    fn targets(&self) -> &'static [Target] {
        self.operands.targets()
    }
    fn padding_modes(&self) -> bool {
        // Its gather (gather.wgsl, border_taps.wgsl) reads the border as the mode says.
        true
    }
}

impl Tiled {
    /// This family's kernel of a tile (the Winograd family's GEMM).
    pub(crate) fn with_tile_config(&'static self, tile: TileConfig) -> Kernel {
        Kernel::new(TiledKernel { family: self, tile })
    }
}

/// A kernel of the SIMT tiled family.
#[derive(Debug)]
pub(crate) struct TiledKernel {
    family: &'static Tiled,
    tile: TileConfig,
}

impl KernelConfig for TiledKernel {
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
        self.tile.validate(limits)
    }
    fn check_spec(&self, _spec: &Conv2dSpec, _limits: &KernelLimits) -> Result<()> {
        Ok(())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        packed_weight_len(spec, &self.tile).saturating_mul(4)
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        let mut packed = pack_weights(spec, weight, &self.tile)?;
        if self.family.operands.f16 {
            round_to_f16(&mut packed, "weight")?;
        }
        Packed::f32_weights(&packed)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[GATHER_TABLE_BINDING, GRID_BINDING]
    }
    fn shape(&self, problem: &ConvProblem, _limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        let variant = GatherVariant::of(problem);
        Ok(Box::new(Gathered::new(problem, self.tile, self.source(has_padding_mode(problem), variant, false))))
    }
    fn shape_native(
        &self,
        problem: &ConvProblem,
        _limits: &KernelLimits,
        form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        // NCHW f16 tensors (channels-last ones go through the layout passes).
        (form == TensorForm { channels_last: false, f16: true }).then(|| {
            let variant = GatherVariant::of(problem);
            let source = self.source(has_padding_mode(problem), variant, true);
            Ok(Box::new(Gathered::new(problem, self.tile, source)) as Box<dyn Shaped>)
        })
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        self.tile.check_shape()?;
        let plain = GatherVariant { rows_fastest: false, vec4_output: false };
        let both = GatherVariant { rows_fastest: true, vec4_output: true };
        let mut sources = Vec::new();
        for f16_tensors in [false, true] {
            for (modes, variant) in [(false, plain), (true, plain), (false, both), (true, both)] {
                sources.push(self.source(modes, variant, f16_tensors)?);
            }
        }
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(self.tile.workgroup_bytes())
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(Kernel::new(TiledKernel { family: self.family, tile }))
    }
}

impl TiledKernel {
    /// The kernel's WGSL; `modes`: with the padding modes' border loads; `f16_tensors`: it
    /// reads and writes f16 tensors itself ([`TensorForm::f16`]).
    fn source(&self, modes: bool, variant: GatherVariant, f16_tensors: bool) -> Result<String> {
        let mut defines = variant.defines();
        if f16_tensors {
            defines.push(F16_TENSORS);
        }
        compose_defined(
            "tiled",
            &[("tiled", TILED_WGSL), ("gather", GATHER_WGSL)],
            vec![("config", tile_header(&self.tile)), border_taps(modes)],
            self.family.precision(),
            &defines,
        )
    }
}

/// The longest K (input channels per group) of a 1×1 kernel that gathers rows fastest.
pub(crate) const ROWS_FASTEST_MAX_K: u32 = 128;

/// How the SIMT tiled kernel gathers A and stores its output for one problem
/// (`gather.wgsl`'s `GATHER_ROWS` and `VEC4_OUTPUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GatherVariant {
    /// Neighbouring invocations gather neighbouring output positions of one tap (else
    /// neighbouring taps of one position).
    pub rows_fastest: bool,
    /// The output stored as vec4s of 4 consecutive positions.
    pub vec4_output: bool,
}

impl GatherVariant {
    /// The variant for a problem. Rows fastest for 1×1 kernels over at most
    /// [`ROWS_FASTEST_MAX_K`] input channels per group: their taps are channels H·W apart,
    /// so the taps order spreads a warp's loads over BK rows of the input. (Over longer K
    /// those rows are reused from L1 step after step, and the rows order, which reads a
    /// table row per load, ran 4–10 % slower.) Vec4 stores where the output positions come
    /// in whole vec4s (chunks start at whole images, so every aligned group of 4 rows is one
    /// channel's contiguous run): scalar stores of a register tile's 4 consecutive rows left
    /// each warp's writes 4 floats apart.
    pub(crate) fn of(problem: &ConvProblem) -> GatherVariant {
        let spec = &problem.spec;
        let rows_fastest = spec.kernel == [1, 1] && spec.in_channels_per_group() <= ROWS_FASTEST_MAX_K;
        let vec4_output = (problem.output.h * problem.output.w).is_multiple_of(4);
        GatherVariant { rows_fastest, vec4_output }
    }

    fn defines(self) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.rows_fastest {
            d.push("GATHER_ROWS");
        }
        if self.vec4_output {
            d.push("VEC4_OUTPUT");
        }
        d
    }
}

/// The binding of the gather table.
pub(crate) const GATHER_TABLE_BINDING: u32 = 4;

/// The gathering kernels' grid, in the field order of `gather.wgsl`'s `Grid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable, Default)]
struct GatherGrid {
    k_tiles: u32,
    n_pad: u32,
    m_tiles: u32,
    n_tiles: u32,
    total_tiles: u32,
    _pad: [u32; 3],
}

/// The tile constants of a [`TileConfig`], as WGSL.
pub(crate) fn tile_header(c: &TileConfig) -> String {
    format!(
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
    )
}

/// A gathering kernel (SIMT or cooperative) composed for one input size: its source, the
/// gather table of that size, and its grid of `block_m × block_n` tiles per group.
pub(crate) struct Gathered {
    tile: TileConfig,
    spec: Conv2dSpec,
    hw: (u32, u32),
    source: Result<String>,
}

impl Gathered {
    /// `source` is the kernel's WGSL (composed by the family).
    pub(crate) fn new(problem: &ConvProblem, tile: TileConfig, source: Result<String>) -> Gathered {
        Gathered { tile, spec: problem.spec, hw: (problem.input.h, problem.input.w), source }
    }
}

impl Shaped for Gathered {
    fn source(&self) -> Result<String> {
        self.source.clone()
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        let rows = gather_rows(&self.spec, self.hw.0, self.hw.1, self.tile.block_k)?;
        Ok(vec![(GATHER_TABLE_BINDING, "wgconv gather table", alloc::bytes_of(&rows, "the gather table")?)])
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        let c = &self.tile;
        let n_pad = self.spec.out_channels_per_group().next_multiple_of(c.block_n);
        let mut g = GatherGrid {
            k_tiles: self.spec.k_total().div_ceil(c.block_k),
            n_pad,
            m_tiles: p.m_total.div_ceil(c.block_m),
            n_tiles: n_pad / c.block_n,
            ..Default::default()
        };
        let total = g.m_tiles as u64 * g.n_tiles as u64 * self.spec.groups as u64;
        g.total_tiles = workgroups_u32(total)?;
        Ok((bytemuck::bytes_of(&g).to_vec(), total))
    }
}

/// Rounds values to the nearest f16 (kept as f32), refusing any beyond f16's range.
pub(crate) fn round_to_f16(values: &mut [f32], what: &'static str) -> Result<()> {
    if let Some(v) = values.iter().find(|v| v.abs() > half::f16::MAX.to_f32()) {
        return Err(Error::F16Range { what, detail: format!(", e.g. {v}") });
    }
    for v in values.iter_mut() {
        *v = half::f16::from_f32(*v).to_f32();
    }
    Ok(())
}

/// Elements of [`pack_weights`]' output: `[groups][k_pad][n_pad]`, K padded to whole
/// `block_k` steps and the group's output channels to whole `block_n` blocks.
pub(crate) fn packed_weight_len(spec: &Conv2dSpec, cfg: &TileConfig) -> u64 {
    spec.groups as u64
        * spec.k_total().next_multiple_of(cfg.block_k) as u64
        * spec.out_channels_per_group().next_multiple_of(cfg.block_n) as u64
}

/// Weights as the gathering kernels read them: `[groups][k_pad][n_pad]`, zeros beyond.
pub(crate) fn pack_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &TileConfig) -> Result<Vec<f32>> {
    let k = spec.k_total() as usize;
    let k_pad = spec.k_total().next_multiple_of(cfg.block_k) as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let n_pad = spec.out_channels_per_group().next_multiple_of(cfg.block_n) as usize;
    let mut packed = alloc::zeroed_vec::<f32>(spec.groups as usize * k_pad * n_pad, "the packed weights")?;
    for g in 0..spec.groups as usize {
        for n in 0..cout_g {
            let src = &weight[(g * cout_g + n) * k..][..k];
            for (kk, &v) in src.iter().enumerate() {
                packed[(g * k_pad + kk) * n_pad + n] = v;
            }
        }
    }
    Ok(packed)
}

/// One gather-table row per k (padded to whole `block_k` steps): the element offset of
/// tap (ic, ky, kx) from a window origin, and its (dy, dx); rows past K are out of range.
pub(crate) fn gather_rows(spec: &Conv2dSpec, h: u32, w: u32, block_k: u32) -> Result<Vec<[i32; 4]>> {
    const OUT_OF_RANGE: i32 = -(1 << 30);
    let (kh, kw) = (spec.kernel[0], spec.kernel[1]);
    let span_h = spec.dilation[0] as u64 * (kh as u64 - 1);
    let span_w = spec.dilation[1] as u64 * (kw as u64 - 1);
    if span_h >= 1 << 29 || span_w >= 1 << 29 {
        return Err(Error::TooLarge(format!("dilated kernel {}x{}", span_h + 1, span_w + 1)));
    }
    let k_pad = spec.k_total().next_multiple_of(block_k);
    let mut rows = alloc::vec_with_capacity(k_pad as usize, "the gather table")?;
    rows.extend((0..k_pad).map(|k| {
        if k >= spec.k_total() {
            return [0, OUT_OF_RANGE, OUT_OF_RANGE, 0];
        }
        let ic = k / (kh * kw);
        let dy = ((k / kw) % kh * spec.dilation[0]) as i64;
        let dx = ((k % kw) * spec.dilation[1]) as i64;
        let off = ic as i64 * h as i64 * w as i64 + dy * w as i64 + dx;
        [off as i32, dy as i32, dx as i32, 0]
    }));
    Ok(rows)
}
