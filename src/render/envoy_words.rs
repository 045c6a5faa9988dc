//! The words of an Envoy report: why the live share differs from the naive one, what the
//! worker count and the configuration volume mean, and the verdict, made from the finished
//! report whenever an output needs them.

use crate::analyse::envoy::{ConfigVolume, EnvoyReport, EnvoyVerdict, HeapShare, WorkerMultiplier};
use crate::analyse::envoy::{EnvoyGrowth, clamp};
use crate::analyse::triage::format_span;
use crate::units::format_bytes;

/// The verdict in words, beside its code.
pub fn verdict_words(report: &EnvoyReport) -> String {
    verdict_parts(report).join("; ")
}

/// The parts of [`verdict_words`], each a clause of its own: what a headline lists.
pub fn verdict_parts(report: &EnvoyReport) -> Vec<String> {
    verdict_summary(
        &report.verdict,
        report.heap.as_ref(),
        report.growth.as_ref(),
        report.workers.as_ref(),
        report.config.as_ref(),
    )
}

/// Why the live share differs from the naive one.
pub fn heap_explanation(h: &HeapShare) -> String {
    let naive = h.naive_share;
    if h.source == "stats" {
        return format!(
            "/stats carries no pageheap_unmapped, so only the naive share ({:.1} %) is known; \
             the live share is at least that",
            naive * 100.0
        );
    }
    match (h.pageheap_unmapped, h.live_share) {
        (Some(u), Some(live)) if u > 0 => format!(
            "heap_size counts {} of pages tcmalloc already returned to the OS \
             (pageheap_unmapped); set aside, live data is {:.1} % of the mapped heap, not \
             the naive {:.1} %",
            format_bytes(clamp(u)),
            live * 100.0,
            naive * 100.0
        ),
        _ => format!(
            "nothing is unmapped, so the live share equals the naive {:.1} %",
            naive * 100.0
        ),
    }
}

/// What the worker count means against the CPU limit.
pub fn workers_meaning(w: &WorkerMultiplier) -> String {
    let concurrency = w.concurrency;
    match (w.cpu_limit_cores, w.multiplier) {
        (Some(c), Some(m)) if w.multiplied => format!(
            "{concurrency} workers on a {} CPU limit ({}x): Envoy sizes its workers on the \
             node's cores, not the container's limit, and keeps per-worker copies of much of \
             the cluster state; set concurrency to the limit ({})",
            ratio(c),
            ratio(m),
            c.ceil().max(1.0) as u64
        ),
        (Some(c), _) => format!("{concurrency} workers within a {} CPU limit", ratio(c)),
        (None, _) => format!(
            "{concurrency} workers; no CPU limit given to compare (pass the container's limit)"
        ),
    }
}

/// What the configuration volume means.
pub fn config_meaning(c: &ConfigVolume) -> String {
    let clusters = c.active_clusters;
    match (c.listeners_active, c.clusters_per_listener) {
        (Some(l), Some(p)) if c.whole_mesh => format!(
            "{clusters} clusters for {l} active listeners ({p:.0} per listener): the proxy \
             receives the configuration of the whole mesh, not only of what it serves; scope \
             it (PILOT_FILTER_GATEWAY_CLUSTER_CONFIG, Sidecar, exportTo), outside the incident"
        ),
        (Some(l), Some(p)) => {
            format!("{clusters} clusters for {l} active listeners ({p:.0} per listener)")
        }
        _ if c.whole_mesh => format!(
            "{clusters} clusters and no active listener count: a large share of the mesh's \
             configuration"
        ),
        _ => format!("{clusters} clusters"),
    }
}

fn ratio(r: f64) -> String {
    if (r - r.round()).abs() < 0.05 {
        format!("{}", r.round() as i64)
    } else {
        format!("{r:.1}")
    }
}

fn verdict_summary(
    verdict: &EnvoyVerdict,
    heap: Option<&HeapShare>,
    growth: Option<&EnvoyGrowth>,
    workers: Option<&WorkerMultiplier>,
    config: Option<&ConfigVolume>,
) -> Vec<String> {
    let share = heap.map(|h| (h, h.live_share.unwrap_or(h.naive_share)));
    let mut parts = vec![match (verdict.code, share) {
        ("live-data", Some((h, s))) => format!(
            "mostly live data ({:.0} % of the {}heap): Envoy really holds this state, \
             fragmentation is not the problem",
            s * 100.0,
            if h.live_share.is_some() {
                "mapped "
            } else {
                ""
            }
        ),
        ("held-not-returned", Some((h, s))) => format!(
            "memory held, not returned: only {:.1} % of the mapped heap is live data and \
             tcmalloc keeps {} of free pages and thread caches; the problem is releasing \
             memory, not the volume of data (Envoy's overload manager can shrink the heap)",
            s * 100.0,
            format_bytes(clamp(h.held_not_returned.unwrap_or(0)))
        ),
        ("mixed", Some((_, s))) => format!(
            "{:.0} % of the heap is live data: part state, part memory held by tcmalloc",
            s * 100.0
        ),
        _ => "no tcmalloc figures (heap_size 0 or absent): this build reports no heap data; \
              judge by the process memory"
            .to_string(),
    }];
    if let Some(g) = growth.filter(|g| g.growing) {
        let mut s = format!(
            "growing {}/min",
            format_bytes((g.bytes_per_sec * 60.0) as i64)
        );
        match (g.limit, g.limit_in_s) {
            (Some(l), Some(t)) if t <= 0.0 => s.push_str(&format!(
                ", already at the {} limit",
                format_bytes(clamp(l))
            )),
            (Some(l), Some(t)) => s.push_str(&format!(
                ", the {} limit in about {}",
                format_bytes(clamp(l)),
                format_span(t)
            )),
            _ => {}
        }
        parts.push(s);
    }
    let multiplied = workers.filter(|w| w.multiplied);
    let mesh = config.filter(|c| c.whole_mesh);
    match (multiplied, mesh) {
        (Some(w), Some(c)) => parts.push(format!(
            "{} workers on {} CPUs and {} clusters for {} listeners point at replicated xDS \
             state: align concurrency with the CPU limit first, then scope the configuration",
            w.concurrency,
            w.cpu_limit_cores.map_or("?".into(), ratio),
            c.active_clusters,
            c.listeners_active.map_or("?".into(), |l| l.to_string())
        )),
        (Some(w), None) => parts.push(format!(
            "{} workers on {} CPUs multiply per-worker state: align concurrency with the limit",
            w.concurrency,
            w.cpu_limit_cores.map_or("?".into(), ratio)
        )),
        (None, Some(c)) => parts.push(format!(
            "{} clusters for {} listeners: the proxy carries the whole mesh's configuration",
            c.active_clusters,
            c.listeners_active.map_or("?".into(), |l| l.to_string())
        )),
        (None, None) => {}
    }
    parts
}
