//! The push loop: takes the spool's oldest capture, sends it until the server gives a final
//! answer, records that answer, and goes on. Failures wait with exponential backoff and
//! jitter; refusals are recorded once and never retried in the same push; a rejection of the
//! credentials or the URL stops everything. One capture is in flight at a time.
//!
//! [`push_run`] drives it over a finished run; [`start`] spawns it beside a live collector,
//! which then only [`PushHandle::enqueue`]s each record once it is durable and, at exit,
//! calls [`PushHandle::drain`] with a bound.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{
    UnboundedReceiver, UnboundedSender, WeakUnboundedSender, unbounded_channel,
};
use tokio::time::Instant;

use super::PushError;
use super::connect::{Answer, Refusal, Transport};
use super::journal::{Outcome, PushRecord};
use super::labels::{LabelOptions, Labeler};
use super::restamp;
use super::spool::{Pending, Retry, Server, Spool, Tally};
use super::wire;
use crate::decode::DecodeLimits;
use crate::store::{CaptureRecord, RunDir};

/// How long a live capture waits for its boot cycle's `cycle` record (its labels need the
/// build) before it goes with the run's fallbacks.
const CYCLE_WAIT: Duration = Duration::from_secs(2);

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
    fn wait(&self, attempt: u32, jitter: &mut Jitter) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let full = doubled.min(self.max);
        full / 2 + full.mul_f64(jitter.unit() / 2.0)
    }
}

/// splitmix64 seeded per process: jitter needs spread, not secrecy.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
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
    pub labels: LabelOptions,
    /// Send every capture stamped with the time of its push (its own in a label).
    pub restamp: bool,
    /// Send again what the server refused before.
    pub retry_refused: bool,
    pub backoff: Backoff,
    /// Stop once this long passes without a capture settled; `None` keeps trying (a live
    /// collector, whose bound is the drain at exit).
    pub give_up_after: Option<Duration>,
    pub limits: DecodeLimits,
    /// Told once at the start of each run of failures: "why; retrying".
    pub on_failing: Option<FailingNotice>,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            labels: LabelOptions::default(),
            restamp: false,
            retry_refused: false,
            backoff: Backoff::default(),
            give_up_after: Some(Duration::from_secs(60)),
            limits: DecodeLimits::default(),
            on_failing: None,
        }
    }
}

/// What a push did, for the summary line and the exit code.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushStats {
    pub to: String,
    pub delivered: u64,
    pub refused: u64,
    /// Requests that failed and were tried again.
    pub retries: u64,
    /// Still in the spool at the end (the push gave up, was rejected, or the drain ran out).
    pub unsent: u64,
    pub tally: Tally,
    /// Captures whose file could not be read or restamped: "path: why".
    pub unreadable: Vec<String>,
    /// Each distinct kind of refusal (status and code) with a first example and a count.
    pub refusals: Vec<(Refusal, u64)>,
    /// Why the server took nothing more (credentials, URL, TLS).
    pub rejected: Option<Refusal>,
    pub last_failure: Option<String>,
    /// Stopped after `give_up_after` without progress.
    pub gave_up: bool,
}

impl PushStats {
    fn refused_one(&mut self, refusal: &Refusal) {
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
}

/// Sends a finished run: every stored capture not yet settled with this server, in order.
/// Returns when all are settled, the server rejects us, or `give_up_after` passes without
/// progress.
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
    pusher.sealed = true;
    pusher.drive(&mut None).await?;
    Ok(snapshot(&stats))
}

