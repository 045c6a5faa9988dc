//! The memory cgroup hierarchy, v1 or v2: where the root a user names lies, the walk that
//! lists every cgroup below it with its processes, and a container's memory against the limit
//! that applies to it. A cgroup may vanish at any moment (its container ended): a read that
//! finds it gone says so instead of failing the walk.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{NodeError, Note, NoteKind};
use crate::source::cgroup::{CgroupRoots, CgroupVersion, detect};
use crate::source::procmem::{parse_counter, parse_number, read_from_start};

/// Bounds on a walk: a node has hundreds of cgroups, not hundreds of thousands.
const MAX_DEPTH: usize = 32;
const MAX_CGROUPS: usize = 100_000;
/// v1 writes "no limit" as a huge page-rounded number.
const UNLIMITED: u64 = 1 << 62;

/// The hierarchy discovery walks.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    /// Where the hierarchy is mounted (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup`): limits are
    /// looked for up to here.
    pub mount: PathBuf,
    /// The cgroup whose subtree is walked.
    pub root: PathBuf,
    pub v2: bool,
}

impl Hierarchy {
    /// The root a user named: `None` for the whole memory hierarchy; an absolute cgroup
    /// directory; or a path inside the hierarchy (`kubepods`, which is also looked for as
    /// `kubepods.slice`, the systemd driver's name).
    pub fn resolve(root: Option<&Path>) -> Result<Hierarchy, NodeError> {
        let roots = CgroupRoots::default();
        let mount = match detect(&roots) {
            Some(CgroupVersion::V1) => roots.v1,
            Some(CgroupVersion::V2) => roots.v2,
            // No usual mount: an absolute cgroup directory still names its own hierarchy.
            None => root
                .filter(|r| r.is_absolute() && is_cgroup(r))
                .map(mount_of)
                .ok_or(NodeError::NoHierarchy)?,
        };
        let Some(named) = root else {
            return Hierarchy::at(mount.clone(), mount);
        };
        if named.is_absolute() && is_cgroup(named) {
            return Hierarchy::at(mount_of(named), named.to_path_buf());
        }
        if named.is_absolute() && named.is_dir() && !named.starts_with(&mount) {
            return Err(NodeError::Root {
                path: named.to_path_buf(),
                why: format!(
                    "not a cgroup directory (no cgroup.procs); give one, such as {}, or a \
                     path inside the memory hierarchy, such as kubepods",
                    mount.join("kubepods").display()
                ),
            });
        }
        let inside = named.strip_prefix("/").unwrap_or(named);
        let mut candidates = vec![mount.join(inside)];
        if inside.extension().is_none() {
            candidates.push(mount.join(inside.with_extension("slice")));
        }
        match candidates.iter().find(|c| is_cgroup(c)) {
            Some(found) => Hierarchy::at(mount.clone(), found.clone()),
            None => Err(NodeError::Root {
                path: named.to_path_buf(),
                why: format!(
                    "no such cgroup (looked for {})",
                    candidates
                        .iter()
                        .map(|c| c.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            }),
        }
    }

    fn at(mount: PathBuf, root: PathBuf) -> Result<Hierarchy, NodeError> {
        let v2 = root.join("cgroup.controllers").is_file();
        let memory = if v2 {
            fs::read_to_string(mount.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        } else {
            root.join("memory.usage_in_bytes").is_file()
        };
        if !memory {
            return Err(NodeError::NotMemory { path: root });
        }
        Ok(Hierarchy { mount, root, v2 })
    }

    /// A cgroup's path inside the hierarchy, as `/proc/PID/cgroup` writes it.
    pub fn path_of(&self, dir: &Path) -> String {
        match dir.strip_prefix(&self.mount) {
            Ok(inside) => format!("/{}", inside.display()),
            Err(_) => dir.display().to_string(),
        }
    }
}

fn is_cgroup(dir: &Path) -> bool {
    dir.join("cgroup.procs").is_file()
}

/// The top of the hierarchy a cgroup directory belongs to: its last ancestor that is a cgroup.
fn mount_of(dir: &Path) -> PathBuf {
    let mut top = dir.to_path_buf();
    while let Some(parent) = top.parent().filter(|p| is_cgroup(p)) {
        top = parent.to_path_buf();
    }
    top
}

/// A cgroup that held processes when it was listed.
#[derive(Debug, Clone)]
pub struct Listed {
    pub dir: PathBuf,
    pub pids: Vec<u32>,
}

/// An error that means the cgroup is gone: its directory (`ENOENT`), or a file of a cgroup
/// removed after it was opened (`ENODEV`).
fn vanished(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

fn vanished_note(dir: &Path) -> Note {
    Note {
        kind: NoteKind::Vanished,
        message: format!(
            "cgroup {} vanished while it was read (its container ended)",
            dir.display()
        ),
    }
}

/// Every cgroup under `root` (itself included) that holds processes, with their pids as this
/// PID namespace sees them (0 for a process it cannot see, which cgroup v2 lists).
///
/// A cgroup directory's link count is 2 plus its subdirectories (kernfs, like most file
/// systems), so a leaf (every container) is not listed, only its `cgroup.procs` read: the
/// walk costs about one read per cgroup.
pub fn walk(root: &Path, notes: &mut Vec<Note>) -> Vec<Listed> {
    let mut listed = Vec::new();
    let mut buf = Vec::with_capacity(4096);
    let mut stack = vec![(root.to_path_buf(), 0usize, true)];
    let mut seen = 0;
    while let Some((dir, depth, has_subdirs)) = stack.pop() {
        seen += 1;
        match read_into(&dir.join("cgroup.procs"), &mut buf) {
            Ok(()) => {
                let pids: Vec<u32> = String::from_utf8_lossy(&buf)
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if !pids.is_empty() {
                    listed.push(Listed {
                        dir: dir.clone(),
                        pids,
                    });
                }
            }
            Err(e) if vanished(&e) => {
                notes.push(vanished_note(&dir));
                continue;
            }
            Err(_) => {}
        }
        if depth >= MAX_DEPTH || !has_subdirs {
            continue;
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if vanished(&e) => {
                notes.push(vanished_note(&dir));
                continue;
            }
            Err(_) => continue,
        };
        for entry in entries.flatten() {
            if seen + stack.len() >= MAX_CGROUPS {
                break;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let path = entry.path();
                // Gone already: its read says so. A count of 1 means "not counted".
                let has_subdirs = fs::symlink_metadata(&path).map_or(true, |m| m.nlink() != 2);
                stack.push((path, depth + 1, has_subdirs));
            }
        }
    }
    listed
}

/// The most [`read_into`] reads: a `cgroup.procs` of a few hundred thousand pids fits, a
/// file that never ends (or a path that is not the kernel's) does not fill the memory.
pub const MAX_KERNEL_FILE: usize = 8 << 20;

/// Reads a small kernel file (cgroup, /proc) into `buf` without asking its size first (these
/// files say 0 or 4096): one read for the whole file, and one that finds the end. A file
/// longer than [`MAX_KERNEL_FILE`] is an error (`InvalidData`), read no further.
pub fn read_into(path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
    let file = fs::File::open(path)?;
    read_from_start(&file, buf, MAX_KERNEL_FILE).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidData {
            buf.clear();
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: longer than {} MiB",
                    path.display(),
                    MAX_KERNEL_FILE >> 20
                ),
            )
        } else {
            e
        }
    })
}

