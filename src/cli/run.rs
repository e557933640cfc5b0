//! `wgconv run` (placeholder).
use super::CliResult;

#[derive(clap::Args)]
pub struct Args {}

pub fn main(_args: Args) -> CliResult {
    Err(super::CliError("not implemented yet".into()))
}
