//! `heapwatch report` of a cluster run: each node's own full report under `OUT/nodes/NAME/`,
//! and at the top one page with a section per node, the shared timeline and the events.

use std::path::Path;

use heapwatch::analyse::cluster::NodeOutcomes;
use heapwatch::analyse::rules::Rule;
use heapwatch::pipeline::Options;
use heapwatch::pipeline::PipelineError;
use heapwatch::pipeline::cluster::{self, ClusterAnalysis, ClusterRun};
use heapwatch::pipeline::report::{Prepared, ReportInputs, dir_name, prepare};
use heapwatch::render::report::cluster::{self as page, ClusterModel, LeftOut, NodeReport};
use heapwatch::render::report::{Flamegraph, ReportModel, flames};
use heapwatch::store::{RecordKind, RunDir};

use super::{CliError, Written, opened, write_file, write_files};

/// Analyses every node (each against its baseline), writes the node reports and the cluster
/// page, and returns what the rules found on each node.
pub(super) fn write(
    c: &ClusterRun,
    baseline: Option<&Path>,
    out: &Path,
    rules_given: &[Rule],
    options: &Options,
    extras: &ReportInputs,
) -> Result<Written, CliError> {
    let base = opened::cluster_baseline(baseline)?;
    let (analysed, left_out) = analyse_what_can_be(c, baseline, base.as_ref(), options)?;
    for l in &left_out {
        eprintln!("heapwatch: node {} not reported: {}", l.name, l.why);
    }
    let events = analysed.events.clone();
    let mut prepared: Vec<(String, String, Prepared)> = Vec::new();
    for node in analysed.nodes {
        let mut a = node.analysis;
        // The lines marked in the node's own log belong on its charts too.
        a.events
            .extend(events.iter().filter(|e| e.log == node.name).cloned());
        a.events.sort_by_key(|e| e.t_ms);
        let dir = c
            .info
            .targets
            .iter()
            .find(|t| t.name == node.name)
            .map_or_else(String::new, |t| t.dir.clone());
        let p = prepare(a, None, rules_given, options, extras).map_err(|e| CliError::InNode {
            node: node.name.clone(),
            source: Box::new(e.into()),
        })?;
        prepared.push((node.name, dir, p));
    }
    let drawn: Vec<Vec<Flamegraph>> = prepared
        .iter()
        .map(|(_, _, p)| flames::draw(&p.flames))
        .collect();
    let models: Vec<ReportModel> = prepared
        .iter()
        .zip(&drawn)
        .map(|((name, _, p), d)| {
            // Each node's own report is titled with its name, not its directory's.
            let mut model = p.model(d);
            model.run.node = Some(name.clone());
            model
        })
        .collect();
    let folder = |dir: &str, name: &str| {
        let leaf = Path::new(dir)
            .file_name()
            .map_or_else(|| name.to_string(), |n| n.to_string_lossy().into_owned());
        format!("nodes/{leaf}")
    };
    let mut nodes = Vec::new();
    for ((name, dir, _), model) in prepared.iter().zip(&models) {
        let f = folder(dir, name);
        write_files(&out.join(&f), model)?;
        nodes.push(NodeReport {
            name,
            dir,
            folder: f,
            model,
        });
    }
    let model = ClusterModel {
        name: dir_name(&c.root),
        label: c.info.label.as_deref(),
        started_ms: c.info.started_ms,
        nodes,
        left_out: &left_out,
        events: &events,
    };
    write_file(out, "index.html", &page::html(&model))?;
    write_file(out, "report.md", &page::markdown(&model))?;
    write_file(out, "summary.json", &page::json(&model))?;
    Ok(Written {
        headline: model.headline(),
        flamegraphs: drawn.iter().map(Vec::len).sum(),
        outcomes: Vec::new(),
        nodes: Some(
            prepared
                .iter()
                .map(|(name, _, p)| NodeOutcomes {
                    node: name.clone(),
                    outcomes: p.outcomes.clone(),
                })
                .collect(),
        ),
    })
}

/// Every node whose own run can be analysed, and the others with why: one container with no
/// heap profiling linked in (no heap capture to analyse) leaves the rest of the node reported.
/// A node whose baseline fails, or a cluster none of whose nodes can be analysed, is still an
/// error.
fn analyse_what_can_be(
    c: &ClusterRun,
    baseline: Option<&Path>,
    base: Option<&ClusterRun>,
    options: &Options,
) -> Result<(ClusterAnalysis, Vec<LeftOut>), CliError> {
    let mut kept = ClusterRun {
        root: c.root.clone(),
        info: c.info.clone(),
        events: c.events.clone(),
    };
    let mut left_out = Vec::new();
    loop {
        match cluster::analyse_cluster(&kept, opened::baseline_run(baseline, base), options) {
            Ok(analysed) => return Ok((analysed, left_out)),
            Err(PipelineError::Node { node, why })
                if kept.info.targets.len() > 1 && !own_run_analyses(&kept, &node, options) =>
            {
                let why = match last_heap_error(&kept, &node) {
                    Some(failed) => format!("{why}; its heap captures failed: {failed}"),
                    None => why,
                };
                kept.info.targets.retain(|t| t.name != node);
                left_out.push(LeftOut { name: node, why });
            }
            Err(e) => return Err(opened::failed(e)),
        }
    }
}

/// The node's own run analyses alone (so what failed was its baseline).
fn own_run_analyses(c: &ClusterRun, node: &str, options: &Options) -> bool {
    c.node_dir(node)
        .and_then(|dir| RunDir::open(&dir).ok())
        .is_some_and(|run| heapwatch::pipeline::analyse_runs(run, None, options).is_ok())
}

/// The last error a node's heap captures met (the proc source's "heap profiling disabled by
/// the linker …"), as its manifest has it.
fn last_heap_error(c: &ClusterRun, node: &str) -> Option<String> {
    let run = RunDir::open(&c.node_dir(node)?).ok()?;
    run.manifest
        .records
        .iter()
        .rev()
        .filter(|r| r.kind == RecordKind::Heap)
        .find_map(|r| r.error.clone())
}
