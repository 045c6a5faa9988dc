//! What `collect` says once the collection is over, and how it ends: one summary line per node
//! (every attempt counted once; `run` prints the same count), and the verdict on each node that
//! decides the exit status.

use heapwatch::collect::cluster::NodeOutcome;
use heapwatch::collect::{CollectSummary, StopReason};
use heapwatch::units::format_bytes;

use super::super::CliError;
use super::super::status_line::attempts_line;

/// The summary of one node: as it always was for a single target, with the node's name in a
/// cluster run.
pub(super) fn summary_line(node: &NodeOutcome, summary: &CollectSummary, cluster: bool) -> String {
    let who = if cluster {
        format!("{}: ", node.name)
    } else {
        String::new()
    };
    let mut line = format!(
        "heapwatch: {who}{} over {} boot cycle(s) in {}",
        attempts_line(summary),
        summary.cycles,
        node.dir.display()
    );
    if summary.deleted > 0 {
        line.push_str(&format!("; {} thinned for --max-disk", summary.deleted));
    }
    if summary.unindexed > 0 {
        line.push_str(&format!(
            "; {} not in the site index yet (the first analysis indexes them)",
            summary.unindexed
        ));
    }
    if let Some(t) = node.memory.as_ref().filter(|t| t.samples > 0) {
        line.push_str(&format!("; memory peak {}", format_bytes(t.peak as i64)));
        if t.kills > 0 {
            line.push_str(&format!(", {} OOM kill(s)", t.kills));
        }
    }
    line
}

/// Today's rules for how a node's collection went: a full disk, a target that answered only
/// with garbage, a target that never answered.
pub(super) fn verdict(node: &NodeOutcome, summary: CollectSummary) -> Result<(), CliError> {
    if summary.reason == StopReason::DiskFull {
        return Err(CliError::DiskFull {
            why: summary.disk_error,
        });
    }
    if !summary.reached && summary.responded {
        return Err(CliError::Usage(format!(
            "{}: the target answered but never with a valid profile ({} attempts; last: {}); see {}/manifest.jsonl",
            node.target,
            summary.attempts,
            summary.last_error.as_deref().unwrap_or("?"),
            node.dir.display()
        )));
    }
    if !summary.reached {
        return Err(CliError::Unreachable(format!(
            "{}: the target never answered ({} attempts; last: {}); see {}/manifest.jsonl",
            node.target,
            summary.attempts,
            summary.last_error.as_deref().unwrap_or("?"),
            node.dir.display()
        )));
    }
    Ok(())
}
