//! What a kernel family offers the rest of the crate: the [`Family`] and [`KernelConfig`]
//! traits (the only way the crate talks to a family), the [`Kernel`] handle that names a
//! family and its config, the per-dispatch parameters every kernel reads, the precision
//! preludes, and the pipeline cache.
//!
//! A family lives in its own folder under `src/families/` and is registered by one line in
//! `families::FAMILIES`; nothing outside that folder matches on which family a kernel is.

use crate::caps::{DeviceCaps, KernelLimits};
use crate::error::{Error, Result};
use crate::scope::ErrorScope;
use crate::shader::Modules;
use crate::spec::{Conv2dSpec, ConvProblem};
use bytemuck::{Pod, Zeroable};
use lru::LruCache;
use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

/// The accuracy a convolution is computed at: an accuracy contract, which the chosen kernel
/// keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Precision {
    /// f32-accurate (relative L2 error ~1e-7 against f64 for direct sums, up to ~7e-6 for
    /// Winograd's 6×6 tiles, bound 1e-5), with f32's semantics
    /// of special values: f32 FMAs, or on devices whose declared rates favour their matrix
    /// units (README, "Which kernel runs") the f16x3 technique with each batch chunk's input
    /// scaled by a power of two into f16's range (`coop-nhwc-f32`; finite weights only).
    /// There one scale serves a whole chunk of the batch: an image whose values are far below
    /// the largest of its chunk (about 10^-8 of it and less) keeps less than f32's relative
    /// precision, which the relative error over the whole output does not show.
    #[default]
    F32,
    /// Operands rounded to f16 (weights at upload, inputs inside the kernel), f32
    /// accumulation; the tensors in memory are as [`crate::Storage`] says (f32 by default).
    /// Where a SIMT kernel holds inputs in f32, a driver may fold their rounding away
    /// (NVIDIA's Vulkan compiler does), which only brings the result closer to f32's. On
    /// cooperative-matrix devices this runs on the matrix units. Relative L2 error ~3e-4 on
    /// normal data (bound: 1e-3, tested). Values beyond f16's range
    /// (|x| > 65504) never become infinities: weights are refused at upload with
    /// [`crate::Error::F16Range`]; inputs are clamped in the kernel and flagged, `forward`
    /// then returns `F16Range`, and callers of `encode`/`plan` must check
    /// [`crate::Conv2d::take_range_flag`] before using a result. Where the stem kernel runs
    /// (image inputs on NVIDIA's cooperative matrices), a NaN input may also make NaN the
    /// outputs up to one stride beyond its receptive field.
    F16Accum32,
    /// f32-accurate products from the f16 matrix units (cooperative-matrix devices only):
    /// each operand is split into two f16, `x ≈ hi + lo/2048`, keeping 22 of f32's 24
    /// significand bits, and each step sums the three products `hi·hi + (hi·lo + lo·hi)/2048`
    /// in f32 (CUTLASS's 3×TF32 technique with f16 halves). Relative L2 error ~1.3e-7
    /// against ~3.4e-7 for f32 FMAs (bound: 1e-6, tested); three times the matrix work of
    /// [`Precision::F16Accum32`]. Weights are scaled by a power of two at upload, so their
    /// magnitude does not matter. Inputs keep f32's relative precision down to 2^-14 in
    /// magnitude; smaller ones lose it gradually (each keeps an absolute error of at most
    /// about 2^-36). Inputs beyond f16's range are clamped and flagged as in
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

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16Accum32),
            "f16x3" => Ok(Precision::F16x3),
            _ => Err(Error::ConfigParse(format!("unknown precision {s:?}: expected f32, f16 or f16x3"))),
        }
    }
}

/// The shading languages a kernel's WGSL is translated to by the naga check.
#[cfg_attr(not(feature = "naga-check"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Vulkan.
    SpirV,
    /// Metal.
    Msl,
    /// DX12.
    Hlsl,
    /// OpenGL compute.
    Glsl,
}

impl Target {
    /// The language's name.
    #[cfg_attr(not(feature = "naga-check"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::SpirV => "SPIR-V",
            Target::Msl => "MSL",
            Target::Hlsl => "HLSL",
            Target::Glsl => "GLSL",
        }
    }
}

/// All four: what an f32 kernel must translate to.
#[cfg_attr(not(feature = "naga-check"), allow(dead_code))]
pub(crate) const ALL_TARGETS: &[Target] = &[Target::SpirV, Target::Msl, Target::Hlsl, Target::Glsl];

/// The languages of the cooperative-matrix families: SPIR-V alone. Their fragments are
/// 16×16×16; naga's MSL backend writes cooperative matrices as Metal's simdgroup matrices,
/// which are 8×8 (wgpu's Metal adapters offer only 8×8×8), and its HLSL and GLSL backends
/// have none. Where an adapter lacks the 16×16×16 configuration the caps refuse these
/// families by name (`coop_f16_supported`).
pub(crate) const COOPERATIVE_TARGETS: &[Target] = &[Target::SpirV];

