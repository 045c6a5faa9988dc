//! The push: captures go in batches, several requests in flight, until each is settled —
//! delivered, refused, or (when the push must end with a request unanswered) recorded as
//! maybe delivered. Failures wait with exponential backoff and jitter, one request probing at
//! a time; refusals are recorded once and never retried in the same push; a rejection of the
//! credentials or the URL stops everything. The loop itself is in `driver.rs`.
//!
//! [`push_run`] drives it over a finished run; [`start`] spawns it beside a live collector,
//! which then only [`PushHandle::enqueue`]s each record once it is durable and, at exit,
//! calls [`PushHandle::drain`] with a bound.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender, unbounded_channel};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::PushError;
use super::connect::{Refusal, Transport};
use super::driver::{InAirRecords, Pusher};
use super::journal::{Journal, JournalLine, PushRecord};
use super::labels::ServiceSource;
use super::settings::LabelFlags;
use super::spool::{Retry, Server, Spool, Tally};
use crate::decode::DecodeLimits;
use crate::store::{CaptureRecord, RunDir};

/// Exponential backoff with equal jitter: attempt n waits between d/2 and d, where
/// d = first · 2ⁿ⁻¹ capped at `max`. Never zero, so a dead server is not hammered; never in
/// step, so many collectors restarted together do not retry together.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(250),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    pub(super) fn wait(&self, attempt: u32, jitter: &mut Jitter) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let full = doubled.min(self.max);
        full / 2 + full.mul_f64(jitter.unit() / 2.0)
    }
}

/// splitmix64 seeded per process: jitter needs spread, not secrecy.
pub(super) struct Jitter(u64);

impl Jitter {
    pub(super) fn new() -> Jitter {
        Jitter(RandomState::new().hash_one(std::process::id()))
    }

    /// A number in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Told the reason when a run of failures begins.
pub type FailingNotice = Arc<dyn Fn(&str) + Send + Sync>;

/// How a push behaves: the plain configuration the CLI builds.
#[derive(Clone)]
pub struct PushOptions {
    /// `--service` and `--push-label`, over the labels the run keeps (see `settings.rs`).
    pub labels: LabelFlags,
    /// Send every capture stamped with the time it is prepared for sending (its own in a
    /// label).
    pub restamp: bool,
    /// Which earlier outcomes to send again (`--retry-refused`, `--retry-unanswered`,
    /// `--resend`); a restamping push also sends what was refused unrestamped.
    pub retry: Retry,
    /// `--skip-duplicates`: a capture equal to the one before is not sent.
    pub skip_duplicates: bool,
    pub backoff: Backoff,
    /// Stop once this long passes without a capture settled while the server fails; `None`
    /// keeps trying (a live collector, whose bound is the drain at exit).
    pub give_up_after: Option<Duration>,
    /// `--push-timeout`: what a request in flight at the end is given to answer.
    pub request_timeout: Duration,
    pub limits: DecodeLimits,
    /// Told once at the start of each run of failures: "why; retrying".
    pub on_failing: Option<FailingNotice>,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            labels: LabelFlags::default(),
            restamp: false,
            retry: Retry::default(),
            skip_duplicates: false,
            backoff: Backoff::default(),
            give_up_after: Some(Duration::from_secs(60)),
            request_timeout: Duration::from_secs(10),
            limits: DecodeLimits::default(),
            on_failing: None,
        }
    }
}

impl PushOptions {
    pub(super) fn spool_retry(&self) -> Retry {
        Retry {
            restamping: self.restamp,
            ..self.retry
        }
    }
}

