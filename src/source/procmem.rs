//! Process and cgroup memory read from outside the target: RSS from `/proc/PID/status`,
//! usage, limit and OOM-kill count from a v1 or v2 memory cgroup. Needs no answer from the
//! target, so it keeps working while the target stalls at its limit and before it opens
//! its profile endpoint.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

/// What to watch.
#[derive(Debug, Clone)]
pub enum MemoryProbe {
    Pid(u32),
    Cgroup(CgroupMemory),
    /// Whichever process the source talks to now (0 while unknown): an `agent:auto` target
    /// gets a new pid at every restart, and the sampler follows it.
    Follow(Arc<AtomicU32>),
}

#[derive(Debug, Clone)]
pub struct CgroupMemory {
    pub path: PathBuf,
    pub v2: bool,
}

impl CgroupMemory {
    /// A cgroup directory; v2 when it has `memory.current`, v1 when `memory.usage_in_bytes`.
    pub fn open(path: &Path) -> Result<CgroupMemory, String> {
        if path.join("memory.current").is_file() {
            Ok(CgroupMemory {
                path: path.to_path_buf(),
                v2: true,
            })
        } else if path.join("memory.usage_in_bytes").is_file() {
            Ok(CgroupMemory {
                path: path.to_path_buf(),
                v2: false,
            })
        } else {
            Err(format!(
                "{}: not a memory cgroup (neither memory.current nor memory.usage_in_bytes)",
                path.display()
            ))
        }
    }

    fn read_number(&self, file: &str) -> Option<u64> {
        let text = fs::read_to_string(self.path.join(file)).ok()?;
        text.trim().parse().ok()
    }

    fn read_counter(&self, file: &str, key: &str) -> Option<u64> {
        let text = fs::read_to_string(self.path.join(file)).ok()?;
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    }

    pub fn usage(&self) -> Option<u64> {
        if self.v2 {
            self.read_number("memory.current")
        } else {
            self.read_number("memory.usage_in_bytes")
        }
    }

    /// The limit, `None` when unlimited.
    pub fn limit(&self) -> Option<u64> {
        let limit = if self.v2 {
            self.read_number("memory.max")
        } else {
            self.read_number("memory.limit_in_bytes")
        }?;
        // v1 writes "no limit" as a huge page-rounded number.
        (limit < (1 << 62)).then_some(limit)
    }

    pub fn oom_kills(&self) -> Option<u64> {
        if self.v2 {
            self.read_counter("memory.events", "oom_kill")
        } else {
            self.read_counter("memory.oom_control", "oom_kill")
        }
    }

    /// Processes in the cgroup.
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }
}

/// One line of `memory.jsonl`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySample {
    pub t_ms: i64,
    /// `pid` or `cgroup`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills: Option<u64>,
    /// The OOM-kill counter moved since the previous sample: the kernel killed the target.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub killed: bool,
    /// False when the process (or every process of the cgroup) is gone.
    pub alive: bool,
    /// Where the cgroup's memory goes, and how hard it presses on its limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupBreakdown>,
    /// The process's resident memory split by kind (`/proc/PID/smaps_rollup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessBreakdown>,
}

/// A cgroup's `memory.stat` split, its charge failures and its events. v1 names in brackets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupBreakdown {
    /// Anonymous memory (v1 `total_rss`): what reclaim cannot drop without swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anon: Option<u64>,
    /// Page cache (v1 `total_cache`), reclaimable unless dirty, mapped or shmem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<u64>,
    /// File pages mapped into a process (v1 `total_mapped_file`), e.g. a mapped bolt database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mapped: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmem: Option<u64>,
    /// v1 `total_dirty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_dirty: Option<u64>,
    /// v1 `total_writeback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_writeback: Option<u64>,
    /// Kernel memory charged to the cgroup (v2 `kernel`; v1 `memory.kmem.usage_in_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<u64>,
    /// Times a charge hit the limit: v1 `memory.failcnt`, v2 `memory.events` `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failcnt: Option<u64>,
    /// v2 `memory.events` `oom` (v1: `under_oom` of `memory.oom_control` as 0/1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<u64>,
    /// v2 `memory.pressure`: share of time some / all tasks stalled on memory, last 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_some_avg10: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_full_avg10: Option<f64>,
}

/// A process's resident memory by kind, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessBreakdown {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_anon: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_file: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_shmem: Option<u64>,
}

impl MemorySample {
    /// The figure the kernel kills on: cgroup usage, else RSS.
    pub fn bytes(&self) -> Option<u64> {
        self.usage.or(self.rss)
    }
}

/// RSS of a process in bytes, `None` when it is gone.
pub fn process_rss(pid: u32) -> Option<u64> {
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

impl MemoryProbe {
    /// False while there is nothing to sample yet (a followed process not found so far).
    pub fn ready(&self) -> bool {
        match self {
            MemoryProbe::Follow(pid) => pid.load(Ordering::Relaxed) != 0,
            _ => true,
        }
    }

    pub fn sample(&self, t_ms: i64, previous_kills: Option<u64>) -> MemorySample {
        match self {
            MemoryProbe::Pid(pid) => pid_sample(*pid, t_ms),
            MemoryProbe::Follow(cell) => pid_sample(cell.load(Ordering::Relaxed), t_ms),
            MemoryProbe::Cgroup(cg) => {
                let oom_kills = cg.oom_kills();
                let pids = cg.pids();
                MemorySample {
                    t_ms,
                    source: "cgroup".into(),
                    pid: pids.first().copied(),
                    rss: pids.first().and_then(|&p| process_rss(p)),
                    usage: cg.usage(),
                    limit: cg.limit(),
                    killed: matches!((previous_kills, oom_kills), (Some(a), Some(b)) if b > a),
                    oom_kills,
                    alive: !pids.is_empty(),
                    ..MemorySample::default()
                }
            }
        }
    }
}

fn pid_sample(pid: u32, t_ms: i64) -> MemorySample {
    let rss = process_rss(pid);
    MemorySample {
        t_ms,
        source: "pid".into(),
        pid: Some(pid),
        rss,
        alive: rss.is_some(),
        ..MemorySample::default()
    }
}
