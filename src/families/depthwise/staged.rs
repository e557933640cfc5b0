//! The depthwise family's staged kernel (`depthwise_staged.wgsl`): depthwise convolutions
//! of multiplier 1 on NCHW tensors, where each workgroup copies a tile of whole planes (or a
//! band of one plane) with its halo into workgroup memory, then computes the tile's outputs
//! from there. The strip kernel (`depthwise.wgsl`) pays a branch, a bounds test and its own
//! address arithmetic for every value each invocation loads, several times per input value;
//! here each input value is loaded once per tile by a flat, branch-free loop.
//!
//! Configs are named `staged-x2-w256`: output columns per invocation and invocations per
//! workgroup. The tile itself follows from the input size ([`StagedGeometry::new`]): as
//! many whole planes as the workgroup has invocations for, else bands of as many rows as it
//! has (at least 8), in at most [`STAGED_BYTES`] of workgroup memory.

use super::{Depthwise, StripConfig, StripKernel, MAX_SEGMENT};
use crate::caps::KernelLimits;
use crate::error::{Error, Result};
use crate::kernel::{
    compose_defined, workgroups_u32, ConvParams, Family, KernelConfig, Packed, Shaped, TensorForm, F16_TENSORS,
};
use crate::spec::{Conv2dSpec, ConvProblem};

const STAGED_WGSL: &str = include_str!("depthwise_staged.wgsl");

/// The most workgroup memory one staged tile takes: small enough that several workgroups
/// share an SM (their copies and computations overlap), large enough for whole planes of
/// the small feature maps and bands of several rows of the large ones.
pub(crate) const STAGED_BYTES: u64 = 16 * 1024;

/// The fewest output rows a band of a plane takes (where whole planes do not fit a tile):
/// a 3×3 kernel at stride 1 stages 10 input rows for 8 output rows.
const MIN_BAND_ROWS: u32 = 8;

/// A staged config: what one invocation computes and how many share a workgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StagedConfig {
    /// Neighbouring output columns per invocation.
    pub x: u32,
    /// Invocations per workgroup.
    pub workgroup: u32,
}

impl StagedConfig {
    /// The name's prefix, which tells staged configs from strip ones.
    pub const PREFIX: &'static str = "staged-";

    /// The config's name, e.g. `staged-x2-w256`.
    pub fn name(&self) -> String {
        format!("{}x{}-w{}", Self::PREFIX, self.x, self.workgroup)
    }

    /// Parses a name of [`StagedConfig::name`]'s form.
    pub fn parse(s: &str) -> Result<StagedConfig> {
        let bad = || {
            Error::ConfigParse(format!(
                "depthwise config {s:?}: expected staged-x<columns>-w<invocations>, e.g. staged-x2-w256"
            ))
        };
        let rest = s.strip_prefix(Self::PREFIX).and_then(|r| r.strip_prefix('x')).ok_or_else(bad)?;
        let (x, wg) = rest.split_once("-w").ok_or_else(bad)?;
        let num = |v: &str| v.parse::<u32>().map_err(|_| bad());
        let cfg = StagedConfig { x: num(x)?, workgroup: num(wg)? };
        cfg.check_shape()?;
        Ok(cfg)
    }

    /// Device-independent checks.
    pub fn check_shape(&self) -> Result<()> {
        let refuse = |reason: String| Err(Error::KernelRefused { kernel: self.name(), reason });
        if self.x == 0 || self.x > 8 {
            return refuse(format!("{} columns per invocation: 1 to 8", self.x));
        }
        if self.workgroup == 0 || !self.workgroup.is_multiple_of(32) {
            return refuse(format!("{} invocations are not a whole number of 32-wide subgroups", self.workgroup));
        }
        Ok(())
    }

    /// The row segment one invocation reads from workgroup memory for a spec (saturating:
    /// asked of specs not yet validated).
    fn segment(&self, spec: &Conv2dSpec) -> u64 {
        (self.x as u64 - 1) * spec.stride[1] as u64
            + (spec.kernel[1] as u64).saturating_sub(1) * spec.dilation[1] as u64
            + 1
    }
}

