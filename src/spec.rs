//! What a convolution is: shapes, attributes and their validation, with PyTorch
//! `nn.Conv2d` / ONNX `Conv` semantics (NCHW, weight `[C_out, C_in/groups, KH, KW]`).

use crate::error::{Error, Result};

/// Input size plus padding along one axis must stay below this (2^29): see `problem`.
pub const MAX_PADDED_EXTENT: i64 = 1 << 29;

/// The most elements of one image (C·H·W) of a problem's input or output: the kernels
/// address an image with u32, and no device binds a larger one (16 GiB in f32).
pub const MAX_IMAGE_ELEMENTS: u64 = u32::MAX as u64;

/// The most elements of a problem's whole input or output: their bytes (4 per element)
/// then count in u64.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 60;

/// A 4-D NCHW shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
pub struct Shape4 {
    /// Batch (images).
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Height.
    pub h: u32,
    /// Width.
    pub w: u32,
}

impl Shape4 {
    /// `[n, c, h, w]`.
    pub const fn new(n: u32, c: u32, h: u32, w: u32) -> Self {
        Shape4 { n, c, h, w }
    }
    /// Elements of the whole tensor (u64: large batches exceed u32; saturating at
    /// `u64::MAX`, which no slice or buffer matches).
    pub fn len(&self) -> u64 {
        (self.n as u64).saturating_mul(self.per_image())
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Elements of one image (C·H·W; saturating at `u64::MAX`).
    pub fn per_image(&self) -> u64 {
        (self.c as u64 * self.h as u64).saturating_mul(self.w as u64)
    }
    /// The four sizes as `usize`, in NCHW order.
    pub fn dims(&self) -> [usize; 4] {
        [self.n as usize, self.c as usize, self.h as usize, self.w as usize]
    }
}

impl std::fmt::Display for Shape4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{}x{}", self.n, self.c, self.h, self.w)
    }
}

/// A (height, width) pair of sizes, as PyTorch's `int or tuple` arguments: `2` means
/// `(2, 2)`, `(2, 1)` height 2 and width 1. [`Conv2dSpec::stride`],
/// [`Conv2dSpec::dilation`] and [`Conv2dSpec::kernel_hw`] take anything that converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pair {
    /// Along the height.
    pub h: u32,
    /// Along the width.
    pub w: u32,
}

impl Pair {
    /// `(h, w)`.
    pub const fn new(h: u32, w: u32) -> Self {
        Pair { h, w }
    }
}

impl From<u32> for Pair {
    fn from(v: u32) -> Self {
        Pair::new(v, v)
    }
}

impl From<(u32, u32)> for Pair {
    fn from((h, w): (u32, u32)) -> Self {
        Pair::new(h, w)
    }
}

impl From<[u32; 2]> for Pair {
    fn from([h, w]: [u32; 2]) -> Self {
        Pair::new(h, w)
    }
}

/// Padding computed from the input size (ONNX `auto_pad`), resolved when a shape is known
/// ([`Conv2dSpec::problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum AutoPad {
    /// ONNX `NOTSET`: the explicit sizes of the [`Padding`].
    #[default]
    Explicit,
    /// ONNX `SAME_UPPER`: output size `ceil(input / stride)`; an odd total puts the extra row
    /// or column at the end (bottom, right), as PyTorch's `padding="same"` does.
    SameUpper,
    /// ONNX `SAME_LOWER`: as `SameUpper` with the extra row or column at the beginning.
    SameLower,
    /// ONNX `VALID`: no padding.
    Valid,
}

/// What the padded border holds (PyTorch's `padding_mode`). The kernels that implement the
/// other modes (the direct and the gathering tiled kernels, f32 and f16) read the border
/// from the input itself in their gather; the other families refuse them with
/// [`crate::Error::KernelRefused`], and selection passes them by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "tune", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum PaddingMode {
    /// Zeros (PyTorch's default, ONNX's only mode).
    #[default]
    Zeros,
    /// The input mirrored at its edge, the edge itself not repeated (`[2, 1 | 0, 1, 2 | 1, 0]`);
    /// each side's padding must be smaller than the input along its axis.
    Reflect,
    /// The edge repeated (`[0, 0 | 0, 1, 2 | 2, 2]`).
    Replicate,
    /// The input wrapped around (`[1, 2 | 0, 1, 2 | 0, 1]`); each side's padding must not
    /// exceed the input along its axis.
    Circular,
}

