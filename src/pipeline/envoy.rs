//! Envoy's findings from a run's `envoy` records, with the limits they were judged against
//! and where each limit came from.

use crate::analyse::envoy::{self, EnvoyLimits, EnvoyReport};
use crate::model::envoy::{EnvoySnapshot, HeapDumpState};
use crate::store::{RecordKind, RunDir, RunInfo};

/// Envoy's findings from a run's `envoy` records.
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
/// a capture that failed as not served (HTTP 501) makes it not available.
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
        .find_map(|r| r.not_served_why())
        .map_or(HeapDumpState::NotAsked, HeapDumpState::NotAvailable)
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

/// The CPU limit as given, else from run.json.
pub fn cpu_limit_source(run: &RunDir, given: Option<f64>) -> Sourced<f64> {
    given
        .map(|c| (c, "--cpu-limit".to_string()))
        .or_else(|| recorded_cpu_limit(run.info.as_ref()).map(|c| (c, "run.json".to_string())))
}
