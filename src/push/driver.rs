//! The push loop. Captures leave the spool in seq order and are prepared (allocation deltas,
//! on the blocking pool) a little ahead of the requests; requests carry batches of prepared
//! captures, up to [`IN_FLIGHT`] at once, so a server that takes half a second to answer each
//! (Pyroscope v2 answers once its segment is flushed) still takes captures as fast as a
//! collector makes them. Every capture is self-contained (its allocation figures are a delta
//! already), so the order requests land in does not matter; within a batch, captures keep
//! their order.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::PushError;
use super::connect::{Answer, Transport};
use super::delta::Basis;
use super::journal::{Outcome, PushRecord};
use super::labels::{Labeler, ProfileName};
use super::prepare::{self, Bases, Job, Prepared, Ready};
use super::pusher::{DrainFigures, Jitter, PushOptions, PushStats};
use super::settings;
use super::spool::{Pending, Server, Spool};
use super::wire::{self, LabelPair};
use crate::store::{CaptureRecord, RunDir};

/// How long a live capture waits for its boot cycle's `cycle` record (its labels need the
/// build) before it goes with the run's fallbacks.
pub(super) const CYCLE_WAIT: Duration = Duration::from_secs(2);
/// Requests in flight at once while the server answers.
pub const IN_FLIGHT: usize = 4;
/// Captures in one request at most.
pub const BATCH_CAPTURES: usize = 64;
/// Profile bytes (before gzip) in one request at most: half of Pyroscope's default burst
/// (`-distributor.ingestion-burst-size-mb=2`), which refuses any single request above it.
pub const BATCH_BYTES: usize = 1 << 20;
/// Prepared captures held ahead of the requests at most.
const PREPARED_AHEAD: usize = IN_FLIGHT * BATCH_CAPTURES;
/// Captures prepared per trip to the blocking pool.
const PREPARE_CHUNK: usize = 16;

/// A prepared capture not yet settled.
struct Outgoing {
    ready: Ready,
    labels: Vec<LabelPair>,
    id: String,
    attempts: u32,
    /// Its batch was refused: it goes alone, to learn which captures the server refuses.
    alone: bool,
    /// An attempt went out and no answer came back (it may be in the store): why. Kept
    /// through later attempts; cleared only by an answer that settles it.
    unanswered: Option<String>,
}

struct Flight {
    captures: Vec<Outgoing>,
    sent: Instant,
}

/// A run of failures: one request probes at a time, the next after `until`.
struct Failing {
    attempts: u32,
    until: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    /// Credentials or URL refused.
    Rejected,
    /// `give_up_after` without progress.
    GaveUp,
    /// The drain's bound ran out.
    Drained,
}

#[path = "outcomes.rs"]
mod outcomes;

/// Per request in the air, its captures' records as maybe delivered.
#[derive(Clone, Default)]
pub(super) struct InAirRecords(Arc<Mutex<HashMap<u64, Vec<PushRecord>>>>);

impl InAirRecords {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<PushRecord>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why a capture in the air when the push ended is recorded as maybe delivered.
fn ended_unanswered() -> super::connect::Refusal {
    super::connect::Refusal {
        status: 0,
        code: None,
        message: "the push ended with the request unanswered".into(),
    }
}

pub(super) struct Pusher<T> {
    transport: Arc<T>,
    spool: Spool,
    labeler: Labeler,
    options: PushOptions,
    jitter: Jitter,
    stats: Arc<Mutex<PushStats>>,
    bases: Option<Bases>,
    ready: BTreeMap<u64, Outgoing>,
    flights: JoinSet<(u64, Answer)>,
    in_air: HashMap<u64, Flight>,
    /// Per request in the air, its captures' records as maybe delivered: what the handle
    /// writes if the loop itself never comes back (see `PushHandle::drain`).
    in_air_records: InAirRecords,
    next_flight: u64,
    failing: Option<Failing>,
    /// No more records will come.
    sealed: bool,
    last_progress: Instant,
    stop: Option<Stop>,
    /// When the drain began and its bound.
    drain: Option<(Instant, Instant)>,
}

impl<T: Transport> Pusher<T> {
    pub(super) fn open(
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
        let labels = settings::resolve(run, &options.labels)?;
        let run_name = run.file_name().map_or_else(
            || run.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut labeler = Labeler::new(dir.info.as_ref(), &run_name, &labels);
        stats.lock().unwrap_or_else(|p| p.into_inner()).to = server.to.clone();
        let mut spool = Spool::open(run, server, options.spool_retry(), options.skip_duplicates)?;
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
            bases: Some(Bases::default()),
            ready: BTreeMap::new(),
            flights: JoinSet::new(),
            in_air: HashMap::new(),
            in_air_records: InAirRecords::default(),
            next_flight: 0,
            failing: None,
            sealed: false,
            last_progress: Instant::now(),
            stop: None,
            drain: None,
        };
        pusher.publish();
        Ok(pusher)
    }

