//! `runtime.ReadMemStats` done from outside (`Want::MemStats`, every `--memstats-interval`),
//! on the same reader thread and under the same deadline, byte budget and checks as the bucket
//! walk.
//!
//! - What `readmemstats_m` computes, from the same variables: the three generations of
//!   `memstats.heapStats` summed (`unsafeRead`), plus what every P's `mcache` holds in its cached
//!   spans (`allocCount - allocCountBeforeCache` per span class) and `tinyAllocs`, which
//!   `ReadMemStats` would flush first; `gcController`'s `heapInUse`, `heapFree`, `heapReleased`;
//!   the `*_sys` figures of `memstats`; `mheap_.spanalloc`/`cachealloc` in use; `NextGC` as
//!   `heapGoal()` computes it (the GOGC goal, the memory limit's when lower, the sweep distance
//!   and trigger runway). Two lines beyond the runtime's: `GOGC` (the GC percent, -1 when off)
//!   and `GOMEMLIMIT` (bytes; 9223372036854775807 when unset).
//! - The reply is the `# runtime.MemStats` block of `heap?debug=1` (the block
//!   `/debug/pprof/heap?debug=1` ends with), so the collector records a `memstats` record with
//!   these totals, as it records an HTTP target's, and the report's "where the memory went"
//!   works for `proc:` runs.
//! - The world is not stopped: a figure the process changes while it is read (an allocation, a
//!   span flushed, the scavenger returning pages) is read as it was at some moment of the read,
//!   not all at one instant. `tests/cli/proc_memstats.rs` holds every figure equal to a frozen
//!   fixture's own `ReadMemStats`, but `HeapReleased` (the scavenger moves it) and one allocation
//!   the runtime may make as it restarts the world after `ReadMemStats` (at most 4 objects, 256
//!   bytes and one page).
//! - The four variables (`runtime.memstats`, `runtime.gcController`, `runtime.mheap_`,
//!   `runtime.allp`) come from the symbol table, or, stripped, from the code (`stripped.rs`): the
//!   loads `runtime.readmemstats_m` makes of their fields at the release's offsets (the two
//!   32-bit loads, `numgc` and `numforcedgc`; six quadwords eight bytes apart from `heapInUse`
//!   on, outside `memstats`; two at the distance between `spanalloc.inuse` and
//!   `cachealloc.inuse`), and `runtime.flushmcache`'s two loads of `allp`. Each must be found
//!   exactly once. A process whose variables were not found answers each attempt (a failed
//!   attempt of kind `status`, like an HTTP 501) with why. Layouts per release are checked
//!   against DWARF.

use std::fmt::Write as _;

use super::memory::TargetMemory;
use super::walk::WalkError;

/// Byte offsets of what is read, for one range of Go releases (amd64). Checked against each
/// release's DWARF by tests/cli/proc_memstats.rs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemLayout {
    /// `heapStatsDelta`: its size, then the fields after `inWorkBufs` (which sit at 24, 32).
    pub delta_size: u64,
    pub tiny_alloc_count: u64,
    pub large_alloc: u64,
    pub large_alloc_count: u64,
    pub small_alloc_count: u64,
    pub large_free: u64,
    pub large_free_count: u64,
    pub small_free_count: u64,
    /// `inPtrScalarBits` (go1.23, go1.24: counted in `GCSys`).
    pub in_ptr_scalar_bits: Option<u64>,
    /// `mstats.stacks_sys`; `mspan_sys`, `mcache_sys`, `buckhash_sys`, `gcMiscSys`,
    /// `other_sys`, `last_gc_unix` and `pause_total_ns` follow a word apart, `numgc` 4160
    /// bytes on.
    pub stacks_sys: u64,
    /// `mheap_.spanalloc.inuse`, `mheap_.cachealloc.inuse`.
    pub spanalloc_inuse: u64,
    pub cachealloc_inuse: u64,
    /// `mcache.tinyAllocs`, `mcache.alloc`.
    pub mcache_tiny: u64,
    pub mcache_alloc: u64,
}

