//! Finding the process behind a `proc:exe:NAME` or `proc:cgroup:PATH` target: which live
//! process runs an executable of that base name, or which Go process sits in that cgroup.
//! A process is known by its pid and its start time, so a reused pid is never mistaken for it.
//!
//! # Finding processes
//!
//! - **Go or not.** `proc:cgroup:` picks only Go processes. The check is whether the ELF has a
//!   `.go.buildinfo` section, which `-s -w` keeps. It is read from the section headers in about
//!   fifty lines, bounded by the file's length, and cached per (device, inode, mtime, size). The
//!   x86 and ELF crates the proc source uses were not needed for one section name.
//! - **Which process.**
//!   - `proc:cgroup:` picks the *oldest* Go process: a container's main process starts first.
//!   - `proc:exe:` picks the *newest*: a restart may overlap its predecessor's last moments.
//!   - Once chosen, a process is kept until it ends.
//! - **While none runs.** A fetch polls for one every 5 ms for up to one interval. So a new
//!   process is read within milliseconds, not at the next interval. Ctrl-C and the other tasks
//!   wait at most an interval.
//! - **Attaching.** An attach that fails on a live process is retried for up to 200 ms. A process
//!   caught between `execve` switching its `exe` link and mapping its segments is readable a
//!   moment later.
//! - **`proc:exe:NAME` says why it finds nothing.** Two live processes of the name are refused at
//!   the start, naming both pids (a restart's overlap later follows the newest). When none is
//!   found, executables this user may not read are counted, and one whose `/proc/PID/comm` is the
//!   name is named: rights are missing. A PID namespace of our own (`NSpid` with more than one
//!   level) is said too.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a cgroup path given without its mount point is looked for, in this order.
const CGROUP_MOUNTS: &[&str] = &[
    "/sys/fs/cgroup/memory",
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/unified",
    "/sys/fs/cgroup/pids",
];

/// Sub-cgroups searched below the named one (a pod's cgroup holds one per container).
const MAX_CGROUP_DIRS: usize = 256;

/// What a following target looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcSelector {
    /// The newest live process whose executable has this base name.
    Exe(String),
    /// The oldest live Go process in this cgroup or below it.
    Cgroup(PathBuf),
    /// The process `heapwatch run` started last, when it is a Go program (no cgroup to
    /// follow under the watchdog).
    Launched(SharedPid),
}

/// A pid another thread updates (0 while there is none).
#[derive(Debug, Clone, Default)]
pub struct SharedPid(pub Arc<AtomicU32>);

impl PartialEq for SharedPid {
    fn eq(&self, other: &SharedPid) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedPid {}

impl ProcSelector {
    /// `proc:exe:NAME` or `proc:cgroup:PATH`; `None` for any other target (`proc:PID` included).
    pub fn parse(target: &str) -> Option<Result<ProcSelector, String>> {
        if let Some(name) = target.strip_prefix("proc:exe:") {
            if name.is_empty() || name.contains('/') {
                return Some(Err(format!(
                    "{target}: expected proc:exe:NAME, NAME the executable's base name (no '/')"
                )));
            }
            return Some(Ok(ProcSelector::Exe(name.to_string())));
        }
        if let Some(path) = target.strip_prefix("proc:cgroup:") {
            if path.is_empty() {
                return Some(Err(format!(
                    "{target}: expected proc:cgroup:PATH, e.g. proc:cgroup:/sys/fs/cgroup/memory/app"
                )));
            }
            return Some(Ok(ProcSelector::Cgroup(PathBuf::from(path))));
        }
        None
    }

    /// What is looked for, for messages: `process whose executable is named "x"`, `Go process
    /// in cgroup X`.
    pub fn describe(&self) -> String {
        match self {
            ProcSelector::Exe(name) => format!("process whose executable is named {name:?}"),
            ProcSelector::Cgroup(path) => format!("Go process in cgroup {}", path.display()),
            ProcSelector::Launched(_) => "Go process started by heapwatch run".to_string(),
        }
    }
}

/// A process as found in `/proc`: its pid and its start time in clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: u32,
    pub start_ticks: u64,
}

