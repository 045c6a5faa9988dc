//! Whether a process was stuck at its limit: over the cgroup's longest stretch there, its
//! memory pinned while something shows a stall: the kernel holding pages under writeback
//! through most of it, allocation going on with no GC publishing it (the published heap the
//! same capture after capture), or every task stalled on memory. A heap that only stood still
//! is no stall (an idle process, or one busy rereading its files, shows it too).
//!
//! "No GC finished" is read from the runtime's own GC count where the heap captures carry it
//! (`CaptureRecord::gc`, the `proc:` source): the stall is the longest run of captures showing
//! one count, when it spans half the stretch or more while allocation went on (`recent_space`
//! over that run). GCs finishing through the stretch are no stall, however many captures
//! between two of them repeat one publication: a 100 ms burst between GCs 1.7 s apart repeats
//! each one 17 times (etcd leaking 1.7 MiB/s at its limit, page cache reclaimed as the heap
//! grew: 19 GCs finished, the published heap 61 → 112 MiB). Without the count, a published heap
//! the same in most captures while allocation went on is the sign.

use serde::Serialize;

use super::breakdown::AtLimit;
use crate::model::capture::{CaptureRecord, RecordKind};
use crate::model::memory::MemorySample;

/// A stretch shorter than this is the moment before a kill, not a process stuck.
const MIN_STRETCH_S: f64 = 2.0;
/// Heap captures over the stretch needed to say the heap did not move, and the share of them
/// that must repeat the one before.
const MIN_CAPTURES: usize = 5;
const UNCHANGED_SHARE: f64 = 0.8;
/// With the runtime's GC count: no GC finished over at least this share of the stretch.
const NO_GC_SHARE: f64 = 0.5;
/// Allocation without a new publication worth naming: GCs did not finish while it went on.
const MIN_ALLOCATED: u64 = 4 << 20;
/// Under writeback at least this (and a 32nd of the limit)...
const MIN_WRITEBACK: u64 = 16 << 20;
/// ...in this share of the stretch's samples: the kernel stalled writing, not a flush that
/// passed (a file written, synced, then read again).
const WRITEBACK_SHARE: f64 = 0.5;
/// All tasks stalled on memory this share of the last 10 s (PSI `full`, cgroup v2).
const MIN_PSI_FULL: f64 = 40.0;

/// A stretch at the limit with nothing moving, and what showed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stuck {
    /// Seconds since the cycle's first capture, and how long: the stretch at the limit.
    pub since_s: f64,
    pub for_s: f64,
    /// The least and most usage sampled over it.
    pub usage_low: u64,
    pub usage_high: u64,
    pub limit: u64,
    /// Heap captures over it, and those whose published heap was the one before's (byte for
    /// byte, `dup_of`, or the same totals).
    pub captures: usize,
    pub unchanged: usize,
    /// Allocated meanwhile without a new publication, and where that was read
    /// (`recent_space` of `proc:` captures, else MemStats `TotalAlloc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_from: Option<&'static str>,
    /// The most under writeback, and dirty, that its samples saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writeback: Option<u64>,
    /// The share of its samples (those with `memory.stat`) with much under writeback.
    pub writeback_share: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty: Option<u64>,
    /// The highest PSI `full` avg10 (cgroup v2): the share of time every task stalled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi_full: Option<f64>,
    /// Where every heap capture over the stretch carried the runtime's GC count: the longest
    /// run in which none finished. `allocated` is then what was allocated over that run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_gc: Option<NoGc>,
}

/// The longest run of a stretch's captures that showed one GC count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoGc {
    /// The runtime's count (`num_gc`) over the run.
    pub num_gc: u32,
    /// Seconds since the cycle's first capture: its first and last capture.
    pub from_s: f64,
    pub to_s: f64,
    /// GCs finished over the whole stretch.
    pub finished: u32,
}

impl NoGc {
    pub fn for_s(&self) -> f64 {
        self.to_s - self.from_s
    }
}

impl Stuck {
    /// No GC published anything new: by the runtime's count where the captures carry it,
    /// else by the published heap repeating itself.
    pub fn heap_unmoved(&self) -> bool {
        if let Some(g) = &self.no_gc {
            return g.for_s() >= NO_GC_SHARE * self.for_s;
        }
        self.captures >= MIN_CAPTURES
            && self.unchanged as f64 >= UNCHANGED_SHARE * self.captures as f64
    }

