//! The `wgconv` command line: a thin layer over the wgconv library. This file parses the
//! command line, dispatches to the subcommands (one module each) and reports their errors;
//! [`cli`] holds what they share. Errors are printed once, here, as one line on stderr; the
//! exit code is 1 (clap's usage errors exit 2).

mod bench;
mod bench_args;
mod bench_run;
mod cli;
mod info;
mod model;
mod npy;
mod peak;
mod run;
mod shape;
mod tune;

use clap::{Parser, Subcommand};
use cli::CliError;
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
    Bench(bench_args::Args),
    Tune(tune::Args),
    Run(run::Args),
    Info(info::Args),
    Peak(peak::Args),
}

fn main() -> ExitCode {
    // wgpu's GL backend logs an error on every machine without a working EGL while it
    // enumerates adapters; it is not ours to report (RUST_LOG still overrides this).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn,wgpu_hal::gles=off")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => bench::main(a),
        Command::Tune(a) => tune::main(a),
        Command::Run(a) => run::main(a),
        Command::Info(a) => info::main(a),
        Command::Peak(a) => peak::main(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError(msg)) => {
            eprintln!("wgconv: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
