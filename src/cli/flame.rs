//! `heapwatch flame PROFILE_OR_RUN -o OUT.svg`: a flamegraph of one profile, of what a boot
//! cycle of a run added between two captures (`--growth`), or of the difference from a base
//! (`--diff BASE`). `pipeline::flame` picks what is drawn and titles it, `render::flame`
//! draws, and this module writes the SVG.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::pipeline::flame::{self, FlameRequest, Stacks};
use heapwatch::render::flame as render_flame;
use heapwatch::render::flame_titles;

use super::{CliError, DecodeFlags, OwnFlags};

#[derive(clap::Args)]
pub struct Args {
    /// A pprof file (gzipped or not), or a run directory written by `heapwatch collect`.
    input: PathBuf,
    /// Where to write the SVG (`-` for stdout).
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    output: PathBuf,
    /// Draw what a boot cycle of the run added between two captures: widths are the growth of
    /// each stack (default: from the first to the last stored heap capture of the last cycle
    /// that died, else of the last cycle;
    /// when that cycle has no sustained growth but a rise into a peak, that rise).
    #[arg(long, conflicts_with = "diff")]
    growth: bool,
    /// With --growth: keep the profile writer's own stacks (`runtime/pprof`, `compress/flate`
    /// under it), which are left out by default as the cost of watching.
    #[arg(long, requires = "growth")]
    keep_profiler: bool,
    /// Draw the difference from BASE: a profile when the input is one, a run when it is a run
    /// (then each run's first boot cycle, at the same time since its start). Widths are the
    /// larger of the two sides; red grew, blue shrank.
    #[arg(long, value_name = "BASE")]
    diff: Option<PathBuf>,
    /// Sample type by name or index (default: the profile's default; inuse_space for the heap
    /// captures of a run).
    #[arg(long)]
    sample: Option<String>,
    /// The boot cycle of a run to draw from (default: the last one with stored heap captures;
    /// with --diff, the first).
    #[arg(long, value_name = "N")]
    cycle: Option<u32>,
    /// With --diff of two runs: the base run's boot cycle (also `--diff BASE@N`). Default: the
    /// cycles `compare` chooses, the worst pair drawn.
    #[arg(long, value_name = "N", requires = "diff")]
    baseline_cycle: Option<u32>,
    /// A run's capture to start from: the earlier one with --growth, the base run's with --diff.
    #[arg(long, value_name = "SEQ")]
    from: Option<u64>,
    /// A run's capture to end at: the later one with --growth, the new run's with --diff, the
    /// one drawn otherwise (default: the last stored heap capture of the cycle).
    #[arg(long, value_name = "SEQ")]
    to: Option<u64>,
    #[command(flatten)]
    decode: DecodeFlags,
    #[command(flatten)]
    own: OwnFlags,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let request = FlameRequest {
        input: args.input,
        growth: args.growth,
        keep_profiler: args.keep_profiler,
        diff: args.diff,
        sample: args.sample,
        cycle: args.cycle,
        baseline_cycle: args.baseline_cycle,
        from: args.from,
        to: args.to,
        limits: args.decode.limits(),
        own: args.own.own,
    };
    let graph = flame::flame(&request)?;
    let out = args.output.display().to_string();
    let options = flame_titles::options(&graph.title);
    let svg = match &graph.stacks {
        Stacks::Plain(stacks) => render_flame::flame_svg(stacks, &options),
        Stacks::Diff { base, new } => render_flame::diff_flame_svg(base, new, &options),
    }
    .map_err(|e| CliError::Output(io::Error::other(format!("{out}: {e}"))))?;
    write_svg(&args.output, &svg)?;
    if args.output != Path::new("-") {
        println!("wrote {out}: {}", options.title);
    }
    Ok(ExitCode::SUCCESS)
}

fn write_svg(output: &Path, svg: &str) -> Result<(), CliError> {
    let shown = output.display();
    if output == Path::new("-") {
        let mut out = io::stdout().lock();
        return out
            .write_all(svg.as_bytes())
            .and_then(|_| out.flush())
            .map_err(CliError::Output);
    }
    std::fs::write(output, svg)
        .map_err(|e| CliError::Output(io::Error::new(e.kind(), format!("{shown}: {e}"))))
}
