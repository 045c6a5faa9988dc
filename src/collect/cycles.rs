//! Boot cycles: a new one starts when the target comes back after being gone, when its pid
//! changes, or when a cumulative allocation total drops (only a new process starts lower).

use std::collections::BTreeMap;

use crate::source::FailureKind;
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
    incarnation: u32,
    last: BTreeMap<&'static str, i64>,
    last_pid: Option<u32>,
    gone_seen: bool,
}

impl CycleTracker {
    /// Continues the numbering of an existing run.
    pub fn resume(records: &[CaptureRecord]) -> CycleTracker {
        let mut tracker = CycleTracker::default();
        for r in records.iter().filter(|r| r.is_ok() && !r.totals.is_empty()) {
            tracker.incarnation = tracker.incarnation.max(r.incarnation);
            tracker.remember(&r.totals, r.pid);
        }
        tracker.incarnation = records
            .iter()
            .map(|r| r.incarnation)
            .max()
            .unwrap_or(0)
            .max(tracker.incarnation);
        tracker
    }

    /// The current boot cycle; 0 before the target first answered.
    pub fn incarnation(&self) -> u32 {
        self.incarnation.max(1)
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
        if self.incarnation == 0 {
            self.incarnation = 1;
        } else if self.restarted(totals, pid) {
            self.incarnation += 1;
            self.last.clear();
        }
        self.gone_seen = false;
        self.remember(totals, pid);
        self.incarnation
    }

    fn restarted(&self, totals: &BTreeMap<String, i64>, pid: Option<u32>) -> bool {
        if self.gone_seen {
            return true;
        }
        if let (Some(a), Some(b)) = (self.last_pid, pid) {
            if a != b {
                return true;
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
        if pid.is_some() {
            self.last_pid = pid;
        }
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
    fn a_new_pid_is_a_new_cycle() {
        let mut t = CycleTracker::default();
        t.answered(&totals(100), Some(10));
        assert_eq!(t.answered(&totals(200), Some(11)), 2);
    }
}
