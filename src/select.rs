//! Which kernel a `Conv2d` runs, decided in one place, in this order: the caller's kernel;
//! the stem rule (f16 on NCHW image inputs); the depthwise rule (depthwise and narrow
//! grouped layers); the f16 small-GEMM rule (`tiled-f16` on NCHW); the grouped rule (f16
//! groups of 8 or 16 channels on cooperative matrices); for f32, the Winograd
//! rule (input shape known), the f32 matrix rule, the pointwise rule (1×1 layers on NCHW
//! f32 tensors) and the split-K rule (input shape known), the first two and the last
//! weighing their estimates against the others' on GPUs; the tuner's cached decision; the
//! channels-last rule (f16 and f16x3 on cooperative matrices; f16 split-K on them where the
//! grid is small, input shape known); the f32 shape rule (input
//! shape known); the precision's default family with the config its rule picks for the
//! device; else a fallback. Each names itself in [`Selection::reason`]. Every rule asks only the device's
//! capabilities ([`DeviceCaps`]), the spec, the input shape where known and the precision;
//! none does device work.

use crate::caps::{DeclaredRates, DeviceCaps};
use crate::error::{Error, Result};
use crate::families::{
    coop, coop_grouped, coop_splitk, coop_winograd_f32, depthwise, direct, nhwc, pointwise, splitk, stem, tiled,
    winograd,
};
use crate::gpu::Gpu;
use crate::kernel::{Family, Kernel, Precision};
use crate::options::{ConfigSource, Conv2dOptions, Layout, Selection, Storage};
use crate::spec::{Conv2dSpec, ConvProblem};
use crate::tile::TileConfig;

/// Input channels up to which an f16 convolution runs the stem kernel by default
/// (ungrouped convolutions only): image inputs (gray, RGB, RGBA), the first layer it was
/// built for and measured on. It runs deeper convolutions too when named.
pub const STEM_DEFAULT_MAX_CHANNELS: u32 = 4;

/// The shortest K (input channels × taps) at which the stem rule takes channels-last tensors
/// too, with layout passes around the stem kernel (it reads NCHW): the passes cost about
/// the same per output element whatever the layer, the stem kernel's gain over the
/// channels-last kernel grows with K. On the H100 (Vulkan 580.159.04, f16 tensors,
/// 2026-11-27) AlexNet's 11×11 conv1 (K = 363, N = 128) took 0.459 ms that way, against
/// 0.690 on the channels-last kernel, and every stem config ran ResNet-50's 7×7 conv1
/// (K = 147, N = 32) slower than the channels-last kernel's 0.221 ms.
pub const STEM_CHANNELS_LAST_MIN_K: u32 = 256;

/// The longest GEMM K (input channels per group × kernel taps) of the f16 small-GEMM rule
/// (README, "Which kernel runs", rule 2).
pub const F16_SIMT_MAX_K: u32 = 64;
/// The fewest output channels per group beyond which the f16 small-GEMM rule leaves a layer
/// of longer K to the matrix units.
pub const F16_SIMT_MAX_N: u32 = 32;

/// Decides the kernel for a convolution on a device: [`select`] with the tuning cache's
/// decision where the options name the input shape.
pub(crate) fn select_on(
    gpu: &Gpu,
    spec: &Conv2dSpec,
    options: &Conv2dOptions,
    finite_weights: bool,
) -> Result<Selection> {
    select(gpu.caps(), spec, options, finite_weights, |default| cached(gpu, spec, options, default))
}

/// The tuning cache's decision for the spec at the input shape the options name, measured
/// on `default`'s family (a missing or unreadable cache is a miss).
#[cfg(feature = "tune")]
fn cached(gpu: &Gpu, spec: &Conv2dSpec, options: &Conv2dOptions, default: &Kernel) -> Option<(Kernel, String)> {
    let problem = spec.problem(options.tuning_key_input?).ok()?;
    let (kernel, batch) = crate::cache::cached_decision(gpu, &problem, default)?;
    let reason = if batch == problem.input.n {
        "the tuner's decision for this device, shape and precision".to_string()
    } else {
        format!(
            "the tuner's decision for this device, shape and precision at batch {batch}, reused at batch {} \
             (within {}x)",
            problem.input.n,
            crate::cache::BATCH_REUSE_FACTOR
        )
    };
    Some((kernel, reason))
}

/// Without the `tune` feature there is no tuning cache.
#[cfg(not(feature = "tune"))]
fn cached(_gpu: &Gpu, _spec: &Conv2dSpec, _options: &Conv2dOptions, _default: &Kernel) -> Option<(Kernel, String)> {
    None
}

/// Whether the input shape can change [`select`]'s choice for these options: not where they
/// name a kernel or already give the shape, nor where a rule that needs no shape decides
/// first (the stem and grouped rules, and the depthwise rule where its config does not
/// follow the shape). `Conv2d::new` keeps the weights for the first forward's selection
/// only where it can.
pub(crate) fn shape_may_matter(caps: &DeviceCaps, spec: &Conv2dSpec, options: &Conv2dOptions) -> bool {
    if options.kernel.is_some() || options.tuning_key_input.is_some() {
        return false;
    }
    if stem_takes(caps, spec, options).is_some() {
        return false;
    }
    if depthwise_rule(caps, spec, None, options).is_none()
        && f16_small_gemm_rule(caps, spec, None, options).is_none()
        && grouped_rule(caps, spec, options.precision).is_some()
    {
        return false;
    }
    match depthwise_rule(caps, spec, None, options) {
        Some(_) => depthwise_shape_matters(caps, spec, options),
        None => true,
    }
}

/// The most kernels [`Conv2dOptions::autotune`] times for one convolution and input shape.
pub const AUTOTUNE_MAX_CANDIDATES: usize = 8;
/// Of the candidates, the most reference kernels of families other than the selection's: on
/// a 3×3 stride-1 f32 layer the tiled kernel or the matrix path, both Winograd families and
/// split-K.
#[cfg(feature = "tune")]
const AUTOTUNE_OTHER_FAMILIES: usize = 4;

/// The kernels [`Conv2dOptions::autotune`] may time for `spec` on a device, in order,
/// `selected` (the selection's kernel at the input shape) first: then the reference kernels of
/// up to [`AUTOTUNE_OTHER_FAMILIES`] other families of the precision that the benchmark sweeps
/// on this device (registry order), then the selected family's other sweep configs; each one
/// the device and the convolution accept at the precision (`Kernel::check`) and that the
/// rules would run on this device at all: the stem kernel on NVIDIA only (its two warp roles
/// reach the barrier from two loops, which SPIR-V does not promise to support), the f32
/// kernel on the matrix units only where the f32 matrix rule may take a layer (declared
/// rates, [`F32_MATRIX_MIN_RATE_RATIO`]) and for finite weights, the Winograd families for
/// finite weights and only where their algorithm keeps the F32 contract at the spec's input
/// channels (`winograd::Minimal::f32_channels`). The autotuner times the
/// first [`AUTOTUNE_MAX_CANDIDATES`] of them that build with the caller's weights. No device
/// work.
#[cfg(feature = "tune")]
pub(crate) fn autotune_candidates(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    selected: &Kernel,
    finite_weights: bool,
) -> Vec<Kernel> {
    // The Winograd families and the f32 matrix kernel take finite weights only (and the
    // Winograd families refuse, in `check`, more input channels than their algorithm keeps
    // the F32 contract for).
    let runs = |k: &Kernel| {
        let allowed = (finite_weights || k.family_impl().takes_non_finite_weights())
            && match k.family() {
                f if f == stem::STEM.name() => caps.is_nvidia(),
                f if f == nhwc::COOP_NHWC_F32.name() => caps
                    .declared_rates()
                    .is_some_and(|r| r.f16_matrix_tflops / r.fp32_tflops >= F32_MATRIX_MIN_RATE_RATIO),
                _ => true,
            };
        allowed && k.precision() == selected.precision() && k.check(spec, caps).is_ok()
    };
    let others = crate::families::FAMILIES
        .iter()
        .filter(|f| {
            f.name() != selected.family()
                && f.precision() == selected.precision()
                && f.benchmarked()
                && f.unavailable(caps).is_none()
        })
        .map(|f| f.reference())
        .filter(runs)
        .take(AUTOTUNE_OTHER_FAMILIES);
    let own = selected.family_impl().sweep().into_iter().filter(runs);
    let mut candidates = vec![selected.clone()];
    for k in others.chain(own) {
        if !candidates.contains(&k) {
            candidates.push(k);
        }
    }
    candidates
}

/// Whether the kernels read and write the op's tensors as f16 themselves where their family
/// can ([`Storage::F16`] on a device with `SHADER_F16`: they declare them as WGSL `f16`);
/// else passes convert them around the kernel.
pub(crate) fn f16_tensors_in_kernels(caps: &DeviceCaps, storage: Storage) -> bool {
    storage == Storage::F16 && caps.shader_f16()
}

/// Decides the kernel for a convolution; `finite_weights`: no weight is infinite or NaN (the
/// f32 kernel on the matrix units takes finite weights only); `cached` answers the tuning
/// cache's decision for a precision's default kernel (its family), where the input shape is
/// known.
pub(crate) fn select(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    options: &Conv2dOptions,
    finite_weights: bool,
    cached: impl FnOnce(&Kernel) -> Option<(Kernel, String)>,
) -> Result<Selection> {
    // An input shape the spec cannot take is a mistake, not an unknown shape (the spec's
    // own mistakes are named as such first).
    spec.validate()?;
    let problem = options
        .tuning_key_input
        .map(|input| {
            spec.problem(input)
                .map_err(|e| Error::InvalidOptions(format!("Conv2dOptions::tuning_key_input {input}: {e}")))
        })
        .transpose()?;
    if let Some(kernel) = &options.kernel {
        if kernel.precision() != options.precision {
            return Err(Error::InvalidOptions(format!(
                "kernel {kernel} computes in {}, but {} was asked for",
                kernel.precision(),
                options.precision
            )));
        }
        kernel.check(spec, caps)?;
        return Ok(Selection {
            kernel: kernel.clone(),
            source: ConfigSource::Explicit,
            reason: "named in Conv2dOptions::kernel".into(),
        });
    }
    if let Some(reason) = stem_takes(caps, spec, options) {
        return Ok(Selection { kernel: stem::STEM.reference(), source: ConfigSource::Default, reason });
    }
    if let Some((kernel, reason)) = depthwise_rule(caps, spec, problem.as_ref(), options) {
        return Ok(Selection { kernel, source: ConfigSource::Default, reason });
    }
    if let Some((kernel, reason)) = f16_small_gemm_rule(caps, spec, problem.as_ref(), options) {
        return Ok(Selection { kernel, source: ConfigSource::Default, reason });
    }
    if let Some((kernel, reason)) = grouped_rule(caps, spec, options.precision) {
        return Ok(Selection { kernel, source: ConfigSource::Default, reason });
    }
    // Before the tuning cache, which holds the FMA kernels' decisions for f32: where the
    // Winograd kernel or the matrix units win by the estimate, they win by more than tuning
    // a tile gains. The Winograd rule weighs the matrix path itself, so it goes first.
    if options.precision == Precision::F32 {
        // Winograd and split-K read NCHW f32 tensors only: others reach them through passes.
        let converted = options.layout == Layout::Nhwc || options.storage == Storage::F16;
        if let Some(problem) = problem.as_ref() {
            if let Some((kernel, reason)) = winograd_rule(caps, problem, options.layout, converted, finite_weights) {
                return Ok(Selection { kernel, source: ConfigSource::Default, reason });
            }
        }
        let matrix = f32_matrix_rule(caps, spec, problem.as_ref(), options.layout, converted, finite_weights);
        if let Some((kernel, reason)) = matrix {
            return Ok(Selection { kernel, source: ConfigSource::Default, reason });
        }
        if let Some((kernel, reason)) = problem.as_ref().filter(|_| !converted).and_then(|p| pointwise_rule(caps, p)) {
            return Ok(Selection { kernel, source: ConfigSource::Default, reason });
        }
        if let Some((kernel, reason)) = problem.as_ref().and_then(|p| splitk_rule(caps, p, options.layout, converted)) {
            return Ok(Selection { kernel, source: ConfigSource::Default, reason });
        }
    }
    let (default, why) = rule_kernel(caps, options.precision)?;
    if let Some((kernel, reason)) = cached(&default) {
        if kernel.family() == default.family() && kernel.check(spec, caps).is_ok() {
            return Ok(Selection { kernel, source: ConfigSource::TuningCache, reason });
        }
    }
    let f16_tensors = f16_tensors_in_kernels(caps, options.storage);
    if let Some((kernel, reason)) =
        channels_last_rule(caps, spec, problem.as_ref(), options.precision, options.layout, f16_tensors)
    {
        return Ok(Selection { kernel, source: ConfigSource::Default, reason });
    }
    if let Some(problem) = problem.filter(|_| options.precision == Precision::F32) {
        if let Some((kernel, reason)) = f32_shape_rule(caps, &problem) {
            return Ok(Selection { kernel, source: ConfigSource::Default, reason });
        }
    }
    let refusal = match default.check(spec, caps) {
        Ok(()) => return Ok(Selection { kernel: default, source: ConfigSource::Default, reason: why.into() }),
        Err(e) => e.to_string(),
    };
    if let Some(kernel) = default.family_impl().sweep().into_iter().find(|k| k.check(spec, caps).is_ok()) {
        return Ok(Selection {
            kernel,
            source: ConfigSource::Fallback,
            reason: format!("the default was refused ({refusal}); the first of its family's sweep that fits"),
        });
    }
    match options.precision {
        Precision::F32 => Ok(Selection {
            kernel: direct::DIRECT.reference(),
            source: ConfigSource::Fallback,
            reason: format!("no tiled config fits the device ({refusal}); the direct kernel"),
        }),
        p => Err(Error::unsupported(format!("no {p} kernel fits {}: {refusal}", caps.name))),
    }
}

/// The stem rule: f16 on an image input (no groups, at most
/// [`STEM_DEFAULT_MAX_CHANNELS`] channels, a kernel of more than [`F16_SIMT_MAX_K`] taps
/// over them: 7×7 and 11×11 stems, not 3×3 ones, which the small-GEMM rule takes) on
/// NVIDIA's cooperative matrices runs the stem kernel, where its reference config fits the
/// device for every input size. NVIDIA only:
/// its two roles of warps reach the workgroup barrier from two loops (equally often), which
/// SPIR-V does not promise to support and NVIDIA's hardware barrier, which counts arrivals,
/// is known to run. Returns the reason, or `None` where the rule does not apply.
pub(crate) fn stem_rule(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision) -> Option<String> {
    let applies = precision == Precision::F16Accum32
        && caps.coop_f16
        && caps.is_nvidia()
        && spec.groups == 1
        && spec.in_channels <= STEM_DEFAULT_MAX_CHANNELS
        && spec.k_total() > F16_SIMT_MAX_K;
    (applies && stem::STEM.reference().check(spec, caps).is_ok()).then(|| {
        format!(
            "f16 on an image input (≤ {STEM_DEFAULT_MAX_CHANNELS} channels, no groups) on NVIDIA's cooperative \
             matrices: the stem kernel"
        )
    })
}

/// The stem rule for the options' tensors: on NCHW ones wherever it applies; on
/// channels-last ones, which the stem kernel reaches through layout passes, only for a K of
/// at least [`STEM_CHANNELS_LAST_MIN_K`]. Returns the reason, or `None`.
fn stem_takes(caps: &DeviceCaps, spec: &Conv2dSpec, options: &Conv2dOptions) -> Option<String> {
    let reason = stem_rule(caps, spec, options.precision)?;
    match options.layout {
        Layout::Nchw => Some(reason),
        _ if spec.k_total() >= STEM_CHANNELS_LAST_MIN_K => Some(format!(
            "{reason}, between layout passes (channels-last tensors; K = {} ≥ {STEM_CHANNELS_LAST_MIN_K})",
            spec.k_total()
        )),
        _ => None,
    }
}

/// Whether the f16 small-GEMM rule takes this convolution in f16 on NCHW tensors (see
/// [`f16_small_gemm_rule`]).
pub(crate) fn f16_small_gemm_applies(caps: &DeviceCaps, spec: &Conv2dSpec) -> bool {
    let (k, n) = (spec.k_total(), spec.out_channels_per_group());
    caps.coop_f16
        && spec.groups == 1
        && (k <= F16_SIMT_MAX_K || n <= F16_SIMT_MAX_N)
        && tiled::TILED_F16.unavailable(caps).is_none()
}

/// The f16 small-GEMM rule: f16 on cooperative matrices, NCHW tensors, and an ungrouped
/// layer (grouped ones were not measured) whose GEMM is short (K = input channels per group
/// × taps ≤ [`F16_SIMT_MAX_K`]: 3×3 image stems, 1×1 layers of ≤ 64 channels) or narrow
/// (≤ [`F16_SIMT_MAX_N`] output channels per group) runs the SIMT kernel `tiled-f16` with the f32 shape rule's tile config (its shape-free one
/// where the input shape is not known yet). On such layers the matrix kernels' time is their
/// staging pass, f32 output and padded fragments, not their products: on the H100 the
/// channels-last f16 kernel took 1.1–2.8× the f32 SIMT kernel's time on every such layer of
/// MobileNetV2 and ResNet-50 (13 layers, 2.2 ms against 1.2 at batch 32), and the stem
/// kernel 2.3× on MobileNetV2's 3×3 stem and 1.3× on VGG-16's, while it stays 1.6× and more
/// faster on the 7×7 and 11×11 stems. Channels-last tensors stay with the channels-last
/// kernel, which reads them itself.
fn f16_small_gemm_rule(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    problem: Option<&ConvProblem>,
    options: &Conv2dOptions,
) -> Option<(Kernel, String)> {
    let (k, n) = (spec.k_total(), spec.out_channels_per_group());
    let applies = options.precision == Precision::F16Accum32 && options.layout == Layout::Nchw;
    if !applies || !f16_small_gemm_applies(caps, spec) {
        return None;
    }
    let (tile, how) = match problem.and_then(|p| f32_shape_rule(caps, p)).and_then(|(k, _)| k.tile()) {
        Some(tile) => (tile, "the f32 shape rule's tile config for this input"),
        None => (f32_tile(caps).0, "the f32 shape-free tile config (input shape not known)"),
    };
    let kernel = tiled::TILED_F16.reference().with_tile(tile)?;
    kernel.check(spec, caps).ok()?;
    Some((
        kernel,
        format!(
            "f16 on cooperative matrices, a small GEMM (K = {k}, N = {n} per group): the SIMT kernel, {how} \
             (the matrix kernels' staging and output dominate such layers)"
        ),
    ))
}

/// The most input channels per group that the depthwise rule sends to the depthwise family
/// (narrow grouped convolutions, e.g. ResNeXt-50's 32 groups of 4, 8 and 16 channels: on the
/// H100 the depthwise family ran its 16-channel groups 2.1× faster than the tiled kernel).
pub const DEPTHWISE_MAX_CHANNELS_PER_GROUP: u32 = 16;

/// The same limit in f16 where the device has cooperative matrices: there the gathering
/// kernel on the matrix units was as fast on ResNeXt-50's 16-channel groups at stride 1 and
/// 1.5× faster at stride 2 (H100), while the depthwise family rounds every loaded value.
pub const DEPTHWISE_F16_COOP_MAX_CHANNELS_PER_GROUP: u32 = 8;

/// The same limit in f16 on cooperative matrices for channels-last tensors, where the
/// depthwise family runs groups of several channels as vectors of 4 with a 4×4 matrix per
/// tap: on the H100 (f16 tensors) the channels-last matrix kernel's blocks of 128 rows × 16
/// columns (`coop-nhwc-f16:m128n16k16-t4x4-w4-s1`) ran ResNeXt-50's 8-channel groups at 28×28
/// in 0.090 ms against 0.130 and at stride 2 as fast (0.136 against 0.134 for the best
/// depthwise config), while on NCHW tensors the depthwise family's own layout kept the lead
/// (0.083 against 0.117).
pub const DEPTHWISE_F16_COOP_CHANNELS_LAST_MAX_CHANNELS_PER_GROUP: u32 = 4;

/// The grouped rule's configs of `coop-grouped-f16`, in order of preference: the first that
/// the layer's channels allow runs. On the H100 (f16 tensors, channels last and NCHW;
/// ResNeXt-50's grouped 3×3 layers of 8 and 16 channels per group at N = 32) the 64×64
/// block on 4 warps ran fastest of the family's configs on each of the 4 layers in both
/// layouts (five configs on NCHW tensors, six on channels-last ones).
const GROUPED_CONFIGS: [TileConfig; 2] =
    [TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1), TileConfig::with_thread_tile(64, 32, 32, 4, 4, 1)];

/// The grouped rule: f16 on cooperative matrices, groups of as many input as output channels,
/// 8 or 16 of them, that the depthwise rule left (on NCHW tensors it takes groups of 8):
/// `coop-grouped-f16`, several groups per block with block-diagonal weights. On the H100
/// (f16 channels-last tensors, ResNeXt-50 at N = 32) it ran the layers of 8 and 16 channels
/// per group 1.5–2.2× faster than the channels-last kernel's blocks of 16 columns
/// (0.086 → 0.040 ms at 28×28, 8 channels), and on NCHW tensors the 16-channel groups
/// 1.06–1.07× faster. Returns the kernel and the reason, or `None`.
fn grouped_rule(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision) -> Option<(Kernel, String)> {
    if precision != Precision::F16Accum32 || coop_grouped::COOP_GROUPED_F16.unavailable(caps).is_some() {
        return None;
    }
    let reference = coop_grouped::COOP_GROUPED_F16.reference();
    let kernel =
        GROUPED_CONFIGS.into_iter().find_map(|t| reference.with_tile(t).filter(|k| k.check(spec, caps).is_ok()))?;
    let block_n = kernel.tile()?.block_n;
    let reason = format!(
        "f16 on cooperative matrices, {} groups of {} channels: the grouped kernel, {block_n} channels \
         ({} groups) per block with block-diagonal weights",
        spec.groups,
        spec.in_channels_per_group(),
        block_n / spec.in_channels_per_group()
    );
    Some((kernel, reason))
}

/// Whether the depthwise rule takes this convolution on tensors in `layout` (see
/// [`depthwise_rule`]).
pub(crate) fn depthwise_rule_applies(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    precision: Precision,
    layout: Layout,
) -> bool {
    if precision == Precision::F16x3 && !caps.coop_f16 {
        return false;
    }
    let most = match (precision, layout) {
        (Precision::F16Accum32, Layout::Nhwc) if caps.coop_f16 => {
            DEPTHWISE_F16_COOP_CHANNELS_LAST_MAX_CHANNELS_PER_GROUP
        }
        (Precision::F16Accum32, Layout::Nchw) if caps.coop_f16 => DEPTHWISE_F16_COOP_MAX_CHANNELS_PER_GROUP,
        _ => DEPTHWISE_MAX_CHANNELS_PER_GROUP,
    };
    spec.groups > 1 && spec.in_channels_per_group() <= most
}

/// The depthwise rule: convolutions whose groups read at most
/// [`DEPTHWISE_MAX_CHANNELS_PER_GROUP`] input channels (depthwise with any channel
/// multiplier, and narrow grouped layers) run the depthwise family (`depthwise` in f32,
/// `depthwise-f16` in f16 where the device has `SHADER_F16`), whose invocations compute
/// strips of outputs from input rows held in registers. The GEMM kernels pad each group's
/// output channels to a whole block (32 to 128) and its K to a whole step, so on such groups
/// almost all of their work is padding: on the H100 the tiled kernels ran MobileNetV2's
/// depthwise layers 26–36× slower than even the one-output-per-invocation direct kernel.
/// The config: blocks of 4 rows of one column (f32) or two columns (f16 operands at stride
/// 1, f16 tensors read by the kernel at any stride: `f16_tensors`), or of 2 rows × 2 columns
/// (f16 operands on NCHW f32 tensors at column strides over 1, on GPUs), and as many output
/// channels per invocation as the group has, up to 4 (they share the input rows). Where the
/// spec's rows or taps do not fit in registers (very wide or dilated kernels), the direct
/// kernel. Where the input shape is known: the staged kernel for small maps
/// ([`depthwise_staged_applies`]), and one column at stride 2 on small maps of f16 tensors.
/// Returns the kernel and the reason, or `None` where the rule does not apply.
pub(crate) fn depthwise_rule(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    problem: Option<&ConvProblem>,
    options: &Conv2dOptions,
) -> Option<(Kernel, String)> {
    let precision = options.precision;
    let f16_tensors = f16_tensors_in_kernels(caps, options.storage);
    let narrow = depthwise_rule_applies(caps, spec, precision, options.layout);
    // f16x3 runs these layers in f32: it exists to use the matrix units, which they leave
    // idle, and f32 is at least as accurate (on the H100 the gathering f16x3 kernel ran
    // MobileNetV2's depthwise layers ~8× slower than the depthwise family).
    let (family, fallback): (&'static depthwise::Depthwise, &'static dyn Family) = match precision {
        Precision::F32 | Precision::F16x3 => (&depthwise::DEPTHWISE, &direct::DIRECT),
        Precision::F16Accum32 => (&depthwise::DEPTHWISE_F16, &direct::DIRECT_F16),
    };
    if !narrow || family.unavailable(caps).is_some() {
        return None;
    }
    let what = if spec.in_channels_per_group() == 1 {
        format!("depthwise ({} groups of one input channel, multiplier {})", spec.groups, spec.out_channels_per_group())
    } else {
        format!("grouped ({} groups of {} input channels)", spec.groups, spec.in_channels_per_group())
    };
    // As many output channels per invocation as the group has, up to 4, fewer where their
    // taps do not fit in registers. In f16 each loaded value is also range checked (and
    // rounded, where the driver keeps the round trip), so blocks two columns wide (each load feeding twice the outputs) pay off on
    // stride-1 rows: on the H100 they ran MobileNetV2's stride-1 depthwise layers up to
    // 1.26× and ResNeXt's grouped ones 1.1–1.2× faster than one column; in f32 one column
    // was within 3 % of the best block on every depthwise layer measured. On f16 tensors
    // read by the kernel (NCHW), two columns ran MobileNetV2's depthwise layers at every
    // stride within 5 % of the best block in total, one column 15 % over it: a warp's
    // 2-byte loads of one column bring half the bytes per request.
    if let Some((p, staged)) = problem.and_then(|p| Some((p, depthwise_staged(caps, p, options)?))) {
        return Some((
            staged,
            format!(
                "{precision} {what}: the depthwise family's staged kernel (whole {}x{} output planes of several \
                 channels per workgroup, staged in workgroup memory)",
                p.output.h, p.output.w
            ),
        ));
    }
    // On f16 tensors at stride 2, one column again where the output maps are small: there
    // the two-column blocks leave too few invocations (on the H100, 14×14 and 7×7 outputs
    // of MobileNetV2 ran 15–20 % faster in one column; 28×28 and larger in two).
    // (GPUs only: on lavapipe the two-column blocks were as fast or faster there.)
    let small_strided =
        !caps.is_cpu() && spec.stride[1] > 1 && problem.is_some_and(|p| p.output.h * p.output.w <= DEPTHWISE_SMALL_MAP);
    let widest = spec.out_channels_per_group().min(4);
    // f16 operands on a CPU adapter: two columns at every stride (on lavapipe they ran
    // MobileNetV2's stride-2 depthwise layers 1.35–1.55× faster than one column).
    let f16_wide = precision == Precision::F16Accum32 && (spec.stride[1] == 1 || caps.is_cpu());
    let wide = (f16_tensors && !small_strided) || f16_wide;
    // f16 operands on NCHW f32 tensors at column strides over 1 (GPUs): blocks of 2 rows × 2
    // columns, whatever the channels per invocation (channels-last tensors were not measured
    // this way and keep the blocks above). On the H100 (2026-11-27) they ran
    // MobileNetV2's stride-2 depthwise layers 3–10 % faster than one column at 56×56 to 14×14
    // outputs and 1 % slower at 7×7, and ResNeXt-50's 8-channel grouped one at 28×28 17 %
    // faster; two columns of 4 rows ran the depthwise ones up to 11 % slower than one column.
    let f16_strided = precision == Precision::F16Accum32
        && !f16_tensors
        && options.layout == Layout::Nchw
        && spec.stride[1] > 1
        && !caps.is_cpu();
    let mut refusal = None;
    for c in [widest, 2, 1].into_iter().filter(|&c| c <= widest) {
        let (x, y) = match (wide, c) {
            _ if f16_strided => (2, 2),
            (false, _) => (1, 4),
            (true, 1) => (2, 4),
            (true, _) => (2, 2),
        };
        let cfg = depthwise::StripConfig { x, y, c, ..depthwise::StripConfig::REFERENCE };
        let kernel = family.with(cfg);
        match kernel.check(spec, caps) {
            Ok(()) => {
                let arithmetic = match precision {
                    Precision::F16x3 => " in f32 arithmetic (as accurate; these layers leave the matrix units idle)",
                    _ => "",
                };
                let reason = format!(
                    "{precision} {what}: the depthwise family{arithmetic}, blocks of {y} rows × {x} column(s) × {c} \
                     channel(s) per invocation"
                );
                return Some((kernel, reason));
            }
            Err(e) => refusal = Some(e),
        }
    }
    let why = refusal.map(|e| e.to_string()).unwrap_or_default();
    Some((fallback.reference(), format!("{precision} {what}: the direct kernel, because {why}")))
}

