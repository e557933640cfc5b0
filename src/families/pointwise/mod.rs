//! The pointwise family (`pointwise`): f32 1×1 convolutions at stride 1, without padding or
//! groups, on NCHW tensors — a plain GEMM of each image's `[C_in, H·W]` plane stack, with no
//! gather. Built for the narrow ones (MobileNetV2's projections to 16–64 channels), which
//! have little arithmetic per byte: each invocation streams 4 positions of every input
//! channel once and keeps the sums of [`PointwiseConfig::c`] output channels in registers,
//! their weights (all input channels') in workgroup memory, read by every invocation at the
//! same address (`pointwise.wgsl`).
//!
//! Configs are named `c8-w64` (output channels per invocation, invocations per workgroup) or
//! `c8-k2-w64` (the workgroup's invocations in 2 slices of the input channels).

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::families::tiled::pass_workgroup_refusal;
use crate::kernel::{
    compose_defined, workgroups_u32, ConvParams, Family, Kernel, KernelConfig, Packed, Precision, Shaped, Target,
    ALL_TARGETS, GRID_BINDING,
};
use crate::spec::{AutoPad, Conv2dSpec, ConvProblem, Shape4};

const POINTWISE_WGSL: &str = include_str!("pointwise.wgsl");

/// Input channels per step of the kernel's unrolled loop (the packed weights pad the input
/// channels to whole steps).
pub(crate) const KC: u32 = 16;
/// Neighbouring positions per invocation (one vector of 4 where the plane allows).
pub(crate) const POSITIONS: u32 = 4;
/// The most output channels per invocation: their sums (4 positions each) live in registers.
/// On the H100 (Vulkan 580.159.04) blocks of 24 and 32 ran 2–30× slower than blocks of 8
/// on every 1×1 layer of ResNet-50 and MobileNetV2 at N = 32: their sums did not stay in
/// registers.
pub(crate) const MAX_CHANNELS: u32 = 16;

/// The family.
#[derive(Debug)]
pub(crate) struct Pointwise;

/// `pointwise`: f32.
pub(crate) static POINTWISE: Pointwise = Pointwise;

/// A pointwise config: what one invocation computes and how many share a workgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PointwiseConfig {
    /// Output channels per invocation (4, 8 or 16: their sums live in registers).
    pub c: u32,
    /// Slices of the input channels that the workgroup's invocations split between them (1,
    /// 2 or 4), each summing its share for the same positions, added in slice order at the
    /// end: more invocations per position for small maps.
    pub slices: u32,
    /// Invocations per workgroup (whole subgroups of 32 per slice).
    pub workgroup: u32,
}

impl PointwiseConfig {
    /// The family's reference config: 8 output channels, 64 invocations.
    pub const REFERENCE: PointwiseConfig = PointwiseConfig { c: 8, slices: 1, workgroup: 64 };

    /// A config of one slice.
    pub const fn new(c: u32, workgroup: u32) -> PointwiseConfig {
        PointwiseConfig { c, slices: 1, workgroup }
    }

    /// The config's name, e.g. `c8-w64`, `c8-k2-w64`.
    pub fn name(&self) -> String {
        match self.slices {
            1 => format!("c{}-w{}", self.c, self.workgroup),
            k => format!("c{}-k{k}-w{}", self.c, self.workgroup),
        }
    }

    /// Parses a name of [`PointwiseConfig::name`]'s form.
    pub fn parse(s: &str) -> Result<PointwiseConfig> {
        let bad = || {
            Error::ConfigParse(format!(
                "pointwise config {s:?}: expected c<output channels>[-k<slices>]-w<invocations>, e.g. c8-w64"
            ))
        };
        let (c, wg) = s.strip_prefix('c').and_then(|r| r.split_once("-w")).ok_or_else(bad)?;
        let num = |v: &str| v.parse::<u32>().map_err(|_| bad());
        let (c, slices) = match c.split_once("-k") {
            Some((c, k)) => (num(c)?, num(k)?),
            None => (num(c)?, 1),
        };
        let cfg = PointwiseConfig { c, slices, workgroup: num(wg)? };
        cfg.check_shape()?;
        Ok(cfg)
    }

