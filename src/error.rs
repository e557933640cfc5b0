//! The one error type of the library. Every invalid spec, input or config is refused
//! with a value that names what was wrong; nothing in the library panics on bad input.

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    #[error("invalid convolution: {0}")]
    InvalidSpec(String),

    #[error("input has {got} channels but the convolution expects {expected}")]
    ChannelMismatch { expected: u32, got: u32 },

    #[error("{what} has {got} elements, expected {expected}")]
    WrongLength { what: &'static str, expected: usize, got: usize },

    #[error("output would be empty: {axis} = {size} (input {input} + padding {pad} is smaller than the dilated kernel {kernel})")]
    /// `kernel` is the dilated extent d·(k−1)+1 (u64: it can exceed u32).
    EmptyOutput { axis: &'static str, size: i64, input: u32, pad: u32, kernel: u64 },

    #[error("tile config {config} is refused: {reason}")]
    ConfigRefused { config: String, reason: String },

    #[error("tensor too large: {0}")]
    TooLarge(String),

    #[error("no GPU adapter found{0}")]
    NoAdapter(String),

    #[error("could not create a device on {adapter}: {reason}")]
    Device { adapter: String, reason: String },

    #[error("wgpu {stage}: {message}")]
    Wgpu { stage: &'static str, message: String },

    #[error("{what} holds a value beyond f16's range (|x| > 65504{detail}): the f16 and f16x3 precisions cannot represent it; use Precision::F32 or rescale")]
    F16Range { what: &'static str, detail: String },

    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    pub(crate) fn spec(msg: impl Into<String>) -> Self {
        Error::InvalidSpec(msg.into())
    }
}