/// Output maps of at most this many positions (14×14) are "small" to the depthwise rule.
pub const DEPTHWISE_SMALL_MAP: u32 = 196;

/// The staged depthwise config the rule picks.
const STAGED_RULE_CONFIG: depthwise::StagedConfig = depthwise::StagedConfig { x: 4, workgroup: 128 };

/// Whether the depthwise rule runs a layer on the staged kernel
/// ([`depthwise::StagedConfig`], `staged-x4-w128`): on GPUs (on lavapipe, whose workgroup
/// memory and barriers are the CPU's memory and a thread rendezvous, it ran those layers
/// 1.1–3× slower than the strip kernel), depthwise of multiplier 1 on NCHW tensors
/// at stride 1, whose output planes are small enough that several whole planes share a
/// workgroup's tile, where the kernel reads f16 tensors itself or computes with f16
/// operands. There each input value is loaded (and rounded or converted) once per tile
/// instead of once per strip that reads it. On the H100 (MobileNetV2, N=32) it ran the 14×14
/// and 7×7 layers 0–8 % faster than the best strip config on f16 tensors in f32 and 10–20 %
/// with f16 operands; larger maps, cut into bands of rows, 8–18 % slower at stride 1 and more
/// at stride 2; on f32 tensors in f32 it was faster nowhere.
pub(crate) fn depthwise_staged_applies(caps: &DeviceCaps, problem: &ConvProblem, options: &Conv2dOptions) -> bool {
    depthwise_staged(caps, problem, options).is_some()
}

fn depthwise_staged(caps: &DeviceCaps, problem: &ConvProblem, options: &Conv2dOptions) -> Option<Kernel> {
    let spec = &problem.spec;
    let f16 = f16_tensors_in_kernels(caps, options.storage) || options.precision == Precision::F16Accum32;
    if caps.is_cpu() || !depthwise_staged_candidate(spec, options) || !f16 {
        return None;
    }
    let family = match options.precision {
        Precision::F16Accum32 => &depthwise::DEPTHWISE_F16,
        _ => &depthwise::DEPTHWISE,
    };
    let kernel = family.staged(STAGED_RULE_CONFIG);
    kernel.check(spec, caps).ok()?;
    let planes = depthwise::staged_planes_per_tile(&STAGED_RULE_CONFIG, problem, &caps.kernel_limits()).ok()?;
    (planes >= 2).then_some(kernel)
}

/// The shape-free part of [`depthwise_staged_applies`]'s conditions.
fn depthwise_staged_candidate(spec: &Conv2dSpec, options: &Conv2dOptions) -> bool {
    options.layout == Layout::Nchw
        && spec.in_channels_per_group() == 1
        && spec.out_channels_per_group() == 1
        && spec.stride == [1, 1]
}

/// Whether the input shape can change the depthwise rule's choice: the staged kernel's
/// layers, and strided ones on f16 tensors.
fn depthwise_shape_matters(caps: &DeviceCaps, spec: &Conv2dSpec, options: &Conv2dOptions) -> bool {
    if caps.is_cpu() {
        return false;
    }
    let f16_tensors = f16_tensors_in_kernels(caps, options.storage);
    let staged =
        depthwise_staged_candidate(spec, options) && (f16_tensors || options.precision == Precision::F16Accum32);
    staged || (f16_tensors && spec.stride[1] > 1)
}

/// How much the channels-last kernels may pad K (each group's input channels to whole
/// vectors of 8, per tap) before the channels-last rule leaves a layer to the gathering
/// kernel: a 16-channel layer pads nothing, a 12-channel one 1.33×.
pub const CHANNELS_LAST_MAX_K_PADDING: f64 = 1.25;

/// Whether the channels-last rule takes this convolution on NCHW tensors (see
/// [`channels_last_rule`]).
pub(crate) fn channels_last_rule_applies(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision) -> bool {
    channels_last_rule_applies_for(caps, spec, precision, Layout::Nchw)
}

/// [`channels_last_rule_applies`] for tensors in `layout`: on channels-last tensors the
/// family takes every layer its precision allows, however its channels pad K (the other
/// families would need layout passes around them).
fn channels_last_rule_applies_for(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision, layout: Layout) -> bool {
    let family = match precision {
        Precision::F16Accum32 => &nhwc::COOP_NHWC_F16,
        Precision::F16x3 => &nhwc::COOP_NHWC_F16X3,
        Precision::F32 => return false,
    };
    family.unavailable(caps).is_none() && channels_last_pads_little(spec, layout)
}

/// Whether the channels-last kernels take a layer's channels: each group's input channels,
/// padded to whole vectors of 8, grow K by at most [`CHANNELS_LAST_MAX_K_PADDING`] — or the
/// tensors are channels last, where the other kernels would need layout passes.
fn channels_last_pads_little(spec: &Conv2dSpec, layout: Layout) -> bool {
    let cg = spec.in_channels_per_group();
    layout == Layout::Nhwc || ((cg as u64).next_multiple_of(8) as f64) <= CHANNELS_LAST_MAX_K_PADDING * cg as f64
}

/// The channels-last family's f16 tile configs: each with its rate per padded multiply-add
/// relative to the reference config's when every multiprocessor is busy, and the workgroups
/// of it that one multiprocessor runs at once. 128×128 blocks with K steps of 64 on 8 warps
/// (the reference; its 44.5 KiB of workgroup memory fill a multiprocessor of NVIDIA's Vulkan
/// driver, which leaves about 51), the same block with K steps of 32 on 4 warps of 4×4
/// fragments (24 KiB: two per multiprocessor, each stepping through its barriers while the
/// other multiplies), and blocks of 64 for grids too small to fill the device with them.
/// Ranked in whole waves ([`estimated_best_in_waves`]): the 4-warp block wins where the
/// reference's tiles would leave a last wave part empty that its waves of twice as many fill
/// (ResNet-50's 196-tile layers at N = 32), and on long grids by its rate, and loses where
/// the reference fills whole waves (VGG-16's 512-channel layers at N = 16: 392 tiles) or
/// less than one. Fitted to the H100's sweeps of VGG-16 and ResNet-50 (the 28×28
/// 512-channel layer: 64×64 blocks ran at 0.6 of the 128×128 rate in f16, the 4-warp block
/// at 1.12 per multiprocessor); ranking the sweeps of ResNet-50, VGG-16 and AlexNet so
/// picked the fastest of the three 128×128 and 64×64 configs on each of their 21 layers
/// that take this table.
const CHANNELS_LAST_F16_CONFIGS: [(TileConfig, f64, u64); 4] = [
    (TileConfig::with_thread_tile(128, 128, 64, 8, 8, 1), 1.0, 1),
    (TileConfig::with_thread_tile(128, 128, 32, 16, 8, 1), 1.12, 2),
    (TileConfig::with_thread_tile(64, 128, 32, 8, 8, 2), 0.58, 1),
    CHANNELS_LAST_F16_SMALL,
];
/// The 64×64 block of both f16 tables: 4 warps of 2×2 fragments with K steps of 64 in one
/// buffer (23 KiB of workgroup memory). It took the place of the same block with K steps of
/// 32 in two buffers, at the same rates: on the H100 (2026-11-27, one sweep of the 77
/// layers of ResNet-50, ResNeXt-50, MobileNetV2, VGG-16 and AlexNet that take these
/// tables) it took 2–19 % less time on each of the 10 layers the tables give this block
/// (ResNet-50's 3×3 and 2048→512 1×1 layers at 7×7, MobileNetV2's projections of 192–960
/// channels at 14×14 and 7×7), and the one buffer with K steps of 32 took up to 36 % less
/// than the two on 75 of the 77 (the second buffer costs a workgroup per multiprocessor and
/// hides little: the kernel does not wait on its loads; BENCHMARKS, "The f16 channels-last
/// epilogue"). No other pick moved: the sum over the 77 layers fell 11.577 → 11.536 ms,
/// where the best of the ten configs measured per layer would give 11.235.
const CHANNELS_LAST_F16_SMALL: (TileConfig, f64, u64) = (TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1), 0.6, 1);
/// The f16 configs added to [`CHANNELS_LAST_F16_CONFIGS`] for short K (at most
/// [`CHANNELS_LAST_SHORT_K`] as the kernels walk it) on channels-last f16 tensors (which the
/// kernel reads, in place where it can, and writes through its scratch fragments), with
/// their rates and workgroups per multiprocessor: K steps of 16 in one buffer, whose small
/// workgroup memory lets more workgroups share a multiprocessor and hide the loads, the
/// fixed prologue and the epilogue that such layers are mostly made of — 128×128 blocks on 8
/// warps (two per multiprocessor) and 128×64 blocks on 4 (three). Ranked in whole waves with
/// the long table's four: where K steps of 64 fill whole waves they win (the 512-channel
/// 1×1 layers of ResNet-50 and ResNeXt-50 at 392 tiles: 0.0626 → 0.0540 ms). Fitted to one
/// H100 sweep (2026-11-28, f16 tensors, channels last) of the 77 layers of ResNet-50,
/// ResNeXt-50, MobileNetV2, VGG-16 and AlexNet that take the channels-last tables, with 13
/// configs: picking this way took 8.859 ms over the 77 (× multiplicity) against 8.945 for
/// the earlier short-K table (ranked by padded work alone) and 8.832 for the best of the 13
/// per layer, within 5 % of the best on 75 of them (VGG-16's c2_1, 0.92, and MobileNetV2's
/// b6.ex.160-960, 0.91, left); any rates from 1.125 to 1.25 and 0.9 to 0.95 made the same
/// picks. On NCHW f32 tensors (the kernel storing f32 fragments straight into the output)
/// the short steps gained nothing on ResNet-50 (0.79–1.24× per layer), and on channels-last
/// f32 tensors the long table ran ResNet-50 4.5 % faster (5.199 → 4.970 ms; its 512-channel
/// 1×1 layers 1.2–1.25×).
const CHANNELS_LAST_F16_SHORT_K_CONFIGS: [(TileConfig, f64, u64); 2] = [
    (TileConfig::with_thread_tile(128, 128, 16, 8, 8, 1), 1.175, 2),
    (TileConfig::with_thread_tile(128, 64, 16, 8, 8, 1), 0.92, 3),
];
/// Blocks as narrow as a group's output channels, in the f16 table: 128 rows of 16 or 32
/// columns on 4 warps (2×1 and 2×2 fragments, 12–18 KiB of workgroup memory),
/// with their rates per padded multiply-add relative to the table's reference, offered
/// only where a group has at most `block_n` output channels ([`narrow_configs`]): the wide
/// blocks pad such groups 2–8× (ResNeXt-50's groups of 8, 16 and 32 channels, MobileNetV2's
/// 16–32-channel projections and its stem), while on wider groups the narrow block reads
/// each input row once per block of columns and lost to the 64×64 block at any rate that
/// keeps its wins. Fitted to one H100 sweep (2026-11-27, f16 tensors, channels last) of the
/// 53 layers of ResNet-50, ResNeXt-50, MobileNetV2 and VGG-16 that take the short-K table,
/// with the table's three configs and six narrow ones: picking by the table with these
/// three took 5.679 ms over the 53 (× multiplicity) against 6.018 without them and 5.619 for
/// the best of the nine per layer; rates from 0.3 to 0.5 (16 columns), 0.5 to 0.7 and 0.6
/// to 0.8 (32) made the same picks. On NCHW f32 tensors (the long table) ResNeXt-50's 16-
/// and 32-channel groups ran fastest on them too (0.142 → 0.051 ms at 14×14). Those rates
/// were fitted against the earlier short-K table (ranked by padded work alone) and kept
/// when its configs joined the ranking in whole waves: in the 2026-11-28 sweep
/// ([`CHANNELS_LAST_F16_SHORT_K_CONFIGS`]) every layer the narrow blocks took came within 5 %
/// of its best.
const CHANNELS_LAST_F16_NARROW: [(TileConfig, f64); 3] = [
    (TileConfig::with_thread_tile(128, 16, 16, 4, 4, 1), 0.4),
    (TileConfig::with_thread_tile(128, 32, 16, 8, 4, 1), 0.6),
    (TileConfig::with_thread_tile(128, 32, 32, 8, 4, 1), 0.7),
];

/// The narrow blocks ([`CHANNELS_LAST_F16_NARROW`]) at least as wide as the spec's groups'
/// output channels.
fn narrow_configs(spec: &Conv2dSpec) -> impl Iterator<Item = (TileConfig, f64)> {
    let n = spec.out_channels_per_group();
    CHANNELS_LAST_F16_NARROW.into_iter().filter(move |(t, _)| n <= t.block_n)
}

/// The longest K (taps × each group's channels padded to vectors of 8) at which the f16
/// channels-last rule also ranks its short-K configs: ResNet-50's 3×3 64-channel layer ran
/// fastest with K steps of 16, VGG-16's 3×3 64→128 layer (also K = 576) with K steps of 32,
/// its 512-channel layers (K = 4608) with K steps of 64.
pub const CHANNELS_LAST_SHORT_K: u64 = 576;
/// The split kernels' configs (f16x3, and f32 on the matrix units), whose doubled tiles
/// leave no room for K steps of 64 at 128×128, with their rates per padded multiply-add
/// relative to the 128×128 block and the workgroups each runs per multiprocessor, ranked in
/// whole waves with their epilogues ([`split_best`]). The 64-wide blocks run at 0.5–0.55 of
/// the 128×128 block's rate and win where the wide one would pad N or leave the device half
/// empty; the 64×64 block with K steps of 16 ([`SPLIT_SMALL_STEPS`]) has a small footprint and
/// shares a multiprocessor with two others.
///
/// Fitted to H100 sweeps (Vulkan 580.159.04, 2026-11-28) of these five blocks: f32 on NCHW
/// tensors over the dense layers of ResNet-50, ResNeXt-50, MobileNetV2, VGG-16 and AlexNet
/// at their bench batches (37 layers the matrix path runs or nearly wins), of ResNet-50,
/// ResNeXt-50 (with its grouped layers) and MobileNetV2 at batch 8 and 1 (15 it runs), f16x3
/// over ResNet-50 and MobileNetV2 at N = 32 (41), and seven of ResNeXt-50's 1×1 layers in
/// f16x3 timed with two of the blocks. Picking by this table came within 0.5 % of each
/// layer's best on each set but the last (0.8 %; geometric means), 6 of the 100 layers under
/// 0.97 of their best, 2 under 0.95: 0.92 (ResNet-50's 256→1024 1×1 layer at 14×14 in f32, 0.87
/// in f16x3); the table before (every block one per multiprocessor, no epilogue) left 17
/// under 0.95. Without the epilogue no rates kept both the 7×7 and 14×14 layers at small
/// grids on the right blocks and the long grids of 64–256 channels at 56×56 on the 128×128
/// block; epilogues of 80–96 multiply-adds per output element with these rates made the same
/// picks, 64 or 112 lost 1–5 more layers, as did the 128×64 block at 0.55 or the small steps
/// at 0.75 or 0.85 (BENCHMARKS, "The f32 matrix table in waves"). `scripts/split_table_fit.py`
/// repeats this ranking on a device's sweeps and searches around it.
const CHANNELS_LAST_SPLIT_CONFIGS: [(TileConfig, f64, u64); 5] = [
    (TileConfig::with_thread_tile(128, 128, 32, 8, 8, 1), 1.0, 1),
    (TileConfig::with_thread_tile(128, 64, 32, 8, 8, 1), 0.5, 1),
    (TileConfig::with_thread_tile(64, 128, 32, 8, 8, 1), 0.55, 1),
    (TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1), 0.55, 1),
    SPLIT_SMALL_STEPS,
];

/// A 64×64 block of 4 warps with K steps of 16, three workgroups per multiprocessor that
/// together reach 0.8 of the 128×128 block's rate ([`CHANNELS_LAST_SPLIT_CONFIGS`]): on the
/// H100 5–14 % faster than the 128×128 block on ResNet-50's 14×14 layers, its 3×3 64-channel
/// one at 56×56 and VGG-16's 64-channel one at 224×224 (f32, 2026-11-27).
const SPLIT_SMALL_STEPS: (TileConfig, f64, u64) = (TileConfig::with_thread_tile(64, 64, 16, 4, 8, 1), 0.8, 3);

/// A split kernel's epilogue (its output tile read out of the accumulators and stored),
/// counted as this many multiply-adds per output element of the tile at the block's rate,
/// shared among the workgroups that run on a multiprocessor at once: with one, nothing
/// hides it, so it weighs on short K ([`CHANNELS_LAST_SPLIT_CONFIGS`]).
const SPLIT_EPILOGUE_MULTIPLY_ADDS: f64 = 96.0;

/// The split kernels' blocks as rule 5's estimate of the matrix path ([`f32_matrix_estimate`])
/// was fitted with: in waves of one workgroup per multiprocessor, at these rates, no
/// epilogue, no small steps. The estimate takes the block [`split_best`] picks instead where
/// that ranks lower — with one workgroup per multiprocessor, an epilogue and rates no higher
/// than these, only the small steps can.
const MATRIX_RULE_SPLIT_CONFIGS: [(TileConfig, f64); 4] = [
    (TileConfig::with_thread_tile(128, 128, 32, 8, 8, 1), 1.0),
    (TileConfig::with_thread_tile(128, 64, 32, 8, 8, 1), 0.65),
    (TileConfig::with_thread_tile(64, 128, 32, 8, 8, 1), 0.65),
    (TileConfig::with_thread_tile(64, 64, 64, 4, 8, 1), 0.6),
];

/// Among the split kernels' long-K configs ([`CHANNELS_LAST_SPLIT_CONFIGS`]), the one of
/// least time in whole waves with their epilogues ([`estimated_best_in_waves`],
/// [`SPLIT_EPILOGUE_MULTIPLY_ADDS`]).
fn split_best(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    k: u64,
    make: impl Fn(TileConfig) -> Option<Kernel>,
) -> Option<(Kernel, u64, TileConfig, f64)> {
    estimated_best_in_waves(caps, problem, k, &CHANNELS_LAST_SPLIT_CONFIGS, SPLIT_EPILOGUE_MULTIPLY_ADDS, make)
}

/// The split kernels' configs for short K (at most [`CHANNELS_LAST_SHORT_K`]) on
/// channels-last tensors in rule 5: 64×64 blocks with K steps of 16 in one buffer in place
/// of those with K steps of 64. On the H100 (f32 tensors) they ran thirteen of fourteen
/// short-K layers of ResNet-50 and MobileNetV2 in 0.44–0.99× the time of the K-64 blocks
/// and at 0.95–1.2× the 128×128 block's rate per padded multiply-add on their 56×56 and
/// 28×28 maps (counted at 0.9: at 7×7, MobileNetV2's last 1×1 layer, they ran 1.2× slower
/// than the 128×128 block).
const CHANNELS_LAST_SPLIT_SHORT_K_CONFIGS: [(TileConfig, f64); 4] = [
    (TileConfig::with_thread_tile(128, 128, 32, 8, 8, 1), 1.0),
    (TileConfig::with_thread_tile(128, 64, 32, 8, 8, 1), 0.65),
    (TileConfig::with_thread_tile(64, 128, 32, 8, 8, 1), 0.65),
    (TileConfig::with_thread_tile(64, 64, 16, 4, 8, 1), 0.9),
];

/// The channels-last rule: f16 and f16x3 convolutions on cooperative matrices whose groups'
/// channels pad K by at most [`CHANNELS_LAST_MAX_K_PADDING`] run the channels-last family
/// (its input staged as f16 vectors of 8 channels): on the H100 it ran VGG-16's layers
/// 1.4–2.6× and ResNet-50's deeper ones up to 2.2× faster than the gathering kernel, which
/// rounds and gathers its operands one element at a time. On channels-last tensors it takes
/// every layer these precisions run on it (the others would need layout passes). With the
/// input shape known, the config with the least estimated time among the precision's table
/// ([`estimated_best`]; the f16 table in whole waves, [`estimated_best_in_waves`], with the
/// short-K configs added for f16 on channels-last f16 tensors, `f16_tensors`, with K up to
/// [`CHANNELS_LAST_SHORT_K`]); else the 128×128 reference. In f16 with the input shape known, split-K on
/// the matrix units (`coop-splitk-f16`) instead where its estimate is at least
/// [`COOP_SPLITK_MIN_GAIN`] times below that config's ([`coop_split_estimate`]).
pub(crate) fn channels_last_rule(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    problem: Option<&ConvProblem>,
    precision: Precision,
    layout: Layout,
    f16_tensors: bool,
) -> Option<(Kernel, String)> {
    if !channels_last_rule_applies_for(caps, spec, precision, layout) {
        return None;
    }
    let k = nhwc::channels_last_k(spec);
    let what = format!(
        "{precision} on cooperative matrices, {} input channels per group: the channels-last kernel",
        spec.in_channels_per_group()
    );
    let short_k = k <= CHANNELS_LAST_SHORT_K && layout == Layout::Nhwc && f16_tensors;
    let family = match precision {
        Precision::F16x3 => &nhwc::COOP_NHWC_F16X3,
        _ => &nhwc::COOP_NHWC_F16,
    };
    let make = |t| family.reference().with_tile(t);
    let best = problem.and_then(|p| match precision {
        Precision::F16x3 => split_best(caps, p, k, make),
        _ => {
            let short = CHANNELS_LAST_F16_SHORT_K_CONFIGS.into_iter().filter(|_| short_k);
            let narrow = narrow_configs(spec).map(|(tile, rate)| (tile, rate, 1));
            let configs: Vec<_> = CHANNELS_LAST_F16_CONFIGS.into_iter().chain(short).chain(narrow).collect();
            estimated_best_in_waves(caps, p, k, &configs, 0.0, make)
        }
    });
    if let Some((kernel, tiles, tile, cost)) = best {
        if let Some(split) =
            problem.filter(|_| precision == Precision::F16Accum32).and_then(|p| coop_split_estimate(caps, p))
        {
            let unsplit = coop_f16_seconds(caps, cost).filter(|&t| split.seconds * COOP_SPLITK_MIN_GAIN < t);
            if let Some(unsplit) = unsplit {
                let reason = format!(
                    "{what} on {tiles} workgroup tiles of {}x{}, too few to fill the device over K = {k}: split-K on \
                     the matrix units, {} slices of {} input channels ({} tiles of {}x{}) and a reduction, \
                     estimated {:.3} ms against {:.3} ms unsplit",
                    tile.block_m,
                    tile.block_n,
                    split.cfg.slices,
                    spec.in_channels / split.cfg.slices,
                    split.tiles,
                    split.cfg.tile.block_m,
                    split.cfg.tile.block_n,
                    split.seconds * 1e3,
                    unsplit * 1e3
                );
                return Some((coop_splitk::COOP_SPLITK_F16.with(split.cfg), reason));
            }
        }
        let reason = format!(
            "{what}, the config with the least estimated time ({tiles} workgroup tiles of {}x{})",
            tile.block_m, tile.block_n
        );
        return Some((kernel, reason));
    }
    let kernel = family.reference();
    kernel.check(spec, caps).ok()?;
    Some((kernel, format!("{what}, its reference config")))
}

