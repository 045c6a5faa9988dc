//! One attempt, from request to manifest line: the request, its body taken in as it arrives
//! (`intake.rs`); the reply checked (`replies.rs`); a profile given its final name only once it is
//! whole and new, and durable; its record appended, its boot cycle's `cycle` record written the
//! first time, its site index entry handed to the indexer; retention's thinning; then the live
//! status and the observer told.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::ahead::{Fetched, Upcoming};
use super::intake::{Intake, Streamed};
use super::replies::Body::{Gunzipped, Made};
use super::replies::{Invalid, is_stack_dump};
use super::{Collector, Observer};
use crate::analyse::reduce::OwnCode;
use crate::source::procmem::MemoryProbe;
use crate::source::{BodyTap, FailureKind, FetchError, Reply, Want};
use crate::store::{CaptureRecord, RecordKind, StoreError};

impl Collector {
    /// One attempt, recorded. `None` when the stop came during the request. A heap read
    /// started ahead is taken here; the next one may be started before this one is stored
    /// (`ahead.rs`), by what `upcoming` says of the captures after it.
    pub(super) async fn attempt(
        &mut self,
        want: Want,
        upcoming: Upcoming,
        observer: &mut impl Observer,
    ) -> Option<Result<(), StoreError>> {
        let kind = match want {
            Want::Heap => RecordKind::Heap,
            Want::Goroutine => RecordKind::Goroutine,
            Want::MemStats => RecordKind::Memstats,
            Want::Stats => RecordKind::Stats,
        };
        let interval = self.heap_interval();
        let timeout = self.timeout();
        let new_intake = |this: &mut Collector| match want {
            Want::Heap | Want::Goroutine => this.intake(this.next_seq, kind).map(Some),
            Want::MemStats | Want::Stats => Ok(None),
        };
        let (t_ms, began, fetched, received, intake) = if self.ahead.is_some() {
            // Read while the last capture was stored: the body comes whole, taken in now.
            let Fetched {
                t_ms,
                began,
                reply,
                received,
            } = self.take_ahead().await?;
            let intake = match new_intake(self) {
                Ok(intake) => intake,
                Err(e) => return Some(Err(e)),
            };
            (t_ms, began, reply, received, intake)
        } else {
            // A profile's body is written and gunzipped as it arrives.
            let mut intake = match new_intake(self) {
                Ok(intake) => intake,
                Err(e) => return Some(Err(e)),
            };
            let t_ms = self.clock.unix_ms();
            let began = self.clock.now();
            let tap = intake.as_mut().map(|i| i as &mut dyn BodyTap);
            let Some(fetched) = self.fetch(want, timeout, tap).await else {
                if let Some(intake) = intake {
                    intake.abandon().await;
                }
                return None;
            };
            (t_ms, began, fetched, self.clock.now(), intake)
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.summary.attempts += 1;
        self.last_latency = received - began;
        let mut record = CaptureRecord::new(seq, kind, self.cycles.current(), t_ms);
        record.latency_ms = ms(received - began);
        if fetched.is_ok() {
            let cost = match want {
                Want::Heap => Some(&mut self.heap_cost),
                Want::Goroutine => Some(&mut self.goroutine_cost),
                _ => None,
            };
            if let Some(cost) = cost {
                cost.add(received - began);
            }
            if self.reads_ahead(want, began, upcoming) {
                self.read_ahead();
            }
        }
        record.interval_ms = Some(interval.as_millis() as u64);
        Some(
            self.record_reply(want, fetched, intake, record, began, received, observer)
                .await,
        )
    }

    /// Takes in a profile's body as it arrives: its temporary file, named for `seq`, and its
    /// gunzip.
    pub(super) fn intake(&mut self, seq: u64, kind: RecordKind) -> Result<Intake, StoreError> {
        let temp = self
            .writer()
            .temp_path(&format!("{seq:06}-{}.partial", kind.as_str()))?;
        Ok(Intake::new(
            temp,
            self.writer().publisher(),
            self.clock.clone(),
            self.config.decode.max_decompressed,
        ))
    }

    /// Checks a reply, makes it durable and appends its record. A profile's body went to
    /// `intake` as it arrived.
    #[allow(clippy::too_many_arguments)]
    async fn record_reply(
        &mut self,
        want: Want,
        fetched: Result<Reply, FetchError>,
        mut intake: Option<Intake>,
        mut record: CaptureRecord,
        began: Duration,
        received: Duration,
        observer: &mut impl Observer,
    ) -> Result<(), StoreError> {
        let (seq, kind) = (record.seq, record.kind);
        match fetched {
            Err(e) => {
                if let Some(intake) = intake {
                    intake.abandon().await;
                }
                self.failed(&mut record, &e, began);
            }
            Ok(reply) => {
                record.bytes = reply.bytes.len() as u64;
                record.pid = reply
                    .pid
                    .or_else(|| self.pid_probe.as_ref().and_then(MemoryProbe::current_pid));
                if let (Some(exits), Some(pid)) = (&self.exits, record.pid) {
                    exits.watch(pid);
                }
                // What the body gunzips to, from a source that made it (proc): checked and
                // summed as it is, never gunzipped again.
                let made = reply
                    .made
                    .filter(|_| matches!(want, Want::Heap | Want::Goroutine));
                let bytes: Arc<[u8]> = reply.bytes.into();
                // A profile was written under a temporary name and gunzipped on the blocking
                // pool as it arrived; its fsync runs now, while this task checks it. It gets its
                // final name only if it is whole and new: told so, the job that wrote it names
                // it as soon as its fsync is done, without waiting for this task to come back.
                if intake
                    .as_ref()
                    .is_some_and(|i| i.told() != 0 && i.told() != bytes.len() as u64)
                {
                    // The source told pieces of something other than this body: start over
                    // with the body as it is.
                    intake = Some(self.intake(seq, kind)?);
                }
                if let Some(intake) = &mut intake {
                    if made.is_some() {
                        intake.without_gunzip();
                    }
                    intake.end(&bytes);
                }
                let outcome = match want {
                    Want::MemStats => self.memstats(&mut record, &bytes),
                    Want::Stats => self.stats(&mut record, &bytes),
                    Want::Goroutine if is_stack_dump(&bytes) => {
                        self.stack_dump(&mut record, &bytes)
                    }
                    _ => {
                        let pid = record.pid;
                        let streamed = match (&mut intake, made) {
                            (_, Some(made)) => Made(made),
                            (Some(intake), None) => Gunzipped(intake.gunzipped().await),
                            (None, None) => Gunzipped(Streamed::Recheck),
                        };
                        self.profile(&mut record, bytes.clone(), pid, streamed)
                            .await
                    }
                };
                match outcome {
                    Ok(()) => {}
                    Err(Invalid(message)) => {
                        let e = FetchError::new(FailureKind::Other, message);
                        self.failed(&mut record, &e, began);
                        record.error_kind = Some(FailureKind::Invalid.as_str().into());
                    }
                }
                let publish = record
                    .file
                    .clone()
                    .filter(|_| record.dup_of.is_none() && record.is_ok());
                let name = publish
                    .as_deref()
                    .map(|f| f.trim_start_matches("profiles/").to_string());
                let written = match intake {
                    Some(intake) => Some(intake.publish(name.clone()).await),
                    None => None,
                };
                if let (Some(file), Some(name)) = (publish, name) {
                    let stored = match written {
                        Some(Ok(Some(durable_at))) => Ok(durable_at),
                        Some(Err(e)) => Err(e),
                        _ => {
                            let clock = self.clock.clone();
                            self.on_disk(move |w| {
                                w.store_profile(&name, &bytes).map(|_| clock.now())
                            })
                            .await
                        }
                    };
                    let durable_at = match stored {
                        Ok(at) => at,
                        Err(e) => {
                            record.file = None;
                            record.error = Some(e.to_string());
                            record.error_kind = Some(FailureKind::Disk.as_str().into());
                            self.summary.errors += 1;
                            let _ = self.append(record).await;
                            return Err(e);
                        }
                    };
                    record.durable_ms = Some(ms(durable_at.saturating_sub(received)));
                    self.retention.stored(&record);
                    self.last_stored
                        .insert(kind, (record.hash.clone().unwrap_or_default(), seq, file));
                    self.summary.stored += 1;
                }
            }
        }
        self.append(record.clone()).await?;
        if record.is_ok() && record.cycle > self.cycle_noted {
            self.note_cycle(&record).await?;
        }
        let named_for = self.named_for.take();
        if let Some(content) = self.to_index.take() {
            // Durable and recorded, and its cycle's build noted (its main module names the
            // sites): only now is its index entry made, off this thread.
            if let (Some(_), Some(file)) = (record.durable_ms, &record.file) {
                let path = self.root.join(file);
                let own = self.own_codes.of_cycle(record.cycle);
                let named_as_decoded =
                    named_for.is_none_or(|m| OwnCode::module(m.as_deref().unwrap_or("")) == *own);
                if named_as_decoded {
                    self.indexer.add(&record, path, content, own);
                } else {
                    self.indexer.leave_out();
                }
            }
        }
        self.pace_idle(&record);
        if record.is_ok() {
            self.summary.captures += 1;
            if record.file.is_none() {
                self.summary.figures += 1;
            }
        } else {
            self.summary.errors += 1;
        }
        self.thin().await?;
        self.status.bursting = self.bursting();
        self.status.memory = self.memory_now();
        self.status.memory_total = self
            .outside
            .as_ref()
            .map(|o| o.bytes.load(Ordering::Relaxed))
            .filter(|&b| b > 0);
        self.status.memory_total_is_rss = self
            .outside
            .as_ref()
            .is_some_and(|o| !o.from_cgroup.load(Ordering::Relaxed));
        if let Some(bytes) = self.status.memory {
            self.status.memory_point(record.t_ms, bytes as i64);
        }
        self.status.limit = self.limit();
        self.status.attempts = self.summary.attempts;
        self.status.captures = self.summary.captures;
        self.status.errors = self.summary.errors;
        if let Some(latest) = self.indexer.take_latest_heap() {
            if latest.cycle == self.status.cycle {
                self.status.heap_sites(latest.t_ms, latest.sites);
            }
        }
        observer.attempt(&record, &self.status);
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
