//! Process and cgroup memory read from outside the target: RSS from `/proc/PID/statm`,
//! usage, limit and OOM-kill count from a v1 or v2 memory cgroup. Needs no answer from the
//! target, so it keeps working while the target stalls at its limit and before it opens
//! its profile endpoint.
//!
//! # Which process a cgroup's figures name
//!
//! **A cgroup's process is its oldest Go process.** The sampler and the pid probe take the Go
//! process of the cgroup that started first (`/proc/PID/stat` start time; Go by `.go.buildinfo`,
//! remembered per executable file; `main_pid`), so a helper the target forks never takes its
//! place, nor a `sh -c` entrypoint waiting in front of the Go program; after a restart the new
//! process is the only one. With no Go process there, the oldest process. For HTTP and Envoy,
//! whose replies name no process, the reply is filed under that pid (read afresh after each
//! reply), so a new pid opens a new boot cycle as the agent's does.
//!
//! A process sampled by its pid (`proc:PID`, `--pid`) that is alone in a memory cgroup of its
//! own (a container's) gets that cgroup's charge and limit in its samples (`usage`, `limit`
//! beside `rss`): the charge, not RSS with the binary's file pages, is what the status line sets
//! against the limit ("cgroup 250 MiB of 256 MiB"), and the limit is known without `--limit`.
//!
//! # A sample costs a few reads of open files
//!
//! The files read at every sample (the cgroup's usage, limit and OOM count, the process's
//! `statm`) stay open and are read again from their start (`pread` at 0 makes the kernel write
//! them afresh); a failed read closes the file and opens it once more, so a removed or remade
//! cgroup reads as it is. `cgroup.procs` is opened each time: a v1 cgroup keeps serving an open
//! file its pid list for a while.

use std::fs;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::model::memory::{CgroupBreakdown, MemorySample, ProcessBreakdown};

/// What to watch.
#[derive(Debug, Clone)]
pub enum MemoryProbe {
    Pid(u32),
    Cgroup(CgroupMemory),
    /// Whichever process the source talks to now (0 while unknown): an `agent:auto` target
    /// gets a new pid at every restart, and the sampler follows it.
    Follow(Arc<AtomicU32>),
}

#[derive(Debug)]
pub struct CgroupMemory {
    pub path: PathBuf,
    pub v2: bool,
    /// The files read at every sample, kept open between samples.
    held: Mutex<Held>,
}

impl Clone for CgroupMemory {
    /// The same cgroup, with files of its own opened when first read.
    fn clone(&self) -> CgroupMemory {
        CgroupMemory::new(self.path.clone(), self.v2)
    }
}

/// The files a sample reads, open from one sample to the next and read again from offset 0
/// (the kernel makes a seq_file anew at offset 0): an open and a close fewer per file and
/// sample. `cgroup.procs` is not among them: v1 keeps the pid list of an open file and
/// serves it again until nobody has read it for a second, so a held one would miss a
/// restart; it is opened afresh each time.
#[derive(Debug, Default)]
struct Held {
    usage: Option<fs::File>,
    limit: Option<fs::File>,
    events: Option<fs::File>,
    /// `/proc/PID/statm` of the process last measured.
    statm: Option<(u32, fs::File)>,
    buf: Vec<u8>,
}

/// Reads `path` into `buf` through `held`, opening it when it is not yet open. A read of a
/// held file that fails (a cgroup removed and made again under the same name, a process
/// gone) drops it and tries a fresh open, so a reading is what reading the path anew gives.
fn read_held(held: &mut Option<fs::File>, path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
    if let Some(file) = held.as_ref() {
        if read_from_start(file, buf, MAX_HELD_FILE).is_ok() {
            return Ok(());
        }
        *held = None;
    }
    let file = fs::File::open(path)?;
    read_from_start(&file, buf, MAX_HELD_FILE)?;
    *held = Some(file);
    Ok(())
}

/// The most a held file is read to: these are a few lines.
const MAX_HELD_FILE: usize = 64 << 10;

