//! What the memory sampler records of a target from outside (`memory.jsonl`): cgroup usage and
//! limit, OOM kills, RSS, and where the memory goes. Plain data; `source::procmem` reads the
//! kernel's files into it.

use serde::{Deserialize, Serialize};

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
    /// The regular files the process holds, open or mapped: on a sample where they differ from
    /// the last ones written, or where their resident pages were measured. A sample without
    /// them holds what the one before said (runs recorded before they were noted have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<HeldFiles>,
}

/// The regular files a process holds (`/proc/PID/fd`, `/proc/PID/maps`), largest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldFiles {
    /// The process they were read from.
    pub pid: u32,
    pub files: Vec<HeldFile>,
    /// Regular files held beyond those listed (the smallest are left out).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: u32,
    /// The listing stopped at its cap of descriptors or its time budget: files may be missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// Resident pages were measured at this sample (`resident` of each file says it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub measured: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One file a process holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldFile {
    /// As the kernel names it (`/proc/PID/fd/N`'s link; " (deleted)" when unlinked).
    pub path: String,
    /// Its length (`st_size`).
    pub size: u64,
    /// Held through a file descriptor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
    /// Mapped into the process.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mapped: bool,
    /// On tmpfs or shared memory (a memory-backed `emptyDir`, `/dev/shm`, a memfd): its pages
    /// are the cgroup's `shmem`, which reclaim cannot drop without swap.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shmem: bool,
    /// Its pages in memory (`mincore` over a mapping of it, as `fincore` counts), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident: Option<u64>,
    /// Dirty pages of its shared mappings in the process (`smaps` `Shared_Dirty` +
    /// `Private_Dirty`), when measured and mapped shared; the kernel tells no dirty count per
    /// file that is only open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirty: Option<u64>,
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

impl CgroupBreakdown {
    /// Memory reclaim cannot take back without swap: anonymous and shared memory.
    pub fn unreclaimable(&self) -> Option<u64> {
        Some(self.anon? + self.shmem.unwrap_or(0))
    }
}

impl ProcessBreakdown {
    /// Resident memory reclaim cannot take back without swap.
    pub fn unreclaimable(&self) -> Option<u64> {
        Some(self.rss_anon? + self.rss_shmem.unwrap_or(0))
    }
}