/// The operands of the SIMT families that come in two variants (`tiled` / `tiled-f16`,
/// `direct` / `direct-f16`): f32, or rounded to f16 by the precision module (which needs
/// `SHADER_F16`, and which naga's GLSL backend cannot express).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SimtOperands {
    /// Rounded to f16.
    pub f16: bool,
}

impl SimtOperands {
    /// The variant's family name.
    pub fn name(self, f32_name: &'static str, f16_name: &'static str) -> &'static str {
        if self.f16 {
            f16_name
        } else {
            f32_name
        }
    }
    /// The variant's precision.
    pub fn precision(self) -> Precision {
        if self.f16 {
            Precision::F16Accum32
        } else {
            Precision::F32
        }
    }
    /// Why the device cannot run the variant, if it cannot.
    pub fn unavailable(self, caps: &DeviceCaps) -> Option<String> {
        self.f16.then(|| caps.shader_f16_missing()).flatten()
    }
    /// The languages the variant translates to.
    #[cfg_attr(not(feature = "naga-check"), allow(dead_code))]
    pub fn targets(self) -> &'static [Target] {
        if self.f16 {
            &[Target::SpirV, Target::Msl, Target::Hlsl]
        } else {
            ALL_TARGETS
        }
    }
}

/// A kernel family: one kind of shader with its own config vocabulary (a folder under
/// `src/families/`).
pub(crate) trait Family: Send + Sync + 'static {
    /// The first word of its kernels' names: `tiled`, `coop-f16`, …
    fn name(&self) -> &'static str;
    /// The accuracy its kernels compute at.
    fn precision(&self) -> Precision;
    /// Why the device cannot run this family at all (a missing feature), if it cannot.
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String>;
    /// A kernel of this family from its config's name (the part after `family:`); syntax
    /// only: [`KernelConfig::check_limits`] and [`KernelConfig::check_spec`] say whether it
    /// can run.
    fn parse(&'static self, config: &str) -> Result<Kernel>;
    /// The family's reference kernel, the one selection starts from.
    fn reference(&'static self) -> Kernel;
    /// The family's declared sweep (the benchmark's candidates), its reference first.
    fn sweep(&'static self) -> Vec<Kernel>;
    /// The languages its WGSL must translate to.
    #[cfg_attr(not(feature = "naga-check"), allow(dead_code))]
    fn targets(&self) -> &'static [Target];
    /// Whether the benchmark's default sweep of its precision, and autotune, include it (the
    /// direct kernels, oracles and fallbacks, and `winograd-f6`, unmeasured on GPUs, are
    /// timed on request only).
    fn benchmarked(&self) -> bool {
        true
    }
    /// Whether its kernels read a non-zero padding mode's border (`PaddingMode::Reflect` and
    /// the others) from the input: the direct kernels and those gathering through
    /// `tiled/gather.wgsl` do; the others' loaders know only zeros.
    fn padding_modes(&self) -> bool {
        false
    }
    /// Whether it takes non-finite weights: the f32 Winograd families' transforms would spread
    /// them, and the f32 matrix kernel's split would lose their signs; those refuse them at
    /// packing, and autotune does not time them for such weights.
    // (Autotune, the one caller, is the `tune` feature's.)
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    fn takes_non_finite_weights(&self) -> bool {
        true
    }
}

/// Weights (and any other per-op data) as a kernel reads them.
pub(crate) struct Packed {
    /// Binding 2.
    pub weight: Vec<u8>,
    /// More read-only buffers bound beside the standard ones (binding, label, contents).
    pub extra: Vec<(u32, &'static str, Vec<u8>)>,
    /// `Params.out_scale`: what the sums are multiplied by before the bias.
    pub out_scale: f32,
    /// The bias buffer (binding 3) where the family lays it out itself; `None`: the bias as
    /// given (`C_out` f32 values, zeros when absent).
    pub bias: Option<Vec<u8>>,
}

impl Packed {
    /// Weights alone: no other buffer, the sums unscaled, the bias as given.
    pub fn weights(weight: Vec<u8>) -> Packed {
        Packed { weight, extra: Vec::new(), out_scale: 1.0, bias: None }
    }

    /// [`Packed::weights`] of f32 values.
    pub fn f32_weights(weight: &[f32]) -> Result<Packed> {
        Ok(Packed::weights(crate::alloc::bytes_of(weight, "the packed weights")?))
    }
}

/// A kernel composed for one input size.
pub(crate) trait Shaped: Send + Sync {
    /// The WGSL source (also the pipeline cache's key: the same source is one pipeline).
    fn source(&self) -> Result<String>;
    /// Read-only buffers that depend on the input size (binding, label, contents).
    fn tables(&self) -> Result<Vec<(u32, &'static str, Vec<u8>)>>;
    /// The family's `Grid` uniform for one chunk (empty where the family has none) and the
    /// chunk's workgroup count, from the chunk's parameters.
    fn grid(&self, params: &ConvParams) -> Result<(Vec<u8>, u64)>;
    /// A pass that runs before the kernel, in the same compute pass, rewriting the input
    /// into a scratch buffer that the kernel then reads at binding 1 in its place (e.g.
    /// channels-last f16 with the padding written out). `None` for the kernels that read
    /// the input itself.
    fn staging(&self) -> Option<&Staging> {
        None
    }
    /// A pass that runs after the kernel, in the same compute pass, reading what the kernel
    /// wrote into a scratch buffer (at binding 1; the kernel writes it at binding 5 in place
    /// of the output) and writing the output (e.g. the output transform of a Winograd
    /// kernel). `None` for the kernels that write the output themselves.
    fn finishing(&self) -> Option<&Finishing> {
        None
    }
    /// The parameters the kernel itself reads, from those of the convolution's chunk (the
    /// staging and finishing passes read the convolution's): the same for every family but
    /// those that run a derived problem between their passes.
    fn kernel_params(&self, params: &ConvParams) -> ConvParams {
        *params
    }
}

/// A kernel's finishing pass (see [`Shaped::finishing`]): its WGSL reads params 0, the
/// kernel's scratch output 1 and the bias 3, writes the output at binding 5, and the range
/// flag 6 under the f16 precisions; one invocation per `invocations_per_image` unit of each
/// image of a chunk.
pub(crate) struct Finishing {
    /// The finishing pass's WGSL.
    pub source: String,
    /// Scratch bytes per image (the scratch holds one chunk).
    pub bytes_per_image: u64,
    /// Invocations per image.
    pub invocations_per_image: u64,
    /// Invocations per workgroup (the source's `@workgroup_size`).
    pub workgroup_size: u32,
    /// Whether it reads the chunk's input ([`FINISHING_INPUT_BINDING`]) and the weights as
    /// given ([`FINISHING_WEIGHT_BINDING`]), to compute outputs directly where what it read
    /// is not finite (a Winograd transform mixes an infinite or NaN value into outputs that a
    /// direct convolution keeps finite, or turns infinities into NaN).
    pub direct_fallback: bool,
}

/// A kernel's staging pass (see [`Shaped::staging`]): its WGSL reads params 0 and the
/// input 1, writes the scratch buffer at binding 5, and the range flag 6 under the f16
/// precisions; one invocation per `invocations_per_image` unit of each image of a chunk.
#[derive(Clone)]
pub(crate) struct Staging {
    /// The staging pass's WGSL.
    pub source: String,
    /// Scratch bytes per image (the scratch holds one chunk).
    pub bytes_per_image: u64,
    /// Invocations per image.
    pub invocations_per_image: u64,
    /// Invocations per workgroup (the source's `@workgroup_size`).
    pub workgroup_size: u32,
    /// Whether an input-maximum pass runs first (`src/wgsl/input_max.wgsl`), whose result the
    /// staging pass and the kernel read at [`INPUT_MAX_BINDING`] to scale the input into f16's
    /// range and undo it (the F32 kernel on the matrix units).
    pub scaled_input: bool,
}

/// The chunk's input where a finishing pass reads it (its direct fallback).
pub(crate) const FINISHING_INPUT_BINDING: u32 = 12;
/// The weights as given (`[C_out, C_in/groups, KH, KW]`), a per-op buffer of the family's
/// ([`Packed::extra`]) that a finishing pass's direct fallback reads.
pub(crate) const FINISHING_WEIGHT_BINDING: u32 = 13;

/// One family's config: what makes a [`Kernel`] run.
pub(crate) trait KernelConfig: Send + Sync + std::fmt::Debug + 'static {
    /// The family it belongs to.
    fn family(&self) -> &'static dyn Family;
    /// The config's name (empty for a family without configs); parses back with
    /// [`Family::parse`].
    fn name(&self) -> String;
    /// Device-independent checks: the config forms this family's tiles.
    fn check_shape(&self) -> Result<()>;
    /// [`KernelConfig::check_shape`] and the device's limits (workgroup size and memory).
    fn check_limits(&self, limits: &KernelLimits) -> Result<()>;
    /// Why this kernel cannot run a convolution on a device with these limits, for any
    /// input size (input-size-dependent refusals come from [`KernelConfig::shape`]).
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()>;
    /// Bytes of the packed weights (checked against the device before packing).
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64;
    /// Packs weights (`[C_out, C_in/groups, KH, KW]`) and bias (zeros when absent).
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed>;
    /// Read-only bindings besides params 0, input 1, weight 2, bias 3 and output 5.
    fn extra_bindings(&self) -> &'static [u32];
    /// The kernel composed for a problem (the batch does not matter).
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>>;
    /// The kernel composed for tensors in `form` (channels last, packed f16) where the family
    /// reads and writes them in that form itself; `None` where it does not (the op then asks
    /// for a nearer form, down to [`KernelConfig::shape`]'s NCHW f32, and runs layout passes
    /// around the kernel). Only asked for forms other than NCHW f32.
    fn shape_native(
        &self,
        _problem: &ConvProblem,
        _limits: &KernelLimits,
        _form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        None
    }
    /// Sources composed for representative problems: what the naga check validates.
    fn representative_sources(&self) -> Result<Vec<String>>;
    /// Invocations per workgroup.
    fn invocations(&self) -> u32;
    /// Workgroup memory, where it follows from the config alone.
    fn workgroup_bytes(&self) -> Option<u64>;
    /// The tile of the families that share the tile vocabulary (`TileConfig`), which the
    /// tuner varies; `None` for the others.
    fn tile(&self) -> Option<crate::tile::TileConfig> {
        None
    }
    /// The same family with another tile (the tuner's neighbours).
    fn with_tile(&self, _tile: crate::tile::TileConfig) -> Option<Kernel> {
        None
    }
    /// How many f16 halves each operand is staged in, for the cooperative kernels' register
    /// estimate (1 or 2); `None` for SIMT kernels.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    fn operand_halves(&self) -> Option<u32> {
        None
    }
}

/// The form of the tensors a kernel reads and writes (see [`KernelConfig::shape_native`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TensorForm {
    /// Channels last (`Layout::Nhwc`), else NCHW.
    pub channels_last: bool,
    /// f16 elements (`Storage::F16`), read and written as WGSL `f16` (the device has
    /// `SHADER_F16`), else f32.
    pub f16: bool,
}

impl TensorForm {
    /// What [`KernelConfig::shape`]'s kernels read and write: NCHW, f32.
    pub const NCHW_F32: TensorForm = TensorForm { channels_last: false, f16: false };
}

/// A kernel: a family and its config. Its name is `family:config`, e.g.
/// `tiled:m64n96k16-t4x12-w4-s1`, `coop-stem-f16:m32n96-f2-h6`, or `direct`.
///
/// ```
/// let k: wgconv::Kernel = "tiled:m32n64k32-t4x4-w4-s2".parse()?;
/// assert_eq!(k.family(), "tiled");
/// assert_eq!(k.to_string(), "tiled:m32n64k32-t4x4-w4-s2");
/// # Ok::<(), wgconv::Error>(())
/// ```
#[derive(Clone)]
pub struct Kernel {
    config: Arc<dyn KernelConfig>,
    name: Arc<str>,
}

impl Kernel {
    /// Wraps a family's config.
    pub(crate) fn new(config: impl KernelConfig) -> Kernel {
        let c = config.name();
        let family = config.family().name();
        let name = if c.is_empty() { family.to_string() } else { format!("{family}:{c}") };
        Kernel { config: Arc::new(config), name: name.into() }
    }
    /// The family's name: `tiled`, `tiled-f16`, `winograd`, `splitk`, `coop-f16`, `coop-f16x3`,
    /// `coop-nhwc-f16`, `coop-nhwc-f16x3`, `coop-nhwc-f32`, `coop-band-f16`, `coop-stem-f16`,
    /// `depthwise`, `depthwise-f16`, `direct` or `direct-f16`.
    pub fn family(&self) -> &'static str {
        self.config.family().name()
    }
    /// The config's name (after `family:`), empty for the direct kernel.
    pub fn config_name(&self) -> String {
        self.config.name()
    }
    /// The accuracy the kernel computes at.
    pub fn precision(&self) -> Precision {
        self.config.family().precision()
    }
    /// The tile config of the tile-vocabulary families (`tiled`, `tiled-f16`, `coop-f16`,
    /// `coop-f16x3`), `None` for the others.
    pub fn tile(&self) -> Option<crate::tile::TileConfig> {
        self.config.tile()
    }
    /// The same family with another tile, where the family has the tile vocabulary.
    pub fn with_tile(&self, tile: crate::tile::TileConfig) -> Option<Kernel> {
        self.config.with_tile(tile)
    }
    /// Device-independent checks of the config.
    pub fn check_shape(&self) -> Result<()> {
        self.config.check_shape()
    }
    /// Checks the config against a device's limits.
    pub fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.config.check_limits(limits).map_err(|e| self.named(e))
    }
    /// Why this kernel cannot run on a device (features, limits) or a convolution, if it
    /// cannot: every refusal names the family and the limit. An invalid spec is refused as
    /// such first ([`Conv2dSpec::validate`]): the families' geometry assumes a valid one.
    pub fn check(&self, spec: &Conv2dSpec, caps: &DeviceCaps) -> Result<()> {
        spec.validate()?;
        if let Some(why) = self.config.family().unavailable(caps) {
            return Err(Error::unsupported(format!("{self}: {why}")));
        }
        if spec.padding_mode != crate::spec::PaddingMode::Zeros && !self.config.family().padding_modes() {
            return Err(Error::KernelRefused {
                kernel: self.to_string(),
                reason: format!(
                    "padding_mode {} is implemented by the direct kernels and those that gather their input \
                     through the tiled kernel's gather, not by {}",
                    spec.padding_mode,
                    self.family()
                ),
            });
        }
        let limits = caps.kernel_limits();
        self.config
            .check_limits(&limits)
            .and_then(|()| self.config.check_spec(spec, &limits))
            .and_then(|()| self.check_bindings(spec, &caps.limits))
            .map_err(|e| self.named(e))
    }
    /// The binding limits, which WebGPU's defaults make tight (8 storage buffers per stage,
    /// 128 MiB per binding): the kernel's storage buffers, and its packed weights, which
    /// are bound whole. (Inputs and outputs are split into batch chunks that fit instead.)
    fn check_bindings(&self, spec: &Conv2dSpec, limits: &wgpu::Limits) -> Result<()> {
        let refuse = |reason: String| Error::KernelRefused { kernel: self.to_string(), reason };
        let storage = bindings(self).iter().filter(|&&b| b != 0 && b != GRID_BINDING).count() as u32;
        if storage > limits.max_storage_buffers_per_shader_stage {
            return Err(refuse(format!(
                "{storage} storage buffers in the compute stage exceed the device's {} \
                 (max_storage_buffers_per_shader_stage)",
                limits.max_storage_buffers_per_shader_stage
            )));
        }
        // The families' size arithmetic is sound on validated specs only (an invalid spec
        // is refused by `Conv2d::new` before any kernel is asked).
        if spec.validate().is_err() {
            return Ok(());
        }
        let (packed, cap) = (self.config.packed_bytes(spec), limits.max_storage_buffer_binding_size);
        if packed > cap {
            return Err(refuse(format!(
                "{packed} B of packed weights, bound whole, exceed the device's {cap} B \
                 (max_storage_buffer_binding_size)"
            )));
        }
        if packed > limits.max_buffer_size {
            return Err(refuse(format!(
                "{packed} B of packed weights exceed the device's {} B (max_buffer_size)",
                limits.max_buffer_size
            )));
        }
        Ok(())
    }
    /// A config refusal named by the whole kernel (`family:config`), so that it says which
    /// family refused.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::KernelRefused { reason, .. } => Error::KernelRefused { kernel: self.to_string(), reason },
            e => e,
        }
    }
    /// Invocations per workgroup.
    pub fn invocations(&self) -> u32 {
        self.config.invocations()
    }
    /// Workgroup memory, where it follows from the config alone.
    pub fn workgroup_bytes(&self) -> Option<u64> {
        self.config.workgroup_bytes()
    }
    /// f16 halves per staged operand of the cooperative kernels (1 or 2), `None` for SIMT ones.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    pub(crate) fn operand_halves(&self) -> Option<u32> {
        self.config.operand_halves()
    }
    pub(crate) fn config(&self) -> &dyn KernelConfig {
        &*self.config
    }
    pub(crate) fn family_impl(&self) -> &'static dyn Family {
        self.config.family()
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({})", self.name)
    }
}