impl PaddingMode {
    /// The name a cache key records: `zeros`, `reflect`, `replicate`, `circular`.
    #[cfg_attr(not(feature = "tune"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            PaddingMode::Zeros => "zeros",
            PaddingMode::Reflect => "reflect",
            PaddingMode::Replicate => "replicate",
            PaddingMode::Circular => "circular",
        }
    }
    /// The mode's code in the kernels' `Params.flags` (bits 1-2).
    pub(crate) fn code(self) -> u32 {
        match self {
            PaddingMode::Zeros => 0,
            PaddingMode::Reflect => 1,
            PaddingMode::Replicate => 2,
            PaddingMode::Circular => 3,
        }
    }

    /// The input coordinate that a padded coordinate `i` reads, along an axis of `n`
    /// (`None`: a zero). The CPU twin of `pad_coord` in `params.wgsl`.
    pub fn source(self, i: i64, n: i64) -> Option<i64> {
        if (0..n).contains(&i) {
            return Some(i);
        }
        match self {
            PaddingMode::Zeros => None,
            // One reflection suffices: `problem` keeps the padding below n.
            PaddingMode::Reflect => Some(if i < 0 { -i } else { 2 * (n - 1) - i }),
            PaddingMode::Replicate => Some(i.clamp(0, n - 1)),
            PaddingMode::Circular => Some(i.rem_euclid(n)),
        }
    }
}

impl std::fmt::Display for PaddingMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PaddingMode::Zeros => "zeros",
            PaddingMode::Reflect => "reflect",
            PaddingMode::Replicate => "replicate",
            PaddingMode::Circular => "circular",
        })
    }
}

/// Padding on each side, ONNX `pads` order: top, left, bottom, right; or an [`AutoPad`]
/// rule resolved against the input size. Converts from PyTorch's forms: `1` (all sides),
/// `(1, 2)` (height, width), `[t, l, b, r]`, or an [`AutoPad`].
///
/// ```
/// use wgconv::{Conv2dSpec, Padding, Shape4};
/// // nn.Conv2d(8, 8, 4, padding="same"): 3 rows in all, the extra one at the bottom.
/// let p = Conv2dSpec::new(8, 8, 4).padding(Padding::same()).problem(Shape4::new(1, 8, 10, 10))?;
/// assert_eq!(p.spec.padding, Padding::new(1, 1, 2, 2));
/// assert_eq!(p.output, Shape4::new(1, 8, 10, 10));
/// # Ok::<(), wgconv::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Padding {
    /// Rows above.
    pub top: u32,
    /// Columns to the left.
    pub left: u32,
    /// Rows below.
    pub bottom: u32,
    /// Columns to the right.
    pub right: u32,
    /// A rule that replaces the sizes once the input is known ([`AutoPad::Explicit`]: none).
    #[cfg_attr(feature = "tune", serde(default))]
    pub auto: AutoPad,
}