/// `gcControllerState` offsets, the same from go1.23 to go1.26.
pub mod gc {
    pub const GC_PERCENT: u64 = 0;
    pub const MEMORY_LIMIT: u64 = 8;
    pub const GC_PERCENT_HEAP_GOAL: u64 = 72;
    pub const SWEEP_DIST_MIN_TRIGGER: u64 = 80;
    pub const TRIGGERED: u64 = 88;
    pub const HEAP_MARKED: u64 = 152;
    pub const HEAP_IN_USE: u64 = 272;
    pub const HEAP_RELEASED: u64 = 280;
    pub const HEAP_FREE: u64 = 288;
    pub const TOTAL_ALLOC: u64 = 296;
    pub const TOTAL_FREE: u64 = 304;
    pub const MAPPED_READY: u64 = 312;
    /// Bytes read.
    pub const SIZE: usize = 320;
}

/// `p.mcache`; `mspan.allocCount` (u16) and `allocCountBeforeCache` (u16): the same in
/// every supported release.
const P_MCACHE: u64 = 56;
const SPAN_ALLOC_COUNT: u64 = 96;
const SPAN_ALLOC_BEFORE_CACHE: u64 = 102;
/// Size classes, and span classes (two per size class) in an `mcache`.
const SIZE_CLASSES: usize = 68;
const SPAN_CLASSES: usize = 2 * SIZE_CLASSES;
/// `numgc` less `stacks_sys` in `mstats`.
const NUMGC_FROM_STACKS_SYS: u64 = 4160;
/// Ps one read accepts: more is a corrupt `allp`.
const MAX_PS: u64 = 1 << 16;

/// The object size of each size class (`class_to_size`, unchanged from go1.23 to go1.26).
const CLASS_TO_SIZE: [u64; SIZE_CLASSES] = [
    0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320,
    352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792,
    2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728,
    10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672,
    32768,
];

/// The layout of a release, `None` for one not verified.
pub fn mem_layout_for(release: (u32, u32)) -> Option<MemLayout> {
    let (minor, shift) = match release {
        (1, m @ (23 | 24)) => (m, 0),
        (1, m @ (25 | 26)) => (m, 8),
        _ => return None,
    };
    let (spanalloc, cachealloc) = match minor {
        23 | 24 => (92296, 92368),
        25 => (92320, 92392),
        _ => (92320, 92464),
    };
    Some(MemLayout {
        delta_size: 1176 - shift,
        tiny_alloc_count: 48 - shift,
        large_alloc: 56 - shift,
        large_alloc_count: 64 - shift,
        small_alloc_count: 72 - shift,
        large_free: 616 - shift,
        large_free_count: 624 - shift,
        small_free_count: 632 - shift,
        in_ptr_scalar_bits: (shift == 0).then_some(40),
        stacks_sys: 3544 - 3 * shift,
        spanalloc_inuse: spanalloc + 48,
        cachealloc_inuse: cachealloc + 48,
        mcache_tiny: if minor == 23 { 32 } else { 40 },
        mcache_alloc: if minor == 23 { 40 } else { 48 },
    })
}

/// Where `memstats.numgc` sits from `runtime.memstats`.
pub fn numgc_offset(l: &MemLayout) -> u64 {
    l.stacks_sys + NUMGC_FROM_STACKS_SYS
}

/// Where the runtime's variables are in the process (load bias applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemAnchors {
    pub memstats: u64,
    pub gc_controller: u64,
    pub mheap: u64,
    pub allp: u64,
}

fn word(bytes: &[u8], off: u64) -> u64 {
    let off = off as usize;
    let mut a = [0u8; 8];
    a.copy_from_slice(&bytes[off..off + 8]);
    u64::from_le_bytes(a)
}

fn read_u64(mem: &dyn TargetMemory, addr: u64, what: &'static str) -> Result<u64, WalkError> {
    mem.read_u64(addr)
        .map_err(|fault| WalkError::Read { what, fault })
}