/// The share of the declared f16-matrix rate at which the channels-last f16 kernel runs the
/// padded work its tables count (`estimated_best`, `estimated_best_in_waves`, at the
/// reference config's rate), and its fixed cost per dispatch; with split-K on the matrix
/// units, the reduction's extra fixed cost and the share of the declared bandwidth at which
/// the partial sums move (the slices write them in f32, the reduction reads them and writes
/// the output). Fitted jointly on the H100 (Vulkan 580.159.04, 2026-11-27, f16 channels-last
/// tensors) to 84 dense layers of ResNet-50 at batch 1 and 32, VGG-16, MobileNetV2 and
/// AlexNet at batch 1, timed with the table's pick and seven split-K configs each (2–16
/// slices): relative errors of about 14 % (median) on both kernels' times; picking by
/// these estimates (with [`COOP_SPLITK_MIN_GAIN`]) took each network within 3.2 % of the best
/// of the eight per layer (ResNet-50 at batch 1: 1.009 → 0.804 ms, where the best per layer
/// gives 0.779).
pub const F16_MATRIX_EFFICIENCY: f64 = 0.205;
/// See [`F16_MATRIX_EFFICIENCY`].
const F16_MATRIX_DISPATCH_SECONDS: f64 = 10.3e-6;
/// See [`F16_MATRIX_EFFICIENCY`].
const COOP_SPLITK_PASS_SECONDS: f64 = 3.9e-6;
/// See [`F16_MATRIX_EFFICIENCY`].
const COOP_SPLITK_BANDWIDTH_SHARE: f64 = 0.67;
/// How much faster than the unsplit kernel split-K's estimate must be for the rule to take
/// it: the estimates' median error is 14 %. With any gain, ResNet-50's 2048→512 1×1 layer at
/// N = 32 went to split-K by an estimated 6 % and ran 3 % slower on f16 channels-last tensors
/// and 1.46× slower on NCHW f32 ones (H100, 2026-11-27); at 1.1 it stays unsplit, and over
/// the fitted layers only ResNet-50 at batch 1 loses (0.780 → 0.804 ms of 1.009).
const COOP_SPLITK_MIN_GAIN: f64 = 1.1;
/// Split-K's tiles on the matrix units, with their rates and workgroups per multiprocessor
/// as the f16 table has them: the 128×128 block on 4 warps and the 64×64 block.
const COOP_SPLITK_TILE_RATES: [(TileConfig, f64, u64); 2] = [CHANNELS_LAST_F16_CONFIGS[1], CHANNELS_LAST_F16_SMALL];

/// Seconds for `cost` padded multiply-adds at the channels-last f16 kernel's reference rate
/// ([`F16_MATRIX_EFFICIENCY`]) on a GPU of declared rates, with its fixed cost.
fn coop_f16_seconds(caps: &DeviceCaps, cost: f64) -> Option<f64> {
    let rates = caps.declared_rates().filter(|_| !caps.is_cpu())?;
    Some(seconds_at(2.0 * cost, rates.f16_matrix_tflops, F16_MATRIX_EFFICIENCY) + F16_MATRIX_DISPATCH_SECONDS)
}

/// What split-K on the matrix units would run and its estimated time.
struct CoopSplitEstimate {
    cfg: splitk::SplitConfig,
    tiles: u64,
    seconds: f64,
}

/// Split-K on the matrix units' best config by estimate, on a GPU of declared rates: for
/// each config of its sweep that the device and the layer accept, the sliced problem's
/// padded work in whole waves at its tile's rate, plus the partial sums' bytes
/// (`4 B × (2·S + 1) × outputs`) and the reduction's dispatch ([`F16_MATRIX_EFFICIENCY`]).
fn coop_split_estimate(caps: &DeviceCaps, problem: &ConvProblem) -> Option<CoopSplitEstimate> {
    let rates = caps.declared_rates().filter(|_| !caps.is_cpu())?;
    let fill = fill_workgroups(caps);
    let outputs = problem.output.len() as f64;
    let bandwidth = rates.bandwidth_gbs * 1e9 * COOP_SPLITK_BANDWIDTH_SHARE;
    coop_splitk::coop_split_sweep()
        .into_iter()
        .filter_map(|cfg| {
            let &(_, rate, per_multiprocessor) = COOP_SPLITK_TILE_RATES.iter().find(|c| c.0 == cfg.tile)?;
            coop_splitk::COOP_SPLITK_F16.with(cfg).check(&problem.spec, caps).ok()?;
            if !scratch_fits(caps, 4 * cfg.slices as u64 * problem.output.per_image()) {
                return None;
            }
            let sliced = splitk::sliced_problem(problem, cfg.slices).ok()?;
            let k = nhwc::channels_last_k(&sliced.spec);
            let (tiles, per_tile) = tiles_and_work(&sliced, k, cfg.tile);
            let cost = work_in_waves(tiles, per_tile, rate, per_multiprocessor * fill);
            let seconds = coop_f16_seconds(caps, cost)?
                + COOP_SPLITK_PASS_SECONDS
                + 4.0 * (2 * cfg.slices as u64 + 1) as f64 * outputs / bandwidth;
            Some(CoopSplitEstimate { cfg, tiles, seconds })
        })
        .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
}

/// Among `configs` (tile, relative rate), the kernel `make` builds with the least estimated
/// time that the device accepts: `max(tiles, fill) × padded multiply-adds per
/// tile / rate`, with M, N and `k` (the GEMM's K as the kernel walks it) padded to whole
/// blocks — padding and grids that leave the device part empty both count. Returns the
/// kernel, its workgroup tiles, its tile and that estimate (multiply-adds at the reference
/// config's rate).
fn estimated_best(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    k: u64,
    configs: &[(TileConfig, f64)],
    make: impl Fn(TileConfig) -> Option<Kernel>,
) -> Option<(Kernel, u64, TileConfig, f64)> {
    let fill = fill_workgroups(caps);
    let costs = configs.iter().map(|&(t, rate)| {
        let (tiles, per_tile) = tiles_and_work(problem, k, t);
        (tiles.max(fill) as f64 * per_tile / rate, tiles, t)
    });
    least_cost(caps, problem, costs, make)
}

/// [`estimated_best`] over configs (tile, rate, workgroups per multiprocessor) in whole
/// waves ([`work_in_waves`]): a wave runs `per_multiprocessor` workgroups on each
/// multiprocessor, each at `rate / per_multiprocessor` — a last wave part empty, or a grid
/// under one, costs a whole one. Each tile's work is its padded multiply-adds plus
/// `epilogue` multiply-adds per output element of the tile, shared among the workgroups of a
/// multiprocessor (and, like the rest of the tile's work, divided by its rate).
fn estimated_best_in_waves(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    k: u64,
    configs: &[(TileConfig, f64, u64)],
    epilogue: f64,
    make: impl Fn(TileConfig) -> Option<Kernel>,
) -> Option<(Kernel, u64, TileConfig, f64)> {
    let fill = fill_workgroups(caps);
    let costs = configs.iter().map(|&(t, rate, per_multiprocessor)| {
        let (tiles, per_tile) = tiles_and_work(problem, k, t);
        let outputs = (t.block_m * t.block_n) as f64;
        let per_tile = per_tile + epilogue * outputs / per_multiprocessor.max(1) as f64;
        (work_in_waves(tiles, per_tile, rate, per_multiprocessor * fill), tiles, t)
    });
    least_cost(caps, problem, costs, make)
}

/// The kernel `make` builds of the config (cost, tiles, tile) of least cost that the device
/// accepts, with its tiles, tile and cost.
fn least_cost(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    costs: impl Iterator<Item = (f64, u64, TileConfig)>,
    make: impl Fn(TileConfig) -> Option<Kernel>,
) -> Option<(Kernel, u64, TileConfig, f64)> {
    let mut ranked: Vec<_> = costs.collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    ranked.into_iter().find_map(|(cost, tiles, tile)| {
        let kernel = make(tile)?;
        kernel.check(&problem.spec, caps).ok()?;
        Some((kernel, tiles, tile, cost))
    })
}

/// A family's least padded work over `configs` (tile, relative rate), paid in whole waves
/// of one workgroup per multiprocessor (`slots` of them): `ceil(tiles / slots) × slots ×
/// padded multiply-adds per tile / rate`, at the reference config's rate. A grid that
/// spills a few tiles past a wave pays for two (ResNet-50's 2048→512 1×1 layer at 7×7,
/// N=32: 150 tiles of 64×96 on 132 multiprocessors), where [`estimated_best`], ranking one
/// family's configs, counts any grid of at least one wave by its tiles.
fn wave_work(problem: &ConvProblem, k: u64, configs: &[(TileConfig, f64)], slots: u64) -> f64 {
    configs
        .iter()
        .map(|&(t, rate)| {
            let (tiles, per_tile) = tiles_and_work(problem, k, t);
            work_in_waves(tiles, per_tile, rate, slots)
        })
        .fold(f64::INFINITY, f64::min)
}

/// `tiles` workgroups of `per_tile` padded multiply-adds at `rate`, paid in whole waves of
/// `slots` workgroups (at least one wave): `ceil(tiles / slots) × slots × per_tile / rate`.
fn work_in_waves(tiles: u64, per_tile: f64, rate: f64, slots: u64) -> f64 {
    let slots = slots.max(1);
    (tiles.div_ceil(slots).max(1) * slots) as f64 * per_tile / rate
}

/// A tile config's workgroup tiles over a problem (M = output positions, N = a group's
/// output channels, per group) and the multiply-adds of one tile with K (`k`) padded to
/// whole steps.
fn tiles_and_work(problem: &ConvProblem, k: u64, t: TileConfig) -> (u64, f64) {
    let spec = &problem.spec;
    let m = problem.output.n as u64 * problem.output.h as u64 * problem.output.w as u64;
    let n = spec.out_channels_per_group() as u64;
    let (bm, bn, bk) = (t.block_m as u64, t.block_n as u64, t.block_k as u64);
    let tiles = m.div_ceil(bm) * n.div_ceil(bn) * spec.groups as u64;
    (tiles, (bm * bn * k.next_multiple_of(bk)) as f64)
}

/// The least ratio of a device's declared f16-matrix rate to its fp32 FMA rate
/// ([`DeviceCaps::declared_rates`]) at which `Precision::F32` may run on the matrix units.
/// Each multiply-add costs three f16 products there, and our matrix kernel reaches a smaller
/// share of its units' rate than the FMA kernels of theirs ([`F32_MATRIX_EFFICIENCY`],
/// [`F32_SIMT_EFFICIENCY`]): below about 8 the FMA kernels are faster on every layer (an RTX
/// 4090's ratio is 2, an H100's 14.8).
pub const F32_MATRIX_MIN_RATE_RATIO: f64 = 8.0;

/// The share of the declared fp32 rate the tiled f32 kernels reach, and of the declared
/// f16-matrix rate (counting three products per multiply-add) the f32 kernel on the matrix
/// units reaches, on work counted in whole waves (`wave_work`): fitted with the
/// bandwidth shares below to the H100's and the H200's sweeps of both families.
pub const F32_SIMT_EFFICIENCY: f64 = 0.53;
/// See [`F32_SIMT_EFFICIENCY`].
pub const F32_MATRIX_EFFICIENCY: f64 = 0.23;

/// Bytes per input element that the matrix path moves besides its kernel: the
/// input-maximum pass reads it (4), the staging pass reads it (4) and writes its two f16
/// halves (4). The channels-last layout passes that the FMA kernels need around them move
/// 8 per input and output element.
const MATRIX_STAGING_BYTES: f64 = 12.0;
const LAYOUT_PASS_BYTES: f64 = 8.0;
/// The share of the declared bandwidth those passes reach.
const PASS_BANDWIDTH_SHARE: f64 = 0.6;
/// The share of the declared bandwidth at which the matrix kernel stores an NCHW output:
/// its fragments hold 16 positions of a channel, runs of 64 bytes where the FMA kernels
/// store whole vec4s of neighbouring positions.
const MATRIX_OUTPUT_BANDWIDTH_SHARE: f64 = 0.3;
/// The same for a channels-last output, which the kernel writes itself (rows of C_out
/// floats, 64-byte runs of a fragment's 16 channels): fitted on the H100 to MobileNetV2's
/// expansion layers at N = 32 with channels-last f32 tensors (2026-11-27), whose time beyond
/// the rest of the estimate was their output at 0.5–0.65 TB/s.
const MATRIX_NHWC_OUTPUT_BANDWIDTH_SHARE: f64 = 0.17;
/// The fixed cost of the matrix path's two extra dispatches (input maximum and staging),
/// which decides small layers (MobileNetV2's narrow expansions at 14×14).
const MATRIX_PASSES_SECONDS: f64 = 5e-6;

/// The f32 matrix rule: `Precision::F32` on a device with cooperative matrices whose declared
/// f16-matrix rate is at least [`F32_MATRIX_MIN_RATE_RATIO`] times its fp32 rate runs the
/// channels-last kernel with its input scaled per chunk and split into f16 halves
/// (`coop-nhwc-f32`, as accurate as the FMA kernels, special values alike), where the
/// weights are finite and each group's channels pad K by at most
/// [`CHANNELS_LAST_MAX_K_PADDING`] (on channels-last tensors: any), with the input shape
/// known, where its estimated time is below the FMA kernels' (the better of the tiled
/// kernels and split-K, [`splitk_estimate`]). Each family's estimate is its
/// configs' least padded work in whole waves ([`wave_work`]) — at [`F32_MATRIX_EFFICIENCY`]
/// of a third of the matrix rate, or [`F32_SIMT_EFFICIENCY`] of the fp32 rate — plus, for
/// the matrix path, the staging passes' bytes and their dispatches and its output's bytes
/// ([`PASS_BANDWIDTH_SHARE`], [`MATRIX_OUTPUT_BANDWIDTH_SHARE`],
/// [`MATRIX_NHWC_OUTPUT_BANDWIDTH_SHARE`]; counted as for f32 tensors on f16 ones), and for the FMA
/// kernels the layout passes where the tensors are channels last. The matrix path's work
/// is that of [`MATRIX_RULE_SPLIT_CONFIGS`] or of the block it would run, whichever is less
/// ([`f32_matrix_estimate`]); the FMA kernels' work is weighed up on small grids
/// ([`fma_small_grid_factor`]). Fitted on the 71 dense
/// layers of ResNet-50, ResNeXt-50, MobileNetV2, VGG-16 and AlexNet that the rule decides,
/// swept with four tiled configs (the shape rule's three of then and a 128×128 block; see
/// [`matrix_rule_fma_configs`]) and six of the
/// matrix family's on an H100 and on an H200: the family chosen is within 0.5 % of the
/// better family's best config (geometric mean on each device), 20 % on the worst layer.
/// Returns the kernel and why, or `None` where the rule does not apply.
pub(crate) fn f32_matrix_rule(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    problem: Option<&ConvProblem>,
    layout: Layout,
    converted: bool,
    finite_weights: bool,
) -> Option<(Kernel, String)> {
    // Without the input shape the rule stays out: on small layers (MobileNetV2's narrow
    // pointwise ones on the H100) the matrix path ran up to 3x slower than the FMA kernels.
    let problem = problem?;
    let matrix = f32_matrix_estimate(caps, spec, problem, layout, finite_weights)?;
    let split = splitk_estimate(caps, problem, converted, &matrix.rates).map(|e| e.seconds);
    let small_grid = fma_small_grid_factor(problem, matrix.rates.multiprocessors);
    let tiled = f32_fma_estimate(caps, problem, layout, &matrix.rates, small_grid);
    let fma = match (tiled, split) {
        (Some(tiled), Some(split)) => Some(tiled.min(split)),
        (tiled, split) => tiled.or(split),
    };
    if fma.is_some_and(|fma| fma <= matrix.seconds) {
        return None;
    }
    let against = fma.map_or("no FMA config fits".to_string(), |t| format!("{:.3} ms on the FMA units", t * 1e3));
    Some((
        matrix.kernel,
        format!(
            "f32 on cooperative matrices (declared f16 matrix rate {:.1}x the fp32 rate), {} input channels per \
             group: the channels-last kernel, input scaled per chunk and split into f16 halves, the config with the \
             least estimated time ({} workgroup tiles of {}x{}): {:.3} ms \
             against {against}",
            matrix.rates.f16_matrix_tflops / matrix.rates.fp32_tflops,
            spec.in_channels_per_group(),
            matrix.tiles,
            matrix.tile.block_m,
            matrix.tile.block_n,
            matrix.seconds * 1e3
        ),
    ))
}

/// Workgroup tiles of the FMA kernels' 64×96 block ([`FMA_GPU_BLOCK`]) per multiprocessor
/// under which rule 5 weighs their estimate up ([`fma_small_grid_factor`]).
const FMA_SMALL_GRID_TILES: f64 = 6.0;
/// The most [`fma_small_grid_factor`] adds to the FMA kernels' estimate, for a grid of no
/// outputs.
const FMA_SMALL_GRID_WEIGHT: f64 = 0.25;

/// The factor rule 5 puts on the FMA kernels' estimate ([`f32_fma_estimate`]): 1 from
/// [`FMA_SMALL_GRID_TILES`] tiles of the 64×96 block per multiprocessor on (each group's
/// columns padded to whole tiles), growing linearly to 1 + [`FMA_SMALL_GRID_WEIGHT`] as the
/// tiles per multiprocessor fall to none. A grid of a workgroup or two per multiprocessor
/// leaves their 4 warps' loads unhidden, which the estimate's rate, fitted on fuller grids,
/// does not count; the matrix path's estimate held there. Tiles, not outputs, so that
/// grouped layers count the tiles they run (ResNeXt-50's last grouped 3×3 layer at N = 32,
/// 32 groups of 32 channels, stays on the tiled kernel, 1.4× faster there).
///
/// On the H100 (Vulkan 580.159.04, 2026-11-28, f32; ResNet-50, ResNeXt-50 and MobileNetV2 at
/// batch 8 and 1 and the five networks at their bench batches, both families swept: 186
/// layers) the two estimates were within 1 % on five 1×1 layers of 512–2048 channels at
/// 14×14 and 7×7 at batch 8, where the FMA kernels took 1.6–1.9× their estimate and the
/// matrix path 0.9–1.0×: with this factor rule 5 sends them to the matrix path (1.6–1.9×
/// faster), and two more (ResNeXt-50's 512→512 1×1 layer at 28×28 at batch 8, 1.09×; its
/// 256→512 one at batch 1, 0.96×). Weights 0.2–0.3 and five to eight tiles made the same
/// decisions on the swept layers; 0.5 also moved a grouped stride-2 layer at batch 8, which
/// ran 1.5× slower on the matrix path.
fn fma_small_grid_factor(problem: &ConvProblem, multiprocessors: u32) -> f64 {
    let (tiles, _) = tiles_and_work(problem, problem.spec.k_total() as u64, FMA_GPU_BLOCK);
    let per_multiprocessor = tiles as f64 / multiprocessors.max(1) as f64;
    1.0 + FMA_SMALL_GRID_WEIGHT * (1.0 - per_multiprocessor / FMA_SMALL_GRID_TILES).max(0.0)
}

/// What the f32 matrix path would run and its estimated time (rule 5's; see
/// [`f32_matrix_rule`]).
struct MatrixEstimate {
    kernel: Kernel,
    tiles: u64,
    tile: TileConfig,
    seconds: f64,
    rates: DeclaredRates,
}

/// The f32 matrix path's estimate, where rule 5 lets it run the problem: cooperative
/// matrices, declared rates whose ratio reaches [`F32_MATRIX_MIN_RATE_RATIO`], finite
/// weights, channels that pad K little, not a depthwise layer.
fn f32_matrix_estimate(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    problem: &ConvProblem,
    layout: Layout,
    finite_weights: bool,
) -> Option<MatrixEstimate> {
    let family = &nhwc::COOP_NHWC_F32;
    if !finite_weights
        || family.unavailable(caps).is_some()
        || depthwise_rule_applies(caps, spec, Precision::F32, layout)
    {
        return None;
    }
    let rates = caps.declared_rates()?;
    if rates.f16_matrix_tflops / rates.fp32_tflops < F32_MATRIX_MIN_RATE_RATIO
        || !channels_last_pads_little(spec, layout)
    {
        return None;
    }
    let matrix_k = nhwc::channels_last_k(spec);
    let make = |t| family.reference().with_tile(t);
    let short_k = layout == Layout::Nhwc && matrix_k <= CHANNELS_LAST_SHORT_K;
    let (configs, (kernel, tiles, tile, cost)) = match short_k {
        true => (
            CHANNELS_LAST_SPLIT_SHORT_K_CONFIGS.to_vec(),
            estimated_best(caps, problem, matrix_k, &CHANNELS_LAST_SPLIT_SHORT_K_CONFIGS, make)?,
        ),
        false => (MATRIX_RULE_SPLIT_CONFIGS.to_vec(), split_best(caps, problem, matrix_k, make)?),
    };
    let (input, output) = (problem.input.len() as f64, problem.output.len() as f64);
    let bandwidth = rates.bandwidth_gbs * 1e9;
    // The fitted table's work, or the block the path would run where that ranks lower: the
    // long-K table's blocks of one workgroup per multiprocessor carry an epilogue and rates no
    // higher than the fitted table's, so only its small steps (three per multiprocessor,
    // which the fitted table does not count) can. That put VGG-16's 512-channel 3×3 layer at
    // 14×14 (N = 16) on the matrix path, 1.11× faster than F(2×2, 3×3) on the H100 (F(4×4,
    // 3×3) has since taken it, 1.19× faster still), and moved none of rule 5's decisions there
    // (BENCHMARKS, "The f32 matrix table in waves").
    let family_work = wave_work(problem, matrix_k, &configs, rates.multiprocessors as u64);
    let matrix_work = if short_k { family_work } else { family_work.min(cost) };
    let output_share = match layout {
        Layout::Nchw => MATRIX_OUTPUT_BANDWIDTH_SHARE,
        Layout::Nhwc => MATRIX_NHWC_OUTPUT_BANDWIDTH_SHARE,
    };
    // Counted as for f32 tensors, where it was fitted, on f16 ones too (which the passes and
    // the kernel read and write themselves): with the halved bytes counted instead, the H100
    // ran MobileNetV2's and ResNet-50's 1×1 layers of at most 64 output channels 1.1–1.8×
    // slower on the matrix units than on the FMA kernels between layout passes, which this
    // estimate sent them to (it gained 1.1–1.3× on wider ones, e.g. ResNet-50's 512→128).
    let seconds = seconds_at(6.0 * matrix_work, rates.f16_matrix_tflops, F32_MATRIX_EFFICIENCY)
        + MATRIX_STAGING_BYTES * input / (bandwidth * PASS_BANDWIDTH_SHARE)
        + 4.0 * output / (bandwidth * output_share)
        + MATRIX_PASSES_SECONDS;
    Some(MatrixEstimate { kernel, tiles, tile, seconds, rates })
}

/// The f32 FMA kernels' (`tiled`) estimated time on a GPU of these rates: the configs
/// rule 5 was fitted against ([`matrix_rule_fma_configs`]), padded work in whole waves at
/// [`F32_SIMT_EFFICIENCY`] of the fp32 rate times `weight` (rule 5's
/// [`fma_small_grid_factor`]; 1 in the rules not fitted with it, Winograd's and
/// split-K's), plus the layout passes where the tensors are channels last; `None` where
/// none of those configs fits the device.
fn f32_fma_estimate(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    layout: Layout,
    rates: &DeclaredRates,
    weight: f64,
) -> Option<f64> {
    let configs = matrix_rule_fma_configs(&problem.spec);
    let k = problem.spec.k_total() as u64;
    estimated_best(caps, problem, k, &configs, |t| tiled::TILED.reference().with_tile(t))?;
    let work = wave_work(problem, k, &configs, rates.multiprocessors as u64);
    let passes = conversion_passes(problem, rates, layout == Layout::Nhwc);
    Some(weight * seconds_at(2.0 * work, rates.fp32_tflops, F32_SIMT_EFFICIENCY) + passes)
}

/// The seconds of the passes that convert the tensors for a kernel that does not read them
/// as they are (`around`), at [`LAYOUT_PASS_BYTES`] per input and output element; else 0.
fn conversion_passes(problem: &ConvProblem, rates: &DeclaredRates, around: bool) -> f64 {
    match around {
        true => {
            let elements = (problem.input.len() + problem.output.len()) as f64;
            LAYOUT_PASS_BYTES * elements / (rates.bandwidth_gbs * 1e9 * PASS_BANDWIDTH_SHARE)
        }
        false => 0.0,
    }
}

/// Seconds for `flops` at `share` of `tflops`.
fn seconds_at(flops: f64, tflops: f64, share: f64) -> f64 {
    flops / (tflops * 1e12 * share)
}

/// The multiple of the declared bandwidth at which split-K's estimate counts its partial sums
/// (the slices write them, the reduction reads them and writes the output) where they are
/// small ([`splitk_partials_counted_small`]; ResNet-50's last stage at batch 1: 6 MB in 16 slices),
/// and the fixed cost of the reduction's dispatch. Fitted with [`SPLITK_TILE_RATES`] on the
/// H100 at batch 1 (below), where the traffic is a small part of the time: above 1, though
/// the bytes move at about 0.9 of the bandwidth ([`splitk_partials_counted_small`] says why the
/// share stands).
const SPLITK_PASS_BANDWIDTH_SHARE: f64 = 4.0;
const SPLITK_PASS_SECONDS: f64 = 2.5e-6;
/// The split-K tiles' relative rates per padded multiply-add: the shape rule's, but the
/// 64×32 block's at 0.7. Fitted on the H100 (Vulkan 580.159.04, 2026-11-27) to ResNet-50,
/// MobileNetV2 and VGG-16 at batch 1 and ResNet-50's deep layers at N = 32, every split-K
/// config of the sweep timed on each, at 0.8 (on the sliced problems of batch 1 it ran as fast
/// per multiply-add as 64×96 or faster where both filled the device): the rule's picks came
/// within 5.4 % of each layer's best kernel measured (geometric mean over the 72 layers;
/// 1.41× on the worst). On an H200 (2026-11-28, matrix units off) ResNet-50's deep layers at
/// N = 8 and 32 ran the 64×32 block's slices at 0.6–0.7 of the 64×96 block's rate (its
/// 2048→512 1×1 layer at N = 8 in 8 slices: 0.0669 ms against 0.0497), where 0.8 kept
/// picking it. With 0.7 (and [`SPLITK_MAX_WAVES`]' gate over the 64×96 grid), one call
/// alternating binaries: ResNet-50 at N = 8 2.931 → 2.724 ms with the matrix units off (five
/// layers 1.19–1.53× faster) and 2.478 → 2.449 with them; at batch 1 four picks moved
/// (0.88–1.28×), 1.077 → 1.073 ms and 1.072 → 1.077.
const SPLITK_TILE_RATES: [(TileConfig, f64); 3] =
    [(FMA_GPU_BLOCK, 1.0), (NARROW_BLOCK, 0.7), (TileConfig::with_thread_tile(32, 32, 32, 4, 4, 2), 0.4)];
