//! wgconv: fast, portable 2-D convolution for Rust — PyTorch `nn.Conv2d` / ONNX `Conv`
//! forward (NCHW f32) as WGSL compute shaders on wgpu, on Vulkan, Metal, DX12, GL, CPU
//! drivers (lavapipe) and the browser's WebGPU.
//!
//! # Quickstart
//!
//! A [`Gpu`] (or your own device through [`Gpu::from_device`]), a [`Conv2dSpec`] written
//! as PyTorch's arguments, and a [`Conv2d`] that runs it on host slices
//! ([`Conv2d::forward`]) or encodes it into your command encoder ([`Conv2d::encode`]):
//!
//! ```no_run
//! use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Padding, Shape4};
//! // nn.Conv2d(3, 8, kernel_size=3, stride=1, padding="same", bias=True)
//! let gpu = Gpu::new()?;
//! let spec = Conv2dSpec::new(3, 8, 3).padding(Padding::same());
//! let weight = vec![0.1f32; spec.weight_len()]; // [C_out, C_in/groups, KH, KW]
//! let bias = vec![0.0f32; 8]; // given: the op has a bias (None: it has none)
//! let conv = Conv2d::new(&gpu, spec, &weight, Some(&bias), Conv2dOptions::default())?;
//! let x = vec![1.0f32; 2 * 3 * 16 * 16];
//! let y = conv.forward(&x, Shape4::new(2, 3, 16, 16))?; // [2, 8, 16, 16]
//! println!("{}", conv.kernel()); // the kernel selection chose, and why
//! # Ok::<(), wgconv::Error>(())
//! ```
//!
//! Stride, dilation and kernel size take a number or a `(height, width)` pair
//! (`.stride(2)`, `.stride((2, 1))`); padding a number, a pair, `[top, left, bottom, right]`
//! or a rule resolved against the input size ([`Padding::same`], [`Padding::valid`],
//! [`AutoPad`]). [`Conv2dOptions`] names the [`Precision`] (an accuracy contract), the
//! tensors' [`Layout`] and [`Storage`] (f32, or f16 through [`Conv2d::forward_f16`]) and, if
//! you want, the [`Kernel`]. Every mistake comes back as an [`Error`] variant of its kind,
//! before any GPU work is encoded.
//!
//! The examples (`cargo run --example NAME`): `basic` (host slices and your own encoder),
//! `byod` (your device, your passes around wgconv's), `f16`, `padding`, `autotune`.
//!
//! Inside, a kernel family is a folder under `src/families/` behind the crate's `Family`
//! trait and one line of its registry; `select` decides which kernel runs.
//!
//! Features: `tune` (default: the micro-tuner, its on-disk cache and GPU timing),
//! `naga-check` (translation of every kernel to SPIR-V, MSL, HLSL and GLSL with naga).
#![deny(missing_docs)]

mod alloc;
mod caps;
mod conv2d;
mod error;
mod families;
mod gpu;
mod kernel;
mod options;
mod scope;
mod select;
mod shader;
mod spec;
mod tile;

#[cfg(feature = "tune")]
mod cache;
#[cfg(feature = "naga-check")]
mod portable;
pub mod reference;
#[cfg(feature = "tune")]
mod timing;
#[cfg(feature = "tune")]
pub mod tune;

pub use caps::{declared_rates, DeclaredRates, DeviceCaps, KernelLimits, DECLARED_RATES};
pub use conv2d::{Conv2d, ConvPlan};
pub use error::{BufferIssue, Error, Result};
#[cfg(not(target_arch = "wasm32"))]
pub use gpu::shared_instance;
pub use gpu::{AdapterName, Gpu, GpuOptions, BUFFER_GRANULE};
/// The `half` this crate is built against: the f16 of [`Conv2d::forward_f16`] and
/// [`Conv2d::new_f16`].
pub use half;
pub use kernel::{Kernel, Precision};
pub use options::{Activation, ConfigSource, Conv2dOptions, Layout, Selection, Storage};
pub use select::AUTOTUNE_MAX_CANDIDATES;
pub use spec::{AutoPad, Conv2dSpec, ConvProblem, Padding, PaddingMode, Pair, Shape4};
pub use tile::TileConfig;
/// The wgpu this crate is built against: devices, queues and buffers handed to
/// [`Gpu::from_device`] and [`Conv2d::encode`] must come from this version.
pub use wgpu;

