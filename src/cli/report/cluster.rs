//! `heapwatch report` of a cluster run: each node's own full report under `OUT/nodes/NAME/`,
//! and at the top one page with a section per node, the shared timeline and the events.

use std::path::Path;

use heapwatch::analyse::cluster::NodeOutcomes;
use heapwatch::analyse::rules::Rule;
use heapwatch::pipeline::Options;
use heapwatch::pipeline::cluster::{self, ClusterRun};
use heapwatch::pipeline::report::{Prepared, ReportInputs, dir_name, prepare};
use heapwatch::render::report::cluster::{self as page, ClusterModel, NodeReport};
use heapwatch::render::report::{Flamegraph, ReportModel, flames};

use super::{CliError, Written, check, write_file, write_files};

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
    let base = check::cluster_baseline(baseline)?;
    let analysed =
        cluster::analyse_cluster(c, check::baseline_run(baseline, base.as_ref()), options)
            .map_err(check::failed)?;
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
        .map(|((_, _, p), d)| p.model(d))
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
