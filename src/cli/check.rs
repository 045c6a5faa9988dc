//! `heapwatch check RUN [--baseline RUN] --fail-on RULE…`: the CI gate alone. Prints every
//! rule with its figure; when one trips, one line on stderr says which and why, exit 1.
//! Also holds what `report` and `growth` share with it: reading and analysing a run and its
//! baseline, and Envoy's findings when the run holds `envoy` records.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::cluster::{self as cluster_findings, NodeOutcomes};
use heapwatch::analyse::rules::{self, Outcome, Rule, Status};
use heapwatch::analyse::triage::kube;
use heapwatch::pipeline::cluster::{self, BaselineRun, ClusterRun};
use heapwatch::pipeline::{self, Analysis, CyclePicks, Options, PipelineError};
use heapwatch::render::rules as words;
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

/// Refuses rules that cannot be checked with what was given, before any work.
pub fn require_baseline(rules_given: &[Rule], baseline: Option<&Path>) -> Result<(), CliError> {
    pipeline::require_baseline(rules_given, baseline.is_some())
        .map_err(|e| CliError::Usage(e.to_string()))
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

/// The pipeline's options from the flags.
pub fn options(
    limit: Option<u64>,
    cpu_limit: Option<f64>,
    decode: &DecodeFlags,
    picks: CyclePicks,
) -> Options {
    Options {
        limit,
        cpu_limit,
        decode: decode.limits(),
        picks,
    }
}

/// A pipeline error as the command reports it (exit 2).
pub fn failed(e: PipelineError) -> CliError {
    match e {
        PipelineError::NeedsBaseline { .. } | PipelineError::Input(_) => {
            CliError::Usage(e.to_string())
        }
        PipelineError::Read { path, source } => CliError::Read { path, source },
        other => CliError::Pipeline(other),
    }
}

/// Reads and analyses a run and its baseline.
pub fn analyse(
    run_path: &Path,
    baseline: Option<&Path>,
    options: &Options,
) -> Result<Analysis, CliError> {
    refuse_cluster_baseline(baseline)?;
    pipeline::analyse(run_path, baseline, options).map_err(failed)
}

/// A single run is not compared with a whole cluster: the user picks the node.
fn refuse_cluster_baseline(baseline: Option<&Path>) -> Result<(), CliError> {
    let Some(path) = baseline else { return Ok(()) };
    match ClusterRun::open(path).map_err(failed)? {
        Some(c) => Err(CliError::Usage(format!(
            "{}: is a cluster run ({}); compare one run with one of its nodes: {}/targets/NAME",
            path.display(),
            c.names().join(", "),
            path.display()
        ))),
        None => Ok(()),
    }
}

/// Opens what `--baseline` names for a cluster run: a cluster (matched node by node) or a
/// single run (every node's baseline).
pub fn cluster_baseline(path: Option<&Path>) -> Result<Option<ClusterRun>, CliError> {
    match path {
        None => Ok(None),
        Some(p) => ClusterRun::open(p).map_err(failed),
    }
}

/// The baseline argument of [`cluster::analyse_cluster`].
pub fn baseline_run<'a>(path: Option<&'a Path>, opened: Option<&'a ClusterRun>) -> BaselineRun<'a> {
    match (opened, path) {
        (Some(c), _) => BaselineRun::Cluster(c),
        (None, Some(p)) => BaselineRun::Single(p),
        (None, None) => BaselineRun::None,
    }
}

/// Exit 1 with the one-line reason when a rule tripped; an input error (exit 2) when a rule
/// could not be checked on this run at all (a gate that cannot look must not pass); else 0.
pub fn gate(outcomes: &[Outcome]) -> Result<ExitCode, CliError> {
    if let Some(line) = words::failure_line(outcomes) {
        eprintln!("heapwatch: check failed: {line}");
        return Ok(ExitCode::from(1));
    }
    if let Some(o) = outcomes.iter().find(|o| o.status == Status::Unknown) {
        return Err(CliError::Usage(format!(
            "--fail-on {}: cannot be checked on this run: {}",
            o.rule,
            words::reason(o)
        )));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    require_baseline(&args.fail_on, args.baseline.as_deref())?;
    let (run, baseline, picks) = resolve_picks(&args.run, args.baseline.as_deref(), &args.cycles);
    let options = options(args.limit, None, &args.decode, picks);
    if let Some(c) = ClusterRun::open(&run).map_err(failed)? {
        return run_cluster(&c, baseline.as_deref(), &args.fail_on, &options);
    }
    let analysed = analyse(&run, baseline.as_deref(), &options)?;
    for problem in &analysed.notes.unreadable {
        eprintln!("heapwatch: skipped {problem}");
    }
    let outcomes = analysed.evaluate(&args.fail_on);
    emit(&outcome_lines(&outcomes, None))?;
    gate(&outcomes)
}

/// Every rule with its figure, one a line; on a cluster each led by its node.
fn outcome_lines(outcomes: &[Outcome], node: Option<(&str, usize)>) -> String {
    let width = outcomes.iter().map(|o| o.rule.len()).max().unwrap_or(0);
    let mut text = String::new();
    for o in outcomes {
        let status = match o.status {
            Status::Fail => "FAIL",
            Status::Pass => "ok",
            Status::Unknown => "n/a",
        };
        let node = node.map_or(String::new(), |(n, w)| format!("{n:<w$}  "));
        text.push_str(&format!(
            "{status:<4} {node}{:<width$}  {:>12}  {}\n",
            o.rule,
            words::shown(o),
            words::reason(o)
        ));
    }
    text
}

/// `check` on a cluster run: every rule on every node.
fn run_cluster(
    c: &ClusterRun,
    baseline: Option<&Path>,
    rules_given: &[Rule],
    options: &Options,
) -> Result<ExitCode, CliError> {
    let base = cluster_baseline(baseline)?;
    let analysed = cluster::analyse_cluster(c, baseline_run(baseline, base.as_ref()), options)
        .map_err(failed)?;
    let nodes = node_outcomes(&analysed, rules_given);
    let width = nodes.iter().map(|n| n.node.len()).max().unwrap_or(0);
    let mut text = String::new();
    for n in &nodes {
        text.push_str(&outcome_lines(&n.outcomes, Some((&n.node, width))));
    }
    emit(&text)?;
    cluster_gate(&nodes)
}

/// Every rule on every node; what a node could not read goes to stderr under its name.
pub fn node_outcomes(
    analysed: &cluster::ClusterAnalysis,
    rules_given: &[Rule],
) -> Vec<NodeOutcomes> {
    analysed
        .nodes
        .iter()
        .map(|n| {
            for problem in &n.analysis.notes.unreadable {
                eprintln!("heapwatch: {}: skipped {problem}", n.name);
            }
            NodeOutcomes {
                node: n.name.clone(),
                outcomes: n.analysis.evaluate(rules_given),
            }
        })
        .collect()
}

/// [`gate`] over every node: exit 1 naming each node that crossed a bar.
pub fn cluster_gate(nodes: &[NodeOutcomes]) -> Result<ExitCode, CliError> {
    if let Some(line) = words::cluster_failure_line(nodes) {
        eprintln!("heapwatch: check failed: {line}");
        return Ok(ExitCode::from(1));
    }
    if let Some((node, o)) = cluster_findings::first_unknown(nodes) {
        return Err(CliError::Usage(format!(
            "--fail-on {}: cannot be checked on node {node}: {}",
            o.rule,
            words::reason(o)
        )));
    }
    Ok(ExitCode::SUCCESS)
}
