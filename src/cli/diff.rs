//! `heapwatch diff BASE NEW`.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::analyse::diff::{self, DiffError, DiffLevel, Side};
use heapwatch::render::diff::{self as render_diff, DiffView};
use heapwatch::render::pprof;

use super::{CliError, DecodeFlags, emit, load_profile};

#[derive(clap::Args)]
pub struct DiffArgs {
    /// The profile to compare against (before).
    base: PathBuf,
    /// The profile to compare (after).
    new: PathBuf,
    /// Sample type by name (default: the new profile's default, else its last); both profiles
    /// must have it.
    #[arg(long)]
    sample: Option<String>,
    /// What makes two frames the same site: function, file, line, or the whole stack.
    #[arg(long, default_value = "function", value_parser = parse_level)]
    granularity: DiffLevel,
    /// How many sites to show.
    #[arg(short = 'n', long = "nodecount", default_value_t = 20)]
    n: usize,
    /// Show sites whose figures did not change, too.
    #[arg(long)]
    all: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the diff as a gzipped pprof profile that `go tool pprof OUT` shows as a diff.
    #[arg(long, value_name = "OUT")]
    proto: Option<PathBuf>,
    #[command(flatten)]
    decode: DecodeFlags,
}

fn parse_level(text: &str) -> Result<DiffLevel, String> {
    DiffLevel::parse(text)
        .ok_or_else(|| format!("{text:?} is not one of function, file, line, stack"))
}

pub fn run(args: DiffArgs) -> Result<ExitCode, CliError> {
    let limits = args.decode.limits();
    let base = load_profile(&args.base, &limits)?;
    let new = load_profile(&args.new, &limits)?;
    let base_shown = args.base.display().to_string();
    let new_shown = args.new.display().to_string();

    let found = diff::diff(&base, &new, args.sample.as_deref(), args.granularity)
        .map_err(|e| name_files(e, &base_shown, &new_shown))?;

    if let Some(out) = &args.proto {
        // The chosen sample type is shared, so the merge has at least that one.
        let bytes = pprof::diff_profile_gz(&base, &new)
            .map_err(|e| CliError::Usage(format!("{base_shown} and {new_shown}: {e}")))?;
        std::fs::write(out, bytes).map_err(|e| {
            CliError::Output(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", out.display()),
            ))
        })?;
    }

    let view = DiffView {
        base_file: &base_shown,
        new_file: &new_shown,
        diff: &found,
        rows: args.n,
        all: args.all,
    };
    emit(&if args.json {
        render_diff::json(&view)
    } else {
        render_diff::text(&view)
    })?;
    Ok(ExitCode::SUCCESS)
}

fn name_files(err: DiffError, base: &str, new: &str) -> CliError {
    CliError::Usage(match err.side() {
        Some(Side::Base) => format!("{base}: {err}"),
        Some(Side::New) => format!("{new}: {err}"),
        None => format!("{base} and {new}: {err}"),
    })
}
