//! Idle back-off, in the collector, not the sources: once the in-use heap (within 2 MiB or 2 %)
//! and the memory seen from outside (within 8 MiB or 5 %; not MemStats, whose held heap swings by
//! its live size between GCs) have stayed where they were when the heap last moved for
//! [`IDLE_AFTER`] (ten) intervals, each further flat capture doubles the heap interval, up to
//! `--idle-backoff` (4) times, since rendering a profile is most of what an idle Go process
//! allocates (docs/benchmarks.md). A move, a failed capture, or memory half-way to the burst
//! threshold (limit known) brings the interval back at the next capture, and burst mode never
//! backs off. Envoy keeps its own pacing.
//!
//! Measured against the last move, not the last capture, so a slow leak adds up; the thresholds
//! keep the GCs the profiling itself causes from counting. Ten intervals, not one (flat for a
//! while, not flat once), because a heap profile changes only at a GC and a process racing to its
//! limit doubles its GC goal each time: its profile stays identical for ever longer stretches
//! while it grows (a replayed OOM loop lost its last-moment captures to a back-off that began at
//! the first identical capture).
//!
//! A flat heap under heavy churn (more than 4 MiB allocated per capture, where one render
//! allocates about a MiB) is busy, not idle, and keeps the interval.

use super::{CaptureRecord, Collector, RecordKind};
use crate::source::SourceKind;

/// The idle back-off `collect` uses unless told otherwise, as a multiple of the interval.
pub const IDLE_BACKOFF: u32 = 4;

/// How many intervals the heap must stay flat before the back-off begins.
pub const IDLE_AFTER: u32 = 10;

/// Allocation per heap capture above which a target counts as busy even with a flat heap:
/// rendering one profile allocates about a MiB (docs/benchmarks.md), so an idle target stays
/// well under it.
const BUSY_PER_CAPTURE: u64 = 4 << 20;

/// What the heap looked like at a capture, to tell whether it moved since.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct HeapMark {
    inuse: Option<u64>,
    memory: Option<u64>,
    /// Cumulative allocation (`alloc_space`).
    alloc: Option<u64>,
    /// When the capture was requested (unix ms).
    t_ms: i64,
    /// Heap captures since this mark was set.
    captures: u32,
}

impl Collector {
    /// After a heap capture: an idle target (in-use heap within 2 MiB or 2 %, memory from
    /// outside within 8 MiB or 5 %, of where they were when the heap last moved, for
    /// [`IDLE_AFTER`] intervals) is asked less and less often, up to `idle_backoff` times the
    /// interval; any movement brings the interval back at once. Envoy is paced by its own
    /// rule; a source that costs the target nothing (proc) keeps its interval, a stopped or
    /// frozen target included.
    pub(super) fn pace_idle(&mut self, record: &CaptureRecord) {
        let kind = self.kind;
        if kind == SourceKind::Envoy || !kind.costs_target() || record.kind != RecordKind::Heap {
            return;
        }
        // A target that fails is in trouble, not idle: its last live moments matter most.
        if !record.is_ok() {
            self.idle_factor = 1;
            return;
        }
        let mark = HeapMark {
            inuse: record.totals.get("inuse_space").map(|&b| b.max(0) as u64),
            memory: self.outside_now(),
            alloc: record.totals.get("alloc_space").map(|&b| b.max(0) as u64),
            t_ms: record.t_ms,
            captures: 0,
        };
        if let Some(anchor) = &mut self.last_heap {
            anchor.captures += 1;
        }
        // Measured against the capture the flat stretch began with, so a slow leak adds up
        // to a move instead of hiding under the threshold step by step. The thresholds keep
        // the GCs our own profiling causes from counting as movement: the profile writer's
        // flate state (about a MiB) in the in-use heap when a GC lands mid-render, several
        // MiB of its garbage in RSS. The runtime's own figures
        // (MemStats) are left out: with GOGC=100 the heap a process holds swings by up to its
        // live size between GCs, idle or not.
        // A flat heap under heavy churn is a busy target, not an idle one: it allocates far
        // more than our renders account for.
        let flat = self.last_heap.is_some_and(|anchor| {
            let allocated = match (anchor.alloc, mark.alloc) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            };
            !moved(anchor.inuse, mark.inuse, 2 << 20, 0.02)
                && !moved(anchor.memory, mark.memory, 8 << 20, 0.05)
                && allocated <= u64::from(anchor.captures) * BUSY_PER_CAPTURE
        });
        if !flat {
            self.idle_factor = 1;
            self.last_heap = Some(mark);
            return;
        }
        let flat_ms = self.last_heap.map_or(0, |anchor| mark.t_ms - anchor.t_ms);
        let long_enough = flat_ms >= (self.config.interval * IDLE_AFTER).as_millis() as i64;
        // With a limit known, memory half-way to the burst threshold is no time to ask less.
        let near_limit = match (self.limit(), self.memory_now()) {
            (Some(limit), Some(now)) => now as f64 >= 0.5 * self.config.burst_at * limit as f64,
            _ => false,
        };
        self.idle_factor = if long_enough && !near_limit {
            (self.idle_factor * 2).min(self.config.idle_backoff.max(1))
        } else {
            1
        };
    }
}

/// Whether a figure moved between two captures: by more than `bytes` and `share` of it.
fn moved(before: Option<u64>, now: Option<u64>, bytes: u64, share: f64) -> bool {
    match (before, now) {
        (Some(a), Some(b)) => {
            let change = a.abs_diff(b);
            change > bytes && change as f64 > share * a.max(b) as f64
        }
        (None, None) => false,
        _ => true,
    }
}
