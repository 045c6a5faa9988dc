//! Boot cycles: a new one starts when the target comes back after being gone, when its pid
//! changes, or when a cumulative allocation total drops (only a new process starts lower).
//!
//! The collector's bookkeeping beside the tracker (`Collector::answered`, `Collector::failed`):
//! a good reply ends the target's absence and may open a new cycle, which forgets what belonged
//! to the process before it (the last capture stored, so no duplicate spans two processes; its
//! runtime figure; the idle back-off); a failure starts the absence `--until-exit` counts, and
//! one that means the target is gone clears what the status line shows of it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Collector;
use crate::source::{FailureKind, FetchError};
use crate::store::CaptureRecord;

/// Totals that only grow during one process's life.
const CUMULATIVE: &[&str] = &[
    "alloc_space",
    "alloc_objects",
    "TotalAlloc",
    "Mallocs",
    "server.uptime",
];

#[derive(Debug, Default)]
pub struct CycleTracker {
    current: u32,
    last: BTreeMap<&'static str, i64>,
    last_pid: Option<u32>,
    gone_seen: bool,
    /// The boot cycle each recent pid answered in, for ends reported late.
    pid_cycles: BTreeMap<u32, u32>,
    /// The pid names one process (the proc source checks its start time): the same pid never
    /// seen gone is the same process, whatever its totals do.
    pid_is_process: bool,
    /// A cycle whose answers named no process, not yet ended by an `exit` told with a pid.
    unclaimed: Option<u32>,
}

/// How many pids `pid_cycles` remembers.
const PIDS_REMEMBERED: usize = 64;

impl CycleTracker {
    /// Continues the numbering of an existing run.
    pub fn resume(records: &[CaptureRecord]) -> CycleTracker {
        let mut tracker = CycleTracker::default();
        for r in records.iter().filter(|r| r.is_ok() && !r.totals.is_empty()) {
            tracker.current = tracker.current.max(r.cycle);
            tracker.remember(&r.totals, r.pid);
        }
        tracker.current = records
            .iter()
            .map(|r| r.cycle)
            .max()
            .unwrap_or(0)
            .max(tracker.current);
        tracker
    }

    /// The current boot cycle; 0 before the target first answered.
    pub fn current(&self) -> u32 {
        self.current.max(1)
    }

    /// The process of the latest answer that named one.
    pub fn pid(&self) -> Option<u32> {
        self.last_pid
    }

    pub fn failed(&mut self, kind: FailureKind) {
        if kind.means_gone() {
            self.gone_seen = true;
        }
    }

    /// The target answered with these totals; returns the boot cycle the answer belongs to.
    pub fn answered(&mut self, totals: &BTreeMap<String, i64>, pid: Option<u32>) -> u32 {
        if self.current == 0 {
            self.current = 1;
        } else if self.restarted(totals, pid) {
            self.current += 1;
            self.last.clear();
        }
        self.gone_seen = false;
        self.remember(totals, pid);
        if pid.is_none() && self.last_pid.is_none() {
            self.unclaimed = Some(self.current);
        }
        self.current
    }

    /// A process the target's owner saw end (`heapwatch run`): returns the boot cycle its end
    /// belongs to. A pid that answered in this cycle ended it; one that never answered was a
    /// cycle of its own, counted so the next answer opens the one after.
    /// A source whose answers name no process (HTTP beside `heapwatch run`) cannot match the
    /// pid: an end while the current cycle's answers named none and the target was not yet seen
    /// gone ends the current cycle.
    pub fn ended(&mut self, pid: Option<u32>) -> u32 {
        // The current cycle's answers named no process and no end has claimed it yet (the
        // target may have been seen gone first: a refusal often comes before the news).
        let anonymous = self
            .unclaimed
            .take()
            .filter(|&c| c == self.current && c > 0);
        let cycle = match pid {
            None => (self.current > 0).then_some(self.current),
            Some(p) => self.pid_cycles.get(&p).copied().or(anonymous),
        };
        match cycle {
            // A successor that already answered keeps its cycle.
            Some(c) if c < self.current => c,
            Some(c) => {
                self.gone_seen = true;
                c
            }
            None => {
                self.current += 1;
                self.last.clear();
                self.gone_seen = true;
                self.current
            }
        }
    }

    /// Says that a pid names one process for the life of this tracker's source.
    pub fn pid_is_process(mut self, yes: bool) -> CycleTracker {
        self.pid_is_process = yes;
        self
    }

    fn restarted(&self, totals: &BTreeMap<String, i64>, pid: Option<u32>) -> bool {
        if self.gone_seen {
            return true;
        }
        if let (Some(a), Some(b)) = (self.last_pid, pid) {
            if a != b {
                return true;
            }
            // Read from outside (proc:), a profile before the first GC sums every cycle as
            // MemProfile would, and the first GC publishes fewer of them: a drop from the
            // same process. (An agent's pid can stay while what answers changes: a replay.)
            if self.pid_is_process {
                return false;
            }
        }
        CUMULATIVE
            .iter()
            .any(|key| match (self.last.get(key), totals.get(*key)) {
                (Some(&before), Some(&now)) => now < before,
                _ => false,
            })
    }

