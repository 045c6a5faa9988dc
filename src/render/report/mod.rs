//! `heapwatch report`: one run's findings as `index.html` (self-contained, for people),
//! `report.md` (short, for a CI job summary) and `summary.json` (for tools). Pure: the caller
//! reads the run and analyses it; [`flames`] draws the flamegraphs it found, and the rest
//! lays them out.
//! Every string that came from a profile, a run or a Kubernetes document is escaped on the way
//! out. Two optional sections: Envoy's findings when the run holds `envoy` records, and the
//! Kubernetes triage checklist when a pod file is given.

pub mod breakdown;
pub mod chart;
pub mod cluster;
pub mod cluster_chart;
pub mod explorer;
pub mod flames;
pub mod html;
mod inline;
mod life;
pub mod markdown;
mod marks;
pub mod markup;
pub mod summary;

use std::collections::BTreeMap;

use crate::analyse::compare::Comparison;
use crate::analyse::envoy::{EnvoyLimits, EnvoyReport};
use crate::analyse::growth::GrowthReport;
use crate::analyse::rules::{HeapRatio, Outcome};
use crate::analyse::triage::{TriageReport, format_span};
use crate::model::envoy::HeapDumpState;
use crate::model::memory::MemorySample;
use crate::render::headline::Headline;
use crate::store::cluster::Event;
use crate::store::{CaptureRecord, RecordKind, RunInfo};
use crate::units::format_bytes;

/// The run a report is about, as read from its directory and analysed.
pub struct RunView<'a> {
    /// The run directory's own name (not its path, so reports do not depend on where they run).
    pub name: String,
    pub info: Option<&'a RunInfo>,
    pub records: &'a [CaptureRecord],
    pub memory: &'a [MemorySample],
    pub growth: &'a GrowthReport,
    /// Marked log lines (`events.jsonl`), oldest first.
    pub events: &'a [Event],
    /// Profiles that could not be read, and similar things worth knowing.
    pub notes: Vec<String>,
    /// The node's name, when the run is one node of a cluster run (`infra/etcd-0/etcd`; its
    /// directory is that name made safe, `infra_etcd-0_etcd`).
    pub node: Option<String>,
}

impl RunView<'_> {
    /// What the report is titled: the node's name in a cluster run, else the build label, else
    /// the directory name. Plain text: each output escapes it as its format needs.
    pub fn label(&self) -> &str {
        self.node
            .as_deref()
            .or(self.info.and_then(|i| i.label.as_deref()))
            .unwrap_or(&self.name)
    }
}

/// The build this run is compared against (`--baseline`).
pub struct BaselineView<'a> {
    pub name: String,
    pub info: Option<&'a RunInfo>,
    pub comparison: &'a Comparison,
    pub heap_ratio: Option<&'a HeapRatio>,
}

impl BaselineView<'_> {
    pub fn label(&self) -> &str {
        self.info
            .and_then(|i| i.label.as_deref())
            .unwrap_or(&self.name)
    }
}

/// One flamegraph of the report: its file under `flamegraphs/` and its SVG text.
pub struct Flamegraph {
    /// Relative to the report folder: `flamegraphs/cycle-1-growth.svg`.
    pub file: String,
    /// The boot cycle it belongs to; `None` for the comparison with the baseline.
    pub cycle: Option<u32>,
    pub caption: String,
    pub svg: String,
}

/// Envoy's findings from the run's `envoy` records.
pub struct EnvoyView<'a> {
    /// The target as recorded (`envoy:http://…`).
    pub target: &'a str,
    pub report: &'a EnvoyReport,
    pub limits: EnvoyLimits,
    /// Where the memory and CPU limits came from (`run.json`, `--cpu-limit`, `pod …`).
    pub memory_from: Option<&'a str>,
    pub cpu_from: Option<&'a str>,
}

/// The Kubernetes triage of the pod file given with `--pod`.
pub struct KubeView<'a> {
    /// The pod file's name (not its path, so reports do not depend on where they run).
    pub file: String,
    pub report: &'a TriageReport,
}

