//! `heapwatch check RUN [--baseline RUN] --fail-on RULE…`: the CI gate alone. Prints every
//! rule with its figure; when one trips, one line on stderr says which and why, exit 1.
//! Also holds what `report` and `growth` share with it: reading and analysing a run and its
//! baseline, and Envoy's findings when the run holds `envoy` records.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::compare::Comparison;
use heapwatch::analyse::envoy::{self, EnvoyLimits, EnvoyReport};
use heapwatch::analyse::growth::GrowthReport;
use heapwatch::analyse::rules::{self, Findings, HeapRatio, Outcome, Rule, Status};
use heapwatch::analyse::triage::kube;
use heapwatch::scan::{self, ScanNotes};
use heapwatch::source::envoy::{EnvoySnapshot, HeapDumpState};
use heapwatch::source::procmem::MemorySample;
use heapwatch::store::{RecordKind, RunDir, RunInfo};
use heapwatch::units;

use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct Args {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    /// The run of the previous build, for `regression>…`.
    #[arg(long, value_name = "RUN")]
    baseline: Option<PathBuf>,
    /// A bar that fails the check: growth>5MiB/s, time-to-limit<60s, regression>1.5x,
    /// goroutines>10/s, storm>100MiB/s, heap>SIZE, memory>SIZE, kills>N, restarts>N,
    /// live-share<0.6.
    #[arg(long = "fail-on", value_name = "RULE", required = true, value_parser = parse_rule)]
    fail_on: Vec<Rule>,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    #[command(flatten)]
    cycles: CycleFlags,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn parse_rule(text: &str) -> Result<Rule, String> {
    rules::parse(text).map_err(|e| e.why)
}

/// A CPU count as Kubernetes writes it: `2`, `1.5`, `500m`.
pub fn parse_cores(text: &str) -> Result<f64, String> {
    let cores = kube::parse_quantity(text)?;
    if cores > 0.0 {
        Ok(cores)
    } else {
        Err(format!(
            "{text:?}: a CPU limit is above zero (2, 1.5, 500m)"
        ))
    }
}

/// Envoy's findings from a run's `envoy` records, with the limits they were judged against
/// and where each limit came from.
pub struct EnvoyFindings {
    /// The target as recorded in run.json (`envoy:http://…`).
    pub target: String,
    pub report: EnvoyReport,
    pub limits: EnvoyLimits,
    pub memory_from: Option<String>,
    pub cpu_from: Option<String>,
}

/// A limit and where it came from (`run.json`, `--cpu-limit`, `pod istio-proxy`).
pub type Sourced<T> = Option<(T, String)>;

/// The `cpu_limit` option of run.json: cores as a number, or a quantity such as "500m".
pub fn recorded_cpu_limit(info: Option<&RunInfo>) -> Option<f64> {
    info?.options.cpu_cores()
}

/// Whether the run is of an Envoy: collected from an `envoy:` target, or holding `envoy`
/// records.
pub fn has_envoy(run: &RunDir) -> bool {
    run.info.as_ref().is_some_and(|i| i.source == "envoy")
        || run
            .manifest
            .records
            .iter()
            .any(|r| r.kind == RecordKind::Envoy)
}

/// Envoy's snapshots in time order, rebuilt from the manifest totals.
pub fn envoy_snapshots(run: &RunDir) -> Vec<EnvoySnapshot> {
    let mut records: Vec<_> = run
        .manifest
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Envoy && r.is_ok())
        .collect();
    records.sort_by_key(|r| (r.t_ms, r.seq));
    records
        .iter()
        .map(|r| EnvoySnapshot::from_totals(r.t_ms, &r.totals))
        .collect()
}

/// Whether `/heap_dump` worked, from the heap records: one good capture makes it available;
/// a failure that says "not available" (HTTP 501) makes it not available.
pub fn heap_dump_state(run: &RunDir) -> HeapDumpState {
    let heaps = || {
        run.manifest
            .records
            .iter()
            .filter(|r| r.kind == RecordKind::Heap)
    };
    if heaps().any(|r| r.is_ok()) {
        return HeapDumpState::Available;
    }
    heaps()
        .filter_map(|r| r.error.as_deref())
        .find(|e| e.contains("not available"))
        .map_or(HeapDumpState::NotAsked, |e| {
            HeapDumpState::NotAvailable(why_not_available(e))
        })
}