/// Split-K is weighed only where the unsplit problem's grid of the FMA kernels' reference
/// block ([`FMA_GPU_BLOCK`]) is under this many waves of one workgroup per multiprocessor.
/// Under one or two waves the slices fill multiprocessors the grid leaves idle; over a few
/// they still fill the grid's part-empty last wave and shorten each tile's K loop, which the
/// estimate weighs against the partial sums' traffic; over many the last wave is a small part
/// of the time and the unsplit kernel wins. Five: on an H200 with the matrix units off
/// (BENCHMARKS, "Split-K on grids of up to five waves (H200)") the 1×1 layers of 1024–2048
/// output channels at 7×7 (N = 32: 400–550 tiles) ran 1.15–1.29× faster in 2 or 4 slices
/// than unsplit, which a gate of two waves never weighed; over that sweep's 58 dense 1×1
/// layers the picks took 7.37 ms at two waves, 7.32 at three or four, 7.14 at five and at
/// eight (each layer's best 6.99).
const SPLITK_MAX_WAVES: u64 = 5;

/// From this many waves of the unsplit 64×96 grid on (up to [`SPLITK_MAX_WAVES`]) split-K
/// weighs only slices of at least [`SPLITK_LONG_SLICE_MIN_K`] of K: such a grid already keeps
/// every multiprocessor busy, so the slices gain only a fuller last wave, and short slices pay
/// their partial sums' stores and the reduction over too little work. On the same H200 sweep
/// slices of 128 (K = 512 in 4) ran 1.06–1.12× slower than the unsplit kernel on four 1×1
/// layers of 512 input channels (N = 8: 275–294 tiles), where slices of 256–576 won
/// 1.10–1.29× on eight layers of K = 1024–2304.
const SPLITK_LONG_SLICES_FROM_WAVES: u64 = 2;
/// See [`SPLITK_LONG_SLICES_FROM_WAVES`].
const SPLITK_LONG_SLICE_MIN_K: u64 = 256;

/// Whether split-K's estimate counts a config's partial sums (`4 B × slices × outputs`, the
/// whole batch) at [`SPLITK_PASS_BANDWIDTH_SHARE`]: where they fit half the device's L2 cache
/// (the other half left to the input and weights the slices stream through it). Past that
/// they count at [`PASS_BANDWIDTH_SHARE`]. This is a bound fitted to measured picks, not the
/// cache's behaviour: over 339 runs of the FMA kernels on an H200 (N = 8 and 32; BENCHMARKS,
/// "Split-K on grids of up to five waves (H200)") a least-squares fit of the
/// measured times put the partial sums' traffic at about 0.9 of the declared bandwidth
/// whether or not they fit, so the on-chip share undercounts every split's traffic; it
/// survives because the unsplit estimate is as optimistic on the same small grids, and the
/// two errors cancel while the traffic is small. Where it is not — ResNet-50's 2048→512 1×1
/// layer at N = 32, 16 slices' 49 MiB — the bound moves the pick (0.178 ms in 16 slices, 0.149
/// in 4, 0.141 in 2).
fn splitk_partials_counted_small(rates: &DeclaredRates, slices: u32, outputs: f64) -> bool {
    4.0 * slices as f64 * outputs <= rates.l2_mib as f64 * (1 << 20) as f64 / 2.0
}

/// What the split-K family would run and its estimated time.
struct SplitEstimate {
    cfg: splitk::SplitConfig,
    tiles: u64,
    seconds: f64,
}

/// The split-K family's best config by estimate on a GPU of these rates: for each config of
/// its sweep that divides the input channels and fits the device, the sliced problem's padded
/// work (`S` groups of `C/S` input channels, each writing every output) in whole waves at
/// [`F32_SIMT_EFFICIENCY`] of the fp32 rate, each tile at its [`SPLITK_TILE_RATES`] rate, plus
/// the partial sums' bytes (`4 B × (2·S + 1) × outputs`) at [`SPLITK_PASS_BANDWIDTH_SHARE`]
/// of the bandwidth where they fit half the L2 cache ([`splitk_partials_counted_small`]), else at
/// [`PASS_BANDWIDTH_SHARE`], and the reduction's dispatch, plus the conversion passes where the
/// tensors are not NCHW f32 (`converted`). `None` on CPU adapters and GPUs without declared
/// rates (whose multiprocessors, which decide when a grid is small, are not known), where
/// the grid fills [`SPLITK_MAX_WAVES`] waves unsplit, and where no config fits (its partial
/// sums included, [`scratch_fits`]); from [`SPLITK_LONG_SLICES_FROM_WAVES`] waves on, slices
/// shorter than [`SPLITK_LONG_SLICE_MIN_K`] are not weighed.
fn splitk_estimate(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    converted: bool,
    rates: &DeclaredRates,
) -> Option<SplitEstimate> {
    if caps.is_cpu() || caps.declared_rates().is_none() {
        return None;
    }
    let k = problem.spec.k_total() as u64;
    let fill = rates.multiprocessors as u64;
    let (unsplit_tiles, _) = tiles_and_work(problem, k, FMA_GPU_BLOCK);
    if unsplit_tiles >= SPLITK_MAX_WAVES * fill {
        return None;
    }
    let rate_of = |tile: TileConfig| SPLITK_TILE_RATES.iter().find(|c| c.0 == tile).map_or(0.4, |c| c.1);
    let outputs = problem.output.len() as f64;
    let bandwidth = rates.bandwidth_gbs * 1e9;
    let passes = conversion_passes(problem, rates, converted);
    splitk::split_sweep()
        .into_iter()
        .filter_map(|cfg| {
            splitk::SPLITK.with(cfg).check(&problem.spec, caps).ok()?;
            if !scratch_fits(caps, 4 * cfg.slices as u64 * problem.output.per_image()) {
                return None;
            }
            let sliced = splitk::sliced_problem(problem, cfg.slices).ok()?;
            let k = sliced.spec.k_total() as u64;
            if unsplit_tiles >= SPLITK_LONG_SLICES_FROM_WAVES * fill && k < SPLITK_LONG_SLICE_MIN_K {
                return None;
            }
            let configs = [(cfg.tile, rate_of(cfg.tile))];
            let (tiles, _) = tiles_and_work(&sliced, k, cfg.tile);
            let work = wave_work(&sliced, k, &configs, rates.multiprocessors as u64);
            let share = match splitk_partials_counted_small(rates, cfg.slices, outputs) {
                true => SPLITK_PASS_BANDWIDTH_SHARE,
                false => PASS_BANDWIDTH_SHARE,
            };
            let seconds = seconds_at(2.0 * work, rates.fp32_tflops, F32_SIMT_EFFICIENCY)
                + 4.0 * (2 * cfg.slices as u64 + 1) as f64 * outputs / (bandwidth * share)
                + SPLITK_PASS_SECONDS
                + passes;
            Some(SplitEstimate { cfg, tiles, seconds })
        })
        .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
}

/// The split-K rule: f32 on a GPU with the input shape known, where rules 4 and 5 did not take
/// the layer, runs the split-K family where its estimate ([`splitk_estimate`]) beats the FMA
/// kernels' ([`f32_fma_estimate`]): layers whose output grid is a few waves or less
/// ([`SPLITK_MAX_WAVES`]) and whose K is long (deep layers, most at small batch). GPUs in
/// the table of declared rates only. Returns the kernel and why, or `None`.
fn splitk_rule(caps: &DeviceCaps, problem: &ConvProblem, layout: Layout, converted: bool) -> Option<(Kernel, String)> {
    let rates = caps.declared_rates()?;
    let split = splitk_estimate(caps, problem, converted, &rates)?;
    let tiled = f32_fma_estimate(caps, problem, layout, &rates, 1.0);
    if tiled.is_some_and(|t| t <= split.seconds) {
        return None;
    }
    let against = tiled.map_or("no tiled config fits".to_string(), |t| format!("{:.3} ms unsplit", t * 1e3));
    Some((
        splitk::SPLITK.with(split.cfg),
        format!(
            "f32 on a GPU with the input shape known, K = {} over an output grid of few waves: split-K, \
             {} slices of {} input channels ({} workgroup tiles of {}x{}) and a reduction: {:.3} ms against {against}",
            problem.spec.k_total(),
            split.cfg.slices,
            problem.spec.in_channels / split.cfg.slices,
            split.tiles,
            split.cfg.tile.block_m,
            split.cfg.tile.block_n,
            split.seconds * 1e3
        ),
    ))
}

/// The tile config a dense f32 convolution starts from, by the kind of device, fitted to
/// measured sweeps: on GPUs `m64n96k16-t4x12-w4-s1` — over the 57 dense layers of ResNet-50,
/// MobileNetV2, VGG-16 and AlexNet on the H100 it came within 9 % of each layer's best
/// config (geometric mean; 45 % at worst) where the seed's config was 1.9× slower; on CPU
/// adapters `m64n64k16-t8x4-w4-s3`, the single config closest to each layer's best on
/// lavapipe (Mesa 22.3, 2 cores) over the 53 dense layers of MobileNetV2 and ResNet-50 at
/// batch 1 among eight of the sweep: 1.19× the best (geometric mean), where
/// `m64n64k16-t8x8-w2-s2`, fitted before on three shapes, was 1.82×. Returns the config
/// and why.
fn f32_tile(caps: &DeviceCaps) -> (crate::tile::TileConfig, &'static str) {
    use crate::tile::TileConfig as T;
    if caps.is_cpu() {
        (
            T::with_thread_tile(64, 64, 16, 8, 4, 3),
            "f32 on a CPU adapter: the tiled family's config fitted to CPU drivers (lavapipe)",
        )
    } else {
        (FMA_GPU_BLOCK, "f32 on a GPU: the tiled config closest to each layer's best over the measured networks")
    }
}

/// Workgroups that fill a large GPU about once (the H100 has 132 SMs, an RTX 4090 128):
/// below it a tile config's time is that of one wave, whatever its number of tiles.
const FILL_WORKGROUPS: u64 = 132;

/// Workgroups that keep a CPU driver's threads busy (fitted with the CPU shape rule on
/// lavapipe: 4 to 32 gave the same picks but on the smallest layers).
const CPU_FILL_WORKGROUPS: u64 = 16;

/// The workgroups that fill the device once: on CPU adapters [`CPU_FILL_WORKGROUPS`], else
/// its multiprocessors where its declared rates name them, else [`FILL_WORKGROUPS`].
fn fill_workgroups(caps: &DeviceCaps) -> u64 {
    if caps.is_cpu() {
        return CPU_FILL_WORKGROUPS;
    }
    caps.declared_rates().map_or(FILL_WORKGROUPS, |r| r.multiprocessors as u64)
}

/// The f32 shape rule's tile configs on GPUs and their relative rate per padded FMA, on
/// most layers and on 1×1 layers over more than [`tiled::ROWS_FASTEST_MAX_K`] input
/// channels per group (whose taps the kernel gathers fastest, see `GatherVariant`): the
/// dense default, a 128-row block with 8×8 register tiles (more reuse per load, but fewer,
/// larger tiles; on those 1×1 layers, whose output is as large as their work is small, it
/// kept the default's rate), a 64×32 block for layers of few output channels per group
/// (MobileNetV2's 16–32-channel projections, the 3→32 stem, ResNeXt-50's last grouped
/// layers: the wide blocks pad their columns 2–4×), and a 32×32 block for groups and grids
/// too small for the others. The first three were fitted to the H100's sweeps of the 76
/// dense layers of ResNet-50, ResNeXt-50, MobileNetV2, VGG-16 and AlexNet (with the vec4
/// output stores, four runs): picking by this rule came within 1 % of each layer's best of
/// the three (geometric mean; 5.5 % on the long 1×1 layers with one rate). The 64×32
/// block's rate was fitted on a later sweep of 67 of those layers with all four (and three
/// blocks left out: 128×16, 128×32, 256×64): picking among four came within 1.6 % of each
/// layer's best of the seven, against 6.4 % among three (worst layer 1.17× against 1.79×);
/// any rate from 0.45 to 0.7 gave the same picks. A 128×128 block is left out: it was at most
/// 4 % faster than the 128×64 one where it won (VGG-16's 128-channel layers at 112×112), and
/// rates that let it win there lost more elsewhere.
const F32_SHAPE_CONFIGS: [(TileConfig, f64, f64); 4] = [
    (FMA_GPU_BLOCK, 1.0, 1.0),
    (TALL_BLOCK, 0.8, 1.0),
    (NARROW_BLOCK, 0.6, 0.6),
    (TileConfig::with_thread_tile(32, 32, 32, 4, 4, 2), 0.4, 0.4),
];

/// The FMA kernels' block on GPUs: 64 rows by 96 output channels on 4 warps of 4×12 register
/// tiles ([`f32_tile`]), the reference of [`F32_SHAPE_CONFIGS`]' rates.
const FMA_GPU_BLOCK: TileConfig = TileConfig::with_thread_tile(64, 96, 16, 4, 12, 1);

/// The shape rule's 128-row block: 8×8 register tiles on 4 warps.
const TALL_BLOCK: TileConfig = TileConfig::with_thread_tile(128, 64, 8, 8, 8, 1);

/// The shape rule's 64×32 block, for few output channels per group.
const NARROW_BLOCK: TileConfig = TileConfig::with_thread_tile(64, 32, 16, 4, 4, 1);

/// The shape rule's block for 1×1 layers and its rate ([`F32_SHAPE_CONFIGS`]' scale): 64
/// rows by 128 output channels on 8 warps of 4×8 register tiles (half the accumulators of the
/// 128×64 block's 8×8 tiles, and twice the workgroups' warps). On the H100 (Vulkan
/// 580.159.04, f32, 2026-11-28, every dense layer of the five networks, the four configs of
/// [`F32_SHAPE_CONFIGS`] and this one timed in one call) it ran the 1×1 layers of 128 to 512
/// output channels at 28×28 and 56×56 1.08–1.24× faster than the rule's pick (ResNet-50's
/// l2.1x1.512-128: 0.122 → 0.098 ms) and every 3×3 layer 1.3–2.2× slower than the best of
/// the four, so the rule weighs it on 1×1 layers only. With it at 1.1 the rule's picks over
/// the 37 layers that run the FMA kernels there took 7.27 ms against 7.94 (7.16 for each
/// layer's best of the five); rates 0.9–1.2 (1.05–1.1 on the long 1×1 layers) made about
/// the same picks. Picking among the five on every dense layer, as on a device without
/// matrix units: 41.27 ms against 42.21, though 4 % to 20 % slower on four 1×1 layers of
/// 1024 or 2048 channels at 7×7 and 14×14, whose grids fill few waves.
const WIDE_1X1_BLOCK: (TileConfig, f64) = (TileConfig::with_thread_tile(64, 128, 8, 4, 8, 1), 1.1);

/// The same block with K steps of 16, in its place on 1×1 layers of at most
/// [`WIDE_1X1_SHORT_K_MAX`] input channels per group that fill whole steps: half the
/// barriers over so short a K. On the H100 (f32, 2026-11-28, one sweep with both) it ran the
/// six such layers of ResNet-50 and ResNeXt-50 (64 and 128 channels) 1.04–1.07× faster than
/// K steps of 8, and every 1×1 layer of 256 to 512 channels 1.02–1.10× slower; at 160
/// channels (MobileNetV2's b6.ex) they tied, at 24 (padded to 32) it lost by 1.16×.
const WIDE_1X1_SHORT_K_BLOCK: TileConfig = TileConfig::with_thread_tile(64, 128, 16, 4, 8, 1);
/// See [`WIDE_1X1_SHORT_K_BLOCK`].
const WIDE_1X1_SHORT_K_MAX: u32 = 128;

/// The 64×128 block for a 1×1 layer ([`WIDE_1X1_BLOCK`], [`WIDE_1X1_SHORT_K_BLOCK`]).
fn wide_1x1_block(spec: &Conv2dSpec) -> (TileConfig, f64) {
    let k = spec.in_channels_per_group();
    match k <= WIDE_1X1_SHORT_K_MAX && k.is_multiple_of(WIDE_1X1_SHORT_K_BLOCK.block_k) {
        true => (WIDE_1X1_SHORT_K_BLOCK, WIDE_1X1_BLOCK.1),
        false => WIDE_1X1_BLOCK,
    }
}

/// The shape rule's configs that the FMA estimate of the f32 matrix, split-K and Winograd
/// rules counts ([`f32_fma_estimate`]): those rule 5's constants were fitted against,
/// [`F32_SHAPE_CONFIGS`] rated for the spec without [`NARROW_BLOCK`] and without the 64×128
/// blocks of 1×1 layers ([`wide_1x1_block`]). Counting the 64×32 block lowered the FMA
/// estimate of small grids and moved layers never measured that way off the matrix units
/// (ResNet-50's 64→64 3×3 layer at 56×56, batch 1), and the 64×128 block lost to the matrix
/// path on all but one of the 1×1 layers rule 5 sends there on the H100 (0.52–0.92×), so
/// the matrix rule decides as fitted and, where it declines, the shape rule may still pick
/// either.
fn matrix_rule_fma_configs(spec: &Conv2dSpec) -> Vec<(TileConfig, f64)> {
    rated_shape_configs(spec).into_iter().filter(|(tile, _)| *tile != NARROW_BLOCK).collect()
}

/// The f32 shape rule's tile configs on CPU adapters and their relative rate per padded FMA:
/// the CPU default ([`f32_tile`]), a 64×32 block for few output channels and a 32×64 block
/// (the seed's) for small grids of many channels. Fitted on lavapipe (Mesa 22.3, LLVM 15,
/// 2 cores) over the 53 dense layers of MobileNetV2 and ResNet-50 at batch 1, eight configs
/// of the sweep timed on each: picking by this rule came within 6.6 % of each layer's best
/// (geometric mean; 1.81× on the worst, a 7×7 layer of 25 tiles), against 1.19× for the
/// default alone; rates from 0.5 to 0.8 for the other two gave the same picks.
/// Under WebGPU's default limits (16 KiB of workgroup memory) only the 64×32 block fits; on
/// the same lavapipe tables it was 1.26× each layer's best alone (geometric mean), where
/// `m128n64k8-t8x8-w4-s1`, the sweep's first config that fits there, was 2.10×.
const F32_CPU_SHAPE_CONFIGS: [(TileConfig, f64); 3] = [
    (TileConfig::with_thread_tile(64, 64, 16, 8, 4, 3), 1.0),
    (NARROW_BLOCK, 0.6),
    (TileConfig::with_thread_tile(32, 64, 32, 4, 4, 2), 0.7),
];

/// The most GEMM rows (M: the output positions, or a Winograd GEMM's rows per component,
/// N·⌈OH/m⌉·⌈OW/m⌉) at which CPU adapters rate the 32×64 block of [`F32_CPU_SHAPE_CONFIGS`] as
/// the 64×64 one and try it first ([`cpu_shape_configs`]): both pad such a GEMM to the same
/// rows (64 or 128), and the smaller block runs twice the workgroups. On lavapipe (Mesa 22.3.6, 2 cores, batch
/// 1, 2026-11-28, interleaved rounds) it ran Winograd GEMMs of 16–49 rows (AlexNet's 13×13
/// layers and conv2, ResNet-50's 14×14 and 28×28 layers, VGG-16's 28×28 and 14×14 ones, two
/// runs) 1.11–1.22× faster than the 64×64 block, and those of 196 and 784 rows 1.10–1.25×
/// slower; and the tiled kernel's 7×7 layers at batch 1 (M = 49: ResNet-50's l4 1×1 and
/// stride-2 layers, MobileNetV2's 7×7 expansions, projections and head) 1.11–2.3× faster in
/// all eight (b6.ex.160-960 4.03 ms against 7.92, l4.1x1.512-2048 25.1 against 33.3) and five
/// of them at batch 2 (M = 98, both padded to 128) 1.11–1.76×, the 64×64 block 1.14–1.16×
/// faster at M = 196 (MobileNetV2's 14×14 expansions).
const CPU_SMALL_GEMM_ROWS: u64 = 128;

/// [`F32_CPU_SHAPE_CONFIGS`] for a GEMM of `rows` rows (per group or component), with its
/// 32×64 block first at the 64×64 block's rate where the GEMM has at most
/// [`CPU_SMALL_GEMM_ROWS`].
fn cpu_shape_configs(rows: u64) -> Vec<(TileConfig, f64)> {
    let [wide, narrow, small] = F32_CPU_SHAPE_CONFIGS;
    match rows <= CPU_SMALL_GEMM_ROWS {
        true => vec![(small.0, wide.1), wide, narrow],
        false => F32_CPU_SHAPE_CONFIGS.to_vec(),
    }
}

/// [`F32_SHAPE_CONFIGS`] with the rates for the spec.
fn rated_shape_configs(spec: &Conv2dSpec) -> [(TileConfig, f64); 4] {
    let long_pointwise = spec.kernel == [1, 1] && spec.in_channels_per_group() > tiled::ROWS_FASTEST_MAX_K;
    F32_SHAPE_CONFIGS
        .map(|(tile, rate, long_pointwise_rate)| (tile, if long_pointwise { long_pointwise_rate } else { rate }))
}

/// [`F32_SHAPE_CONFIGS`] with the rates for the spec ([`rated_shape_configs`]), and the
/// 64×128 block on 1×1 layers ([`wide_1x1_block`]).
fn f32_shape_configs(spec: &Conv2dSpec) -> Vec<(TileConfig, f64)> {
    let wide = (spec.kernel == [1, 1]).then(|| wide_1x1_block(spec));
    rated_shape_configs(spec).into_iter().chain(wide).collect()
}

/// Grids of fewer than this many waves (workgroup tiles per multiprocessor) run the shape
/// rule's blocks at their [`SMALL_GRID_RATES`] ([`on_small_grids`]).
const SMALL_GRID_WAVES: u64 = 2;

/// The factor on a block's rate ([`F32_SHAPE_CONFIGS`], [`wide_1x1_block`]) where its grid is
/// under [`SMALL_GRID_WAVES`] waves: with a tile or two per multiprocessor, the blocks whose
/// register tiles or warps allow one workgroup per multiprocessor leave their loads unhidden,
/// which their rates, fitted on fuller grids, do not count. From a fit (relative least
/// squares, time against the estimate's padded work in whole waves plus a fixed cost) of
/// each block's runs on an H200 (2026-11-28, 1×1 and 3×3 layers of ResNet-50, ResNeXt-50 and
/// MobileNetV2 at N = 8 and 32): under two waves the 64×96 block
/// took 1.14× its large-grid time per unit of work, the 64×128 blocks 1.38× (K steps of 8)
/// and 1.10× (16), the 128×64 block 1.40×; from six waves on all four within 5 % of 1. With
/// these factors the shape rule's picks over the 72 layers timed with all four blocks took
/// 9.035 ms against 9.085 (each layer's best 8.793). Every pick it moves on the H200 over the
/// five networks at their batches, 8 and 1 (13 layers) was then timed against the blocks:
/// each ran the fastest of the five, or within 0.3 % of it (MobileNetV2's b6.ex.160-960 at
/// N = 32 on the 64×96 block 0.0314 ms against the 64×128 block's 0.0340, ResNet-50's stem at
/// batch 1 on the 64×32 block 0.0169 against 0.0220). Blocks not listed keep their rates.
const SMALL_GRID_RATES: [(TileConfig, f64); 4] =
    [(FMA_GPU_BLOCK, 0.88), (WIDE_1X1_BLOCK.0, 0.72), (WIDE_1X1_SHORT_K_BLOCK, 0.91), (TALL_BLOCK, 0.72)];

/// `configs` (tile, rate) with each rate times its [`SMALL_GRID_RATES`] factor where the
/// block's grid over the problem is under [`SMALL_GRID_WAVES`] waves of `fill` workgroups.
fn on_small_grids(problem: &ConvProblem, configs: Vec<(TileConfig, f64)>, fill: u64) -> Vec<(TileConfig, f64)> {
    let k = problem.spec.k_total() as u64;
    configs
        .into_iter()
        .map(|(tile, rate)| {
            let (tiles, _) = tiles_and_work(problem, k, tile);
            let factor = SMALL_GRID_RATES.iter().find(|c| c.0 == tile).map_or(1.0, |c| c.1);
            match tiles < SMALL_GRID_WAVES * fill {
                true => (tile, rate * factor),
                false => (tile, rate),
            }
        })
        .collect()
}

/// The f32 shape rule, where the input shape is known (`Conv2dOptions::tuning_key_input`):
/// among [`F32_SHAPE_CONFIGS`] on GPUs (and the 64×128 block on 1×1 layers,
/// [`wide_1x1_block`]), [`F32_CPU_SHAPE_CONFIGS`] on CPU adapters, the
/// config with the least estimated time, `max(tiles, fill) × padded FMAs per tile / rate`
/// ([`fill_workgroups`]) — padding of M, N and K to whole blocks, and grids that leave the
/// device part empty, both counted. Returns the kernel and why, or `None` where no config of
/// the rule fits the device.
fn f32_shape_rule(caps: &DeviceCaps, problem: &ConvProblem) -> Option<(Kernel, String)> {
    let spec = &problem.spec;
    let m = problem.output.n as u64 * problem.output.h as u64 * problem.output.w as u64;
    let (n, k) = (spec.out_channels_per_group() as u64, spec.k_total() as u64);
    let (configs, device) = match caps.is_cpu() {
        true => (cpu_shape_configs(m), "a CPU adapter"),
        false => (on_small_grids(problem, f32_shape_configs(spec), fill_workgroups(caps)), "a GPU"),
    };
    let (kernel, tiles, tile, _) =
        estimated_best(caps, problem, k, &configs, |t| tiled::TILED.reference().with_tile(t))?;
    Some((
        kernel,
        format!(
            "f32 on {device} with the input shape known: the shape rule's tile config with the least \
             estimated time ({tiles} workgroup tiles of {}x{} over M = {m}, N = {n} per group, K = {k})",
            tile.block_m, tile.block_n
        ),
    ))
}

/// The most output channels for which the pointwise rule takes a layer.
pub const POINTWISE_MAX_OUT_CHANNELS: u32 = 64;

/// Invocations per multiprocessor below which the pointwise kernel's grid, its slices
/// counted, leaves the device too empty for the rule (two subgroups of 32).
const POINTWISE_MIN_INVOCATIONS_PER_MULTIPROCESSOR: u64 = 64;

