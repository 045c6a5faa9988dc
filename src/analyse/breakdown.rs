//! Where a cycle's memory goes, at its peak: the cgroup's split (anonymous, mapped files, other
//! page cache, dirty) joined with the Go runtime's MemStats (heap live, held free, runtime), and
//! how long the cgroup sat at its limit, with how many charge failures. The kernel kills on
//! anonymous memory; page cache is reclaimed first, so the two are told apart.

use serde::Serialize;

use super::files::{self, FilesAtPeak};
use crate::model::capture::{CaptureRecord, RecordKind};
use crate::model::memory::MemorySample;

/// Usage within this share of the limit counts as "at the limit" (v1 reclaims to just under).
const AT_LIMIT_SHARE: f64 = 0.98;
/// Page cache charged this early in a cycle was read by someone else: a reused cgroup.
const INHERITED_CACHE_BYTES: u64 = 16 << 20;

/// The memory of a cycle at one moment, split by kind. Figures the run lacks are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// Seconds since the cycle's first capture.
    pub at_s: f64,
    /// Cgroup usage, else the process's RSS.
    pub total: u64,
    pub limit: Option<u64>,
    /// Anonymous memory: the cgroup's `anon`, else the process's `RssAnon`.
    pub anon: Option<u64>,
    /// MemStats HeapAlloc: live and not yet collected heap objects.
    pub go_heap_live: Option<u64>,
    /// Heap spans the runtime holds but no object uses (HeapInuse − HeapAlloc, plus
    /// HeapIdle − HeapReleased).
    pub go_held_free: Option<u64>,
    /// The runtime's own: stacks, GC metadata, spans, caches, other (Sys − HeapSys).
    pub go_runtime: Option<u64>,
    /// Anonymous memory the Go runtime does not account for (cgo, mmap by hand, …).
    pub other_anon: Option<u64>,
    pub mapped_files: Option<u64>,
    /// Page cache not mapped into the process.
    pub other_cache: Option<u64>,
    pub dirty: Option<u64>,
    /// The page cache by what the kernel can do with it (each a part of the cgroup's `file`):
    /// shared memory and tmpfs, which reclaim cannot drop without swap (a memory-backed
    /// `emptyDir` is tmpfs); pages under writeback and dirty ones (`dirty`), which must be
    /// written first; and clean cache, which it drops at once.
    pub shmem: Option<u64>,
    pub writeback: Option<u64>,
    pub clean_cache: Option<u64>,
    /// True when the cycle's first sample already held much page cache: charged by an earlier
    /// process of a reused cgroup, so cache figures are not comparable across runs.
    pub cache_inherited: bool,
    /// Seconds since the cycle's first capture of the MemStats the Go figures come from, when
    /// they are more than `MEMSTATS_SKEW_MS` away from the peak (they are read every few
    /// seconds, the memory every few milliseconds).
    pub memstats_at_s: Option<f64>,
    /// The nearest MemStats, when they were read while the memory was far from this moment's
    /// (by more than `MEMSTATS_MOVED_SHARE` of it): the Go figures are then left out, since
    /// splitting the peak with them puts the heap's growth since into "other anonymous".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memstats_elsewhere: Option<MemStatsElsewhere>,
    /// The files the process held nearest this moment, with their pages in memory, where the
    /// sampler listed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<FilesAtPeak>,
}

/// A kind of memory other than the Go heap's that can fill a limit: what the kernel could not
/// give back when the cgroup reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Filler {
    /// Shared memory and tmpfs (a memory-backed `emptyDir`): reclaim cannot drop it.
    SharedMemory,
    /// Page cache dirty or under writeback: written before it can be dropped.
    Unwritten,
    /// Anonymous memory the Go runtime does not account for (cgo, `mmap` by hand).
    OtherAnonymous,
}

/// What filled the limit at a cycle's peak, when a kind other than the Go heap did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Filled {
    pub kind: Filler,
    pub bytes: u64,
}

/// A kind fills the limit when it holds at least this share of the memory at the peak.
const FILLER_SHARE: f64 = 0.5;

impl MemoryBreakdown {
    /// The kind of memory that filled the limit, when the peak reached it and a kind the
    /// kernel cannot simply drop, other than the Go heap, holds most of it. A heap that did
    /// not fill the limit does not lead the account of a death the page cache caused.
    pub fn filled_by(&self) -> Option<Filled> {
        let limit = self.limit? as f64;
        if (self.total as f64) < AT_LIMIT_SHARE * limit {
            return None;
        }
        let unwritten = match (self.dirty, self.writeback) {
            (None, None) => None,
            (d, w) => Some(d.unwrap_or(0) + w.unwrap_or(0)),
        };
        [
            (Filler::SharedMemory, self.shmem),
            (Filler::Unwritten, unwritten),
            (Filler::OtherAnonymous, self.other_anon),
        ]
        .into_iter()
        .filter_map(|(kind, bytes)| {
            Some(Filled {
                kind,
                bytes: bytes?,
            })
        })
        .filter(|f| f.bytes as f64 >= FILLER_SHARE * self.total as f64)
        .max_by_key(|f| f.bytes)
    }
}