    /// Device-independent checks.
    pub fn check_shape(&self) -> Result<()> {
        let refuse = |reason: String| Err(Error::KernelRefused { kernel: self.name(), reason });
        if self.c == 0 || !self.c.is_multiple_of(4) || self.c > MAX_CHANNELS {
            return refuse(format!("{} output channels per invocation: a multiple of 4 up to {MAX_CHANNELS}", self.c));
        }
        if ![1, 2, 4].contains(&self.slices) {
            return refuse(format!("{} slices of the input channels: 1, 2 or 4", self.slices));
        }
        if self.workgroup == 0 || !self.workgroup.is_multiple_of(32 * self.slices) {
            return refuse(format!(
                "{} invocations are not a whole number of 32-wide subgroups per slice ({} slices)",
                self.workgroup, self.slices
            ));
        }
        Ok(())
    }
}

/// The configs the benchmark and the tuner try, the reference first.
pub fn pointwise_sweep() -> Vec<PointwiseConfig> {
    let c = PointwiseConfig::new;
    let k = |c, slices, workgroup| PointwiseConfig { c, slices, workgroup };
    vec![
        PointwiseConfig::REFERENCE,
        c(8, 128),
        c(8, 32),
        c(16, 64),
        c(16, 128),
        c(4, 64),
        c(4, 128),
        k(8, 2, 64),
        k(8, 2, 128),
        k(8, 4, 128),
        k(16, 2, 128),
    ]
}

impl Family for Pointwise {
    fn name(&self) -> &'static str {
        "pointwise"
    }
    fn precision(&self) -> Precision {
        Precision::F32
    }
    fn unavailable(&self, _caps: &DeviceCaps) -> Option<String> {
        None
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(self.with(PointwiseConfig::parse(config)?))
    }
    fn reference(&'static self) -> Kernel {
        self.with(PointwiseConfig::REFERENCE)
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        pointwise_sweep().into_iter().map(|cfg| self.with(cfg)).collect()
    }
    fn targets(&self) -> &'static [Target] {
        ALL_TARGETS
    }
}

impl Pointwise {
    /// This family's kernel of a config.
    pub(crate) fn with(&'static self, cfg: PointwiseConfig) -> Kernel {
        Kernel::new(PointwiseKernel { cfg })
    }
}

/// Whether the family can run a spec (for any input): see [`PointwiseKernel::check_spec`].
pub(crate) fn runs(spec: &Conv2dSpec) -> bool {
    spec_refusal(spec).is_none()
}

/// Why the family cannot run a spec, if it cannot: a 1×1 kernel at stride 1, one group, and
/// no padding (explicit sizes of 0, or a rule, which resolves to 0 for such a kernel).
fn spec_refusal(spec: &Conv2dSpec) -> Option<String> {
    let pad = spec.padding;
    let padded = pad.auto == AutoPad::Explicit && (pad.top | pad.left | pad.bottom | pad.right) != 0;
    if spec.kernel != [1, 1] || spec.stride != [1, 1] || spec.groups != 1 || padded {
        return Some(format!(
            "the pointwise kernel runs 1x1 convolutions at stride 1 without padding or groups, not a {}x{} kernel at \
             stride {}x{} with {} group(s) and padding {}/{}/{}/{}",
            spec.kernel[0],
            spec.kernel[1],
            spec.stride[0],
            spec.stride[1],
            spec.groups,
            pad.top,
            pad.left,
            pad.bottom,
            pad.right
        ));
    }
    None
}

/// A kernel of the pointwise family.
#[derive(Debug)]
pub(crate) struct PointwiseKernel {
    cfg: PointwiseConfig,
}