/// Everything a report shows.
pub struct ReportModel<'a> {
    pub run: RunView<'a>,
    pub baseline: Option<BaselineView<'a>>,
    pub rules: &'a [Outcome],
    pub flamegraphs: &'a [Flamegraph],
    /// What the page's explorer carries of the profiles.
    pub explorer: Option<&'a explorer::CarriedStacks>,
    /// Largest in-use heap captured per boot cycle.
    pub peak_heap: &'a [(u32, i64)],
    pub envoy: Option<EnvoyView<'a>>,
    pub kube: Option<KubeView<'a>>,
}

impl ReportModel<'_> {
    /// The headline at the top: one short sentence on what killed it, or what regressed, and
    /// where to look, then the rest as a list ([`Headline`]). A run of Envoy admin figures
    /// without profiles leads with Envoy's verdict.
    pub fn headline(&self) -> Headline {
        let g = self.run.growth;
        let baseline = self.baseline.as_ref().map(|b| b.comparison);
        if let Some(e) = self.envoy.as_ref().filter(|_| self.envoy_only()) {
            let (code, summary) = envoy_verdict(e.report);
            let mut parts = if e.report.snapshots == 0 {
                vec![summary]
            } else {
                crate::render::envoy_words::verdict_parts(e.report)
            };
            let first = if parts.is_empty() {
                String::new()
            } else {
                parts.remove(0)
            };
            let envoy = Headline {
                lead: format!("Envoy {code}: {first}"),
                points: parts,
            };
            return match baseline {
                Some(c) => {
                    let mut h = crate::render::headline::of_comparison(c);
                    h.points.push(envoy.line());
                    h
                }
                None => envoy,
            };
        }
        crate::render::headline::of_run(g, baseline)
    }

    /// True for a run of Envoy admin figures without any heap or goroutine profile (an Envoy
    /// built without tcmalloc's `/heap_dump`): the growth analysis has no sites to rank.
    pub fn envoy_only(&self) -> bool {
        self.envoy.is_some()
            && !self
                .run
                .records
                .iter()
                .any(|r| r.is_ok() && matches!(r.kind, RecordKind::Heap | RecordKind::Goroutine))
    }

    pub fn failed(&self) -> bool {
        self.rules
            .iter()
            .any(|o| o.status == crate::analyse::rules::Status::Fail)
    }
}

/// Capture attempts of a run, counted.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Tally {
    pub attempts: usize,
    pub heap: usize,
    pub goroutine: usize,
    /// Envoy admin snapshots (`/memory` and `/stats`).
    #[serde(skip_serializing_if = "is_zero")]
    pub envoy: usize,
    pub stored: usize,
    pub duplicates: usize,
    /// Good attempts kept as figures only, no file: MemStats and runtime stats reads, and
    /// profiles thinned for the disk budget.
    pub figures_only: usize,
    pub errors: usize,
    /// Failed attempts by class (refused, timeout, reset, …).
    pub errors_by_kind: BTreeMap<String, usize>,
    pub burst: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

pub fn tally(records: &[CaptureRecord], usual_interval_ms: Option<u64>) -> Tally {
    let mut t = Tally::default();
    let usual = usual_interval_ms.or_else(|| records.iter().filter_map(|r| r.interval_ms).max());
    for r in records.iter().filter(|r| !r.kind.is_event()) {
        t.attempts += 1;
        match r.kind {
            RecordKind::Heap => t.heap += 1,
            RecordKind::Goroutine => t.goroutine += 1,
            RecordKind::Envoy => t.envoy += 1,
            _ => {}
        }
        if !r.is_ok() {
            t.errors += 1;
            let kind = r.error_kind.clone().unwrap_or_else(|| "other".into());
            *t.errors_by_kind.entry(kind).or_default() += 1;
            continue;
        }
        if r.dup_of.is_some() {
            t.duplicates += 1;
        } else if r.file.is_some() {
            t.stored += 1;
        } else {
            t.figures_only += 1;
        }
        if let (Some(i), Some(u)) = (r.interval_ms, usual) {
            if i < u && r.kind == RecordKind::Heap {
                t.burst += 1;
            }
        }
    }
    t
}

/// The usual (non-burst) interval of a run, from `run.json`.
pub fn usual_interval_ms(info: Option<&RunInfo>) -> Option<u64> {
    info.and_then(|i| i.options.interval_ms)
}