    pub fn writeback_stall(&self) -> bool {
        self.writeback_share >= WRITEBACK_SHARE
    }

    /// Allocation went on and no GC published it.
    pub fn gc_stall(&self) -> bool {
        self.heap_unmoved() && self.allocated.is_some_and(|a| a >= MIN_ALLOCATED)
    }

    pub fn psi_stall(&self) -> bool {
        self.psi_full.is_some_and(|p| p >= MIN_PSI_FULL)
    }

    pub fn stalled(&self) -> bool {
        self.writeback_stall() || self.gc_stall() || self.psi_stall()
    }
}

/// The cycle's stretch at its limit (`at_limit`), read for a stall. `mem` are the cycle's
/// memory samples, `records` its good captures (heap, duplicates included, and MemStats).
/// `None` when the stretch is short, or nothing in it shows a stall.
pub fn read(
    at_limit: Option<&AtLimit>,
    mem: &[&MemorySample],
    records: &[&CaptureRecord],
    start_ms: i64,
) -> Option<Stuck> {
    let a = at_limit.filter(|a| a.for_s >= MIN_STRETCH_S)?;
    let from = start_ms + (a.since_s * 1000.0).round() as i64;
    let to = from + (a.for_s * 1000.0).round() as i64;
    let within = |t: i64| (from..=to).contains(&t);
    let samples: Vec<&&MemorySample> = mem.iter().filter(|m| within(m.t_ms)).collect();
    let usage: Vec<u64> = samples.iter().filter_map(|m| m.usage).collect();
    let limit = samples.iter().find_map(|m| m.limit)?;
    let most = |f: fn(&MemorySample) -> Option<u64>| samples.iter().filter_map(|m| f(m)).max();
    let mut heap: Vec<&&CaptureRecord> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap && r.is_ok())
        .collect();
    heap.sort_by_key(|r| (r.t_ms, r.seq));
    let figures = |r: &CaptureRecord| {
        (
            r.totals.get("inuse_space").copied(),
            r.totals.get("alloc_space").copied(),
        )
    };
    let mut captures = 0;
    let mut unchanged = 0;
    let mut recent: Vec<i64> = Vec::new();
    for (i, r) in heap.iter().enumerate() {
        if !within(r.t_ms) {
            continue;
        }
        captures += 1;
        let same = r.dup_of.is_some()
            || i.checked_sub(1)
                .is_some_and(|p| figures(heap[p]) == figures(r) && figures(r).0.is_some());
        unchanged += usize::from(same);
        recent.extend(r.totals.get("recent_space").copied());
    }
    let inside: Vec<&CaptureRecord> = heap
        .iter()
        .filter(|r| within(r.t_ms))
        .map(|r| **r)
        .collect();
    let no_gc = longest_without_gc(&inside);
    let secs = |t: i64| (t - start_ms) as f64 / 1000.0;
    // With the count, what was allocated while no GC finished: over that run alone.
    let (from, to) = match &no_gc {
        Some((run, _)) => (run[0].t_ms, run[run.len() - 1].t_ms),
        None => (from, to),
    };
    if let Some((run, _)) = &no_gc {
        recent = run
            .iter()
            .filter_map(|r| r.totals.get("recent_space").copied())
            .collect();
    }
    let rise = |v: &[i64]| {
        let first = *v.first()?;
        u64::try_from(v.iter().max()? - first).ok()
    };
    let total_alloc: Vec<i64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats && r.is_ok() && (from..=to).contains(&r.t_ms))
        .filter_map(|r| r.totals.get("TotalAlloc").copied())
        .collect();
    let (allocated, allocated_from) = match (rise(&recent), rise(&total_alloc)) {
        (Some(r), _) if r > 0 => (Some(r), Some("recent_space")),
        (_, Some(t)) => (Some(t), Some("MemStats TotalAlloc")),
        (Some(r), None) => (Some(r), Some("recent_space")),
        (None, None) => (None, None),
    };
    let mut s = Stuck {
        since_s: a.since_s,
        for_s: a.for_s,
        usage_low: usage.iter().copied().min()?,
        usage_high: usage.iter().copied().max()?,
        limit,
        captures,
        unchanged,
        allocated,
        allocated_from,
        writeback: most(|m| m.cgroup.as_ref()?.file_writeback),
        writeback_share: 0.0,
        dirty: most(|m| m.cgroup.as_ref()?.file_dirty),
        psi_full: samples
            .iter()
            .filter_map(|m| m.cgroup.as_ref()?.psi_full_avg10)
            .reduce(f64::max),
        no_gc: no_gc.map(|(run, finished)| NoGc {
            num_gc: run[0].gc.map_or(0, |g| g.num_gc),
            from_s: secs(run[0].t_ms),
            to_s: secs(run[run.len() - 1].t_ms),
            finished,
        }),
    };
    s.writeback_share = {
        let heavy = MIN_WRITEBACK.max(limit / 32);
        let split: Vec<u64> = samples
            .iter()
            .filter_map(|m| m.cgroup.as_ref()?.file_writeback)
            .collect();
        let many = split.iter().filter(|&&w| w >= heavy).count();
        if split.is_empty() {
            0.0
        } else {
            many as f64 / split.len() as f64
        }
    };
    s.stalled().then_some(s)
}