/// The configs the benchmark and the tuner try.
pub fn staged_sweep() -> Vec<StagedConfig> {
    let c = |x, workgroup| StagedConfig { x, workgroup };
    vec![c(2, 256), c(1, 256), c(4, 256), c(2, 128), c(1, 128), c(4, 128)]
}

/// A tile of the staged kernel for one problem: `p` planes × `ty` output rows × `xb_t`
/// blocks of `x` output columns, and the input it stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StagedGeometry {
    /// Output columns per invocation.
    pub x: u32,
    /// Planes per tile.
    pub p: u32,
    /// Output rows per tile.
    pub ty: u32,
    /// Column blocks per tile.
    pub xb_t: u32,
    /// Tiles across a plane's rows and columns.
    pub tiles_y: u32,
    pub tiles_x: u32,
    /// Staged input rows and columns per plane.
    pub srows: u32,
    pub scols: u32,
    /// Values of a row one block reads.
    pub span: u32,
}

impl StagedGeometry {
    /// The tile for a problem: whole planes where a plane's blocks fit the workgroup (as
    /// many planes as it has invocations for), else bands of rows of one plane, then
    /// halved until the staged input fits [`STAGED_BYTES`] and the device. Refused where
    /// even one block of one row does not fit.
    pub(crate) fn new(cfg: &StagedConfig, problem: &ConvProblem, limits: &KernelLimits) -> Result<StagedGeometry> {
        let spec = &problem.spec;
        let (oh, ow) = (problem.output.h, problem.output.w);
        let budget = STAGED_BYTES.min(limits.workgroup_storage_bytes as u64);
        let wg = cfg.workgroup;
        let xb = ow.div_ceil(cfg.x);
        let even = |total: u32, most: u32| total.div_ceil(total.div_ceil(most.max(1)));
        let mut xb_t = even(xb, wg);
        // At least MIN_BAND_ROWS rows per band (invocations then take several blocks), so
        // that the halo rows a band stages beside its own stay a small share.
        let rows = (wg / xb_t).max(MIN_BAND_ROWS);
        let (mut ty, mut p) = match rows >= oh {
            true => (oh, (wg / (oh * xb_t)).max(1)),
            false => (even(oh, rows), 1),
        };
        let geometry = |p: u32, ty: u32, xb_t: u32| {
            let srows = (ty - 1) * spec.stride[0] + (spec.kernel[0] - 1) * spec.dilation[0] + 1;
            let scols = (xb_t * cfg.x - 1) * spec.stride[1] + (spec.kernel[1] - 1) * spec.dilation[1] + 1;
            StagedGeometry {
                x: cfg.x,
                p,
                ty,
                xb_t,
                tiles_y: oh.div_ceil(ty),
                tiles_x: xb.div_ceil(xb_t),
                srows,
                scols,
                span: cfg.segment(spec) as u32,
            }
        };
        loop {
            let g = geometry(p, ty, xb_t);
            if g.workgroup_bytes(spec) <= budget {
                return Ok(g);
            }
            if p > 1 {
                p = p.div_ceil(2);
            } else if ty > 1 {
                ty = even(oh, ty.div_ceil(2));
            } else if xb_t > 1 {
                xb_t = even(xb, xb_t.div_ceil(2));
            } else {
                return Err(Error::KernelRefused {
                    kernel: cfg.name(),
                    reason: format!(
                        "one row of {} column(s) stages {} B of input and taps, over the {budget} B it may use",
                        cfg.x,
                        g.workgroup_bytes(spec)
                    ),
                });
            }
        }
    }

    /// Workgroup memory: the staged input and the tile's taps, f32 each.
    fn workgroup_bytes(&self, spec: &Conv2dSpec) -> u64 {
        let taps = spec.kernel[0] as u64 * spec.kernel[1] as u64;
        4 * self.p as u64 * (self.srows as u64 * self.scols as u64 + taps)
    }

    /// Workgroups for a chunk of `planes` planes.
    fn workgroups(&self, planes: u64) -> u64 {
        planes.div_ceil(self.p as u64) * self.tiles_y as u64 * self.tiles_x as u64
    }
}

