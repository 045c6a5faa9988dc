//! A life killed at its limit whose published heap stood still is not one whose heap "held":
//! the profile is published only as a GC finishes, and at the limit the GC finishes late or
//! not at all, while the runtime's own figures go on counting. When they stood above the
//! band near the episode's top at the death (MemStats `HeapAlloc` read after the episode's end,
//! else the last capture's published heap plus `recent_space`, allocated since with frees not
//! yet known) and the heap so counted filled half the limit or more, the rise went on into the
//! death: the reading is `ongoing`, with those figures beside it (`IntoDeath`). A kill by
//! something else (shared memory, a sibling) beside a heap that held stays "held": its heap
//! never filled the limit. etcd's WAL replay, killed at 256 MiB: 116 MiB published, MemStats
//! `HeapAlloc` 230 MiB, read as "then held … not growing at the end".

use serde::Serialize;

use super::{NEAR_TOP, Reading};
use crate::analyse::growth::CycleGrowth;

/// The heap counted with the limit filled, this share of it at least, is what the limit killed.
const FILLED_SHARE: f64 = 0.5;

/// What the runtime counted at a death at the limit, beyond the last publication.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntoDeath {
    /// Seconds after the cycle's first capture when it was read.
    pub at_s: f64,
    /// The runtime's figure: `HeapAlloc`, or the published heap plus `recent_space`.
    pub heap_bytes: i64,
    /// The heap the last publication showed.
    pub published_bytes: i64,
    /// "MemStats HeapAlloc" or "recent_space".
    pub of: &'static str,
}

/// The runtime's figures at the death of `c`, when it was OOM-killed while its reading says
/// the heap held and those figures say it went on rising (see the module's doc).
pub fn into_death(c: &CycleGrowth, limit: Option<u64>) -> Option<IntoDeath> {
    let r: &Reading = c.reading.as_ref()?;
    let limit = limit? as f64;
    let fell = (r.to_bytes - r.last_bytes) as f64 >= 0.5 * r.rise() as f64;
    if !c.killed || r.ongoing || fell {
        return None;
    }
    let memstats = c
        .memstats
        .as_ref()
        .filter(|m| m.at_s > r.end_s)
        .map(|m| IntoDeath {
            at_s: m.at_s,
            heap_bytes: m.heap_alloc,
            published_bytes: r.last_bytes,
            of: "MemStats HeapAlloc",
        });
    let recent = c.unpublished.as_ref().map(|u| IntoDeath {
        at_s: u.at_s,
        heap_bytes: u.inuse_bytes + u.recent_bytes,
        published_bytes: u.inuse_bytes,
        of: "recent_space",
    });
    let d = memstats.or(recent)?;
    let top = r.to_bytes.max(r.last_bytes) as f64;
    let above_band = d.heap_bytes as f64 > top + NEAR_TOP * r.rise() as f64;
    (above_band && d.heap_bytes as f64 >= FILLED_SHARE * limit).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::ends::CycleEnd;
    use crate::analyse::growth::{MemStatsView, Unpublished};
    use crate::analyse::rules::tests::cycle;

    const MIB: i64 = 1 << 20;
    const LIMIT: Option<u64> = Some(256 << 20);

    /// etcd's second life in the real-server retry of issue 33: its WAL replay published
    /// 4.4 → 113 MiB by 1.3 s, then 110–116 MiB to its OOM kill at 4.0 s, while MemStats read
    /// HeapAlloc 230 MiB at 3.9 s. It read "then held (116 MiB at the last capture, 2.1 s after
    /// the peak): not growing at the end".
    fn replay_killed_at_its_limit() -> CycleGrowth {
        let mut c = cycle(2, 80.0, Some(4.0));
        c.end = CycleEnd::OomKilled;
        c.killed = true;
        let r = c.reading.as_mut().unwrap();
        (r.onset_s, r.end_s, r.from_bytes, r.to_bytes) = (1.2, 1.3, 4 * MIB, 113 * MIB);
        (r.ongoing, r.held_s, r.last_bytes) = (false, Some(2.1), 116 * MIB);
        c.memstats = Some(MemStatsView {
            at_s: 3.9,
            heap_alloc: 230 * MIB,
            live_share: None,
            held_not_returned: None,
            gc_per_sec: None,
        });
        c.unpublished = Some(Unpublished {
            seq: 87,
            file: None,
            at_s: 3.95,
            inuse_bytes: 116 * MIB,
            recent_bytes: 223 * MIB,
        });
        c
    }

    #[test]
    fn a_life_killed_at_its_limit_while_the_runtime_counted_on_did_not_hold() {
        let c = replay_killed_at_its_limit();
        let d = into_death(&c, LIMIT).expect("rose into its death");
        assert_eq!(
            d,
            IntoDeath {
                at_s: 3.9,
                heap_bytes: 230 * MIB,
                published_bytes: 116 * MIB,
                of: "MemStats HeapAlloc",
            }
        );
        // Without MemStats read after the peak, what the last capture saw allocated since.
        let mut c = replay_killed_at_its_limit();
        c.memstats.as_mut().unwrap().at_s = 0.2;
        let d = into_death(&c, LIMIT).unwrap();
        assert_eq!(
            (d.of, d.heap_bytes, d.at_s),
            ("recent_space", 339 * MIB, 3.95)
        );
    }

    #[test]
    fn a_heap_that_held_stays_held_when_it_did_not_fill_the_limit_or_the_life_was_not_killed() {
        // Killed by something else (shared memory filled the limit): HeapAlloc 90 MiB beside a
        // 60 MiB heap, within its GC's headroom and far from the limit.
        let mut c = replay_killed_at_its_limit();
        let r = c.reading.as_mut().unwrap();
        (r.to_bytes, r.last_bytes) = (60 * MIB, 60 * MIB);
        c.memstats.as_mut().unwrap().heap_alloc = 90 * MIB;
        c.unpublished = None;
        assert_eq!(into_death(&c, LIMIT), None);
        // Stopped by the collector, not killed.
        let mut c = replay_killed_at_its_limit();
        (c.end, c.killed) = (CycleEnd::CollectorStopped, false);
        assert_eq!(into_death(&c, LIMIT), None);
        // The runtime's figure within the band near the top: it held.
        let mut c = replay_killed_at_its_limit();
        c.memstats.as_mut().unwrap().heap_alloc = 130 * MIB;
        c.unpublished = None;
        assert_eq!(into_death(&c, LIMIT), None);
    }

    /// The whole way, as `heapwatch growth` words the verdict of that life.
    #[test]
    fn its_verdict_says_it_rose_into_its_death_and_what_the_runtime_counted() {
        let mut c = replay_killed_at_its_limit();
        let d = into_death(&c, LIMIT).unwrap();
        let r = c.reading.as_mut().unwrap();
        (r.ongoing, r.held_s, r.into_death) = (true, None, Some(d));
        let words = crate::render::verdict::reading_words(r, LIMIT);
        assert!(!words.contains("held"), "{words}");
        assert!(
            words.starts_with("in-use heap grew ")
                && words.ends_with(
                    ", still rising at its death at the limit: the runtime counted 230 MiB \
                     (MemStats HeapAlloc at 3.9 s) against 116 MiB in the last published profile"
                ),
            "{words}"
        );
    }
}
