//! The rescan: walk the cgroups under the root, judge each new process once (pid and start
//! time; its executable by identity), and say which Go processes appeared and which ended
//! since the last rescan. A known process costs a read of `/proc/PID/stat` and a `stat` of its
//! executable, which also catches a process that execs into another binary.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cgroups::{self, Hierarchy, Listed};
use super::goexe::{self, ExeKind};
use super::kubepath;
use super::pods::PodsIndex;
use super::procs::{self, ExeId};
use super::{Container, GoProcess, NodeError, Note, NoteKind};
use crate::source::procfind::ProcessId;

/// Where the kubelet keeps its pod logs, on every node.
pub const DEFAULT_PODS_DIR: &str = "/var/log/pods";

/// Bounds the cache of judged executables (a node runs far fewer distinct binaries).
const MAX_EXES: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The cgroup whose subtree is searched; `None` for the whole memory hierarchy.
    pub cgroup_root: Option<PathBuf>,
    /// The kubelet's pods directory; `None` for `/var/log/pods`.
    pub pods_dir: Option<PathBuf>,
}

/// What one rescan found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every Go process under the root now, by name then pid.
    pub processes: Vec<GoProcess>,
    /// Go processes not there at the previous rescan (all of them at the first).
    pub appeared: Vec<ProcessId>,
    /// Go processes there at the previous rescan and gone now (ended, or exec'd into
    /// something else).
    pub ended: Vec<ProcessId>,
    /// Processes seen, Go or not (this PID namespace's view).
    pub seen: usize,
    pub notes: Vec<Note>,
}

/// What is remembered of a process between rescans.
#[derive(Debug, Clone)]
struct Known {
    start_ticks: u64,
    /// `None` for a kernel thread, or one whose executable could not be looked at (yet: it
    /// is looked at again at every rescan, a kernel thread never).
    exe: Option<ExeId>,
    /// A kernel thread: it never gains an executable.
    kernel: bool,
    /// Set when it runs Go.
    go: Option<GoProcess>,
}

/// Discovery's state: the hierarchy, what it knows of each process and executable.
#[derive(Debug)]
pub struct Discovery {
    hierarchy: Hierarchy,
    pods: PodsIndex,
    exes: HashMap<ExeId, ExeKind>,
    known: HashMap<u32, Known>,
    containers: HashMap<PathBuf, Arc<Container>>,
    me: u32,
    rescans: u64,
    /// Reused for every small read.
    buf: Vec<u8>,
}