/// A staged kernel of the depthwise family.
#[derive(Debug)]
pub(crate) struct StagedKernel {
    pub(super) family: &'static Depthwise,
    pub(super) cfg: StagedConfig,
}

impl StagedKernel {
    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: self.cfg.name(), reason }
    }

    /// The strip kernel that runs channels-last tensors for this config (one channel per
    /// invocation, the same workgroup size and weights).
    fn channels_last(&self) -> StripKernel {
        StripKernel { family: self.family, cfg: self.strip() }
    }

    /// The strip config whose packed weights are this kernel's (`[C_out][KH·KW]`).
    fn strip(&self) -> StripConfig {
        StripConfig { x: 1, y: 1, c: 1, workgroup: self.cfg.workgroup }
    }

    fn source(&self, problem: &ConvProblem, g: &StagedGeometry, f16_tensors: bool) -> Result<String> {
        let defines: &[&'static str] = if f16_tensors { &[F16_TENSORS] } else { &[] };
        compose_defined(
            "depthwise_staged",
            &[("depthwise_staged", STAGED_WGSL), ("tensors", super::TENSORS_WGSL)],
            vec![("config", header(&self.cfg, g, problem))],
            self.family.precision(),
            defines,
        )
    }

    fn shaped(&self, problem: &ConvProblem, limits: &KernelLimits, f16_tensors: bool) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let geometry = StagedGeometry::new(&self.cfg, problem, limits)?;
        let source = self.source(problem, &geometry, f16_tensors);
        Ok(Box::new(StagedShaped { geometry, source }))
    }
}

impl KernelConfig for StagedKernel {
    fn family(&self) -> &'static dyn Family {
        self.family
    }
    fn name(&self) -> String {
        self.cfg.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.cfg.check_shape()
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.cfg.check_shape()?;
        // The same workgroup size as its channels-last strip kernel: the same limit.
        self.channels_last().check_limits(limits)
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        if spec.in_channels_per_group() != 1 || spec.out_channels_per_group() != 1 {
            return Err(self.refuse(format!(
                "{} input and {} output channel(s) per group: the staged kernel runs depthwise convolutions of \
                 multiplier 1 (the strip configs run the others)",
                spec.in_channels_per_group(),
                spec.out_channels_per_group()
            )));
        }
        let segment = self.cfg.segment(spec);
        if segment > MAX_SEGMENT as u64 {
            return Err(self.refuse(format!(
                "a block of {} columns reads row segments of {segment} values (kernel width {}, stride {}, \
                 dilation {}); at most {MAX_SEGMENT} fit in registers",
                self.cfg.x, spec.kernel[1], spec.stride[1], spec.dilation[1]
            )));
        }
        // The smallest tile (one block of one row of one plane) must fit: then every input
        // size has one. (In u64: the spec is not validated yet.)
        let rows = (spec.kernel[0] as u64).saturating_sub(1) * spec.dilation[0] as u64 + 1;
        let taps = spec.kernel[0] as u64 * spec.kernel[1] as u64;
        let need = 4 * (rows * segment + taps);
        let budget = STAGED_BYTES.min(limits.workgroup_storage_bytes as u64);
        if need > budget {
            return Err(self.refuse(format!(
                "one block of a {}x{} kernel (dilation {}x{}) stages {need} B of input and taps, over the \
                 {budget} B it may use",
                spec.kernel[0], spec.kernel[1], spec.dilation[0], spec.dilation[1]
            )));
        }
        // Channels-last tensors run the strip kernel's NHWC shader: its limits too.
        self.channels_last().check_spec(spec, limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        self.channels_last().packed_bytes(spec)
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        // `[C_out][KH·KW]`, as its channels-last strip kernel packs them.
        self.channels_last().pack(spec, weight, bias)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        // The strip kernel's grid uniform: the channels-last form runs its shader, and the
        // pipeline's bindings follow the config, not the form.
        self.channels_last().extra_bindings()
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.shaped(problem, limits, false)
    }
    fn shape_native(
        &self,
        problem: &ConvProblem,
        limits: &KernelLimits,
        form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        // Channels last: the strip kernel's channels-last shader (a warp's loads are runs of
        // neighbouring channels already); NCHW f16: this kernel reading f16 itself.
        match form.channels_last {
            true => self.channels_last().shape_native(problem, limits, form),
            false => Some(self.shaped(problem, limits, form.f16)),
        }
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let dw = |k, s, d| Conv2dSpec::new(32, 32, k).groups(32).stride((s, s)).dilation((d, d));
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let mut sources = Vec::new();
        for spec in [dw(3, 1, 1), dw(5, 2, 1), dw(3, 1, 2)] {
            for (h, w) in [(7, 7), (56, 56), (224, 300)] {
                let problem = spec.problem(crate::spec::Shape4::new(2, 32, h, w))?;
                let g = StagedGeometry::new(&self.cfg, &problem, &limits)?;
                for f16 in [false, true] {
                    sources.push(self.source(&problem, &g, f16)?);
                }
            }
        }
        Ok(sources)
    }
    fn invocations(&self) -> u32 {
        self.cfg.workgroup
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        // It follows from the input size: at most the tile budget.
        None
    }
}

