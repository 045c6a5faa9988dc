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
//!
//! # Node discovery and `heapwatch ps` (`src/node/`)
//!
//! `node::Discovery` finds the Go processes under a cgroup root and names each container as a user
//! knows it; `ps` is one rescan plus figures (`node::list`), and `watch` keeps one
//! `Discovery` and rescans it every `--rescan` (500 ms).
//!
//! | file | job |
//! |---|---|
//! | `discovery.rs` | `rescan` = `walk` + `settle`: what appeared, what ended, notes |
//! | `cgroups.rs` | the hierarchy (v1 or v2, the root as a path or `kubepods`/`kubepods.slice`), the walk, a container's memory against the limit that applies |
//! | `goexe.rs` | is this executable Go, and which release (a few hundred bytes of its ELF) |
//! | `kubepath.rs`, `pods.rs` | pod UID, container id, QoS from the cgroup path; names from `/var/log/pods` and `/var/log/containers` |
//! | `procs.rs`, `heap.rs`, `listing.rs` | `/proc/PID` reads; heap in use through `ProcSource`'s public API; `ps` |
//!
//! - **From the cgroups, not from /proc.** The walk lists the cgroups under the root and reads each
//!   `cgroup.procs`. A process's container is then the cgroup it was found in, with no
//!   `/proc/PID/cgroup` to parse. A host's processes outside the root cost nothing. A cgroup
//!   directory's link count is 2 plus its subdirectories (kernfs), so leaves (every container)
//!   are never listed as directories.
//! - **Incremental.** A process is known by pid and start time. A known one costs a read of
//!   `/proc/PID/stat` and a `stat` of `/proc/PID/exe` per rescan. The `stat` compares the
//!   executable's identity (device, inode, size, mtime), which is how an `execve` into another
//!   binary is caught: pid and start time stay the same across one. Executables are judged once
//!   per identity, so the same image in a hundred pods is read once. Small kernel files are read
//!   into one reused buffer without a size query (they report 0 or 4096). Figures are in
//!   docs/benchmarks.md.
//! - **Is it Go.** `.go.buildinfo` (with the version inline since go1.18), else the
//!   `.note.go.buildid` section; without section headers (`sstrip`), the `PT_NOTE` segment and
//!   the build info at the head of the writable segment, as Go's own `debug/buildinfo` looks for
//!   it. This is the smallest reader discovery needs; the full build info (module, revision,
//!   build id) is `source/proc/binary.rs` `parse_buildinfo`, which reads the whole section, and
//!   the two could share the section lookup.
//! - **Names.** The container id's symlink in `/var/log/containers` names namespace/pod/container.
//!   Else the pod UID's directory in `/var/log/pods` names the pod, and the container when the pod
//!   has only one. Else the cgroup path gives `pod:UID/CID`, and last comes the path plus the
//!   executable. Each directory is listed again only when its mtime changes. A stamp younger than
//!   two seconds is not trusted, because two changes can share a tick of the file system clock.
//!   A container first named from its path alone is named again when the index changes: the
//!   kubelet writes the symlink a moment after the container starts.
//! - **The limit that applies** is the container's own, else the nearest ancestor's up to the
//!   mount (a pod's, or the node's allocatable on `kubepods`), with the cgroup that sets it.
//! - **Bad input is a note, never an error** (`node::Note`, with a kind):
//!   - a cgroup that vanished between the walk and the read (`walk` and `settle` are public so a
//!     test can remove one between them, and `Container::memory` on a gone cgroup is
//!     `NodeError::Vanished`);
//!   - an exec into or out of Go;
//!   - pod and container directory names that do not follow the kubelet's layout;
//!   - processes in PID namespaces heapwatch cannot see (v2 lists them as pid 0);
//!   - heapwatch itself in a nested PID namespace (`NSpid`, or pid 2 not being `kthreadd`);
//!   - executables it may not look at.
//!
//!   A process in a namespace below heapwatch's is listed with its pid there (`ns_pid`, from
//!   `NSpid`).
//! - **OOM kills on cgroup v1 are per cgroup.** `memory.oom_control`'s `oom_kill` counts in the
//!   victim's cgroup only, not the pod's (tests/cli/ps.rs pins this). A kubelet restart makes a
//!   new container cgroup and removes the old one, and the count goes with it. On v1, `watch`
//!   must read the counter of the container's cgroup while that cgroup exists. On v2,
//!   `memory.events` is hierarchical.
//! - **The node for the tests** is `tests/cli/kubenode.rs`: a real `kubepods` tree under
//!   `/sys/fs/cgroup/memory/heapwatch-node-PID-N/` in either driver's layout, the log
//!   directories, and a supervisor (`kubenode/supervisor.rs`) that restarts a container in place
//!   or as a new container. Drop removes every cgroup, and a node made later sweeps those of a
//!   test process that was killed.
//! - **Dependency: `yaml-rust2`** (dev only) reads `deploy/daemonset.yaml` in a test. It is a pure
//!   Rust YAML 1.2 parser, the maintained successor of `yaml-rust`, and gives a plain tree, which
//!   is all a manifest check needs. `serde_yaml` is archived.
//! - **The image** is `FROM scratch` around the gnu target built with `+crt-static`: ring's C,
//!   zlib-rs and glibc's resolver link statically. A static glibc binary still resolves
//!   `/etc/hosts` and DNS from an empty root (checked with a local DNS responder).
//!   `deploy/build-image.sh` checks the binary has no `PT_INTERP` and no `DT_NEEDED`.

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