/// What a push did, for the summary line and the exit code.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushStats {
    pub to: String,
    pub delivered: u64,
    pub refused: u64,
    /// Sent when the push had to end and never answered: recorded as maybe delivered.
    pub unanswered: u64,
    /// Requests that failed and were tried again.
    pub retries: u64,
    /// Requests answered (any answer), and their total time, for the mean answer time.
    pub requests: u64,
    pub answer_time: Duration,
    /// Still in the spool at the end (the push gave up, was rejected, or the drain ran out).
    pub unsent: u64,
    pub tally: Tally,
    /// Captures whose file could not be read: "path: why".
    pub unreadable: Vec<String>,
    /// Each distinct kind of refusal (status and code) with a first example and a count.
    pub refusals: Vec<(Refusal, u64)>,
    /// Why the server took nothing more (credentials, URL, TLS).
    pub rejected: Option<Refusal>,
    pub last_failure: Option<String>,
    /// Stopped after `give_up_after` without progress.
    pub gave_up: bool,
    /// Each `service_name` sent and where it came from.
    pub services: Vec<(String, ServiceSource)>,
    /// Heap captures whose allocation counters fell within a boot cycle (a new process the
    /// cycle did not tell apart): sent whole.
    pub counter_resets: u64,
    /// Heap captures whose base was deleted after it was sent, in an earlier push: sent with
    /// an empty allocation delta (see `prepare.rs`).
    pub bases_lost: u64,
    /// How the drain of a live push went.
    pub drain: Option<DrainFigures>,
}

/// A live push's drain: how much it had to send, what it sent, and whether time ran out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DrainFigures {
    /// Captures unsent when the drain began (those still on their way from the collector
    /// included).
    pub queued: u64,
    pub delivered: u64,
    pub took: Duration,
    /// The bound ran out with captures unsent.
    pub ran_out: bool,
}

impl PushStats {
    pub(super) fn refused_one(&mut self, refusal: &Refusal) {
        self.refused += 1;
        match self
            .refusals
            .iter_mut()
            .find(|(r, _)| r.status == refusal.status && r.code == refusal.code)
        {
            Some((_, n)) => *n += 1,
            None => self.refusals.push((refusal.clone(), 1)),
        }
    }

    /// The mean time the server took to answer a request.
    pub fn mean_answer(&self) -> Option<Duration> {
        (self.requests > 0).then(|| self.answer_time / self.requests as u32)
    }
}

/// Sends a finished run: every stored capture not yet settled with this server. Returns when
/// all are settled, the server rejects us, or `give_up_after` passes without progress.
pub async fn push_run<T: Transport>(
    run: &Path,
    server: Server,
    transport: T,
    options: PushOptions,
) -> Result<PushStats, PushError> {
    let stats = Arc::new(Mutex::new(PushStats::default()));
    let mut pusher = Pusher::open(
        run,
        server,
        Arc::new(transport),
        options,
        Arc::clone(&stats),
    )?;
    pusher.seal();
    pusher.drive(&mut None, None).await?;
    Ok(snapshot(&stats))
}

/// A push running beside a live collector.
pub struct PushHandle {
    run: PathBuf,
    server: Server,
    retry: Retry,
    skip_duplicates: bool,
    request_timeout: Duration,
    inbox: Option<UnboundedSender<CaptureRecord>>,
    deadline: Option<oneshot::Sender<Instant>>,
    task: tokio::task::JoinHandle<Result<(), PushError>>,
    in_air: InAirRecords,
    stats: Arc<Mutex<PushStats>>,
}

/// Spawns the push loop on the current tokio runtime. What the run already holds and has
/// not settled with this server (a resumed run) is queued first.
pub fn start<T: Transport>(
    run: &Path,
    server: Server,
    transport: T,
    options: PushOptions,
) -> Result<PushHandle, PushError> {
    let stats = Arc::new(Mutex::new(PushStats::default()));
    let retry = Retry {
        // A recount must not write a second resend mark.
        everything: false,
        ..options.spool_retry()
    };
    let (skip_duplicates, request_timeout) = (options.skip_duplicates, options.request_timeout);
    let mut pusher = Pusher::open(
        run,
        server.clone(),
        Arc::new(transport),
        options,
        Arc::clone(&stats),
    )?;
    let in_air = pusher.in_air_records();
    let (tx, rx) = unbounded_channel();
    let (deadline_tx, deadline_rx) = oneshot::channel();
    let task = tokio::spawn(async move { pusher.drive(&mut Some(rx), Some(deadline_rx)).await });
    Ok(PushHandle {
        run: run.to_path_buf(),
        server,
        retry,
        skip_duplicates,
        request_timeout,
        inbox: Some(tx),
        deadline: Some(deadline_tx),
        task,
        in_air,
        stats,
    })
}

impl PushHandle {
    /// Hands the pusher a manifest record that is durable. Never waits: the record joins an
    /// unbounded queue of small structs (the profile itself stays on disk).
    pub fn enqueue(&self, record: &CaptureRecord) {
        if let Some(inbox) = &self.inbox {
            let _ = inbox.send(record.clone());
        }
    }