/// The whole of a small kernel file (cgroup, /proc) into `buf`, read with `pread` from offset
/// 0 without asking its size first (these files say 0 or 4096). A file of `max` bytes or more
/// is an error (`InvalidData`), read no further.
pub fn read_from_start(file: &fs::File, buf: &mut Vec<u8>, max: usize) -> io::Result<()> {
    buf.clear();
    loop {
        if buf.len() == buf.capacity() {
            if buf.len() >= max {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "file too long"));
            }
            buf.reserve(512);
        }
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => {
                buf.truncate(len);
                return Ok(());
            }
            Ok(n) => buf.truncate(len + n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// A file that holds one number (surrounding white space allowed).
pub fn parse_number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// The value of `key` in a file of `key value` lines.
pub fn parse_counter(bytes: &[u8], key: &str) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Resident memory in bytes from `/proc/PID/statm` (its second field, in pages: the same
/// counters as `VmRSS` of `status`, which the kernel spends far longer writing). A process
/// with no memory map (a zombie) writes zeros there and no `VmRSS` in `status`: `None`.
fn parse_statm(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let size: u64 = fields.next()?.parse().ok()?;
    let resident: u64 = fields.next()?.parse().ok()?;
    (size > 0).then(|| resident * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system; it has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

impl CgroupMemory {
    pub fn new(path: PathBuf, v2: bool) -> CgroupMemory {
        CgroupMemory {
            path,
            v2,
            held: Mutex::new(Held::default()),
        }
    }

    /// A cgroup directory; v2 when it has `memory.current`, v1 when `memory.usage_in_bytes`.
    pub fn open(path: &Path) -> Result<CgroupMemory, String> {
        if path.join("memory.current").is_file() {
            Ok(CgroupMemory::new(path.to_path_buf(), true))
        } else if path.join("memory.usage_in_bytes").is_file() {
            Ok(CgroupMemory::new(path.to_path_buf(), false))
        } else {
            Err(format!(
                "{}: not a memory cgroup (neither memory.current nor memory.usage_in_bytes)",
                path.display()
            ))
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_number(&self, file: &str) -> Option<u64> {
        let text = fs::read_to_string(self.path.join(file)).ok()?;
        text.trim().parse().ok()
    }

    pub fn usage(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        let held = &mut *self.held();
        read_held(&mut held.usage, &self.path.join(file), &mut held.buf).ok()?;
        parse_number(&held.buf)
    }

    /// The limit, `None` when unlimited.
    pub fn limit(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        let held = &mut *self.held();
        read_held(&mut held.limit, &self.path.join(file), &mut held.buf).ok()?;
        let limit = parse_number(&held.buf)?;
        // v1 writes "no limit" as a huge page-rounded number.
        (limit < (1 << 62)).then_some(limit)
    }

    pub fn oom_kills(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let held = &mut *self.held();
        read_held(&mut held.events, &self.path.join(file), &mut held.buf).ok()?;
        parse_counter(&held.buf, "oom_kill")
    }

    /// Processes in the cgroup.
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// [`process_rss`] of a process of the cgroup, its `statm` kept open while it is the one
    /// measured.
    fn rss(&self, pid: u32) -> Option<u64> {
        let held = &mut *self.held();
        let mut file = match held.statm.take() {
            Some((p, file)) if p == pid => Some(file),
            _ => None,
        };
        read_held(&mut file, &statm_path(pid), &mut held.buf).ok()?;
        held.statm = file.map(|f| (pid, f));
        parse_statm(&held.buf)
    }
}

fn statm_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/statm"))
}

/// RSS of a process in bytes, `None` when it is gone.
pub fn process_rss(pid: u32) -> Option<u64> {
    parse_statm(&fs::read(statm_path(pid)).ok()?)
}

/// How much a sample reads beyond usage, limit, the OOM-kill count and the pid's RSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Nothing more: a few small reads.
    Usage,
    /// Where a cgroup's memory goes (`memory.stat`, the charge failures and events, PSI), but
    /// not the process's `smaps_rollup`, which walks its page tables under its mmap lock. What
    /// the kernel kills by is the cgroup's anonymous memory, which `memory.stat` gives.
    Cgroup,
    /// All of it, `smaps_rollup` too.
    Full,
}

impl MemoryProbe {
    /// False while there is nothing to sample yet (a followed process not found so far).
    pub fn ready(&self) -> bool {
        match self {
            MemoryProbe::Follow(pid) => pid.load(Ordering::Relaxed) != 0,
            _ => true,
        }
    }

    /// The process measured now, read afresh: a pid, a cgroup's oldest process, the followed
    /// process (`None` while unknown or gone).
    pub fn current_pid(&self) -> Option<u32> {
        let pid = match self {
            MemoryProbe::Pid(pid) => Some(*pid),
            MemoryProbe::Follow(cell) => Some(cell.load(Ordering::Relaxed)).filter(|&p| p != 0),
            MemoryProbe::Cgroup(cg) => main_pid(&cg.pids()),
        }?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    /// One sample: usage, limit, the OOM-kill count and the pid measured, every time (a few
    /// small reads); then as much of where the memory goes as `detail` asks, which costs more.
    pub fn sample(&self, t_ms: i64, previous_kills: Option<u64>, detail: Detail) -> MemorySample {
        let full = detail == Detail::Full;
        match self {
            MemoryProbe::Pid(pid) => pid_sample(*pid, t_ms, full),
            MemoryProbe::Follow(cell) => pid_sample(cell.load(Ordering::Relaxed), t_ms, full),
            MemoryProbe::Cgroup(cg) => {
                let oom_kills = cg.oom_kills();
                let pids = cg.pids();
                let pid = main_pid(&pids);
                MemorySample {
                    t_ms,
                    source: "cgroup".into(),
                    pid,
                    rss: pid.and_then(|p| cg.rss(p)),
                    usage: cg.usage(),
                    limit: cg.limit(),
                    killed: matches!((previous_kills, oom_kills), (Some(a), Some(b)) if b > a),
                    oom_kills,
                    alive: !pids.is_empty(),
                    cgroup: (detail != Detail::Usage).then(|| cg.breakdown()),
                    process: pid.filter(|_| full).and_then(process_breakdown),
                    files: None,
                }
            }
        }
    }
}

fn pid_sample(pid: u32, t_ms: i64, detailed: bool) -> MemorySample {
    let rss = process_rss(pid);
    // A process alone in a memory cgroup of its own (a container's): what that cgroup charges
    // is what the kernel kills by, without the binary's file pages RSS counts.
    let own = rss.and_then(|_| own_cgroup(pid));
    MemorySample {
        t_ms,
        source: "pid".into(),
        pid: Some(pid),
        rss,
        usage: own.as_ref().and_then(CgroupMemory::usage),
        limit: own.as_ref().and_then(CgroupMemory::limit),
        alive: rss.is_some(),
        process: rss
            .filter(|_| detailed)
            .and_then(|_| process_breakdown(pid)),
        ..MemorySample::default()
    }
}

/// The memory cgroup a process is in (`/proc/PID/cgroup`: the v1 `memory` controller's line,
/// else the v2 `0::` line), when it is not the root and the process is the only one in it.
pub fn own_cgroup(pid: u32) -> Option<CgroupMemory> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let mut v1 = None;
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')));
        } else if id == "0" && controllers.is_empty() {
            v2 = Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')));
        }
    }
    let dir = v1.or(v2)?;
    if dir == Path::new("/sys/fs/cgroup/memory") || dir == Path::new("/sys/fs/cgroup") {
        return None;
    }
    let cg = CgroupMemory::open(&dir).ok()?;
    (cg.pids() == [pid]).then_some(cg)
}

/// The process a cgroup's memory is told about: the Go process that started first, so a
/// helper the target forks never takes its place, a `sh -c` entrypoint in front of the Go
/// program neither; after a restart the new process is the only one. With no Go process,
/// the oldest.
fn main_pid(pids: &[u32]) -> Option<u32> {
    if pids.len() <= 1 {
        return pids.first().copied();
    }
    let oldest = |among: &mut dyn Iterator<Item = u32>| {
        among.min_by_key(|&p| (start_ticks(p).unwrap_or(u64::MAX), p))
    };
    oldest(&mut pids.iter().copied().filter(|&p| runs_go(p)))
        .or_else(|| oldest(&mut pids.iter().copied()))
}

/// Whether a process runs a Go executable, remembered per file for every probe.
fn runs_go(pid: u32) -> bool {
    use crate::source::procfind::{FileKey, runs_go};
    use std::collections::HashMap;
    static KNOWN: Mutex<Option<HashMap<FileKey, bool>>> = Mutex::new(None);
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    let map = known.get_or_insert_with(HashMap::new);
    if map.len() > 1024 {
        map.clear();
    }
    runs_go(Path::new(&format!("/proc/{pid}/exe")), map)
}

/// When a process started, in clock ticks since boot (`/proc/PID/stat` field 22).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::source::procfind::parse_stat(&stat).map(|(_, _, start)| start)
}

/// A process's resident memory by kind from `/proc/PID/smaps_rollup`: the kernel's exact
/// walk of its mappings (the `RssAnon` counters of `status` may lag by up to 64 pages a
/// thread). Shared memory is its proportional share, which for a Go process is all of it.
pub fn process_breakdown(pid: u32) -> Option<ProcessBreakdown> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    parse_smaps_rollup(&text)
}