/// The pointwise rule's slices of the input channels by the invocations per multiprocessor of
/// one slice (first that the grid reaches; below all, 4), where the layer has at least
/// [`POINTWISE_MIN_SLICED_CHANNELS`] input channels. On the H100 (Vulkan 580.159.04, 2026-11-28, MobileNetV2's
/// narrow 1×1 layers at N = 32, 8 and 1) one slice ran fastest from about 380 invocations per
/// multiprocessor (its 56×56 and 112×112 layers at N = 32; two slices 1.3–1.5× slower
/// there), two at 95–190 (its 28×28 and 14×14 projections at N = 32: 1.03–1.10× faster than
/// one), four at 18–48 (14×14 at N = 8: 1.2× faster than split-K; 56×56 at N = 1: 1.06–1.17×
/// faster than the tiled kernel).
const POINTWISE_SLICES: [(u64, u32); 2] = [(256, 1), (64, 2)];

/// The fewest input channels the pointwise rule splits into slices: on the H100 (N = 1)
/// ResNet-50's 64→64 layer at 56×56 ran 6 % slower in 2 slices of 32 (0.0097 ms) than on the
/// tiled kernel (0.0092), MobileNetV2's 32→16 at 112×112 4–6 % slower in 2 of 16, and its
/// 96→24 at 56×56 6 % faster in 4 of 24.
const POINTWISE_MIN_SLICED_CHANNELS: u32 = 96;

/// The shortest K (input channels) at which the rule's wider block (16 output channels, 128
/// invocations) is weighed: it halves the blocks that each reread the input.
const POINTWISE_WIDE_MIN_K: u32 = 128;

/// The pointwise rule's configs on CPU adapters, in order of preference: 16 output channels
/// on 64 invocations, else (where a block's weights do not fit workgroup memory) 8. On lavapipe (Mesa 22.3.6, 2 cores, nothing else running,
/// 2026-11-28 04:39–04:46 UTC, batch 1, `wgconv bench --model NAME --precision f32 --runs 5
/// --configs auto,<the eight tiled configs of the CPU tables>,<three pointwise configs>`) the
/// family ran every 1×1 layer of MobileNetV2 and ResNet-50 of at least 14×14 positions 1.55–4.4×
/// faster than the best tiled config, 16 channels fastest or within 4 % on all but the 32→16
/// layer at 112×112, whose time for them two runs gave as 2.13 and 1.05 ms (8 channels: 1.39
/// in both); the 7×7 layers 1.5–1.8× slower (49 positions leave most of a workgroup's
/// invocations idle, which a CPU driver still runs).
const POINTWISE_CPU_CONFIGS: [pointwise::PointwiseConfig; 2] =
    [pointwise::PointwiseConfig::new(16, 64), pointwise::PointwiseConfig::new(8, 64)];

/// The fewest positions (per batch: N·OH·OW) at which the pointwise rule takes a layer on CPU
/// adapters (see [`POINTWISE_CPU_CONFIGS`]).
const POINTWISE_CPU_MIN_POSITIONS: u64 = 128;

/// The pointwise rule: f32 on NCHW f32 tensors with the input shape known, where rules 4 and
/// 5 did not take the layer (before split-K, whose small grids it fills with slices of the
/// input channels instead), on a GPU: ungrouped unpadded 1×1 convolutions at stride 1 of at
/// most [`POINTWISE_MAX_OUT_CHANNELS`] output channels run the `pointwise` family, where its
/// grid, its slices counted, holds at least [`POINTWISE_MIN_INVOCATIONS_PER_MULTIPROCESSOR`]
/// invocations per multiprocessor ([`fill_workgroups`]). Such layers move many bytes per
/// multiply-add; the tiled kernels stage the input through workgroup memory and pad 16–64
/// output channels to blocks of 32–128, where the pointwise kernel streams the input once
/// into sums held in registers. The config: 8 output channels, on 64 invocations in one slice
/// or 128 in 2 or 4 ([`POINTWISE_SLICES`]); 16 output channels on 128 invocations where K is
/// at least [`POINTWISE_WIDE_MIN_K`] and that grid still holds 512 invocations per
/// multiprocessor (fewer blocks reread the input). On the H100 (Vulkan 580.159.04, f32,
/// N = 32, 2026-11-28, seven configs of the family on every 1×1 layer of ResNet-50,
/// ResNeXt-50 and MobileNetV2) the family in one slice ran each of the 9 layers this rule
/// takes there 1.04–1.70× faster than the shape rule's tile (MobileNetV2's 144→24 projection
/// at 56×56: 0.0685 → 0.0403 ms), within 5 % of the family's best on each; on wider layers it
/// won on 3 of 35 (at most 1.17×) and lost up to 5× on the 7×7 ones (each block rereads the
/// input). On CPU adapters: every such layer of at least [`POINTWISE_CPU_MIN_POSITIONS`]
/// positions whose block's weights fit ([`POINTWISE_CPU_CONFIGS`]). Returns the kernel
/// and why, or `None`.
fn pointwise_rule(caps: &DeviceCaps, problem: &ConvProblem) -> Option<(Kernel, String)> {
    let spec = &problem.spec;
    if !pointwise::runs(spec) {
        return None;
    }
    let positions = problem.output.len() / spec.out_channels as u64;
    if caps.is_cpu() {
        if positions < POINTWISE_CPU_MIN_POSITIONS {
            return None;
        }
        let kernel = POINTWISE_CPU_CONFIGS
            .iter()
            .map(|&cfg| pointwise::POINTWISE.with(cfg))
            .find(|k| k.check(spec, caps).is_ok())?;
        return Some((
            kernel.clone(),
            format!(
                "f32 on a CPU adapter with the input shape known, a 1x1 layer at stride 1 over {positions} positions: \
                 the pointwise kernel ({}, whose block's weights fit workgroup memory)",
                kernel.config_name()
            ),
        ));
    }
    if spec.out_channels > POINTWISE_MAX_OUT_CHANNELS {
        return None;
    }
    let invocations = |c: u32| positions.div_ceil(pointwise::POSITIONS as u64) * spec.out_channels.div_ceil(c) as u64;
    let multiprocessors = fill_workgroups(caps);
    // Invocations per multiprocessor of one slice of 8 output channels each.
    let per_multiprocessor = invocations(8) / multiprocessors;
    let most_slices = if spec.in_channels >= POINTWISE_MIN_SLICED_CHANNELS { 4 } else { 1 };
    let slices = POINTWISE_SLICES
        .iter()
        .find(|&&(least, _)| per_multiprocessor >= least)
        .map_or(4, |&(_, slices)| slices)
        .min(most_slices);
    if per_multiprocessor * (slices as u64) < POINTWISE_MIN_INVOCATIONS_PER_MULTIPROCESSOR {
        return None;
    }
    let wide = spec.in_channels >= POINTWISE_WIDE_MIN_K && invocations(16) >= 512 * multiprocessors;
    let cfg = match (wide, slices) {
        (true, _) => pointwise::PointwiseConfig::new(16, 128),
        (false, 1) => pointwise::PointwiseConfig::REFERENCE,
        (false, slices) => pointwise::PointwiseConfig { c: 8, slices, workgroup: 128 },
    };
    let kernel = pointwise::POINTWISE.with(cfg);
    kernel.check(spec, caps).ok()?;
    Some((
        kernel,
        format!(
            "f32 on a GPU with the input shape known, a 1x1 layer of {} output channels over {positions} positions: \
             the pointwise kernel, {} output channels per invocation, the input channels in {} slice(s)",
            spec.out_channels, cfg.c, cfg.slices
        ),
    ))
}

/// The fewest input channels for which the Winograd rule takes a layer: the GEMM of each of
/// its components sums over the input channels, and shorter sums leave the tiled
/// kernel's K steps mostly padding (on lavapipe, 56×56 at batch 1: 16 and 32 channels ran
/// 1.4× faster by Winograd, 8 channels 1.5× slower, 3 channels 3× slower).
pub const WINOGRAD_MIN_CHANNELS: u32 = 16;

/// The most bytes of transformed input and products per image for which the Winograd rule
/// takes a layer on CPU adapters: on lavapipe (2026-11-27), VGG-16's 64-channel layer at
/// 224×224 (102 MB per image by F(2×2, 3×3)) ran 1.6× slower by Winograd than by the tiled
/// kernel, its 128-channel one at 112×112 (51 MB) 1.5× faster; the transforms' traffic, 4×
/// the input's and the output's, then outgrows what the arithmetic saves. (On 2026-11-28,
/// with nothing else running, F(2×2, 3×3) ran the 224×224 layer 1.5× faster, 316 against
/// 473 ms: the limit may be conservative; F(4×4, 3×3)'s 58 MB fit it, 2.5× faster.)
pub const WINOGRAD_MAX_SCRATCH_PER_IMAGE: u64 = 64 << 20;

/// The share of the declared bandwidth at which the Winograd families' transforms move their
/// bytes (the input read and its transforms written, the products written and read, the
/// output written: 4 B × (input + 2 × transformed input + 2 × products + output)):
/// fitted to the H100's f32 sweeps of the 3×3 stride-1 layers of ResNet-50, AlexNet and
/// VGG-16, where the GEMM's reads and writes of the transforms partly hit the L2 cache.
const WINOGRAD_TRANSFORM_BANDWIDTH_SHARE: f64 = 0.9;

/// Whether a family's scratch of `bytes_per_image` per image fits one binding of the device
/// with room for the windows' alignment (and the kernels' i32 element arithmetic): where it
/// does not, planning would refuse the input (`Error::TooLarge`) where the tiled kernel runs it.
fn scratch_fits(caps: &DeviceCaps, bytes_per_image: u64) -> bool {
    bytes_per_image <= caps.limits.max_storage_buffer_binding_size.min(4 * (i32::MAX as u64)) / 2
}

/// Rates assumed for a GPU not in [`crate::caps::DECLARED_RATES`]. Only their balance counts
/// for the Winograd rule, and a higher one favours it less (the transforms trade arithmetic
/// for bytes): 80 FLOP per byte of bandwidth, about the highest of current GPUs (an RTX
/// 4090's 82, an H100's 20, integrated ones' 20–40), so the rule takes a layer there only
/// where it would win even on such a device. The matrix rate is never used for them (rule 5
/// needs listed rates).
const UNLISTED_GPU_RATES: DeclaredRates = DeclaredRates {
    fp32_tflops: 80.0,
    f16_matrix_tflops: 0.0,
    bandwidth_gbs: 1000.0,
    multiprocessors: FILL_WORKGROUPS as u32,
    l2_mib: 0,
};

/// A Winograd algorithm's estimate on a GPU ([`winograd_rule`]): its kernel, algorithm and
/// GEMM tile, and its time.
struct WinogradEstimate {
    seconds: f64,
    kernel: Kernel,
    alg: &'static winograd::Minimal,
    /// The GEMM's workgroup tiles.
    tiles: u64,
    tile: TileConfig,
    /// Whether the GEMM runs on the matrix units (`coop-winograd-f32`).
    matrix_gemm: bool,
}

/// A Winograd algorithm [`winograd_rule`] weighs: the family that runs it, where it is
/// weighed against the matrix path (where that path may run the layer), and the factor on its
/// GEMM's estimated work (CPU adapters weigh the same algorithms by their GEMM's work alone).
#[derive(Clone, Copy)]
struct WinogradCandidate {
    family: &'static winograd::Winograd,
    alg: &'static winograd::Minimal,
    /// (input channels, GEMM rows per component N·⌈OH/m⌉·⌈OW/m⌉): weighed against the matrix
    /// path where a layer reaches both of any pair.
    against_matrix_from: &'static [(u32, u64)],
    work_factor: f64,
}

impl WinogradCandidate {
    /// Whether [`winograd_rule`] weighs it against the matrix path for `spec` with a GEMM of
    /// `rows` rows per component.
    fn weighed_against_matrix(&self, spec: &Conv2dSpec, rows: u64) -> bool {
        self.against_matrix_from
            .iter()
            .any(|&(channels, least_rows)| spec.in_channels >= channels && rows >= least_rows)
    }
}

/// The algorithms [`winograd_rule`] weighs.
///
/// F(4×4, 3×3) at [`WINOGRAD_F4_WORK_FACTOR`], against the matrix path from
/// [`WINOGRAD_F4_MIN_CHANNELS`], from [`WINOGRAD_F4_MID_CHANNELS`] at
/// [`WINOGRAD_F4_MID_MIN_ROWS`] GEMM rows, or from [`WINOGRAD_F4_MIN_ROWS`] rows. The channel
/// floor was fitted on the H100 (Vulkan 580.159.04, 2026-11-28) over the
/// 3×3 stride-1 layers of ResNet-50 (N = 32, 8, 1), AlexNet (N = 128) and VGG-16 (N = 16),
/// each family at each of the shape rule's tiles, with and without the matrix units. From 256
/// channels its time came within 0.89–1.26× of the estimate at that factor (geometric mean
/// 1.00, batch 1 aside); below, 1.04–1.64× — ResNet-50's 64- and 128-channel layers at N = 32
/// ran it no faster than F(2×2, 3×3), where the estimate had it 1.5× faster and ahead of the
/// matrix path, which ran them 1.15–1.4× faster still. Any factor from 1.1 to 1.4 made the
/// same decisions over that sweep (it was fitted at 1.15; see [`WINOGRAD_F4_WORK_FACTOR`] for
/// why it is 1.1 now). Without the matrix path (FMA-only devices, such as an RTX 4090 for
/// f32) the estimate's error matters less against F(2×2, 3×3) and the tiled kernel: taking
/// F(4×4, 3×3) from 16 channels there ran VGG-16's 64–128-channel layers 1.20–1.36× and
/// ResNet-50's 56×56 one 1.07× faster (H100, matrix units off, through the rule), and lost
/// 0.87× on ResNet-50's 28×28 layer at N = 32 (0.93× at batch 1, in the sweep). Those
/// 28×28 layers' 7×7 tiles per image were stored by scalar stores then; padded to whole vec4s
/// ([`crate::families::winograd::tile_stride`]) their 128-channel one ran F(4×4, 3×3) ahead of
/// both on an H200, hence [`WINOGRAD_F4_MID_CHANNELS`].
///
/// F(4×4, 5×5) at the same factor as its 4×4 tiles' sibling, from [`WINOGRAD_MIN_CHANNELS`]
/// (it takes at most 128: `winograd::Minimal::f32_channels`), with no row floor: measured on
/// one layer only, AlexNet's 96-channel conv2 (H200), where it beat the matrix path at 49,
/// 1,568 and 6,272 GEMM rows (batch 1, 32, 128); 5×5 layers of 16–64 channels are unmeasured.
static WINOGRAD_CANDIDATES: [WinogradCandidate; 4] = [
    WinogradCandidate {
        family: &winograd::WINOGRAD,
        alg: &winograd::minimal::F2X2_3X3,
        against_matrix_from: &[(WINOGRAD_MIN_CHANNELS, 0)],
        work_factor: 1.0,
    },
    WinogradCandidate {
        family: &winograd::WINOGRAD,
        alg: &winograd::minimal::F2X2_5X5,
        against_matrix_from: &[(WINOGRAD_MIN_CHANNELS, 0)],
        work_factor: 1.0,
    },
    WinogradCandidate {
        family: &winograd::WINOGRAD_F4,
        alg: &winograd::minimal::F4X4_3X3,
        against_matrix_from: &[
            (WINOGRAD_F4_MIN_CHANNELS, 0),
            (WINOGRAD_F4_MID_CHANNELS, WINOGRAD_F4_MID_MIN_ROWS),
            (WINOGRAD_MIN_CHANNELS, WINOGRAD_F4_MIN_ROWS),
        ],
        work_factor: WINOGRAD_F4_WORK_FACTOR,
    },
    WinogradCandidate {
        family: &winograd::WINOGRAD_F4,
        alg: &winograd::minimal::F4X4_5X5,
        against_matrix_from: &[(WINOGRAD_MIN_CHANNELS, 0)],
        work_factor: WINOGRAD_F4_WORK_FACTOR,
    },
];

/// The fewest input channels from which the Winograd rule (README, "Which kernel runs", rule 4)
/// weighs F(4×4, 3×3) on any grid where the matrix path may run the layer (elsewhere
/// [`WINOGRAD_MIN_CHANNELS`]; below, only on the GEMMs of [`WINOGRAD_F4_MID_CHANNELS`] and
/// [`WINOGRAD_F4_MIN_ROWS`]): below, its time strayed 1.0–1.6× from the rule's estimate, which
/// decided against the matrix path wrongly.
pub const WINOGRAD_F4_MIN_CHANNELS: u32 = 256;

/// The GEMM rows per component (N·⌈OH/4⌉·⌈OW/4⌉) from which the Winograd rule weighs
/// F(4×4, 3×3) against the matrix path below [`WINOGRAD_F4_MID_CHANNELS`] too: on large
/// GEMMs its estimate held there. On an H200 (Vulkan 580.159.04, 2026-11-28, F(4×4, 3×3) at
/// each of five GEMM tiles) it ran VGG-16's 64→64 layer at 224×224 (50,176 rows) in 0.93–0.96×
/// its estimate and 1.22× faster than the matrix path, its 128→128 one at 112×112 (12,544
/// rows) in 0.93× and 1.40× faster, and ResNet-50's 64→64 layer at 56×56, N = 32 (6,272
/// rows), in 1.17× its estimate and 1.06× faster; at 1,568 rows (its 128-channel layer at
/// 28×28, N = 32, and its 64-channel one at N = 8) 1.4–1.6× its estimate, slower than the
/// matrix path or F(2×2, 3×3) (the 28×28 layer with its 7×7 tiles per image stored by scalar
/// stores, before [`WINOGRAD_F4_MID_CHANNELS`]). At 3,136 rows (VGG-16's 128→256 layer at 56×56, N = 16; H200,
/// 2026-11-28, the 64×128 tile) it ran 1.38× faster than the matrix path (0.327 ms against
/// 0.451), hence the floor just below.
pub const WINOGRAD_F4_MIN_ROWS: u64 = 3072;

/// From this many input channels (below [`WINOGRAD_F4_MIN_CHANNELS`]) the Winograd rule
/// weighs F(4×4, 3×3) against the matrix path from [`WINOGRAD_F4_MID_MIN_ROWS`] GEMM rows
/// per component. On an H200 (Vulkan 580.159.04, 2026-11-28, each image's 7×7 tiles padded
/// to whole vec4s) ResNet-50's 128-channel layer at 28×28 ran by F(4×4, 3×3) in 0.1256 ms
/// at N = 32 (1568 rows) and 0.0392 at N = 8 (392 rows), against F(2×2, 3×3)'s 0.141 and
/// 0.0505 and the matrix path's 0.165 and 0.064; at N = 1 (49 rows) 0.0249 against F(2×2,
/// 3×3)'s 0.0222–0.0236. Its 64-channel layer at 56×56, N = 8 (1568 rows) stays on the
/// matrix path (0.0519 ms against F(4×4, 3×3)'s 0.0561).
pub const WINOGRAD_F4_MID_CHANNELS: u32 = 128;

/// See [`WINOGRAD_F4_MID_CHANNELS`].
pub const WINOGRAD_F4_MID_MIN_ROWS: u64 = 392;

/// The factor on the 4×4 tiles' GEMM work in [`winograd_rule`]'s estimate, against the 2×2
/// tiles' 1 ([`WINOGRAD_CANDIDATES`]): their passes ran slower per estimated FLOP and byte.
/// Fitted at 1.15 on the H100 (any of 1.1–1.4 made the same decisions over its sweep); 1.1 since
/// F(4×4, 3×3)'s output transform left local memory (its layers 1.02–1.08× faster on an
/// H200), which moves one decision on the H200's rates — AlexNet's conv5 off the matrix path
/// (swept on the H200: 0.574 ms against 0.641) — and one on the H100's, AlexNet's conv4 (a
/// tie in the H100's sweep before that fix: 0.97×).
const WINOGRAD_F4_WORK_FACTOR: f64 = 1.1;

/// The GEMM tiles [`winograd_estimate`] weighs, with their rates: [`F32_SHAPE_CONFIGS`], and
/// over at most [`WIDE_1X1_SHORT_K_MAX`] input channels in whole K steps of 16 the 1×1
/// layers' 64×128 block ([`WIDE_1X1_SHORT_K_BLOCK`] at [`WIDE_1X1_BLOCK`]'s rate): the GEMM
/// is a 1×1 convolution of n² groups.
fn winograd_gemm_configs(spec: &Conv2dSpec) -> Vec<(TileConfig, f64)> {
    let c = spec.in_channels;
    let short_k = c <= WIDE_1X1_SHORT_K_MAX && c.is_multiple_of(WIDE_1X1_SHORT_K_BLOCK.block_k);
    let wide = short_k.then_some((WIDE_1X1_SHORT_K_BLOCK, WIDE_1X1_BLOCK.1));
    F32_SHAPE_CONFIGS.map(|(tile, rate, _)| (tile, rate)).into_iter().chain(wide).collect()
}

/// A Winograd algorithm's kernel for a problem ([`winograd_estimate`], [`winograd_on_cpu`]):
/// the algorithm, the GEMM's problem, and the GEMM tile of `configs` with the least estimated
/// work that the device accepts, with its workgroup tiles and that work; `None` where the
/// candidate's algorithm is not the one its family runs the spec by, the family refuses the
/// spec, or no tile fits.
struct WinogradGemm {
    alg: &'static winograd::Minimal,
    gemm: ConvProblem,
    kernel: Kernel,
    tiles: u64,
    tile: TileConfig,
    cost: f64,
}

fn winograd_gemm(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    candidate: &WinogradCandidate,
    configs: &[(TileConfig, f64)],
) -> Option<WinogradGemm> {
    let spec = &problem.spec;
    let family = candidate.family;
    // (The family refuses more input channels than its algorithm keeps the F32 contract for.)
    let alg = family.algorithm(spec).ok().filter(|&a| a == candidate.alg)?;
    let gemm = winograd::row_gemm_problem(problem, alg).ok()?;
    let make = |t| Some(tiled::TILED.with_tile_config(t));
    let (_, tiles, tile, cost) = estimated_best(caps, &gemm, spec.in_channels as u64, configs, make)?;
    let kernel = family.with_tile_config(tile);
    kernel.check(spec, caps).ok()?;
    Some(WinogradGemm { alg, gemm, kernel, tiles, tile, cost })
}

/// [`winograd_rule`]'s estimate of one Winograd algorithm on a GPU of these rates, or `None`
/// where it does not run the spec (more input channels than it keeps the F32 contract for
/// included), the candidate is not weighed against the matrix path where `against_matrix`
/// (the matrix path may run the layer: [`WinogradCandidate::weighed_against_matrix`]), its
/// tile does not fit
/// or its scratch does not fit a binding: the GEMM's padded work times the candidate's
/// `work_factor` in whole waves at
/// [`F32_SIMT_EFFICIENCY`] of the fp32 rate over the tile with the least estimated time among
/// [`winograd_gemm_configs`], plus the transforms' bytes at [`WINOGRAD_TRANSFORM_BANDWIDTH_SHARE`]
/// of the bandwidth, their two dispatches and the conversion passes where the tensors are not
/// NCHW f32.
fn winograd_estimate(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    candidate: &WinogradCandidate,
    against_matrix: bool,
    converted: bool,
    rates: &DeclaredRates,
) -> Option<WinogradEstimate> {
    let spec = &problem.spec;
    let rows = winograd::gemm_rows(problem, candidate.alg);
    if against_matrix && !candidate.weighed_against_matrix(spec, rows) {
        return None;
    }
    let work_factor = candidate.work_factor;
    let configs = winograd_gemm_configs(spec);
    let WinogradGemm { alg, gemm, kernel, tiles, tile, .. } = winograd_gemm(caps, problem, candidate, &configs)?;
    if !scratch_fits(caps, 4 * gemm.input.per_image().max(gemm.output.per_image())) {
        return None;
    }
    let work = wave_work(&gemm, spec.in_channels as u64, &configs, rates.multiprocessors as u64);
    let elements = problem.input.len() + 2 * gemm.input.len() + 2 * gemm.output.len() + problem.output.len();
    let bandwidth = rates.bandwidth_gbs * 1e9;
    let seconds = seconds_at(2.0 * work * work_factor, rates.fp32_tflops, F32_SIMT_EFFICIENCY)
        + 4.0 * elements as f64 / (bandwidth * WINOGRAD_TRANSFORM_BANDWIDTH_SHARE)
        + MATRIX_PASSES_SECONDS
        + conversion_passes(problem, rates, converted);
    Some(WinogradEstimate { seconds, kernel, alg, tiles, tile, matrix_gemm: false })
}

/// The fewest input channels for which [`winograd_rule`] weighs F(4×4, 3×3) with its GEMM on
/// the matrix units (`coop-winograd-f32`, [`coop_winograd_estimate`]): on fewer its GEMM ran
/// slower than the tiled kernel's (H200, 2026-11-28: 0.6–0.75× `winograd-f4`'s time on the
/// 64–128-channel layers of VGG-16 and ResNet-50).
pub const COOP_WINOGRAD_MIN_CHANNELS: u32 = 256;

/// The most GEMM rows per component (N·⌈OH/4⌉·⌈OW/4⌉) at which [`winograd_rule`] weighs
/// `coop-winograd-f32`, and the fewest multiply-adds per component's GEMM (rows × C_in ×
/// C_out, [`COOP_WINOGRAD_MIN_GEMM`]) ([`coop_winograd_estimate`]). Swept on the H200
/// (Vulkan 580.159.04, 2026-11-28; five tiles of the family against `winograd-f4` at the
/// rule's tile) over the 3×3 layers of 256–512 channels of AlexNet (N = 128), VGG-16 (N = 16)
/// and ResNet-50 (N = 32 and 8): it ran every one with GEMMs of 67–302 million multiply-adds
/// on at most 2048 rows faster — AlexNet's conv3–conv5 1.19–1.31× (through the rule),
/// VGG-16's c4_1, c4_2 and c5 1.02–1.13× — and the others slower: at 8–34 million (ResNet-50's
/// 7×7 and 14×14 layers at N = 32 and 8) 0.89–0.96×, its grid of few short tiles
/// dominated by their loads and stores, and at 3136 rows (VGG-16's c3_2, 56×56) 0.86×, where
/// its input transform, which writes channels innermost and so reads each patch across 64
/// planes per warp, costs more than the GEMM saves. Its estimate alone (the GEMM at the
/// matrix path's fitted rate) put it 1.3–2.1× ahead of `winograd-f4` on all eleven: it
/// decides between them only within these bounds.
pub const COOP_WINOGRAD_MAX_ROWS: u64 = 2048;

/// See [`COOP_WINOGRAD_MAX_ROWS`]: between ResNet-50's 14×14 layer at N = 32 (34 million,
/// 0.96× in the rule's tile) and VGG-16's c5 (67 million, 1.13×).
pub const COOP_WINOGRAD_MIN_GEMM: u64 = 48_000_000;