    /// A sender of records for another thread (the collector's manifest writer). It does not
    /// keep the push open: once [`PushHandle::drain`] begins, what it sends is left to the
    /// spool of the next start.
    pub fn enqueuer(&self) -> Enqueuer {
        Enqueuer(self.inbox.as_ref().map(UnboundedSender::downgrade))
    }

    /// The figures so far, for a status line.
    pub fn stats(&self) -> PushStats {
        snapshot(&self.stats)
    }

    /// No more records: sends what is queued for up to `within`, then stops sending and
    /// waits for the requests in flight to be answered (each within the request timeout); one
    /// left unanswered is recorded as maybe delivered, never abandoned to be sent twice.
    /// What is left unsent stays in the spool for the next start.
    pub async fn drain(mut self, within: Duration) -> Result<PushStats, PushError> {
        self.inbox = None;
        if let Some(deadline) = self.deadline.take() {
            let _ = deadline.send(Instant::now() + within);
        }
        // The loop keeps its own bound (the drain's, then `--push-timeout` for what is in the
        // air, whose captures it records as maybe delivered); this one only guards against a
        // loop that hangs. Even then what was in the air is recorded so, never left to be sent
        // twice.
        let guard = within + self.request_timeout + Duration::from_secs(10);
        match tokio::time::timeout(guard, &mut self.task).await {
            Ok(Ok(result)) => result?,
            Ok(Err(join)) => {
                return Err(PushError::Config(format!("the push task failed: {join}")));
            }
            Err(_) => {
                self.task.abort();
                let _ = (&mut self.task).await;
                let left: Vec<PushRecord> =
                    self.in_air.lock().drain().flat_map(|(_, r)| r).collect();
                let n = left.len() as u64;
                let run = self.run.clone();
                tokio::task::spawn_blocking(move || record_left(&run, left))
                    .await
                    .map_err(|e| PushError::Config(format!("the journal writer stopped: {e}")))??;
                self.stats
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .unanswered += n;
            }
        }
        // Records the collector sent after the drain began never reached the loop: what is
        // unsent is what the next start will find in the spool.
        let unsent = self.spool_left().await?;
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.unsent = unsent;
        if let Some(drain) = &mut stats.drain {
            drain.queued = drain.queued.max(drain.delivered + unsent);
            drain.ran_out = unsent > 0;
        }
        Ok(stats.clone())
    }

    /// The length of the spool as a fresh start derives it from the run.
    async fn spool_left(&self) -> Result<u64, PushError> {
        let (run, server, retry, skip) = (
            self.run.clone(),
            self.server.clone(),
            self.retry,
            self.skip_duplicates,
        );
        let counted = tokio::task::spawn_blocking(move || {
            let dir = RunDir::open(&run).map_err(|e| PushError::Run {
                path: run.clone(),
                why: e.to_string(),
            })?;
            let mut spool = Spool::open(&run, server, retry, skip)?;
            for record in &dir.manifest.records {
                spool.offer(record);
            }
            Ok::<u64, PushError>(spool.len() as u64)
        })
        .await;
        counted.map_err(|e| PushError::Config(format!("counting the spool: {e}")))?
    }
}

/// Appends `records` to the run's journal and syncs it.
fn record_left(run: &Path, records: Vec<PushRecord>) -> Result<(), PushError> {
    if records.is_empty() {
        return Ok(());
    }
    let (mut journal, _) = Journal::open(run)?;
    let lines: Vec<JournalLine> = records.into_iter().map(JournalLine::Outcome).collect();
    journal.append(&lines)?;
    journal.sync()
}

/// [`PushHandle::enqueue`] from anywhere: `Send`, cheap to clone, never waits.
#[derive(Clone)]
pub struct Enqueuer(Option<WeakUnboundedSender<CaptureRecord>>);

impl Enqueuer {
    pub fn enqueue(&self, record: &CaptureRecord) {
        if let Some(inbox) = self.0.as_ref().and_then(WeakUnboundedSender::upgrade) {
            let _ = inbox.send(record.clone());
        }
    }
}

pub(super) fn snapshot(stats: &Mutex<PushStats>) -> PushStats {
    stats
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

#[cfg(test)]
#[path = "pusher_tests.rs"]
mod tests;
