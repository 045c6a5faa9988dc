//! `collect … --push URL`: the live push, one per node of the run. Each pusher runs on a
//! tokio runtime on its own thread; the node's manifest writer hands it each record right
//! after the record's line is fsynced (a send on an unbounded channel: the collector never waits for the
//! network, and only the small record crosses, the profile stays on disk). At exit the
//! collector gives the push up to `--push-drain` and reports in one line what it left unsent,
//! which stays in the spool for the next `collect --push` of the run or `heapwatch push`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use heapwatch::decode::DecodeLimits;
use heapwatch::push::spool::Server;
use heapwatch::push::{self, ConnectClient, PushError, PushOptions, PushStats};
use heapwatch::store::RunWriter;
use heapwatch::units;
use tokio::sync::oneshot;

use super::CliError;
use super::push_flags::PushFlags;

/// `--push-drain` when not given.
const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub struct CollectPushFlags {
    /// Also send every stored capture, as it becomes durable, to this Pyroscope server (its
    /// push API, at URL/push.v1.PusherService/Push); user:password@ in it becomes basic
    /// auth. Never delays the local run; see docs/pyroscope.md.
    #[arg(id = "push_url", long = "push", value_name = "URL")]
    pub url: Option<String>,
    /// At exit, wait this long at most for the captures still queued for the push; what is
    /// left is sent by the next `collect --push` of the run or `heapwatch push RUN --to URL`
    /// [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration_flag)]
    pub push_drain: Option<Duration>,
    #[command(flatten)]
    pub flags: PushFlags,
}

/// A push running beside the collector.
pub struct LivePush {
    run: PathBuf,
    url: String,
    drain: Duration,
    /// Fired (or dropped) when the collector is done: the push thread starts the drain.
    done: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<PushStats, PushError>>>,
    /// What else sends what is left in the spool, said beside `heapwatch push`: the next
    /// `collect --push` of the run, or under `watch` nothing (its container directories are
    /// not collected into again by hand).
    resumed_by: Option<&'static str>,
}

impl CollectPushFlags {
    /// With `--push`, the checked flags: a bad URL, header, CA file or a push flag without
    /// `--push` is a usage error before the run directory is touched.
    pub fn prepare(&self, limits: DecodeLimits) -> Result<Option<PushSetup>, CliError> {
        let Some(url) = &self.url else {
            let mut given = self.flags.given();
            if self.push_drain.is_some() {
                given.push("--push-drain");
            }
            if let Some(flag) = given.first() {
                return Err(CliError::Usage(format!(
                    "{flag} is a push flag: give --push URL too, or drop it"
                )));
            }
            return Ok(None);
        };
        let (destination, client) = self.flags.client("--push", url)?;
        let server = destination.server();
        let options = self.flags.options(&server.to, None, limits)?;
        Ok(Some(PushSetup {
            server,
            client: Arc::new(client),
            options,
            drain: self.push_drain.unwrap_or(DEFAULT_DRAIN),
        }))
    }
}

/// A push checked and ready to start, once per node of the run.
#[derive(Clone)]
pub struct PushSetup {
    server: Server,
    client: Arc<ConnectClient>,
    options: PushOptions,
    drain: Duration,
}

/// Starts the pusher over what the run (one node's, in a cluster) already holds (a resumed
/// run's captures not yet sent go first) and has `writer` tell it about every record it makes
/// durable from now on. Call after `run.json` is written (the labels read it).
pub fn attach(
    setup: PushSetup,
    run: &Path,
    writer: RunWriter,
) -> Result<(RunWriter, LivePush), CliError> {
    let PushSetup {
        server,
        client,
        options,
        drain,
    } = setup;
    let shown = server.to.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let dir = run.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("heapwatch-push".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| PushError::Config(format!("starting the async runtime: {e}")))?;
            let pushed = runtime.block_on(async move {
                let handle = push::start(&dir, server, client, options)?;
                let _ = ready_tx.send(handle.enqueuer());
                // Dropped without a word (the collector failed): drain all the same.
                let _ = done_rx.await;
                handle.drain(drain).await
            });
            // A file read still running on the blocking pool does not hold up the exit.
            runtime.shutdown_timeout(Duration::from_secs(1));
            pushed
        })
        .map_err(|e| CliError::Usage(format!("starting the push thread: {e}")))?;
    // The push thread drops its sender unsent when it cannot start; its error is its result.
    let enqueuer = match ready_rx.recv() {
        Ok(enqueuer) => enqueuer,
        Err(_) => {
            return Err(CliError::PushStart {
                url: shown,
                source: thread.join().ok().and_then(Result::err),
            });
        }
    };
    let writer = writer.on_append(Box::new(move |record| enqueuer.enqueue(record)));
    let live = LivePush {
        run: run.to_path_buf(),
        url: shown,
        drain,
        done: Some(done_tx),
        thread: Some(thread),
        resumed_by: Some("the next `collect --push` of the run"),
    };
    Ok((writer, live))
}

