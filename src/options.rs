//! What a caller asks of a `Conv2d` besides its spec ([`Conv2dOptions`]), and what
//! selection answers ([`Selection`]).

use crate::kernel::{Kernel, Precision};
use crate::spec::Shape4;

/// The activation fused into the kernel's store, after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Activation {
    /// The convolution's output as it is.
    #[default]
    None,
    /// max(x, 0) with NaN kept, as PyTorch's.
    Relu,
}

/// How the input and output tensors are laid out in memory. The convolution is the same;
/// [`crate::Shape4`] stays `(n, c, h, w)` either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Layout {
    /// `[N, C, H, W]`: PyTorch's default (`torch.contiguous_format`) and ONNX's.
    #[default]
    Nchw,
    /// `[N, H, W, C]`: channels last (PyTorch's `torch.channels_last`, TensorFlow's default).
    Nhwc,
}

/// The element type of the input and output tensors in memory (host slices and device
/// buffers). The arithmetic is [`crate::Precision`]'s whatever the storage; the two are
/// independent, and of [`Layout`] too: every combination runs.
///
/// ```no_run
/// use wgconv::{half::f16, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Shape4, Storage};
/// let gpu = Gpu::new()?;
/// let spec = Conv2dSpec::new(3, 8, 3);
/// let weight = vec![f16::from_f32(0.1); spec.weight_len()];
/// let options = Conv2dOptions::default().storage(Storage::F16);
/// let conv = Conv2d::new_f16(&gpu, spec, &weight, None, options)?;
/// let y: Vec<f16> = conv.forward_f16(&vec![f16::ONE; 3 * 16 * 16], Shape4::new(1, 3, 16, 16))?;
/// # Ok::<(), wgconv::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Storage {
    /// f32: [`crate::Conv2d::forward`] and f32 buffers (4 bytes per element).
    #[default]
    F32,
    /// IEEE binary16, for inference where memory traffic dominates:
    /// [`crate::Conv2d::forward_f16`] on [`half::f16`] slices, and buffers of packed f16
    /// (2 bytes per element, two per 32-bit word, the lower half first; a buffer's size
    /// rounded up to 4 bytes). The depthwise family, the SIMT tiled one (NCHW) and the
    /// channels-last cooperative one read and write them themselves where the device has
    /// `SHADER_F16`; for the other kernels (and
    /// without the feature) a pass
    /// converts the input into the f32 they read, and one their f32 output into f16, in the
    /// same compute pass, reading and writing 32-bit words, so that f16 storage needs no
    /// device feature. Outputs are rounded to the nearest f16; beyond f16's range ±inf.
    F16,
}

impl Storage {
    /// The name a cache key records: `f32`, `f16`.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16",
        }
    }
    /// Bytes per element in memory: 4 for f32, 2 for f16.
    pub fn element_bytes(self) -> u64 {
        match self {
            Storage::F32 => 4,
            Storage::F16 => 2,
        }
    }
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Storage::F32 => "f32",
            Storage::F16 => "f16",
        })
    }
}

