//! The capture loop and its pacing: one request in flight, never more; heap, goroutine and
//! runtime-figure captures each come due on their own clock, and the one due first goes next.
//! Near the limit burst mode shortens the heap interval and the timeout; rendering a profile is
//! kept under the duty cap; goroutine captures are spread by what they cost the target; a slow
//! target delays the next capture rather than piling requests up. The loop ends at the stop,
//! `--duration`, `--until-exit` or a full disk. The idle back-off is `idle.rs`'s, the nudge
//! `clock.rs`'s, the inbox the loop reads at its top `events.rs`'s.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::ahead::Upcoming;
use super::events::Inbox;
use super::{CollectError, CollectSummary, Collector, Nudge, Observer, StopReason};
use crate::source::{SourceKind, Want};

/// Memory of the target seen from outside (RSS or cgroup usage), shared with a sampler thread
/// so burst mode reacts even while the target does not answer. Zero means unknown.
#[derive(Debug, Default)]
pub struct OutsideMemory {
    /// Cgroup usage, else RSS: everything charged, page cache included.
    pub bytes: AtomicU64,
    pub limit: AtomicU64,
    /// The part of `bytes` reclaim cannot take back (anonymous and shared memory), once the
    /// split is known: what burst mode and the time to the limit go by.
    pub killable: AtomicU64,
    /// The process measured.
    pub pid: AtomicU32,
    /// `bytes` is a cgroup's charge (else a process's RSS).
    pub from_cgroup: std::sync::atomic::AtomicBool,
    /// Told by the sampler when `killable` crosses this share of the limit (in thousandths;
    /// zero: never) or jumps by a twentieth of it in one sample, so a collector paced slowly
    /// (`heapwatch watch`'s baseline) bursts at once rather than at its next capture.
    pub nudge_permille: AtomicU32,
    pub nudge: Nudge,
}

struct Task {
    want: Want,
    due: Duration,
}

/// The longest goroutine captures are spread apart by their cost.
pub const GOROUTINE_PACE_MAX: Duration = Duration::from_secs(60);

/// What one kind of capture costs the target: its recent time to answer (rendering a profile
/// is CPU in the target, and a goroutine profile stops the world to walk every stack), as a
/// moving average in which each new capture weighs a quarter.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Cost {
    seconds: Option<f64>,
}

impl Cost {
    pub(super) fn add(&mut self, took: Duration) {
        let new = took.as_secs_f64();
        self.seconds = Some(self.seconds.map_or(new, |o| 0.75 * o + 0.25 * new));
    }

    /// How many times `other` this costs.
    fn ratio_to(&self, other: &Cost) -> Option<f64> {
        Some(self.seconds? / other.seconds?.max(1e-4))
    }
}

impl Collector {
    pub(super) fn limit(&self) -> Option<u64> {
        self.config.limit.or_else(|| {
            let l = self.outside.as_ref()?.limit.load(Ordering::Relaxed);
            (l > 0).then_some(l)
        })
    }

    /// The largest figure known now of the memory that can get the target killed: from
    /// outside, its anonymous memory when the split is known (page cache is reclaimed before
    /// a kill), else RSS or cgroup usage; the latest heap capture's in-use bytes; the latest
    /// MemStats.
    pub(super) fn memory_now(&self) -> Option<u64> {
        let outside = self.outside_now();
        let heap = self.status.heap_inuse.map(|b| b.max(0) as u64);
        [outside, heap, self.runtime_memory]
            .into_iter()
            .flatten()
            .max()
    }

    /// Memory seen from outside (anonymous once the split is known, else usage or RSS).
    pub(super) fn outside_now(&self) -> Option<u64> {
        self.outside.as_ref().and_then(|o| {
            [&o.killable, &o.bytes]
                .into_iter()
                .map(|a| a.load(Ordering::Relaxed))
                .find(|&b| b > 0)
        })
    }

    pub(super) fn bursting(&self) -> bool {
        match (self.limit(), self.memory_now()) {
            (Some(limit), Some(now)) if limit > 0 => {
                now as f64 >= self.config.burst_at * limit as f64
            }
            _ => false,
        }
    }

    pub(super) fn heap_interval(&self) -> Duration {
        if self.bursting() {
            self.config.burst_interval
        } else {
            self.config.interval * self.idle_factor
        }
    }