/// The longest run of `heap` (time order) showing one GC count, and how many GCs finished over
/// all of it; `None` unless every capture carries the count.
fn longest_without_gc<'a>(heap: &[&'a CaptureRecord]) -> Option<(Vec<&'a CaptureRecord>, u32)> {
    let counts: Vec<u32> = heap
        .iter()
        .map(|r| r.gc.map(|g| g.num_gc))
        .collect::<Option<_>>()?;
    let finished = counts.last()?.saturating_sub(*counts.first()?);
    let run = heap
        .chunk_by(|a, b| a.gc.map(|g| g.num_gc) == b.gc.map(|g| g.num_gc))
        .max_by_key(|run| run[run.len() - 1].t_ms - run[0].t_ms)?;
    Some((run.to_vec(), finished))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::memory::CgroupBreakdown;

    const MIB: u64 = 1 << 20;

    pub(crate) fn pinned(t_ms: i64, usage: u64, writeback: u64) -> MemorySample {
        MemorySample {
            t_ms,
            source: "cgroup".into(),
            usage: Some(usage),
            limit: Some(1024 * MIB),
            alive: true,
            cgroup: Some(CgroupBreakdown {
                file_writeback: Some(writeback),
                file_dirty: Some(4 * MIB),
                ..CgroupBreakdown::default()
            }),
            ..MemorySample::default()
        }
    }

    pub(crate) fn heap(seq: u64, t_ms: i64, inuse: i64, dup_of: Option<u64>) -> CaptureRecord {
        let mut r = CaptureRecord::new(seq, RecordKind::Heap, 1, t_ms);
        r.totals.insert("inuse_space".into(), inuse);
        r.totals.insert("alloc_space".into(), inuse * 3);
        r.dup_of = dup_of;
        r
    }

    fn stretch(for_s: f64) -> AtLimit {
        AtLimit {
            since_s: 20.0,
            for_s,
            charge_failures: None,
            killed: false,
            file: None,
            anon: None,
            shmem: None,
        }
    }

    /// OpenZiti 2.1.0 with its disk throttled (issue 33, item 14): 846 MiB under writeback for
    /// 85 s at the limit, 118 of 120 heap captures the same.
    #[test]
    fn a_process_held_at_its_limit_by_writeback_is_stuck() {
        let mut mem = vec![pinned(0, 300 * MIB, 0)];
        let mut records = vec![heap(1, 0, 40 << 20, None)];
        for k in 0..=170 {
            mem.push(pinned(
                20_000 + k * 500,
                (1020 - (k as u64 % 3)) * MIB,
                846 * MIB,
            ));
        }
        for k in 0..120u64 {
            let changed = k == 10 || k == 70;
            let inuse = if k < 10 {
                46
            } else if k < 70 {
                47
            } else {
                48
            };
            let seq = k + 2;
            records.push(heap(
                seq,
                20_000 + k as i64 * 700,
                inuse << 20,
                (!changed && k > 0).then_some(seq - 1),
            ));
        }
        let mref: Vec<&MemorySample> = mem.iter().collect();
        let rref: Vec<&CaptureRecord> = records.iter().collect();
        let s = read(Some(&stretch(85.0)), &mref, &rref, 0).unwrap();
        assert_eq!((s.captures, s.unchanged), (120, 117));
        assert_eq!((s.usage_low, s.usage_high), (1018 * MIB, 1020 * MIB));
        assert_eq!(s.writeback, Some(846 * MIB));
        assert_eq!(s.writeback_share, 1.0);
        assert!(s.stalled() && s.writeback_stall() && s.heap_unmoved());
        assert!(!s.gc_stall(), "no allocation known");
        // A moment at the limit before a kill is not a process stuck.
        assert!(read(Some(&stretch(1.0)), &mref, &rref, 0).is_none());
        assert!(read(None, &mref, &rref, 0).is_none());
    }

    #[test]
    fn allocation_with_no_new_publication_is_a_stall_and_a_moving_heap_is_none() {
        let mem: Vec<MemorySample> = (0..20)
            .map(|k| pinned(20_000 + k * 500, 1020 * MIB, 0))
            .collect();
        let mref: Vec<&MemorySample> = mem.iter().collect();
        // The same publication captured 10 times while recent_space climbs 120 MiB.
        let records: Vec<CaptureRecord> = (0..10)
            .map(|k| {
                let mut r = heap(k + 1, 20_000 + k as i64 * 900, 119 << 20, None);
                r.totals
                    .insert("recent_space".into(), ((k as i64) * 12) << 20);
                r
            })
            .collect();
        let rref: Vec<&CaptureRecord> = records.iter().collect();
        let s = read(Some(&stretch(9.5)), &mref, &rref, 0).unwrap();
        assert_eq!((s.captures, s.unchanged), (10, 9));
        assert_eq!(
            (s.allocated, s.allocated_from),
            (Some(108 * MIB), Some("recent_space"))
        );
        assert!(s.gc_stall() && s.stalled());
        // A heap that moves at every capture, no writeback: nothing to say.
        let moving: Vec<CaptureRecord> = (0..10)
            .map(|k| heap(k + 1, 20_000 + k as i64 * 900, (100 + k as i64) << 20, None))
            .collect();
        let rref: Vec<&CaptureRecord> = moving.iter().collect();
        assert!(read(Some(&stretch(9.5)), &mref, &rref, 0).is_none());
        // An idle process at its limit (or one rereading its files): the heap still, nothing
        // else: no stall.
        let idle: Vec<CaptureRecord> = (0..10)
            .map(|k| heap(k + 1, 20_000 + k as i64 * 900, 100 << 20, None))
            .collect();
        let rref: Vec<&CaptureRecord> = idle.iter().collect();
        assert!(read(Some(&stretch(9.5)), &mref, &rref, 0).is_none());
        // A flush that passed: 96 MiB under writeback in the stretch's first quarter, then
        // reread (the pagecache fixture under `heapwatch run`): no stall.
        let flushed: Vec<MemorySample> = (0..20)
            .map(|k| {
                pinned(
                    20_000 + k * 500,
                    1020 * MIB,
                    if k < 5 { 96 * MIB } else { 0 },
                )
            })
            .collect();
        let fref: Vec<&MemorySample> = flushed.iter().collect();
        assert!(read(Some(&stretch(9.5)), &fref, &rref, 0).is_none());
    }

    /// A proc: capture: the published heap, what was allocated since (`recent_space`) and the
    /// runtime's GC count.
    fn clocked(seq: u64, t_ms: i64, inuse: i64, recent: i64, num_gc: u32) -> CaptureRecord {
        let mut r = heap(seq, t_ms, inuse, None);
        r.totals.insert("recent_space".into(), recent);
        r.gc = Some(crate::model::capture::GcClock {
            num_gc,
            profile_cycle: Some(num_gc),
        });
        r
    }

    /// etcd leaking 1.7 MiB/s at its limit, its page cache reclaimed as the heap grew (the
    /// real-server retry of issue 33): captured every 100 ms, a GC every 1.7 s, each publishing
    /// a heap 1.5 MiB larger. "The published heap the same in 301 of 321 captures … no GC
    /// finished" was said of 19 GCs that finished.
    #[test]
    fn gcs_finishing_by_the_runtimes_count_are_no_stall_however_often_a_publication_repeats() {
        let mem: Vec<MemorySample> = (0..=72)
            .map(|k| pinned(20_000 + k * 500, 1020 * MIB, 0))
            .collect();
        let mref: Vec<&MemorySample> = mem.iter().collect();
        let records: Vec<CaptureRecord> = (0..=360u64)
            .map(|k| {
                let gc = (k / 17) as u32;
                let since = (k % 17) as i64;
                clocked(
                    k + 1,
                    20_000 + k as i64 * 100,
                    (60 << 20) + (gc as i64) * (3 << 19),
                    (60 << 20) + since * (4 << 20),
                    62 + gc,
                )
            })
            .collect();
        let rref: Vec<&CaptureRecord> = records.iter().collect();
        let stretch = stretch(36.0);
        // The captures between two GCs repeat its publication: what the old reading counted.
        let before = Stuck {
            no_gc: None,
            ..stuck_anyway(&stretch, &mref, &rref)
        };
        assert!(before.unchanged >= 300 && before.gc_stall(), "{before:?}");
        assert_eq!(read(Some(&stretch), &mref, &rref, 0), None);
        let s = stuck_anyway(&stretch, &mref, &rref);
        let g = s.no_gc.as_ref().unwrap();
        assert_eq!(g.finished, 21);
        assert!((g.for_s() - 1.6).abs() < 1e-9, "{g:?}");
        assert!(!s.heap_unmoved() && !s.gc_stall());
    }

    /// etcd's WAL replay at its limit (etcd-die, cycle 2): the GC count stood at 89 from 1.4 to
    /// 3.3 s of a 2.6 s stretch while 106 MiB more was allocated, then three GCs finished just
    /// before the kill. The run without a GC is the stall; its allocation is what is said.
    #[test]
    fn a_run_without_a_gc_over_most_of_the_stretch_is_a_stall_by_the_runtimes_count() {
        let mem: Vec<MemorySample> = (0..=6)
            .map(|k| pinned(1_300 + k * 430, 1020 * MIB, 0))
            .collect();
        let mref: Vec<&MemorySample> = mem.iter().collect();
        let mut records = vec![clocked(1, 1_290, 65 << 20, 144 << 20, 88)];
        for k in 0..20u64 {
            let recent = (85 << 20) + k as i64 * (11 << 19);
            records.push(clocked(k + 2, 1_400 + k as i64 * 100, 82 << 20, recent, 89));
        }
        records.push(clocked(30, 3_420, 113 << 20, 190 << 20, 90));
        records.push(clocked(31, 3_750, 116 << 20, 140 << 20, 92));
        let rref: Vec<&CaptureRecord> = records.iter().collect();
        let at = AtLimit {
            since_s: 1.3,
            ..stretch(2.6)
        };
        let s = read(Some(&at), &mref, &rref, 0).expect("stalled");
        let g = s.no_gc.clone().unwrap();
        assert_eq!((g.num_gc, g.finished), (89, 3));
        assert_eq!((g.from_s, g.to_s), (1.4, 3.3));
        assert_eq!(
            (s.allocated, s.allocated_from),
            (Some(104 * MIB + 512 * 1024), Some("recent_space"))
        );
        assert!(s.gc_stall());
        assert_eq!(
            crate::render::stuck::stuck_words(&s),
            "stuck at its limit from 1.3 s for 2.6 s: usage pinned at 1020 MiB of 1.00 GiB; \
             no GC finished for 1.9 s of it (the runtime's count at 89 from 1.4 to 3.3 s) while \
             104 MiB more was allocated (recent_space)"
        );
    }

    /// The stretch read whatever it shows (`read` keeps only a stall).
    fn stuck_anyway(a: &AtLimit, mem: &[&MemorySample], records: &[&CaptureRecord]) -> Stuck {
        let mut wb: Vec<MemorySample> = mem.iter().map(|m| (*m).clone()).collect();
        for m in &mut wb {
            m.cgroup.as_mut().unwrap().file_writeback = Some(900 * MIB);
        }
        let wref: Vec<&MemorySample> = wb.iter().collect();
        read(Some(a), &wref, records, 0).unwrap()
    }
}