/// The reason inside `…/heap_dump: not available (HTTP 501: …); not asked again`, else the
/// whole error text.
fn why_not_available(error: &str) -> String {
    const MARK: &str = "not available (";
    let Some(at) = error.find(MARK) else {
        return error.to_string();
    };
    let inner = &error[at + MARK.len()..];
    let mut depth = 0usize;
    for (i, c) in inner.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return inner[..i].to_string(),
            ')' => depth -= 1,
            _ => {}
        }
    }
    error.to_string()
}

/// Analyses a run's `envoy` records; `None` when it has none.
pub fn envoy_findings(
    run: &RunDir,
    memory: Sourced<u64>,
    cpu: Sourced<f64>,
) -> Option<EnvoyFindings> {
    if !has_envoy(run) {
        return None;
    }
    let limits = EnvoyLimits {
        memory_bytes: memory.as_ref().map(|m| m.0),
        cpu_cores: cpu.as_ref().map(|c| c.0),
    };
    let report = envoy::analyse(&envoy_snapshots(run), &limits, heap_dump_state(run));
    Some(EnvoyFindings {
        target: run
            .info
            .as_ref()
            .map_or_else(|| "envoy".to_string(), |i| i.target.clone()),
        report,
        limits,
        memory_from: memory.map(|m| m.1),
        cpu_from: cpu.map(|c| c.1),
    })
}

/// The memory limit as the growth analysis resolved it, and where it came from.
pub fn memory_limit_source(
    run: &RunDir,
    given: Option<u64>,
    resolved: Option<u64>,
) -> Sourced<u64> {
    let resolved = resolved?;
    let from = if given.is_some() {
        "--limit"
    } else if run.info.as_ref().and_then(|i| i.limit_bytes).is_some() {
        "run.json"
    } else {
        "the memory samples"
    };
    Some((resolved, from.to_string()))
}

/// The CPU limit from the flag, else from run.json.
pub fn cpu_limit_source(run: &RunDir, given: Option<f64>) -> Sourced<f64> {
    given
        .map(|c| (c, "--cpu-limit".to_string()))
        .or_else(|| recorded_cpu_limit(run.info.as_ref()).map(|c| (c, "run.json".to_string())))
}

/// A run and, optionally, its baseline, read and analysed.
pub struct Analysed {
    pub run: RunDir,
    pub memory: Vec<MemorySample>,
    pub growth: GrowthReport,
    pub notes: ScanNotes,
    pub peak_heap: Vec<(u32, i64)>,
    pub baseline: Option<Baseline>,
    pub envoy: Option<EnvoyFindings>,
}

pub struct Baseline {
    pub run: RunDir,
    pub comparison: Comparison,
    pub heap_ratio: Option<HeapRatio>,
}

fn open(path: &Path) -> Result<RunDir, CliError> {
    RunDir::open(path).map_err(|e| CliError::Store(e.to_string()))
}

/// Refuses rules that cannot be checked with what was given, before any work.
pub fn require_baseline(rules_given: &[Rule], baseline: Option<&Path>) -> Result<(), CliError> {
    match rules_given.iter().find(|r| rules::needs_baseline(r)) {
        Some(r) if baseline.is_none() => Err(CliError::Usage(format!(
            "--fail-on {}: needs --baseline RUN (the run of the build to compare with)",
            r.text
        ))),
        _ => Ok(()),
    }
}

/// The boot cycles a comparison uses, when chosen (`RUN@N`, `--cycle N`,
/// `--baseline-cycle N`); the default pairing otherwise.
#[derive(Debug, Default, Clone, Copy)]
pub struct CyclePicks {
    pub run: Option<u32>,
    pub baseline: Option<u32>,
}

/// Flags that choose the compared cycles, shared by `check` and `report`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct CycleFlags {
    /// The boot cycle of the run to compare with the baseline (also `RUN@N`). Default: the
    /// cycles of the run's newest build, each compared, the worst shown.
    #[arg(long, value_name = "N")]
    pub cycle: Option<u32>,
    /// The boot cycle of the baseline (also `--baseline RUN@N`). Default: the cycles of the
    /// baseline's build that is not the run's.
    #[arg(long, value_name = "N", requires = "baseline")]
    pub baseline_cycle: Option<u32>,
}

