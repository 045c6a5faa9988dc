//! What a collector tells whoever runs it: each attempt and each process end as they happen
//! ([`Observer`], for the live status line), then why it stopped and what it did
//! ([`CollectSummary`]), or the error that ended it ([`CollectError`]).

use thiserror::Error;

use super::LiveStatus;
use crate::store::{CaptureRecord, StoreError};

#[derive(Debug, Error)]
pub enum CollectError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking `run` could not start its tokio runtime (no file descriptors left).
    #[error("cannot start the collector's runtime: {0}; raise the open-file limit")]
    Runtime(std::io::Error),
}

/// Why the collector stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Interrupted,
    DurationReached,
    TargetExited,
    DiskFull,
}

/// What the collector did. Every attempt is one of: a profile stored, a duplicate of the last
/// one stored, a runtime figure read (MemStats, the agent's stats, Envoy's /memory), or a
/// failure: `attempts = stored + duplicates + figures + errors`.
#[derive(Debug, Clone)]
pub struct CollectSummary {
    pub reason: StopReason,
    pub attempts: u64,
    /// Attempts that answered: `stored + duplicates + figures`.
    pub captures: u64,
    pub stored: u64,
    pub duplicates: u64,
    /// Runtime figures read (no profile file).
    pub figures: u64,
    /// Failed attempts.
    pub errors: u64,
    pub cycles: u32,
    pub deleted: u64,
    /// Whether the target answered at least once.
    pub reached: bool,
    /// Whether anything answered at all, if only with an error page or garbage.
    pub responded: bool,
    pub last_error: Option<String>,
    pub disk_error: Option<String>,
    /// Stored captures the collector's indexer wrote no entry for (left out while decoding
    /// was paced, or still waiting at the exit's grace): the first analysis builds them.
    pub unindexed: u64,
}

/// Told about every attempt, for the live status line.
pub trait Observer {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus);

    /// Told about each process end written (`exit`), once it is in the manifest.
    fn ended(&mut self, _record: &CaptureRecord) {}
}

pub struct NoObserver;

impl<O: Observer + ?Sized> Observer for &mut O {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus) {
        (**self).attempt(record, status);
    }

    fn ended(&mut self, record: &CaptureRecord) {
        (**self).ended(record);
    }
}

impl<O: Observer + ?Sized> Observer for Box<O> {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus) {
        (**self).attempt(record, status);
    }

    fn ended(&mut self, record: &CaptureRecord) {
        (**self).ended(record);
    }
}

impl Observer for NoObserver {
    fn attempt(&mut self, _: &CaptureRecord, _: &LiveStatus) {}
}