/// MemStats that describe another moment than the breakdown's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemStatsElsewhere {
    /// Seconds since the cycle's first capture when they were read.
    pub at_s: f64,
    /// The memory then, by the sample nearest to that read (same measure as `total`).
    pub total_then: u64,
    /// Their HeapAlloc.
    pub heap_alloc: Option<u64>,
}

/// Go figures read further than this from the peak say when they were read.
const MEMSTATS_SKEW_MS: i64 = 1000;
/// Go figures read while the total was further than this share of the peak's away from it do
/// not split the peak.
const MEMSTATS_MOVED_SHARE: f64 = 1.0 / 8.0;

/// How long the cgroup sat at its limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtLimit {
    /// Seconds since the cycle's first capture when usage first reached the limit.
    pub since_s: f64,
    /// How long it stayed there (the longest stretch).
    pub for_s: f64,
    /// Charges that failed against the limit meanwhile (failcnt / `max` events).
    pub charge_failures: Option<u64>,
    pub killed: bool,
    /// Page cache at the limit: reclaimable, but for its shared memory and tmpfs.
    pub file: Option<u64>,
    pub anon: Option<u64>,
    /// Shared memory and tmpfs at the limit, a part of `file` that reclaim cannot drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shmem: Option<u64>,
}

fn sub(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a?.saturating_sub(b?))
}

fn stat(r: &CaptureRecord, key: &str) -> Option<u64> {
    r.totals.get(key).and_then(|&v| u64::try_from(v).ok())
}

/// The memory of a cycle at its peak usage. `memstats` are the cycle's MemStats records.
pub fn at_peak(
    memory: &[&MemorySample],
    memstats: &[&CaptureRecord],
    start_ms: i64,
    limit: Option<u64>,
) -> Option<MemoryBreakdown> {
    // The split is sampled less often than the total: the peak among samples that carry it.
    let split = |m: &&&MemorySample| m.cgroup.is_some() || m.process.is_some();
    let peak_of = |with_split: bool| {
        memory
            .iter()
            .filter(|m| m.alive && (!with_split || split(m)))
            .filter_map(|m| m.bytes().map(|b| (b, *m)))
            .reduce(|a, b| if b.0 > a.0 { b } else { a })
    };
    let peak = peak_of(true).or_else(|| peak_of(false))?;
    let (total, m) = peak;
    let stats = memstats
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats && r.is_ok())
        .min_by_key(|r| (r.t_ms - m.t_ms).abs());
    let cg = m.cgroup.as_ref();
    let anon = cg
        .and_then(|c| c.anon)
        .or_else(|| m.process.as_ref().and_then(|p| p.rss_anon));
    // MemStats read while the memory was elsewhere describe another process state, however
    // near in time (a replay fills 190 MiB in 0.7 s).
    let memstats_elsewhere = stats.filter(|r| r.t_ms != m.t_ms).and_then(|r| {
        let (then, near) = memory
            .iter()
            .filter(|s| s.alive)
            .filter_map(|s| s.bytes().map(|b| (b, s.t_ms)))
            .min_by_key(|(_, t)| (t - r.t_ms).abs())?;
        let moved = total.abs_diff(then) as f64 > total as f64 * MEMSTATS_MOVED_SHARE;
        ((near - r.t_ms).abs() <= MEMSTATS_SKEW_MS && moved).then(|| MemStatsElsewhere {
            at_s: (r.t_ms - start_ms) as f64 / 1000.0,
            total_then: then,
            heap_alloc: stat(r, "HeapAlloc"),
        })
    });
    let stats = stats.filter(|_| memstats_elsewhere.is_none());
    let go_heap_live = stats.and_then(|r| stat(r, "HeapAlloc"));
    let memstats_at_s = stats
        .filter(|r| go_heap_live.is_some() && (r.t_ms - m.t_ms).abs() > MEMSTATS_SKEW_MS)
        .map(|r| (r.t_ms - start_ms) as f64 / 1000.0);
    let go_held_free = stats.and_then(|r| {
        let in_use_free = stat(r, "HeapInuse")?.saturating_sub(stat(r, "HeapAlloc")?);
        Some(in_use_free + stat(r, "HeapIdle")?.saturating_sub(stat(r, "HeapReleased")?))
    });
    let go_runtime = stats.and_then(|r| sub(stat(r, "Sys"), stat(r, "HeapSys")));
    let go_total = match (go_heap_live, go_held_free, go_runtime) {
        (Some(a), Some(b), Some(c)) => Some(a + b + c),
        _ => None,
    };
    let mapped_files = cg.and_then(|c| c.file_mapped);
    let b = MemoryBreakdown {
        at_s: (m.t_ms - start_ms) as f64 / 1000.0,
        total,
        limit: limit.or(m.limit),
        anon,
        go_heap_live,
        go_held_free,
        go_runtime,
        other_anon: sub(anon, go_total),
        mapped_files,
        other_cache: sub(cg.and_then(|c| c.file), mapped_files),
        dirty: cg.and_then(|c| c.file_dirty),
        shmem: cg.and_then(|c| c.shmem),
        writeback: cg.and_then(|c| c.file_writeback),
        clean_cache: cg.and_then(|c| {
            let held = c.shmem.unwrap_or(0) + c.file_dirty.unwrap_or(0);
            Some(c.file?.saturating_sub(held + c.file_writeback.unwrap_or(0)))
        }),
        cache_inherited: false,
        memstats_at_s,
        memstats_elsewhere,
        files: files::at_peak(memory, m.pid, m.t_ms, start_ms),
    };
    Some(b)
}