impl PointwiseKernel {
    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: format!("pointwise:{}", self.cfg.name()), reason }
    }

    /// The kernel's WGSL for a spec: the config and the padded input channels as constants,
    /// vector loads and stores where the plane holds whole vectors of 4 positions (`vec4`).
    fn source(&self, spec: &Conv2dSpec, vec4: bool) -> Result<String> {
        let header = format!(
            "// generated from PointwiseConfig {} and the convolution's channels\nconst CB: u32 = {}u;\n\
             const WG: u32 = {}u;\nconst KS: u32 = {}u;\nconst KC: u32 = {KC}u;\nconst C_IN_PAD: u32 = {}u;\n",
            self.cfg.name(),
            self.cfg.c,
            self.cfg.workgroup,
            self.cfg.slices,
            c_in_pad(spec, &self.cfg)
        );
        let mut defines: Vec<&'static str> = Vec::new();
        if vec4 {
            defines.push("VEC4");
        }
        if self.cfg.slices > 1 {
            defines.push("K_SLICES");
        }
        compose_defined(
            "pointwise",
            &[("pointwise", POINTWISE_WGSL)],
            vec![("config", header)],
            Precision::F32,
            &defines,
        )
    }
}

impl KernelConfig for PointwiseKernel {
    fn family(&self) -> &'static dyn Family {
        &POINTWISE
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
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        if let Some(reason) = spec_refusal(spec) {
            return Err(self.refuse(reason));
        }
        let bytes = block_weight_bytes(spec, &self.cfg);
        if bytes > limits.workgroup_storage_bytes as u64 {
            return Err(self.refuse(format!(
                "the weights of {} input channels for {} output channels{} are {bytes} bytes of workgroup \
                 memory, more than the device's {} (max_compute_workgroup_storage_size)",
                spec.in_channels,
                self.cfg.c,
                if self.cfg.slices > 1 { " and the slices' partial sums" } else { "" },
                limits.workgroup_storage_bytes
            )));
        }
        Ok(())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        packed_len(spec, &self.cfg).saturating_mul(4)
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        let packed = pack_weights(spec, weight, &self.cfg)?;
        Packed::f32_weights(&packed)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[GRID_BINDING]
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let pad = problem.spec.padding;
        if (pad.top | pad.left | pad.bottom | pad.right) != 0 {
            return Err(self.refuse(format!(
                "the padding resolves to {}/{}/{}/{} for this input: the kernel reads no padding",
                pad.top, pad.left, pad.bottom, pad.right
            )));
        }
        let plane = problem.output.h as u64 * problem.output.w as u64;
        let vec4 = plane.is_multiple_of(POSITIONS as u64);
        Ok(Box::new(PointwiseShaped { cfg: self.cfg, vec4, source: self.source(&problem.spec, vec4)? }))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
        [7, 8]
            .into_iter()
            .map(|side| {
                let problem = Conv2dSpec::new(20, 12, 1).problem(Shape4::new(2, 20, side, side))?;
                self.shape(&problem, &limits)?.source()
            })
            .collect()
    }
    fn invocations(&self) -> u32 {
        self.cfg.workgroup
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        // The block's weights: as many as the spec's input channels.
        None
    }
}

/// The input channels padded to whole steps of [`KC`] in each of the config's slices.
fn c_in_pad(spec: &Conv2dSpec, cfg: &PointwiseConfig) -> u32 {
    spec.in_channels.next_multiple_of(KC * cfg.slices)
}

/// Workgroup memory: a block's weights, every input channel's (padded), `cfg.c` each, and
/// with slices the partial sums of all but the first (4 positions of `cfg.c` channels per
/// invocation).
fn block_weight_bytes(spec: &Conv2dSpec, cfg: &PointwiseConfig) -> u64 {
    let partial = (cfg.slices as u64 - 1) * (cfg.workgroup / cfg.slices) as u64 * cfg.c as u64 * 16;
    c_in_pad(spec, cfg) as u64 * cfg.c as u64 * 4 + partial
}

