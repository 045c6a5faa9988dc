//! `heapwatch run`: start a command under a memory limit, record it through the proc source
//! from its first milliseconds, write how each process ended, and restart it as a kubelet
//! would. An OOM loop reproduced in one command; the CLI only turns flags into this.

pub mod child;
pub mod confinement;
pub mod hold;
mod record;

use std::io;

use thiserror::Error;

use crate::source::cgroup::CgroupError;

pub use child::{Death, Ending, Launch, LifeEvent, RestartOn, RestartPolicy};
pub use confinement::Confinement;
pub use record::{Recording, RecordingOutcome, SubRun, record};

#[derive(Debug, Error)]
pub enum LaunchError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("{program}: cannot start it: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("waiting for pid {pid}: {source}")]
    Wait { pid: u32, source: io::Error },
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    /// The OOM hold's guardian could not put the cgroup's file back as it found it.
    #[error("{}: cannot put {value} back: {source}", .file.display())]
    PutBack {
        file: std::path::PathBuf,
        value: String,
        source: io::Error,
    },
}
