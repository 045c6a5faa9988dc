//! A second, best-effort copy of a run in Grafana Pyroscope: every stored capture goes to
//! the server's push API (`push.v1.PusherService/Push` over the connect protocol), in batches,
//! each capture a point in time: in-use figures as captured, allocation figures as the change
//! since the previous capture of its boot cycle. The run directory stays the truth;
//! `pushes.jsonl` beside the manifest records each capture's outcome per server.
//!
//! The pieces, in the order a capture meets them: the [`spool`] (what is still to send: the
//! manifest's stored captures less the outcomes already in `pushes.jsonl`), [`prepare`] (the
//! [`delta`] of its allocation figures, its time), the [`labels`] (with the run's kept
//! [`settings`]), the [`connect`] client and its classification of answers, and the pusher
//! (`driver.rs`) that batches, keeps several requests in flight, retries failures with
//! backoff and jitter and records outcomes. [`push_run`] sends a finished run; [`start`] runs
//! the same loop beside a live collector.
//!
//! # The Pyroscope push (`src/push/`)
//!
//! The push is a second, best-effort copy of a run in Pyroscope ([docs/pyroscope.md](pyroscope.md)).
//! Its stages, in the order a capture meets them:
//!
//! | stage | file | takes → gives |
//! |---|---|---|
//! | spool | `push/spool.rs` | manifest records (`CaptureRecord`) → `Pending` captures, oldest first; each boot cycle's heap captures in order (the delta bases) |
//! | settings | `push/settings.rs` | run.json's kept labels + the command's flags → `LabelOptions` (written back when changed) |
//! | prepare | `push/prepare.rs`, `push/delta.rs` | stored file (+ the cycle's previous capture) → the profile to send: `alloc_*` as deltas, its time set |
//! | labels | `push/labels.rs` | `RunInfo`, `cycle` records, the executable → `LabelPair`s and a stable capture id |
//! | wire | `push/wire.rs` | a batch of (labels, profile, id) → one encoded `PushRequest` |
//! | connect | `push/connect.rs` | body → `Answer` (delivered, refused, rejected, failed) |
//! | pusher | `push/driver.rs`, `push/outcomes.rs`, `push/pusher.rs` | the loop: batches, requests in flight, retries; answers into outcomes in `pushes.jsonl` (`push/journal.rs`) |
//!
//! `heapwatch push` (`src/cli/push.rs`) turns flags into a `Destination` and `PushOptions` and
//! calls `push::push_run`. The live collector (`collect --push`, `src/cli/collect_push.rs`)
//! calls `push::start` once, on a current-thread tokio runtime on a thread of its own, and hands
//! the collector's `RunWriter` an `Enqueuer` that receives each manifest record after it is
//! durable (never waits: an unbounded channel of small records; the profile stays on disk). At
//! exit `PushHandle::drain(bound)` returns the figures for the one-line report and leaves what is
//! unsent for the next start. Both commands share their flags and their translation
//! (`src/cli/push_flags.rs`).
//!
//! The hook is the manifest writer (`RunWriter::on_append`, called right after a line's fsync),
//! not the collector's `Observer`: the observer is told about capture attempts only, while the
//! push also needs the `delete` records of retention (a capture thinned for `--max-disk` before
//! it was sent is not sent, and not reported unreadable) and the `cycle` records that carry the
//! build for the labels. Every record the run makes durable passes through `append`, whoever
//! writes it, so nothing in `src/collect` knows about the push. The `Enqueuer` holds a weak
//! sender: once the drain begins, a record still sent is left to the spool instead of holding
//! the push open. When the drain ends, the figure of what is left unsent is the spool a fresh
//! start would derive (records the collector sent after the drain began never reached the loop).
//!
//! ## Batches and requests in flight
//!
//! Pyroscope v2 answers once the segment holding a push is flushed (500 ms): one capture per
//! request, one at a time, was 2 captures/s. A request carries up to 64 captures and 1 MiB of
//! profile before gzip (half Pyroscope's default `-distributor.ingestion-burst-size-mb=2`, above
//! which a single request is refused by the rate limiter whatever the rate), consecutive
//! captures with the same labels sharing a series; up to four are in flight (tokio tasks in a
//! `JoinSet`, reqwest pooling a connection each). Captures are prepared (`prepare.rs`, on the
//! blocking pool, in seq order per cycle because of the delta chain) up to 256 ahead. Order
//! between requests does not matter: every profile is self-contained. A refused batch is sent
//! again capture by capture (Pyroscope validates every profile before it stores any, so a
//! refused request stored nothing). While the server fails, one request probes at a time and
//! nothing more is prepared, so a long outage holds at most one batch in memory and retention
//! can still thin the rest.
//!
//! A request is never cancelled. A drain stops *sending* at its bound and waits for the
//! requests in flight (each bounded by `--push-timeout`; a request still unanswered a second
//! past that is dropped and its captures journalled `unanswered`, and so, from the handle, if
//! the loop itself never returns). A capture any attempt of which went out and got no answer (a
//! timeout, a connection closed after the request) and that is not delivered when the push ends
//! — drain, `--retry-for`, rejection — is journalled `unanswered` and not sent again until
//! `--retry-unanswered`: Pyroscope does not deduplicate, and a capture stored twice shows twice
//! its figures. The mark is kept through later attempts: a retry refused a connection does not
//! make the first attempt's arrival less likely. In the middle of a push a timeout is retried,
//! as usual (the default timeout is 20× Pyroscope's answer time). A kill is still at-least-once, now up to the four batches in
//! flight: journalling an intent before each request would make every kill during an outage
//! leave captures needing `--retry-unanswered`, a worse default for the common case.
//!
//! ## What is refused, what is retried
//!
//! `connect::classify` decides, from connect's error code when the body has one (more precise
//! than the status: a proxy's 503 has none) and the status otherwise:
//!
//! - refused, final, recorded per capture: 4xx about the request (Pyroscope's 400
//!   "outside of ingestion window", a profile too large). Sending it again would be refused again.
//!   A refused batch is first sent again capture by capture, to learn which ones.
//! - retried with exponential backoff and equal jitter (a wait in `[d/2, d]`, d doubling from 250 ms
//!   to `--retry-max`): 5xx, 408, 429, resets, timeouts, refused connections; `Retry-After` is
//!   honoured. 429 and 408 are 4xx but say "not now", not "never".
//! - rejected, the push stops: 401 and 403 (credentials), 404, 405, 415, 501 or a 200 that is not
//!   a connect reply (not a push API), a certificate that does not verify. These say nothing about
//!   the captures, so nothing is recorded against them: fixing the flags and running again sends
//!   everything.
//!
//! ## Small things written by hand
//!
//! - The capture id: xxh3-128 (already a dependency) of the run's target and start and the
//!   capture's seq and file, formatted as a version-8 UUID — no `uuid` crate for one format call.
//! - The jitter: splitmix64 seeded from the standard library's `RandomState` — spread, not
//!   secrecy, so no `rand`.
//! - protox-parse (already in the tree through protox) is a dev-dependency only, for the schema
//!   test.
//! - Wall-clock time (`src/time.rs`, the one home of it): now in unix ms/ns, one RFC 3339 parser
//!   (a whole field for Kubernetes files and `--at`; the timestamp at the start of a log line for
//!   `--mark`) and the three forms heapwatch writes (`2024-05-02T10:31:07Z`, with `.123`, and
//!   `2024-05-02 10:31:07 UTC` in reports). Hand-written on the civil-from-days algorithm, not
//!   `jiff`: every time heapwatch reads is UTC or carries its offset, so no time-zone database is
//!   needed, and ~200 lines with their tests cost less than a dependency's build on every machine.

pub mod connect;
pub mod delta;
mod driver;
pub mod journal;
pub mod labels;
pub mod prepare;
mod pusher;
pub mod settings;
pub mod spool;
pub mod wire;

use std::path::PathBuf;

use thiserror::Error;

pub use connect::{Answer, ConnectClient, Destination, Refusal, Transport};
pub use driver::{BATCH_BYTES, BATCH_CAPTURES, IN_FLIGHT};
pub use journal::{Outcome, PUSHES_FILE, PushRecord};
pub use labels::{LabelOptions, ServiceSource};
pub use pusher::{
    Backoff, DrainFigures, Enqueuer, FailingNotice, PushHandle, PushOptions, PushStats, push_run,
    start,
};
pub use settings::LabelFlags;
pub use spool::Retry;

#[derive(Debug, Error)]
pub enum PushError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Run { path: PathBuf, why: String },
    #[error("{0}")]
    Config(String),
}

impl PushError {
    fn io(path: &std::path::Path, source: std::io::Error) -> PushError {
        PushError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