impl PartialEq for Kernel {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for Kernel {}
impl std::hash::Hash for Kernel {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

#[cfg(feature = "tune")]
impl serde::Serialize for Kernel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

/// The shared WGSL modules every family may `#import`.
const PARAMS_WGSL: &str = include_str!("wgsl/params.wgsl");
const PRECISION_WGSL: &str = include_str!("wgsl/precision.wgsl");
const ROW_GRID_WGSL: &str = include_str!("wgsl/row_grid.wgsl");
const LAYOUT_WGSL: &str = include_str!("wgsl/layout.wgsl");
const F16_BITS_WGSL: &str = include_str!("wgsl/f16_bits.wgsl");
const OUTPUT_TENSOR_WGSL: &str = include_str!("wgsl/output_tensor.wgsl");
const BLOCK_WGSL: &str = include_str!("wgsl/block.wgsl");
const INPUT_SCALE_WGSL: &str = include_str!("wgsl/input_scale.wgsl");
const INPUT_MAX_WGSL: &str = include_str!("wgsl/input_max.wgsl");

/// Invocations per workgroup of the layout passes (`src/wgsl/layout.wgsl`).
pub(crate) const LAYOUT_PASS_WG: u32 = 256;
/// Pixels and channels per tile of a transposing layout pass (`TILE` in `layout.wgsl`).
const LAYOUT_TILE: u64 = 32;
/// The fewest channels for which a transposing layout pass goes by tiles: with fewer (image
/// stems) most of a tile's lanes would idle, and the element-wise gather reads runs of the
/// NHWC side that are short anyway (on the H100, MobileNetV2's 3-channel stem at N = 32 ran
/// its tiled passes 1.4× slower than element-wise ones, while its layers of 16–960 channels
/// ran 1.2–1.7× faster).
const LAYOUT_TILED_MIN_CHANNELS: u32 = 8;

/// Whether a layout pass over a tensor of `c` channels per pixel goes by tiles: transposing,
/// with at least [`LAYOUT_TILED_MIN_CHANNELS`] channels, where the device allows it
/// (`allowed`: `Gpu::tiled_layout_passes`, GPUs). On a CPU adapter workgroup memory is the
/// CPU's memory and the barrier a rendezvous of threads: on lavapipe the tiled passes made
/// MobileNetV2's pointwise layers at batch 1 with NHWC tensors 7–25 % slower than the
/// element-wise ones.
pub(crate) fn layout_pass_tiled(transpose: bool, c: u32, allowed: bool) -> bool {
    transpose && allowed && c >= LAYOUT_TILED_MIN_CHANNELS
}

/// Workgroups of a transposing layout pass over `batch` images of `c × h × w`: one per tile
/// of [`LAYOUT_TILE`] pixels × [`LAYOUT_TILE`] channels of an image.
pub(crate) fn layout_transpose_workgroups(batch: u32, [c, h, w]: [u32; 3]) -> u64 {
    batch as u64 * (h as u64 * w as u64).div_ceil(LAYOUT_TILE) * (c as u64).div_ceil(LAYOUT_TILE)
}

/// A layout pass (`src/wgsl/layout.wgsl`) for a tensor of `c × h × w` per image: the
/// caller's input into the kernel's f32 scratch (`into_kernel`), or the kernel's f32 output
/// scratch into the caller's output; `transpose`: the caller's tensor is NHWC and the
/// kernel's NCHW, by tiles where `tiled` ([`layout_pass_tiled`]); `f16`: the caller's tensor
/// is packed f16.
pub(crate) fn layout_pass_source(
    into_kernel: bool,
    transpose: bool,
    tiled: bool,
    f16: bool,
    [c, h, w]: [u32; 3],
) -> Result<String> {
    let mut modules = Modules::new(&[("layout", LAYOUT_WGSL)]);
    modules.insert("params", PARAMS_WGSL);
    modules.insert("f16_bits", F16_BITS_WGSL);
    modules.insert("layout_config", format!("const C: u32 = {c}u;\nconst H: u32 = {h}u;\nconst W: u32 = {w}u;\n"));
    let defines: BTreeSet<&str> =
        [(into_kernel, "INTO_KERNEL"), (transpose, "TRANSPOSE"), (tiled, "TILED"), (f16, "F16")]
            .into_iter()
            .filter_map(|(on, d)| on.then_some(d))
            .collect();
    crate::shader::preprocess("layout", &modules, &defines)
        .map_err(|e| Error::Wgpu { stage: "shader composition", message: e })
}

/// Invocations per workgroup of the input-maximum pass (`src/wgsl/input_max.wgsl`).
pub(crate) const INPUT_MAX_WG: u32 = 256;
/// Input elements each invocation of the input-maximum pass reads (at most; a grid-stride
/// loop): enough that one atomic per workgroup is rare next to the loads.
pub(crate) const INPUT_MAX_PER_INVOCATION: u64 = 16;
/// The binding of the chunk's input maximum (the bits of the largest finite magnitude) where
/// the scaled-input staging pass and kernel read it (read-only).
pub(crate) const INPUT_MAX_BINDING: u32 = 8;
/// The same word where the input-maximum pass writes it (read-write): a binding number of its
/// own, since a pipeline's binding types follow from the numbers ([`bindings`]).
pub(crate) const INPUT_MAX_WRITE_BINDING: u32 = 9;

/// The input-maximum pass's WGSL (`src/wgsl/input_max.wgsl`), over an f32 input or
/// (`f16_tensors`) the caller's f16 one.
pub(crate) fn input_max_pass_source(f16_tensors: bool) -> Result<String> {
    let config = vec![("input_max_config", format!("const MAX_WG: u32 = {INPUT_MAX_WG}u;\n"))];
    let defines: &[&'static str] = if f16_tensors { &[F16_TENSORS] } else { &[] };
    compose_operands("input_max", &[("input_max", INPUT_MAX_WGSL)], config, Operands::F32, false, defines)
}

/// Workgroups of the input-maximum pass over a chunk of `elements` input values.
pub(crate) fn input_max_workgroups(elements: u64) -> u64 {
    elements.div_ceil(INPUT_MAX_WG as u64 * INPUT_MAX_PER_INVOCATION).max(1)
}

/// A family's WGSL: its own modules, the shared ones, a generated `config` module of
/// `const`s (WGSL `override`s cannot size the function-scope arrays the kernels need), and
/// the precision's `#define`s ([`Operands::of`]), with the `enable`s it needs.
pub(crate) fn compose(
    entry: &str,
    own: &[(&'static str, &'static str)],
    generated: Vec<(&'static str, String)>,
    precision: Precision,
    cooperative: bool,
) -> Result<String> {
    compose_operands(entry, own, generated, Operands::of(precision), cooperative, &[])
}

/// [`compose`] with `#define`s of the kernel's own besides the precision's (variants a
/// family picks per problem).
pub(crate) fn compose_defined(
    entry: &str,
    own: &[(&'static str, &'static str)],
    generated: Vec<(&'static str, String)>,
    precision: Precision,
    defines: &[&'static str],
) -> Result<String> {
    compose_operands(entry, own, generated, Operands::of(precision), false, defines)
}

/// The `#define` of a kernel that reads and writes f16 tensors itself (`array<f16>` at
/// bindings 1 and 5; [`TensorForm::f16`]).
pub(crate) const F16_TENSORS: &str = "F16_TENSORS";

/// How a kernel's operands enter its products: the `#define`s its WGSL is composed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operands {
    /// f32 (no define).
    F32,
    /// Rounded to f16, clamped and flagged (`F16`, `RANGE_FLAG`).
    F16,
    /// Split into two f16, clamped and flagged (`F16X3`, `RANGE_FLAG`).
    F16x3,
    /// Split into two f16 after the staging pass scaled the input into f16's range by a
    /// power of two (`F16X3`, `SCALED_INPUT`): [`Precision::F32`] on the matrix units.
    F16x3Scaled,
}

impl Operands {
    /// The operands of a precision's kernels (the f16x3 kernels clamp).
    pub(crate) fn of(precision: Precision) -> Operands {
        match precision {
            Precision::F32 => Operands::F32,
            Precision::F16Accum32 => Operands::F16,
            Precision::F16x3 => Operands::F16x3,
        }
    }
    fn defines(self) -> &'static [&'static str] {
        match self {
            Operands::F32 => &[],
            Operands::F16 => &["F16", "RANGE_FLAG"],
            Operands::F16x3 => &["F16X3", "RANGE_FLAG"],
            Operands::F16x3Scaled => &["F16X3", "SCALED_INPUT"],
        }
    }
}

/// [`compose`] with the operands given, and `#define`s of the kernel's own.
pub(crate) fn compose_operands(
    entry: &str,
    own: &[(&'static str, &'static str)],
    generated: Vec<(&'static str, String)>,
    operands: Operands,
    cooperative: bool,
    defines: &[&'static str],
) -> Result<String> {
    let mut modules = Modules::new(own);
    modules.insert("params", PARAMS_WGSL);
    modules.insert("precision", PRECISION_WGSL);
    modules.insert("row_grid", ROW_GRID_WGSL);
    modules.insert("block", BLOCK_WGSL);
    modules.insert("input_scale", INPUT_SCALE_WGSL);
    modules.insert("f16_bits", F16_BITS_WGSL);
    modules.insert("output_tensor", OUTPUT_TENSOR_WGSL);
    for (name, text) in generated {
        modules.insert(name, text);
    }
    let defines: BTreeSet<&str> = operands.defines().iter().chain(defines).copied().collect();
    let body = crate::shader::preprocess(entry, &modules, &defines)
        .map_err(|e| Error::Wgpu { stage: "shader composition", message: e })?;
    let mut enables = String::new();
    if operands != Operands::F32 || defines.contains(F16_TENSORS) {
        enables.push_str("enable f16;\n");
    }
    if cooperative {
        enables.push_str("enable wgpu_cooperative_matrix;\n");
    }
    Ok(format!("{enables}{body}"))
}

/// The per-dispatch parameters every kernel reads: the convolution and the chunk one
/// dispatch covers, in the field order of `src/wgsl/params.wgsl`.
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
    pub in_offset: u32,
    pub out_offset: u32,
    pub flags: u32,
    /// Multiplies the sums before the bias: 1, or the inverse of the f16x3 kernel's weight
    /// scale (a power of two).
    pub out_scale: f32,
}

/// The grid of the kernels that walk output rows (row-band, stem), in the field order of
/// `src/wgsl/row_grid.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct RowGrid {
    pub n_pad: u32,
    pub n_tiles: u32,
    pub total_tiles: u32,
    pub row_tiles: u32,
    pub x_tiles: u32,
    pub x_clamp: u32,
    pub _pad: [u32; 2],
}

/// The binding of a family's `Grid` uniform.
pub(crate) const GRID_BINDING: u32 = 7;

/// `Params.flags` bit: apply ReLU after the bias.
pub(crate) const FLAG_RELU: u32 = 1;
/// `Params.flags` bits 1-2: the padding mode (`PaddingMode::code`; params.wgsl).
pub(crate) const PAD_MODE_SHIFT: u32 = 1;

/// Checks a workgroup count against u32 (one chunk's grid before folding).
pub(crate) fn workgroups_u32(total: u64) -> Result<u32> {
    u32::try_from(total).map_err(|_| Error::TooLarge(format!("{total} workgroups in one chunk")))
}

/// A compiled kernel: its pipeline and bind group layout.
pub(crate) struct Pipeline {
    /// The compute pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Its bind group layout.
    pub layout: wgpu::BindGroupLayout,
}

/// A pipeline's identity: its WGSL source and its bindings.
type PipelineKey = (String, Vec<u32>);

/// Pipelines kept per device (least recently used first out): a compiled pipeline holds
/// a few MB of driver memory (≈ 3.4 MB per config on lavapipe), so a process that tries
/// many configs (the tuner, a service seeing many shapes) must not keep them all.
pub const PIPELINE_CACHE_CAPACITY: usize = 32;

/// Pipelines by WGSL source and bindings, built once per device and kept while among the
/// [`PIPELINE_CACHE_CAPACITY`] most recently used (a `Conv2d` holds its own too).
pub(crate) struct PipelineCache {
    map: Mutex<LruCache<PipelineKey, Arc<Pipeline>>>,
}

impl Default for PipelineCache {
    fn default() -> Self {
        PipelineCache {
            map: Mutex::new(LruCache::new(NonZeroUsize::new(PIPELINE_CACHE_CAPACITY).unwrap_or(NonZeroUsize::MIN))),
        }
    }
}

/// The bindings of a kernel: params 0 (uniform), input 1, weight 2, bias 3, the kernel's
/// extra ones (read-only storage, or its `Grid` uniform at 7), output 5, and the range
/// flag 6 of the f16 precisions.
pub(crate) fn bindings(kernel: &Kernel) -> Vec<u32> {
    let mut b = vec![0, 1, 2, 3, 5];
    b.extend_from_slice(kernel.config().extra_bindings());
    if kernel.precision() != Precision::F32 {
        b.push(6);
    }
    b.sort_unstable();
    b
}

impl PipelineCache {
    /// The pipeline of a source with these bindings (see [`bindings`]), built on first use.
    pub fn get_or_build(
        &self,
        device: &wgpu::Device,
        source: String,
        bindings: Vec<u32>,
        runtime_checks: bool,
    ) -> Result<Arc<Pipeline>> {
        let key = (source, bindings);
        if let Some(k) = self.map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(k.clone());
        }
        let pipeline = Arc::new(build(device, &key.0, &key.1, runtime_checks)?);
        self.map.lock().unwrap_or_else(|e| e.into_inner()).put(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Pipelines held.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn build(device: &wgpu::Device, src: &str, bindings: &[u32], runtime_checks: bool) -> Result<Pipeline> {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
        .iter()
        .map(|&binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: match binding {
                    0 | GRID_BINDING => wgpu::BufferBindingType::Uniform,
                    5 | 6 | INPUT_MAX_WRITE_BINDING => wgpu::BufferBindingType::Storage { read_only: false },
                    _ => wgpu::BufferBindingType::Storage { read_only: true },
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let scope = ErrorScope::push(device);
    let layout = device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some("wgconv conv"), entries: &entries });
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
        // window under 2^31 elements (the staging and finishing passes' scratch included;
        // their loads outside the image read a valid address and select a zero, and the
        // Winograd direct fallback tests each tap). Workgroup arrays are indexed by
        // compile-time-bounded loops, except the stem kernel's ring, whose fragment columns
        // are clamped in the shader (`frag_band_col`) to the band its pipeline was composed
        // for: pipeline and parameters come from the same geometry; its bias tiles are
        // padded to whole N fragments at upload. The GPU-vs-CPU suite runs with the checks off. With them on,
        // the kernels run an order of magnitude slower (22× on AlexNet conv1, H100).
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
    Ok(Pipeline { pipeline, layout })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WebGPU's binding limits refuse a kernel up front, naming the limit.
    #[test]
    fn binding_limits_refuse_naming_the_limit() {
        let caps = |limits: wgpu::Limits| crate::caps::DeviceCaps {
            name: "test".into(),
            vendor: 0,
            device_type: wgpu::DeviceType::Cpu,
            backend: wgpu::Backend::BrowserWebGpu,
            driver: String::new(),
            features: wgpu::Features::empty(),
            limits,
            subgroup_size: (32, 32),
            coop_f16: false,
            coop_f16_offered: None,
            adapter_features: None,
        };
        let spec = Conv2dSpec::new(64, 64, 3);
        // Input, weight, bias, gather table and output: 5 storage buffers; 6 KiB of
        // workgroup memory, within WebGPU's defaults.
        let kernel: Kernel = "tiled:m128n64k8-t8x8-w4-s1".parse().unwrap();
        assert!(kernel.check(&spec, &caps(wgpu::Limits::default())).is_ok());
        let few = wgpu::Limits { max_storage_buffers_per_shader_stage: 4, ..wgpu::Limits::default() };
        let e = kernel.check(&spec, &caps(few)).unwrap_err().to_string();
        assert!(e.contains("5 storage buffers") && e.contains("max_storage_buffers_per_shader_stage"), "{e}");
        // 576 × 64 packed f32 weights: 147,456 B.
        let small = wgpu::Limits { max_storage_buffer_binding_size: 100_000, ..wgpu::Limits::default() };
        let e = kernel.check(&spec, &caps(small)).unwrap_err().to_string();
        assert!(e.contains("147456 B") && e.contains("max_storage_buffer_binding_size"), "{e}");
    }

    #[test]
    fn params_match_wgsl_struct() {
        // 23 u32 fields and the f32 `out_scale` last, in the order of params.wgsl: 96 bytes, a
        // whole number of 16-byte rows as uniform buffers want.
        assert_eq!(std::mem::size_of::<ConvParams>(), 24 * 4);
        let fields = PARAMS_WGSL.split("struct Params {").nth(1).unwrap().split('}').next().unwrap();
        assert_eq!(fields.matches(": u32").count(), 23);
        assert!(fields.trim_end().ends_with("out_scale: f32,"));
        let grid = ROW_GRID_WGSL.split("struct Grid {").nth(1).unwrap().split('}').next().unwrap();
        assert_eq!(grid.matches(": u32").count() * 4, std::mem::size_of::<RowGrid>());
    }
}