/// Starts the drains of every node's push at once, then waits for each: the line of each that
/// has one to say.
pub fn finish_all(pushes: Vec<LivePush>, quiet: bool) -> Vec<String> {
    let mut pushes = pushes;
    for push in &mut pushes {
        push.begin_drain();
    }
    pushes.into_iter().filter_map(|p| p.finish(quiet)).collect()
}

impl LivePush {
    /// The push of a container `watch` records: its end-of-run lines name `heapwatch push`
    /// alone for what is left, not a next `collect --push`.
    pub fn in_watch(mut self) -> LivePush {
        self.resumed_by = None;
        self
    }

    /// Tells the push thread the collector is done: its drain starts.
    fn begin_drain(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }

    /// Waits up to `--push-drain` for what is queued, then the one line for stderr: always
    /// when something was left unsent, unanswered, refused or unreadable, or the server
    /// rejected the push; else only when `quiet` is off.
    pub fn finish(mut self, quiet: bool) -> Option<String> {
        self.begin_drain();
        let joined = self.thread.take().map(JoinHandle::join);
        let stats = match joined {
            Some(Ok(Ok(stats))) => stats,
            Some(Ok(Err(e))) => {
                return Some(format!(
                    "heapwatch: push to {} stopped: {e}; `heapwatch push {} --to {}` sends \
                     what is left",
                    self.url,
                    self.run.display(),
                    self.url
                ));
            }
            _ => {
                return Some(format!(
                    "heapwatch: the push to {} failed; `heapwatch push {} --to {}` sends what \
                     is left",
                    self.url,
                    self.run.display(),
                    self.url
                ));
            }
        };
        let troubled = stats.unsent > 0
            || stats.unanswered > 0
            || stats.refused > 0
            || stats.rejected.is_some()
            || !stats.unreadable.is_empty();
        if quiet && !troubled {
            return None;
        }
        Some(format!("heapwatch: push {}", self.line(&stats)))
    }

    fn line(&self, stats: &PushStats) -> String {
        let mut line = super::push::summary(&self.run, stats);
        if let Some(r) = &stats.rejected {
            line.push_str(&format!(
                "; the server refused the push: {r} (check --push, --push-header and \
                 --push-tenant)"
            ));
        } else if stats.unsent > 0 {
            line.push_str(&format!("; {}", self.why_unsent(stats)));
        }
        if let Some(first) = stats.unreadable.first() {
            line.push_str(&format!("; unreadable: {first}"));
        }
        if stats.unsent > 0 {
            let or = self
                .resumed_by
                .map_or(String::new(), |by| format!("{by} or "));
            line.push_str(&format!(
                "; they stay in the spool: {or}`heapwatch push {} --to {}` sends them",
                self.run.display(),
                self.url
            ));
        }
        if stats.unanswered > 0 {
            line.push_str(&format!(
                "\nheapwatch: {}",
                super::push::unanswered_advice(stats.unanswered, &self.run, &self.url)
            ));
        }
        if stats.refused > 0 {
            let message = super::push::refusal_message(&self.run, &self.url, stats, false);
            line.push_str(&format!("\nheapwatch: {message}"));
        }
        line
    }

    /// Why the drain did not send everything: the server failing, or slower than the backlog.
    fn why_unsent(&self, stats: &PushStats) -> String {
        let bound = units::format_duration(self.drain);
        let drain = stats.drain.clone().unwrap_or_default();
        let mut why = format!(
            "not sent within --push-drain {bound}: {} were unsent when the collector stopped",
            drain.queued
        );
        if drain.delivered > 0 && !drain.took.is_zero() {
            why.push_str(&format!(
                ", {} delivered in the drain ({:.1}/s)",
                drain.delivered,
                drain.delivered as f64 / drain.took.as_secs_f64()
            ));
        }
        if let Some(mean) = stats.mean_answer() {
            why.push_str(&format!(
                "; the server took {} per request on average",
                units::format_duration(Duration::from_millis(mean.as_millis() as u64))
            ));
        }
        match stats.last_failure.as_deref() {
            Some(failure) => why.push_str(&format!("; last failure: {failure}")),
            None if drain.delivered > 0 => why.push_str(
                "; the server kept answering, but the backlog (from a slow or down period \
                 earlier) was larger than the drain could send: a longer --push-drain sends it",
            ),
            None => {}
        }
        why
    }
}