/// What one P's cache holds that `flushallmcaches` would count: (objects allocated per size
/// class from cached spans, tiny allocations).
fn mcaches(
    mem: &dyn TargetMemory,
    a: &MemAnchors,
    l: &MemLayout,
) -> Result<([u64; SIZE_CLASSES], u64), WalkError> {
    let mut small = [0u64; SIZE_CLASSES];
    let mut tiny = 0u64;
    let mut head = [0u8; 24];
    mem.read(a.allp, &mut head)
        .map_err(|fault| WalkError::Read {
            what: "runtime.allp",
            fault,
        })?;
    let (ptr, len) = (word(&head, 0), word(&head, 8));
    if len > MAX_PS || len > word(&head, 16) {
        return Err(WalkError::BadAllp { ptr, len });
    }
    let mut ps = vec![0u8; 8 * len as usize];
    mem.read(ptr, &mut ps).map_err(|fault| WalkError::Read {
        what: "runtime.allp's array",
        fault,
    })?;
    let mut alloc = vec![0u8; 8 * SPAN_CLASSES];
    let mut counts = [0u8; 8];
    for p in ps.chunks_exact(8).map(|c| word(c, 0)).filter(|&p| p != 0) {
        let cache = read_u64(mem, p.wrapping_add(P_MCACHE), "a P's mcache")?;
        if cache == 0 {
            continue;
        }
        tiny += read_u64(mem, cache.wrapping_add(l.mcache_tiny), "mcache.tinyAllocs")?;
        mem.read(cache.wrapping_add(l.mcache_alloc), &mut alloc)
            .map_err(|fault| WalkError::Read {
                what: "mcache.alloc",
                fault,
            })?;
        for (class, span) in alloc.chunks_exact(8).map(|c| word(c, 0)).enumerate() {
            if span == 0 {
                continue;
            }
            mem.read(span.wrapping_add(SPAN_ALLOC_COUNT), &mut counts)
                .map_err(|fault| WalkError::Read {
                    what: "a cached span",
                    fault,
                })?;
            let used = u16::from_le_bytes([counts[0], counts[1]]);
            let off = (SPAN_ALLOC_BEFORE_CACHE - SPAN_ALLOC_COUNT) as usize;
            let before = u16::from_le_bytes([counts[off], counts[off + 1]]);
            small[class / 2] += u64::from(used.saturating_sub(before));
        }
    }
    Ok((small, tiny))
}

/// `gcController.heapGoal()`, with the heap in use counted after the flush.
fn heap_goal(g: &[u8], heap_alloc: u64) -> u64 {
    let mut goal = word(g, gc::GC_PERCENT_HEAP_GOAL);
    let heap_marked = word(g, gc::HEAP_MARKED);
    // memoryLimitHeapGoal
    let heap_free = word(g, gc::HEAP_FREE);
    let mapped_ready = word(g, gc::MAPPED_READY);
    let limit = word(g, gc::MEMORY_LIMIT);
    let non_heap = mapped_ready
        .saturating_sub(heap_free)
        .saturating_sub(heap_alloc);
    let overage = mapped_ready.saturating_sub(limit);
    let limit_goal = if non_heap + overage >= limit {
        heap_marked
    } else {
        let goal = limit - (non_heap + overage);
        let headroom = (goal / 100 * 3).max(1 << 20);
        let goal = if goal < headroom || goal - headroom < headroom {
            headroom
        } else {
            goal - headroom
        };
        goal.max(heap_marked)
    };
    if limit_goal < goal {
        return limit_goal;
    }
    goal = goal.max(word(g, gc::SWEEP_DIST_MIN_TRIGGER));
    let triggered = word(g, gc::TRIGGERED);
    const MIN_RUNWAY: u64 = 64 << 10;
    if triggered != u64::MAX && goal < triggered.saturating_add(MIN_RUNWAY) {
        goal = triggered + MIN_RUNWAY;
    }
    goal
}