/// The tile and the problem's geometry as WGSL constants.
fn header(cfg: &StagedConfig, g: &StagedGeometry, problem: &ConvProblem) -> String {
    let spec = &problem.spec;
    format!(
        "// generated from StagedConfig {name}, its tile for the input size and the convolution's geometry\n\
         const VX: u32 = {x}u;\nconst WG: u32 = {wg}u;\n\
         const P: u32 = {p}u;\nconst TY: u32 = {ty}u;\nconst XB_T: u32 = {xb_t}u;\n\
         const TILES_Y: u32 = {tiles_y}u;\nconst TILES_X: u32 = {tiles_x}u;\n\
         const SROWS: u32 = {srows}u;\nconst SCOLS: u32 = {scols}u;\nconst SPAN_X: u32 = {span}u;\n\
         const H: u32 = {h}u;\nconst W: u32 = {w}u;\nconst OH: u32 = {oh}u;\nconst OW: u32 = {ow}u;\n\
         const KH: u32 = {kh}u;\nconst KW: u32 = {kw}u;\n\
         const STRIDE_H: u32 = {sh}u;\nconst STRIDE_W: u32 = {sw}u;\n\
         const DIL_H: u32 = {dh}u;\nconst DIL_W: u32 = {dw}u;\n",
        name = cfg.name(),
        x = g.x,
        wg = cfg.workgroup,
        p = g.p,
        ty = g.ty,
        xb_t = g.xb_t,
        tiles_y = g.tiles_y,
        tiles_x = g.tiles_x,
        srows = g.srows,
        scols = g.scols,
        span = g.span,
        h = problem.input.h,
        w = problem.input.w,
        oh = problem.output.h,
        ow = problem.output.w,
        kh = spec.kernel[0],
        kw = spec.kernel[1],
        sh = spec.stride[0],
        sw = spec.stride[1],
        dh = spec.dilation[0],
        dw = spec.dilation[1],
    )
}

/// A staged kernel composed for one input size.
struct StagedShaped {
    geometry: StagedGeometry,
    source: Result<String>,
}

impl Shaped for StagedShaped {
    fn source(&self) -> Result<String> {
        self.source.clone()
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        let workgroups = self.geometry.workgroups(p.batch as u64 * p.c_out as u64);
        workgroups_u32(workgroups)?;
        // The strip kernel's grid binding is declared (see `extra_bindings`) but unread here.
        Ok((vec![0; 32], workgroups))
    }
}