impl ProcessId {
    /// The process with this pid now, `None` when there is none or it is a zombie.
    /// A process being torn down (killed, its memory already released, not yet a zombie)
    /// counts as gone.
    pub fn of(pid: u32) -> Option<ProcessId> {
        ProcessId::from_stat(pid, &fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// [`ProcessId::of`] from the text of the process's `/proc/PID/stat`.
    pub fn from_stat(pid: u32, stat: &str) -> Option<ProcessId> {
        let (state, flags, start_ticks) = parse_stat(stat)?;
        let exiting = flags & PF_EXITING != 0;
        (!matches!(state, 'Z' | 'X' | 'x') && !exiting).then_some(ProcessId { pid, start_ticks })
    }

    /// True while this very process (not a later one with the same pid) runs.
    pub fn alive(&self) -> bool {
        ProcessId::of(self.pid) == Some(*self)
    }
}

/// The kernel's per-task flag for "getting shut down" (include/linux/sched.h).
const PF_EXITING: u64 = 0x4;

/// State, flags and start time (clock ticks since boot) from `/proc/PID/stat`. The command
/// name (field 2) may hold spaces and brackets, so fields are counted after its last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4 to 8, then flags (field 9), then starttime (field 22).
    let flags = fields.nth(5)?.parse().ok()?;
    let start = fields.nth(12)?.parse().ok()?;
    Some((state, flags, start))
}

/// Finds processes for a selector; remembers which executables are Go programs.
#[derive(Debug)]
pub struct ProcFinder {
    selector: ProcSelector,
    proc_root: PathBuf,
    go_binaries: HashMap<FileKey, bool>,
}

impl ProcFinder {
    pub fn new(selector: ProcSelector) -> ProcFinder {
        ProcFinder {
            selector,
            proc_root: PathBuf::from("/proc"),
            go_binaries: HashMap::new(),
        }
    }

    pub fn selector(&self) -> &ProcSelector {
        &self.selector
    }

    /// The cgroup directory a `proc:cgroup:` target names now, when it exists.
    pub fn cgroup_dir(&self) -> Option<PathBuf> {
        match &self.selector {
            ProcSelector::Cgroup(path) => resolve_cgroup(path),
            ProcSelector::Exe(_) | ProcSelector::Launched(_) => None,
        }
    }

    /// The process the selector names now, `None` when there is none yet.
    pub fn find(&mut self) -> Option<ProcessId> {
        match self.selector.clone() {
            ProcSelector::Exe(name) => self.find_exe(&name),
            ProcSelector::Cgroup(path) => self.find_in_cgroup(&path),
            ProcSelector::Launched(cell) => match cell.0.load(Ordering::Relaxed) {
                0 => None,
                pid => ProcessId::of(pid).filter(|p| self.is_go(p.pid)),
            },
        }
    }

    fn find_exe(&mut self, name: &str) -> Option<ProcessId> {
        // A restart may overlap its predecessor's last moments: the newest is the one.
        scan_exe(&self.proc_root, name)
            .found
            .into_iter()
            .max_by_key(|p| (p.start_ticks, p.pid))
    }

