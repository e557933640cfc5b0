//! The one error type of the library. Every invalid spec, input or config is refused
//! with a value that names what was wrong; nothing in the library panics on bad input.

use thiserror::Error;

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, each naming its cause.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The convolution's attributes are inconsistent (zero sizes, channels not divisible by
    /// the groups, a bias that does not match the spec, …).
    #[error("invalid convolution: {0}")]
    InvalidSpec(String),

    /// The input's channel count differs from the spec's.
    #[error("input has {got} channels but the convolution expects {expected}")]
    ChannelMismatch {
        /// The spec's input channels.
        expected: u32,
        /// The input's.
        got: u32,
    },

    /// A slice or buffer has the wrong size.
    #[error("{what} has {got} elements, expected {expected}")]
    WrongLength {
        /// What was measured (with its unit where it is not elements).
        what: &'static str,
        /// The size needed.
        expected: usize,
        /// The size given.
        got: usize,
    },

    /// The output would have no elements along an axis.
    #[error("output would be empty: {axis} = {size} (input {input} + padding {pad} is smaller than the dilated kernel {kernel})")]
    EmptyOutput {
        /// `"height"` or `"width"`.
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

    /// A kernel config that cannot run (its tiles, the device's limits, or the convolution),
    /// with the reason.
    #[error("kernel {config} is refused: {reason}")]
    ConfigRefused {
        /// The config's name.
        config: String,
        /// Why, naming the limit.
        reason: String,
    },

    /// A name that does not parse: a kernel, a config, a precision.
    #[error("{0}")]
    Parse(String),

    /// A tensor beyond what the device (or the host) can hold or address.
    #[error("tensor too large: {0}")]
    TooLarge(String),

    /// No adapter matched.
    #[error("no GPU adapter found{0}")]
    NoAdapter(String),

    /// The adapter refused to create a device.
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
    #[error("wgpu {stage}: {message}")]
    Wgpu {
        /// What wgconv was doing.
        stage: &'static str,
        /// wgpu's message.
        message: String,
    },

    /// A value beyond f16's range under an f16 precision.
    #[error("{what} holds a value beyond f16's range (|x| > 65504{detail}): the f16 and f16x3 precisions cannot represent it; use Precision::F32 or rescale")]
    F16Range {
        /// The weights or the input.
        what: &'static str,
        /// An example value, where known.
        detail: String,
    },

    /// What the device or this build cannot do (a missing feature, a kernel that does not
    /// apply), naming the kernel family and the limit.
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    pub(crate) fn spec(msg: impl Into<String>) -> Self {
        Error::InvalidSpec(msg.into())
    }
}
