//! The depthwise family: convolutions whose groups read few input channels — depthwise
//! (one input channel per group, any channel multiplier) and narrow grouped layers —
//! where an implicit GEMM would pad each group's output channels to a whole block and its K
//! to a whole step, so almost all of its work would be padding. These layers have almost no
//! arithmetic per byte: the kernel streams the input once, each invocation computing a
//! block of [`StripConfig::y`] rows × [`StripConfig::x`] columns of outputs for
//! [`StripConfig::c`] output channels of one group, its taps in registers, from input row
//! segments loaded once each (`depthwise.wgsl`).
//!
//! `depthwise` computes with f32 operands, `depthwise-f16` with operands rounded to f16
//! (f32 accumulation). Configs are named `x1y4c1-w128`: output columns and rows per
//! invocation, output channels per invocation, invocations per workgroup. Depthwise layers
//! of multiplier 1 also have the staged kernel ([`staged`], configs `staged-x2-w256`),
//! which copies tiles of whole planes or bands of rows into workgroup memory first.

mod staged;
pub use staged::{staged_sweep, StagedConfig};

/// Planes per tile of a staged config on a problem (several: whole planes share a tile).
pub(crate) fn staged_planes_per_tile(cfg: &StagedConfig, problem: &ConvProblem, limits: &KernelLimits) -> Result<u32> {
    staged::StagedGeometry::new(cfg, problem, limits).map(|g| g.p)
}

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::tiled::{pass_workgroup_refusal, round_to_f16};
use crate::kernel::{
    compose_defined, workgroups_u32, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, Shaped, SimtOperands,
    Target, TensorForm, F16_TENSORS, GRID_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem};

const DEPTHWISE_WGSL: &str = include_str!("depthwise.wgsl");
const DEPTHWISE_NHWC_WGSL: &str = include_str!("depthwise_nhwc.wgsl");
const DEPTHWISE_NHWC4_WGSL: &str = include_str!("depthwise_nhwc4.wgsl");
const TENSORS_WGSL: &str = include_str!("tensors.wgsl");

/// The most input values one invocation holds for a row segment: the segment a block
/// reads, `(x - 1) · stride + (kernel - 1) · dilation + 1`, lives in registers.
pub(crate) const MAX_SEGMENT: u32 = 64;
/// The most accumulators one invocation holds (`x · y · c`).
pub(crate) const MAX_ACCUMULATORS: u32 = 32;
/// The most filter taps one invocation holds (`c · KH · KW`).
pub(crate) const MAX_TAPS: u32 = 128;

/// The family, with f32 or f16-rounded operands.
#[derive(Debug)]
pub(crate) struct Depthwise {
    operands: SimtOperands,
}
/// `depthwise`: f32 operands.
pub(crate) static DEPTHWISE: Depthwise = Depthwise { operands: SimtOperands { f16: false } };
/// `depthwise-f16`: operands rounded to f16, f32 accumulation.
pub(crate) static DEPTHWISE_F16: Depthwise = Depthwise { operands: SimtOperands { f16: true } };

/// A strip config: what one invocation computes and how many share a workgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StripConfig {
    /// Neighbouring output columns per invocation (1: a subgroup's loads are contiguous).
    pub x: u32,
    /// Neighbouring output rows per invocation (they share the input rows between them).
    pub y: u32,
    /// Output channels of one group per invocation (they share the input segments: channel
    /// multipliers above 1 and grouped layers).
    pub c: u32,
    /// Invocations per workgroup.
    pub workgroup: u32,
}

impl StripConfig {
    /// The family's reference config: a column of 4 outputs, one channel, 128 invocations.
    pub const REFERENCE: StripConfig = StripConfig { x: 1, y: 4, c: 1, workgroup: 128 };

    /// The config's name, e.g. `x1y4c1-w128`.
    pub fn name(&self) -> String {
        format!("x{}y{}c{}-w{}", self.x, self.y, self.c, self.workgroup)
    }