/// Blocks of `cfg.c` output channels.
fn c_blocks(spec: &Conv2dSpec, cfg: &PointwiseConfig) -> u32 {
    spec.out_channels.div_ceil(cfg.c)
}

/// Elements of [`pack_weights`]' output.
fn packed_len(spec: &Conv2dSpec, cfg: &PointwiseConfig) -> u64 {
    c_blocks(spec, cfg) as u64 * c_in_pad(spec, cfg) as u64 * cfg.c as u64
}

/// Weights as the kernel reads them: `[C_out / c][C_in padded to whole steps][c]`, each
/// block's weights of one input channel `c` neighbouring output channels; zeros past the
/// input and output channels.
pub(crate) fn pack_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &PointwiseConfig) -> Result<Vec<f32>> {
    let (c_in, c_out) = (spec.in_channels as usize, spec.out_channels as usize);
    let (cb, pad) = (cfg.c as usize, c_in_pad(spec, cfg) as usize);
    let mut packed = alloc::zeroed_vec::<f32>(packed_len(spec, cfg) as usize, "the packed pointwise weights")?;
    for oc in 0..c_out {
        let (block, within) = (oc / cb, oc % cb);
        for k in 0..c_in {
            packed[(block * pad + k) * cb + within] = weight[oc * c_in + k];
        }
    }
    Ok(packed)
}

/// The grid uniform of `pointwise.wgsl`, in its field order.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PointwiseGrid {
    m_blocks: u32,
    c_blocks: u32,
    _pad: u32,
    total: u32,
}

/// The kernel composed for a problem.
struct PointwiseShaped {
    cfg: PointwiseConfig,
    vec4: bool,
    source: String,
}

impl Shaped for PointwiseShaped {
    fn source(&self) -> Result<String> {
        Ok(self.source.clone())
    }
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
    fn grid(&self, p: &ConvParams) -> Result<(Vec<u8>, u64)> {
        if self.vec4 && !(p.in_offset.is_multiple_of(POSITIONS) && p.out_offset.is_multiple_of(POSITIONS)) {
            // Whole images of a plane of whole vectors start on whole vectors: only a window
            // bound at an offset that is not could do this.
            return Err(Error::InvalidOptions(format!(
                "the pointwise kernel reads and writes vectors of 4 positions, but this chunk starts at elements {} \
                 (input) and {} (output)",
                p.in_offset, p.out_offset
            )));
        }
        let lanes = (self.cfg.workgroup / self.cfg.slices) as u64;
        let m_blocks = (p.m_total as u64).div_ceil(POSITIONS as u64 * lanes);
        let c_blocks = p.c_out.div_ceil(self.cfg.c) as u64;
        let total = m_blocks * c_blocks;
        let g = PointwiseGrid {
            m_blocks: workgroups_u32(m_blocks)?,
            c_blocks: c_blocks as u32,
            _pad: 0,
            total: workgroups_u32(total)?,
        };
        Ok((bytemuck::bytes_of(&g).to_vec(), total))
    }
}

