//! What the runtime itself says about a cycle, beside the heap profiles: goroutine growth by
//! stack, the MemStats view (live share, memory held and not returned, GC rate) and the agent's
//! stats (GOMAXPROCS against the CPU limit).

use serde::Serialize;

use super::series::{SeriesGrid, sustained, theil_sen};
use crate::model::capture::{CaptureRecord, RecordKind};

#[derive(Debug, Clone, Serialize)]
pub struct GoroutineGrowth {
    /// The first frame outside the runtime.
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    pub per_sec: f64,
    pub first: i64,
    pub last: i64,
    pub fit_r2: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemStatsView {
    /// Seconds since the cycle's first capture when the figures were read (the last read).
    pub at_s: f64,
    pub heap_alloc: i64,
    /// HeapAlloc / (HeapSys − HeapReleased): how much of the retained heap is live data.
    pub live_share: Option<f64>,
    /// HeapIdle − HeapReleased: held by the runtime, not returned to the OS.
    pub held_not_returned: Option<i64>,
    pub gc_per_sec: Option<f64>,
}

/// Runtime counts from the agent's stats (op 0x07): a GOMAXPROCS far above the CPUs the
/// process may use multiplies per-P caches and GC workers.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeView {
    pub gomaxprocs: Option<i64>,
    pub num_cpu: Option<i64>,
    pub threads: Option<i64>,
    pub goroutines: Option<i64>,
    /// The CPU limit, when the run records one (`cpu_limit` in run.json's options).
    pub cpu_limit: Option<f64>,
    /// GOMAXPROCS over the CPU limit, when both are known and it is above 1.5.
    pub multiplier: Option<f64>,
}

pub(crate) fn goroutines(grid: &SeriesGrid) -> Vec<GoroutineGrowth> {
    let t = grid.times();
    let span = t.last().copied().unwrap_or(0.0) - t.first().copied().unwrap_or(0.0);
    let mut out: Vec<GoroutineGrowth> = grid
        .series()
        .filter_map(|(name, v)| {
            let fit = theil_sen(t, v)?;
            let added = fit.slope * span;
            (added >= 5.0 && fit.r2 >= 0.5 && sustained(t, v, &fit)).then(|| GoroutineGrowth {
                name: name.to_string(),
                per_sec: fit.slope,
                first: v[0] as i64,
                last: v[v.len() - 1] as i64,
                fit_r2: fit.r2,
            })
        })
        .collect();
    out.sort_by(|a, b| b.per_sec.total_cmp(&a.per_sec).then(a.name.cmp(&b.name)));
    out
}

pub(crate) fn runtime_view(
    good: &[&&CaptureRecord],
    cpu_limit: Option<f64>,
) -> Option<RuntimeView> {
    let last = good.iter().rev().find(|r| r.kind == RecordKind::Stats)?;
    let get = |k: &str| last.totals.get(k).copied();
    let gomaxprocs = get("gomaxprocs");
    let multiplier = match (gomaxprocs, cpu_limit) {
        (Some(p), Some(limit)) if limit > 0.0 && p as f64 / limit >= 1.5 => Some(p as f64 / limit),
        _ => None,
    };
    Some(RuntimeView {
        gomaxprocs,
        num_cpu: get("num_cpu"),
        threads: get("threads"),
        goroutines: get("goroutines"),
        cpu_limit,
        multiplier,
    })
}

pub(crate) fn memstats_view(good: &[&&CaptureRecord], start_ms: i64) -> Option<MemStatsView> {
    let ms: Vec<&&&CaptureRecord> = good
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats)
        .collect();
    let last = ms.last()?;
    let get = |k: &str| last.totals.get(k).copied();
    let heap_alloc = get("HeapAlloc")?;
    let retained = get("HeapSys").zip(get("HeapReleased")).map(|(s, r)| s - r);
    let gc_per_sec = match (ms.first(), ms.len() > 1) {
        (Some(first), true) => {
            let dt = (last.t_ms - first.t_ms) as f64 / 1000.0;
            let dgc = get("NumGC")? - first.totals.get("NumGC").copied()?;
            (dt > 0.0).then(|| dgc as f64 / dt)
        }
        _ => None,
    };
    Some(MemStatsView {
        at_s: (last.t_ms - start_ms) as f64 / 1000.0,
        heap_alloc,
        live_share: retained
            .filter(|&r| r > 0)
            .map(|r| heap_alloc as f64 / r as f64),
        held_not_returned: get("HeapIdle").zip(get("HeapReleased")).map(|(i, r)| i - r),
        gc_per_sec,
    })
}
