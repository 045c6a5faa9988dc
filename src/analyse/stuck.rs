//! Whether a process was stuck at its limit: over the cgroup's longest stretch there, its
//! memory pinned while something shows a stall: the kernel holding pages under writeback
//! through most of it, allocation going on with no GC publishing it (the published heap the
//! same capture after capture), or every task stalled on memory. A heap that only stood still
//! is no stall (an idle process, or one busy rereading its files, shows it too).

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
}

impl Stuck {
    pub fn heap_unmoved(&self) -> bool {
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
    let rise = |v: &[i64]| {
        let first = *v.first()?;
        u64::try_from(v.iter().max()? - first).ok()
    };
    let total_alloc: Vec<i64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats && r.is_ok() && within(r.t_ms))
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
}
