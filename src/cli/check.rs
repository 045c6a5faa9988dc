//! `heapwatch check RUN [--baseline RUN] --fail-on RULE…`: the CI gate alone. Prints every
//! rule with its figure; when one trips, one line on stderr says which and why, exit 1. What
//! `report` shares with it lives beside it: opening and analysing a run and its baseline in
//! [`super::opened`], the rules and the exit code they give in [`super::gate`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::rules::{Outcome, Rule, Status};
use heapwatch::pipeline::Options;
use heapwatch::pipeline::cluster::{self, ClusterRun};
use heapwatch::render::rules as words;
use heapwatch::units;

use super::gate::{cluster_gate, gate, node_outcomes, parse_rule, require_baseline};
use super::opened::{
    CycleFlags, analyse, baseline_run, cluster_baseline, failed, options, resolve_picks,
};
use super::{CliError, DecodeFlags, OwnFlags, emit};

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
    #[command(flatten)]
    own: OwnFlags,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    require_baseline(&args.fail_on, args.baseline.as_deref())?;
    let (run, baseline, picks) = resolve_picks(&args.run, args.baseline.as_deref(), &args.cycles);
    let options = options(args.limit, None, &args.decode, picks, &args.own);
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
