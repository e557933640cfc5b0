//! The one error type of the library. Every invalid spec, input, buffer or config is
//! refused with a value that names what was wrong; nothing in the library panics on bad
//! input. One variant per kind of mistake, so that callers can match on the kind; each
//! variant's documentation shows a message it produces. Sizes in one message share one
//! unit: elements for host slices, bytes for GPU buffers.

use thiserror::Error;

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, each naming its cause.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The convolution's attributes are inconsistent (zero sizes, channels not divisible by
    /// the groups, a bias flag without a bias, …).
    ///
    /// `invalid convolution: groups = 3 does not divide in_channels = 8`
    #[error("invalid convolution: {0}")]
    InvalidSpec(String),

    /// A host slice or an input shape does not match the convolution (the weights, the
    /// bias, the input's length or channels). Sizes in elements (or channels).
    ///
    /// `the weight has 107 elements, expected 108`
    #[error("{what} has {got} {unit}, expected {expected}")]
    ShapeMismatch {
        /// What was measured: "the weight", "the bias", "the input".
        what: &'static str,
        /// The unit of both sizes: "elements" or "channels".
        unit: &'static str,
        /// The size needed.
        expected: u64,
        /// The size given.
        got: u64,
    },

    /// The output would have no elements along an axis.
    ///
    /// `output would be empty: output height = 0 (input 2 + padding 0 is smaller than the dilated kernel 3)`
    #[error("output would be empty: {axis} = {size} (input {input} + padding {pad} is smaller than the dilated kernel {kernel})")]
    EmptyOutput {
        /// `"output height"` or `"output width"`.
        axis: &'static str,
        /// The output size the formula gives.
        size: i64,
        /// The input size.
        input: u32,
        /// The padding along the axis (both sides).
        pad: u32,
        /// The dilated extent d·(k−1)+1 (u64: it can exceed u32).
        kernel: u64,
    },

    /// A GPU buffer handed to [`crate::Conv2d::encode`], [`crate::Conv2d::plan`] or
    /// [`crate::Gpu::read_buffer`] cannot be used as it is; refused before anything is
    /// encoded.
    ///
    /// `the output buffer is the input buffer: a convolution cannot run in place`
    #[error("the {buffer} buffer {issue}")]
    Buffer {
        /// `"input"`, `"output"` or `"read-back"`.
        buffer: &'static str,
        /// What is wrong with it.
        issue: BufferIssue,
    },

    /// What the device cannot do: a wgpu feature it was not created with, or a limit too
    /// low, named in `needs` (the message says whether the adapter offers it and how to ask
    /// for it).
    ///
    /// `tiled-f16: needs the SHADER_F16 feature, which the device on llvmpipe was not created with although the adapter offers it: add wgpu::Features::SHADER_F16 to DeviceDescriptor::required_features`
    #[error("{message}")]
    Unsupported {
        /// The wgpu feature or limit: `"SHADER_F16"`, `"EXPERIMENTAL_COOPERATIVE_MATRIX"`,
        /// `"max_compute_workgroups_per_dimension"`, …
        needs: String,
        /// The whole explanation.
        message: String,
    },

    /// A kernel config that cannot run (its tiles, the device's limits, or the convolution),
    /// with the reason.
    ///
    /// `kernel tiled:m64n64k16-t8x8-w2-s2 is refused: 16896 B of workgroup memory, over the device's 16384 B`
    #[error("kernel {kernel} is refused: {reason}")]
    KernelRefused {
        /// The kernel, `family:config` (see [`Error::family`]).
        kernel: String,
        /// Why, naming the limit.
        reason: String,
    },

    /// A name that does not parse: a kernel, a config, a precision, a family.
    ///
    /// `cannot parse tile config "m32": expected e.g. m32n64k32-t4x4-w4-s2`
    #[error("{0}")]
    ConfigParse(String),

    /// Options that contradict each other or are out of range (a kernel of another
    /// precision than the one asked for, a tuner budget of zero rounds, …).
    ///
    /// `kernel tiled-f16:m64n64k16-t8x8-w2-s2 computes in f16, but f32 was asked for`
    #[error("{0}")]
    InvalidOptions(String),

    /// A tensor beyond what the device (or the host) can hold or address.
    ///
    /// `tensor too large: the packed weights needs 3000000000 B, over the device's 2147483648 B`
    #[error("tensor too large: {0}")]
    TooLarge(String),

    /// No adapter matched.
    ///
    /// `no GPU adapter found whose name contains "h100" (found: ["llvmpipe (LLVM 15.0.6, 256 bits)"])`
    #[error("no GPU adapter found{0}")]
    NoAdapter(String),

    /// The adapter refused to create a device.
    ///
    /// `could not create a device on llvmpipe: Limit 'max_bind_groups' value 9 is better than allowed 8`
    #[error("could not create a device on {adapter}: {reason}")]
    Device {
        /// The adapter's name.
        adapter: String,
        /// wgpu's reason.
        reason: String,
    },

    /// The host or the device ran out of memory: wgconv names what it was allocating and
    /// how large it was. `stage` is `"host allocation"` for the host's memory (a size the
    /// allocator refused: wgconv reserves every shape-sized host buffer fallibly, so that
    /// this is an error, not an abort), otherwise what wgconv was doing on the device.
    ///
    /// `out of memory during buffer creation: wgconv output (128000000 B): Not enough memory left`
    #[error("out of memory during {stage}: {what} ({bytes} B): {message}")]
    OutOfMemory {
        /// `"host allocation"`, or what wgconv was doing on the device.
        stage: &'static str,
        /// What was being allocated (a buffer's label, a host buffer's role).
        what: String,
        /// Its size in bytes.
        bytes: u64,
        /// The allocator's or wgpu's message.
        message: String,
    },

    /// wgpu reported a validation error or failed an operation.
    ///
    /// `wgpu map: Buffer is destroyed`
    #[error("wgpu {stage}: {message}")]
    Wgpu {
        /// What wgconv was doing.
        stage: &'static str,
        /// wgpu's message.
        message: String,
    },

    /// A value beyond f16's range under an f16 precision.
    ///
    /// `the input holds a value beyond f16's range (|x| > 65504): the f16 and f16x3 precisions cannot represent it; use Precision::F32 or rescale`
    #[error("{what} holds a value beyond f16's range (|x| > 65504{detail}): the f16 and f16x3 precisions cannot represent it; use Precision::F32 or rescale")]
    F16Range {
        /// The weights or the input.
        what: &'static str,
        /// An example value, where known.
        detail: String,
    },

    /// The device was lost (a driver reset, the GPU removed, or `Device::destroy`): nothing
    /// more runs on it; open a new [`crate::Gpu`]. Recognised on devices that
    /// [`crate::Gpu::new`] opened (a device the caller brought keeps its own lost callback).
    ///
    /// `the device was lost (Destroyed)`
    #[error("the device was lost ({reason}){}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    DeviceLost {
        /// wgpu's reason: `Destroyed` or `Unknown`.
        reason: String,
        /// wgpu's message.
        message: String,
    },

    /// An async call that would wait for its turn: a [`crate::Conv2d::forward_async`] or
    /// [`crate::Conv2d::take_range_flag_async`] of an f16 op while a forward or a flag read
    /// of it is in flight.
    ///
    /// `another forward (or range-flag read) of this f16 op is in flight: await it first, or use one Conv2d per task`
    #[error("{0}")]
    Busy(String),

    /// The tuning cache could not be read or written.
    ///
    /// `tuning cache /home/me/.cache/wgconv/tuning.json: read: Permission denied (os error 13)`
    #[error("{0}")]
    Cache(String),

    /// The tuner or a measurement failed (a config that did not run, no usable time).
    ///
    /// `the original config tiled:m64n64k16-t8x8-w2-s2 measured 0 ms`
    #[error("{0}")]
    Tune(String),
}