    /// The time between goroutine captures: `--goroutine-interval` (never under the heap
    /// interval), stretched so goroutine profiles cost the target no more than heap profiles
    /// do: a goroutine capture that takes N times a heap capture's time comes N heap intervals
    /// apart, up to [`GOROUTINE_PACE_MAX`].
    fn goroutine_period(&self) -> Duration {
        let base = self.config.goroutine_interval.max(self.heap_interval());
        let Some(ratio) = self.goroutine_cost.ratio_to(&self.heap_cost) else {
            return base;
        };
        let paced = self.heap_interval().mul_f64(ratio.clamp(1.0, 1e6));
        base.max(paced.min(GOROUTINE_PACE_MAX))
    }

    pub(super) fn timeout(&self) -> Duration {
        if self.bursting() {
            // A long timeout would spend the target's last live moments waiting.
            self.config
                .timeout
                .min((self.config.burst_interval * 4).max(Duration::from_millis(250)))
        } else {
            self.config.timeout
        }
    }

    /// Runs until interrupted, until `duration`, until the target is gone for good
    /// (`until_exit`), or until the disk is full. Requests are paced here; blocking work
    /// (the proc source's walk, every fsync) goes to tokio's blocking pool. The future is
    /// `Send` when the observer is, so each target can be a task of its own.
    pub async fn run_async<O: Observer>(
        mut self,
        mut observer: O,
    ) -> Result<CollectSummary, CollectError> {
        let start = self.clock.now();
        let mut tasks = Vec::new();
        if self.config.heap {
            tasks.push(Task {
                want: Want::Heap,
                due: start,
            });
        }
        let (goroutine, memstats, stats) = {
            let supports = |want| self.source().is_some_and(|s| s.supports(want));
            (
                supports(Want::Goroutine),
                supports(Want::MemStats),
                supports(Want::Stats),
            )
        };
        if self.config.goroutine && goroutine {
            tasks.push(Task {
                want: Want::Goroutine,
                due: start,
            });
        }
        for (want, supported) in [(Want::MemStats, memstats), (Want::Stats, stats)] {
            if !self.config.memstats_interval.is_zero() && supported {
                tasks.push(Task { want, due: start });
            }
        }
        if !self.config.heap && !self.config.goroutine {
            tasks.insert(
                0,
                Task {
                    want: Want::Heap,
                    due: start,
                },
            );
        }
        // Envoy is watched through /memory: it goes first, and heap dumps (a tcmalloc
        // snapshot on Envoy's main thread) come rarely, only while the build serves them.
        let envoy = self.kind == SourceKind::Envoy;
        if envoy {
            tasks.retain(|t| t.want != Want::MemStats);
            tasks.insert(
                0,
                Task {
                    want: Want::MemStats,
                    due: start,
                },
            );
        }
        // While the target is not answering, only the first task (the main profile) probes.
        let probe = tasks[0].want;
        let mut last_began: Option<Duration> = None;
        loop {
            if let Err(e) = self.delete_requested().await {
                if e.is_disk_full() {
                    self.summary.reason = StopReason::DiskFull;
                    self.summary.disk_error = Some(e.to_string());
                    break;
                }
                return Err(e.into());
            }
            if self.nudge.as_ref().is_some_and(Nudge::take) {
                let soonest =
                    last_began.map_or(self.clock.now(), |b| b + self.config.burst_interval);
                for t in tasks
                    .iter_mut()
                    .filter(|t| t.want == probe || t.want == Want::Heap)
                {
                    t.due = t.due.min(soonest);
                }
            }
            self.note_exits().await?;
            let inbox = self.record_events().await;
            for end in std::mem::take(&mut self.ends_to_tell) {
                observer.ended(&end);
            }
            match inbox {
                Ok(Inbox::Ended) => {
                    let now = self.clock.now();
                    for t in tasks.iter_mut().filter(|t| t.want == probe) {
                        t.due = t.due.min(now);
                    }
                }
                Ok(Inbox::Closed) => {
                    self.summary.reason = StopReason::TargetExited;
                    break;
                }
                Ok(Inbox::Quiet) => {}
                Err(e) if e.is_disk_full() => {
                    self.summary.reason = StopReason::DiskFull;
                    self.summary.disk_error = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            }
            // A source still away, with no read ahead holding it, is one a request cut short
            // by the stop kept.
            if self.stop.is_set() || (self.source.is_none() && self.ahead.is_none()) {
                self.summary.reason = StopReason::Interrupted;
                self.stopped().await?;
                break;
            }
            let now = self.clock.now();
            // A capture read ahead was begun before the end: it is stored first.
            if let Some(d) = self.config.duration.filter(|_| self.ahead.is_none()) {
                if now.saturating_sub(start) >= d {
                    self.summary.reason = StopReason::DurationReached;
                    self.stopped().await?;
                    break;
                }
            }
            if let Some(grace) = self.config.until_exit {
                // Gone means refused (or never there): a target frozen at its limit times
                // out for seconds before the kernel kills it, and is still alive.
                let gone_since = self.gone_since.or((!self.summary.reached).then_some(start));
                if let Some(since) = gone_since {
                    if self.summary.attempts > 0 && now.saturating_sub(since) >= grace {
                        self.summary.reason = StopReason::TargetExited;
                        break;
                    }
                }
            }
            let gone = self.failing_since.is_some();
            if let Some(source) = self.source.as_deref() {
                tasks.retain(|t| t.want == probe || source.supports(t.want));
            }
            // A heap read started ahead (`ahead.rs`) is the next capture, whatever came due.
            let reading_ahead = self.ahead.is_some();
            let next = tasks
                .iter_mut()
                .filter(|t| !gone || t.want == probe)
                .filter(|t| !reading_ahead || t.want == Want::Heap)
                .min_by_key(|t| t.due)
                .expect("the probing task is always present");
            if next.due > now && !reading_ahead {
                let mut wake = next.due;
                if let Some(d) = self.config.duration {
                    wake = wake.min(start + d);
                }
                self.sleep_until(wake).await;
                continue;
            }
            let want = next.want;
            let began = self.ahead.as_ref().map_or(now, |a| a.began);
            if want == probe || want == Want::Heap {
                last_began = Some(began);
            }
            let upcoming = Upcoming {
                others_due: tasks
                    .iter()
                    .filter(|t| t.want != Want::Heap)
                    .map(|t| t.due)
                    .min(),
                ends: self.config.duration.map(|d| start + d),
            };
            let result = match self.attempt(want, upcoming, &mut observer).await {
                Some(result) => result,
                // Stopped mid-request: the attempt is not recorded, the stop is.
                None => continue,
            };
            let period = match want {
                Want::MemStats if envoy => self.heap_interval(),
                Want::Heap if envoy => (self.config.interval * 20).max(Duration::from_secs(10)),
                Want::Heap => self.heap_interval(),
                Want::Goroutine => self.goroutine_period(),
                // Near the limit the runtime figures come at least once per normal interval:
                // they are cheap, and may be the only fresh memory figure there is.
                Want::MemStats | Want::Stats if self.bursting() => {
                    self.config.memstats_interval.min(self.config.interval)
                }
                Want::MemStats | Want::Stats => self.config.memstats_interval,
            };
            // A slow target delays the next capture; requests never pile up.
            let task = tasks
                .iter_mut()
                .find(|t| t.want == want)
                .expect("task exists");
            let ended = self.clock.now();
            task.due = (began + period).max(ended);
            // Only a rendered profile costs the target: after a failure (a stall, a refusal)
            // the next attempt keeps its normal time, the last live moments matter most.
            if matches!(want, Want::Heap | Want::Goroutine)
                && self.failing_since.is_none()
                && self.kind.costs_target()
            {
                // Rendering a profile costs the target CPU: keep the share of time it spends
                // serving us under the duty cap (doubled near the limit).
                let duty = if self.bursting() {
                    (self.config.max_duty * 2.0).min(1.0)
                } else {
                    self.config.max_duty
                };
                if duty > 0.0 && duty < 1.0 {
                    // The target was busy for the request, not for our checking and fsync.
                    let busy = self.last_latency;
                    task.due = task.due.max(began + busy.mul_f64(1.0 / duty));
                }
            }
            if let Err(e) = result {
                if e.is_disk_full() {
                    self.summary.reason = StopReason::DiskFull;
                    self.summary.disk_error = Some(e.to_string());
                    break;
                }
                return Err(e.into());
            }
        }
        self.note_exits().await?;
        self.record_events().await?;
        for end in std::mem::take(&mut self.ends_to_tell) {
            observer.ended(&end);
        }
        self.summary.cycles = self.cycles.current();
        self.summary.unindexed = self.indexer.finish(crate::index::INDEX_GRACE);
        Ok(self.summary)
    }
}
