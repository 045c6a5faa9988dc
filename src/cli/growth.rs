//! `heapwatch growth RUN`.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::render::growth as render_growth;
use heapwatch::store::RunDir;
use heapwatch::units;

use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct GrowthArgs {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// Rows per table.
    #[arg(short = 'n', default_value_t = 10)]
    n: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn run(args: GrowthArgs) -> Result<ExitCode, CliError> {
    let run = RunDir::open(&args.run).map_err(|e| CliError::Store(e.to_string()))?;
    let (report, notes) = heapwatch::scan::growth(&run, args.limit, &args.decode.limits())
        .map_err(|e| CliError::Store(e.to_string()))?;
    for problem in &notes.unreadable {
        eprintln!("heapwatch: skipped {problem}");
    }
    emit(&if args.json {
        render_growth::json(&report)
    } else {
        render_growth::text(&report, args.n)
    })?;
    Ok(ExitCode::SUCCESS)
}
