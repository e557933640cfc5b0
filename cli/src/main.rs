//! The `wgconv` command line: a thin layer over the wgconv library. [`cli`] parses the
//! command line and reports errors; each subcommand is a module of its own.

mod bench;
mod bench_run;
mod cli;
mod info;
mod model;
mod npy;
mod run;
mod shape;
mod tune;

fn main() -> std::process::ExitCode {
    cli::main()
}
