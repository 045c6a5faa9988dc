//! `heapwatch flame` (being written).

use std::process::ExitCode;

use super::CliError;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<ExitCode, CliError> {
    Err(CliError::Usage("flame: not built yet".into()))
}