impl Padding {
    /// Asymmetric padding (ONNX `pads` order is top, left, bottom, right).
    pub const fn new(top: u32, left: u32, bottom: u32, right: u32) -> Self {
        Padding { top, left, bottom, right, auto: AutoPad::Explicit }
    }
    /// PyTorch's `padding=(ph, pw)`: the same on both sides of each axis.
    pub const fn symmetric(ph: u32, pw: u32) -> Self {
        Padding::new(ph, pw, ph, pw)
    }
    /// PyTorch's `padding=p`.
    pub const fn uniform(p: u32) -> Self {
        Padding::new(p, p, p, p)
    }
    /// A rule resolved against the input size.
    pub const fn auto(rule: AutoPad) -> Self {
        Padding { top: 0, left: 0, bottom: 0, right: 0, auto: rule }
    }
    /// PyTorch's `padding="same"` (= ONNX `SAME_UPPER`; PyTorch allows it only with stride 1,
    /// where the output has the input's size).
    pub const fn same() -> Self {
        Padding::auto(AutoPad::SameUpper)
    }
    /// ONNX `SAME_UPPER`: see [`AutoPad::SameUpper`].
    pub const fn same_upper() -> Self {
        Padding::auto(AutoPad::SameUpper)
    }
    /// ONNX `SAME_LOWER`: see [`AutoPad::SameLower`].
    pub const fn same_lower() -> Self {
        Padding::auto(AutoPad::SameLower)
    }
    /// PyTorch's `padding="valid"`, ONNX `VALID`: none.
    pub const fn valid() -> Self {
        Padding::auto(AutoPad::Valid)
    }

    /// The explicit sizes for an input of `input` = (H, W): the padding itself unless it
    /// has a rule.
    pub fn resolve(&self, input: Pair, kernel: Pair, stride: Pair, dilation: Pair) -> Padding {
        // ONNX: out = ceil(in / s); total = max(0, (out - 1)·s + d·(k - 1) + 1 - in).
        let total = |size: u32, k: u32, s: u32, d: u32| -> u32 {
            let s = s.max(1) as i64;
            let out = (size as i64 + s - 1) / s;
            let span = d as i64 * (k as i64 - 1) + 1;
            ((out - 1) * s + span - size as i64).clamp(0, u32::MAX as i64) as u32
        };
        let (th, tw) = (total(input.h, kernel.h, stride.h, dilation.h), total(input.w, kernel.w, stride.w, dilation.w));
        match self.auto {
            AutoPad::Explicit => *self,
            AutoPad::Valid => Padding::uniform(0),
            AutoPad::SameUpper => Padding::new(th / 2, tw / 2, th - th / 2, tw - tw / 2),
            AutoPad::SameLower => Padding::new(th - th / 2, tw - tw / 2, th / 2, tw / 2),
        }
    }
}

impl From<u32> for Padding {
    fn from(p: u32) -> Self {
        Padding::uniform(p)
    }
}

impl From<(u32, u32)> for Padding {
    fn from((ph, pw): (u32, u32)) -> Self {
        Padding::symmetric(ph, pw)
    }
}

impl From<[u32; 4]> for Padding {
    fn from([t, l, b, r]: [u32; 4]) -> Self {
        Padding::new(t, l, b, r)
    }
}

impl From<AutoPad> for Padding {
    fn from(rule: AutoPad) -> Self {
        Padding::auto(rule)
    }
}

/// The attributes of a 2-D convolution: everything but the batch and spatial size.
///
/// ```
/// use wgconv::{Conv2dSpec, Padding, Shape4};
/// // nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=True)
/// let spec = Conv2dSpec::new(3, 64, 7).stride(2).padding(3);
/// let problem = spec.problem(Shape4::new(8, 3, 224, 224))?;
/// // Rectangular sizes as pairs, padding as PyTorch's or ONNX's rules:
/// let other = Conv2dSpec::new(3, 64, 3).stride((2, 1)).dilation((1, 2)).padding(Padding::same());
/// assert_eq!(problem.output, Shape4::new(8, 64, 112, 112));
/// # Ok::<(), wgconv::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Conv2dSpec {
    /// C_in.
    pub in_channels: u32,
    /// C_out.
    pub out_channels: u32,
    /// (KH, KW)
    pub kernel: [u32; 2],
    /// (SH, SW)
    pub stride: [u32; 2],
    /// Padding on each side (or an [`AutoPad`] rule).
    pub padding: Padding,
    /// What the padding holds (PyTorch's `padding_mode`; default zeros).
    #[cfg_attr(feature = "tune", serde(default))]
    pub padding_mode: PaddingMode,
    /// (DH, DW)
    pub dilation: [u32; 2],
    /// Groups: C_in and C_out are both divisible by it (C_in = groups: depthwise).
    pub groups: u32,
    /// Whether a bias is added (PyTorch's `bias=True`). [`crate::Conv2d::new`] sets it from
    /// the bias it is given.
    pub bias: bool,
}

