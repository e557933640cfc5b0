//! What the subcommands share: the flags `--precision`, `--adapter` and `--backend`, and the one error
//! type (printed once, by `main`, as one line on stderr; the exit code is 1).

/// `--layout` of `bench`: the tensors' memory layout.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LayoutArg {
    /// [N, C, H, W]
    #[default]
    Nchw,
    /// [N, H, W, C] (channels last)
    Nhwc,
}

impl From<LayoutArg> for wgconv::Layout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Nchw => wgconv::Layout::Nchw,
            LayoutArg::Nhwc => wgconv::Layout::Nhwc,
        }
    }
}

/// `--storage` of `bench`: the tensors' element type in memory.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StorageArg {
    /// 4 bytes per element
    #[default]
    F32,
    /// 2 bytes per element (converted to f32 around the kernel)
    F16,
}

impl From<StorageArg> for wgconv::Storage {
    fn from(s: StorageArg) -> Self {
        match s {
            StorageArg::F32 => wgconv::Storage::F32,
            StorageArg::F16 => wgconv::Storage::F16,
        }
    }
}

/// `--precision` of `bench`, `tune` and `run`: wgconv's [`wgconv::Precision`] by its CLI name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrecisionArg {
    F32,
    F16,
    /// f32-accurate, from three f16 products on cooperative matrices
    F16x3,
}

impl From<PrecisionArg> for wgconv::Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::F32 => wgconv::Precision::F32,
            PrecisionArg::F16 => wgconv::Precision::F16Accum32,
            PrecisionArg::F16x3 => wgconv::Precision::F16x3,
        }
    }
}

/// `--backend` of every subcommand: a wgpu backend by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    Vulkan,
    Metal,
    Dx12,
    Gl,
}

impl BackendArg {
    pub fn backends(self) -> wgpu::Backends {
        match self {
            BackendArg::Vulkan => wgpu::Backends::VULKAN,
            BackendArg::Metal => wgpu::Backends::METAL,
            BackendArg::Dx12 => wgpu::Backends::DX12,
            BackendArg::Gl => wgpu::Backends::GL,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            BackendArg::Vulkan => "vulkan",
            BackendArg::Metal => "metal",
            BackendArg::Dx12 => "dx12",
            BackendArg::Gl => "gl",
        }
    }
}

/// The device flags every subcommand takes (one definition: the same names, help and
/// defaults everywhere).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// Use the first adapter whose name contains this (case-insensitive; default: WGCONV_ADAPTER, else the best)
    #[arg(long, value_name = "SUBSTRING")]
    pub adapter: Option<String>,
    /// Search only this wgpu backend (default: WGPU_BACKEND, else all)
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
}

impl DeviceArgs {
    /// The backends to search, where one was named.
    pub fn backends(&self) -> Option<wgpu::Backends> {
        self.backend.map(BackendArg::backends)
    }
    /// Names the flag that an adapter error comes from.
    pub fn explain(&self, e: wgconv::Error) -> CliError {
        match (&e, &self.adapter, self.backend) {
            (wgconv::Error::NoAdapter(_), Some(sub), _) => CliError(format!("--adapter {sub}: {e}")),
            (wgconv::Error::NoAdapter(_), None, Some(bk)) => CliError(format!("--backend {}: {e}", bk.name())),
            _ => CliError(e.to_string()),
        }
    }
}

/// A CLI failure: one line for the user.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;
