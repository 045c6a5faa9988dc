//! `heapwatch check RUN [--baseline RUN] --fail-on RULE…`: the CI gate alone. Prints every
//! rule with its figure; when one trips, one line on stderr says which and why, exit 1.
//! Also holds what `report` shares with it: reading and analysing a run and its baseline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::compare::Comparison;
use heapwatch::analyse::growth::GrowthReport;
use heapwatch::analyse::rules::{self, Findings, HeapRatio, Outcome, Rule, Status};
use heapwatch::scan::{self, ScanNotes};
use heapwatch::source::procmem::MemorySample;
use heapwatch::store::RunDir;
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
    /// goroutines>10/s, storm>100MiB/s, heap>SIZE, memory>SIZE, kills>N, restarts>N.
    #[arg(long = "fail-on", value_name = "RULE", required = true, value_parser = parse_rule)]
    fail_on: Vec<Rule>,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn parse_rule(text: &str) -> Result<Rule, String> {
    rules::parse(text).map_err(|e| e.why)
}

/// A run and, optionally, its baseline, read and analysed.
pub struct Analysed {
    pub run: RunDir,
    pub memory: Vec<MemorySample>,
    pub growth: GrowthReport,
    pub notes: ScanNotes,
    pub peak_heap: Vec<(u32, i64)>,
    pub baseline: Option<Baseline>,
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

pub fn analyse(
    run_path: &Path,
    baseline: Option<&Path>,
    limit: Option<u64>,
    decode: &DecodeFlags,
) -> Result<Analysed, CliError> {
    let limits = decode.limits();
    let run = open(run_path)?;
    let (growth, notes) =
        scan::growth(&run, limit, &limits).map_err(|e| CliError::Store(e.to_string()))?;
    let memory: Vec<MemorySample> = run.memory_samples();
    let peak_heap = rules::peak_heap(&run.manifest.records);
    let baseline = match baseline {
        None => None,
        Some(path) => {
            let base = open(path)?;
            let comparison =
                scan::compare(&base, &run, &limits).map_err(|e| CliError::Store(e.to_string()))?;
            let base_growth = scan::growth(&base, None, &limits)
                .map_err(|e| CliError::Store(e.to_string()))?
                .0;
            let age = comparison.age_s;
            let heap_ratio = rules::heap_at_age(&base.manifest.records, &base_growth, age)
                .zip(rules::heap_at_age(&run.manifest.records, &growth, age))
                .map(|(baseline_bytes, bytes)| HeapRatio {
                    age_s: age,
                    baseline_bytes,
                    bytes,
                });
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
    })
}

impl Analysed {
    pub fn evaluate(&self, rules_given: &[Rule]) -> Vec<Outcome> {
        let findings = Findings {
            growth: &self.growth,
            peak_heap: &self.peak_heap,
            comparison: self.baseline.as_ref().map(|b| &b.comparison),
            heap_ratio: self.baseline.as_ref().and_then(|b| b.heap_ratio.as_ref()),
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
    let analysed = analyse(
        &args.run,
        args.baseline.as_deref(),
        args.limit,
        &args.decode,
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