/// What the command line, the benchmarks and the tests use beyond the main API: every
/// family's vocabulary and sweep, adapter enumeration, and the selection's rules.
pub mod advanced {
    pub use crate::conv2d::PREPARED_CAPACITY;
    pub use crate::families::band::{band_sweep, BandConfig};
    pub use crate::families::coop::coop_sweep;
    pub use crate::families::depthwise::{staged_sweep, strip_sweep, StagedConfig, StripConfig};
    pub use crate::families::pointwise::{pointwise_sweep, PointwiseConfig};
    pub use crate::families::splitk::{split_sweep, SplitConfig};
    pub use crate::families::stem::{stem_sweep, StemConfig, StemLayout, MAX_STEM_K_FRAGS};
    pub use crate::families::tiled::default_sweep;
    #[cfg(not(target_arch = "wasm32"))]
    pub use crate::gpu::enumerate_adapters;
    pub use crate::gpu::{
        adapter_substring, choose_adapter, enumerate_adapters_async, runtime_checks_from_env, AdapterSummary,
    };
    pub use crate::kernel::PIPELINE_CACHE_CAPACITY;
    #[cfg(feature = "naga-check")]
    pub use crate::portable::check_portable;
    pub use crate::select::{
        CHANNELS_LAST_MAX_K_PADDING, DEPTHWISE_F16_COOP_CHANNELS_LAST_MAX_CHANNELS_PER_GROUP,
        DEPTHWISE_F16_COOP_MAX_CHANNELS_PER_GROUP, DEPTHWISE_MAX_CHANNELS_PER_GROUP, DEPTHWISE_SMALL_MAP,
        F16_SIMT_MAX_K, F16_SIMT_MAX_N, F32_MATRIX_EFFICIENCY, F32_MATRIX_MIN_RATE_RATIO, F32_SIMT_EFFICIENCY,
        STEM_CHANNELS_LAST_MIN_K, STEM_DEFAULT_MAX_CHANNELS, WINOGRAD_F4_MID_CHANNELS, WINOGRAD_F4_MID_MIN_ROWS,
        WINOGRAD_F4_MIN_CHANNELS, WINOGRAD_F4_MIN_ROWS, WINOGRAD_MAX_SCRATCH_PER_IMAGE, WINOGRAD_MIN_CHANNELS,
    };

    use crate::{Conv2dOptions, Conv2dSpec, DeviceCaps, Kernel, Layout, Precision, Result, Selection};