/// Flags page cache already charged when a cycle that follows another in the same cgroup began
/// (its first sample holds it): the earlier process's files, not comparable. A run's first
/// cycle may have read its own files before its first sample, so it is never flagged.
pub fn mark_inherited(b: &mut MemoryBreakdown, memory: &[&MemorySample], follows_another: bool) {
    let first_cache = memory
        .iter()
        .find_map(|s| s.cgroup.as_ref().and_then(|c| c.file));
    b.cache_inherited = follows_another && first_cache.is_some_and(|f| f >= INHERITED_CACHE_BYTES);
}

/// The longest stretch during which the cgroup's usage sat at its limit, when it did.
pub fn at_limit(
    memory: &[&MemorySample],
    start_ms: i64,
    limit: Option<u64>,
    killed: bool,
) -> Option<AtLimit> {
    let limit = limit.or_else(|| memory.iter().find_map(|m| m.limit))? as f64;
    let at = |m: &MemorySample| m.usage.is_some_and(|u| u as f64 >= AT_LIMIT_SHARE * limit);
    let mut best: Option<(usize, usize)> = None;
    let mut run: Option<usize> = None;
    for (i, m) in memory.iter().enumerate() {
        match (at(m), run) {
            (true, None) => run = Some(i),
            (false, Some(s)) => {
                if best.is_none_or(|(a, b)| {
                    memory[i - 1].t_ms - memory[s].t_ms > memory[b].t_ms - memory[a].t_ms
                }) {
                    best = Some((s, i - 1));
                }
                run = None;
            }
            _ => {}
        }
    }
    if let Some(s) = run {
        let e = memory.len() - 1;
        if best
            .is_none_or(|(a, b)| memory[e].t_ms - memory[s].t_ms > memory[b].t_ms - memory[a].t_ms)
        {
            best = Some((s, e));
        }
    }
    let (s, e) = best?;
    let secs = |t: i64| (t - start_ms) as f64 / 1000.0;
    // The split is sampled less often than the usage: every figure comes from the newest
    // sample of the stretch that carries it, so the words do not hang on which sample was last.
    let fails = |i: usize| memory[i].cgroup.as_ref().and_then(|c| c.failcnt);
    // Failures counted from the newest sample before the stretch that has them, when any.
    let before = (0..s).rev().find_map(fails).or_else(|| fails(s));
    let after = (s..=e).rev().find_map(fails);
    let charge_failures = after.zip(before).map(|(a, b)| a.saturating_sub(b));
    let cg = (s..=e).rev().find_map(|i| {
        memory[i]
            .cgroup
            .as_ref()
            .filter(|c| c.file.is_some() && c.anon.is_some())
    });
    let a = AtLimit {
        since_s: secs(memory[s].t_ms),
        for_s: (memory[e].t_ms - memory[s].t_ms) as f64 / 1000.0,
        charge_failures,
        killed,
        file: cg.and_then(|c| c.file),
        anon: cg.and_then(|c| c.anon),
        shmem: cg.and_then(|c| c.shmem),
    };
    Some(a)
}

// Measured and worded together in the tests of `render::memory`.