/// The CPU twin: `pointwise.wgsl`'s sums from the packed weights, in its order (each slice's
/// input channels in order, one f32 fused multiply-add each, the slices' sums added in slice
/// order, the bias after), for every position.
#[cfg(test)]
pub(crate) fn pointwise_twin(
    problem: &ConvProblem,
    cfg: &PointwiseConfig,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let spec = &problem.spec;
    let packed = pack_weights(spec, weight, cfg).unwrap();
    let (c_in, c_out, cb, pad) =
        (spec.in_channels as usize, spec.out_channels as usize, cfg.c as usize, c_in_pad(spec, cfg) as usize);
    let per_slice = pad / cfg.slices as usize;
    let plane = (problem.output.h * problem.output.w) as usize;
    let mut out = vec![0.0f32; problem.output.len() as usize];
    for img in 0..problem.output.n as usize {
        for oc in 0..c_out {
            for pos in 0..plane {
                let mut total = 0.0f32;
                for slice in 0..cfg.slices as usize {
                    let mut acc = 0.0f32;
                    for k in slice * per_slice..(slice + 1) * per_slice {
                        let x = if k < c_in { input[(img * c_in + k) * plane + pos] } else { 0.0 };
                        acc = x.mul_add(packed[((oc / cb) * pad + k) * cb + oc % cb], acc);
                    }
                    total = if slice == 0 { acc } else { total + acc };
                }
                out[(img * c_out + oc) * plane + pos] = total + bias.map_or(0.0, |b| b[oc]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Padding;

    /// The twin against the reference: channels that fill no step, fill one, and spill over
    /// one; output channels that fill no block.
    #[test]
    fn twin_matches_reference() {
        let cases = [
            ("narrow", Conv2dSpec::new(5, 3, 1).with_bias(true), PointwiseConfig::new(4, 32), [2, 3, 5]),
            ("step", Conv2dSpec::new(16, 24, 1), PointwiseConfig::new(16, 128), [1, 4, 4]),
            ("spill", Conv2dSpec::new(37, 9, 1).with_bias(true), PointwiseConfig::new(8, 64), [3, 2, 7]),
            (
                "slices",
                Conv2dSpec::new(37, 9, 1).with_bias(true),
                PointwiseConfig { c: 8, slices: 2, workgroup: 64 },
                [2, 3, 5],
            ),
            ("four_slices", Conv2dSpec::new(70, 5, 1), PointwiseConfig { c: 4, slices: 4, workgroup: 128 }, [1, 4, 4]),
        ];
        for (name, spec, cfg, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            crate::reference::check_twin(name, &problem, |x, w, b| pointwise_twin(&problem, &cfg, x, w, b));
        }
    }

    /// Names round-trip; malformed configs and specs other than unpadded ungrouped 1×1 ones at
    /// stride 1 are refused by name.
    #[test]
    fn names_and_refusals() {
        for cfg in pointwise_sweep() {
            assert_eq!(PointwiseConfig::parse(&cfg.name()).unwrap(), cfg);
        }
        for bad in
            ["c6-w128", "c24-w128", "c16-w100", "c16", "x16-w128", "c0-w32", "c8-k3-w96", "c8-k2-w32", "c8-k-w64"]
        {
            assert!(PointwiseConfig::parse(bad).is_err(), "{bad}");
        }
        let limits = KernelLimits::with_workgroup_bytes(16384);
        let k = POINTWISE.reference();
        for spec in [
            Conv2dSpec::new(8, 8, 3),
            Conv2dSpec::new(8, 8, 1).stride(2),
            Conv2dSpec::new(8, 8, 1).groups(2),
            Conv2dSpec::new(8, 8, 1).padding(Padding::uniform(1)),
        ] {
            let e = k.config().check_spec(&spec, &limits).unwrap_err().to_string();
            assert!(e.contains("pointwise") && e.contains("1x1 convolutions at stride 1"), "{e}");
        }
        assert!(k.config().check_spec(&Conv2dSpec::new(8, 8, 1).padding(Padding::same()), &limits).is_ok());
        // 512 input channels × 8 output channels × 4 bytes: 16 KiB fit, 520 (528 padded) do not.
        assert!(k.config().check_spec(&Conv2dSpec::new(512, 8, 1), &limits).is_ok());
        let e = k.config().check_spec(&Conv2dSpec::new(520, 8, 1), &limits).unwrap_err().to_string();
        assert!(
            e.contains("16896 bytes of workgroup memory") && e.contains("max_compute_workgroup_storage_size"),
            "{e}"
        );
        let small =
            KernelLimits { workgroup_storage_bytes: 16384, invocations_per_workgroup: 32, workgroup_size_x: 32 };
        let e = k.config().check_limits(&small).unwrap_err().to_string();
        assert!(e.contains("pointwise:c8-w64") && e.contains("max_compute_invocations_per_workgroup"), "{e}");
    }
}