    /// The names of every kernel family, in the registry's order.
    pub fn family_names() -> Vec<&'static str> {
        crate::families::names()
    }

    /// A family's declared sweep (the benchmark's candidates), its reference first.
    pub fn sweep(family: &str) -> Result<Vec<Kernel>> {
        crate::families::family(family)
            .map(|f| f.sweep())
            .ok_or_else(|| crate::Error::ConfigParse(format!("unknown kernel family {family:?}")))
    }

    /// The families a benchmark of `precision` sweeps on a device: every registered family
    /// of that precision the device can run, in the registry's order, except those timed on
    /// request only (the direct kernels and `winograd-f6`, which autotune leaves out too).
    pub fn benchmark_families(caps: &DeviceCaps, precision: Precision) -> Vec<&'static str> {
        crate::families::FAMILIES
            .iter()
            .filter(|f| f.precision() == precision && f.benchmarked() && f.unavailable(caps).is_none())
            .map(|f| f.name())
            .collect()
    }

    /// The kernel a `Conv2d` with these options would run on a device with these
    /// capabilities, and why, for finite weights (without the tuning cache, and without
    /// opening a device).
    pub fn select(caps: &DeviceCaps, spec: &Conv2dSpec, options: &Conv2dOptions) -> Result<Selection> {
        crate::select::select(caps, spec, options, true, |_| None)
    }

    /// The precision's default kernel on a device, before any convolution is known (the
    /// family and the config its rule picks for the kind of device; the stem and depthwise
    /// rules, which depend on the convolution, are `select`'s).
    pub fn default_kernel(caps: &DeviceCaps, precision: Precision) -> Result<Kernel> {
        crate::select::rule_kernel(caps, precision).map(|(k, _)| k)
    }

    /// The WGSL of a kernel, composed for the representative problems of its family (one
    /// source for the families whose code does not depend on the problem).
    pub fn wgsl(kernel: &Kernel) -> Result<Vec<String>> {
        kernel.check_shape()?;
        kernel.config().representative_sources()
    }

    /// The shading languages the naga check translates a kernel to: `SPIR-V`, `MSL`,
    /// `HLSL`, `GLSL` (cooperative matrices: SPIR-V only; f16: not GLSL).
    #[cfg(feature = "naga-check")]
    pub fn portable_targets(kernel: &Kernel) -> Vec<&'static str> {
        kernel.family_impl().targets().iter().map(|t| t.name()).collect()
    }

    /// Whether the depthwise rule applies to this convolution at this precision on this
    /// device for tensors in `layout`: groups of at most [`DEPTHWISE_MAX_CHANNELS_PER_GROUP`]
    /// input channels (depthwise and narrow grouped layers; in f16 on cooperative matrices at
    /// most [`DEPTHWISE_F16_COOP_MAX_CHANNELS_PER_GROUP`], on channels-last tensors
    /// [`DEPTHWISE_F16_COOP_CHANNELS_LAST_MAX_CHANNELS_PER_GROUP`]), which run the depthwise
    /// family (or, where a block does not fit, the direct kernel) in f32 and f16.
    pub fn depthwise_rule_applies(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision, layout: Layout) -> bool {
        crate::select::depthwise_rule_applies(caps, spec, precision, layout)
    }

    /// Whether the depthwise rule runs this problem (its input shape known) on the depthwise
    /// family's staged kernel with these options: depthwise of multiplier 1, NCHW, stride 1,
    /// output planes small enough that several share a workgroup, f16 tensors read by the
    /// kernel or f16 operands (README, "Which kernel runs").
    pub fn depthwise_staged_applies(caps: &DeviceCaps, problem: &crate::ConvProblem, options: &Conv2dOptions) -> bool {
        crate::select::depthwise_staged_applies(caps, problem, options)
    }

    /// Whether the input shape can change the kernel a `Conv2d` with these options selects
    /// (then `Conv2d::new`, not told the shape, selects again at the first forward): not
    /// where the options name a kernel or give the shape, nor where a rule that needs no
    /// shape decides (the stem rule, the depthwise rule on most layers).
    pub fn shape_may_matter(caps: &DeviceCaps, spec: &Conv2dSpec, options: &Conv2dOptions) -> bool {
        crate::select::shape_may_matter(caps, spec, options)
    }

    /// Whether an f16 or f16x3 default on this device runs the channels-last family for this
    /// spec (where neither the stem nor the depthwise rule takes it first).
    pub fn channels_last_rule_applies(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision) -> bool {
        crate::select::channels_last_rule_applies(caps, spec, precision)
    }

    /// Whether f16 on this convolution (NCHW tensors) runs the SIMT kernel `tiled-f16` by
    /// default on this cooperative-matrix device: a small GEMM (README, "Which kernel runs").
    pub fn f16_small_gemm_applies(caps: &DeviceCaps, spec: &Conv2dSpec) -> bool {
        crate::select::f16_small_gemm_applies(caps, spec)
    }

    /// Whether f16 on this convolution runs the stem kernel by default on this device (NCHW
    /// tensors; on channels-last ones only for a K of at least
    /// [`STEM_CHANNELS_LAST_MIN_K`]).
    pub fn stem_is_default(caps: &DeviceCaps, spec: &Conv2dSpec) -> bool {
        crate::select::stem_rule(caps, spec, Precision::F16Accum32).is_some()
    }
}