/// [`winograd_rule`]'s estimate of F(4×4, 3×3) with its GEMM on the matrix units
/// (`coop-winograd-f32`), or `None` where rule 5's matrix path cannot run the layer
/// (`matrix_path`: cooperative matrices, declared rates whose ratio reaches
/// [`F32_MATRIX_MIN_RATE_RATIO`]; [`f32_matrix_estimate`]), the spec has fewer than
/// [`COOP_WINOGRAD_MIN_CHANNELS`] input channels or is not F(4×4, 3×3)'s, its GEMM per
/// component has more rows than [`COOP_WINOGRAD_MAX_ROWS`] or fewer multiply-adds than
/// [`COOP_WINOGRAD_MIN_GEMM`], or no tile fits: the GEMM's padded work over the f32 matrix
/// path's table ([`MATRIX_RULE_SPLIT_CONFIGS`]) in whole waves at [`F32_MATRIX_EFFICIENCY`]
/// of a third of the matrix rate, plus the transforms as [`winograd_estimate`] counts them.
fn coop_winograd_estimate(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    matrix_path: bool,
    converted: bool,
    rates: &DeclaredRates,
) -> Option<WinogradEstimate> {
    let spec = &problem.spec;
    if !matrix_path || spec.in_channels < COOP_WINOGRAD_MIN_CHANNELS {
        return None;
    }
    let alg = winograd::WINOGRAD_F4.algorithm(spec).ok().filter(|&a| *a == winograd::minimal::F4X4_3X3)?;
    let rows = winograd::gemm_rows(problem, alg);
    if rows > COOP_WINOGRAD_MAX_ROWS
        || rows * spec.in_channels as u64 * (spec.out_channels as u64) < COOP_WINOGRAD_MIN_GEMM
    {
        return None;
    }
    let gemm = winograd::gemm_problem(problem, alg).ok()?;
    let k = nhwc::channels_last_k(&gemm.spec);
    let make = |t| nhwc::COOP_NHWC_F32.reference().with_tile(t);
    let (_, tiles, tile, _) = estimated_best(caps, &gemm, k, &MATRIX_RULE_SPLIT_CONFIGS, make)?;
    let kernel = coop_winograd_f32::COOP_WINOGRAD_F32.reference().with_tile(tile)?;
    kernel.check(spec, caps).ok()?;
    if !scratch_fits(caps, 4 * gemm.input.per_image().max(gemm.output.per_image())) {
        return None;
    }
    let work = wave_work(&gemm, k, &MATRIX_RULE_SPLIT_CONFIGS, rates.multiprocessors as u64);
    let elements = problem.input.len() + 2 * gemm.input.len() + 2 * gemm.output.len() + problem.output.len();
    let bandwidth = rates.bandwidth_gbs * 1e9;
    let seconds = seconds_at(6.0 * work, rates.f16_matrix_tflops, F32_MATRIX_EFFICIENCY)
        + 4.0 * elements as f64 / (bandwidth * WINOGRAD_TRANSFORM_BANDWIDTH_SHARE)
        + MATRIX_PASSES_SECONDS
        + conversion_passes(problem, rates, converted);
    Some(WinogradEstimate { seconds, kernel, alg, tiles, tile, matrix_gemm: true })
}

/// [`winograd_rule`] on CPU adapters: the algorithm of [`WINOGRAD_CANDIDATES`] whose GEMM has
/// the least estimated work (rule 9's CPU estimate over [`cpu_shape_configs`]: padded
/// multiply-adds, no bytes), where its transforms take at most
/// [`WINOGRAD_MAX_SCRATCH_PER_IMAGE`] per image and it keeps the F32 contract at the spec's
/// input channels.
fn winograd_on_cpu(caps: &DeviceCaps, problem: &ConvProblem) -> Option<(Kernel, String)> {
    let WinogradGemm { alg, kernel, tiles, tile, .. } = WINOGRAD_CANDIDATES
        .iter()
        .filter_map(|candidate| {
            winograd_gemm(caps, problem, candidate, &cpu_shape_configs(winograd::gemm_rows(problem, candidate.alg)))
        })
        .filter(|g| 4 * (g.gemm.input.per_image() + g.gemm.output.per_image()) <= WINOGRAD_MAX_SCRATCH_PER_IMAGE)
        .min_by(|a, b| a.cost.total_cmp(&b.cost))?;
    let (n, m, r) = (alg.n(), alg.out, alg.kernel);
    Some((
        kernel,
        format!(
            "f32 {r}x{r} stride 1 on a CPU adapter: Winograd F({m}x{m}, {r}x{r}), {:.2}x fewer multiply-adds, the \
             algorithm and its GEMM's tile with the least estimated work ({tiles} workgroup tiles of {}x{} over {} \
             components)",
            alg.multiply_add_saving(),
            tile.block_m,
            tile.block_n,
            n * n
        ),
    ))
}

/// The Winograd rule: f32 with the input shape known, 3×3 and 5×5 convolutions of stride 1,
/// no dilation, no groups and zero padding over at least [`WINOGRAD_MIN_CHANNELS`] input
/// channels, with finite weights: F(2×2, 3×3) (2.25× fewer multiply-adds), F(4×4, 3×3) (4×),
/// F(2×2, 5×5) (2.8×) or F(4×4, 5×5) (6.25×), plus the transforms' passes (the GEMM is n²
/// groups of M = N·⌈OH/m⌉·⌈OW/m⌉, N = C_out, K = C_in), the n = 6 and n = 8 tiles only up to
/// the input channels where they keep the F32 contract (`winograd::Minimal::f32_channels`).
///
/// - On CPU adapters ([`winograd_on_cpu`]), whose transforms take at most
///   [`WINOGRAD_MAX_SCRATCH_PER_IMAGE`] per image: always, the algorithm and its GEMM's tile
///   of [`cpu_shape_configs`] with the least estimated work. On lavapipe (Mesa 22.3,
///   LLVM 15, 2 cores, batch 1, 2026-11-27) F(2×2, 3×3) ran every such layer of ResNet-50
///   and AlexNet 1.2–1.8× faster than the best of four tiled configs, and VGG-16's 1.2–2.6×
///   faster than the best of three but its last (0.91×: 512 channels at 14×14, within the
///   noise of three runs); on 2026-11-28 F(4×4, 3×3) ran the layers of 28×28 and larger maps
///   1.26–1.47× faster than F(2×2, 3×3) and those of 14×14 and smaller 0.46–0.91× (the
///   estimate's padded rows pick each the faster), F(2×2, 5×5) AlexNet's conv2 2.5× faster
///   than the tiled kernel, and F(4×4, 5×5) 1.46× faster than F(2×2, 5×5) (49.4 against
///   72.1 ms).
/// - On GPUs ([`winograd_estimate`] per algorithm of [`WINOGRAD_CANDIDATES`], the least), where
///   its transforms fit a binding ([`scratch_fits`]) and its estimated time
///   beats the FMA kernels', split-K's ([`splitk_estimate`]) and, where rule 5 may run the
///   layer, the matrix path's. Fitted on the H100 (Vulkan 580.159.04) with and without its
///   matrix units over the 3×3 stride-1 layers of ResNet-50 (N=32), AlexNet (N=128) and
///   VGG-16 (N=16), F(2×2, 3×3) alone (2026-11-27): without them (an FMA-only device, as an
///   RTX 4090 is for f32) it picks Winograd for 13 of 15, 1.08–2.25× faster than the tiled
///   default each, and the tiled kernel for the two 64-channel layers on large maps, where
///   Winograd measured 0.90× and 0.98×; with them, Winograd for ResNet-50's 512-channel
///   layer at 7×7 (1.13× the matrix path). F(4×4, 3×3) then (2026-11-28, [`WINOGRAD_CANDIDATES`]):
///   VGG-16's four layers of 256–512 channels off the matrix path (1.04–1.30×) and the 7×7
///   layer from F(2×2, 3×3) (1.52×); without the matrix units every such layer of 256 or more
///   channels, 1.16–1.56× over F(2×2, 3×3), and F(2×2, 5×5) AlexNet's conv2 (1.62× over the
///   tiled kernel). On an H200 (2026-11-28, through the rule): F(4×4, 5×5) on the 64×128
///   GEMM tile ([`winograd_gemm_configs`]) takes AlexNet's conv2 off the matrix path (1.619 →
///   1.041 ms), and F(4×4, 3×3) from 3072 GEMM rows ([`WINOGRAD_F4_MIN_ROWS`]) VGG-16's
///   64–128-channel layers (1.16–1.39×) and ResNet-50's 56×56 one (1.05×); F(2×2, 3×3) on
///   that tile its 28×28 one (1.07×; 1.25× at batch 8). F(4×4, 3×3) with its GEMM on the
///   matrix units ([`coop_winograd_estimate`], within [`COOP_WINOGRAD_MAX_ROWS`] and
///   [`COOP_WINOGRAD_MIN_GEMM`]) then AlexNet's conv3–conv5 (1.19–1.31× over `winograd-f4`)
///   and VGG-16's c4_1, c4_2 and c5 (1.02–1.13×).
///
/// Returns the kernel and why, or `None` where the rule does not apply.
fn winograd_rule(
    caps: &DeviceCaps,
    problem: &ConvProblem,
    layout: Layout,
    converted: bool,
    finite_weights: bool,
) -> Option<(Kernel, String)> {
    let spec = &problem.spec;
    if !finite_weights || spec.in_channels < WINOGRAD_MIN_CHANNELS {
        return None;
    }
    if caps.is_cpu() {
        return winograd_on_cpu(caps, problem);
    }
    let rates = caps.declared_rates().unwrap_or(UNLISTED_GPU_RATES);
    let matrix = f32_matrix_estimate(caps, spec, problem, layout, finite_weights).map(|m| m.seconds);
    // Each algorithm of the candidates that runs the spec, by its estimate: the least wins.
    let best = WINOGRAD_CANDIDATES
        .iter()
        .filter_map(|candidate| winograd_estimate(caps, problem, candidate, matrix.is_some(), converted, &rates))
        .chain(coop_winograd_estimate(caps, problem, matrix.is_some(), converted, &rates))
        .min_by(|a, b| a.seconds.total_cmp(&b.seconds))?;
    let WinogradEstimate { seconds, kernel, alg, tiles, tile, matrix_gemm } = best;
    let fma = f32_fma_estimate(caps, problem, layout, &rates, 1.0);
    let split = splitk_estimate(caps, problem, converted, &rates).map(|e| e.seconds);
    let mut against = Vec::new();
    for (other, units) in [(fma, "the FMA kernels"), (matrix, "the matrix units"), (split, "split-K")] {
        if let Some(other) = other {
            if other <= seconds {
                return None;
            }
            against.push(format!("{:.3} ms on {units}", other * 1e3));
        }
    }
    let rated = match caps.declared_rates() {
        Some(_) => "its declared rates",
        None => "the rates assumed for GPUs not listed",
    };
    let (n, m, r) = (alg.n(), alg.out, alg.kernel);
    Some((
        kernel,
        format!(
            "f32 {r}x{r} stride 1 on a GPU, by {rated}: Winograd F({m}x{m}, {r}x{r}), {:.2}x fewer multiply-adds \
             for {:.2}x the input and output in transforms; its GEMM's tile{} with the least estimated time ({tiles} \
             workgroup tiles of {}x{} over {} components): {:.3} ms against {}",
            alg.multiply_add_saving(),
            alg.transform_growth(),
            if matrix_gemm { " on the matrix units (operands split into f16 halves)" } else { "" },
            tile.block_m,
            tile.block_n,
            n * n,
            seconds * 1e3,
            if against.is_empty() { "no other estimate".to_string() } else { against.join(" and ") }
        ),
    ))
}

/// The precision's kernel before the tuning cache and the fallbacks: [`default_kernel`],
/// with f32's tile config chosen for the kind of device ([`f32_tile`]).
pub(crate) fn rule_kernel(caps: &DeviceCaps, precision: Precision) -> Result<(Kernel, &'static str)> {
    let (kernel, why) = default_kernel(caps, precision)?;
    if precision != Precision::F32 {
        return Ok((kernel, why));
    }
    let (tile, why) = f32_tile(caps);
    Ok((kernel.with_tile(tile).unwrap_or(kernel), why))
}

