//! What the collector hands to tokio: requests raced against the stop (a blocking source's on
//! the blocking pool, moved there and back), sleeps on the clock, and every write of the run
//! on the blocking pool with the `RunWriter` moved there and back.

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