impl Conv2dSpec {
    /// A square-kernel convolution with stride 1, no padding, no dilation, one group, no bias.
    pub fn new(in_channels: u32, out_channels: u32, kernel: u32) -> Self {
        Conv2dSpec {
            in_channels,
            out_channels,
            kernel: [kernel, kernel],
            stride: [1, 1],
            padding: Padding::default(),
            padding_mode: PaddingMode::Zeros,
            dilation: [1, 1],
            groups: 1,
            bias: false,
        }
    }
    /// The kernel's size: `3` or `(3, 5)` (height, width).
    pub fn kernel_hw(mut self, kernel: impl Into<Pair>) -> Self {
        let k = kernel.into();
        self.kernel = [k.h, k.w];
        self
    }
    /// Stride: `2` or `(2, 1)` (height, width).
    pub fn stride(mut self, stride: impl Into<Pair>) -> Self {
        let s = stride.into();
        self.stride = [s.h, s.w];
        self
    }
    /// Padding: `1`, `(1, 2)` (height, width), `[top, left, bottom, right]`,
    /// [`Padding::same()`], [`Padding::valid()`], … (see [`Padding`]).
    pub fn padding(mut self, padding: impl Into<Padding>) -> Self {
        self.padding = padding.into();
        self
    }
    /// What the padding holds: [`PaddingMode::Zeros`] (default), `Reflect`, `Replicate` or
    /// `Circular`, as PyTorch's `padding_mode`.
    pub fn padding_mode(mut self, mode: PaddingMode) -> Self {
        self.padding_mode = mode;
        self
    }
    /// Dilation: `2` or `(2, 1)` (height, width).
    pub fn dilation(mut self, dilation: impl Into<Pair>) -> Self {
        let d = dilation.into();
        self.dilation = [d.h, d.w];
        self
    }
    /// Groups.
    pub fn groups(mut self, groups: u32) -> Self {
        self.groups = groups;
        self
    }
    /// Whether a bias is added. Optional: [`crate::Conv2d::new`] decides by whether it is
    /// given a bias; kept for specs used without weights (benchmarks, the tuner's keys).
    pub fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// AlexNet's first layer: 3→96, 11×11, stride 4, padding 2, bias.
    pub fn alexnet_conv1() -> Self {
        Conv2dSpec::new(3, 96, 11).stride(4).padding(2).with_bias(true)
    }

