//! `heapwatch compare RUN_A RUN_B`.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::render::compare as render_compare;
use heapwatch::store::RunDir;

use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The run of the old build (e.g. 2.0.2).
    run_a: PathBuf,
    /// The run of the new build (e.g. 2.1.0).
    run_b: PathBuf,
    #[arg(short = 'n', default_value_t = 10)]
    n: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn run(args: CompareArgs) -> Result<ExitCode, CliError> {
    let open = |p: &PathBuf| RunDir::open(p).map_err(|e| CliError::Store(e.to_string()));
    let (a, b) = (open(&args.run_a)?, open(&args.run_b)?);
    let comparison = heapwatch::scan::compare(&a, &b, &args.decode.limits())
        .map_err(|e| CliError::Store(e.to_string()))?;
    emit(&if args.json {
        render_compare::json(&comparison)
    } else {
        render_compare::text(&comparison, args.n)
    })?;
    Ok(ExitCode::SUCCESS)
}
