//! Node discovery: the Go processes under a cgroup root (a whole node, or `kubepods`), each
//! with its container's cgroup and the name a user knows it by (namespace/pod/container from
//! the kubelet's files, else what the cgroup path says). Incremental: a rescan costs a few
//! reads per process, and each distinct executable is judged once.
//!
//! | file | job |
//! |---|---|
//! | `discovery.rs` | `Discovery::rescan`: the walk, the judging, what appeared and ended |
//! | `cgroups.rs` | the memory hierarchy: resolving the root, walking it, a container's memory |
//! | `goexe.rs` | is this executable Go, and which release built it (a few hundred bytes read) |
//! | `kubepath.rs` | pod UID, container id and QoS class out of a cgroup path |
//! | `pods.rs` | names from `/var/log/pods` and `/var/log/containers` |
//! | `procs.rs` | what `/proc/PID` says: the executable's identity, the namespace pid |
//! | `heap.rs` | heap in use, read out of a process's memory by the proc source |
//! | `listing.rs` | `heapwatch ps`: a rescan with each process's memory and heap |

mod cgroups;
mod discovery;
mod goexe;
mod heap;
mod kubepath;
mod listing;
mod pods;
mod procs;

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;
use thiserror::Error;

pub use cgroups::{ContainerMemory, Hierarchy};
pub use discovery::{DEFAULT_PODS_DIR, Discovery, Options, Scan, Walk};
pub use goexe::{ExeKind, judge as judge_executable};
pub use heap::heap_in_use;
pub use kubepath::{Level as CgroupLevel, QosClass, level as cgroup_level};
pub use listing::{Listing, Row, list};
pub use pods::KubeName;

#[derive(Debug, Error)]
pub enum NodeError {
    #[error("{path}: {why}")]
    Root { path: PathBuf, why: String },
    #[error(
        "no memory cgroup hierarchy found (neither /sys/fs/cgroup/memory nor a cgroup2 mount \
         with the memory controller); give its path with --cgroup-root"
    )]
    NoHierarchy,
    #[error("cgroup {path} vanished while it was read (its container ended)")]
    Vanished { path: PathBuf },
    #[error("{path}: not a memory cgroup (no memory.current or memory.usage_in_bytes)")]
    NotMemory { path: PathBuf },
}

/// Something discovery met and went past: worth telling, never fatal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    pub kind: NoteKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoteKind {
    /// A cgroup was removed between being listed and being read.
    Vanished,
    /// A process replaced its executable (`execve`), keeping its pid.
    Exec,
    /// An entry of the pods or containers directory that does not follow the kubelet's layout.
    GarbageName,
    /// Processes heapwatch cannot see, or heapwatch's own namespace hides the node's.
    PidNamespace,
    /// A process's executable could not be judged (permission, I/O).
    Unreadable,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A cgroup that holds Go processes: a container, on a Kubernetes node.
#[derive(Debug, Clone)]
pub struct Container {
    /// The cgroup's directory.
    pub cgroup: PathBuf,
    /// Its path inside the hierarchy (`/kubepods/burstable/pod…/…`), as `/proc/PID/cgroup`
    /// writes it.
    pub path: String,
    /// Cgroup v2 (`memory.max`) rather than v1 (`memory.limit_in_bytes`).
    pub v2: bool,
    pub kube: Option<KubeName>,
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    pub qos: Option<QosClass>,
}

impl Container {
    /// Usage, limit, anonymous memory and OOM kills now.
    pub fn memory(&self, hierarchy: &Hierarchy) -> Result<ContainerMemory, NodeError> {
        cgroups::read_memory(&self.cgroup, hierarchy)
    }
}

/// A Go process discovery found.
#[derive(Debug, Clone)]
pub struct GoProcess {
    pub pid: u32,
    /// Its pid inside its own PID namespace (a container's main process is 1 there), when that
    /// differs from `pid`.
    pub ns_pid: Option<u32>,
    /// `/proc/PID/stat` start time in clock ticks: with the pid, which process this is.
    pub start_ticks: u64,
    /// The executable, as the process sees its file system.
    pub exe: String,
    /// The Go release that built it, when its build info says.
    pub go_version: Option<String>,
    pub container: std::sync::Arc<Container>,
}

impl GoProcess {
    /// The executable's base name, without the ` (deleted)` of a replaced file.
    pub fn exe_name(&self) -> &str {
        let base = self.exe.rsplit('/').next().unwrap_or(&self.exe);
        base.strip_suffix(" (deleted)").unwrap_or(base)
    }

    /// The name a user knows it by: `namespace/pod/container` where the kubelet's files say;
    /// `pod:UID/CID` from the cgroup path alone; else the cgroup path and the executable.
    pub fn name(&self) -> String {
        let c = &self.container;
        let short_cid = c.container_id.as_deref().map(|id| &id[..12.min(id.len())]);
        let last = || short_cid.unwrap_or(self.exe_name()).to_string();
        match (&c.kube, &c.pod_uid) {
            (Some(k), _) => format!(
                "{}/{}/{}",
                k.namespace,
                k.pod,
                k.container.clone().unwrap_or_else(last)
            ),
            (None, Some(uid)) => format!("pod:{uid}/{}", last()),
            (None, None) => match short_cid {
                Some(cid) => format!("container:{cid}/{}", self.exe_name()),
                None => format!("{}:{}", c.path, self.exe_name()),
            },
        }
    }
}
