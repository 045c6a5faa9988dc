//! The gate that `check` and `report` share: the rules a user gives (`--fail-on`), refused
//! before any work when they need a baseline that was not given, and the exit code their
//! outcomes give, on one run or on every node of a cluster run.

use std::path::Path;
use std::process::ExitCode;

use heapwatch::analyse::cluster::{self as cluster_findings, NodeOutcomes};
use heapwatch::analyse::rules::{self, Outcome, Rule, Status};
use heapwatch::pipeline::{self, cluster};
use heapwatch::render::rules as words;

use super::CliError;

pub fn parse_rule(text: &str) -> Result<Rule, String> {
    rules::parse(text).map_err(|e| e.why)
}

/// Refuses rules that cannot be checked with what was given, before any work.
pub fn require_baseline(rules_given: &[Rule], baseline: Option<&Path>) -> Result<(), CliError> {
    pipeline::require_baseline(rules_given, baseline.is_some())
        .map_err(|e| CliError::Usage(e.to_string()))
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