    /// Parses a name of [`StripConfig::name`]'s form.
    pub fn parse(s: &str) -> Result<StripConfig> {
        let bad = || {
            Error::ConfigParse(format!(
                "depthwise config {s:?}: expected x<columns>y<rows>c<channels>-w<invocations>, e.g. x1y4c1-w128"
            ))
        };
        let (block, wg) = s.split_once("-w").ok_or_else(bad)?;
        let (x, rest) = block.strip_prefix('x').and_then(|r| r.split_once('y')).ok_or_else(bad)?;
        let (y, c) = rest.split_once('c').ok_or_else(bad)?;
        let num = |v: &str| v.parse::<u32>().map_err(|_| bad());
        let cfg = StripConfig { x: num(x)?, y: num(y)?, c: num(c)?, workgroup: num(wg)? };
        cfg.check_shape()?;
        Ok(cfg)
    }

    /// Device-independent checks.
    pub fn check_shape(&self) -> Result<()> {
        let refuse = |reason: String| Err(Error::KernelRefused { kernel: self.name(), reason });
        if self.x == 0 || self.y == 0 || self.c == 0 || self.workgroup == 0 {
            return refuse("every count must be at least 1".into());
        }
        let acc = (self.x as u64 * self.y as u64).saturating_mul(self.c as u64);
        if acc > MAX_ACCUMULATORS as u64 {
            return refuse(format!("{acc} accumulators per invocation exceed {MAX_ACCUMULATORS}"));
        }
        if !self.workgroup.is_multiple_of(32) {
            return refuse(format!("{} invocations are not a whole number of 32-wide subgroups", self.workgroup));
        }
        Ok(())
    }

    /// The row segment one invocation reads for a spec (values held in registers).
    pub fn segment(&self, spec: &Conv2dSpec) -> u64 {
        (self.x as u64).saturating_sub(1) * spec.stride[1] as u64
            + (spec.kernel[1] as u64).saturating_sub(1) * spec.dilation[1] as u64
            + 1
    }

    /// The input rows one invocation walks for a spec.
    pub fn rows(&self, spec: &Conv2dSpec) -> u64 {
        (self.y as u64).saturating_sub(1) * spec.stride[0] as u64
            + (spec.kernel[0] as u64).saturating_sub(1) * spec.dilation[0] as u64
            + 1
    }
}

/// The configs the benchmark and the tuner try, the reference first.
pub fn strip_sweep() -> Vec<StripConfig> {
    let c = |x, y, c, workgroup| StripConfig { x, y, c, workgroup };
    vec![
        StripConfig::REFERENCE,
        c(1, 2, 1, 128),
        c(1, 8, 1, 128),
        c(2, 4, 1, 128),
        c(4, 1, 1, 128),
        c(1, 4, 1, 64),
        c(1, 4, 1, 256),
        c(1, 4, 2, 128),
        c(1, 4, 4, 128),
        c(2, 2, 4, 128),
    ]
}

impl Family for Depthwise {
    fn name(&self) -> &'static str {
        self.operands.name("depthwise", "depthwise-f16")
    }
    fn precision(&self) -> Precision {
        self.operands.precision()
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        self.operands.unavailable(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        match config.starts_with(StagedConfig::PREFIX) {
            true => Ok(self.staged(StagedConfig::parse(config)?)),
            false => Ok(Kernel::new(StripKernel { family: self, cfg: StripConfig::parse(config)? })),
        }
    }
    fn reference(&'static self) -> Kernel {
        self.with(StripConfig::REFERENCE)
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        let strips = strip_sweep().into_iter().map(|cfg| self.with(cfg));
        strips.chain(staged_sweep().into_iter().map(|cfg| self.staged(cfg))).collect()
    }
    fn targets(&self) -> &'static [Target] {
        self.operands.targets()
    }
}

impl Depthwise {
    /// This family's kernel of a config.
    pub(crate) fn with(&'static self, cfg: StripConfig) -> Kernel {
        Kernel::new(StripKernel { family: self, cfg })
    }
    /// This family's staged kernel of a config.
    pub(crate) fn staged(&'static self, cfg: StagedConfig) -> Kernel {
        Kernel::new(staged::StagedKernel { family: self, cfg })
    }
}

/// The most input channels per group the family runs: beyond, each output sums enough
/// products for a GEMM's blocks to fill (and every output would reload its input rows
/// once per channel).
pub(crate) const MAX_CHANNELS_PER_GROUP: u32 = 16;

/// A kernel of the depthwise family.
#[derive(Debug)]
pub(crate) struct StripKernel {
    family: &'static Depthwise,
    cfg: StripConfig,
}

impl StripKernel {
    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: self.cfg.name(), reason }
    }
}

