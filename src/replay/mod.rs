//! A recorded run played back as a live target: the timeline of when the recorded process
//! was alive and what it would have served at each moment. Pure; `server` does the I/O.

mod agent;
mod carry;
mod conn;
pub mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::store::{CaptureRecord, RecordKind, RunDir};

pub use carry::{carry_memory_over, note_recording_ended};

/// One boot cycle of the recording: alive from `start_ms` to `end_ms` (offsets from the
/// recording's first capture), with its captures in time order.
#[derive(Debug, Clone)]
pub struct BootCycle {
    /// The boot cycle's number in the recording, from 1.
    pub index: u32,
    pub start_ms: i64,
    pub end_ms: i64,
    pub heap: Vec<(i64, PathBuf)>,
    pub goroutine: Vec<(i64, PathBuf)>,
    pub memstats: Vec<(i64, BTreeMap<String, i64>)>,
    /// The agent's runtime counts (goroutines, threads, …), when recorded over the agent.
    pub stats: Vec<(i64, BTreeMap<String, i64>)>,
}

#[derive(Debug, Clone)]
pub struct Timeline {
    pub cycles: Vec<BootCycle>,
}

/// What the target is at a moment of the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Serving this cycle.
    Alive(usize),
    /// Between cycles (or before the first): nothing listens.
    Dead,
    /// After the last cycle.
    Over,
}

/// Why a run cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{}: the run has no successful capture to replay", .0.display())]
    NoGoodCapture(PathBuf),
    #[error("{}: no stored heap profile to replay", .0.display())]
    NoHeapProfile(PathBuf),
}

impl Timeline {
    /// Builds the timeline from a run. A cycle lasts from its first good capture until the first
    /// failed attempt after its last good one (or its last capture plus one interval).
    pub fn from_run(run: &RunDir) -> Result<Timeline, ReplayError> {
        let records: Vec<&CaptureRecord> = run
            .manifest
            .records
            .iter()
            .filter(|r| !r.kind.is_event())
            .collect();
        let origin = records
            .iter()
            .filter(|r| r.is_ok())
            .map(|r| r.t_ms)
            .min()
            .ok_or_else(|| ReplayError::NoGoodCapture(run.root.clone()))?;
        let mut cycles: Vec<BootCycle> = Vec::new();
        let mut by_cycle: BTreeMap<u32, Vec<&CaptureRecord>> = BTreeMap::new();
        for r in &records {
            by_cycle.entry(r.cycle).or_default().push(r);
        }
        for (index, mut rs) in by_cycle {
            rs.sort_by_key(|r| r.seq);
            let good: Vec<&&CaptureRecord> = rs.iter().filter(|r| r.is_ok()).collect();
            let (Some(first), Some(last)) = (good.first(), good.last()) else {
                continue;
            };
            let interval = last
                .interval_ms
                .unwrap_or(crate::model::run_options::DEFAULT_INTERVAL_MS)
                as i64;
            let died = rs
                .iter()
                .filter(|r| !r.is_ok() && r.seq > last.seq)
                .map(|r| r.t_ms)
                .min()
                .unwrap_or(last.t_ms + interval);
            let mut cycle = BootCycle {
                index,
                start_ms: first.t_ms - origin,
                end_ms: died - origin,
                heap: Vec::new(),
                goroutine: Vec::new(),
                memstats: Vec::new(),
                stats: Vec::new(),
            };
            for r in good {
                let at = r.t_ms - origin;
                match r.kind {
                    RecordKind::Heap | RecordKind::Goroutine => {
                        let Some(path) = run.file_path(r) else {
                            continue;
                        };
                        if !path.is_file() {
                            continue; // thinned by --max-disk
                        }
                        if r.kind == RecordKind::Heap {
                            cycle.heap.push((at, path));
                        } else {
                            cycle.goroutine.push((at, path));
                        }
                    }
                    RecordKind::Memstats => cycle.memstats.push((at, r.totals.clone())),
                    RecordKind::Stats => cycle.stats.push((at, r.totals.clone())),
                    _ => {}
                }
            }
            if !cycle.heap.is_empty() {
                cycles.push(cycle);
            }
        }
        if cycles.is_empty() {
            return Err(ReplayError::NoHeapProfile(run.root.clone()));
        }
        Ok(Timeline { cycles })
    }

    pub fn state(&self, at_ms: i64) -> State {
        for (i, cycle) in self.cycles.iter().enumerate() {
            if at_ms < cycle.start_ms {
                return State::Dead;
            }
            if at_ms < cycle.end_ms {
                return State::Alive(i);
            }
        }
        State::Over
    }

    /// When the state next changes after `at_ms`.
    pub fn next_change(&self, at_ms: i64) -> Option<i64> {
        self.cycles
            .iter()
            .flat_map(|l| [l.start_ms, l.end_ms])
            .filter(|&t| t > at_ms)
            .min()
    }
}

/// The newest entry at or before `at_ms`, else the first.
pub fn latest<T>(entries: &[(i64, T)], at_ms: i64) -> Option<&T> {
    let i = entries.partition_point(|(t, _)| *t <= at_ms);
    entries.get(i.saturating_sub(1)).map(|(_, v)| v)
}

/// A debug=1 heap reply carrying only the MemStats block, which is all the collector reads.
pub fn memstats_text(stats: &BTreeMap<String, i64>) -> String {
    let mut out = String::from("heap profile: 0: 0 [0: 0] @ heap/524288\n\n# runtime.MemStats\n");
    for (key, value) in stats {
        if key.ends_with("PPM") {
            continue;
        }
        out.push_str(&format!("# {key} = {value}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_picks_the_newest_at_or_before() {
        let entries = vec![(0, 'a'), (500, 'b'), (1000, 'c')];
        assert_eq!(latest(&entries, -5), Some(&'a'));
        assert_eq!(latest(&entries, 499), Some(&'a'));
        assert_eq!(latest(&entries, 500), Some(&'b'));
        assert_eq!(latest(&entries, 9999), Some(&'c'));
    }
}
