//! The next heap read started while the last capture is stored: a pipeline of two, for a
//! source that reads and encodes on a thread and hands its body over whole (`proc:`).
//!
//! # Read ahead, store behind
//!
//! A `proc:` capture is a read of the target's memory and its encoding (on the blocking pool,
//! the source moved there), then the store: the file written and fsynced, named, its manifest
//! line fsynced, its index entry. The store is mostly waiting for the disk, the read mostly CPU,
//! so when the next heap capture is already due as the last one's bytes come back (the interval
//! shorter than a capture), the next read is started then, on the blocking pool, and the last
//! capture is checked and stored on the collector's task meanwhile. The loop's next attempt
//! takes that read; its capture is checked only once the last one's manifest line is written
//! (the store is the one sequence it always was), so at most one encoded capture waits for the
//! disk, and never more than one read is in flight. Each capture keeps the time it was asked
//! for (`t_ms`) and its own latency, from the start of its read to its last byte.
//!
//! Only for a source that tells no pieces (proc): a body told as it arrives is written as it
//! arrives, and a write beside the last one's fsync doubled its `durable_ms` for 4 % more
//! captures (`tasks.rs`' doc); proc's body is written only once the last capture is stored.
//! Nothing is read ahead after a failure, near the end of `--duration`, or when a goroutine or
//! MemStats capture comes due first: the next capture is the heap read, always. A stop drops a
//! read in flight (the source with it) as it drops any request; a capture read ahead before
//! `--duration` ends is stored like any capture begun before the end. Whatever needs the
//! source meanwhile (a boot cycle's build) waits for the read to bring it back.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::Collector;
use super::tasks::joined;
use crate::source::{FetchError, Reply, Source, SourceKind, Want};

/// A heap read started before the last capture was stored.
pub(super) struct Ahead {
    /// When it was asked for: wall clock (the record's `t_ms`) and monotonic.
    pub(super) t_ms: i64,
    pub(super) began: Duration,
    reading: Reading,
}

/// What a read on the blocking pool hands back: the source, its reply, and when its last byte
/// came.
type ReadBack = (Box<dyn Source>, Result<Reply, FetchError>, Duration);

enum Reading {
    /// On the blocking pool, with the source.
    InFlight(JoinHandle<ReadBack>),
    /// Back (the source with it): the reply and when its last byte came.
    Done(Box<Result<Reply, FetchError>>, Duration),
}

/// What the loop knows, when an attempt starts, of what comes after it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Upcoming {
    /// When the earliest capture of another kind than heap comes due.
    pub(super) others_due: Option<Duration>,
    /// When `--duration` ends the run.
    pub(super) ends: Option<Duration>,
}

/// A read taken from [`Ahead`]: when it was asked for, its reply, and when its last byte came.
pub(super) struct Fetched {
    pub(super) t_ms: i64,
    pub(super) began: Duration,
    pub(super) reply: Result<Reply, FetchError>,
    pub(super) received: Duration,
}

impl Collector {
    /// True when the capture just read (`want`, asked for at `began`) is to be stored behind
    /// the next heap read: a proc heap capture that came back whole, the next one due by now
    /// and before any other kind, and the run not ending.
    pub(super) fn reads_ahead(&self, want: Want, began: Duration, upcoming: Upcoming) -> bool {
        let now = self.clock.now();
        want == Want::Heap
            && self.kind == SourceKind::Proc
            && self.failing_since.is_none()
            && !self.stop.is_set()
            && self.ahead.is_none()
            && self.source.is_some()
            && began + self.heap_interval() <= now
            && upcoming.others_due.is_none_or(|d| d > now)
            && upcoming.ends.is_none_or(|end| now < end)
    }

    /// Starts the next heap read on the blocking pool, the source with it.
    pub(super) fn read_ahead(&mut self) {
        let Some(mut source) = self.source.take() else {
            return;
        };
        let timeout = self.timeout();
        let clock = self.clock.clone();
        let (t_ms, began) = (clock.unix_ms(), clock.now());
        let job = tokio::task::spawn_blocking(move || {
            let reply = source.fetch(Want::Heap, timeout);
            (source, reply, clock.now())
        });
        self.ahead = Some(Ahead {
            t_ms,
            began,
            reading: Reading::InFlight(job),
        });
    }

    /// Waits for a read in flight to bring the source back, keeping its reply for the next
    /// attempt. A stop meanwhile drops the read and the source with it.
    pub(super) async fn source_back(&mut self) {
        let Some(ahead) = &mut self.ahead else {
            return;
        };
        let Reading::InFlight(job) = &mut ahead.reading else {
            return;
        };
        let stop = self.stop.clone();
        let back = tokio::select! {
            biased;
            done = job => Some(joined(done)),
            () = stop.wait() => None,
        };
        match back {
            Some((source, reply, received)) => {
                self.source = Some(source);
                ahead.reading = Reading::Done(Box::new(reply), received);
            }
            None => self.ahead = None,
        }
    }

    /// The read started ahead, once it is back. `None`: there was none, or the stop came first.
    pub(super) async fn take_ahead(&mut self) -> Option<Fetched> {
        self.source_back().await;
        let ahead = self.ahead.take()?;
        match ahead.reading {
            Reading::Done(reply, received) => Some(Fetched {
                t_ms: ahead.t_ms,
                began: ahead.began,
                reply: *reply,
                received,
            }),
            Reading::InFlight(_) => None,
        }
    }
}
