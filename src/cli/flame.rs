//! `heapwatch flame PROFILE_OR_RUN -o OUT.svg`: a flamegraph of one profile, of what a boot
//! cycle of a run added between two captures (`--growth`), or of the difference from a base
//! (`--diff BASE`). `captures` picks the captures, this module words the titles, and
//! `render::flame` draws.

pub(super) mod captures;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::diff::{self, DiffError, Side};
use heapwatch::analyse::select::parse_run_arg;
use heapwatch::decode::DecodeLimits;
use heapwatch::model::Profile;
use heapwatch::pipeline::cluster::ClusterRun;
use heapwatch::render::flame::{self as render_flame, FlameOptions};
use heapwatch::store::{RecordKind, RunDir};
use heapwatch::units;

use super::{CliError, DecodeFlags, load_profile};
use captures::{StoredCapture, by_seq, cycle_captures, stored_captures};
use heapwatch::pipeline::flamegraphs::stack_growth;

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
}

/// A flamegraph is of one process: a cluster run's root is refused with the paths of its
/// nodes, each an ordinary run.
fn refuse_cluster(path: &Path) -> Result<(), CliError> {
    let cluster = ClusterRun::open(path)?;
    match cluster {
        None => Ok(()),
        Some(c) => Err(CliError::Usage(format!(
            "{}: is a cluster run; draw one of its nodes: {}",
            path.display(),
            c.info
                .targets
                .iter()
                .map(|t| path.join(&t.dir).display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// What is drawn, before it is drawn.
enum Drawing {
    Plain(Vec<(String, i64)>),
    Diff {
        base: Vec<(String, i64)>,
        new: Vec<(String, i64)>,
    },
}

pub fn run(mut args: Args) -> Result<ExitCode, CliError> {
    let limits = args.decode.limits();
    // RUN@N names a run's boot cycle.
    let (input, pick) = parse_run_arg(&args.input);
    if input.is_dir() {
        refuse_cluster(&input)?;
        args.input = input;
        args.cycle = args.cycle.or(pick);
    }
    if let Some(base) = &args.diff {
        let (base, pick) = parse_run_arg(base);
        if base.is_dir() {
            refuse_cluster(&base)?;
            args.diff = Some(base);
            args.baseline_cycle = args.baseline_cycle.or(pick);
        }
    }
    let (drawing, options) = if args.input.is_dir() {
        run_graph(&args, &limits)?
    } else {
        profile_graph(&args, &limits)?
    };
    let out = args.output.display().to_string();
    let svg = match &drawing {
        Drawing::Plain(stacks) => render_flame::flame_svg(stacks, &options),
        Drawing::Diff { base, new } => render_flame::diff_flame_svg(base, new, &options),
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

// ---- profiles ----

fn profile_graph(args: &Args, limits: &DecodeLimits) -> Result<(Drawing, FlameOptions), CliError> {
    let shown = args.input.display().to_string();
    if args.growth {
        return Err(CliError::Usage(format!(
            "{shown}: --growth draws a run, and this is not a run directory"
        )));
    }
    if args.cycle.is_some() || args.from.is_some() || args.to.is_some() {
        return Err(CliError::Usage(format!(
            "{shown}: --cycle, --from and --to choose captures of a run, and this is a profile"
        )));
    }
    let new = load_profile(&args.input, limits)?;
    let Some(base_path) = &args.diff else {
        let index = sample_index(&new, args.sample.as_deref(), &shown)?;
        let count = count_name(&new, index);
        let total = new.total(index);
        let options = FlameOptions {
            title: format!(
                "{} — {}",
                capital(&noun(&new, index)),
                file_name(&args.input)
            ),
            subtitle: Some(match binary(&new, 12) {
                Some(b) => format!("{} in all · {b}", amount(total, &count)),
                None => format!("{} in all", amount(total, &count)),
            }),
            count_name: count,
        };
        return Ok((Drawing::Plain(render_flame::folded(&new, index)), options));
    };
    let base_shown = base_path.display().to_string();
    if base_path.is_dir() {
        return Err(CliError::Usage(format!(
            "{base_shown}: a run directory; --diff of a profile needs a base profile"
        )));
    }
    let base = load_profile(base_path, limits)?;
    let (bi, ni) = diff::sample_indices(&base, &new, args.sample.as_deref())
        .map_err(|e| name_files(e, &base_shown, &shown))?;
    let count = count_name(&new, ni);
    let side = |p: &Profile, i: usize| {
        let mut s = amount(p.total(i), &count);
        if let Some(b) = binary(p, 8) {
            s.push_str(&format!(" ({b})"));
        }
        s
    };
    let options = FlameOptions {
        title: format!(
            "{}: {} against {}",
            capital(&noun(&new, ni)),
            file_name(&args.input),
            file_name(base_path)
        ),
        subtitle: Some(format!("base {} → new {}", side(&base, bi), side(&new, ni))),
        count_name: count,
    };
    let drawing = Drawing::Diff {
        base: render_flame::folded(&base, bi),
        new: render_flame::folded(&new, ni),
    };
    Ok((drawing, options))
}

fn sample_index(profile: &Profile, wanted: Option<&str>, shown: &str) -> Result<usize, CliError> {
    if profile.sample_types.is_empty() {
        return Err(CliError::Usage(format!(
            "{shown}: the profile declares no sample types"
        )));
    }
    match wanted {
        None => Ok(profile.default_sample_index()),
        Some(w) => profile.find_sample_type(w).ok_or_else(|| {
            let names: Vec<&str> = (0..profile.sample_types.len())
                .map(|i| profile.sample_type_name(i))
                .collect();
            CliError::Usage(format!(
                "{shown}: no sample type {w:?}; this profile has {}",
                names.join(", ")
            ))
        }),
    }
}

fn name_files(err: DiffError, base: &str, new: &str) -> CliError {
    CliError::Usage(match err.side() {
        Some(Side::Base) => format!("{base}: {err}"),
        Some(Side::New) => format!("{new}: {err}"),
        None => format!("{base} and {new}: {err}"),
    })
}

// ---- runs ----

fn open_run(path: &Path) -> Result<RunDir, CliError> {
    Ok(RunDir::open(path)?)
}

/// "build 2.1.0" from the run's label, else "run DIR".
fn build_of(run: &RunDir) -> String {
    match run.info.as_ref().and_then(|i| i.label.as_deref()) {
        Some(label) if !label.is_empty() => format!("build {label}"),
        _ => format!("run {}", file_name(&run.root)),
    }
}

fn run_graph(args: &Args, limits: &DecodeLimits) -> Result<(Drawing, FlameOptions), CliError> {
    let run = open_run(&args.input)?;
    if let Some(base_path) = &args.diff {
        if !base_path.is_dir() {
            return Err(CliError::Usage(format!(
                "{}: not a run directory; --diff of a run needs a base run",
                base_path.display()
            )));
        }
        let base = open_run(base_path)?;
        return runs_diff(&base, &run, args, limits);
    }
    if args.growth {
        return growth(&run, args, limits);
    }
    if args.from.is_some() {
        return Err(CliError::Usage(
            "--from is for --growth and --diff; --to picks the capture to draw".into(),
        ));
    }
    let captures = stored_captures(&run);
    let capture = match args.to {
        Some(seq) => by_seq(&run, &captures, seq)?,
        None => {
            let cycle = cycle_captures(&run, &captures, args.cycle, 1, false)?;
            cycle[cycle.len() - 1]
        }
    };
    let profile = load_profile(&capture.path, limits)?;
    let shown = capture.path.display().to_string();
    let wanted = args.sample.as_deref().or(default_sample(capture));
    let index = sample_index(&profile, wanted, &shown)?;
    let count = count_name(&profile, index);
    let options = FlameOptions {
        title: format!(
            "{} — {}, capture {}",
            capital(&noun(&profile, index)),
            build_of(&run),
            capture.describe()
        ),
        subtitle: Some(format!(
            "{} in all · {}",
            amount(profile.total(index), &count),
            run_file(&run, capture)
        )),
        count_name: count,
    };
    Ok((
        Drawing::Plain(render_flame::folded(&profile, index)),
        options,
    ))
}

fn default_sample(capture: &StoredCapture<'_>) -> Option<&'static str> {
    (capture.record.kind == RecordKind::Heap).then_some("inuse_space")
}

/// "hiddenleak/profiles/000012-heap.pb.gz": where a capture lives, short enough for a title.
fn run_file(run: &RunDir, capture: &StoredCapture<'_>) -> String {
    format!(
        "{}/{}",
        file_name(&run.root),
        capture.record.file.as_deref().unwrap_or("")
    )
}

fn growth(
    run: &RunDir,
    args: &Args,
    limits: &DecodeLimits,
) -> Result<(Drawing, FlameOptions), CliError> {
    let shown = run.root.display().to_string();
    let captures = stored_captures(run);
    let picked_from = args.from.map(|s| by_seq(run, &captures, s)).transpose()?;
    let picked_to = args.to.map(|s| by_seq(run, &captures, s)).transpose()?;
    let mut rise_drawn = false;
    let (from, to) = match (picked_from, picked_to) {
        (Some(f), Some(t)) => (f, t),
        (f, t) => {
            // By default the last cycle that died (the growth worth drawing), else the last.
            let died = || {
                let (report, _) = heapwatch::pipeline::scan::growth(run, None, limits).ok()?;
                let ended = report
                    .cycles
                    .iter()
                    .filter(|c| c.end.is_death() && c.stored >= 2);
                ended.map(|c| c.index).next_back()
            };
            let cycle = args.cycle.or(f.or(t).map(|c| c.record.cycle)).or_else(died);
            let in_cycle = cycle_captures(run, &captures, cycle, 2, false)?;
            let rise = match (f, t) {
                (None, None) => {
                    rise_into_peak(run, in_cycle[0].record.cycle, limits).and_then(|(from, to)| {
                        let find = |seq| in_cycle.iter().find(|c| c.record.seq == seq).copied();
                        find(from).zip(find(to))
                    })
                }
                _ => None,
            };
            rise_drawn = rise.is_some();
            match rise {
                Some(pair) => pair,
                None => (
                    f.unwrap_or(in_cycle[0]),
                    t.unwrap_or(in_cycle[in_cycle.len() - 1]),
                ),
            }
        }
    };
    if from.record.cycle != to.record.cycle {
        return Err(CliError::Usage(format!(
            "{shown}: capture #{} is in boot cycle {} and #{} in cycle {}: growth is measured \
             within one boot cycle",
            from.record.seq, from.record.cycle, to.record.seq, to.record.cycle
        )));
    }
    if let Some(n) = args.cycle.filter(|&n| n != to.record.cycle) {
        return Err(CliError::Usage(format!(
            "{shown}: captures #{} and #{} are in boot cycle {}, not {n}",
            from.record.seq, to.record.seq, to.record.cycle
        )));
    }
    if from.record.kind != to.record.kind {
        return Err(CliError::Usage(format!(
            "{shown}: capture #{} is a {} profile and #{} a {} profile",
            from.record.seq,
            from.record.kind.as_str(),
            to.record.seq,
            to.record.kind.as_str()
        )));
    }
    if (from.record.t_ms, from.record.seq) >= (to.record.t_ms, to.record.seq) {
        return Err(CliError::Usage(format!(
            "{shown}: --from #{} must be a capture taken before --to #{}",
            from.record.seq, to.record.seq
        )));
    }
    let (fp, tp) = (
        load_profile(&from.path, limits)?,
        load_profile(&to.path, limits)?,
    );
    let wanted = args.sample.as_deref().or(default_sample(to));
    let (fi, ti) = diff::sample_indices(&fp, &tp, wanted).map_err(|e| {
        name_files(
            e,
            &from.path.display().to_string(),
            &to.path.display().to_string(),
        )
    })?;
    let count = count_name(&tp, ti);
    let growth = stack_growth(
        &render_flame::folded(&fp, fi),
        &render_flame::folded(&tp, ti),
        args.keep_profiler,
    );
    let (added_stacks, profiler) = (growth.added, growth.profiler);
    let added: i64 = added_stacks.iter().map(|(_, v)| v).sum();
    let mut subtitle = format!(
        "added from capture #{} ({:.1} s) to #{} ({:.1} s): {} in {}",
        from.record.seq,
        from.age_s,
        to.record.seq,
        to.age_s,
        signed(added, &count),
        stacks(added_stacks.len())
    );
    if profiler > 0 {
        subtitle.push_str(&format!(
            "; the profile writer's {} left out (--keep-profiler keeps it)",
            amount(profiler, &count)
        ));
    }
    if rise_drawn {
        subtitle.push_str(" (the rise into the peak: the cycle has no sustained growth)");
    }
    if growth.shrunk_stacks > 0 {
        subtitle.push_str(&format!(
            "; {} shrank by {} (not drawn)",
            stacks(growth.shrunk_stacks),
            amount(growth.shrunk_by, &count)
        ));
    }
    let options = FlameOptions {
        title: format!(
            "Growth of {} — {}, boot cycle {}",
            noun(&tp, ti),
            build_of(run),
            to.record.cycle
        ),
        subtitle: Some(subtitle),
        count_name: count,
    };
    Ok((Drawing::Plain(added_stacks), options))
}

/// The captures before the rise into a cycle's heap peak and at it, when the cycle has no
/// sustained growth but such a rise (what `flame --growth` draws by default then).
fn rise_into_peak(run: &RunDir, cycle: u32, limits: &DecodeLimits) -> Option<(u64, u64)> {
    let (report, _) = heapwatch::pipeline::scan::growth(run, None, limits).ok()?;
    let c = report.cycles.iter().find(|c| c.index == cycle)?;
    heapwatch::pipeline::flamegraphs::rise_into_peak(c)
}

/// The capture of each run to compare: `--from` in the base run and `--to` in the new one,
/// else the captures at the same age ([`captures::at_same_age`]) of the pair of cycles
/// `compare` leads with: B's newest build against A's, or `--cycle` / `--baseline-cycle`.
fn runs_diff(
    base_run: &RunDir,
    new_run: &RunDir,
    args: &Args,
    limits: &DecodeLimits,
) -> Result<(Drawing, FlameOptions), CliError> {
    let (base_caps, new_caps) = (stored_captures(base_run), stored_captures(new_run));
    let (base, new) = match (args.from, args.to) {
        (Some(b), Some(n)) => (
            by_seq(base_run, &base_caps, b)?,
            by_seq(new_run, &new_caps, n)?,
        ),
        (b, n) => {
            // The pair of cycles compare leads with, at the end of the span both cover.
            let c = heapwatch::pipeline::scan::compare(
                base_run,
                new_run,
                args.baseline_cycle,
                args.cycle,
                limits,
            )?;
            let bc = cycle_captures(base_run, &base_caps, Some(c.a_cycle), 1, true)?;
            let nc = cycle_captures(new_run, &new_caps, Some(c.b_cycle), 1, true)?;
            let (at_b, at_n) = captures::at_same_age(base_run, &bc, new_run, &nc)
                .ok_or_else(|| CliError::Failed("no stored heap captures to compare".into()))?;
            let base = match b {
                Some(seq) => by_seq(base_run, &base_caps, seq)?,
                None => at_b,
            };
            let new = match n {
                Some(seq) => by_seq(new_run, &new_caps, seq)?,
                None => at_n,
            };
            (base, new)
        }
    };
    let (bp, np) = (
        load_profile(&base.path, limits)?,
        load_profile(&new.path, limits)?,
    );
    let wanted = args.sample.as_deref().or(default_sample(new));
    let (bi, ni) = diff::sample_indices(&bp, &np, wanted).map_err(|e| {
        name_files(
            e,
            &base.path.display().to_string(),
            &new.path.display().to_string(),
        )
    })?;
    let count = count_name(&np, ni);
    let options = FlameOptions {
        title: format!(
            "{}: {} against {}",
            capital(&noun(&np, ni)),
            build_of(new_run),
            build_of(base_run)
        ),
        subtitle: Some(format!(
            "base {} {} → new {} {}",
            base.describe(),
            amount(bp.total(bi), &count),
            new.describe(),
            amount(np.total(ni), &count)
        )),
        count_name: count,
    };
    let drawing = Drawing::Diff {
        base: render_flame::folded(&bp, bi),
        new: render_flame::folded(&np, ni),
    };
    Ok((drawing, options))
}

// ---- words ----

/// What the widths count, for tooltips: `bytes`, `goroutines`, `objects`, or the unit.
fn count_name(profile: &Profile, index: usize) -> String {
    let (name, unit) = (
        profile.sample_type_name(index),
        profile.sample_type_unit(index),
    );
    match (name, unit) {
        ("goroutine", _) => "goroutines".into(),
        (_, "bytes") => "bytes".into(),
        (n, _) if n.ends_with("_objects") => "objects".into(),
        (_, "") => "samples".into(),
        (_, u) => u.into(),
    }
}

/// What a sample type measures, in words: "heap in use", "goroutines", or its own name.
fn noun(profile: &Profile, index: usize) -> String {
    match profile.sample_type_name(index) {
        "inuse_space" => "heap in use".into(),
        "inuse_objects" => "heap objects in use".into(),
        "alloc_space" => "bytes allocated since start".into(),
        "alloc_objects" => "objects allocated since start".into(),
        "goroutine" => "goroutines".into(),
        other => other.into(),
    }
}

fn capital(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn amount(value: i64, count: &str) -> String {
    if count == "bytes" {
        units::format_bytes(value)
    } else {
        format!("{} {count}", units::group_thousands(value))
    }
}

fn signed(value: i64, count: &str) -> String {
    if value > 0 {
        format!("+{}", amount(value, count))
    } else {
        amount(value, count)
    }
}

fn stacks(n: usize) -> String {
    if n == 1 {
        "1 stack".into()
    } else {
        format!("{n} stacks")
    }
}

fn file_name(path: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(path)
        .or_else(|| name(&path.canonicalize().ok()?))
        .unwrap_or_else(|| path.display().to_string())
}

/// The profiled program and its build ID, from the first mapping that names a file:
/// "controller f5f5e7ccfd7e".
fn binary(profile: &Profile, id_len: usize) -> Option<String> {
    let m = profile
        .mappings
        .iter()
        .find(|m| !profile.str(m.file).is_empty())?;
    let file = profile.str(m.file);
    let name = file.rsplit('/').next().unwrap_or(file);
    let id = profile.str(m.build_id);
    Some(if id.is_empty() {
        name.to_string()
    } else {
        format!("{name} {}", id.chars().take(id_len).collect::<String>())
    })
}