/// A container's memory now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerMemory {
    /// `memory.current` (v2) or `memory.usage_in_bytes` (v1): page cache included.
    pub usage: u64,
    /// The limit that applies: the lowest of the cgroup's own and its ancestors' (a pod's, the
    /// node's), `None` when nothing up to the hierarchy's top limits it.
    pub limit: Option<u64>,
    /// The cgroup whose limit that is.
    pub limit_cgroup: Option<PathBuf>,
    /// Anonymous memory (`anon`, v1 `total_rss`): what the kernel cannot reclaim without swap.
    pub anon: Option<u64>,
    /// The kernel's OOM-kill counter (`memory.events` or `memory.oom_control`, `oom_kill`).
    pub oom_kills: Option<u64>,
}

fn read_file(dir: &Path, name: &str) -> Result<Option<String>, NodeError> {
    let mut buf = Vec::with_capacity(1024);
    match read_into(&dir.join(name), &mut buf) {
        Ok(()) => Ok(Some(String::from_utf8_lossy(&buf).into_owned())),
        Err(e) if vanished(&e) && !dir.is_dir() => Err(NodeError::Vanished {
            path: dir.to_path_buf(),
        }),
        Err(_) => Ok(None),
    }
}

fn number(text: Option<String>) -> Option<u64> {
    parse_number(text?.as_bytes())
}

fn counter(text: Option<String>, key: &str) -> Option<u64> {
    parse_counter(text?.as_bytes(), key)
}