/// What is wrong with a GPU buffer ([`Error::Buffer`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BufferIssue {
    /// The input and the output are one buffer.
    ///
    /// `is the input buffer: a convolution cannot run in place`
    #[error("is the input buffer: a convolution cannot run in place")]
    SameAsInput,
    /// It lacks a usage the operation needs.
    ///
    /// `lacks STORAGE usage (it has COPY_DST)`
    #[error("lacks {needed} usage (it has {has})")]
    MissingUsage {
        /// The usage needed, e.g. `STORAGE`.
        needed: String,
        /// The usages it was created with.
        has: String,
    },
    /// It is smaller than the operation needs (bytes).
    ///
    /// `has 4092 B, expected at least 4096 B`
    #[error("has {size} B, expected at least {needed} B")]
    TooSmall {
        /// Bytes needed.
        needed: u64,
        /// Bytes it has.
        size: u64,
    },
    /// It belongs to another device than the `Conv2d`'s.
    ///
    /// `belongs to another device than the Conv2d's (llvmpipe)`
    #[error("belongs to another device than the Conv2d's ({0})")]
    ForeignDevice(String),
}

impl BufferIssue {
    /// A missing usage, with the ones the buffer has.
    pub(crate) fn missing(needed: wgpu::BufferUsages, buffer: &wgpu::Buffer) -> Self {
        // Flag names as wgpu spells them (`STORAGE | COPY_SRC`), without the type's wrapper.
        let names = |u: wgpu::BufferUsages| {
            let names: Vec<_> = u.iter_names().map(|(name, _)| name).collect();
            if names.is_empty() {
                "no usage".to_string()
            } else {
                names.join(" | ")
            }
        };
        BufferIssue::MissingUsage { needed: names(needed), has: names(buffer.usage()) }
    }
}

impl Error {
    pub(crate) fn spec(msg: impl Into<String>) -> Self {
        Error::InvalidSpec(msg.into())
    }

    /// An [`Error::Unsupported`] whose `needs` is the feature its message names.
    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        let message = message.into();
        let needs = if message.contains("SHADER_F16") {
            "SHADER_F16"
        } else if message.contains("cooperative matri") {
            "EXPERIMENTAL_COOPERATIVE_MATRIX"
        } else {
            "a device capability"
        };
        Error::Unsupported { needs: needs.into(), message }
    }

    /// The kernel family a [`Error::KernelRefused`] names (`tiled` of
    /// `tiled:m64n64k16-t8x8-w2-s2`).
    pub fn family(&self) -> Option<&str> {
        match self {
            Error::KernelRefused { kernel, .. } => Some(kernel.split(':').next().unwrap_or(kernel)),
            _ => None,
        }
    }
}