fn parse_smaps_rollup(text: &str) -> Option<ProcessBreakdown> {
    let kb = |key: &str| {
        text.lines().find_map(|l| {
            let v = l.strip_prefix(key)?.strip_prefix(':')?;
            v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
    };
    let rss = kb("Rss")? * 1024;
    let anon = kb("Anonymous").map(|k| k * 1024);
    let shmem = kb("Pss_Shmem").map(|k| k * 1024);
    Some(ProcessBreakdown {
        rss_anon: anon,
        rss_file: anon.map(|a| rss.saturating_sub(a + shmem.unwrap_or(0))),
        rss_shmem: shmem,
    })
}

/// `key value` lines (`memory.stat`, `memory.events`, `memory.oom_control`) into a map.
fn key_values(text: &str) -> std::collections::HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
}

/// `some avg10=1.23 …` of a PSI file: the some and full avg10 shares.
fn parse_pressure(text: &str) -> (Option<f64>, Option<f64>) {
    let avg10 = |kind: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(kind)?;
            rest.split_whitespace()
                .find_map(|f| f.strip_prefix("avg10=")?.parse().ok())
        })
    };
    (avg10("some "), avg10("full "))
}

impl CgroupMemory {
    fn read(&self, file: &str) -> Option<String> {
        fs::read_to_string(self.path.join(file)).ok()
    }

