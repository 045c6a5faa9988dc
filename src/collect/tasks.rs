//! What the collector hands to tokio: requests raced against the stop (a blocking source's on
//! the blocking pool, moved there and back), sleeps on the clock, and every write of the run
//! on the blocking pool with the `RunWriter` moved there and back.
//!
//! # The blocking pool
//!
//! Nothing that can block a thread runs on the collector's task:
//! - a source without a native async fetch (proc reads the target's memory; a test's scripted
//!   source) is moved into `spawn_blocking` for its `fetch` or `build_info` and handed back;
//! - a pprof profile is gunzipped and summed (totals, content hash) in a `spawn_blocking` job: a
//!   few ms of CPU for 1 MB, which on a shared runtime thread would hold up every other target;
//! - a profile is written and fsynced under its temporary name in a `spawn_blocking` job started
//!   as soon as its last byte arrived; the collector checks it meanwhile (totals, dedup) and
//!   sends the job its verdict on a oneshot, so the same job renames it and fsyncs the folder
//!   the moment its own fsync is done (`durable_ms` is taken there), or removes it;
//! - every manifest append (its `fdatasync`), and retention's append-then-delete, run with the
//!   `RunWriter` moved into a `spawn_blocking` job and back (`Collector::on_disk`);
//! - `agent:auto` looks through the socket folder (it asks each agent there) with its
//!   `Discovery` moved into `spawn_blocking`.
//!
//! A slow disk therefore never holds up another target's task. Within one target the next
//! request waits for the previous capture's manifest line. Finishing a capture behind the next
//! request (its line fsynced while the next request goes out, one capture in flight) was built
//! and measured (`3134f07`, with `bench/collect-durable.sh`): on a disk limited to 10 writes/s
//! it raised captures/s by 4 % but doubled `durable_ms` (the next profile's write competes with
//! the line's fsync), and on a bandwidth-limited disk it changed nothing; so a capture is
//! finished before the next request, since a capture durable sooner is the point. The one
//! exception reads rather than writes: a `proc:` heap read that is already due when the last
//! capture comes back runs while that capture is stored, its body written only after
//! (`ahead.rs`).

use std::future::Future;
use std::time::Duration;

use super::{CaptureRecord, Collector, RunWriter, StoreError};
use crate::model::build::BuildInfo;
use crate::source::{BodyTap, FetchError, Reply, Source, Want};

impl Collector {
    /// Sleeps until `wake` on the clock, until the stop is set, or until a nudge.
    /// (The future holds no borrow of the collector, which is `Send` but not `Sync`.)
    pub(super) fn sleep_or_stop(
        &self,
        wake: Duration,
    ) -> impl Future<Output = ()> + Send + 'static {
        let sleep = self.clock.sleep_until(wake);
        let stop = self.stop.clone();
        let nudge = self.nudge.clone();
        async move {
            let nudged = async {
                match nudge {
                    Some(n) => n.wait().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = sleep => {}
                () = stop.wait() => {}
                () = nudged => {}
            }
        }
    }

    /// The source, unless a request cut short by the stop still has it on the blocking pool:
    /// then the collector is stopping, and `None` says so.
    pub(super) fn source(&self) -> Option<&dyn Source> {
        self.source.as_deref()
    }

    pub(super) fn writer(&mut self) -> &mut RunWriter {
        self.writer
            .as_mut()
            .expect("the writer is back between writes")
    }

    /// Runs `work` with the run writer on tokio's blocking pool: every fsync, rename and
    /// manifest append happens there, never on the thread that paces requests.
    pub(super) async fn on_disk<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut RunWriter) -> T + Send + 'static,
    ) -> T {
        let mut writer = self
            .writer
            .take()
            .expect("the writer is back between writes");
        let (writer, out) = joined(
            tokio::task::spawn_blocking(move || {
                let out = work(&mut writer);
                (writer, out)
            })
            .await,
        );
        self.writer = Some(writer);
        out
    }

    /// Appends a manifest record and fsyncs it, on the blocking pool.
    pub(super) async fn append(&mut self, record: CaptureRecord) -> Result<(), StoreError> {
        self.on_disk(move |w| w.append(&record)).await
    }

    /// One request, raced against the stop. `None`: the stop came first, and the request was
    /// dropped then and there (a native one is cancelled; a blocking one finishes on its
    /// thread, and its source with it, since the collector ends).
    /// `tap`, if any, is told the body's pieces as they arrive, when the source can tell them.
    pub(super) async fn fetch(
        &mut self,
        want: Want,
        timeout: Duration,
        tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Option<Result<Reply, FetchError>> {
        let stop = self.stop.clone();
        // Away only when a request cut short by the stop kept it: stopping.
        let source = self.source.as_mut()?;
        // Reborrowed for this fetch only: the source is handed back below.
        let tap = tap.map(|t| t as &mut dyn BodyTap);
        if let Some(fetching) = source.fetch_async(want, timeout, tap) {
            return tokio::select! {
                biased;
                reply = fetching => Some(reply),
                () = stop.wait() => None,
            };
        }
        let mut source = self.source.take()?;
        let mut job = tokio::task::spawn_blocking(move || {
            let reply = source.fetch(want, timeout);
            (source, reply)
        });
        tokio::select! {
            biased;
            done = &mut job => {
                let (source, reply) = joined(done);
                self.source = Some(source);
                Some(reply)
            }
            () = stop.wait() => None,
        }
    }

    /// The build of the process answering now, like [`Collector::fetch`].
    pub(super) async fn build_info(&mut self, timeout: Duration) -> Option<BuildInfo> {
        // A heap read ahead has the source: it is waited for (its reply kept for the next
        // attempt).
        self.source_back().await;
        let stop = self.stop.clone();
        let source = self.source.as_mut()?;
        if let Some(asking) = source.build_info_async(timeout) {
            return tokio::select! {
                biased;
                build = asking => build,
                () = stop.wait() => None,
            };
        }
        let mut source = self.source.take()?;
        let mut job = tokio::task::spawn_blocking(move || {
            let build = source.build_info(timeout);
            (source, build)
        });
        tokio::select! {
            biased;
            done = &mut job => {
                let (source, build) = joined(done);
                self.source = Some(source);
                build
            }
            () = stop.wait() => None,
        }
    }
}

/// What a blocking-pool job returned; its panic, if it panicked, goes on here.
pub(super) fn joined<T>(done: Result<T, tokio::task::JoinError>) -> T {
    match done {
        Ok(out) => out,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