impl Discovery {
    pub fn new(options: &Options) -> Result<Discovery, NodeError> {
        let hierarchy = Hierarchy::resolve(options.cgroup_root.as_deref())?;
        let pods_dir = options
            .pods_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PODS_DIR));
        Ok(Discovery {
            hierarchy,
            pods: PodsIndex::new(&pods_dir),
            exes: HashMap::new(),
            known: HashMap::new(),
            containers: HashMap::new(),
            me: std::process::id(),
            rescans: 0,
            buf: Vec::with_capacity(4096),
        })
    }

    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    pub fn pods_dir(&self) -> &Path {
        self.pods.pods_dir()
    }

    /// Walks and judges: the Go processes under the root now.
    pub fn rescan(&mut self) -> Scan {
        let walk = self.walk();
        self.settle(walk)
    }

    /// The first half of a rescan: every cgroup under the root that holds processes. A cgroup
    /// removed before [`settle`](Self::settle) reads it is reported there.
    pub fn walk(&mut self) -> Walk {
        let mut notes = Vec::new();
        let listed = cgroups::walk(&self.hierarchy.root, &mut notes);
        Walk { listed, notes }
    }

    /// The second half: judges the processes a walk listed against what is known.
    pub fn settle(&mut self, walk: Walk) -> Scan {
        let mut scan = Scan {
            notes: walk.notes,
            ..Scan::default()
        };
        if self.rescans == 0 {
            scan.notes.extend(own_namespace_note());
        }
        self.rescans += 1;
        if self.pods.refresh(&mut scan.notes) {
            self.rename();
        }
        let mut present = HashSet::new();
        let mut invisible = 0;
        let mut denied = Vec::new();
        for Listed { dir, pids } in walk.listed {
            let mut any_alive = false;
            for pid in pids {
                if pid == 0 {
                    invisible += 1;
                    continue;
                }
                if pid == self.me {
                    any_alive = true;
                    continue;
                }
                let Some(id) = procs::process_id(pid, &mut self.buf) else {
                    continue;
                };
                any_alive = true;
                scan.seen += 1;
                present.insert(pid);
                self.judge(id, &dir, &mut scan, &mut denied);
            }
            if !any_alive && !dir.is_dir() {
                scan.notes.push(Note {
                    kind: NoteKind::Vanished,
                    message: format!(
                        "cgroup {} vanished while it was read (its container ended)",
                        dir.display()
                    ),
                });
            }
        }
        // Whatever was known and is no longer listed has ended (or left the root).
        let gone: Vec<u32> = self
            .known
            .keys()
            .copied()
            .filter(|pid| !present.contains(pid))
            .collect();
        for pid in gone {
            if let Some(Known { go: Some(p), .. }) = self.known.remove(&pid) {
                scan.ended.push(ProcessId {
                    pid,
                    start_ticks: p.start_ticks,
                });
            }
        }
        let used: HashSet<PathBuf> = self
            .known
            .values()
            .filter_map(|k| k.go.as_ref().map(|g| g.container.cgroup.clone()))
            .collect();
        self.containers.retain(|dir, _| used.contains(dir));
        if invisible > 0 {
            scan.notes.push(Note {
                kind: NoteKind::PidNamespace,
                message: format!(
                    "{invisible} process(es) under {} are outside heapwatch's PID namespace and \
                     cannot be read: run it in the host's (hostPID: true)",
                    self.hierarchy.root.display()
                ),
            });
        }
        if !denied.is_empty() {
            scan.notes.push(Note {
                kind: NoteKind::Unreadable,
                message: format!(
                    "could not look at the executable of {} process(es) (pid {}): permission \
                     denied; heapwatch needs root or CAP_SYS_PTRACE",
                    denied.len(),
                    denied
                        .iter()
                        .take(5)
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        scan.processes = self.known.values().filter_map(|k| k.go.clone()).collect();
        scan.processes.sort_by_cached_key(|p| (p.name(), p.pid));
        scan
    }

    /// Judges one live process found in `dir`, updating what is known of it.
    fn judge(&mut self, id: ProcessId, dir: &Path, scan: &mut Scan, denied: &mut Vec<u32>) {
        let pid = id.pid;
        let known = self
            .known
            .get(&pid)
            .filter(|k| k.start_ticks == id.start_ticks)
            .cloned();
        if known.is_none() {
            // A pid reused by a new process: the old one ended.
            if let Some(Known { go: Some(old), .. }) = self.known.remove(&pid) {
                scan.ended.push(ProcessId {
                    pid,
                    start_ticks: old.start_ticks,
                });
            }
        }
        // A kernel thread never gains an executable; skip the stat for it.
        if let Some(Known { kernel: true, .. }) = &known {
            return;
        }
        // No executable: a kernel thread, a process gone meanwhile, or one we may not look at.
        let exe = match procs::exe_id(pid) {
            Ok(exe) => Some(exe),
            Err(e) => {
                if e.kind() == io::ErrorKind::PermissionDenied && known.is_none() {
                    denied.push(pid);
                }
                None
            }
        };
        if let Some(k) = &known {
            if k.exe == exe {
                if let Some(go) = &k.go {
                    if go.container.cgroup != dir {
                        // Moved to another cgroup (rare, but a supervisor may do it).
                        let moved = GoProcess {
                            container: self.container(dir),
                            ..go.clone()
                        };
                        if let Some(k) = self.known.get_mut(&pid) {
                            k.go = Some(moved);
                        }
                    }
                }
                return;
            }
        }
        let (exe, kind) = match exe {
            Some(exe) => match self.kind_of(pid, exe, scan) {
                Some(judged) => (Some(judged.0), judged.1),
                // Not judged (gone meanwhile, or unreadable): looked at afresh next time.
                None => {
                    self.known.remove(&pid);
                    return;
                }
            },
            None => (None, ExeKind::NotGo),
        };
        let go = match kind {
            ExeKind::Go { version } => {
                let path = procs::exe_path(pid);
                Some(GoProcess {
                    pid,
                    ns_pid: procs::own_ns_pid(pid),
                    start_ticks: id.start_ticks,
                    container: self.container(dir),
                    exe: path,
                    go_version: version,
                })
            }
            ExeKind::NotGo => None,
        };
        if let Some(k) = &known {
            // Same process, another executable: it called execve. Told when Go is involved
            // (a shell exec'ing its command is every container's start).
            let was = k.go.as_ref().map(|g| g.exe.as_str());
            let now = go.as_ref().map(|g| g.exe.as_str());
            if was.is_some() || now.is_some() {
                scan.notes.push(Note {
                    kind: NoteKind::Exec,
                    message: exec_words(pid, was, now),
                });
            }
            if k.go.is_some() {
                scan.ended.push(id);
            }
        }
        if go.is_some() {
            scan.appeared.push(id);
        }
        let kernel = exe.is_none() && procs::is_kernel_thread(pid);
        self.known.insert(
            pid,
            Known {
                start_ticks: id.start_ticks,
                exe,
                kernel,
                go,
            },
        );
    }

    /// Whether this executable is Go, judged once per file, with the identity of the file
    /// judged (`stat` named `exe`; a file opened afresh may be another if the process exec'd
    /// meanwhile, and is cached under its own identity); `None` when it could not be read.
    fn kind_of(&mut self, pid: u32, exe: ExeId, scan: &mut Scan) -> Option<(ExeId, ExeKind)> {
        if let Some(kind) = self.exes.get(&exe) {
            return Some((exe, kind.clone()));
        }
        let judged = procs::open_exe(pid)
            .and_then(|(file, opened)| goexe::judge(&file).map(|kind| (opened, kind)));
        let (opened, kind) = match judged {
            Ok(judged) => judged,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    scan.notes.push(Note {
                        kind: NoteKind::Unreadable,
                        message: format!(
                            "process {pid}: could not read its executable {}: {e}",
                            procs::exe_path(pid)
                        ),
                    });
                }
                return None;
            }
        };
        if self.exes.len() >= MAX_EXES {
            self.exes.clear();
        }
        self.exes.insert(opened, kind.clone());
        Some((opened, kind))
    }

    /// Names again the containers first named by their cgroup path alone (the kubelet writes
    /// a container's symlink a moment after it starts).
    fn rename(&mut self) {
        self.containers
            .retain(|_, c| c.kube.as_ref().is_some_and(|k| k.container.is_some()));
        let pids: Vec<u32> = self
            .known
            .iter()
            .filter(|(_, k)| {
                k.go.as_ref()
                    .is_some_and(|g| !self.containers.contains_key(&g.container.cgroup))
            })
            .map(|(&pid, _)| pid)
            .collect();
        for pid in pids {
            let Some(dir) = self.known[&pid]
                .go
                .as_ref()
                .map(|g| g.container.cgroup.clone())
            else {
                continue;
            };
            let container = self.container(&dir);
            if let Some(go) = self.known.get_mut(&pid).and_then(|k| k.go.as_mut()) {
                go.container = container;
            }
        }
    }

    /// The container a cgroup directory is, named once.
    fn container(&mut self, dir: &Path) -> Arc<Container> {
        if let Some(c) = self.containers.get(dir) {
            return c.clone();
        }
        let path = self.hierarchy.path_of(dir);
        let facts = kubepath::parse(&path);
        let kube = self.pods.name(&facts);
        let container = Arc::new(Container {
            cgroup: dir.to_path_buf(),
            path,
            v2: self.hierarchy.v2,
            kube,
            pod_uid: facts.pod_uid,
            container_id: facts.container_id,
            qos: facts.qos,
        });
        self.containers.insert(dir.to_path_buf(), container.clone());
        container
    }
}

/// A walk's listing, between the two halves of a rescan.
#[derive(Debug)]
pub struct Walk {
    listed: Vec<Listed>,
    notes: Vec<Note>,
}

fn exec_words(pid: u32, was: Option<&str>, now: Option<&str>) -> String {
    match (was, now) {
        (Some(was), Some(now)) => {
            format!(
                "process {pid} exec'd from Go program {was} into Go program {now}: a new program to watch"
            )
        }
        (Some(was), None) => format!(
            "process {pid} exec'd from Go program {was} into {}: no longer a Go process, no longer read",
            procs::exe_path(pid)
        ),
        (None, Some(now)) => format!("process {pid} exec'd into Go program {now}: now watched"),
        (None, None) => format!("process {pid} exec'd into another program (not Go)"),
    }
}

/// When heapwatch itself runs in a PID namespace below the node's (a container without
/// hostPID), it sees only that namespace's processes: said once. Two signs: `NSpid` lists more
/// than one pid (the host's /proc is mounted), or pid 2 is not the kernel's `kthreadd` (every
/// kernel thread lives in the host's namespace only).
fn own_namespace_note() -> Option<Note> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let pids = procs::ns_pids(&status);
    let nested = pids.len() > 1 || !procs::is_kernel_thread(2);
    nested.then(|| Note {
        kind: NoteKind::PidNamespace,
        message: format!(
            "heapwatch runs in a PID namespace of its own (it is pid {} there): it sees only \
             the processes of that namespace; run it with hostPID: true to see the node's",
            pids.last().copied().unwrap_or_else(std::process::id)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prerequisite::{Need, skip};

    #[test]
    fn a_process_whose_executable_could_not_be_looked_at_is_looked_at_again() {
        let mut discovery = match Discovery::new(&Options::default()) {
            Ok(d) => d,
            Err(e) => {
                skip(Need::Root, &format!("no memory cgroup hierarchy: {e}"));
                return;
            }
        };
        let me = std::process::id();
        let mut buf = Vec::new();
        let id = procs::process_id(me, &mut buf).unwrap();
        // Remembered as unreadable (a permission denied, say) at an earlier rescan.
        discovery.known.insert(
            me,
            Known {
                start_ticks: id.start_ticks,
                exe: None,
                kernel: false,
                go: None,
            },
        );
        let (mut scan, mut denied) = (Scan::default(), Vec::new());
        discovery.judge(id, Path::new("/"), &mut scan, &mut denied);
        let known = &discovery.known[&me];
        assert_eq!(known.exe, procs::exe_id(me).ok(), "looked at again");
        assert!(!known.kernel && known.go.is_none(), "judged: not Go");

        // A kernel thread (kthreadd, pid 2 in the host's namespace) is remembered as one.
        if procs::is_kernel_thread(2) {
            let kthreadd = procs::process_id(2, &mut buf).unwrap();
            discovery.judge(kthreadd, Path::new("/"), &mut scan, &mut denied);
            let known = &discovery.known[&2];
            assert!(known.kernel && known.exe.is_none());
        }
    }
}