impl KernelConfig for StripKernel {
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
        match pass_workgroup_refusal(limits, self.cfg.workgroup, "its") {
            Some(reason) => Err(self.refuse(reason)),
            None => Ok(()),
        }
    }
    fn check_spec(&self, spec: &Conv2dSpec, _limits: &KernelLimits) -> Result<()> {
        let cin_g = spec.in_channels_per_group();
        if cin_g > MAX_CHANNELS_PER_GROUP {
            return Err(self.refuse(format!(
                "{cin_g} input channels per group: the family runs groups of at most {MAX_CHANNELS_PER_GROUP} \
                 (depthwise and narrow grouped convolutions)"
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
        let taps = self.cfg.c as u64 * spec.kernel[0] as u64 * spec.kernel[1] as u64;
        if taps > MAX_TAPS as u64 {
            return Err(self.refuse(format!(
                "{} channel(s) of a {}x{} kernel are {taps} taps; at most {MAX_TAPS} fit in registers",
                self.cfg.c, spec.kernel[0], spec.kernel[1]
            )));
        }
        Ok(())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        packed_len_with_vectors(spec, &self.cfg).saturating_mul(4)
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        let mut packed = pack_weights(spec, weight, &self.cfg)?;
        if self.family.operands.f16 {
            round_to_f16(&mut packed, "weight")?;
        }
        Packed::f32_weights(&packed)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[GRID_BINDING]
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        Ok(self.shaped(&problem.spec, TensorForm::NCHW_F32))
    }
    fn shape_native(
        &self,
        problem: &ConvProblem,
        limits: &KernelLimits,
        form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        // Every form: both layouts, f32 or f16 tensors.
        Some(self.check_spec(&problem.spec, limits).map(|()| self.shaped(&problem.spec, form)))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let dw = |k, s, d| Conv2dSpec::new(32, 32, k).groups(32).stride((s, s)).dilation((d, d));
        // 6 channels: the channels-last shader of one channel per invocation; groups of 8
        // channels: its grouped form over vectors.
        let specs = [
            dw(3, 1, 1),
            dw(5, 2, 1),
            dw(3, 1, 2),
            Conv2dSpec::new(6, 6, 3).groups(6),
            Conv2dSpec::new(16, 16, 3).groups(2),
        ];
        let forms = [false, true].map(|f16| [false, true].map(|channels_last| TensorForm { channels_last, f16 }));
        specs.iter().flat_map(|spec| forms.iter().flatten().map(|&form| self.source(spec, form))).collect()
    }
    fn invocations(&self) -> u32 {
        self.cfg.workgroup
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(0)
    }
}

impl StripKernel {
    /// The kernel composed for a spec and tensor form: the NCHW shader with the config's
    /// strip, or the channels-last one with [`StripKernel::nhwc_strip`]'s.
    fn shaped(&self, spec: &Conv2dSpec, form: TensorForm) -> Box<dyn Shaped> {
        let source = self.source(spec, form);
        match form.channels_last {
            false => Box::new(Strips { cfg: self.cfg, spec: *spec, source }),
            true => Box::new(ChannelsLast {
                block: match over_vectors(spec) {
                    true => self.nhwc4_strip(),
                    false => self.nhwc_strip(spec),
                },
                channels_per_invocation: if over_vectors(spec) { 4 } else { 1 },
                c_out_pad: c_out_pad(spec, &self.cfg),
                taps_at: tap_vectors_at(spec, &self.cfg).unwrap_or(0),
                workgroup: self.cfg.workgroup,
                source,
            }),
        }
    }

    /// The kernel's WGSL for a spec and tensor form: the strip and the spec's taps, strides
    /// and dilations are constants, so the tap loops unroll and the segment stays in
    /// registers. Channels last: the family's header for the strip
    /// [`StripKernel::nhwc_strip`] picks (its VX outputs along a row, its segment, the
    /// config's workgroup size), over vectors of 4 channels where [`channel_vectors`] or
    /// [`group_vectors`] allows (`depthwise_nhwc4.wgsl`, `GROUPED` for the latter), else one
    /// channel per invocation (`depthwise_nhwc.wgsl`).
    fn source(&self, spec: &Conv2dSpec, form: TensorForm) -> Result<String> {
        let (entry, wgsl, strip) = match (form.channels_last, over_vectors(spec)) {
            (false, _) => ("depthwise", DEPTHWISE_WGSL, self.cfg),
            (true, false) => ("depthwise_nhwc", DEPTHWISE_NHWC_WGSL, self.nhwc_strip(spec)),
            (true, true) => ("depthwise_nhwc4", DEPTHWISE_NHWC4_WGSL, self.nhwc4_strip()),
        };
        let mut defines: Vec<&'static str> = Vec::new();
        if form.f16 {
            defines.push(F16_TENSORS);
        }
        if form.channels_last && group_vectors(spec) {
            defines.push(GROUPED);
        }
        compose_defined(
            entry,
            &[(entry, wgsl), ("tensors", TENSORS_WGSL)],
            vec![("config", header(&strip, spec))],
            self.family.precision(),
            &defines,
        )
    }

    /// The channel-vector shader's strip: the config's columns and rows, at most
    /// [`NHWC4_MAX_OUTPUTS`] outputs of 4 channels (rows dropped first).
    fn nhwc4_strip(&self) -> StripConfig {
        let x = self.cfg.x.min(NHWC4_MAX_OUTPUTS);
        let y = self.cfg.y.min(NHWC4_MAX_OUTPUTS / x).max(1);
        StripConfig { x, y, c: 1, ..self.cfg }
    }

    /// The channels-last shader's strip: 4 outputs along a row per invocation where their
    /// row segment fits in registers ([`MAX_SEGMENT`]), else 1.
    fn nhwc_strip(&self, spec: &Conv2dSpec) -> StripConfig {
        let four = StripConfig { x: 4, ..self.cfg };
        match four.segment(spec) <= MAX_SEGMENT as u64 {
            true => four,
            false => StripConfig { x: 1, ..self.cfg },
        }
    }
}

/// The most outputs (of 4 channels each) one invocation of `depthwise_nhwc4.wgsl` computes:
/// on the H100 (MobileNetV2's depthwise layers, N = 32, 2026-11-27) blocks of 4 (4×1, 2×2,
/// 1×4) ran within 3 % of each other, and blocks of 8 (2×4, 4×2, 8×1) 2.6–3× slower on f16
/// tensors, up to 5 % faster on f32 ones.
const NHWC4_MAX_OUTPUTS: u32 = 4;

/// Whether the channels-last shaders run a spec over vectors of 4 channels
/// (`depthwise_nhwc4.wgsl`): depthwise of multiplier 1 (the 4 channels of a vector are 4
/// groups) over a multiple of 4 channels, so that each pixel's channels, and each chunk's
/// offset (whole images), are whole vectors.
pub(crate) fn channel_vectors(spec: &Conv2dSpec) -> bool {
    spec.in_channels_per_group() == 1 && spec.out_channels_per_group() == 1 && spec.in_channels.is_multiple_of(4)
}

/// Whether the channels-last shaders run a grouped spec over vectors of 4 channels
/// (`depthwise_nhwc4.wgsl` with `GROUPED`): each group reads and writes a multiple of 4
/// channels, so that a vector of 4 output channels lies in one group, and the group's input
/// channels are whole vectors of each pixel. Against one output channel per invocation
/// (`depthwise_nhwc.wgsl`), which loads each input value once per output channel, one value
/// at a time, its loads are 4 channels wide and serve 4 outputs each.
pub(crate) fn group_vectors(spec: &Conv2dSpec) -> bool {
    let (cin_g, cout_g) = (spec.in_channels_per_group(), spec.out_channels_per_group());
    cin_g.is_multiple_of(4) && cout_g.is_multiple_of(4) && cin_g <= MAX_CHANNELS_PER_GROUP
}

/// Either vector form of the channels-last shader ([`channel_vectors`], [`group_vectors`]).
fn over_vectors(spec: &Conv2dSpec) -> bool {
    channel_vectors(spec) || group_vectors(spec)
}

/// The channels-last shader's define for [`group_vectors`]' specs.
const GROUPED: &str = "GROUPED";

/// Input and output vectors of 4 channels per group under [`group_vectors`] (`IN_VECS`,
/// `OUT_VECS`), else 1 and 1.
fn group_vector_counts(spec: &Conv2dSpec) -> (u32, u32) {
    match group_vectors(spec) {
        true => (spec.in_channels_per_group() / 4, spec.out_channels_per_group() / 4),
        false => (1, 1),
    }
}

/// The grid uniform of `depthwise_nhwc.wgsl` and `depthwise_nhwc4.wgsl`, in its field order.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ChannelsLastGrid {
    threads: u32,
    c_out_pad: u32,
    /// `depthwise_nhwc4.wgsl`: where its tap vectors start in the packed weights, in
    /// vectors ([`tap_vectors_at`]; unread by `depthwise_nhwc.wgsl`).
    taps_at: u32,
    _pad: u32,
}

/// The family's channels-last shader composed for one spec.
struct ChannelsLast {
    /// The outputs of one invocation (columns `x` along a row, rows `y`; one row on the
    /// one-channel shader).
    block: StripConfig,
    /// Neighbouring channels per invocation: 4 over channel vectors, else 1.
    channels_per_invocation: u32,
    c_out_pad: u32,
    taps_at: u64,
    workgroup: u32,
    source: Result<String>,
}

impl Shaped for ChannelsLast {
    fn source(&self) -> Result<String> {
        self.source.clone()
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        let vector = self.channels_per_invocation;
        if !p.in_offset.is_multiple_of(vector) || !p.out_offset.is_multiple_of(vector) {
            // Chunks start at whole images, whose sizes are whole vectors: never met.
            return Err(Error::unsupported(format!(
                "the depthwise kernel's chunk offsets ({}, {}) are not whole vectors of {vector} channels",
                p.in_offset, p.out_offset
            )));
        }
        let channels = (p.c_out / vector) as u64;
        let rows = match vector {
            1 => p.oh,
            _ => p.oh.div_ceil(self.block.y),
        };
        let threads = p.batch as u64 * rows as u64 * p.ow.div_ceil(self.block.x) as u64 * channels;
        let threads = u32::try_from(threads)
            .map_err(|_| Error::TooLarge(format!("{threads} outputs of the depthwise kernel in one chunk")))?;
        let taps_at = u32::try_from(self.taps_at)
            .map_err(|_| Error::TooLarge(format!("{} vectors of depthwise weights", self.taps_at)))?;
        let g = ChannelsLastGrid { threads, c_out_pad: self.c_out_pad, taps_at, _pad: 0 };
        Ok((bytemuck::bytes_of(&g).to_vec(), threads.div_ceil(self.workgroup) as u64))
    }
}

/// The config and the spec's geometry as WGSL constants.
fn header(cfg: &StripConfig, spec: &Conv2dSpec) -> String {
    let (in_vecs, out_vecs) = group_vector_counts(spec);
    format!(
        "// generated from StripConfig {name} and the convolution's geometry\n\
         const VX: u32 = {x}u;\nconst VY: u32 = {y}u;\nconst VC: u32 = {c}u;\nconst WG: u32 = {wg}u;\n\
         const KH: u32 = {kh}u;\nconst KW: u32 = {kw}u;\n\
         const STRIDE_H: u32 = {sh}u;\nconst STRIDE_W: u32 = {sw}u;\n\
         const DIL_H: u32 = {dh}u;\nconst DIL_W: u32 = {dw}u;\n\
         const SPAN_X: u32 = {span_x}u;\nconst SPAN_Y: u32 = {span_y}u;\n\
         const HELD_TAPS: u32 = {held}u;\n\
         const IN_VECS: u32 = {in_vecs}u;\nconst OUT_VECS: u32 = {out_vecs}u;\n",
        name = cfg.name(),
        x = cfg.x,
        y = cfg.y,
        c = cfg.c,
        wg = cfg.workgroup,
        kh = spec.kernel[0],
        kw = spec.kernel[1],
        sh = spec.stride[0],
        sw = spec.stride[1],
        dh = spec.dilation[0],
        dw = spec.dilation[1],
        span_x = cfg.segment(spec),
        span_y = cfg.rows(spec),
        held = held_tap_vectors(spec),
    )
}

/// The tap vectors `depthwise_nhwc4.wgsl` holds in registers: all of the kernel's where their
/// 4 channels' taps fit in [`MAX_TAPS`] (kernels up to 5×5), else 1 (it reads them at each
/// use).
fn held_tap_vectors(spec: &Conv2dSpec) -> u32 {
    let taps = spec.kernel[0] * spec.kernel[1];
    if 4 * taps <= MAX_TAPS {
        taps
    } else {
        1
    }
}

/// A group's output channels padded to whole blocks of `cfg.c`.
fn c_out_pad(spec: &Conv2dSpec, cfg: &StripConfig) -> u32 {
    spec.out_channels_per_group().next_multiple_of(cfg.c)
}

/// Elements of [`pack_weights`]' output.
fn packed_len(spec: &Conv2dSpec, cfg: &StripConfig) -> u64 {
    spec.groups as u64 * c_out_pad(spec, cfg) as u64 * spec.k_total() as u64
}

/// Where the tap vectors (or matrices) of `depthwise_nhwc4.wgsl` start in [`pack_weights`]'
/// output, in vectors of 4 (after the family's layout, at a 16-byte boundary), for specs
/// that run over vectors of channels ([`channel_vectors`], [`group_vectors`]).
fn tap_vectors_at(spec: &Conv2dSpec, cfg: &StripConfig) -> Option<u64> {
    over_vectors(spec).then(|| packed_len(spec, cfg).div_ceil(4))
}

/// Elements of [`pack_weights`]' output, the tap vectors or matrices included (as many as
/// the weights: every output channel's taps of its group's input channels).
fn packed_len_with_vectors(spec: &Conv2dSpec, cfg: &StripConfig) -> u64 {
    match tap_vectors_at(spec, cfg) {
        Some(at) => 4 * at + spec.weight_len() as u64,
        None => packed_len(spec, cfg),
    }
}

/// Weights as the kernels read them: `[groups][c_out_pad][C_in/groups][KH·KW]` (the given
/// order, with each group's output channels padded by zeros to whole blocks of `cfg.c`, so
/// a block never reads past its group); for specs over channel vectors, then (from
/// [`tap_vectors_at`]) the same taps as `[KH·KW][C]`, so that `depthwise_nhwc4.wgsl` loads
/// a tap of 4 neighbouring channels as one vector; for specs over group vectors, there the
/// taps as 4×4 matrices `[C_out/4][KH·KW][C_in/groups/4]`, column-major: column i of the
/// matrix of output vector `ov`, tap `k` and input vector `j` holds the weights of outputs
/// `4·ov .. 4·ov + 3` for the group's input channel `4·j + i` at tap `k`.
pub(crate) fn pack_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &StripConfig) -> Result<Vec<f32>> {
    let k = spec.k_total() as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let pad = c_out_pad(spec, cfg) as usize;
    let len = packed_len_with_vectors(spec, cfg) as usize;
    let mut packed = alloc::zeroed_vec::<f32>(len, "the packed depthwise weights")?;
    for g in 0..spec.groups as usize {
        let src = &weight[g * cout_g * k..][..cout_g * k];
        packed[g * pad * k..][..cout_g * k].copy_from_slice(src);
    }
    let taps = (spec.kernel[0] * spec.kernel[1]) as usize;
    match tap_vectors_at(spec, cfg) {
        Some(at) if group_vectors(spec) => {
            // Output channel o's weights are weight[o·k ..], k = C_in/groups · KH·KW, input
            // channel ci's taps at ci·KH·KW within them.
            let cin_g = spec.in_channels_per_group() as usize;
            let in_vecs = cin_g / 4;
            let matrices = &mut packed[4 * at as usize..];
            for (o, w) in weight.chunks_exact(k).enumerate() {
                let (ov, row) = (o / 4, o % 4);
                for ci in 0..cin_g {
                    let (j, col) = (ci / 4, ci % 4);
                    for tap in 0..taps {
                        matrices[((ov * taps + tap) * in_vecs + j) * 16 + col * 4 + row] = w[ci * taps + tap];
                    }
                }
            }
        }
        Some(at) => {
            // Multiplier 1: channel c's taps are weight[c·k ..].
            let c = spec.out_channels as usize;
            let vectors = &mut packed[4 * at as usize..];
            for (ch, taps) in weight.chunks_exact(k).enumerate() {
                for (tap, &w) in taps.iter().enumerate() {
                    vectors[tap * c + ch] = w;
                }
            }
        }
        None => {}
    }
    Ok(packed)
}

/// The grid uniform, in the field order of `depthwise.wgsl`'s `Grid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct StripGrid {
    x_blocks: u32,
    y_blocks: u32,
    c_blocks: u32,
    c_out_pad: u32,
    threads: u32,
    _pad: [u32; 3],
}