/// How a [`crate::Conv2d`] runs: the default (f32, no activation, selection decides the
/// kernel) or a default changed by the builder methods.
///
/// ```
/// use wgconv::{Activation, Conv2dOptions, Kernel, Precision};
/// let opts = Conv2dOptions::default().precision(Precision::F16Accum32).activation(Activation::Relu);
/// assert!(opts.kernel.is_none()); // selection decides
/// let named = Conv2dOptions::default().kernel("direct".parse::<Kernel>()?);
/// # Ok::<(), wgconv::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Conv2dOptions {
    /// The kernel to run (`"tiled:m64n96k16-t4x12-w4-s1".parse()?`); `None`: selection
    /// decides (see [`ConfigSource`]).
    pub kernel: Option<Kernel>,
    /// The activation fused after the bias.
    pub activation: Activation,
    /// The accuracy contract: f32 (default), f16 operands with f32 accumulation, or
    /// f32-accurate f16x3 on cooperative matrices; see [`Precision`].
    pub precision: Precision,
    /// The input shape the op will run on, where known: selection then also consults the
    /// tuning cache (its key includes the batch and size), weighs f32 on the matrix units
    /// against the FMA units, and picks the channels-last and f32 tile configs for the
    /// problem's size (the shape rules of `src/select.rs`). `None` with no [`Self::kernel`]:
    /// the first forward (or plan) supplies its input shape, and the kernel selected with it
    /// runs every later input. The op still runs any input size. A shape the spec cannot
    /// take (another channel count, a zero size, an empty output) is refused with
    /// [`crate::Error::InvalidOptions`].
    pub tuning_key_input: Option<Shape4>,
    /// The memory layout of the input and output tensors (default NCHW). Under
    /// [`Layout::Nhwc`] the kernels that read NCHW get the input rewritten into a scratch
    /// buffer first and their output rewritten after, in the same compute pass.
    pub layout: Layout,
    /// The element type of the input and output tensors (default f32; see [`Storage`]).
    pub storage: Storage,
    /// Measure instead of estimate, as PyTorch's `cudnn.benchmark` (feature `tune`): where
    /// the input shape is known (given here, else at the first forward or plan, which then
    /// block while it times, the asynchronous ones too) the op times the selection's kernel
    /// and up to [`crate::AUTOTUNE_MAX_CANDIDATES`] − 1 others that can run the layer (other
    /// families' reference kernels, the selected family's other configs) on scratch tensors
    /// of that shape, and keeps the fastest by median time among those whose output agrees
    /// with the selection's kernel's. The decision is stored in the autotune cache
    /// (`autotune.json` in the tuning cache's directory; key: adapter, driver, wgconv version
    /// and shaders, shape, precision, layout, storage, activation, bias, padding mode,
    /// whether the weights are finite, the device's capabilities), so a later op of the same
    /// key reuses it without timing; a corrupt entry, or one whose kernel no longer builds,
    /// is ignored with a warning and timed again. Where timing fails, the selection's kernel
    /// runs and its reason says why. Later inputs of other shapes run the kernel chosen. Off
    /// by default: selection then does no device work. Refused with a named kernel
    /// ([`Self::kernel`] leaves nothing to choose) and without the `tune` feature.
    pub autotune: bool,
}

impl Conv2dOptions {
    /// Runs this kernel instead of selection's choice (`None`: selection decides).
    pub fn kernel(mut self, kernel: impl Into<Option<Kernel>>) -> Self {
        self.kernel = kernel.into();
        self
    }
    /// Fuses this activation after the bias.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }
    /// The accuracy contract (see [`Precision`]).
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }
    /// The memory layout of the input and output tensors (see [`Layout`]).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }
    /// The element type of the input and output tensors (see [`Storage`]).
    pub fn storage(mut self, storage: Storage) -> Self {
        self.storage = storage;
        self
    }
    /// The input shape the op will run on, for the rules that need it (see the field);
    /// without it the first forward's shape serves.
    pub fn tuning_key_input(mut self, input: impl Into<Option<Shape4>>) -> Self {
        self.tuning_key_input = input.into();
        self
    }
    /// Times the candidate kernels at the known input shape and keeps the fastest (see the
    /// field).
    pub fn autotune(mut self, on: bool) -> Self {
        self.autotune = on;
        self
    }
}

impl Layout {
    /// The name a cache key records: `nchw`, `nhwc`.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Layout::Nchw => "nchw",
            Layout::Nhwc => "nhwc",
        }
    }
}

impl Activation {
    /// The name a cache key records: `none`, `relu`.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
        }
    }
}

/// Where the kernel of a `Conv2d` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "tune", derive(serde::Serialize))]
#[non_exhaustive]
pub enum ConfigSource {
    /// Named by the caller.
    Explicit,
    /// A decision of the tuner, read from the tuning cache.
    TuningCache,
    /// The selection's rule for this convolution, precision and device.
    Default,
    /// The rule's kernel did not fit the device; the first of its family's sweep that does
    /// (or the direct kernel).
    Fallback,
    /// The fastest of the candidates timed at the input shape ([`Conv2dOptions::autotune`]),
    /// measured now or read from the autotune cache.
    Autotune,
}

/// The kernel a `Conv2d` runs, where the choice came from, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Selection {
    /// The kernel.
    pub kernel: Kernel,
    /// Where the choice came from.
    pub source: ConfigSource,
    /// Why, in words: the rule that chose it, or what refused the others.
    pub reason: String,
}

/// `tiled:m32n64k32-t4x4-w4-s2 (default: …)`.
impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match self.source {
            ConfigSource::Explicit => "explicit",
            ConfigSource::TuningCache => "tuning cache",
            ConfigSource::Default => "default",
            ConfigSource::Fallback => "fallback",
            ConfigSource::Autotune => "autotune",
        };
        write!(f, "{} ({source}: {})", self.kernel, self.reason)
    }
}