    /// Why [`ProcFinder::find`] finds nothing, when something can be said: executables this
    /// user may not read (one of them named like the target), a PID namespace of our own.
    pub fn why_none(&self) -> Option<String> {
        let ProcSelector::Exe(name) = &self.selector else {
            return None;
        };
        let scan = scan_exe(&self.proc_root, name);
        let mut why = Vec::new();
        if let Some(rights) = scan.rights_missing(name) {
            why.push(rights);
        }
        if let Some(ns) = own_pid_namespace() {
            why.push(ns);
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// What a look for `proc:exe:NAME` saw in /proc.
#[derive(Debug, Default)]
pub struct ExeScan {
    /// The live processes whose executable has the name.
    pub found: Vec<ProcessId>,
    /// Processes whose executable link this user may not read, but whose command name
    /// (`/proc/PID/comm`, readable by anyone, cut to 15 bytes) is the target's.
    pub unreadable_named: Vec<u32>,
    /// Every process whose executable link this user may not read.
    pub unreadable: usize,
}

impl ExeScan {
    /// A sentence saying that rights are missing, when they are what hides the target.
    pub fn rights_missing(&self, name: &str) -> Option<String> {
        if !self.found.is_empty() || self.unreadable == 0 {
            return None;
        }
        let fix = "run heapwatch as root, or as the target's user with ptrace allowed \
                   (CAP_SYS_PTRACE)";
        if !self.unreadable_named.is_empty() {
            let pids: Vec<String> = self.unreadable_named.iter().map(u32::to_string).collect();
            return Some(format!(
                "process {} is named {name:?}, but this user may not read its executable \
                 (/proc/PID/exe: permission denied): {fix}",
                pids.join(", ")
            ));
        }
        Some(format!(
            "this user may not read the executables of {} other process(es), which may \
             include it: {fix}",
            self.unreadable
        ))
    }
}

/// Looks through `/proc` for processes running an executable of this base name.
pub fn scan_exe(proc_root: &Path, name: &str) -> ExeScan {
    let me = std::process::id();
    let mut scan = ExeScan::default();
    let Ok(entries) = fs::read_dir(proc_root) else {
        return scan;
    };
    let short: String = name.chars().take(15).collect();
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if pid == me {
            continue;
        }
        match fs::read_link(proc_root.join(format!("{pid}/exe"))) {
            Ok(p) if exe_base_name(&p) == name => {
                if let Some(process) = ProcessId::of(pid) {
                    scan.found.push(process);
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                scan.unreadable += 1;
                let comm = fs::read_to_string(proc_root.join(format!("{pid}/comm")));
                if comm.is_ok_and(|c| c.trim_end() == short) {
                    scan.unreadable_named.push(pid);
                }
            }
            // Kernel threads have no executable; a process that just ended has none either.
            Err(_) => {}
        }
    }
    scan
}

/// When heapwatch runs in a PID namespace below another (a container), a sentence saying
/// that processes outside it are not in its /proc.
pub fn own_pid_namespace() -> Option<String> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    (nspid.split_whitespace().count() > 1).then(|| {
        "heapwatch runs in a PID namespace of its own (a container?): a target outside it is \
         not in its /proc (share the target's PID namespace: hostPID, or \
         --pid=container:NAME)"
            .to_string()
    })
}

/// For `proc:exe:NAME` when the run starts: more than one process of that name is refused,
/// naming each (following the newest would pick one without a word); none, when rights
/// are what hides it, is refused saying so.
pub fn check_exe_target(target: &str, name: &str) -> Result<(), String> {
    let scan = scan_exe(Path::new("/proc"), name);
    if scan.found.len() > 1 {
        let mut found = scan.found.clone();
        found.sort_by_key(|p| (p.start_ticks, p.pid));
        let pids: Vec<String> = found.iter().map(|p| p.pid.to_string()).collect();
        return Err(format!(
            "{target}: {} processes run an executable named {name:?} (pids {}, oldest first); \
             name one with proc:PID, or follow one cgroup with proc:cgroup:PATH",
            found.len(),
            pids.join(", ")
        ));
    }
    if let Some(rights) = scan.rights_missing(name) {
        return Err(format!("{target}: {rights}"));
    }
    Ok(())
}

impl ProcFinder {
    fn find_in_cgroup(&mut self, path: &Path) -> Option<ProcessId> {
        let dir = resolve_cgroup(path)?;
        let pids = cgroup_pids(&dir);
        pids.into_iter()
            .filter_map(ProcessId::of)
            .filter(|p| self.is_go(p.pid))
            // A container's main process starts first; helpers it forks come later.
            .min_by_key(|p| (p.start_ticks, p.pid))
    }

    /// Whether the process runs a Go binary, cached per file.
    fn is_go(&mut self, pid: u32) -> bool {
        runs_go(
            &self.proc_root.join(format!("{pid}/exe")),
            &mut self.go_binaries,
        )
    }
}

/// A file by identity: device, inode, modification time and size.
pub type FileKey = (u64, u64, i64, u64);

/// Whether a process's executable (`exe`, its `/proc/PID/exe`) is a Go binary (its ELF has
/// `.go.buildinfo`), looked up in `known` first, by the file's identity, and remembered there.
pub fn runs_go(exe: &Path, known: &mut HashMap<FileKey, bool>) -> bool {
    let Ok(meta) = fs::metadata(exe) else {
        return false;
    };
    let key = (meta.dev(), meta.ino(), meta.mtime(), meta.size());
    if let Some(&go) = known.get(&key) {
        return go;
    }
    let Ok(mut file) = File::open(exe) else {
        return false;
    };
    let go = elf_has_section(&mut file, ".go.buildinfo").unwrap_or(false);
    known.insert(key, go);
    go
}

/// The base name of an executable link, without the ` (deleted)` the kernel appends when the
/// file was replaced on disk (a rebuilt binary whose old process still runs).
fn exe_base_name(link: &Path) -> &str {
    let name = link.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.strip_suffix(" (deleted)").unwrap_or(name)
}

/// A cgroup directory: the path itself when it is one, else the path under each usual mount.
pub fn resolve_cgroup(path: &Path) -> Option<PathBuf> {
    if path.is_absolute() && path.join("cgroup.procs").is_file() {
        return Some(path.to_path_buf());
    }
    let relative = path.strip_prefix("/").unwrap_or(path);
    CGROUP_MOUNTS
        .iter()
        .map(|m| Path::new(m).join(relative))
        .find(|d| d.join("cgroup.procs").is_file())
}

/// Every pid in a cgroup and in the cgroups below it (breadth first, bounded).
pub fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut queue = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = queue.pop() {
        seen += 1;
        if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = fs::read_dir(&d) {
            for e in entries.flatten() {
                if seen + queue.len() >= MAX_CGROUP_DIRS {
                    break;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    queue.push(e.path());
                }
            }
        }
    }
    pids
}

/// Whether a 64-bit little-endian ELF file has a section of this name. Reads the section
/// headers and their name table only; every offset is checked against the file's length.
pub fn elf_has_section(file: &mut File, wanted: &str) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    let mut header = [0u8; 64];
    if file.read_exact(&mut header).is_err() {
        return Ok(false);
    }
    // Magic, ELFCLASS64, little-endian: amd64 and arm64, the architectures the proc source reads.
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(false);
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let shoff = u64_at(&header, 0x28);
    let shentsize = u16_at(&header, 0x3a);
    let shnum = u16_at(&header, 0x3c);
    let shstrndx = u16_at(&header, 0x3e);
    if shentsize < 64 || shnum == 0 || shstrndx >= shnum {
        return Ok(false);
    }
    let table_len = shentsize * shnum;
    if shoff.checked_add(table_len).is_none_or(|end| end > len) {
        return Ok(false);
    }
    let mut table = vec![0u8; table_len as usize];
    file.seek(SeekFrom::Start(shoff))?;
    file.read_exact(&mut table)?;
    let entry = |i: u64| &table[(i * shentsize) as usize..(i * shentsize + 64) as usize];
    let names = entry(shstrndx);
    let (names_off, names_len) = (u64_at(names, 0x18), u64_at(names, 0x20));
    if names_len > 1 << 20 || names_off.checked_add(names_len).is_none_or(|end| end > len) {
        return Ok(false);
    }
    let mut strings = vec![0u8; names_len as usize];
    file.seek(SeekFrom::Start(names_off))?;
    file.read_exact(&mut strings)?;
    Ok((0..shnum).any(|i| {
        let at = u32::from_le_bytes([entry(i)[0], entry(i)[1], entry(i)[2], entry(i)[3]]) as usize;
        strings
            .get(at..)
            .and_then(|s| s.split(|&b| b == 0).next())
            .is_some_and(|name| name == wanted.as_bytes())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    struct Killed(Child);

    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn targets_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            ProcSelector::parse("proc:exe:ziti"),
            Some(Ok(ProcSelector::Exe("ziti".into())))
        );
        assert_eq!(
            ProcSelector::parse("proc:cgroup:/kubepods/pod1"),
            Some(Ok(ProcSelector::Cgroup("/kubepods/pod1".into())))
        );
        assert_eq!(ProcSelector::parse("proc:1234"), None);
        assert_eq!(ProcSelector::parse("http://x"), None);
        let e = ProcSelector::parse("proc:exe:/usr/bin/ziti")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("base name"), "{e}");
        assert!(ProcSelector::parse("proc:cgroup:").unwrap().is_err());
    }