    /// Where the cgroup's memory goes and how hard it presses on its limit. v1 names are the
    /// hierarchical `total_*` ones, so a cgroup with children counts them too.
    pub fn breakdown(&self) -> CgroupBreakdown {
        let stat = self.read("memory.stat").unwrap_or_default();
        if self.v2 {
            breakdown_v2(
                &stat,
                self.read("memory.events").as_deref(),
                self.read("memory.pressure").as_deref(),
            )
        } else {
            // With a memory+swap limit that binds (`heapwatch run` sets one equal to the
            // limit), this kernel counts no failures in `memory.failcnt` nor in
            // `memory.memsw.failcnt` (0 beside three kills, measured): no figure then.
            let memsw_binds = match (
                self.read_number("memory.memsw.limit_in_bytes"),
                self.limit(),
            ) {
                (Some(memsw), Some(limit)) => memsw <= limit,
                _ => false,
            };
            breakdown_v1(
                &stat,
                self.read_number("memory.failcnt").filter(|_| !memsw_binds),
                self.read("memory.oom_control").as_deref(),
                self.read_number("memory.kmem.usage_in_bytes"),
            )
        }
    }
}

fn breakdown_v1(
    stat: &str,
    failcnt: Option<u64>,
    oom_control: Option<&str>,
    kmem: Option<u64>,
) -> CgroupBreakdown {
    let s = key_values(stat);
    let oom = oom_control.map(key_values);
    CgroupBreakdown {
        anon: s.get("total_rss").copied(),
        file: s.get("total_cache").copied(),
        file_mapped: s.get("total_mapped_file").copied(),
        shmem: s.get("total_shmem").copied(),
        file_dirty: s.get("total_dirty").copied(),
        file_writeback: s.get("total_writeback").copied(),
        kernel: kmem,
        failcnt,
        oom: oom.and_then(|o| o.get("under_oom").copied()),
        psi_some_avg10: None,
        psi_full_avg10: None,
    }
}

