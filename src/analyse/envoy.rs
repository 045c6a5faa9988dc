//! Envoy's memory from its admin figures: how much of the heap is live data once pages
//! already returned to the OS are set aside, how much tcmalloc holds without returning it,
//! how fast memory grows and when it meets the limit, the worker multiplier (concurrency
//! against the CPU limit) and how much configuration the proxy carries. Pure.

use serde::Serialize;

use super::series::theil_sen;
use crate::model::envoy::{EnvoyMemory, EnvoySnapshot, HeapDumpState};

/// At least this share of the mapped heap is live data: the heap is what Envoy uses.
const LIVE: f64 = 0.8;
/// Below this share the heap is mostly memory held and not returned.
const HELD: f64 = 0.6;
/// Growth below this over the whole series is noise.
const MIN_GROWTH_BYTES: f64 = 1024.0 * 1024.0;
/// A fit explaining less than this is not a trend.
const MIN_R2: f64 = 0.5;
/// This many clusters per active listener, and at least `MIN_CLUSTERS`, mean the proxy gets
/// the configuration of the whole mesh rather than of what it serves.
const CLUSTERS_PER_LISTENER: f64 = 50.0;
const MIN_CLUSTERS: u64 = 200;

/// What the proxy may use, from its container spec.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EnvoyLimits {
    pub memory_bytes: Option<u64>,
    pub cpu_cores: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvoyReport {
    pub snapshots: usize,
    /// Restarts seen in the series (`server.uptime` dropped).
    pub restarts: usize,
    /// Seconds covered by the snapshots of the last boot cycle.
    pub span_s: f64,
    // The fields from here on are written to JSON by `render::worded::EnvoyJson`, with the
    // words of the heap, workers, configuration and verdict.
    #[serde(skip)]
    pub heap: Option<HeapShare>,
    #[serde(skip)]
    pub growth: Option<EnvoyGrowth>,
    #[serde(skip)]
    pub workers: Option<WorkerMultiplier>,
    #[serde(skip)]
    pub config: Option<ConfigVolume>,
    #[serde(skip)]
    pub connections: Option<u64>,
    #[serde(skip)]
    pub heap_dump: HeapDumpState,
    #[serde(skip)]
    pub verdict: EnvoyVerdict,
}