/// A push running beside a live collector.
pub struct PushHandle {
    run: PathBuf,
    server: Server,
    retry: Retry,
    inbox: Option<UnboundedSender<CaptureRecord>>,
    task: tokio::task::JoinHandle<Result<(), PushError>>,
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
        refused: options.retry_refused,
        restamping: options.restamp,
    };
    let mut pusher = Pusher::open(
        run,
        server.clone(),
        Arc::new(transport),
        options,
        Arc::clone(&stats),
    )?;
    let (tx, rx) = unbounded_channel();
    let task = tokio::spawn(async move { pusher.drive(&mut Some(rx)).await });
    Ok(PushHandle {
        run: run.to_path_buf(),
        server,
        retry,
        inbox: Some(tx),
        task,
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

    /// No more records: waits up to `within` for the queue to empty, then stops the push,
    /// a request in flight included. What is left stays in the spool for the next start.
    pub async fn drain(mut self, within: Duration) -> Result<PushStats, PushError> {
        self.inbox = None;
        match tokio::time::timeout(within, &mut self.task).await {
            Ok(Ok(result)) => result?,
            Ok(Err(join)) => {
                return Err(PushError::Config(format!("the push task failed: {join}")));
            }
            Err(_) => {
                self.task.abort();
                let _ = (&mut self.task).await;
                // Records still in the queue were never counted: what is unsent is what
                // the next start will find in the spool.
                let unsent = self.spool_left().await?;
                self.stats.lock().unwrap_or_else(|p| p.into_inner()).unsent = unsent;
            }
        }
        Ok(snapshot(&self.stats))
    }

    /// The length of the spool as a fresh start derives it from the run.
    async fn spool_left(&self) -> Result<u64, PushError> {
        let (run, server, retry) = (self.run.clone(), self.server.clone(), self.retry);
        let counted = tokio::task::spawn_blocking(move || {
            let dir = RunDir::open(&run).map_err(|e| PushError::Run {
                path: run.clone(),
                why: e.to_string(),
            })?;
            let mut spool = Spool::open(&run, server, retry)?;
            for record in &dir.manifest.records {
                spool.offer(record);
            }
            Ok::<u64, PushError>(spool.len() as u64)
        })
        .await;
        counted.map_err(|e| PushError::Config(format!("counting the spool: {e}")))?
    }
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

fn snapshot(stats: &Mutex<PushStats>) -> PushStats {
    stats
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

struct Pusher<T> {
    transport: Arc<T>,
    spool: Spool,
    labeler: Labeler,
    options: PushOptions,
    jitter: Jitter,
    stats: Arc<Mutex<PushStats>>,
    /// No more records will come.
    sealed: bool,
    last_progress: Instant,
}

enum Flow {
    Next,
    Stop,
}

impl<T: Transport> Pusher<T> {
    fn open(
        run: &Path,
        server: Server,
        transport: Arc<T>,
        options: PushOptions,
        stats: Arc<Mutex<PushStats>>,
    ) -> Result<Pusher<T>, PushError> {
        let dir = RunDir::open(run).map_err(|e| PushError::Run {
            path: run.to_path_buf(),
            why: e.to_string(),
        })?;
        let retry = Retry {
            refused: options.retry_refused,
            restamping: options.restamp,
        };
        let fallback = run.file_name().map_or_else(
            || run.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut labeler = Labeler::new(dir.info.as_ref(), &fallback, &options.labels);
        stats.lock().unwrap_or_else(|p| p.into_inner()).to = server.to.clone();
        let mut spool = Spool::open(run, server, retry)?;
        for record in &dir.manifest.records {
            labeler.observe(record);
            spool.offer(record);
        }
        let pusher = Pusher {
            transport,
            spool,
            labeler,
            options,
            jitter: Jitter::new(),
            stats,
            sealed: false,
            last_progress: Instant::now(),
        };
        pusher.publish();
        Ok(pusher)
    }

    fn offer(&mut self, record: &CaptureRecord) {
        self.labeler.observe(record);
        self.spool.offer(record);
    }

    fn publish(&self) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.unsent = self.spool.len() as u64;
        stats.tally = self.spool.tally.clone();
    }

    fn update(&self, change: impl FnOnce(&mut PushStats)) {
        change(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// A live capture is ready once its cycle's labels are known: the `cycle` record seen,
    /// a later boot cycle begun, the run sealed, or [`CYCLE_WAIT`] passed.
    fn ready(&self, pending: &Pending) -> bool {
        self.sealed
            || self.labeler.knows_cycle(pending.cycle)
            || self.spool.saw_later_cycle(pending.cycle)
            || pending.offered.elapsed() >= CYCLE_WAIT
    }

    async fn drive(
        &mut self,
        inbox: &mut Option<UnboundedReceiver<CaptureRecord>>,
    ) -> Result<(), PushError> {
        loop {
            self.absorb(inbox);
            let next = self.spool.front().cloned();
            match next {
                Some(pending) if self.ready(&pending) => {
                    let flow = self.deliver(pending, inbox).await?;
                    self.publish();
                    if let Flow::Stop = flow {
                        return self.spool.sync().await;
                    }
                }
                None if self.sealed => return self.spool.sync().await,
                Some(pending) => {
                    let until = pending.offered + CYCLE_WAIT;
                    self.wait(until, inbox).await;
                }
                None => match self.spool.sync_due() {
                    // Idle: the last lines get their fsync on time even if no more come.
                    Some(due) if due <= Instant::now() => self.spool.sync().await?,
                    Some(due) => self.wait(due, inbox).await,
                    None => {
                        self.wait(Instant::now() + Duration::from_secs(3600), inbox)
                            .await
                    }
                },
            }
        }
    }

    /// Takes every record already queued, without waiting.
    fn absorb(&mut self, inbox: &mut Option<UnboundedReceiver<CaptureRecord>>) {
        use tokio::sync::mpsc::error::TryRecvError;
        while let Some(rx) = inbox.as_mut() {
            match rx.try_recv() {
                Ok(record) => self.offer(&record),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    *inbox = None;
                    self.sealed = true;
                }
            }
        }
        self.publish();
    }

    /// Sleeps until `until`, taking records as they come; returns early on the first one.
    async fn wait(&mut self, until: Instant, inbox: &mut Option<UnboundedReceiver<CaptureRecord>>) {
        let Some(rx) = inbox.as_mut() else {
            tokio::time::sleep_until(until).await;
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            record = rx.recv() => match record {
                Some(record) => self.offer(&record),
                None => {
                    *inbox = None;
                    self.sealed = true;
                }
            },
        }
        self.publish();
    }

    /// Sends one capture until the server settles it. `Stop` when the push must end.
    async fn deliver(
        &mut self,
        pending: Pending,
        inbox: &mut Option<UnboundedReceiver<CaptureRecord>>,
    ) -> Result<Flow, PushError> {
        let path = self.spool.root().join(&pending.file);
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || std::fs::read(path)).await
        };
        let raw = match read {
            Ok(Ok(raw)) => raw,
            Ok(Err(e)) => {
                // Retention may have deleted it a moment ago: its `delete` record says so.
                self.absorb(inbox);
                if !self.spool.contains(pending.seq) {
                    return Ok(Flow::Next);
                }
                return Ok(self.unreadable(&pending, &path, &e.to_string()));
            }
            Err(e) => return Ok(self.unreadable(&pending, &path, &e.to_string())),
        };
        let id = self.labeler.capture_id(pending.seq, &pending.file);
        let mut attempts = 0u32;
        let mut failing = false;
        loop {
            // Built for each attempt: a restamped capture carries the time of the attempt.
            let (labels, profile) = if self.options.restamp {
                match restamp::restamp(&raw, unix_ns(), &self.options.limits) {
                    Ok(copy) => {
                        let own = if copy.captured_ns != 0 {
                            copy.captured_ns
                        } else {
                            pending.t_ms.saturating_mul(1_000_000)
                        };
                        let labels = self.labeler.labels(pending.name, pending.cycle, Some(own));
                        (labels, copy.bytes)
                    }
                    Err(e) => {
                        let why = format!("cannot restamp: {e}");
                        return Ok(self.unreadable(&pending, &path, &why));
                    }
                }
            } else {
                let labels = self.labeler.labels(pending.name, pending.cycle, None);
                (labels, raw.clone())
            };
            let body = wire::encode_push(labels, profile, id.clone());
            attempts += 1;
            let answer = self.transport.send(body).await;
            let settled = |outcome, status, refusal: Option<&Refusal>| PushRecord {
                seq: pending.seq,
                file: pending.file.clone(),
                to: self.spool.server().to.clone(),
                tenant: self.spool.server().tenant.clone(),
                id: id.clone(),
                outcome,
                status,
                code: refusal.and_then(|r| r.code.clone()),
                message: refusal.map(|r| r.message.clone()),
                attempts,
                t_ms: unix_ns() / 1_000_000,
                restamped: self.options.restamp,
            };
            match answer {
                Answer::Delivered { status } => {
                    let record = settled(Outcome::Delivered, status, None);
                    self.spool.settle(record).await?;
                    self.last_progress = Instant::now();
                    self.update(|s| s.delivered += 1);
                    return Ok(Flow::Next);
                }
                Answer::Refused(refusal) => {
                    let record = settled(Outcome::Refused, refusal.status, Some(&refusal));
                    self.spool.settle(record).await?;
                    self.last_progress = Instant::now();
                    self.update(|s| s.refused_one(&refusal));
                    return Ok(Flow::Next);
                }
                Answer::Rejected(refusal) => {
                    self.update(|s| s.rejected = Some(refusal));
                    return Ok(Flow::Stop);
                }
                Answer::Failed { why, retry_after } => {
                    if !failing {
                        failing = true;
                        if let Some(tell) = &self.options.on_failing {
                            tell(&why);
                        }
                    }
                    self.update(|s| {
                        s.retries += 1;
                        s.last_failure = Some(why);
                    });
                    let mut wait = self.options.backoff.wait(attempts, &mut self.jitter);
                    if let Some(asked) = retry_after {
                        wait = wait.max(asked.min(Duration::from_secs(300)));
                    }
                    if let Some(limit) = self.options.give_up_after {
                        let left = limit.saturating_sub(self.last_progress.elapsed());
                        if left.is_zero() {
                            self.update(|s| s.gave_up = true);
                            return Ok(Flow::Stop);
                        }
                        wait = wait.min(left);
                    }
                    let until = Instant::now() + wait;
                    while Instant::now() < until {
                        self.wait(until, inbox).await;
                    }
                }
            }
        }
    }

    fn unreadable(&mut self, pending: &Pending, path: &Path, why: &str) -> Flow {
        self.spool.forget(pending.seq);
        let line = format!("{}: {why}", path.display());
        self.update(|s| s.unreadable.push(line));
        Flow::Next
    }
}

fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
#[path = "pusher_tests.rs"]
mod tests;