/// The process's MemStats now, as the `# runtime.MemStats` block of a debug=1 heap profile.
pub fn read(mem: &dyn TargetMemory, a: &MemAnchors, l: &MemLayout) -> Result<String, WalkError> {
    let stats_len = (l.stacks_sys + NUMGC_FROM_STACKS_SYS + 8) as usize;
    let mut ms = vec![0u8; stats_len];
    mem.read(a.memstats, &mut ms)
        .map_err(|fault| WalkError::Read {
            what: "runtime.memstats",
            fault,
        })?;
    let mut g = vec![0u8; gc::SIZE];
    mem.read(a.gc_controller, &mut g)
        .map_err(|fault| WalkError::Read {
            what: "runtime.gcController",
            fault,
        })?;
    let span_inuse = read_u64(mem, a.mheap + l.spanalloc_inuse, "mheap_.spanalloc")?;
    let cache_inuse = read_u64(mem, a.mheap + l.cachealloc_inuse, "mheap_.cachealloc")?;
    let (cached, cached_tiny) = mcaches(mem, a, l)?;

    // memstats.heapStats.unsafeRead: the three generations of deltas summed.
    let sum = |field: u64| -> u64 {
        (0..3).fold(0u64, |s, i| {
            s.wrapping_add(word(&ms, i * l.delta_size + field))
        })
    };
    let mut total_alloc = sum(l.large_alloc);
    let mut mallocs = sum(l.large_alloc_count);
    let mut total_free = sum(l.large_free);
    let mut frees = sum(l.large_free_count);
    for (class, &size) in CLASS_TO_SIZE.iter().enumerate() {
        let allocs = sum(l.small_alloc_count + 8 * class as u64).wrapping_add(cached[class]);
        total_alloc = total_alloc.wrapping_add(allocs.wrapping_mul(size));
        mallocs = mallocs.wrapping_add(allocs);
        let f = sum(l.small_free_count + 8 * class as u64);
        total_free = total_free.wrapping_add(f.wrapping_mul(size));
        frees = frees.wrapping_add(f);
    }
    let tiny = sum(l.tiny_alloc_count).wrapping_add(cached_tiny);
    mallocs = mallocs.wrapping_add(tiny);
    frees = frees.wrapping_add(tiny);
    let in_stacks = sum(24);
    let in_work_bufs = sum(32);
    let in_ptr_bits = l.in_ptr_scalar_bits.map_or(0, &sum);
    let sys = |i: u64| word(&ms, l.stacks_sys + 8 * i);
    let (stacks_sys, mspan_sys, mcache_sys, buckhash_sys, gc_misc_sys, other_sys) =
        (sys(0), sys(1), sys(2), sys(3), sys(4), sys(5));
    let (last_gc, pause_total) = (sys(6), sys(7));
    let numgc_at = numgc_offset(l) as usize;
    let numgc = u32::from_le_bytes(ms[numgc_at..numgc_at + 4].try_into().unwrap_or([0; 4]));
    let forced = u32::from_le_bytes(ms[numgc_at + 4..numgc_at + 8].try_into().unwrap_or([0; 4]));

    let heap_in_use = word(&g, gc::HEAP_IN_USE);
    let heap_free = word(&g, gc::HEAP_FREE);
    let heap_released = word(&g, gc::HEAP_RELEASED);
    let heap_sys = heap_in_use + heap_free + heap_released;
    let total = heap_sys
        + stacks_sys
        + mspan_sys
        + mcache_sys
        + buckhash_sys
        + gc_misc_sys
        + other_sys
        + in_stacks
        + in_work_bufs
        + in_ptr_bits;
    let heap_alloc = total_alloc.wrapping_sub(total_free);
    let gc_alloc = word(&g, gc::TOTAL_ALLOC)
        .wrapping_sub(word(&g, gc::TOTAL_FREE))
        .wrapping_add(
            cached
                .iter()
                .zip(CLASS_TO_SIZE)
                .map(|(n, size)| n * size)
                .sum::<u64>(),
        );
    let gc_percent = i32::from_le_bytes(g[0..4].try_into().unwrap_or([0; 4]));
    let limit = word(&g, gc::MEMORY_LIMIT) as i64;

    let mut out = String::from("# runtime.MemStats\n");
    let mut line = |name: &str, value: String| {
        let _ = writeln!(out, "# {name} = {value}");
    };
    line("Alloc", heap_alloc.to_string());
    line("TotalAlloc", total_alloc.to_string());
    line("Sys", total.to_string());
    line("Mallocs", mallocs.to_string());
    line("Frees", frees.to_string());
    line("HeapAlloc", heap_alloc.to_string());
    line("HeapSys", heap_sys.to_string());
    line("HeapIdle", (heap_free + heap_released).to_string());
    line("HeapInuse", heap_in_use.to_string());
    line("HeapReleased", heap_released.to_string());
    line("HeapObjects", mallocs.wrapping_sub(frees).to_string());
    line("Stack", format!("{in_stacks} / {}", in_stacks + stacks_sys));
    line("MSpan", format!("{span_inuse} / {mspan_sys}"));
    line("MCache", format!("{cache_inuse} / {mcache_sys}"));
    line("BuckHashSys", buckhash_sys.to_string());
    line(
        "GCSys",
        (gc_misc_sys + in_work_bufs + in_ptr_bits).to_string(),
    );
    line("OtherSys", other_sys.to_string());
    line("NextGC", heap_goal(&g, gc_alloc).to_string());
    line("LastGC", last_gc.to_string());
    line("PauseTotalNs", pause_total.to_string());
    line("NumGC", numgc.to_string());
    line("NumForcedGC", forced.to_string());
    line("GOGC", gc_percent.to_string());
    line("GOMEMLIMIT", limit.to_string());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::memory::ImageMemory;
    use super::*;

    #[test]
    fn layouts_exist_only_for_verified_releases() {
        assert!(mem_layout_for((1, 22)).is_none());
        assert!(mem_layout_for((1, 27)).is_none());
        let l = mem_layout_for((1, 25)).unwrap();
        assert_eq!(
            (l.stacks_sys, l.delta_size, l.in_ptr_scalar_bits),
            (3520, 1168, None)
        );
        assert_eq!(mem_layout_for((1, 23)).unwrap().stacks_sys, 3544);
    }

    #[test]
    fn the_goal_is_gogc_s_unless_the_memory_limit_is_lower() {
        let mut g = vec![0u8; gc::SIZE];
        let put = |g: &mut Vec<u8>, off: u64, v: u64| {
            g[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        put(&mut g, gc::GC_PERCENT_HEAP_GOAL, 8 << 20);
        put(&mut g, gc::MEMORY_LIMIT, i64::MAX as u64);
        put(&mut g, gc::TRIGGERED, u64::MAX);
        assert_eq!(heap_goal(&g, 1 << 20), 8 << 20);
        // A 10 MiB limit with 6 MiB mapped, 1 MiB of it free and 4 MiB live: 1 MiB is not
        // heap, so 9 MiB less 3 % headroom (1 MiB at least).
        put(&mut g, gc::MEMORY_LIMIT, 10 << 20);
        put(&mut g, gc::MAPPED_READY, 6 << 20);
        put(&mut g, gc::HEAP_FREE, 1 << 20);
        put(&mut g, gc::GC_PERCENT_HEAP_GOAL, 16 << 20);
        assert_eq!(heap_goal(&g, 4 << 20), 8 << 20, "the limit's goal");
        put(&mut g, gc::GC_PERCENT_HEAP_GOAL, 6 << 20);
        assert_eq!(heap_goal(&g, 4 << 20), 6 << 20, "GOGC's, lower");
        // Triggered just under GOGC's goal: the goal keeps 64 KiB of runway past the trigger.
        put(&mut g, gc::TRIGGERED, (6 << 20) - 1000);
        assert_eq!(heap_goal(&g, 4 << 20), (6 << 20) - 1000 + (64 << 10));
    }

    #[test]
    fn a_corrupt_allp_is_refused() {
        let l = mem_layout_for((1, 26)).unwrap();
        let mut head = Vec::new();
        for w in [0x5000u64, 1 << 40, 1 << 40] {
            head.extend_from_slice(&w.to_le_bytes());
        }
        let mem = ImageMemory {
            segments: vec![(0x1000, head)],
        };
        let a = MemAnchors {
            memstats: 0,
            gc_controller: 0,
            mheap: 0,
            allp: 0x1000,
        };
        assert_eq!(
            mcaches(&mem, &a, &l).unwrap_err(),
            WalkError::BadAllp {
                ptr: 0x5000,
                len: 1 << 40
            }
        );
    }
}
