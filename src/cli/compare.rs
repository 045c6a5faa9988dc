//! `heapwatch compare RUN_A RUN_B`.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::analyse::select::parse_run_arg;
use heapwatch::render::compare as render_compare;
use heapwatch::store::RunDir;

use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The run of the old build (e.g. 2.0.2); `RUN@N` compares its boot cycle N.
    run_a: PathBuf,
    /// The run of the new build (e.g. 2.1.0); `RUN@N` compares its boot cycle N. Default: the
    /// cycles of B's newest build against those of A's build, each compared, the worst first.
    run_b: PathBuf,
    /// B's boot cycle to compare (same as `RUN_B@N`).
    #[arg(long, value_name = "N")]
    cycle: Option<u32>,
    /// A's boot cycle to compare with (same as `RUN_A@N`).
    #[arg(long, value_name = "N")]
    baseline_cycle: Option<u32>,
    #[arg(short = 'n', default_value_t = 10)]
    n: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn run(args: CompareArgs) -> Result<ExitCode, CliError> {
    let open = |p: &PathBuf| RunDir::open(p).map_err(|e| CliError::Store(e.to_string()));
    let (path_a, pick_a) = parse_run_arg(&args.run_a);
    let (path_b, pick_b) = parse_run_arg(&args.run_b);
    let (a, b) = (open(&path_a)?, open(&path_b)?);
    let comparison = heapwatch::scan::compare(
        &a,
        &b,
        args.baseline_cycle.or(pick_a),
        args.cycle.or(pick_b),
        &args.decode.limits(),
    )
    .map_err(|e| CliError::Store(e.to_string()))?;
    emit(&if args.json {
        render_compare::json(&comparison)
    } else {
        render_compare::text(&comparison, args.n)
    })?;
    Ok(ExitCode::SUCCESS)
}