/// Envoy's verdict (code and sentence), or what to say when Envoy never answered.
pub fn envoy_verdict(r: &EnvoyReport) -> (&'static str, String) {
    if r.snapshots == 0 {
        (
            "no-snapshots",
            "Envoy never answered /memory or /stats: the run holds no snapshot (the failed attempts are in the manifest)".into(),
        )
    } else {
        (r.verdict.code, crate::render::envoy_words::verdict_words(r))
    }
}

fn bytes(b: u64) -> String {
    format_bytes(i64::try_from(b).unwrap_or(i64::MAX))
}

fn per_min(bps: f64) -> String {
    format!("{}/min", format_bytes((bps * 60.0) as i64))
}

/// Trims `2.0` to `2` and keeps `1.5`.
fn cores(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{}", c.round() as i64)
    } else {
        format!("{c}")
    }
}

/// Envoy's findings as (label, text) rows in the order an SRE asks: live data against the
/// naive share, memory held, growth and the limit, the hidden multipliers, the heap dump.
/// Plain text: the caller escapes it for HTML or markdown.
pub fn envoy_facts(e: &EnvoyView) -> Vec<(&'static str, String)> {
    let r = e.report;
    let mut facts = Vec::new();
    let mut seen = format!(
        "{} snapshot{} over {}",
        r.snapshots,
        if r.snapshots == 1 { "" } else { "s" },
        format_span(r.span_s)
    );
    if r.restarts > 0 {
        seen.push_str(&format!(
            "; {} restart(s) seen (server.uptime dropped), figures from the last boot cycle",
            r.restarts
        ));
    }
    facts.push(("snapshots", seen));
    match &r.heap {
        Some(h) => {
            let share = match h.live_share {
                Some(live) => format!(
                    "{:.1} % of the mapped heap, allocated / (heap_size − pageheap_unmapped); \
                     naive allocated / heap_size: {:.1} %",
                    live * 100.0,
                    h.naive_share * 100.0
                ),
                None => format!(
                    "unknown (needs /memory); naive allocated / heap_size: {:.1} % from {}",
                    h.naive_share * 100.0,
                    h.source
                ),
            };
            facts.push(("live-data share", share));
            facts.push((
                "why they differ",
                crate::render::envoy_words::heap_explanation(h),
            ));
            let mut heap = format!(
                "allocated {} of heap_size {}",
                bytes(h.allocated),
                bytes(h.heap_size)
            );
            if let Some(u) = h.pageheap_unmapped {
                heap.push_str(&format!(", of which {} unmapped", bytes(u)));
            }
            facts.push(("heap", heap));
            if let Some(held) = h.held_not_returned {
                facts.push((
                    "held, not returned",
                    format!(
                        "{} (pageheap_free {} + thread caches {})",
                        bytes(held),
                        bytes(h.pageheap_free.unwrap_or(0)),
                        bytes(h.total_thread_cache.unwrap_or(0))
                    ),
                ));
            }
            if let Some(p) = h.physical {
                facts.push(("physical", bytes(p)));
            }
        }
        None => facts.push((
            "live-data share",
            "no tcmalloc figures (heap_size 0 or absent)".to_string(),
        )),
    }
    if let Some(g) = &r.growth {
        let mut s = format!(
            "{} {} → {}, {} (R² {:.2})",
            g.series,
            bytes(g.first),
            bytes(g.last),
            per_min(g.bytes_per_sec),
            g.fit_r2
        );
        if let Some(a) = g.allocated_bytes_per_sec {
            s.push_str(&format!("; allocated {}", per_min(a)));
        }
        if !g.growing {
            s.push_str("; not a steady growth");
        }
        facts.push(("growth", s));
        let to_limit = match (g.limit, g.limit_in_s) {
            (Some(l), Some(t)) if t <= 0.0 => format!("at the {} limit already", bytes(l)),
            (Some(l), Some(t)) => format!(
                "the {} limit in about {} at this rate",
                bytes(l),
                format_span(t)
            ),
            (Some(l), None) => format!("the {} limit is not in sight", bytes(l)),
            (None, _) => "no memory limit known (collect with --limit, or give --pod)".into(),
        };
        facts.push(("time to the limit", to_limit));
    }
    let mut limits = Vec::new();
    if let Some(m) = e.limits.memory_bytes {
        limits.push(format!(
            "memory {}{}",
            bytes(m),
            e.memory_from.map_or(String::new(), |f| format!(" ({f})"))
        ));
    }
    if let Some(c) = e.limits.cpu_cores {
        limits.push(format!(
            "CPU {}{}",
            cores(c),
            e.cpu_from.map_or(String::new(), |f| format!(" ({f})"))
        ));
    }
    if !limits.is_empty() {
        facts.push(("limits", limits.join(", ")));
    }
    if let Some(w) = &r.workers {
        facts.push((
            "worker multiplier",
            crate::render::envoy_words::workers_meaning(w),
        ));
    }
    if let Some(c) = &r.config {
        facts.push((
            "clusters per listener",
            crate::render::envoy_words::config_meaning(c),
        ));
    }
    if let Some(c) = r.connections {
        facts.push(("connections", c.to_string()));
    }
    facts.push((
        "heap dump",
        match &r.heap_dump {
            HeapDumpState::NotAsked => "not asked".to_string(),
            HeapDumpState::Available => {
                "available: the heap profiles name the C++ allocation sites".to_string()
            }
            HeapDumpState::NotAvailable(why) => format!("not available ({why})"),
        },
    ));
    facts
}