/// A depthwise kernel composed for one spec.
struct Strips {
    cfg: StripConfig,
    spec: Conv2dSpec,
    source: Result<String>,
}

impl Shaped for Strips {
    fn source(&self) -> Result<String> {
        self.source.clone()
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        let x_blocks = p.ow.div_ceil(self.cfg.x);
        let y_blocks = p.oh.div_ceil(self.cfg.y);
        let c_blocks = self.spec.out_channels_per_group().div_ceil(self.cfg.c);
        let threads = p.batch as u64 * p.groups as u64 * c_blocks as u64 * y_blocks as u64 * x_blocks as u64;
        let threads = u32::try_from(threads)
            .map_err(|_| Error::TooLarge(format!("{threads} invocations of the depthwise kernel in one chunk")))?;
        let g = StripGrid {
            x_blocks,
            y_blocks,
            c_blocks,
            c_out_pad: c_out_pad(&self.spec, &self.cfg),
            threads,
            _pad: [0; 3],
        };
        let workgroups = threads.div_ceil(self.cfg.workgroup);
        workgroups_u32(workgroups as u64)?;
        Ok((bytemuck::bytes_of(&g).to_vec(), workgroups as u64))
    }
}

/// The CPU twin of `depthwise.wgsl`: the same invocations (walked by nested loops, not the
/// linear invocation number), input rows walked once each with explicit zeros outside the
/// image, the tap row each feeds each output row through, packed-weight reads and store
/// rules, in f32 as the shader sums (no f16 rounding). The result is `[N, C_out, OH, OW]`
/// with untouched outputs left NaN, so a store rule that misses an output shows.
#[cfg(test)]
pub(crate) fn strip_twin(
    problem: &ConvProblem,
    cfg: &StripConfig,
    input: &[f32],
    packed: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let spec = &problem.spec;
    let (c_in, h, w) = (problem.input.c as usize, problem.input.h as i64, problem.input.w as i64);
    let (c_out, oh, ow) = (problem.output.c as usize, problem.output.h as usize, problem.output.w as usize);
    let (kh, kw) = (spec.kernel[0] as usize, spec.kernel[1] as usize);
    let (sh, sw) = (spec.stride[0] as usize, spec.stride[1] as usize);
    let (dh, dw) = (spec.dilation[0] as usize, spec.dilation[1] as usize);
    let cin_g = spec.in_channels_per_group() as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let pad = c_out_pad(spec, cfg) as usize;
    let (vx, vy, vc) = (cfg.x as usize, cfg.y as usize, cfg.c as usize);
    let (span_x, span_y) = (cfg.segment(spec) as usize, cfg.rows(spec) as usize);
    let mut out = vec![f32::NAN; problem.output.len() as usize];
    for img in 0..problem.input.n as usize {
        for g in 0..spec.groups as usize {
            for cb in 0..cout_g.div_ceil(vc) {
                for yb in 0..oh.div_ceil(vy) {
                    for xb in 0..ow.div_ceil(vx) {
                        let (ox0, oy0, n0) = (xb * vx, yb * vy, cb * vc);
                        let x0 = (ox0 * sw) as i64 - spec.padding.left as i64;
                        let y0 = (oy0 * sh) as i64 - spec.padding.top as i64;
                        let at = |c: usize, y: usize, x: usize| (c * vy + y) * vx + x;
                        let mut acc = vec![0.0f32; vc * vy * vx];
                        for ic in 0..cin_g {
                            let plane = (img * c_in + g * cin_g + ic) * (h * w) as usize;
                            let taps = |c: usize, k: usize| packed[((g * pad + n0 + c) * cin_g + ic) * kh * kw + k];
                            for r in 0..span_y {
                                let iy = y0 + r as i64;
                                let seg: Vec<f32> = (0..span_x as i64)
                                    .map(|j| {
                                        let ix = x0 + j;
                                        if (0..h).contains(&iy) && (0..w).contains(&ix) {
                                            input[plane + (iy * w + ix) as usize]
                                        } else {
                                            0.0
                                        }
                                    })
                                    .collect();
                                for y in 0..vy {
                                    let Some(d) = r.checked_sub(y * sh) else { continue };
                                    if d % dh != 0 || d / dh >= kh {
                                        continue;
                                    }
                                    let ky = d / dh;
                                    for c in 0..vc {
                                        for kx in 0..kw {
                                            let wv = taps(c, ky * kw + kx);
                                            for x in 0..vx {
                                                let a = &mut acc[at(c, y, x)];
                                                *a = seg[x * sw + kx * dw].mul_add(wv, *a);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        for c in 0..vc {
                            let n = n0 + c;
                            if n >= cout_g {
                                continue;
                            }
                            let oc = g * cout_g + n;
                            for y in 0..vy {
                                for x in 0..vx {
                                    if oy0 + y < oh && ox0 + x < ow {
                                        let b = bias.map_or(0.0, |b| b[oc]);
                                        out[((img * c_out + oc) * oh + oy0 + y) * ow + ox0 + x] = acc[at(c, y, x)] + b;
                                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Padding, Shape4};

    #[test]
    fn names_round_trip() {
        for cfg in strip_sweep() {
            assert_eq!(StripConfig::parse(&cfg.name()).unwrap(), cfg);
        }
        for bad in ["x1y4c1", "x0y1c1-w64", "x1y4c1-w100", "x2y4c8-w64", "y4c1-w64", "x4c1-w128"] {
            assert!(StripConfig::parse(bad).is_err(), "{bad}");
        }
    }

    /// The twin against the reference: depthwise with multipliers, strides, dilations,
    /// asymmetric padding, kernels 1 to 7, narrow groups, ragged strips and blocks.
    #[test]
    fn twin_matches_reference() {
        let dw = |c, m, k| Conv2dSpec::new(c, c * m, k).groups(c);
        let cases = [
            ("dw3", dw(5, 1, 3).padding(Padding::uniform(1)).with_bias(true), [2, 9, 11]),
            ("dw5_s2", dw(3, 1, 5).stride((2, 2)).padding(Padding::uniform(2)), [1, 13, 10]),
            ("dw3_m3_d2", dw(4, 3, 3).dilation((2, 2)).padding(Padding::new(2, 1, 0, 3)).with_bias(true), [1, 10, 9]),
            ("dw7_s2x1", dw(2, 2, 7).stride((2, 1)).padding(Padding::new(3, 3, 1, 2)), [2, 12, 15]),
            ("dw1", dw(6, 1, 1), [1, 5, 7]),
            ("grouped_4", Conv2dSpec::new(8, 12, 3).groups(2).padding(Padding::uniform(1)).with_bias(true), [1, 7, 6]),
            ("dw_1x5", dw(3, 1, 1).kernel_hw((1, 5)).padding(Padding::new(0, 2, 0, 2)), [1, 4, 9]),
        ];
        for (name, spec, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            for cfg in strip_sweep() {
                let packed = pack_weights(&spec, &vec![0.0; spec.weight_len()], &cfg).unwrap();
                assert_eq!(packed.len() as u64, packed_len_with_vectors(&spec, &cfg));
                crate::reference::check_twin(&format!("{name} {}", cfg.name()), &problem, |x, w, bias| {
                    let packed = pack_weights(&spec, w, &cfg).unwrap();
                    strip_twin(&problem, &cfg, x, &packed, bias)
                });
            }
        }
    }

    #[test]
    fn refusals_name_the_limit() {
        let k = DEPTHWISE.reference();
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let wide = Conv2dSpec::new(64, 64, 3).groups(2);
        let e = k.config().check_spec(&wide, &limits).unwrap_err().to_string();
        assert!(e.contains("32 input channels per group"), "{e}");
        let dilated = Conv2dSpec::new(4, 4, 9).groups(4).dilation((8, 8));
        let e = k.config().check_spec(&dilated, &limits).unwrap_err().to_string();
        assert!(e.contains("row segments of 65 values"), "{e}");
        let big = Conv2dSpec::new(4, 16, 7).groups(4);
        let e = DEPTHWISE.with(StripConfig { c: 4, ..StripConfig::REFERENCE }).config().check_spec(&big, &limits);
        assert!(e.unwrap_err().to_string().contains("196 taps"));
        let small = KernelLimits { invocations_per_workgroup: 64, ..limits };
        let e = k.check_limits(&small).unwrap_err().to_string();
        assert!(e.contains("128 invocations"), "{e}");
    }
}
