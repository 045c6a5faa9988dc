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