/// The CPU twin of `depthwise_staged.wgsl`: the same tiles, each staged with explicit zeros
/// outside the image (and past the last plane), the same blocks, row segments, tap order and
/// store rules, in f32 as the shader sums. The result is `[N, C, OH, OW]` with untouched
/// outputs left NaN, so a tile or store rule that misses an output shows.
#[cfg(test)]
pub(crate) fn staged_twin(
    problem: &ConvProblem,
    g: &StagedGeometry,
    input: &[f32],
    packed: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let spec = &problem.spec;
    let (c, h, w) = (problem.input.c as usize, problem.input.h as i64, problem.input.w as i64);
    let (oh, ow) = (problem.output.h as usize, problem.output.w as usize);
    let (kh, kw) = (spec.kernel[0] as usize, spec.kernel[1] as usize);
    let (sh, sw) = (spec.stride[0] as usize, spec.stride[1] as usize);
    let (dh, dw) = (spec.dilation[0] as usize, spec.dilation[1] as usize);
    let (p, ty, xb_t, vx) = (g.p as usize, g.ty as usize, g.xb_t as usize, g.x as usize);
    let (srows, scols, span) = (g.srows as usize, g.scols as usize, g.span as usize);
    let planes = problem.input.n as usize * c;
    let mut out = vec![f32::NAN; problem.output.len() as usize];
    let workgroups = g.workgroups(planes as u64) as usize;
    for tile in 0..workgroups {
        let tx = tile % g.tiles_x as usize;
        let tyi = (tile / g.tiles_x as usize) % g.tiles_y as usize;
        let q0 = tile / (g.tiles_x * g.tiles_y) as usize * p;
        let (oy0, ox0) = (tyi * ty, tx * xb_t * vx);
        let iy0 = (oy0 * sh) as i64 - spec.padding.top as i64;
        let ix0 = (ox0 * sw) as i64 - spec.padding.left as i64;
        let mut staged = vec![0.0f32; p * srows * scols];
        for (e, s) in staged.iter_mut().enumerate() {
            let (pl, r, j) = (e / (srows * scols), (e % (srows * scols)) / scols, e % scols);
            let (q, iy, ix) = (q0 + pl, iy0 + r as i64, ix0 + j as i64);
            if q < planes && (0..h).contains(&iy) && (0..w).contains(&ix) {
                *s = input[q * (h * w) as usize + (iy * w + ix) as usize];
            }
        }
        for b in 0..p * ty * xb_t {
            let (pl, y, xb) = (b / (ty * xb_t), (b / xb_t) % ty, b % xb_t);
            let q = q0 + pl;
            let taps = |k: usize| packed[(q.min(planes - 1) % c) * kh * kw + k];
            let mut acc = vec![0.0f32; vx];
            for ky in 0..kh {
                let row = (pl * srows + y * sh + ky * dh) * scols + xb * vx * sw;
                let seg = &staged[row..row + span];
                for kx in 0..kw {
                    let wv = taps(ky * kw + kx);
                    for (x, a) in acc.iter_mut().enumerate() {
                        *a = seg[x * sw + kx * dw].mul_add(wv, *a);
                    }
                }
            }
            let (oy, ox) = (oy0 + y, ox0 + xb * vx);
            if q < planes && oy < oh {
                for (x, a) in acc.iter().enumerate() {
                    if ox + x < ow {
                        out[(q * oh + oy) * ow + ox + x] = a + bias.map_or(0.0, |b| b[q % c]);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::pack_weights;
    use super::*;
    use crate::spec::{Padding, Shape4};

    #[test]
    fn names_round_trip() {
        for cfg in staged_sweep() {
            assert_eq!(StagedConfig::parse(&cfg.name()).unwrap(), cfg);
        }
        for bad in ["staged-x2", "staged-x0-w128", "staged-x2-w100", "staged-x9-w128", "x2-w128", "staged-2-w64"] {
            assert!(StagedConfig::parse(bad).is_err(), "{bad}");
        }
    }

    /// The twin against the reference on every config: whole planes, bands of rows, column
    /// tiles (a row wider than the workgroup), a tile budget that halves, strides,
    /// dilations, asymmetric padding, kernels 1 to 7, a last tile past the last plane.
    #[test]
    fn twin_matches_reference() {
        let dw = |c, k| Conv2dSpec::new(c, c, k).groups(c);
        let cases = [
            ("dw3", dw(5, 3).padding(Padding::uniform(1)).with_bias(true), [2, 9, 11]),
            ("dw3_big", dw(2, 3).padding(Padding::uniform(1)), [1, 40, 37]),
            ("dw3_wide", dw(1, 3).padding(Padding::uniform(1)).with_bias(true), [1, 3, 600]),
            ("dw5_s2", dw(3, 5).stride((2, 2)).padding(Padding::uniform(2)), [1, 13, 10]),
            ("dw3_d2", dw(4, 3).dilation((2, 2)).padding(Padding::new(2, 1, 0, 3)).with_bias(true), [1, 10, 9]),
            ("dw7_s2x1", dw(2, 7).stride((2, 1)).padding(Padding::new(3, 3, 1, 2)), [2, 12, 15]),
            ("dw1", dw(6, 1), [1, 5, 7]),
            ("dw_1x5", dw(3, 1).kernel_hw((1, 5)).padding(Padding::new(0, 2, 0, 2)), [3, 4, 9]),
        ];
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let small = KernelLimits::with_workgroup_bytes(1024);
        for (name, spec, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            for cfg in staged_sweep() {
                for limits in [limits, small] {
                    let g = StagedGeometry::new(&cfg, &problem, &limits).unwrap();
                    assert!(g.workgroup_bytes(&spec) <= limits.workgroup_storage_bytes as u64);
                    let label = format!("{name} {} {g:?}", cfg.name());
                    let strip = StripConfig { x: 1, y: 1, c: 1, workgroup: cfg.workgroup };
                    crate::reference::check_twin(&label, &problem, |x, w, bias| {
                        staged_twin(&problem, &g, x, &pack_weights(&spec, w, &strip).unwrap(), bias)
                    });
                }
            }
        }
    }

    /// Whole planes of small maps share a tile; large maps are cut into bands of rows.
    #[test]
    fn tiles_follow_the_input_size() {
        let spec = Conv2dSpec::new(960, 960, 3).groups(960).padding(Padding::uniform(1));
        let limits = KernelLimits::with_workgroup_bytes(49152);
        let cfg = StagedConfig { x: 2, workgroup: 256 };
        let g = StagedGeometry::new(&cfg, &spec.problem(Shape4::new(1, 960, 7, 7)).unwrap(), &limits).unwrap();
        assert_eq!((g.p, g.ty, g.xb_t, g.tiles_y, g.tiles_x), (9, 7, 4, 1, 1));
        let g = StagedGeometry::new(&cfg, &spec.problem(Shape4::new(1, 960, 112, 112)).unwrap(), &limits).unwrap();
        assert_eq!((g.p, g.ty, g.xb_t, g.tiles_y, g.tiles_x), (1, 8, 56, 14, 1));
    }

    #[test]
    fn refusals_name_the_limit() {
        let k = StagedKernel { family: &super::super::DEPTHWISE, cfg: StagedConfig { x: 2, workgroup: 256 } };
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let mult = Conv2dSpec::new(4, 8, 3).groups(4);
        let e = k.check_spec(&mult, &limits).unwrap_err().to_string();
        assert!(e.contains("multiplier 1"), "{e}");
        let grouped = Conv2dSpec::new(8, 8, 3).groups(4);
        assert!(k.check_spec(&grouped, &limits).unwrap_err().to_string().contains("2 input"));
        let dilated = Conv2dSpec::new(4, 4, 9).groups(4).dilation((8, 8));
        let e = k.check_spec(&dilated, &limits).unwrap_err().to_string();
        assert!(e.contains("row segments of 66 values"), "{e}");
        // 13×13 taps: they fit workgroup memory, not the channels-last strip's registers.
        let wide = Conv2dSpec::new(4, 4, 13).groups(4);
        assert!(k.check_spec(&wide, &limits).unwrap_err().to_string().contains("169 taps"));
        let tall = Conv2dSpec::new(4, 4, 7).kernel_hw((31, 7)).groups(4).dilation((6, 1));
        let e = k.check_spec(&tall, &KernelLimits::with_workgroup_bytes(4096)).unwrap_err().to_string();
        assert!(e.contains("over the 4096 B"), "{e}");
    }
}