fn breakdown_v2(stat: &str, events: Option<&str>, pressure: Option<&str>) -> CgroupBreakdown {
    let s = key_values(stat);
    let events = events.map(key_values);
    let (some, full) = pressure.map(parse_pressure).unwrap_or((None, None));
    CgroupBreakdown {
        anon: s.get("anon").copied(),
        file: s.get("file").copied(),
        file_mapped: s.get("file_mapped").copied(),
        shmem: s.get("shmem").copied(),
        file_dirty: s.get("file_dirty").copied(),
        file_writeback: s.get("file_writeback").copied(),
        kernel: s.get("kernel").copied(),
        failcnt: events.as_ref().and_then(|e| e.get("max").copied()),
        oom: events.as_ref().and_then(|e| e.get("oom").copied()),
        psi_some_avg10: some,
        psi_full_avg10: full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_memory_stat_is_split_with_the_hierarchical_totals() {
        let stat = "cache 100\nrss 50\ntotal_cache 4096000\ntotal_rss 2048000\n\
                    total_mapped_file 1024\ntotal_shmem 8\ntotal_dirty 16\ntotal_writeback 0\n";
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        let b = breakdown_v1(stat, Some(12595), Some(oom), Some(777));
        assert_eq!(b.anon, Some(2048000));
        assert_eq!(b.file, Some(4096000));
        assert_eq!(b.file_mapped, Some(1024));
        assert_eq!(b.shmem, Some(8));
        assert_eq!(b.file_dirty, Some(16));
        assert_eq!(b.file_writeback, Some(0));
        assert_eq!(b.kernel, Some(777));
        assert_eq!(b.failcnt, Some(12595));
        assert_eq!(b.oom, Some(0));
        assert_eq!(b.unreclaimable(), Some(2048008));
    }

    #[test]
    fn v2_memory_stat_events_and_pressure_are_read() {
        let stat = "anon 300\nfile 700\nkernel 20\nfile_mapped 60\nfile_dirty 5\n\
                    file_writeback 1\nshmem 2\n";
        let events = "low 0\nhigh 0\nmax 42\noom 2\noom_kill 1\noom_group_kill 0\n";
        let pressure = "some avg10=12.50 avg60=3.00 avg300=0.50 total=123\n\
                        full avg10=4.25 avg60=1.00 avg300=0.10 total=45\n";
        let b = breakdown_v2(stat, Some(events), Some(pressure));
        assert_eq!((b.anon, b.file, b.kernel), (Some(300), Some(700), Some(20)));
        assert_eq!((b.file_mapped, b.file_dirty), (Some(60), Some(5)));
        assert_eq!((b.failcnt, b.oom), (Some(42), Some(2)));
        assert_eq!(b.psi_some_avg10, Some(12.5));
        assert_eq!(b.psi_full_avg10, Some(4.25));
    }

    #[test]
    fn smaps_rollup_splits_resident_memory() {
        let text = "55d2-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  1764 kB\nPss:  242 kB\n\
                    Pss_Anon:  112 kB\nPss_Shmem:  4 kB\nAnonymous:  160 kB\n";
        let p = parse_smaps_rollup(text).unwrap();
        assert_eq!(p.rss_anon, Some(160 << 10));
        assert_eq!(p.rss_shmem, Some(4 << 10));
        assert_eq!(p.rss_file, Some((1764 - 160 - 4) << 10));
        assert!(parse_smaps_rollup("nothing").is_none());
        // This process's own file, read for real.
        let me = process_breakdown(std::process::id()).unwrap();
        assert!(
            me.rss_anon.unwrap() > 0 && me.rss_file.unwrap() > 0,
            "{me:?}"
        );
    }

    /// `VmRSS` of `/proc/PID/status`, which the sampler read before `statm`.
    fn status_rss(pid: u32) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| {
            let kb = l
                .strip_prefix("VmRSS:")?
                .trim()
                .trim_end_matches("kB")
                .trim();
            kb.parse::<u64>().ok().map(|k| k * 1024)
        })
    }

    fn sleeper_in(procs: &Path) -> std::process::Child {
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$1" && exec sleep 30"#)
            .arg("sh")
            .arg(procs)
            .spawn()
            .unwrap();
        // Until the exec: sleep's memory, not the shell's.
        let started = std::time::Instant::now();
        while fs::read_link(format!("/proc/{}/exe", child.id()))
            .is_ok_and(|e| !e.ends_with("sleep"))
            && started.elapsed() < std::time::Duration::from_secs(5)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // And until the loader is done with it: its resident size holds.
        let mut last = None;
        while started.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = status_rss(child.id());
            if now.is_some() && now == last {
                break;
            }
            last = now;
        }
        child
    }

    #[test]
    fn statm_gives_the_rss_status_gives() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let rss = process_rss(pid);
        assert!(rss.is_some_and(|r| r > 0), "{rss:?}");
        assert_eq!(rss, status_rss(pid));
        assert_eq!(
            parse_statm(b"2700 1612 1337 13 0 212 0\n"),
            Some(1612 * page_size())
        );
        // A zombie: no memory map, zeros in statm, no VmRSS in status.
        assert_eq!(parse_statm(b"0 0 0 0 0 0 0\n"), None);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(process_rss(pid), None, "gone");
    }

    /// The files kept open from sample to sample read what a fresh open reads: a new limit, a
    /// new process, a removed cgroup (nothing), and one made again under the same name.
    #[test]
    fn a_held_cgroup_reads_what_a_fresh_open_reads() {
        use crate::source::cgroup::{CgroupRoots, CgroupVersion, MemoryCgroup, testing};
        let roots = CgroupRoots::default();
        let name = format!("heapwatch-unit-held-{}", std::process::id());
        let Some(cg) = testing::real_or_skip(&name, 64 << 20) else {
            return;
        };
        let limit_file = match cg.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        let probe = MemoryProbe::Cgroup(cg.memory());
        let MemoryProbe::Cgroup(memory) = &probe else {
            unreachable!()
        };
        let fresh = CgroupMemory::open(&cg.path).unwrap();
        let mut child = sleeper_in(&cg.procs_file());
        let s = probe.sample(0, None, Detail::Usage);
        assert_eq!(s.pid, Some(child.id()));
        assert_eq!(s.rss, status_rss(child.id()));
        assert_eq!(s.limit, Some(64 << 20));
        assert_eq!(s.oom_kills, Some(0));
        assert!(s.alive);
        assert_eq!(memory.usage(), fresh.usage());
        fs::write(cg.path.join(limit_file), (32u64 << 20).to_string()).unwrap();
        assert_eq!(probe.sample(0, None, Detail::Usage).limit, Some(32 << 20));
        // A restart: a new process, its own statm.
        let _ = child.kill();
        let _ = child.wait();
        let mut child = sleeper_in(&cg.procs_file());
        let s = probe.sample(0, None, Detail::Usage);
        assert_eq!(s.pid, Some(child.id()));
        assert_eq!(s.rss, status_rss(child.id()));
        let _ = child.kill();
        let _ = child.wait();
        // Removed: nothing read, and not alive.
        let path = cg.path.clone();
        cg.remove().unwrap();
        let s = probe.sample(0, Some(0), Detail::Usage);
        assert_eq!(
            (s.usage, s.limit, s.oom_kills, s.pid),
            (None, None, None, None)
        );
        assert!(!s.alive && !s.killed);
        // Made again under the same name: read anew.
        let again = MemoryCgroup::create(&roots, &name, 16 << 20).unwrap();
        assert_eq!(again.path, path);
        let s = probe.sample(0, None, Detail::Usage);
        assert_eq!(s.limit, Some(16 << 20));
        assert!(s.usage.is_some() && s.oom_kills == Some(0), "{s:?}");
        again.remove().unwrap();
    }

    #[test]
    fn the_oldest_process_of_a_cgroup_is_the_one_measured() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(main_pid(&[pid, me]), Some(me));
        assert_eq!(main_pid(&[pid]), Some(pid));
        assert_eq!(main_pid(&[]), None);
        let _ = child.kill();
        let _ = child.wait();
    }
}