/// Where the heap goes, from the newest snapshot with figures.
#[derive(Debug, Clone, Serialize)]
pub struct HeapShare {
    /// `/memory` (all of tcmalloc's figures) or `stats` (allocated and heap size only).
    pub source: &'static str,
    pub allocated: u64,
    pub heap_size: u64,
    pub pageheap_unmapped: Option<u64>,
    pub pageheap_free: Option<u64>,
    pub total_thread_cache: Option<u64>,
    pub physical: Option<u64>,
    /// allocated / heap_size.
    pub naive_share: f64,
    /// allocated / (heap_size − pageheap_unmapped): live data in the heap that is mapped.
    pub live_share: Option<f64>,
    /// pageheap_free + total_thread_cache: held by tcmalloc, not returned to the OS.
    pub held_not_returned: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvoyGrowth {
    /// The figure compared with the limit: `total_physical_bytes`,
    /// `server.memory_physical_size`, `mapped_heap` (heap_size − unmapped) or `allocated`.
    pub series: &'static str,
    pub first: u64,
    pub last: u64,
    pub bytes_per_sec: f64,
    pub fit_r2: f64,
    /// Growth of `allocated` (live data), when known.
    pub allocated_bytes_per_sec: Option<f64>,
    pub growing: bool,
    pub limit: Option<u64>,
    /// Seconds from the last snapshot until the limit, at the fitted rate.
    pub limit_in_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkerMultiplier {
    pub concurrency: u64,
    pub cpu_limit_cores: Option<f64>,
    /// concurrency / CPUs of the limit (rounded up).
    pub multiplier: Option<f64>,
    pub multiplied: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigVolume {
    pub active_clusters: u64,
    pub listeners_active: Option<u64>,
    pub clusters_per_listener: Option<f64>,
    pub whole_mesh: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvoyVerdict {
    /// `live-data`, `held-not-returned`, `mixed` or `no-data`.
    pub code: &'static str,
    pub growing: bool,
}

/// Analyses snapshots in time order.
pub fn analyse(
    snapshots: &[EnvoySnapshot],
    limits: &EnvoyLimits,
    heap_dump: HeapDumpState,
) -> EnvoyReport {
    let (cycle, restarts) = last_cycle(snapshots);
    let span_s = match (cycle.first(), cycle.last()) {
        (Some(a), Some(b)) => (b.t_ms - a.t_ms).max(0) as f64 / 1000.0,
        _ => 0.0,
    };
    let heap = cycle.iter().rev().find_map(heap_share);
    let growth = growth(cycle, limits);
    let newest = |f: fn(&EnvoySnapshot) -> Option<u64>| cycle.iter().rev().find_map(f);
    let workers = newest(|s| s.stats.concurrency()).map(|c| workers(c, limits.cpu_cores));
    let config = newest(|s| s.stats.active_clusters())
        .map(|clusters| config(clusters, newest(|s| s.stats.listeners_active())));
    let connections = newest(|s| s.stats.total_connections());
    let share = heap.as_ref().map(|h| h.live_share.unwrap_or(h.naive_share));
    let code = match (heap.as_ref(), share) {
        (Some(_), Some(s)) if s >= LIVE => "live-data",
        (Some(h), Some(s)) if s < HELD && h.live_share.is_some() => "held-not-returned",
        (Some(_), Some(_)) => "mixed",
        _ => "no-data",
    };
    let verdict = EnvoyVerdict {
        code,
        growing: growth.as_ref().is_some_and(|g| g.growing),
    };
    EnvoyReport {
        snapshots: snapshots.len(),
        restarts,
        span_s,
        heap,
        growth,
        workers,
        config,
        connections,
        heap_dump,
        verdict,
    }
}

/// The snapshots since the last restart (an `server.uptime` drop), and how many restarts.
fn last_cycle(snapshots: &[EnvoySnapshot]) -> (&[EnvoySnapshot], usize) {
    let mut start = 0;
    let mut restarts = 0;
    let mut last_uptime = None;
    for (i, s) in snapshots.iter().enumerate() {
        if let Some(u) = s.stats.uptime_s() {
            if last_uptime.is_some_and(|before| u < before) {
                start = i;
                restarts += 1;
            }
            last_uptime = Some(u);
        }
    }
    (&snapshots[start..], restarts)
}

fn heap_share(s: &EnvoySnapshot) -> Option<HeapShare> {
    if let Some(m) = s.memory.as_ref().filter(|m| m.has_data()) {
        let heap_size = m.heap_size?;
        let allocated = m.allocated?;
        let mapped = mapped(m);
        let live_share = mapped
            .filter(|&x| x > 0)
            .map(|x| allocated as f64 / x as f64);
        let held = match (m.pageheap_free, m.total_thread_cache) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        let naive = allocated as f64 / heap_size as f64;
        return Some(HeapShare {
            source: "/memory",
            allocated,
            heap_size,
            pageheap_unmapped: m.pageheap_unmapped,
            pageheap_free: m.pageheap_free,
            total_thread_cache: m.total_thread_cache,
            physical: m
                .total_physical_bytes
                .or(s.stats.get("server.memory_physical_size")),
            naive_share: naive,
            live_share,
            held_not_returned: held,
        });
    }
    let allocated = s.stats.get("server.memory_allocated")?;
    let heap_size = s.stats.get("server.memory_heap_size").filter(|&h| h > 0)?;
    let naive = allocated as f64 / heap_size as f64;
    Some(HeapShare {
        source: "stats",
        allocated,
        heap_size,
        pageheap_unmapped: None,
        pageheap_free: None,
        total_thread_cache: None,
        physical: s.stats.get("server.memory_physical_size"),
        naive_share: naive,
        live_share: None,
        held_not_returned: None,
    })
}

fn mapped(m: &EnvoyMemory) -> Option<u64> {
    let heap = m.heap_size?;
    Some(heap.saturating_sub(m.pageheap_unmapped.unwrap_or(0)))
}

/// Bytes as the signed figure `format_bytes` takes, saturating.
pub fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The figure closest to what the kernel counts against the limit, per snapshot.
fn limit_figure(s: &EnvoySnapshot) -> Option<(&'static str, u64)> {
    let m = s.memory.as_ref().filter(|m| m.has_data());
    if let Some(p) = m.and_then(|m| m.total_physical_bytes) {
        return Some(("total_physical_bytes", p));
    }
    if let Some(p) = s
        .stats
        .get("server.memory_physical_size")
        .filter(|&p| p > 0)
    {
        return Some(("server.memory_physical_size", p));
    }
    if let Some(x) = m.and_then(mapped) {
        return Some(("mapped_heap", x));
    }
    m.and_then(|m| m.allocated)
        .or(s.stats.get("server.memory_allocated"))
        .map(|a| ("allocated", a))
}

fn growth(cycle: &[EnvoySnapshot], limits: &EnvoyLimits) -> Option<EnvoyGrowth> {
    let t0 = cycle.first()?.t_ms;
    let figures: Vec<(f64, &'static str, u64)> = cycle
        .iter()
        .filter_map(|s| limit_figure(s).map(|(n, v)| ((s.t_ms - t0) as f64 / 1000.0, n, v)))
        .collect();
    // One series throughout: the kind the newest snapshot has.
    let name = figures.last()?.1;
    let points: Vec<(f64, u64)> = figures
        .iter()
        .filter(|f| f.1 == name)
        .map(|f| (f.0, f.2))
        .collect();
    if points.len() < 3 {
        return None;
    }
    let t: Vec<f64> = points.iter().map(|p| p.0).collect();
    let v: Vec<f64> = points.iter().map(|p| p.1 as f64).collect();
    let fit = theil_sen(&t, &v)?;
    let allocated: Vec<(f64, f64)> = cycle
        .iter()
        .filter_map(|s| {
            let a = s
                .memory
                .as_ref()
                .and_then(|m| m.allocated)
                .or(s.stats.get("server.memory_allocated"))?;
            Some(((s.t_ms - t0) as f64 / 1000.0, a as f64))
        })
        .collect();
    let allocated_rate = if allocated.len() >= 3 {
        let (t, v): (Vec<f64>, Vec<f64>) = allocated.into_iter().unzip();
        theil_sen(&t, &v).map(|f| f.slope)
    } else {
        None
    };
    let span = t.last().copied().unwrap_or(0.0) - t[0];
    let growing = fit.slope > 0.0 && fit.slope * span >= MIN_GROWTH_BYTES && fit.r2 >= MIN_R2;
    let last = points.last().map_or(0, |p| p.1);
    let limit_in_s = match limits.memory_bytes {
        Some(l) if last >= l => Some(0.0),
        Some(l) if growing => Some((l - last) as f64 / fit.slope),
        _ => None,
    };
    Some(EnvoyGrowth {
        series: name,
        first: points[0].1,
        last,
        bytes_per_sec: fit.slope,
        fit_r2: fit.r2,
        allocated_bytes_per_sec: allocated_rate,
        growing,
        limit: limits.memory_bytes,
        limit_in_s,
    })
}

fn workers(concurrency: u64, cpu: Option<f64>) -> WorkerMultiplier {
    let cores = cpu.map(|c| c.ceil().max(1.0));
    let multiplier = cores.map(|c| concurrency as f64 / c);
    let multiplied = multiplier.is_some_and(|m| m > 1.0);
    WorkerMultiplier {
        concurrency,
        cpu_limit_cores: cpu,
        multiplier,
        multiplied,
    }
}

fn config(clusters: u64, listeners: Option<u64>) -> ConfigVolume {
    let per = listeners
        .filter(|&l| l > 0)
        .map(|l| clusters as f64 / l as f64);
    let whole_mesh = clusters >= MIN_CLUSTERS && per.is_none_or(|p| p >= CLUSTERS_PER_LISTENER);
    ConfigVolume {
        active_clusters: clusters,
        listeners_active: listeners,
        clusters_per_listener: per,
        whole_mesh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::envoy::EnvoyStats;

    fn snap(t_s: i64, memory: &str, stats: &str) -> EnvoySnapshot {
        EnvoySnapshot {
            t_ms: t_s * 1000,
            memory: Some(EnvoyMemory::parse(memory.as_bytes()).unwrap()),
            stats: EnvoyStats::parse(stats),
        }
    }

    #[test]
    fn unmapped_pages_are_not_counted_against_live_data() {
        let s = snap(
            0,
            r#"{"allocated":"2793932032","heap_size":"4162846720","pageheap_unmapped":"1109401600",
               "pageheap_free":"4145152","total_thread_cache":"22500080",
               "total_physical_bytes":"3080496686"}"#,
            "",
        );
        let r = analyse(&[s], &EnvoyLimits::default(), HeapDumpState::NotAsked);
        let h = r.heap.unwrap();
        assert!((h.naive_share - 0.671).abs() < 0.001, "{}", h.naive_share);
        assert!((h.live_share.unwrap() - 0.915).abs() < 0.001);
        assert_eq!(h.held_not_returned, Some(4_145_152 + 22_500_080));
        assert_eq!(r.verdict.code, "live-data");
    }

    #[test]
    fn stats_alone_give_the_naive_share() {
        let s = EnvoySnapshot {
            t_ms: 0,
            memory: Some(EnvoyMemory::parse(br#"{"heap_size":"0"}"#).unwrap()),
            stats: EnvoyStats::parse(
                "server.memory_allocated: 673689312\nserver.memory_heap_size: 720371712\n",
            ),
        };
        let r = analyse(&[s], &EnvoyLimits::default(), HeapDumpState::NotAsked);
        let h = r.heap.unwrap();
        assert_eq!(h.source, "stats");
        assert!((h.naive_share - 0.935).abs() < 0.001);
        assert_eq!(r.verdict.code, "live-data");
    }

    #[test]
    fn a_restart_starts_the_fit_again() {
        let mem = |a: u64| format!(r#"{{"allocated":"{a}","heap_size":"{}"}}"#, a * 2);
        let series: Vec<EnvoySnapshot> = (0..10)
            .map(|i| {
                let (uptime, alloc) = if i < 5 {
                    (100 + i * 10, 1_000_000_000 + i as u64 * 100_000_000)
                } else {
                    (i * 10, 100_000_000 + i as u64 * 10_000_000)
                };
                snap(i * 10, &mem(alloc), &format!("server.uptime: {uptime}\n"))
            })
            .collect();
        let r = analyse(&series, &EnvoyLimits::default(), HeapDumpState::NotAsked);
        assert_eq!(r.restarts, 1);
        let g = r.growth.unwrap();
        assert_eq!(g.series, "mapped_heap");
        assert!(
            (g.bytes_per_sec - 2_000_000.0).abs() < 1.0,
            "{}",
            g.bytes_per_sec
        );
    }

    #[test]
    fn workers_beyond_the_cpu_limit_multiply() {
        let w = workers(16, Some(2.0));
        assert_eq!(w.multiplier, Some(8.0));
        assert!(w.multiplied);
        assert!(!workers(2, Some(1.5)).multiplied);
        let c = config(1564, Some(4));
        assert!(c.whole_mesh);
        assert_eq!(c.clusters_per_listener, Some(391.0));
        assert!(!config(40, Some(4)).whole_mesh);
    }
}