    #[test]
    fn stat_fields_are_counted_after_a_command_name_with_spaces_and_brackets() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 \
                    50 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(parse_stat(stat), Some(('S', 4194560, 987654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_deleted_binary_keeps_its_name() {
        assert_eq!(exe_base_name(Path::new("/opt/app/ctrl (deleted)")), "ctrl");
        assert_eq!(exe_base_name(Path::new("/opt/app/ctrl")), "ctrl");
    }

    #[test]
    fn a_process_is_known_by_its_start_time_and_a_dead_one_is_not_alive() {
        let me = ProcessId::of(std::process::id()).expect("this process is in /proc");
        assert!(me.alive());
        let other = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!other.alive(), "same pid, other start: a reused pid");
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let id = ProcessId::of(child.id()).expect("the child is in /proc");
        assert!(id.alive());
        child.kill().expect("kill");
        // Until reaped the child is a zombie, which is not alive either.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!id.alive(), "a zombie is not alive");
        child.wait().expect("reap");
        assert!(!id.alive());
    }

    #[test]
    fn exe_finds_the_newest_process_of_that_name_and_not_other_names() {
        let dir = tempfile::tempdir().expect("temp dir");
        let name = format!("hw-find-{}", std::process::id());
        let bin = dir.path().join(&name);
        fs::copy("/bin/sleep", &bin).expect("copy sleep");
        let mut finder = ProcFinder::new(ProcSelector::Exe(name.clone()));
        assert_eq!(finder.find(), None, "nothing runs under that name yet");
        let first = Killed(Command::new(&bin).arg("30").spawn().expect("spawn"));
        let found = finder.find().expect("found the first");
        assert_eq!(found.pid, first.0.id());
        // Clock ticks are 10 ms: the second must start in a later tick to be newer.
        std::thread::sleep(std::time::Duration::from_millis(30));
        let second = Killed(Command::new(&bin).arg("30").spawn().expect("spawn"));
        assert_eq!(finder.find().map(|p| p.pid), Some(second.0.id()));
        drop(second);
        assert_eq!(finder.find().map(|p| p.pid), Some(first.0.id()));
        let mut other = ProcFinder::new(ProcSelector::Exe(format!("{name}x")));
        assert_eq!(other.find(), None);
    }

    #[test]
    fn the_elf_reader_tells_a_go_binary_from_others_and_survives_garbage() {
        let mut sleep = File::open("/bin/sleep").expect("/bin/sleep");
        assert!(elf_has_section(&mut sleep, ".text").unwrap());
        assert!(!elf_has_section(&mut sleep, ".go.buildinfo").unwrap());
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("junk");
        // A header claiming section tables far beyond the file's end.
        let mut junk = vec![0u8; 64];
        junk[..6].copy_from_slice(b"\x7fELF\x02\x01");
        junk[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        junk[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        junk[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
        fs::write(&path, &junk).unwrap();
        assert!(!elf_has_section(&mut File::open(&path).unwrap(), ".text").unwrap());
        fs::write(&path, b"#!/bin/sh\n").unwrap();
        assert!(!elf_has_section(&mut File::open(&path).unwrap(), ".text").unwrap());
    }

    #[test]
    fn the_go_toolchain_is_a_go_binary() {
        let go = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("go"))
                .find(|p| p.is_file())
        });
        let Some(go) = go else {
            use crate::prerequisite::{Need, skip};
            skip(Need::Go, "`go` is not on PATH");
            return;
        };
        let go = fs::canonicalize(go).expect("resolve go");
        assert!(elf_has_section(&mut File::open(&go).unwrap(), ".go.buildinfo").unwrap());
    }

    #[test]
    fn cgroup_paths_resolve_with_or_without_their_mount_point() {
        let root = Path::new("/sys/fs/cgroup/memory");
        if root.join("cgroup.procs").is_file() {
            assert_eq!(resolve_cgroup(root), Some(root.to_path_buf()));
            assert_eq!(resolve_cgroup(Path::new("/")), Some(root.to_path_buf()));
        }
        assert_eq!(resolve_cgroup(Path::new("/no/such/cgroup-hw")), None);
    }
}
