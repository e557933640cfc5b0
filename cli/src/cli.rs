//! The command line's structure: the subcommands (one module each, declared in `main.rs`),
//! the flags they share, and the one error type. Errors are printed once, here, as one line
//! on stderr; the exit code is 1 (clap's usage errors exit 2).

use crate::{bench, info, run, tune};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "wgconv",
    version,
    about = "Fast, portable 2-D convolution (PyTorch nn.Conv2d forward) as WGSL compute shaders on wgpu",
    long_about = "Fast, portable 2-D convolution (PyTorch nn.Conv2d / ONNX Conv forward, NCHW f32) as WGSL \
compute shaders on wgpu.\n\nThe adapter is the best one found (discrete GPU first); choose another with \
--adapter or WGCONV_ADAPTER (a name substring) and WGPU_BACKEND (vulkan, metal, dx12, gl).",
    after_help = "Examples:\n  wgconv info\n  wgconv bench --json bench.json --svg bench.svg\n  wgconv tune\n  \
wgconv run --input x.npy --weight w.npy --bias b.npy --stride 4 --padding 2 --relu --output y.npy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Bench(bench::Args),
    Tune(tune::Args),
    Run(run::Args),
    Info(info::Args),
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

/// `--backend` of `run`, `tune` and `info`: a wgpu backend by its name.
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

/// A CLI failure: one line for the user.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;

pub fn main() -> ExitCode {
    // wgpu's GL backend logs an error on every machine without a working EGL while it
    // enumerates adapters; it is not ours to report (RUST_LOG still overrides this).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn,wgpu_hal::gles=off")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => bench::main(a),
        Command::Tune(a) => tune::main(a),
        Command::Run(a) => run::main(a),
        Command::Info(a) => info::main(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError(msg)) => {
            eprintln!("wgconv: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