/// Escapes text for HTML element content and attribute values.
/// A cycle's memory peak as people should read it: anonymous memory (what the kernel kills
/// on) when the split is known, with the cgroup or process total beside it.
pub fn memory_peak(c: &crate::analyse::growth::CycleGrowth) -> String {
    match (c.memory_peak_anon, c.memory_peak) {
        (Some(a), Some(t)) => format!(
            "{} anonymous ({} in all)",
            format_bytes(a as i64),
            format_bytes(t as i64)
        ),
        (None, Some(t)) => format_bytes(t as i64),
        _ => "-".into(),
    }
}

pub fn rate(bps: f64) -> String {
    format!("{}/s", format_bytes(bps as i64))
}

pub fn seconds(s: f64) -> String {
    format!("{s:.1} s")
}

/// `run.json` options people care about, as (name, value) pairs in a stable order.
pub fn collection_facts(info: &RunInfo) -> Vec<(&'static str, String)> {
    let o = &info.options;
    let mut facts = vec![
        ("target", info.target.clone()),
        ("source", info.source.clone()),
        ("started", crate::time::readable(info.started_ms)),
        ("collected by", info.tool.clone()),
    ];
    if let Some(l) = &info.label {
        facts.push(("build label", l.clone()));
    }
    if !info.resumed_ms.is_empty() {
        let when: Vec<String> = info
            .resumed_ms
            .iter()
            .map(|&t| crate::time::readable(t))
            .collect();
        facts.push(("resumed", when.join(", ")));
    }
    if let Some(i) = o.interval_ms {
        let mut s = format!("{i} ms");
        if let (Some(b), Some(limit)) = (o.burst_interval_ms, info.limit_bytes) {
            let at = o.burst_at.unwrap_or(0.6);
            s.push_str(&format!(
                ", {b} ms past {:.0} % of the limit ({})",
                at * 100.0,
                format_bytes((limit as f64 * at) as i64)
            ));
        }
        facts.push(("interval", s));
    }
    if let Some(t) = o.timeout_ms {
        facts.push(("timeout", format!("{t} ms")));
    }
    if let Some(p) = &o.profiles {
        facts.push(("profiles", p.join(", ")));
    }
    if let Some(l) = info.limit_bytes {
        facts.push(("memory limit", format_bytes(l as i64)));
    }
    if let Some(c) = &o.cpu_limit {
        facts.push(("CPU limit", c.to_string()));
    }
    if let Some(c) = &o.cgroup {
        facts.push(("cgroup", c.clone()));
    }
    if let Some(p) = o.pid {
        facts.push(("pid", p.to_string()));
    }
    if let Some(m) = &o.memory_source {
        facts.push(("memory samples", m.clone()));
    }
    if o.gc == Some(true) {
        facts.push(("forced GC", "yes (?gc=1)".into()));
    }
    facts
}
