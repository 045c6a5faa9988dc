//! What the pusher does with each answer: settle the captures of a delivered or refused
//! request in the journal, send a refused batch's captures again one by one, back off after a
//! failure, and at the end record what went unanswered.

use std::time::Duration;

use tokio::time::Instant;

use super::{Failing, Flight, Outgoing, Pusher, Stop};
use crate::push::PushError;
use crate::push::connect::{Answer, Refusal, Transport};
use crate::push::journal::{Outcome, PushRecord};

impl<T: Transport> Pusher<T> {
    pub(super) async fn answered(&mut self, flight: u64, answer: Answer) -> Result<(), PushError> {
        self.in_air_records.lock().remove(&flight);
        let Some(Flight { captures, sent }) = self.in_air.remove(&flight) else {
            return Ok(());
        };
        self.update(|s| {
            s.requests += 1;
            s.answer_time += sent.elapsed();
        });
        match answer {
            Answer::Delivered { status } => {
                if self.failing.take().is_some() {
                    self.update(|s| s.last_failure = None);
                }
                self.last_progress = Instant::now();
                let n = captures.len() as u64;
                let records = captures
                    .iter()
                    .map(|c| self.record(c, Outcome::Delivered, status, None))
                    .collect();
                self.spool.settle(records).await?;
                self.update(|s| {
                    s.delivered += n;
                    if let Some(drain) = &mut s.drain {
                        drain.delivered += n;
                    }
                });
            }
            Answer::Refused(refusal) if captures.len() > 1 => {
                // One bad profile refuses the whole request: each goes again alone.
                self.failing = None;
                for mut capture in captures {
                    capture.alone = true;
                    self.ready.insert(capture.ready.pending.seq, capture);
                }
                let _ = refusal;
            }
            Answer::Refused(refusal) => {
                self.failing = None;
                self.last_progress = Instant::now();
                let records = captures
                    .iter()
                    .map(|c| self.record(c, Outcome::Refused, refusal.status, Some(&refusal)))
                    .collect();
                self.spool.settle(records).await?;
                self.update(|s| s.refused_one(&refusal));
            }
            Answer::Rejected(refusal) => {
                self.stop = Some(Stop::Rejected);
                self.update(|s| s.rejected = Some(refusal));
            }
            Answer::Failed {
                why,
                retry_after,
                maybe_arrived,
            } => {
                self.failed(captures, why, retry_after, maybe_arrived)
                    .await?
            }
        }
        Ok(())
    }

    async fn failed(
        &mut self,
        captures: Vec<Outgoing>,
        why: String,
        retry_after: Option<Duration>,
        maybe_arrived: bool,
    ) -> Result<(), PushError> {
        self.update(|s| s.last_failure = Some(why.clone()));
        if self.stop.is_some() {
            // The push is ending: what may have arrived, at this attempt or an earlier one,
            // is recorded so, never sent blind; the rest stays in the spool.
            let (maybe, _): (Vec<Outgoing>, Vec<Outgoing>) = captures
                .into_iter()
                .partition(|c| maybe_arrived || c.unanswered.is_some());
            self.record_unanswered(maybe, &why).await?;
            return Ok(());
        }
        let attempts = match &self.failing {
            Some(f) => f.attempts + 1,
            None => {
                if let Some(tell) = &self.options.on_failing {
                    tell(&why);
                }
                1
            }
        };
        let mut wait = self.options.backoff.wait(attempts, &mut self.jitter);
        if let Some(asked) = retry_after {
            wait = wait.max(asked.min(Duration::from_secs(300)));
        }
        self.update(|s| s.retries += 1);
        self.failing = Some(Failing {
            attempts,
            until: Instant::now() + wait,
        });
        for mut capture in captures {
            if maybe_arrived {
                capture.unanswered = Some(why.clone());
            }
            self.ready.insert(capture.ready.pending.seq, capture);
        }
        Ok(())
    }

    /// The requests still in the air when the drain's wait for them is over: each capture is
    /// recorded as maybe delivered (the server may have it), never left to be sent again
    /// blindly; the requests are dropped.
    pub(super) async fn give_up_waiting(&mut self) -> Result<(), PushError> {
        self.flights.abort_all();
        let flights: Vec<u64> = self.in_air.keys().copied().collect();
        let why = format!(
            "no answer within {:?} after the drain's end",
            self.options.request_timeout
        );
        for flight in flights {
            self.in_air_records.lock().remove(&flight);
            if let Some(Flight { captures, .. }) = self.in_air.remove(&flight) {
                self.record_unanswered(captures, &why).await?;
            }
        }
        Ok(())
    }

    async fn record_unanswered(
        &mut self,
        captures: Vec<Outgoing>,
        why: &str,
    ) -> Result<(), PushError> {
        if captures.is_empty() {
            return Ok(());
        }
        let refusal = Refusal {
            status: 0,
            code: None,
            message: why.to_string(),
        };
        let n = captures.len() as u64;
        let records = captures
            .iter()
            .map(|c| self.record(c, Outcome::Unanswered, 0, Some(&refusal)))
            .collect();
        self.spool.settle(records).await?;
        self.update(|s| s.unanswered += n);
        Ok(())
    }

    pub(super) fn record(
        &self,
        capture: &Outgoing,
        outcome: Outcome,
        status: u16,
        refusal: Option<&Refusal>,
    ) -> PushRecord {
        let pending = &capture.ready.pending;
        PushRecord {
            seq: pending.seq,
            file: pending.file.clone(),
            to: self.spool.server().to.clone(),
            tenant: self.spool.server().tenant.clone(),
            id: capture.id.clone(),
            outcome,
            status,
            code: refusal.and_then(|r| r.code.clone()),
            message: refusal.map(|r| r.message.clone()),
            attempts: capture.attempts,
            t_ms: crate::time::now_ms(),
            restamped: self.options.restamp,
        }
    }

    /// The end: captures with an attempt unanswered are recorded so (a later push
    /// asks before sending them again), the journal is synced, the figures published.
    pub(super) async fn finish(&mut self) -> Result<(), PushError> {
        let unanswered: Vec<u64> = self
            .ready
            .iter()
            .filter(|(_, c)| c.unanswered.is_some())
            .map(|(seq, _)| *seq)
            .collect();
        let mut why = String::new();
        let mut captures = Vec::new();
        for seq in unanswered {
            if let Some(c) = self.ready.remove(&seq) {
                why = c.unanswered.clone().unwrap_or_default();
                captures.push(c);
            }
        }
        self.record_unanswered(captures, &why).await?;
        self.spool.sync().await?;
        let took = self.drain.map(|(began, _)| began.elapsed());
        self.publish();
        self.update(|s| {
            if let (Some(drain), Some(took)) = (&mut s.drain, took) {
                drain.took = took;
            }
        });
        Ok(())
    }
}
