//! A second, best-effort copy of a run in Grafana Pyroscope: every stored capture goes to
//! the server's push API (`push.v1.PusherService/Push` over the connect protocol), one
//! `RawProfileSeries` per capture, with its pprof bytes as captured. The run directory stays
//! the truth; `pushes.jsonl` beside the manifest records each capture's outcome per server.
//!
//! The pieces, in the order a capture meets them: the [`spool`] (what is still to send: the
//! manifest's stored captures less the outcomes already in `pushes.jsonl`), the [`labels`],
//! an optional [`restamp`], the [`connect`] client and its classification of answers, and
//! the [`pusher`] that retries failures with backoff and jitter and records final outcomes.
//! [`push_run`] sends a finished run; [`start`] runs the same loop beside a live collector.

pub mod connect;
pub mod journal;
pub mod labels;
mod pusher;
pub mod restamp;
pub mod spool;
pub mod wire;

use std::path::PathBuf;

use thiserror::Error;

pub use connect::{Answer, ConnectClient, Destination, Refusal, Transport};
pub use journal::{Outcome, PUSHES_FILE, PushRecord};
pub use labels::LabelOptions;
pub use pusher::{
    Backoff, Enqueuer, FailingNotice, PushHandle, PushOptions, PushStats, push_run, start,
};

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
