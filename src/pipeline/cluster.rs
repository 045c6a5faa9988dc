//! A cluster run through the pipeline: every node (`RUN/targets/NAME/`, an ordinary run) is
//! analysed as a run of its own, beside the run's marked log lines. A baseline that is a
//! cluster too gives each node the baseline node of the same name; a single run is every
//! node's baseline.
//!
//! # Cluster runs, command by command
//!
//! A cluster run (RUN/run.json of `"kind": "cluster"`) is analysed node by node: `analyse_cluster`
//! runs the ordinary analysis on each `RUN/targets/NAME/` (findings across the nodes are
//! `analyse::cluster`'s).
//!
//! - `growth`: one section per node headed `== node NAME (targets/NAME) ==`, each exactly the
//!   single-run output. `--json`: `{"schema": 1, "kind": "cluster", "nodes": {NAME: <the
//!   node's growth JSON>}}` (nodes by name).
//! - `check`: every rule on every node, each line led by the node; a failure names the node
//!   (`check failed: ctrl2: growth>5MiB/s tripped (…): …`); exit 1 as before, 2 when a rule
//!   cannot be checked on some node (named).
//! - `compare A B`: two clusters are compared node by node, nodes matched by name; nodes only in
//!   A or only in B are listed (`only in A (not compared): …`) and in JSON as `only_a`/`only_b`,
//!   beside `{"kind": "cluster", "nodes": {NAME: <the pair's compare JSON>}}`. A cluster against
//!   a single run compares every node with that run (on whichever side it stands).
//! - `check`/`report --baseline`: a cluster baseline pairs nodes by name (a node without a
//!   namesake has no baseline); a single-run baseline is every node's. A single run against a
//!   cluster baseline is refused: pass one node's directory.
//! - `report`: each node's own full report under `OUT/nodes/NAME/`; at the top one page with a
//!   section per node (verdict, rules, link), one shared timeline chart of every node's memory
//!   (heap in use thick, cgroup or process memory thin, in the node's colour) with each node's
//!   kills and ends as vertical lines and the marked log lines dashed and labelled, and the events
//!   table (time, label, log, line). `summary.json`: `{"kind": "cluster", "node_order": […],
//!   "nodes": {NAME: {"dir", "report", "failed", "summary": <the node's own summary.json>}},
//!   "events": […], …}`. Lines marked in a node's own log (`log` equal to its name) are drawn
//!   on that node's charts too. `--pod` is refused on a cluster (one pod is one node).
//! - `flame`: a node's directory is an ordinary run; a cluster root is refused with the paths of
//!   its nodes.
//! - A single-target run with an `events.jsonl` gets the markers on its cycle charts, an Events
//!   table in index.html and report.md, and `events` in summary.json (absent without events, so
//!   the existing reports are unchanged).

use std::path::{Path, PathBuf};

use super::{Analysis, Options, PipelineError, analyse_runs};
use crate::analyse::cluster::{self as pairing, NodePairing};
use crate::store::RunDir;
use crate::store::cluster::{self as store_cluster, ClusterInfo, Event};

/// A cluster run as read from its directory.
pub struct ClusterRun {
    pub root: PathBuf,
    pub info: ClusterInfo,
    /// `RUN/events.jsonl`, oldest first.
    pub events: Vec<Event>,
}

impl ClusterRun {
    /// The cluster run at `root`; `None` when it is not one (a single run, or no run at all).
    pub fn open(root: &Path) -> Result<Option<ClusterRun>, PipelineError> {
        let Some(info) = store_cluster::read_cluster(root)? else {
            return Ok(None);
        };
        Ok(Some(ClusterRun {
            root: root.to_path_buf(),
            events: store_cluster::read_events(root),
            info,
        }))
    }

    /// The node names in run.json order.
    pub fn names(&self) -> Vec<&str> {
        self.info.targets.iter().map(|t| t.name.as_str()).collect()
    }

    /// The run directory of node `name`.
    pub fn node_dir(&self, name: &str) -> Option<PathBuf> {
        let target = self.info.targets.iter().find(|t| t.name == name)?;
        Some(self.info.node_dir(&self.root, target))
    }

    /// Every node's run, opened, in run.json order; an error names the node.
    pub fn open_nodes(&self) -> Result<Vec<(String, RunDir)>, PipelineError> {
        self.info
            .targets
            .iter()
            .map(|t| {
                let dir = self.info.node_dir(&self.root, t);
                RunDir::open(&dir)
                    .map(|run| (t.name.clone(), run))
                    .map_err(|e| PipelineError::Node {
                        node: t.name.clone(),
                        why: e.to_string(),
                    })
            })
            .collect()
    }
}

/// What a run is compared with: nothing, one run, or a cluster matched node by node.
pub enum BaselineRun<'a> {
    None,
    Single(&'a Path),
    Cluster(&'a ClusterRun),
}

/// One node's analysis.
pub struct NodeAnalysis {
    pub name: String,
    pub analysis: Analysis,
}

/// Every node's analysis, and the run's events.
pub struct ClusterAnalysis {
    pub root: PathBuf,
    pub info: ClusterInfo,
    pub nodes: Vec<NodeAnalysis>,
    pub events: Vec<Event>,
    /// With a cluster baseline: which nodes had a namesake there.
    pub pairing: Option<NodePairing>,
}

/// Analyses every node of a cluster run, each against its baseline.
pub fn analyse_cluster(
    cluster: &ClusterRun,
    baseline: BaselineRun,
    options: &Options,
) -> Result<ClusterAnalysis, PipelineError> {
    let pairing = match &baseline {
        BaselineRun::Cluster(b) => Some(pairing::pair_nodes(&b.names(), &cluster.names())),
        _ => None,
    };
    let mut nodes = Vec::new();
    for (name, run) in cluster.open_nodes()? {
        let base = match &baseline {
            BaselineRun::None => None,
            BaselineRun::Single(path) => Some(RunDir::open(path)?),
            BaselineRun::Cluster(b) => match b.node_dir(&name) {
                Some(dir) => Some(RunDir::open(&dir).map_err(|e| PipelineError::Node {
                    node: name.clone(),
                    why: format!("its baseline: {e}"),
                })?),
                None => None,
            },
        };
        let analysis = analyse_runs(run, base, options).map_err(|e| PipelineError::Node {
            node: name.clone(),
            why: e.to_string(),
        })?;
        nodes.push(NodeAnalysis { name, analysis });
    }
    Ok(ClusterAnalysis {
        root: cluster.root.clone(),
        info: cluster.info.clone(),
        nodes,
        events: cluster.events.clone(),
        pairing,
    })
}