/// Splits `RUN@N` off the run and baseline paths; a flag wins over `@N`.
pub fn resolve_picks(
    run: &Path,
    baseline: Option<&Path>,
    flags: &CycleFlags,
) -> (PathBuf, Option<PathBuf>, CyclePicks) {
    use heapwatch::analyse::select::parse_run_arg;
    let (run, run_pick) = parse_run_arg(run);
    let (baseline, base_pick) = match baseline.map(parse_run_arg) {
        Some((p, n)) => (Some(p), n),
        None => (None, None),
    };
    let picks = CyclePicks {
        run: flags.cycle.or(run_pick),
        baseline: flags.baseline_cycle.or(base_pick),
    };
    (run, baseline, picks)
}

pub fn analyse(
    run_path: &Path,
    baseline: Option<&Path>,
    limit: Option<u64>,
    cpu_limit: Option<f64>,
    decode: &DecodeFlags,
    picks: CyclePicks,
) -> Result<Analysed, CliError> {
    let limits = decode.limits();
    let run = open(run_path)?;
    let (growth, notes) =
        scan::growth(&run, limit, &limits).map_err(|e| CliError::Store(e.to_string()))?;
    let memory: Vec<MemorySample> = run.memory_samples();
    let peak_heap = rules::peak_heap(&run.manifest.records);
    let envoy = envoy_findings(
        &run,
        memory_limit_source(&run, limit, growth.limit_bytes),
        cpu_limit_source(&run, cpu_limit),
    );
    let baseline = match baseline {
        None => None,
        Some(path) => {
            let base = open(path)?;
            let comparison = scan::compare(&base, &run, picks.baseline, picks.run, &limits)
                .map_err(|e| CliError::Store(e.to_string()))?;
            let heap_ratio = comparison.a_heap_peak.zip(comparison.b_heap_peak).map(
                |(baseline_bytes, bytes)| HeapRatio {
                    age_s: comparison.age_s,
                    baseline_bytes,
                    bytes,
                },
            );
            Some(Baseline {
                run: base,
                comparison,
                heap_ratio,
            })
        }
    };
    Ok(Analysed {
        run,
        memory,
        growth,
        notes,
        peak_heap,
        baseline,
        envoy,
    })
}

impl Analysed {
    pub fn evaluate(&self, rules_given: &[Rule]) -> Vec<Outcome> {
        let findings = Findings {
            growth: &self.growth,
            peak_heap: &self.peak_heap,
            comparison: self.baseline.as_ref().map(|b| &b.comparison),
            heap_ratio: self.baseline.as_ref().and_then(|b| b.heap_ratio.as_ref()),
            envoy: self.envoy.as_ref().map(|e| &e.report),
        };
        rules::evaluate_all(rules_given, &findings)
    }
}

/// Exit 1 with the one-line reason when a rule tripped; an input error (exit 2) when a rule
/// could not be checked on this run at all (a gate that cannot look must not pass); else 0.
pub fn gate(outcomes: &[Outcome]) -> Result<ExitCode, CliError> {
    if let Some(line) = rules::failure_line(outcomes) {
        eprintln!("heapwatch: check failed: {line}");
        return Ok(ExitCode::from(1));
    }
    if let Some(o) = outcomes.iter().find(|o| o.status == Status::Unknown) {
        return Err(CliError::Usage(format!(
            "--fail-on {}: cannot be checked on this run: {}",
            o.rule, o.reason
        )));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    require_baseline(&args.fail_on, args.baseline.as_deref())?;
    let (run, baseline, picks) = resolve_picks(&args.run, args.baseline.as_deref(), &args.cycles);
    let analysed = analyse(
        &run,
        baseline.as_deref(),
        args.limit,
        None,
        &args.decode,
        picks,
    )?;
    for problem in &analysed.notes.unreadable {
        eprintln!("heapwatch: skipped {problem}");
    }
    let outcomes = analysed.evaluate(&args.fail_on);
    let width = outcomes.iter().map(|o| o.rule.len()).max().unwrap_or(0);
    let mut text = String::new();
    for o in &outcomes {
        let status = match o.status {
            Status::Fail => "FAIL",
            Status::Pass => "ok",
            Status::Unknown => "n/a",
        };
        text.push_str(&format!(
            "{status:<4} {:<width$}  {:>12}  {}\n",
            o.rule, o.shown, o.reason
        ));
    }
    emit(&text)?;
    gate(&outcomes)
}
