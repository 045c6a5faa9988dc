//! Idle back-off: while heap captures find the heap where it was when it last moved, the
//! heap interval doubles up to `--idle-backoff` times itself, since rendering a profile is
//! most of what an idle Go process allocates (docs/benchmarks.md); any movement, any failure
//! brings the interval back at the next capture, and burst mode never backs off.

use super::{CaptureRecord, Collector, RecordKind};

/// The idle back-off `collect` uses unless told otherwise, as a multiple of the interval.
pub const IDLE_BACKOFF: u32 = 4;

/// What the heap looked like at a capture, to tell whether it moved since.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct HeapMark {
    inuse: Option<u64>,
    memory: Option<u64>,
}

impl Collector<'_> {
    /// After a heap capture: an idle target (in-use heap and memory within 1 MiB or 2 % of
    /// where they were when the heap last moved) is asked less and less often, up to
    /// `idle_backoff` times the interval; any movement brings the interval back at once.
    /// Envoy is paced by its own rule.
    pub(super) fn pace_idle(&mut self, record: &CaptureRecord) {
        if self.source.kind() == "envoy" || record.kind != RecordKind::Heap {
            return;
        }
        // A target that fails is in trouble, not idle: its last live moments matter most.
        if !record.is_ok() {
            self.idle_factor = 1;
            return;
        }
        let mark = HeapMark {
            inuse: record.totals.get("inuse_space").map(|&b| b.max(0) as u64),
            memory: self.memory_now(),
        };
        // Measured against the capture the flat stretch began with, so a slow leak adds up
        // to a move instead of hiding under the threshold step by step. The threshold keeps
        // the GCs our own profiling causes (a few hundred KiB of profile-writer buffers
        // coming and going) from counting as movement.
        let flat = self.last_heap.is_some_and(|anchor| {
            !moved(anchor.inuse, mark.inuse) && !moved(anchor.memory, mark.memory)
        });
        if flat {
            self.idle_factor = (self.idle_factor * 2).min(self.config.idle_backoff.max(1));
        } else {
            self.idle_factor = 1;
            self.last_heap = Some(mark);
        }
    }
}

/// Whether memory seen between two captures moved: by more than 1 MiB and 2 %.
fn moved(before: Option<u64>, now: Option<u64>) -> bool {
    match (before, now) {
        (Some(a), Some(b)) => {
            let change = a.abs_diff(b);
            change > 1 << 20 && change as f64 > 0.02 * a.max(b) as f64
        }
        (None, None) => false,
        _ => true,
    }
}
