//! Which boot cycle a memory sample belongs to. Where the process is watched by pid, a sample
//! of the new process belongs to the new cycle even before its first capture (a controller's
//! agent opens only after its migration, and that migration is the new cycle's memory); else
//! the cycle whose time it falls in, from its first capture to the next cycle's first.

use crate::model::capture::CaptureRecord;
use crate::model::memory::MemorySample;

/// One boot cycle's bounds as the samples are assigned to them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleSpan {
    pub index: u32,
    /// Unix ms of its first capture.
    pub start_ms: i64,
    pub pid: Option<u32>,
}

/// The cycle a sample belongs to; `spans` in start order. Samples before the first cycle's
/// start belong to it (the process before it answered); `None` only without cycles.
pub fn cycle_of_sample(m: &MemorySample, spans: &[CycleSpan]) -> Option<u32> {
    if let Some(pid) = m.pid {
        let mut owners = spans.iter().filter(|s| s.pid == Some(pid));
        if let (Some(owner), None) = (owners.next(), owners.next()) {
            return Some(owner.index);
        }
    }
    spans
        .iter()
        .rev()
        .find(|s| s.start_ms <= m.t_ms)
        .or(spans.first())
        .map(|s| s.index)
}

/// The bounds of each cycle: its first good capture, and its process: the pid its source
/// recorded, else the one pid the memory samples saw while the cycle answered (a cgroup or a
/// followed process names it), so that a new process's samples open its own cycle.
pub fn cycle_spans(
    records: &[CaptureRecord],
    indices: &[u32],
    recorded_pid: impl Fn(u32) -> Option<u32>,
    memory: &[MemorySample],
) -> Vec<CycleSpan> {
    indices
        .iter()
        .filter_map(|&index| {
            let good = || {
                records
                    .iter()
                    .filter(move |r| r.cycle == index && r.is_ok() && !r.kind.is_event())
                    .map(|r| r.t_ms)
            };
            let (start_ms, last_ms) = (good().min()?, good().max()?);
            let pid = recorded_pid(index).or_else(|| {
                let mut seen = memory
                    .iter()
                    .filter(|m| m.alive && m.t_ms >= start_ms && m.t_ms <= last_ms)
                    .filter_map(|m| m.pid);
                let first = seen.next()?;
                seen.all(|p| p == first).then_some(first)
            });
            Some(CycleSpan {
                index,
                start_ms,
                pid,
            })
        })
        .collect()
}

/// The samples of cycle `index`, in time order.
pub fn cycle_memory<'m>(
    memory: &'m [MemorySample],
    spans: &[CycleSpan],
    index: u32,
) -> Vec<&'m MemorySample> {
    memory
        .iter()
        .filter(|m| cycle_of_sample(m, spans) == Some(index))
        .collect()
}

/// Splits a time series where a gap is far longer than its usual spacing (and over a second),
/// so that a chart draws no straight line across a stretch with no data.
pub fn segments(points: &[(f64, f64)]) -> Vec<&[(f64, f64)]> {
    if points.len() < 3 {
        return vec![points];
    }
    let mut gaps: Vec<f64> = points.windows(2).map(|w| w[1].0 - w[0].0).collect();
    gaps.sort_by(f64::total_cmp);
    let usual = gaps[gaps.len() / 2];
    let bar = (5.0 * usual).max(1.0);
    let mut out = Vec::new();
    let mut from = 0;
    for i in 1..points.len() {
        if points[i].0 - points[i - 1].0 > bar {
            out.push(&points[from..i]);
            from = i;
        }
    }
    out.push(&points[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64, pid: Option<u32>) -> MemorySample {
        MemorySample {
            t_ms,
            pid,
            alive: true,
            ..MemorySample::default()
        }
    }

    #[test]
    fn samples_of_the_new_process_before_its_first_capture_belong_to_the_new_cycle() {
        let spans = [
            CycleSpan {
                index: 1,
                start_ms: 0,
                pid: Some(100),
            },
            CycleSpan {
                index: 2,
                start_ms: 10_000,
                pid: Some(200),
            },
        ];
        // Cycle 1's process is gone at 6 s; the new one runs from 7 s but answers at 10 s.
        assert_eq!(cycle_of_sample(&sample(5_000, Some(100)), &spans), Some(1));
        assert_eq!(cycle_of_sample(&sample(7_000, Some(200)), &spans), Some(2));
        // Without a pid, time decides.
        assert_eq!(cycle_of_sample(&sample(7_000, None), &spans), Some(1));
        assert_eq!(cycle_of_sample(&sample(-500, None), &spans), Some(1));
        assert_eq!(cycle_of_sample(&sample(12_000, Some(999)), &spans), Some(2));
    }

    #[test]
    fn a_long_gap_splits_a_series_and_a_steady_one_stays_whole() {
        let mut points: Vec<(f64, f64)> = (0..10).map(|i| (i as f64 * 0.5, 1.0)).collect();
        assert_eq!(segments(&points).len(), 1);
        // Nine minutes without data.
        points.extend((0..5).map(|i| (545.0 + i as f64 * 0.5, 2.0)));
        let parts = segments(&points);
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].len(), parts[1].len()), (10, 5));
    }
}