/// The precision's default kernel on a device and why: f32 → the tiled family's reference
/// (the seed's config: portable, not the fastest); f16 → `coop-f16` where cooperative
/// matrices are enabled, else `tiled-f16` where the device has `SHADER_F16`, else a refusal
/// (never the f32 path under an f16 label); f16x3 → `coop-f16x3` where cooperative matrices
/// are enabled, else a refusal (it exists to use the matrix units: elsewhere the f32 kernel
/// is as accurate and faster).
pub(crate) fn default_kernel(caps: &DeviceCaps, precision: Precision) -> Result<(Kernel, &'static str)> {
    let candidates: &[(&'static dyn Family, &'static str)] = match precision {
        Precision::F32 => &[(&tiled::TILED, "f32: the tiled family's reference config (the seed's)")],
        Precision::F16Accum32 => &[
            (&coop::COOP_F16, "f16 on cooperative matrices: the gathering kernel's reference config"),
            (&tiled::TILED_F16, "f16 without cooperative matrices: the SIMT kernel with SHADER_F16"),
        ],
        Precision::F16x3 => &[(&coop::COOP_F16X3, "f16x3 on cooperative matrices: the reference config")],
    };
    let mut refusals = Vec::new();
    for (family, why) in candidates {
        match family.unavailable(caps) {
            None => return Ok((family.reference(), why)),
            Some(r) => refusals.push(format!("{}: {r}", family.name())),
        }
    }
    let what = match precision {
        Precision::F16x3 => {
            "f16x3 precision cannot run here: it runs on cooperative matrices only (use f32: it is as accurate)"
        }
        _ => "f16 precision cannot run here: it needs cooperative matrices or SHADER_F16",
    };
    Err(Error::unsupported(format!("{what}: {}", refusals.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Padding, Shape4};

    fn caps(device_type: wgpu::DeviceType, vendor: u32, coop_f16: bool) -> DeviceCaps {
        DeviceCaps {
            name: "test adapter".into(),
            vendor,
            device_type,
            backend: wgpu::Backend::Vulkan,
            driver: String::new(),
            features: wgpu::Features::SHADER_F16,
            limits: wgpu::Limits {
                max_compute_workgroup_storage_size: 48 * 1024,
                max_compute_invocations_per_workgroup: 1024,
                max_compute_workgroup_size_x: 1024,
                ..wgpu::Limits::default()
            },
            subgroup_size: (32, 32),
            coop_f16,
            coop_f16_offered: Some(coop_f16),
            adapter_features: None,
        }
    }

    /// An NVIDIA GPU's capabilities under an adapter name (whose declared rates apply).
    fn named_gpu(name: &str, coop_f16: bool) -> DeviceCaps {
        DeviceCaps { name: name.into(), ..caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, coop_f16) }
    }

    /// The f32 selection with the input shape known (N images of `hw`×`hw`), finite weights.
    fn pick_shaped(caps: &DeviceCaps, spec: Conv2dSpec, n: u32, hw: u32) -> Selection {
        use crate::spec::Shape4;
        let opts =
            Conv2dOptions { tuning_key_input: Some(Shape4::new(n, spec.in_channels, hw, hw)), ..Default::default() };
        select(caps, &spec, &opts, true, |_| None).unwrap()
    }

    /// The selection, whose kernel must be registered (its name parses back to it).
    fn pick(caps: &DeviceCaps, spec: Conv2dSpec, precision: Precision) -> Selection {
        let s = select(caps, &spec, &Conv2dOptions { precision, ..Default::default() }, true, |_| None).unwrap();
        assert_eq!(Kernel::parse(&s.kernel.to_string()).unwrap(), s.kernel, "{} is not in the registry", s.kernel);
        s
    }

    #[test]
    fn each_rule_names_itself() {
        let gpu = caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, true);
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let dense = Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1));
        let image = Conv2dSpec::new(3, 96, 11).stride((4, 4)).padding(Padding::uniform(2));
        let depthwise = Conv2dSpec::new(32, 32, 3).groups(32).padding(Padding::uniform(1));
        // f32 dense: the tile config of the kind of device.
        assert_eq!(pick(&gpu, dense, Precision::F32).kernel.to_string(), "tiled:m64n96k16-t4x12-w4-s1");
        assert_eq!(pick(&cpu, dense, Precision::F32).kernel.to_string(), "tiled:m64n64k16-t8x4-w4-s3");
        // Depthwise and narrow groups: the depthwise family, on any device, f32 or f16, with
        // up to 4 channels per invocation; wide groups: the GEMM.
        for c in [&gpu, &cpu] {
            let s = pick(c, depthwise, Precision::F32);
            assert_eq!(
                (s.kernel.to_string().as_str(), s.source),
                ("depthwise:x1y4c1-w128", ConfigSource::Default),
                "{s}"
            );
            assert!(s.reason.contains("depthwise"), "{s}");
            assert_eq!(pick(c, depthwise, Precision::F16Accum32).kernel.family(), "depthwise-f16");
        }
        assert_eq!(
            pick(&gpu, Conv2dSpec::new(8, 64, 3).groups(8), Precision::F32).kernel.to_string(),
            "depthwise:x1y4c4-w128"
        );
        // On f16 tensors, which the family reads itself with SHADER_F16: two columns per
        // invocation at every stride; without the feature (conversion passes) as on f32.
        let strided = depthwise.stride((2, 2));
        let on_f16 = |c: &DeviceCaps, precision| {
            let options = Conv2dOptions { precision, storage: crate::Storage::F16, ..Default::default() };
            select(c, &strided, &options, true, |_| None).unwrap().kernel.to_string()
        };
        assert_eq!(on_f16(&gpu, Precision::F32), "depthwise:x2y4c1-w128");
        assert_eq!(on_f16(&gpu, Precision::F16Accum32), "depthwise-f16:x2y4c1-w128");
        let no_f16 = DeviceCaps { features: wgpu::Features::empty(), ..gpu.clone() };
        assert_eq!(on_f16(&no_f16, Precision::F32), "depthwise:x1y4c1-w128");
        // f16 operands on NCHW f32 tensors at stride 2: blocks of 2×2 on GPUs (channels-last
        // tensors keep one column).
        assert_eq!(pick(&gpu, strided, Precision::F16Accum32).kernel.to_string(), "depthwise-f16:x2y2c1-w128");
        let nhwc = Conv2dOptions { precision: Precision::F16Accum32, layout: Layout::Nhwc, ..Default::default() };
        let s = select(&gpu, &strided, &nhwc, true, |_| None).unwrap();
        assert_eq!(s.kernel.to_string(), "depthwise-f16:x1y4c1-w128", "{s}");
        assert_eq!(pick(&cpu, strided, Precision::F16Accum32).kernel.to_string(), "depthwise-f16:x2y4c1-w128");
        // With the input shape known: the staged kernel for small maps of multiplier 1 at
        // stride 1 (f16 tensors or f16 operands), one column at stride 2 on small maps of
        // f16 tensors; the shape then matters to those layers only.
        let shaped = |spec: Conv2dSpec, hw: u32, precision, storage, layout| {
            let input = crate::Shape4::new(2, 32, hw, hw);
            let options =
                Conv2dOptions { precision, storage, layout, tuning_key_input: Some(input), ..Default::default() };
            let unknown = Conv2dOptions { tuning_key_input: None, ..options.clone() };
            let matters = shape_may_matter(&gpu, &spec, &unknown);
            (select(&gpu, &spec, &options, true, |_| None).unwrap().kernel.to_string(), matters)
        };
        let (f16s, f32s, nchw) = (crate::Storage::F16, crate::Storage::F32, Layout::Nchw);
        assert_eq!(shaped(depthwise, 14, Precision::F32, f16s, nchw), ("depthwise:staged-x4-w128".into(), true));
        assert_eq!(
            shaped(depthwise, 7, Precision::F16Accum32, f32s, nchw),
            ("depthwise-f16:staged-x4-w128".into(), true)
        );
        assert_eq!(shaped(depthwise, 28, Precision::F32, f16s, nchw), ("depthwise:x2y4c1-w128".into(), true));
        assert_eq!(shaped(depthwise, 14, Precision::F32, f32s, nchw), ("depthwise:x1y4c1-w128".into(), false));
        assert_eq!(shaped(depthwise, 14, Precision::F32, f16s, Layout::Nhwc), ("depthwise:x2y4c1-w128".into(), false));
        assert_eq!(shaped(strided, 28, Precision::F32, f16s, nchw), ("depthwise:x1y4c1-w128".into(), true));
        assert_eq!(shaped(strided, 56, Precision::F32, f16s, nchw), ("depthwise:x2y4c1-w128".into(), true));
        // Not on CPU adapters (lavapipe ran the staged kernel slower): the strip rule.
        let on_cpu = |spec: Conv2dSpec| {
            let input = crate::Shape4::new(2, 32, 14, 14);
            let options = Conv2dOptions { storage: f16s, tuning_key_input: Some(input), ..Default::default() };
            let unknown = Conv2dOptions { tuning_key_input: None, ..options.clone() };
            (
                select(&cpu, &spec, &options, true, |_| None).unwrap().kernel.to_string(),
                shape_may_matter(&cpu, &spec, &unknown),
            )
        };
        assert_eq!(on_cpu(depthwise), ("depthwise:x2y4c1-w128".into(), false));
        assert_eq!(on_cpu(strided), ("depthwise:x2y4c1-w128".into(), false));
        let multiplier = Conv2dSpec::new(32, 64, 3).groups(32).padding(Padding::uniform(1));
        assert_eq!(
            shaped(multiplier, 7, Precision::F16Accum32, f32s, nchw),
            ("depthwise-f16:x2y2c2-w128".into(), false)
        );
        let resnext = Conv2dSpec::new(128, 128, 3).groups(32);
        assert!(pick(&gpu, resnext, Precision::F32).reason.contains("grouped (32 groups of 4"));
        // Groups of 16 channels: the depthwise family in f32; in f16 on cooperative matrices,
        // the grouped kernel (several groups per block).
        let sixteen = Conv2dSpec::new(512, 512, 3).groups(32);
        assert_eq!(pick(&gpu, sixteen, Precision::F32).kernel.family(), "depthwise");
        let grouped = pick(&gpu, sixteen, Precision::F16Accum32);
        assert_eq!(grouped.kernel.family(), "coop-grouped-f16");
        assert!(grouped.reason.contains("32 groups of 16 channels: the grouped kernel"), "{grouped}");
        // ... whatever the input shape: `Conv2d::new` need not wait for it.
        let f16 = Conv2dOptions { precision: Precision::F16Accum32, ..Default::default() };
        assert!(!shape_may_matter(&gpu, &sixteen, &f16));
        assert!(shape_may_matter(&gpu, &Conv2dSpec::new(384, 384, 3).groups(32), &f16));
        // 12 channels per group would pad K by 1.33: the gathering kernel.
        let twelve = Conv2dSpec::new(384, 384, 3).groups(32);
        assert_eq!(pick(&gpu, twelve, Precision::F16Accum32).kernel.family(), "coop-f16");
        assert_eq!(pick(&gpu, Conv2dSpec::new(64, 64, 3).groups(2), Precision::F32).kernel.family(), "tiled");
        // A kernel too wide for the strip's registers: the direct kernel, and why.
        let wide = Conv2dSpec::new(8, 8, 9).groups(8).dilation((8, 8));
        let s = pick(&gpu, wide, Precision::F32);
        assert!(s.kernel.family() == "direct" && s.reason.contains("row segments"), "{s}");
        // f16: the stem kernel on NVIDIA's cooperative matrices for image inputs, else the
        // channels-last kernel (the gathering one where channels would pad K too much);
        // without cooperative matrices the SIMT kernel.
        assert_eq!(pick(&gpu, image, Precision::F16Accum32).kernel.family(), "coop-stem-f16");
        assert_eq!(pick(&gpu, dense, Precision::F16Accum32).kernel.family(), "coop-nhwc-f16");
        // Small GEMMs in f16 on cooperative matrices: the SIMT kernel with the f32 shape
        // rule's tile where the shape is known (MobileNetV2's 3×3 stem, K = 27; a 1×1 layer
        // of 32 channels; one of 24 output channels), the matrix units past both limits.
        let f16_at = |spec: Conv2dSpec, input: Option<Shape4>| {
            let options =
                Conv2dOptions { precision: Precision::F16Accum32, tuning_key_input: input, ..Default::default() };
            select(&gpu, &spec, &options, true, |_| None).unwrap()
        };
        let stem3 = Conv2dSpec::new(3, 32, 3).stride((2, 2)).padding(Padding::uniform(1));
        let s = f16_at(stem3, Some(Shape4::new(32, 3, 224, 224)));
        assert_eq!(s.kernel.to_string(), "tiled-f16:m64n32k16-t4x4-w4-s1", "{s}");
        assert!(s.reason.contains("small GEMM (K = 27, N = 32") && !s.reason.contains("  "), "{s}");
        assert_eq!(f16_at(stem3, None).kernel.family(), "tiled-f16");
        assert_eq!(f16_at(Conv2dSpec::new(32, 16, 1), None).kernel.family(), "tiled-f16");
        assert_eq!(f16_at(Conv2dSpec::new(144, 24, 1), None).kernel.family(), "tiled-f16");
        assert_eq!(f16_at(Conv2dSpec::new(96, 64, 1), None).kernel.family(), "coop-nhwc-f16");
        assert_eq!(pick(&gpu, dense, Precision::F16x3).kernel.family(), "coop-nhwc-f16x3");
        // Channels-last tensors: the channels-last family for image inputs of short K (the
        // stem kernel would need layout passes) and for channels that pad K; the stem kernel
        // between layout passes for K ≥ STEM_CHANNELS_LAST_MIN_K (AlexNet's 11×11 conv1).
        let nhwc = Conv2dOptions::default().precision(Precision::F16Accum32).layout(Layout::Nhwc);
        let resnet_stem = Conv2dSpec::new(3, 64, 7).stride((2, 2)).padding(Padding::uniform(3));
        for spec in [resnet_stem, Conv2dSpec::new(384, 384, 3).groups(32)] {
            let s = select(&gpu, &spec, &nhwc, true, |_| None).unwrap();
            assert_eq!(s.kernel.family(), "coop-nhwc-f16", "{s}");
        }
        let s = select(&gpu, &image, &nhwc, true, |_| None).unwrap();
        assert_eq!(s.kernel.family(), "coop-stem-f16", "{s}");
        assert!(s.reason.contains("between layout passes"), "{s}");
        // f16x3 depthwise: the f32 depthwise family where cooperative matrices exist
        // (elsewhere f16x3 is refused, as on any layer).
        let dw = Conv2dSpec::new(32, 32, 3).groups(32).padding(Padding::uniform(1));
        let s = pick(&gpu, dw, Precision::F16x3);
        assert_eq!((s.kernel.family(), s.kernel.precision()), ("depthwise", Precision::F32), "{s}");
        assert!(s.reason.contains("in f32 arithmetic"), "{s}");
        let amd = caps(wgpu::DeviceType::DiscreteGpu, 0x1002, true);
        assert_eq!(pick(&amd, image, Precision::F16Accum32).kernel.family(), "coop-f16");
        assert_eq!(pick(&cpu, image, Precision::F16Accum32).kernel.family(), "tiled-f16");
        // f16x3 exists only on cooperative matrices, and says so.
        let e =
            select(&cpu, &dense, &Conv2dOptions { precision: Precision::F16x3, ..Default::default() }, true, |_| None);
        assert!(e.unwrap_err().to_string().contains("cooperative matrices"));
    }

    /// Winograd on CPU adapters for 3×3 and 5×5 stride-1 layers of at least 16 input
    /// channels with the shape known, the algorithm by the GEMM's estimated work (lavapipe,
    /// batch 1: F(4×4, 3×3) 1.16–1.44× faster than F(2×2, 3×3) on ResNet-50's 56×56 and 28×28
    /// layers, F(2×2, 3×3) at 14×14 and 7×7); not other shapes, not before the shape is known.
    #[test]
    fn winograd_on_cpu_adapters() {
        let nvidia = caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, false);
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let at = |c: &DeviceCaps, spec: Conv2dSpec, hw: u32| {
            let input = crate::Shape4::new(1, spec.in_channels, hw, hw);
            let options = Conv2dOptions { tuning_key_input: Some(input), ..Default::default() };
            select(c, &spec, &options, true, |_| None).unwrap()
        };
        let same = |c, k| Conv2dSpec::new(c, k, 3).padding(Padding::uniform(1));
        let s = at(&cpu, same(64, 64), 56);
        assert_eq!(s.kernel.to_string(), "winograd-f4:m64n64k16-t8x4-w4-s3", "{s}");
        assert!(s.reason.contains("Winograd F(4x4, 3x3)"), "{s}");
        // GEMMs of at most 64 rows per component on the 32×64 block (measured at 28×28:
        // 15.7 ms against 18.4 on the 64×64 one; at 14×14 24.8 against 29.0).
        assert_eq!(at(&cpu, same(128, 128), 28).kernel.to_string(), "winograd-f4:m32n64k32-t4x4-w4-s2");
        assert_eq!(at(&cpu, same(256, 256), 14).kernel.to_string(), "winograd:m32n64k32-t4x4-w4-s2");
        assert_eq!(at(&cpu, same(16, 16), 56).kernel.family(), "winograd-f4");
        assert_eq!(at(&cpu, same(512, 512), 7).kernel.to_string(), "winograd:m32n64k32-t4x4-w4-s2");
        assert_eq!(at(&cpu, same(8, 8), 56).kernel.family(), "tiled");
        // VGG-16's 64-channel layer at 224×224: F(2×2, 3×3)'s transforms take 102 MB per
        // image, over 64 MiB; F(4×4, 3×3)'s 58 MB (measured: 190 ms against the tiled
        // kernel's 473).
        assert_eq!(at(&cpu, same(64, 64), 224).kernel.family(), "winograd-f4");
        assert_eq!(at(&cpu, same(128, 128), 112).kernel.family(), "winograd-f4");
        // AlexNet's 5×5 conv2 by F(4×4, 5×5) (measured: 42.6 ms, 49.4 on the 64×64 block,
        // against F(2×2, 5×5)'s 72.1 and the tiled kernel's 181.6); F(2×2, 5×5) beyond
        // F(4×4, 5×5)'s 128 input channels, up to 512.
        let five = |c: u32| Conv2dSpec::new(c, 256, 5).padding(Padding::uniform(2));
        assert_eq!(at(&cpu, five(96), 27).kernel.to_string(), "winograd-f4:m32n64k32-t4x4-w4-s2");
        assert_eq!(at(&cpu, five(256), 27).kernel.family(), "winograd");
        assert_eq!(at(&cpu, five(2048), 9).kernel.family(), "tiled");
        assert_eq!(at(&cpu, same(2048, 64), 28).kernel.family(), "winograd");
        assert_eq!(at(&cpu, same(64, 64).stride((2, 2)), 56).kernel.family(), "tiled");
        assert_eq!(at(&cpu, same(64, 64).groups(2), 56).kernel.family(), "tiled");
        // A GPU not in the table of rates: by the estimate at the rates assumed for it.
        assert_eq!(at(&nvidia, same(64, 64), 56).kernel.family(), "tiled");
        assert_eq!(at(&nvidia, same(64, 64), 12).kernel.family(), "winograd-f4", "the browser test's layer");
        assert_eq!(pick(&cpu, same(64, 64), Precision::F32).kernel.family(), "tiled");
        assert!(shape_may_matter(&cpu, &same(64, 64), &Conv2dOptions::default()));
        // Non-finite weights: never Winograd (its transforms would spread them).
        let input = Some(crate::Shape4::new(1, 64, 56, 56));
        let options = Conv2dOptions { tuning_key_input: input, ..Default::default() };
        assert_eq!(select(&cpu, &same(64, 64), &options, false, |_| None).unwrap().kernel.family(), "tiled");
    }

    /// The selection for f16 on channels-last f16 tensors, `N×C×hw×hw` input, a same-padded
    /// `kernel`×`kernel` convolution of `c` to `k` channels.
    fn f16_nhwc_pick(caps: &DeviceCaps, c: u32, k: u32, kernel: u32, hw: u32, n: u32) -> Selection {
        let spec = Conv2dSpec::new(c, k, kernel).padding(Padding::uniform(kernel / 2));
        let opts = Conv2dOptions {
            precision: Precision::F16Accum32,
            layout: Layout::Nhwc,
            storage: crate::options::Storage::F16,
            tuning_key_input: Some(crate::spec::Shape4::new(n, c, hw, hw)),
            ..Default::default()
        };
        select(caps, &spec, &opts, true, |_| None).unwrap()
    }

    /// The channels-last f16 table in whole waves, on the H100's 132 multiprocessors
    /// (channels-last f16 tensors, the layers of the sweeps it was fitted to): the 4-warp
    /// 128×128 block where the reference's 196 tiles leave a second wave part empty, the
    /// reference where its 392 tiles fill three waves or its 98 fill less than one, and the
    /// 64×64 block where 128×128 tiles would be too few.
    #[test]
    fn channels_last_f16_configs_ranked_in_waves() {
        let h100 = DeviceCaps {
            name: "NVIDIA H100 80GB HBM3".into(),
            ..caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, true)
        };
        let at = |c, k, kernel, hw, n| f16_nhwc_pick(&h100, c, k, kernel, hw, n).kernel.to_string();
        let four_warps = "coop-nhwc-f16:m128n128k32-t16x8-w4-s1";
        let reference = "coop-nhwc-f16:m128n128k64-t8x8-w8-s1";
        assert_eq!(at(1024, 512, 1, 14, 32), four_warps, "196 tiles");
        assert_eq!(at(128, 128, 3, 28, 32), four_warps, "196 tiles");
        assert_eq!(at(512, 512, 3, 28, 16), reference, "392 tiles");
        assert_eq!(at(256, 256, 3, 14, 32), reference, "98 tiles");
        // Grids under one wave of 128×128 tiles: the 64×64 block, K steps of 64 in one buffer
        // (MobileNetV2's 960→160 projection; ResNet-50's 512-channel 3×3 layer at 7×7, whose
        // 200 tiles of 64×64 split-K now takes: `f16_split_k_where_the_grid_is_small`).
        let small = "coop-nhwc-f16:m64n64k64-t4x8-w4-s1";
        assert_eq!(at(960, 160, 1, 7, 32), small, "75 tiles of 64x64");
        // Short K (576 here), too: MobileNetV2's 576→160 projection at 7×7.
        assert_eq!(at(576, 160, 1, 7, 32), small, "short K");
    }

    /// Groups of at most 32 output channels on the blocks as narrow as them, in both f16
    /// tables (H100, the layers of the sweep they were fitted to); 8-channel groups on the
    /// matrix units on channels-last tensors only; wider groups never on them.
    #[test]
    fn narrow_groups_take_narrow_blocks() {
        use crate::spec::Shape4;
        let h100 = DeviceCaps {
            name: "NVIDIA H100 80GB HBM3".into(),
            ..caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, true)
        };
        let at = |c: u32, k: u32, kernel: u32, groups: u32, hw: u32, layout: Layout| {
            let spec = Conv2dSpec::new(c, k, kernel).groups(groups).padding(Padding::uniform(kernel / 2));
            let opts = Conv2dOptions {
                precision: Precision::F16Accum32,
                layout,
                storage: match layout {
                    Layout::Nhwc => crate::options::Storage::F16,
                    Layout::Nchw => crate::options::Storage::F32,
                },
                tuning_key_input: Some(Shape4::new(32, c, hw, hw)),
                ..Default::default()
            };
            select(&h100, &spec, &opts, true, |_| None).unwrap().kernel.to_string()
        };
        let (n16, n32) = ("coop-nhwc-f16:m128n16k16-t4x4-w4-s1", "coop-nhwc-f16:m128n32k32-t8x4-w4-s1");
        let grouped = "coop-grouped-f16:m64n64k64-t4x8-w4-s1";
        for layout in [Layout::Nhwc, Layout::Nchw] {
            // ResNeXt-50's 16- and 32-channel groups: the grouped kernel and the narrow block.
            assert_eq!(at(512, 512, 3, 32, 14, layout), grouped, "{layout:?}");
            assert_eq!(at(1024, 1024, 3, 32, 7, layout), n32, "{layout:?}");
        }
        // Its 8-channel groups: the grouped kernel on channels-last tensors, else the
        // depthwise family; 32 channels in groups of 8 take 32-channel blocks.
        assert_eq!(at(256, 256, 3, 32, 28, Layout::Nhwc), grouped);
        assert_eq!(at(32, 32, 3, 4, 28, Layout::Nhwc), "coop-grouped-f16:m64n32k32-t4x4-w4-s1");
        assert!(at(256, 256, 3, 32, 28, Layout::Nchw).starts_with("depthwise-f16:"));
        assert!(at(128, 128, 3, 32, 56, Layout::Nhwc).starts_with("depthwise-f16:"), "4-channel groups");
        // MobileNetV2's 32→16 and 144→32 1×1 layers, not its 192→64 one.
        assert_eq!(at(32, 16, 1, 1, 112, Layout::Nhwc), n16);
        assert_eq!(at(144, 32, 1, 1, 28, Layout::Nhwc), n32);
        assert_eq!(at(192, 64, 1, 1, 14, Layout::Nhwc), "coop-nhwc-f16:m64n64k64-t4x8-w4-s1");
    }

    /// f16 split-K on the matrix units where its estimate beats the unsplit kernel's: on the
    /// H100 ResNet-50's deep layers at batch 1 (the 512-channel 3×3 in 16 slices) and its
    /// 512-channel 3×3 at N = 32, not its 64-channel layers nor its 2048→512 1×1 at N = 32,
    /// nor any layer without declared rates (an unknown NVIDIA adapter).
    #[test]
    fn f16_split_k_where_the_grid_is_small() {
        let named = |name: &str| named_gpu(name, true);
        let at = f16_nhwc_pick;
        let h100 = named("NVIDIA H100 80GB HBM3");
        let s = at(&h100, 512, 512, 3, 7, 1);
        assert_eq!(s.kernel.to_string(), "coop-splitk-f16:m64n64k64-t4x8-w4-s1-k16", "{s}");
        assert!(s.reason.contains("split-K") && s.reason.contains("16 slices of 32"), "{s}");
        assert_eq!(at(&h100, 2048, 512, 1, 7, 1).kernel.family(), "coop-splitk-f16");
        assert_eq!(at(&h100, 512, 512, 3, 7, 32).kernel.family(), "coop-splitk-f16");
        // Estimated 6 % faster split at N = 32, under the rule's margin (measured slower).
        let unsplit = [(64, 64, 3, 56, 1), (64, 256, 1, 56, 1), (256, 256, 3, 14, 32), (2048, 512, 1, 7, 32)];
        for (c, k, kernel, hw, n) in unsplit {
            assert_eq!(at(&h100, c, k, kernel, hw, n).kernel.family(), "coop-nhwc-f16", "{c}->{k} {hw} N={n}");
        }
        assert_eq!(at(&named("NVIDIA X"), 512, 512, 3, 7, 1).kernel.family(), "coop-nhwc-f16");
    }

    /// Winograd on GPUs where its estimate beats the FMA kernels' and, where rule 5 may run
    /// the layer, the matrix path's: on the H100 with its matrix units ResNet-50's 512- and
    /// 256-channel 3×3 layers at 7×7 and 14×14 by F(4×4, 3×3), not its 128-channel one at
    /// 28×28; without them (an FMA-only device) every such layer, F(4×4, 3×3) from 16 channels;
    /// on an RTX 4090 (a quarter of the H100's bandwidth per FLOP) AlexNet's conv3 at N=128
    /// and VGG-16's 128-channel layer at 56×56 by F(4×4, 3×3) (whose transforms move 0.56×
    /// F(2×2, 3×3)'s bytes), not its 64-channel layer at 224×224.
    #[test]
    fn winograd_on_gpus_by_the_estimate() {
        use crate::spec::Shape4;
        let named = named_gpu;
        let h100 = named("NVIDIA H100 80GB HBM3", true);
        let h100_fma = named("NVIDIA H100 80GB HBM3", false);
        let rtx = named("NVIDIA GeForce RTX 4090", false);
        let at = |caps: &DeviceCaps, c: u32, k: u32, hw: u32, n: u32, finite: bool| {
            let spec = Conv2dSpec::new(c, k, 3).padding(Padding::uniform(1));
            let opts = Conv2dOptions { tuning_key_input: Some(Shape4::new(n, c, hw, hw)), ..Default::default() };
            select(caps, &spec, &opts, finite, |_| None).unwrap()
        };
        let s = at(&h100, 512, 512, 7, 32, true);
        assert_eq!(s.kernel.family(), "winograd-f4", "{s}");
        assert!(s.reason.contains("on the matrix units") && s.reason.contains("on the FMA kernels"), "{s}");
        // At batch 8 F(2×2, 3×3) (measured: 0.0685 ms against F(4×4, 3×3)'s 0.0749), at 14×14
        // F(4×4, 3×3) (0.0496 against 0.0567).
        assert_eq!(at(&h100, 512, 512, 7, 8, true).kernel.family(), "winograd");
        assert_eq!(at(&h100, 256, 256, 14, 8, true).kernel.family(), "winograd-f4");
        // Under 128 input channels and 3072 GEMM rows F(4×4, 3×3) is not weighed against the
        // matrix path; from 128 channels it is from 392 rows (ResNet-50's 128-channel layer
        // at 28×28 on the H200, its 7×7 tiles padded to whole vec4s: 0.1256 ms at N = 32 and
        // 0.0392 at N = 8 against F(2×2, 3×3)'s 0.141 and 0.0505, the matrix path's 0.165
        // and 0.064); not at N = 1 (49 rows: 0.0249 against F(2×2, 3×3)'s 0.0222–0.0236).
        // Without the matrix path it is weighed from 16 channels (VGG-16's 128-channel layer
        // at 112×112: 0.937 against F(2×2, 3×3)'s 1.275).
        for n in [32, 8] {
            assert_eq!(at(&h100, 128, 128, 28, n, true).kernel.family(), "winograd-f4");
            assert_eq!(at(&named("NVIDIA H200", true), 128, 128, 28, n, true).kernel.family(), "winograd-f4");
        }
        assert_ne!(at(&named("NVIDIA H200", true), 128, 128, 28, 1, true).kernel.family(), "winograd-f4");
        // From 3072 rows it is, on the 64×128 GEMM tile where K fills steps of 16 (H200:
        // VGG-16's 128-channel layer at 112×112 0.663 ms against the matrix path's 0.924, its
        // 64-channel one at 224×224 1.078 against 1.326, ResNet-50's 64-channel layer at
        // 56×56 0.174 against 0.183; at batch 8 (1568 rows) the matrix path).
        let s = at(&h100, 128, 128, 112, 16, true);
        assert_eq!(s.kernel.to_string(), "winograd-f4:m64n128k16-t4x8-w8-s1", "{s}");
        assert_eq!(at(&h100, 64, 64, 224, 16, true).kernel.to_string(), "winograd-f4:m128n64k8-t8x8-w4-s1");
        assert_eq!(at(&h100, 64, 64, 56, 32, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&h100, 64, 64, 56, 8, true).kernel.family(), "coop-nhwc-f32");
        // VGG-16's 128→256 layer at 56×56 (3,136 rows; H200: 0.327 ms against the matrix
        // path's 0.451).
        let vgg_c3_1 = |caps: &DeviceCaps| {
            let spec = Conv2dSpec::new(128, 256, 3).padding(Padding::uniform(1));
            let opts = Conv2dOptions { tuning_key_input: Some(Shape4::new(16, 128, 56, 56)), ..Default::default() };
            select(caps, &spec, &opts, true, |_| None).unwrap().kernel.family()
        };
        assert_eq!(vgg_c3_1(&named("NVIDIA H200", true)), "winograd-f4");
        assert_eq!(at(&h100_fma, 128, 128, 112, 16, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&h100_fma, 128, 128, 28, 32, true).kernel.family(), "winograd-f4");
        // At batch 1 split-K fills the device better still (measured: 0.0205 ms against
        // Winograd's 0.0233).
        assert_eq!(at(&h100, 64, 64, 56, 1, true).kernel.family(), "splitk");
        // ResNet-50's 256-channel layer at 14×14 (34 million multiply-adds per component's
        // GEMM), at 7×7 and at batch 8: F(4×4, 3×3) with the GEMM on the FMA kernels (H200:
        // 0.1231 ms against `coop-winograd-f32`'s 0.1288 at the rule's tile, 0.1207 against
        // 0.1260, 0.0464 against 0.0495); VGG-16's 256-channel layer at 56×56 (3136 rows)
        // too (0.591 against 0.683).
        assert_eq!(at(&h100, 256, 256, 14, 32, true).kernel.family(), "winograd-f4");
        let h200 = named("NVIDIA H200", true);
        assert_eq!(at(&h200, 256, 256, 14, 32, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&h200, 512, 512, 7, 32, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&h200, 256, 256, 14, 8, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&h200, 256, 256, 56, 16, true).kernel.family(), "winograd-f4");
        // VGG-16's 512-channel layers at 28×28 and 14×14 (784 and 256 rows): 0.508 ms against
        // 0.568, 0.171 against 0.201.
        assert_eq!(at(&h200, 512, 512, 28, 16, true).kernel.family(), "coop-winograd-f32");
        let s = at(&h200, 512, 512, 14, 16, true);
        assert_eq!(s.kernel.family(), "coop-winograd-f32", "{s}");
        assert!(s.reason.contains("tile on the matrix units (operands split into f16 halves)"), "{s}");
        assert_eq!(at(&h100_fma, 256, 256, 14, 32, true).kernel.family(), "winograd-f4");
        // ResNet-50's 64-channel layer at 56×56: F(4×4, 3×3) (0.220 ms against the tiled
        // kernel's 0.236, F(2×2, 3×3)'s 0.251).
        assert_eq!(at(&h100_fma, 64, 64, 56, 32, true).kernel.family(), "winograd-f4");
        // Non-finite weights keep it off Winograd.
        let s = at(&h100_fma, 256, 256, 14, 32, false);
        assert!(!s.kernel.family().starts_with("winograd"), "non-finite weights: {s}");
        assert_eq!(at(&rtx, 256, 384, 13, 128, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&rtx, 512, 512, 14, 16, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&rtx, 128, 128, 56, 16, true).kernel.family(), "winograd-f4");
        assert_eq!(at(&rtx, 64, 64, 224, 16, true).kernel.family(), "tiled");
        // Beyond 512 input channels the n = 6 tiles' error nears the F32 contract (7–8e-6 at
        // 1024, 1.0e-5 at 2048): F(2×2, 3×3) there, F(4×4, 3×3) at 512.
        assert_eq!(at(&h100_fma, 2048, 512, 14, 16, true).kernel.family(), "winograd");
        assert_eq!(at(&h100_fma, 1024, 512, 14, 16, true).kernel.family(), "winograd");
        assert_eq!(at(&h100_fma, 512, 512, 14, 16, true).kernel.family(), "winograd-f4");
        // 5×5 by F(2×2, 5×5) on the FMA units (AlexNet's conv2: 1.95 ms against the tiled
        // kernel's 3.16), not beyond 512 channels; the matrix path on the H100 (1.66).
        let five = |caps: &DeviceCaps, c: u32| {
            let spec = Conv2dSpec::new(c, 256, 5).padding(Padding::uniform(2));
            let opts = Conv2dOptions { tuning_key_input: Some(Shape4::new(128, c, 27, 27)), ..Default::default() };
            select(caps, &spec, &opts, true, |_| None).unwrap().kernel.family()
        };
        assert_eq!(five(&h100_fma, 96), "winograd-f4");
        assert_eq!(five(&h100, 96), "winograd-f4");
        // AlexNet's conv5 (384→256 at 13×13, N = 128) and conv4 (384→384) by F(4×4, 3×3) with
        // the GEMM on the matrix units, on the H200's rates and the H100's (H200: 0.435 ms
        // against `winograd-f4`'s 0.573 and the matrix path's 0.641; conv4 0.571 against
        // 0.734); on an FMA-only device by `winograd-f4`.
        let h200 = named("NVIDIA H200", true);
        let conv5 = Conv2dSpec::new(384, 256, 3).padding(Padding::uniform(1));
        let opts = Conv2dOptions { tuning_key_input: Some(Shape4::new(128, 384, 13, 13)), ..Default::default() };
        let on = |caps: &DeviceCaps| select(caps, &conv5, &opts, true, |_| None).unwrap().kernel.family();
        assert_eq!((on(&h200), on(&h100), on(&h100_fma)), ("coop-winograd-f32", "coop-winograd-f32", "winograd-f4"));
        let conv4 = Conv2dSpec::new(384, 384, 3).padding(Padding::uniform(1));
        let on4 = |caps: &DeviceCaps| select(caps, &conv4, &opts, true, |_| None).unwrap().kernel.family();
        assert_eq!((on4(&h200), on4(&h100)), ("coop-winograd-f32", "coop-winograd-f32"));
        assert_ne!(five(&h100_fma, 2048), "winograd");
        // Without the shape, never.
        let spec = Conv2dSpec::new(512, 512, 3).padding(Padding::uniform(1));
        assert_eq!(pick(&h100_fma, spec, Precision::F32).kernel.family(), "tiled");
    }

    /// f32 on the H100's declared rates with its matrix units, decisions measured on it
    /// (BENCHMARKS, "The f32 matrix table in waves"): the split table's blocks for 7×7 layers
    /// at N = 32 and 14×14 ones at batch 8, the 64×128 block's K steps by the input channels,
    /// rule 5 on small grids (a grouped layer left to the tiled kernel), and VGG-16's
    /// 512-channel layer at 14×14 by F(4×4, 3×3) (0.209 ms against the matrix path's 0.250),
    /// AlexNet's conv3 on the matrix path (0.581 against 0.611).
    #[test]
    fn f32_tables_on_the_h100() {
        let h100 = named_gpu("NVIDIA H100 80GB HBM3", true);
        let at = |spec: Conv2dSpec, n: u32, hw: u32| pick_shaped(&h100, spec, n, hw).kernel.to_string();
        let s2 = Conv2dSpec::new(512, 512, 3).stride(2).padding(Padding::uniform(1));
        assert_eq!(at(s2, 32, 14), "coop-nhwc-f32:m64n128k32-t8x8-w4-s1");
        assert_eq!(at(Conv2dSpec::new(960, 320, 1), 32, 7), "coop-nhwc-f32:m64n64k64-t4x8-w4-s1");
        // (At batch 8 ResNet-50's 1024→256 1×1 layer goes to split-K since its gate counts the
        // 64×96 block's grid: 0.0507 ms against the matrix path's 0.0424 on the H200, the
        // price of that gate's gains on the FMA units; see `SPLITK_MAX_WAVES`.)
        assert_eq!(at(Conv2dSpec::new(1024, 256, 1), 8, 14), "splitk:m64n96k16-t4x12-w4-s1-k8");
        assert_eq!(at(Conv2dSpec::new(64, 256, 1), 32, 56), "tiled:m64n128k16-t4x8-w8-s1");
        assert_eq!(at(Conv2dSpec::new(256, 128, 1), 32, 56), "tiled:m64n128k8-t4x8-w8-s1");
        assert_eq!(at(Conv2dSpec::new(1024, 512, 1), 8, 14), "coop-nhwc-f32:m64n64k16-t4x8-w4-s1");
        assert_eq!(at(Conv2dSpec::new(1024, 512, 1), 32, 14).split(':').next(), Some("coop-nhwc-f32"));
        let grouped = Conv2dSpec::new(1024, 1024, 3).groups(32).padding(Padding::uniform(1));
        assert_eq!(at(grouped, 32, 7), "tiled:m64n32k16-t4x4-w4-s1");
        let vgg_c5 = Conv2dSpec::new(512, 512, 3).padding(Padding::uniform(1));
        assert_eq!(at(vgg_c5, 16, 14), "coop-winograd-f32:m128n128k32-t8x8-w8-s1");
        assert_eq!(at(vgg_c5, 32, 7).split(':').next(), Some("winograd-f4"));
        // AlexNet's conv3 by F(4×4, 3×3) with its GEMM on the matrix units (H200: 0.446 ms
        // against `winograd-f4`'s 0.534; the matrix path 0.581 on the H100).
        let alexnet_c3 = Conv2dSpec::new(256, 384, 3).padding(Padding::uniform(1));
        assert_eq!(at(alexnet_c3, 128, 13).split(':').next(), Some("coop-winograd-f32"));
    }

    /// Split-K on GPUs where the output grid is a few waves or less and K is long: ResNet-50's
    /// 2048→512 1×1 layer at 7×7 and its 512-channel stride-2 3×3 layer at batch 1 on the
    /// H100; not the 2048→512 layer at N = 32 there (the matrix path takes it), nor
    /// MobileNetV2's 32→16 layer at 112×112 (the grid fills the device); without the matrix
    /// units, ResNet-50's deep 1×1 layers at N = 32; never on CPU adapters.
    #[test]
    fn splitk_where_the_grid_is_small() {
        let h100 = named_gpu("NVIDIA H100 80GB HBM3", true);
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let at = pick_shaped;
        let deep = Conv2dSpec::new(2048, 512, 1);
        let s = at(&h100, deep, 1, 7);
        assert_eq!(s.kernel.family(), "splitk", "{s}");
        assert!(s.reason.contains("split-K") && s.reason.contains("unsplit"), "{s}");
        let strided = Conv2dSpec::new(512, 512, 3).stride(2).padding(Padding::uniform(1));
        assert_eq!(at(&h100, strided, 1, 14).kernel.family(), "splitk");
        assert_ne!(at(&h100, deep, 32, 7).kernel.family(), "splitk");
        assert_ne!(at(&h100, Conv2dSpec::new(32, 16, 1), 1, 112).kernel.family(), "splitk");
        assert_ne!(at(&cpu, deep, 1, 7).kernel.family(), "splitk");
        // Without the matrix units (an H200 here), grids of up to five waves: ResNet-50's
        // 1024→2048 stride-2 1×1 layer at N = 32 (550 tiles of 64×96) in 2 slices of 512
        // (0.270 ms against the 64×128 block's 0.342), its 2048→512 1×1 layer in 4 (whose 16
        // slices' 51 MB of partial sums overflow half the L2: 0.149 against 0.178); not the
        // 512→256 1×1 layer at 28×28 at N = 8 (294 tiles), whose slices of 128 ran 1.12×
        // slower than the unsplit kernel.
        let h200_fma = named_gpu("NVIDIA H200", false);
        let ds = Conv2dSpec::new(1024, 2048, 1).stride(2);
        assert_eq!(at(&h200_fma, ds, 32, 14).kernel.to_string(), "splitk:m64n96k16-t4x12-w4-s1-k2");
        assert_eq!(at(&h200_fma, deep, 32, 7).kernel.to_string(), "splitk:m64n96k16-t4x12-w4-s1-k4");
        assert_ne!(at(&h200_fma, Conv2dSpec::new(512, 256, 1), 8, 28).kernel.family(), "splitk");
    }

    /// Grids of under two waves rate the blocks by their small-grid factors
    /// ([`SMALL_GRID_RATES`]): on an H200, MobileNetV2's 160→960 1×1 layer at 7×7 (N = 32)
    /// runs the 64×96 block (0.0314 ms against the 64×128 block's 0.0340), ResNet-50's 7×7
    /// stem at batch 1 the 64×32 one (0.0169 against the 64×96 block's 0.0220); ResNet-50's
    /// 512→128 1×1 layer at 28×28 and N = 32 (392 tiles of 64×128) keeps the 64×128 block.
    #[test]
    fn small_grids_take_the_blocks_that_keep_their_rate() {
        let h200 = named_gpu("NVIDIA H200", false);
        let at = |spec: Conv2dSpec, n: u32, hw: u32| pick_shaped(&h200, spec, n, hw).kernel.to_string();
        assert_eq!(at(Conv2dSpec::new(160, 960, 1), 32, 7), "tiled:m64n96k16-t4x12-w4-s1");
        let stem = Conv2dSpec::new(3, 64, 7).stride(2).padding(Padding::uniform(3));
        assert_eq!(at(stem, 1, 224), "tiled:m64n32k16-t4x4-w4-s1");
        assert_eq!(at(Conv2dSpec::new(512, 128, 1), 32, 28), "tiled:m64n128k8-t4x8-w8-s1");
    }

    /// The autotuner's candidates: the selection's kernel first, at most eight, no repeats,
    /// each one the device and the convolution accept at the precision; other families'
    /// references before the selected family's other configs; the f32 matrix kernel only for
    /// finite weights.
    #[cfg(feature = "tune")]
    #[test]
    fn autotune_candidates_start_from_the_selection() {
        let gpu = caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, true);
        let h100 = DeviceCaps { name: "NVIDIA H100 80GB HBM3".into(), ..gpu.clone() };
        for (caps, spec, precision) in [
            (&gpu, Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1)), Precision::F32),
            (&h100, Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1)), Precision::F32),
            (&gpu, Conv2dSpec::new(256, 256, 3).groups(32), Precision::F16Accum32),
            (&gpu, Conv2dSpec::new(32, 32, 3).groups(32), Precision::F32),
        ] {
            let selected = pick(caps, spec, precision).kernel;
            let list = autotune_candidates(caps, &spec, &selected, true);
            assert_eq!(list[0], selected);
            assert!(list.len() > 1, "{list:?}");
            let others = list.iter().filter(|k| k.family() != selected.family()).count();
            assert!(others <= AUTOTUNE_OTHER_FAMILIES, "{list:?}");
            for (i, k) in list.iter().enumerate() {
                assert!(!list[..i].contains(k), "{k} twice");
                assert_eq!(k.precision(), precision);
                k.check(&spec, caps).unwrap_or_else(|e| panic!("{k}: {e}"));
            }
            let other = list.iter().position(|k| k.family() != selected.family());
            let own = list.iter().skip(1).position(|k| k.family() == selected.family()).map(|p| p + 1);
            if let (Some(o), Some(s)) = (other, own) {
                assert!(o < s, "{list:?}");
            }
        }
        let dense = Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1));
        let matrix = nhwc::COOP_NHWC_F32.reference();
        let tiled = tiled::TILED.reference();
        let with_matrix = autotune_candidates(&h100, &dense, &tiled, true);
        assert!(with_matrix.iter().any(|k| k.family() == matrix.family()), "{with_matrix:?}");
        let with_inf = autotune_candidates(&h100, &dense, &tiled, false);
        assert!(!with_inf.iter().any(|k| k.family() == matrix.family()), "{with_inf:?}");
        assert!(!with_inf.iter().any(|k| k.family().starts_with("winograd")), "{with_inf:?}");
        // The n = 6 tiles not beyond the channels where they keep the F32 contract.
        let wide = Conv2dSpec::new(2048, 64, 3).padding(Padding::uniform(1));
        let families: Vec<&str> = autotune_candidates(&gpu, &wide, &tiled, true).iter().map(|k| k.family()).collect();
        assert!(families.contains(&"winograd") && !families.contains(&"winograd-f4"), "{families:?}");
        let narrow = Conv2dSpec::new(512, 64, 3).padding(Padding::uniform(1));
        let families: Vec<&str> = autotune_candidates(&gpu, &narrow, &tiled, true).iter().map(|k| k.family()).collect();
        assert!(families.contains(&"winograd-f4"), "{families:?}");
        // Not on a GPU the rules never give it, nor the stem kernel off NVIDIA.
        let amd = DeviceCaps { vendor: 0x1002, ..gpu.clone() };
        assert!(!autotune_candidates(&amd, &dense, &tiled, true).iter().any(|k| k.family() == matrix.family()));
        let image = Conv2dSpec::new(3, 64, 7).stride(2).padding(Padding::uniform(3));
        let f16 = pick(&amd, image, Precision::F16Accum32).kernel;
        let list = autotune_candidates(&amd, &image, &f16, true);
        assert!(!list.iter().any(|k| k.family() == stem::STEM.name()), "{list:?}");
        let on_nvidia = autotune_candidates(&gpu, &image, &f16, true);
        assert!(on_nvidia.iter().any(|k| k.family() == stem::STEM.name()), "{on_nvidia:?}");
    }

    /// The benchmark sweeps every family of a precision that the device runs, never the
    /// direct kernels.
    #[test]
    fn benchmark_families_follow_the_device() {
        use crate::advanced::benchmark_families;
        let nvidia = caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, true);
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        assert_eq!(
            benchmark_families(&cpu, Precision::F32),
            ["tiled", "winograd", "winograd-f4", "splitk", "pointwise", "depthwise"]
        );
        assert_eq!(benchmark_families(&cpu, Precision::F16Accum32), ["tiled-f16", "depthwise-f16"]);
        assert!(benchmark_families(&cpu, Precision::F16x3).is_empty());
        assert_eq!(
            benchmark_families(&nvidia, Precision::F16Accum32),
            [
                "coop-stem-f16",
                "coop-f16",
                "coop-nhwc-f16",
                "coop-winograd-f16",
                "coop-splitk-f16",
                "coop-grouped-f16",
                "coop-band-f16",
                "tiled-f16",
                "depthwise-f16"
            ]
        );
        assert_eq!(benchmark_families(&nvidia, Precision::F16x3), ["coop-f16x3", "coop-nhwc-f16x3"]);
        assert_eq!(
            benchmark_families(&nvidia, Precision::F32),
            [
                "coop-nhwc-f32",
                "coop-winograd-f32",
                "tiled",
                "winograd",
                "winograd-f4",
                "splitk",
                "pointwise",
                "depthwise"
            ]
        );
    }

    /// F32 runs on the matrix units where the device's declared rates make them the faster
    /// units (H100, not an RTX 4090 or an adapter not in the table), the weights are finite
    /// and, with the shape known, the estimate says so.
    #[test]
    fn f32_runs_on_matrix_units_where_the_declared_rates_say() {
        use crate::spec::Shape4;
        let named = |name: &str| named_gpu(name, true);
        let (h100, rtx, unknown) = (named("NVIDIA H100 80GB HBM3"), named("NVIDIA GeForce RTX 4090"), named("x"));
        // ResNet-50's 64-channel layer at 56×56 at batch 8 on the matrix path (F(4×4, 3×3) is
        // not weighed against it under 128 input channels and 3072 GEMM rows per component:
        // 1568 here); VGG-16's 128→256 layer at 56×56 at batch 8 for the checks below.
        let vgg = Conv2dSpec::new(128, 256, 3).padding(Padding::uniform(1));
        let at = |caps: &DeviceCaps, spec: Conv2dSpec, input: Option<Shape4>, finite: bool| {
            let opts = Conv2dOptions { tuning_key_input: input, ..Default::default() };
            select(caps, &spec, &opts, finite, |_| None).unwrap()
        };
        let big = Some(Shape4::new(8, 128, 56, 56));
        let narrow = Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1));
        let s = at(&h100, narrow, Some(Shape4::new(8, 64, 56, 56)), true);
        assert_eq!(s.kernel.family(), "coop-nhwc-f32", "{s}");
        assert!(s.reason.contains("f32 on cooperative matrices") && s.reason.contains("ms against"), "{s}");
        assert_eq!(at(&h100, vgg, None, true).kernel.family(), "tiled", "the shape is not known");
        // Elsewhere the FMA units (dilated, which the Winograd rule leaves alone); never with
        // non-finite weights.
        let dilated = Conv2dSpec::new(128, 256, 3).padding(Padding::uniform(2)).dilation((2, 2));
        for (caps, finite, family) in [(&rtx, true, "tiled"), (&unknown, true, "tiled"), (&h100, false, "tiled")] {
            assert_eq!(at(caps, dilated, big, finite).kernel.family(), family, "{}", caps.name);
        }
        assert_eq!(at(&h100, vgg, big, false).kernel.family(), "tiled");
        // Three input channels pad K 2.7x, depthwise layers have their own family.
        assert_eq!(
            at(&h100, Conv2dSpec::new(3, 64, 3), Some(Shape4::new(16, 3, 224, 224)), true).kernel.family(),
            "tiled"
        );
        let dw = Conv2dSpec::new(32, 32, 3).groups(32);
        assert_eq!(at(&h100, dw, Some(Shape4::new(32, 32, 112, 112)), true).kernel.family(), "depthwise");
        // The FMA side counts the configs the rule was fitted against: the shape rule's
        // 64x32 block does not move this layer (ResNet-50's 64->64 3x3, batch 1, dilated so
        // that the Winograd rule leaves it) off the matrix units.
        let l1 = Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(2)).dilation((2, 2));
        let s = at(&h100, l1, Some(Shape4::new(1, 64, 56, 56)), true);
        assert_ne!(s.kernel.family(), "tiled", "{s}");
        // The 64x64 block with K steps of 16 where the 128x128 one leaves a wave part empty
        // (ResNet-50's 256-channel 3x3 layer at 14x14: 98 tiles of 128x128 on 132
        // multiprocessors), the 128x128 block on whole waves (VGG-16's 512-channel layer at
        // 28x28: 392 tiles).
        // (The matrix path's own estimate: the Winograd rule takes both layers.)
        let matrix_block = |spec: Conv2dSpec, input: Shape4| {
            let problem = spec.problem(input).unwrap();
            f32_matrix_estimate(&h100, &spec, &problem, Layout::Nchw, true).unwrap().kernel.to_string()
        };
        let l3 = Conv2dSpec::new(256, 256, 3).padding(Padding::uniform(1));
        assert_eq!(matrix_block(l3, Shape4::new(32, 256, 14, 14)), "coop-nhwc-f32:m64n64k16-t4x8-w4-s1");
        let vgg_c4 = Conv2dSpec::new(512, 512, 3).padding(Padding::uniform(1));
        assert_eq!(matrix_block(vgg_c4, Shape4::new(16, 512, 28, 28)), "coop-nhwc-f32:m128n128k32-t8x8-w8-s1");
    }

    /// Every config a rule can pick is in its family's declared sweep, which the property
    /// tests run on lavapipe (tests/random_shapes.rs, tests/conv_shapes.rs).
    #[test]
    fn every_rule_config_is_in_its_sweep() {
        let tiled = crate::tile::default_sweep();
        let gpu = caps(wgpu::DeviceType::DiscreteGpu, crate::caps::VENDOR_NVIDIA, true);
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let rules = F32_SHAPE_CONFIGS.iter().map(|c| c.0).chain(F32_CPU_SHAPE_CONFIGS.iter().map(|c| c.0));
        for tile in rules.chain([f32_tile(&gpu).0, f32_tile(&cpu).0, WIDE_1X1_BLOCK.0, WIDE_1X1_SHORT_K_BLOCK]) {
            assert!(tiled.contains(&tile), "{} is not in the tiled sweep", tile.name());
        }
        let f16: Vec<TileConfig> = CHANNELS_LAST_F16_CONFIGS
            .iter()
            .map(|c| c.0)
            .chain(CHANNELS_LAST_F16_SHORT_K_CONFIGS.iter().map(|c| c.0))
            .chain(CHANNELS_LAST_F16_NARROW.iter().map(|c| c.0))
            .collect();
        let grouped = coop_grouped::grouped_sweep();
        for tile in GROUPED_CONFIGS {
            assert!(grouped.contains(&tile), "{} is not in the grouped sweep", tile.name());
        }
        let split: Vec<TileConfig> = CHANNELS_LAST_SPLIT_CONFIGS
            .iter()
            .map(|c| c.0)
            .chain(CHANNELS_LAST_SPLIT_SHORT_K_CONFIGS.iter().map(|c| c.0))
            .chain(MATRIX_RULE_SPLIT_CONFIGS.iter().map(|c| c.0))
            .collect();
        for (tiles, split) in [(f16, false), (split, true)] {
            let sweep = nhwc::nhwc_sweep(split);
            for tile in tiles {
                assert!(sweep.contains(&tile), "{} is not in the channels-last sweep", tile.name());
            }
        }
    }

    #[test]
    fn explicit_kernel_is_checked_and_kept() {
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let spec = Conv2dSpec::new(3, 8, 3);
        let k: Kernel = "tiled:m32n64k32-t4x4-w4-s2".parse().unwrap();
        let opts = Conv2dOptions { kernel: Some(k.clone()), ..Default::default() };
        let s = select(&cpu, &spec, &opts, true, |_| None).unwrap();
        assert_eq!((s.kernel, s.source), (k, ConfigSource::Explicit));
        let coop: Kernel = "coop-f16".parse().unwrap();
        let opts = Conv2dOptions { kernel: Some(coop), precision: Precision::F16Accum32, ..Default::default() };
        let e = select(&cpu, &spec, &opts, true, |_| None).unwrap_err().to_string();
        assert!(e.contains("coop-f16") && e.contains("cooperative matrices"), "{e}");
    }

    #[test]
    fn a_cached_decision_of_the_same_family_is_used() {
        let gpu = caps(wgpu::DeviceType::DiscreteGpu, 0x1002, false);
        let spec = Conv2dSpec::new(64, 64, 3);
        let tuned: Kernel = "tiled:m128n64k8-t8x8-w4-s1".parse().unwrap();
        let s =
            select(&gpu, &spec, &Conv2dOptions::default(), true, |_| Some((tuned.clone(), "tuned".into()))).unwrap();
        assert_eq!((s.kernel, s.source), (tuned, ConfigSource::TuningCache));
        // A decision of another family is not this precision's: ignored.
        let other: Kernel = "direct".parse().unwrap();
        let s =
            select(&gpu, &spec, &Conv2dOptions::default(), true, |_| Some((other.clone(), "tuned".into()))).unwrap();
        assert_eq!(s.source, ConfigSource::Default);
    }

    /// Narrow 1×1 layers at stride 1 on NCHW f32 tensors run the pointwise family where its
    /// grid fills the device (GPUs: at most 64 output channels; the wider block where K is
    /// long and the grid large, slices of the input channels where it is small), on CPU
    /// adapters every 1×1 layer of at least 128 positions whose weights fit; not at stride 2,
    /// nor on channels-last tensors, nor on 128 output channels on GPUs, nor in a grid that
    /// leaves a GPU empty.
    #[test]
    fn narrow_pointwise_layers_run_the_pointwise_family() {
        use crate::spec::Shape4;
        let gpu = caps(wgpu::DeviceType::DiscreteGpu, 0x1002, false);
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let at = |spec: Conv2dSpec, input: Shape4, caps: &DeviceCaps, layout: Layout| {
            let opts = Conv2dOptions { tuning_key_input: Some(input), layout, ..Default::default() };
            select(caps, &spec, &opts, true, |_| None).unwrap().kernel.to_string()
        };
        let nchw = Layout::Nchw;
        assert_eq!(at(Conv2dSpec::new(144, 24, 1), Shape4::new(32, 144, 56, 56), &gpu, nchw), "pointwise:c8-w64");
        assert_eq!(at(Conv2dSpec::new(256, 64, 1), Shape4::new(32, 256, 56, 56), &gpu, nchw), "pointwise:c16-w128");
        // Smaller grids: the input channels in 2 and 4 slices.
        assert_eq!(at(Conv2dSpec::new(384, 64, 1), Shape4::new(32, 384, 14, 14), &gpu, nchw), "pointwise:c8-k2-w128");
        assert_eq!(at(Conv2dSpec::new(384, 64, 1), Shape4::new(8, 384, 14, 14), &gpu, nchw), "pointwise:c8-k4-w128");
        // 32 input channels: not split, and one slice leaves this grid too small.
        assert!(!at(Conv2dSpec::new(32, 16, 1), Shape4::new(1, 32, 112, 112), &gpu, nchw).starts_with("pointwise"));
        assert_eq!(at(Conv2dSpec::new(96, 24, 1), Shape4::new(1, 96, 56, 56), &gpu, nchw), "pointwise:c8-k4-w128");
        assert!(!at(Conv2dSpec::new(64, 64, 1), Shape4::new(1, 64, 56, 56), &gpu, nchw).starts_with("pointwise"));
        for (spec, input, layout) in [
            (Conv2dSpec::new(144, 24, 1).stride(2), Shape4::new(32, 144, 56, 56), nchw),
            (Conv2dSpec::new(144, 24, 1), Shape4::new(32, 144, 56, 56), Layout::Nhwc),
            (Conv2dSpec::new(256, 128, 1), Shape4::new(32, 256, 56, 56), nchw),
            (Conv2dSpec::new(384, 64, 1), Shape4::new(1, 384, 14, 14), nchw),
        ] {
            let k = at(spec, input, &gpu, layout);
            assert!(!k.starts_with("pointwise"), "{spec:?} {input}: {k}");
        }
        assert_eq!(at(Conv2dSpec::new(256, 128, 1), Shape4::new(1, 256, 56, 56), &cpu, nchw), "pointwise:c16-w64");
        // 1024 input channels: 64 KiB of a block's weights at 16 channels, 32 at 8; 49
        // positions: the tiled kernel.
        assert_eq!(at(Conv2dSpec::new(1024, 256, 1), Shape4::new(1, 1024, 14, 14), &cpu, nchw), "pointwise:c8-w64");
        assert!(!at(Conv2dSpec::new(320, 1280, 1), Shape4::new(1, 320, 7, 7), &cpu, nchw).starts_with("pointwise"));
    }

    #[test]
    fn the_shape_rule_follows_the_problem_and_the_device() {
        use crate::spec::Shape4;
        let gpu = caps(wgpu::DeviceType::DiscreteGpu, 0x1002, false);
        let at = |spec: Conv2dSpec, input: Shape4, caps: &DeviceCaps| {
            let opts = Conv2dOptions { tuning_key_input: Some(input), ..Default::default() };
            select(caps, &spec, &opts, true, |_| None).unwrap()
        };
        // Large M and N, or N = 64 per group: the 128x64 block.
        // (Dilated, which the Winograd rule leaves to the shape rule.)
        let dilated = Conv2dSpec::new(128, 128, 3).padding(Padding::uniform(2)).dilation((2, 2));
        let vgg = at(dilated, Shape4::new(16, 128, 112, 112), &gpu);
        assert_eq!(vgg.kernel.to_string(), "tiled:m128n64k8-t8x8-w4-s1", "{vgg}");
        assert!(vgg.reason.contains("shape rule") && vgg.source == ConfigSource::Default, "{vgg}");
        // (At stride 2: at stride 1 the pointwise rule takes such 1×1 layers.)
        let narrow = at(Conv2dSpec::new(256, 64, 1).stride(2), Shape4::new(32, 256, 112, 112), &gpu);
        assert_eq!(narrow.kernel.to_string(), "tiled:m128n64k8-t8x8-w4-s1", "{narrow}");
        // 1×1 layers of 128 output channels or more: the 64x128 block (on 1×1 layers only:
        // the 3×3 layer above has as many channels).
        let pointwise = at(Conv2dSpec::new(512, 128, 1), Shape4::new(32, 512, 28, 28), &gpu);
        assert_eq!(pointwise.kernel.to_string(), "tiled:m64n128k8-t4x8-w8-s1", "{pointwise}");
        // Few tiles, deep K: the default's 64x96 block fills the device best (dilated, so
        // that the Winograd rule leaves it to this one).
        let dilated = Conv2dSpec::new(512, 512, 3).padding(Padding::uniform(2)).dilation((2, 2));
        let deep = at(dilated, Shape4::new(16, 512, 14, 14), &gpu);
        assert_eq!(deep.kernel.to_string(), "tiled:m64n96k16-t4x12-w4-s1", "{deep}");
        // 32 groups of 32 channels on a 7x7 grid, or 24 output channels: the 64x32 block.
        let grouped = at(
            Conv2dSpec::new(1024, 1024, 3).groups(32).padding(Padding::uniform(1)),
            Shape4::new(32, 1024, 7, 7),
            &gpu,
        );
        assert_eq!(grouped.kernel.to_string(), "tiled:m64n32k16-t4x4-w4-s1", "{grouped}");
        let projection = at(Conv2dSpec::new(144, 24, 1).stride(2), Shape4::new(32, 144, 112, 112), &gpu);
        assert_eq!(projection.kernel.to_string(), "tiled:m64n32k16-t4x4-w4-s1", "{projection}");
        // A grid of a few 32-row tiles: the 32x32 block.
        let tiny =
            at(Conv2dSpec::new(64, 64, 3).groups(2).padding(Padding::uniform(1)), Shape4::new(1, 64, 4, 4), &gpu);
        assert_eq!(tiny.kernel.to_string(), "tiled:m32n32k32-t4x4-w2-s2", "{tiny}");
        // Without the shape, the shape-free rule.
        let spec = Conv2dSpec::new(128, 128, 3).padding(Padding::uniform(1));
        assert_eq!(pick(&gpu, spec, Precision::F32).kernel.to_string(), "tiled:m64n96k16-t4x12-w4-s1");
        // On a CPU adapter, its own configs: the CPU default where nothing pads, the 64x32
        // block for few output channels (7×7 kernels: the Winograd rule takes 3×3 and 5×5
        // ones there).
        let cpu = caps(wgpu::DeviceType::Cpu, 0x10005, false);
        let spec = Conv2dSpec::new(128, 128, 7).padding(Padding::uniform(3));
        let on_cpu = at(spec, Shape4::new(16, 128, 112, 112), &cpu);
        assert_eq!(on_cpu.kernel.to_string(), "tiled:m64n64k16-t8x4-w4-s3", "{on_cpu}");
        assert!(on_cpu.reason.contains("CPU adapter with the input shape known"), "{on_cpu}");
        let cpu_projection = at(Conv2dSpec::new(144, 24, 1).stride(2), Shape4::new(1, 144, 112, 112), &cpu);
        assert_eq!(cpu_projection.kernel.to_string(), "tiled:m64n32k16-t4x4-w4-s1", "{cpu_projection}");
        // A small grid of many channels (ResNet-50's last layer's size, batch 1): the 32x64 block.
        let last = Conv2dSpec::new(512, 512, 7).padding(Padding::uniform(3));
        let cpu_last = at(last, Shape4::new(1, 512, 7, 7), &cpu);
        assert_eq!(cpu_last.kernel.to_string(), "tiled:m32n64k32-t4x4-w4-s2", "{cpu_last}");
        // At most 128 rows, the 32x64 block however many channels (ResNet-50's 1024→2048
        // stride-2 1×1 to 7×7 on lavapipe: 47.6 ms against the 64x64 block's 55.4 at batch 1,
        // 103.2 against 114.5 at batch 2); at 196, the 64x64.
        let wide = Conv2dSpec::new(1024, 2048, 1).stride(2);
        assert_eq!(at(wide, Shape4::new(1, 1024, 14, 14), &cpu).kernel.to_string(), "tiled:m32n64k32-t4x4-w4-s2");
        assert_eq!(at(wide, Shape4::new(2, 1024, 14, 14), &cpu).kernel.to_string(), "tiled:m32n64k32-t4x4-w4-s2");
        assert_eq!(at(wide, Shape4::new(4, 1024, 14, 14), &cpu).kernel.to_string(), "tiled:m64n64k16-t8x4-w4-s3");
        // Under WebGPU's default limits only the 64x32 block fits of the CPU configs.
        let small = DeviceCaps {
            limits: wgpu::Limits { max_compute_workgroup_storage_size: 16 * 1024, ..cpu.limits.clone() },
            ..cpu.clone()
        };
        let on_small = at(spec, Shape4::new(1, 128, 56, 56), &small);
        assert_eq!(on_small.kernel.to_string(), "tiled:m64n32k16-t4x4-w4-s1", "{on_small}");
    }
}