    fn remember(&mut self, totals: &BTreeMap<String, i64>, pid: Option<u32>) {
        for key in CUMULATIVE {
            if let Some(&v) = totals.get(*key) {
                self.last.insert(key, v);
            }
        }
        if let Some(p) = pid {
            self.last_pid = pid;
            if self.pid_cycles.len() >= PIDS_REMEMBERED && !self.pid_cycles.contains_key(&p) {
                let oldest = self
                    .pid_cycles
                    .iter()
                    .min_by_key(|(_, c)| **c)
                    .map(|(p, _)| *p);
                if let Some(o) = oldest {
                    self.pid_cycles.remove(&o);
                }
            }
            self.pid_cycles.insert(p, self.current);
        }
    }
}

impl Collector {
    pub(super) fn failed(&mut self, record: &mut CaptureRecord, e: &FetchError, began: Duration) {
        record.error = Some(e.message.clone());
        record.error_kind = Some(e.kind.as_str().to_string());
        // An HTTP status is an answer: the target is there (Envoy's 501 for /heap_dump).
        if self.failing_since.is_none() && e.kind != FailureKind::Status {
            self.failing_since = Some(began);
        }
        if self.gone_since.is_none() && e.kind.means_gone() {
            self.gone_since = Some(began);
        }
        if e.kind.means_gone() {
            // The figures of a process that is no more are not shown as current.
            self.status.target_gone();
            self.runtime_memory = None;
        }
        self.cycles.failed(e.kind);
        self.status.last_error = Some(e.message.clone());
        self.summary.last_error = Some(e.message.clone());
        if matches!(
            e.kind,
            FailureKind::Status | FailureKind::Other | FailureKind::TooLarge
        ) {
            self.summary.responded = true;
        }
    }

    /// The target answered: bookkeeping common to every good reply. Returns the boot cycle.
    pub(super) fn answered(&mut self, totals: &BTreeMap<String, i64>, pid: Option<u32>) -> u32 {
        self.failing_since = None;
        self.gone_since = None;
        self.summary.reached = true;
        let before = self.cycles.current();
        let now = self.cycles.answered(totals, pid);
        if now != before {
            self.last_stored.clear();
            self.runtime_memory = None;
            self.last_heap = None;
            self.idle_factor = 1;
            self.status.new_cycle(now);
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(alloc: i64) -> BTreeMap<String, i64> {
        BTreeMap::from([
            ("alloc_space".to_string(), alloc),
            ("inuse_space".to_string(), 5),
        ])
    }

    #[test]
    fn a_drop_in_cumulative_allocation_is_a_new_process() {
        let mut t = CycleTracker::default();
        assert_eq!(t.answered(&totals(100), None), 1);
        assert_eq!(t.answered(&totals(200), None), 1);
        assert_eq!(t.answered(&totals(50), None), 2);
        assert_eq!(t.answered(&totals(60), None), 2);
    }

    #[test]
    fn coming_back_after_refused_connections_is_a_new_cycle_but_a_timeout_is_not() {
        let mut t = CycleTracker::default();
        t.answered(&totals(100), None);
        t.failed(FailureKind::Timeout);
        assert_eq!(t.answered(&totals(300), None), 1);
        t.failed(FailureKind::Refused);
        assert_eq!(t.answered(&totals(900), None), 2);
    }

    #[test]
    fn an_end_belongs_to_the_cycle_of_its_pid_and_an_unseen_process_is_a_cycle_of_its_own() {
        let mut t = CycleTracker::default();
        assert_eq!(t.ended(Some(7)), 1, "died before it ever answered");
        assert_eq!(t.answered(&totals(100), Some(8)), 2);
        assert_eq!(t.ended(Some(8)), 2);
        // The same pid again after an end is a new process.
        assert_eq!(t.answered(&totals(900), Some(8)), 3);
        assert_eq!(t.ended(Some(9)), 4);
        assert_eq!(t.answered(&totals(50), Some(10)), 5);
    }

    #[test]
    fn ends_told_with_a_pid_to_a_source_whose_answers_name_none_end_the_current_cycle() {
        let mut t = CycleTracker::default();
        assert_eq!(t.answered(&totals(100), None), 1);
        // Seen gone before the news of the end came: still this cycle's end.
        t.failed(FailureKind::Refused);
        assert_eq!(t.ended(Some(7)), 1);
        assert_eq!(t.answered(&totals(50), None), 2);
        assert_eq!(t.ended(Some(8)), 2);
        // A process that died before this source ever heard from it is a cycle of its own.
        assert_eq!(t.ended(Some(9)), 3);
        assert_eq!(t.answered(&totals(40), None), 4);
    }

    #[test]
    fn a_drop_from_the_same_pid_never_seen_gone_is_the_same_process() {
        let mut other = CycleTracker::default();
        other.answered(&totals(500), Some(10));
        assert_eq!(
            other.answered(&totals(300), Some(10)),
            2,
            "an agent's pid: the drop decides"
        );
        let mut t = CycleTracker::default().pid_is_process(true);
        t.answered(&totals(500), Some(10));
        assert_eq!(t.answered(&totals(300), Some(10)), 1);
        assert_eq!(
            t.answered(&totals(200), None),
            2,
            "no pid: the drop decides"
        );
    }

    #[test]
    fn a_new_pid_is_a_new_cycle() {
        let mut t = CycleTracker::default();
        t.answered(&totals(100), Some(10));
        assert_eq!(t.answered(&totals(200), Some(11)), 2);
    }
}