    /// Builds a spec from signed attributes as ONNX stores them (`int64`), refusing
    /// zero or negative strides and dilations and negative padding with the bad value named.
    #[allow(clippy::too_many_arguments)]
    pub fn from_signed(
        in_channels: i64,
        out_channels: i64,
        kernel: [i64; 2],
        stride: [i64; 2],
        pads: [i64; 4],
        dilation: [i64; 2],
        groups: i64,
        bias: bool,
    ) -> Result<Self> {
        fn positive(name: &str, v: i64) -> Result<u32> {
            if v <= 0 {
                return Err(Error::spec(format!("{name} must be positive, got {v}")));
            }
            u32::try_from(v).map_err(|_| Error::spec(format!("{name} {v} is too large")))
        }
        fn non_negative(name: &str, v: i64) -> Result<u32> {
            if v < 0 {
                return Err(Error::spec(format!("{name} must not be negative, got {v}")));
            }
            u32::try_from(v).map_err(|_| Error::spec(format!("{name} {v} is too large")))
        }
        let spec = Conv2dSpec {
            in_channels: positive("in_channels", in_channels)?,
            out_channels: positive("out_channels", out_channels)?,
            kernel: [positive("kernel height", kernel[0])?, positive("kernel width", kernel[1])?],
            stride: [positive("stride height", stride[0])?, positive("stride width", stride[1])?],
            padding: Padding::new(
                non_negative("padding top", pads[0])?,
                non_negative("padding left", pads[1])?,
                non_negative("padding bottom", pads[2])?,
                non_negative("padding right", pads[3])?,
            ),
            padding_mode: PaddingMode::Zeros,
            dilation: [positive("dilation height", dilation[0])?, positive("dilation width", dilation[1])?],
            groups: positive("groups", groups)?,
            bias,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Checks the attributes on their own (shapes come later, in [`Conv2dSpec::problem`]).
    pub fn validate(&self) -> Result<()> {
        let checks: [(&str, u32); 8] = [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
            ("kernel height", self.kernel[0]),
            ("kernel width", self.kernel[1]),
            ("stride height", self.stride[0]),
            ("stride width", self.stride[1]),
            ("dilation height", self.dilation[0]),
            ("dilation width", self.dilation[1]),
        ];
        for (name, v) in checks {
            if v == 0 {
                return Err(Error::spec(format!("{name} must be positive, got 0")));
            }
        }
        if self.groups == 0 {
            return Err(Error::spec("groups must be positive, got 0"));
        }
        if !self.in_channels.is_multiple_of(self.groups) {
            return Err(Error::spec(format!(
                "groups = {} does not divide in_channels = {}",
                self.groups, self.in_channels
            )));
        }
        if !self.out_channels.is_multiple_of(self.groups) {
            return Err(Error::spec(format!(
                "groups = {} does not divide out_channels = {}",
                self.groups, self.out_channels
            )));
        }
        // Kernels index K and the weights with 32-bit arithmetic (the packed, tile-padded
        // weights are checked against the device's binding size when a Conv2d is built).
        let k = (self.in_channels_per_group() as u64 * self.kernel[0] as u64).saturating_mul(self.kernel[1] as u64);
        let weights = k.saturating_mul(self.out_channels as u64);
        if k > i32::MAX as u64 || weights > i32::MAX as u64 {
            return Err(Error::TooLarge(format!(
                "kernel {}x{} over {} input channels per group: {} taps, {} weights (at most 2^31 - 1)",
                self.kernel[0],
                self.kernel[1],
                self.in_channels_per_group(),
                k,
                weights
            )));
        }
        Ok(())
    }

    // The size helpers never panic, also on specs `validate` refuses (groups = 0 gives 0,
    // sizes saturate): callers size their slices with them before a Conv2d can refuse.
    /// C_in / groups.
    pub fn in_channels_per_group(&self) -> u32 {
        self.in_channels.checked_div(self.groups).unwrap_or(0)
    }
    /// C_out / groups.
    pub fn out_channels_per_group(&self) -> u32 {
        self.out_channels.checked_div(self.groups).unwrap_or(0)
    }
    /// The GEMM's reduction length: C_in/groups · KH · KW (saturating; `validate` refuses
    /// anything over 2^31 - 1).
    pub fn k_total(&self) -> u32 {
        self.in_channels_per_group().saturating_mul(self.kernel[0]).saturating_mul(self.kernel[1])
    }
    /// Elements of the weight tensor `[C_out, C_in/groups, KH, KW]`.
    pub fn weight_len(&self) -> usize {
        (self.out_channels as usize).saturating_mul(self.k_total() as usize)
    }
    /// The weight tensor's shape `[C_out, C_in/groups, KH, KW]`.
    pub fn weight_shape(&self) -> Shape4 {
        Shape4::new(self.out_channels, self.in_channels_per_group(), self.kernel[0], self.kernel[1])
    }

    /// Validates an input shape against the spec and returns the full problem.
    pub fn problem(&self, input: Shape4) -> Result<ConvProblem> {
        self.validate()?;
        if input.c != self.in_channels {
            return Err(Error::ShapeMismatch {
                what: "the input",
                unit: "channels",
                expected: self.in_channels as u64,
                got: input.c as u64,
            });
        }
        if input.n == 0 || input.h == 0 || input.w == 0 {
            return Err(Error::spec(format!("input shape {input} has a zero dimension")));
        }
        let out_dim = |axis, size: u32, pad_a: u32, pad_b: u32, k: u32, d: u32, s: u32| {
            let padded = size as i64 + pad_a as i64 + pad_b as i64;
            // The kernels locate taps with i32 coordinates in the padded plane, and the gather
            // table marks padded K rows with an offset of -2^30 that must never land back in
            // range: every coordinate stays below 2^29 in size.
            if padded >= MAX_PADDED_EXTENT {
                return Err(Error::TooLarge(format!(
                    "{axis}: input {size} + padding {} = {padded} (at most {} with padding)",
                    pad_a as u64 + pad_b as u64,
                    MAX_PADDED_EXTENT - 1
                )));
            }
            let span = d as i64 * (k as i64 - 1) + 1;
            if padded < span {
                return Err(Error::EmptyOutput {
                    axis,
                    size: 0,
                    input: size,
                    pad: pad_a.saturating_add(pad_b),
                    kernel: span as u64,
                });
            }
            let o = (padded - span) / s as i64 + 1;
            u32::try_from(o).map_err(|_| Error::TooLarge(format!("{axis} = {o}")))
        };
        let p = self.padding.resolve(
            Pair::new(input.h, input.w),
            Pair::from(self.kernel),
            Pair::from(self.stride),
            Pair::from(self.dilation),
        );
        let oh = out_dim("output height", input.h, p.top, p.bottom, self.kernel[0], self.dilation[0], self.stride[0])?;
        let ow = out_dim("output width", input.w, p.left, p.right, self.kernel[1], self.dilation[1], self.stride[1])?;
        // PyTorch's limits: a reflection must not reach past the opposite edge, a wrap not
        // past a whole period.
        let limit = match self.padding_mode {
            PaddingMode::Reflect => Some((1, "smaller than")),
            PaddingMode::Circular => Some((0, "at most")),
            _ => None,
        };
        if let Some((strict, words)) = limit {
            let sides = [
                ("top", p.top, "height", input.h),
                ("bottom", p.bottom, "height", input.h),
                ("left", p.left, "width", input.w),
                ("right", p.right, "width", input.w),
            ];
            for (side, pad, axis, size) in sides {
                if pad as u64 + strict > size as u64 {
                    return Err(Error::spec(format!(
                        "padding_mode {}: the {side} padding {pad} must be {words} the input {axis} {size}",
                        self.padding_mode
                    )));
                }
            }
        }
        let output = Shape4::new(input.n, self.out_channels, oh, ow);
        // The kernels address one image's elements with u32 (batches are bound in chunks of
        // whole images), and the tensors' bytes must count in u64.
        for (what, shape) in [("input", input), ("output", output)] {
            if shape.per_image() > MAX_IMAGE_ELEMENTS {
                return Err(Error::TooLarge(format!(
                    "one {what} image {shape} has {} elements (at most {MAX_IMAGE_ELEMENTS})",
                    shape.per_image()
                )));
            }
            if shape.len() > MAX_TENSOR_ELEMENTS {
                return Err(Error::TooLarge(format!(
                    "the {what} {shape} has {} elements (at most {MAX_TENSOR_ELEMENTS})",
                    shape.len()
                )));
            }
        }
        // The problem's spec carries the padding resolved for this input: kernels read sizes.
        let spec = Conv2dSpec { padding: p, ..*self };
        Ok(ConvProblem { spec, input, output })
    }
}

/// A spec applied to one input shape: everything a kernel needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvProblem {
    /// The convolution, its padding resolved for this input (never an [`AutoPad`] rule).
    pub spec: Conv2dSpec,
    /// The input's shape.
    pub input: Shape4,
    /// The output's shape (PyTorch's formula).
    pub output: Shape4,
}

impl ConvProblem {
    /// Multiply-adds ×2 of the whole batch.
    pub fn flops(&self) -> f64 {
        2.0 * self.output.len() as f64 * self.spec.k_total() as f64
    }
    /// The fewest bytes a kernel must move: input, weights, bias read once, output written once.
    pub fn min_bytes(&self) -> f64 {
        let bias = if self.spec.bias { self.spec.out_channels as f64 } else { 0.0 };
        4.0 * (self.input.len() as f64 + self.spec.weight_len() as f64 + bias + self.output.len() as f64)
    }
    /// The same problem with another batch.
    pub fn with_batch(&self, n: u32) -> Self {
        let mut p = *self;
        p.input.n = n;
        p.output.n = n;
        p
    }
}

impl std::fmt::Display for ConvProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "{} -> {} k{}x{} s{},{} p{},{},{},{}{} d{},{} g{}{}",
            self.input,
            self.output,
            s.kernel[0],
            s.kernel[1],
            s.stride[0],
            s.stride[1],
            s.padding.top,
            s.padding.left,
            s.padding.bottom,
            s.padding.right,
            if s.padding_mode == PaddingMode::Zeros { String::new() } else { format!(" {}", s.padding_mode) },
            s.dilation[0],
            s.dilation[1],
            s.groups,
            if s.bias { " bias" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alexnet_output_shape() {
        let p = Conv2dSpec::alexnet_conv1().problem(Shape4::new(256, 3, 224, 224)).unwrap();
        assert_eq!(p.output, Shape4::new(256, 96, 55, 55));
    }

    #[test]
    fn output_formula_matches_pytorch() {
        // floor((H + pt + pb - d(K-1) - 1)/s) + 1
        let spec = Conv2dSpec::new(1, 1, 3).stride((2, 3)).padding([1, 0, 2, 1]).dilation((2, 1));
        let p = spec.problem(Shape4::new(1, 1, 10, 7)).unwrap();
        assert_eq!(p.output.h, (10 + 1 + 2 - 2 * 2 - 1) / 2 + 1);
        assert_eq!(p.output.w, (7 + 1 - 2 - 1) / 3 + 1);
    }

    #[test]
    fn auto_pad_follows_onnx() {
        let problem = |spec: Conv2dSpec, h, w| spec.problem(Shape4::new(1, 1, h, w)).unwrap();
        // Stride 1, odd total (k = 4): SAME_UPPER puts the extra at the end, SAME_LOWER first.
        let p = problem(Conv2dSpec::new(1, 1, 4).padding(Padding::same_upper()), 7, 9);
        assert_eq!((p.spec.padding, p.output.h, p.output.w), (Padding::new(1, 1, 2, 2), 7, 9));
        let p = problem(Conv2dSpec::new(1, 1, 4).padding(Padding::same_lower()), 7, 9);
        assert_eq!(p.spec.padding, Padding::new(2, 2, 1, 1));
        // Stride 2: out = ceil(in / 2); in 7, k 3: total = 3·2 + 3 - 7 = 2.
        let p = problem(Conv2dSpec::new(1, 1, 3).stride(2).padding(Padding::same()), 7, 8);
        assert_eq!((p.output.h, p.output.w), (4, 4));
        assert_eq!(p.spec.padding, Padding::new(1, 0, 1, 1));
        // Dilation 2, k 3: span 5, total 4.
        let p = problem(Conv2dSpec::new(1, 1, 3).dilation(2).padding(AutoPad::SameUpper), 6, 6);
        assert_eq!((p.spec.padding, p.output.h), (Padding::uniform(2), 6));
        let p = problem(Conv2dSpec::new(1, 1, 3).padding(Padding::valid()), 6, 6);
        assert_eq!((p.spec.padding, p.output.h), (Padding::uniform(0), 4));
    }

    #[test]
    fn pairs_and_padding_convert() {
        let s = Conv2dSpec::new(1, 1, 3).stride(2).dilation((1, 2)).kernel_hw((3, 5)).padding((1, 2));
        assert_eq!((s.stride, s.dilation, s.kernel), ([2, 2], [1, 2], [3, 5]));
        assert_eq!(s.padding, Padding::new(1, 2, 1, 2));
        assert_eq!(Conv2dSpec::new(1, 1, 3).padding(1).padding, Padding::uniform(1));
    }
}