/// Reads a container's memory; `Vanished` when its cgroup went away meanwhile.
pub fn read_memory(dir: &Path, h: &Hierarchy) -> Result<ContainerMemory, NodeError> {
    let (usage_file, limit_file, events_file, anon_key) = if h.v2 {
        ("memory.current", "memory.max", "memory.events", "anon")
    } else {
        (
            "memory.usage_in_bytes",
            "memory.limit_in_bytes",
            "memory.oom_control",
            "total_rss",
        )
    };
    let usage = number(read_file(dir, usage_file)?).ok_or_else(|| NodeError::NotMemory {
        path: dir.to_path_buf(),
    })?;
    let oom_kills = counter(read_file(dir, events_file)?, "oom_kill");
    let anon = counter(read_file(dir, "memory.stat")?, anon_key);
    // The limit that applies is the lowest on the way up: the kernel reclaims, then kills,
    // at whichever ancestor fills first (a pod's limit below the sum of its containers', the
    // node's allocatable below a pod's).
    let mut limit: Option<(u64, PathBuf)> = None;
    let mut at = Some(dir);
    while let Some(cgroup) = at {
        // v2's "max" does not parse: no limit at that level.
        let own = number(read_file(cgroup, limit_file)?).filter(|&l| l < UNLIMITED);
        if let Some(own) = own {
            if limit.as_ref().is_none_or(|(lowest, _)| own < *lowest) {
                limit = Some((own, cgroup.to_path_buf()));
            }
        }
        at = cgroup.parent().filter(|p| p.starts_with(&h.mount));
    }
    Ok(ContainerMemory {
        usage,
        limit: limit.as_ref().map(|l| l.0),
        limit_cgroup: limit.map(|l| l.1),
        anon,
        oom_kills,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_longer_than_a_kernel_file_is_refused_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cgroup.procs");
        let file = fs::File::create(&path).unwrap();
        file.set_len(MAX_KERNEL_FILE as u64 * 4).unwrap();
        let mut buf = Vec::new();
        let err = read_into(&path, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("longer than 8 MiB"), "{err}");
        assert!(buf.capacity() <= 2 * MAX_KERNEL_FILE, "{}", buf.capacity());
        std::fs::write(&path, "1\n2\n").unwrap();
        read_into(&path, &mut buf).unwrap();
        assert_eq!(buf, b"1\n2\n");
    }

    /// A v2 hierarchy laid out in a temporary directory as the kernel shows one: the parsing
    /// of v2 files, which this machine (v1) cannot show for real.
    #[test]
    fn a_v2_container_reads_its_own_or_its_pods_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let mount = tmp.path().to_path_buf();
        let pod = mount.join("kubepods.slice/kubepods-pod1.slice");
        let ctr = pod.join("cri-containerd-1.scope");
        fs::create_dir_all(&ctr).unwrap();
        for dir in [&mount, &mount.join("kubepods.slice"), &pod, &ctr] {
            fs::write(dir.join("cgroup.procs"), "").unwrap();
            fs::write(dir.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        }
        fs::write(pod.join("memory.max"), "268435456\n").unwrap();
        fs::write(ctr.join("memory.max"), "max\n").unwrap();
        fs::write(ctr.join("memory.current"), "1048576\n").unwrap();
        fs::write(ctr.join("memory.stat"), "anon 524288\nfile 4096\n").unwrap();
        fs::write(
            ctr.join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        let h = Hierarchy {
            mount: mount.clone(),
            root: mount.join("kubepods.slice"),
            v2: true,
        };
        let m = read_memory(&ctr, &h).unwrap();
        assert_eq!(
            m,
            ContainerMemory {
                usage: 1 << 20,
                limit: Some(256 << 20),
                limit_cgroup: Some(pod.clone()),
                anon: Some(512 << 10),
                oom_kills: Some(2),
            }
        );
        fs::write(ctr.join("memory.max"), "134217728\n").unwrap();
        assert_eq!(read_memory(&ctr, &h).unwrap().limit, Some(128 << 20));
        // A container's own limit above its pod's: the pod's applies, the lowest on the way up.
        fs::write(ctr.join("memory.max"), "536870912\n").unwrap();
        let m = read_memory(&ctr, &h).unwrap();
        assert_eq!(
            (m.limit, m.limit_cgroup),
            (Some(256 << 20), Some(pod.clone()))
        );
        assert_eq!(
            h.path_of(&ctr),
            "/kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope"
        );
        // Gone: the directory itself is missing.
        let gone = pod.join("cri-containerd-2.scope");
        assert!(matches!(
            read_memory(&gone, &h),
            Err(NodeError::Vanished { .. })
        ));
        // Here but no memory controller.
        let bare = pod.join("bare");
        fs::create_dir(&bare).unwrap();
        assert!(matches!(
            read_memory(&bare, &h),
            Err(NodeError::NotMemory { .. })
        ));
    }

    #[test]
    fn the_walk_lists_cgroups_with_processes_and_survives_a_missing_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("cgroup.procs"), "").unwrap();
        fs::write(root.join("a/cgroup.procs"), "12\n13\n").unwrap();
        fs::write(root.join("a/b/cgroup.procs"), "0\n14\n").unwrap();
        let mut notes = Vec::new();
        let mut listed = walk(root, &mut notes);
        listed.sort_by(|x, y| x.dir.cmp(&y.dir));
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].pids, [12, 13]);
        assert_eq!(listed[1].pids, [0, 14]);
        assert!(notes.is_empty());
        let listed = walk(&root.join("gone"), &mut notes);
        assert!(listed.is_empty());
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].kind, NoteKind::Vanished);
    }

    #[test]
    fn a_named_root_that_is_no_cgroup_says_where_it_looked() {
        let e = Hierarchy::resolve(Some(Path::new("no-such-root-hw"))).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("no-such-root-hw"), "{text}");
    }
}