    /// The records of the requests in the air, shared.
    pub(super) fn in_air_records(&self) -> InAirRecords {
        self.in_air_records.clone()
    }

    /// No more records will come (a finished run).
    pub(super) fn seal(&mut self) {
        self.sealed = true;
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
    fn is_ready(&self, pending: &Pending) -> bool {
        self.sealed
            || self.labeler.knows_cycle(pending.cycle)
            || self.spool.saw_later_cycle(pending.cycle)
            || pending.offered.elapsed() >= CYCLE_WAIT
    }

    pub(super) async fn drive(
        &mut self,
        inbox: &mut Option<UnboundedReceiver<CaptureRecord>>,
        mut deadline: Option<oneshot::Receiver<Instant>>,
    ) -> Result<(), PushError> {
        loop {
            self.absorb(inbox);
            self.check_stop();
            if self.stop.is_none() {
                self.prepare_ahead(inbox).await?;
                self.dispatch();
            }
            if self.past_answer_bound() {
                self.give_up_waiting().await?;
            }
            if self.in_air.is_empty()
                && (self.stop.is_some() || (self.sealed && self.spool.is_empty()))
            {
                return self.finish().await;
            }
            if self
                .spool
                .sync_due()
                .is_some_and(|due| due <= Instant::now())
            {
                // Idle or busy, the last lines get their fsync on time.
                self.spool.sync().await?;
            }
            let wake = self.next_wake();
            tokio::select! {
                Some(joined) = self.flights.join_next(), if !self.flights.is_empty() => {
                    match joined {
                        Ok((flight, answer)) => self.answered(flight, answer).await?,
                        Err(e) => return Err(PushError::Config(format!("a push request failed: {e}"))),
                    }
                }
                record = recv(inbox), if inbox.is_some() => match record {
                    Some(record) => self.offer(&record),
                    None => {
                        *inbox = None;
                        self.sealed = true;
                    }
                },
                at = wait_deadline(&mut deadline), if deadline.is_some() => {
                    deadline = None;
                    if let Ok(at) = at {
                        self.begin_drain(at, inbox);
                    }
                }
                () = tokio::time::sleep_until(wake) => {}
            }
            self.publish();
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

    fn begin_drain(&mut self, at: Instant, inbox: &mut Option<UnboundedReceiver<CaptureRecord>>) {
        self.absorb(inbox);
        self.drain = Some((Instant::now(), at));
        let queued = self.spool.len() as u64;
        self.update(|s| {
            s.drain = Some(DrainFigures {
                queued,
                ..DrainFigures::default()
            });
        });
    }

    /// How long past the drain's bound the requests in flight are waited for: `--push-timeout`
    /// (each request's own bound: its answer or its timeout comes within it), and a second.
    fn answer_wait(&self) -> Duration {
        self.options.request_timeout + Duration::from_secs(1)
    }

    /// The drain ran out and requests are still in the air past [`Pusher::answer_wait`].
    fn past_answer_bound(&self) -> bool {
        !self.in_air.is_empty()
            && self.stop.is_some()
            && self
                .drain
                .is_some_and(|(_, bound)| Instant::now() >= bound + self.answer_wait())
    }

    /// Whether the push must stop sending: the drain's bound passed with work left, or the
    /// server has failed for `give_up_after` without a capture settled.
    fn check_stop(&mut self) {
        if self.stop.is_some() {
            return;
        }
        let now = Instant::now();
        if self.drain.is_some_and(|(_, at)| now >= at) && !self.spool.is_empty() {
            self.stop = Some(Stop::Drained);
        } else if let (Some(_), Some(limit)) = (&self.failing, self.options.give_up_after) {
            if self.last_progress.elapsed() >= limit {
                self.stop = Some(Stop::GaveUp);
                self.update(|s| s.gave_up = true);
            }
        }
    }

    /// The next moment something is due: a retry, a capture's wait for its cycle, an fsync,
    /// giving up, the drain's bound.
    fn next_wake(&self) -> Instant {
        let mut wake = Instant::now() + Duration::from_secs(3600);
        let mut at = |t: Instant| wake = wake.min(t);
        if let Some(failing) = &self.failing {
            // The probe's moment, while one can go: with it in the air (or the push ending)
            // a moment already past would wake the loop again at once, and again.
            if self.in_air.is_empty() && self.stop.is_none() {
                at(failing.until);
            }
            if let Some(limit) = self.options.give_up_after {
                at(self.last_progress + limit);
            }
        }
        if let Some(front) = self.spool.front() {
            if !self.is_ready(front) {
                at(front.offered + CYCLE_WAIT);
            }
        }
        if let Some(due) = self.spool.sync_due() {
            at(due);
        }
        if let Some((_, bound)) = self.drain {
            if self.stop.is_none() {
                at(bound);
            } else if !self.in_air.is_empty() {
                at(bound + self.answer_wait());
            }
        }
        wake
    }

    /// Prepares the next captures, in order, while fewer than [`PREPARED_AHEAD`] wait to go.
    /// While the server fails, the captures waiting for it are retried and nothing more is
    /// prepared: what stays in the spool costs no memory, and retention may still thin it.
    async fn prepare_ahead(
        &mut self,
        inbox: &mut Option<UnboundedReceiver<CaptureRecord>>,
    ) -> Result<(), PushError> {
        let idle = self.ready.is_empty() && self.in_air.is_empty();
        let ahead = match (&self.failing, idle) {
            (None, _) => PREPARED_AHEAD,
            (Some(_), true) => PREPARE_CHUNK,
            (Some(_), false) => return Ok(()),
        };
        while self.ready.len() < ahead {
            let mut jobs = Vec::new();
            while jobs.len() < PREPARE_CHUNK && self.ready.len() + jobs.len() < ahead {
                let Some(front) = self.spool.front() else {
                    break;
                };
                if !self.is_ready(front) {
                    break;
                }
                let seq = front.seq;
                let Some(pending) = self.spool.take(seq) else {
                    break;
                };
                // Only a heap capture has a base: another must not take (or read) one.
                let earlier = if pending.name == ProfileName::Memory {
                    self.spool.earlier(pending.cycle, pending.seq)
                } else {
                    Vec::new()
                };
                jobs.push(Job {
                    pending,
                    earlier,
                    restamp_at_ns: self.options.restamp.then(crate::time::now_ns),
                });
            }
            if jobs.is_empty() {
                return Ok(());
            }
            let root = self.spool.root().to_path_buf();
            let limits = self.options.limits;
            let mut bases = self.bases.take().unwrap_or_default();
            let done = tokio::task::spawn_blocking(move || {
                let prepared: Vec<(Pending, Prepared)> = jobs
                    .into_iter()
                    .map(|job| {
                        let pending = job.pending.clone();
                        (pending, prepare::prepare(&root, job, &mut bases, &limits))
                    })
                    .collect();
                (prepared, bases)
            })
            .await
            .map_err(|e| PushError::Config(format!("preparing captures: {e}")))?;
            let (prepared, bases) = done;
            self.bases = Some(bases);
            for (pending, outcome) in prepared {
                self.prepared(pending, outcome, inbox);
            }
        }
        Ok(())
    }

    fn prepared(
        &mut self,
        pending: Pending,
        outcome: Prepared,
        inbox: &mut Option<UnboundedReceiver<CaptureRecord>>,
    ) {
        let path = self.spool.root().join(&pending.file);
        let ready = match outcome {
            Prepared::Ready(ready) => *ready,
            Prepared::Gone => {
                // Retention may have deleted it a moment ago: its `delete` record says so.
                self.absorb(inbox);
                if !self.spool.gone(pending.seq, &pending.file) {
                    self.unreadable(&pending, &path, "the file is gone");
                }
                return;
            }
            Prepared::Unreadable(why) => {
                self.unreadable(&pending, &path, &why);
                return;
            }
        };
        if let Some(exe) = &ready.executable {
            self.labeler.observe_executable(pending.cycle, exe);
        }
        let captured_at = self.options.restamp.then_some(ready.captured_ns);
        let labels = self
            .labeler
            .labels(pending.name, pending.cycle, captured_at);
        let service = self.labeler.service_name(pending.cycle);
        let id = self.labeler.capture_id(pending.seq, &pending.file);
        let reset = ready.basis == Basis::Reset;
        let lost = ready.basis == Basis::BaseLost;
        self.update(|s| {
            if !s.services.contains(&service) {
                s.services.push(service);
            }
            s.counter_resets += u64::from(reset);
            s.bases_lost += u64::from(lost);
        });
        self.ready.insert(
            pending.seq,
            Outgoing {
                ready,
                labels,
                id,
                attempts: 0,
                alone: false,
                unanswered: None,
            },
        );
    }

    fn unreadable(&mut self, pending: &Pending, path: &Path, why: &str) {
        self.spool.forget(pending.seq);
        let line = format!("{}: {why}", path.display());
        self.update(|s| s.unreadable.push(line));
    }

    /// Sends batches while a request slot is free: [`IN_FLIGHT`] while the server answers,
    /// one probe at a time (after its backoff) while it fails.
    fn dispatch(&mut self) {
        let slots = if self.failing.is_some() { 1 } else { IN_FLIGHT };
        while self.in_air.len() < slots && !self.ready.is_empty() {
            if self
                .failing
                .as_ref()
                .is_some_and(|f| Instant::now() < f.until)
            {
                return;
            }
            let batch = self.next_batch();
            let body = wire::encode_batch(
                batch
                    .iter()
                    .map(|c| (c.labels.as_slice(), c.ready.bytes.as_slice(), c.id.as_str())),
            );
            let flight = self.next_flight;
            self.next_flight += 1;
            let maybe: Vec<PushRecord> = batch
                .iter()
                .map(|c| self.record(c, Outcome::Unanswered, 0, Some(&ended_unanswered())))
                .collect();
            self.in_air_records.lock().insert(flight, maybe);
            let transport = Arc::clone(&self.transport);
            self.flights
                .spawn(async move { (flight, transport.send(body).await) });
            self.in_air.insert(
                flight,
                Flight {
                    captures: batch,
                    sent: Instant::now(),
                },
            );
        }
    }

    /// The oldest prepared captures, up to the batch bounds; a capture marked alone goes alone.
    fn next_batch(&mut self) -> Vec<Outgoing> {
        let mut batch: Vec<Outgoing> = Vec::new();
        let mut bytes = 0;
        while let Some(entry) = self.ready.first_entry() {
            let next = entry.get();
            let fits = batch.is_empty()
                || (!next.alone
                    && batch.len() < BATCH_CAPTURES
                    && bytes + next.ready.raw_len <= BATCH_BYTES);
            if !fits {
                break;
            }
            let mut capture = entry.remove();
            capture.attempts += 1;
            // `unanswered` stays: an attempt that may have arrived may be in the store
            // whatever the later ones say.
            bytes += capture.ready.raw_len;
            let alone = capture.alone;
            batch.push(capture);
            if alone {
                break;
            }
        }
        batch
    }
}

async fn recv(inbox: &mut Option<UnboundedReceiver<CaptureRecord>>) -> Option<CaptureRecord> {
    match inbox.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn wait_deadline(
    deadline: &mut Option<oneshot::Receiver<Instant>>,
) -> Result<Instant, oneshot::error::RecvError> {
    match deadline.as_mut() {
        Some(rx) => rx.await,
        None => std::future::pending().await,
    }
}
