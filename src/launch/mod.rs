//! `heapwatch run`: start a command under a memory limit, record it through the proc source
//! from its first milliseconds, write how each process ended, and restart it as a kubelet
//! would. An OOM loop reproduced in one command; the CLI only turns flags into this.

pub mod cgroup;
pub mod child;
pub mod hold;
mod record;

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

pub use cgroup::{CgroupRoots, CgroupVersion, Confinement, MemoryCgroup};
pub use child::{Death, Ending, Launch, LifeEvent, RestartOn, RestartPolicy};
pub use record::{Recording, RecordingOutcome, SubRun, record};

#[derive(Debug, Error)]
pub enum LaunchError {
    #[error("{path}: cannot {action} the memory cgroup: {source} (cgroups need root)")]
    CgroupIo {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("{path}: {why}")]
    Cgroup { path: PathBuf, why: String },
    #[error("{program}: cannot start it: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("waiting for pid {pid}: {source}")]
    Wait { pid: u32, source: io::Error },
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
}

impl LaunchError {
    fn cgroup(path: &Path, action: &'static str, source: io::Error) -> LaunchError {
        LaunchError::CgroupIo {
            path: path.to_path_buf(),
            action,
            source,
        }
    }
}
