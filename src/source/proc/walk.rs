//! The bucket walker: follows `runtime.mbuckets` through each bucket's `allnext` and copies out
//! its stack and `memRecord`, then applies `runtime.MemProfile`'s flush rule. Every read is
//! bounded and checked; a list that changes under the reader gives a failed attempt, never a
//! partial one.
//!
//! # GOEXPERIMENTs
//!
//! GOEXPERIMENTs are read from the version string's `X:` part (`go1.24.6 X:nospinbitmutex`;
//! go1.26 writes `go1.26.8-X:…`; `binary.rs` parses it). Two touch what the walker reads:
//! `nospinbitmutex` (go1.24) brings back the tristate futex lock, held whenever its key is not 0,
//! and is read as such (the spinbit reading, bit 0, would call a lock with sleeping waiters, key
//! 2, free); `staticlockranking` puts a rank before every mutex's key and is refused by name. The
//! others change the compiler, the GC, maps or code generation, not the bucket layout, the
//! profile lock or the module data (the runtime sources of go1.23 to go1.26 tag nothing else in
//! `mprof.go`, `symtab.go` or the lock files).
//!
//! # Reads are bounded and never trusted
//!
//! - Only addresses inside a readable mapping of `/proc/PID/maps` are read (`memory.rs`); a
//!   pointer outside is an error, not a fault.
//! - A bucket address seen twice ends the walk: the list loops ("bucket N (at 0x…) is one it
//!   already passed"). At most 2,000,000 buckets; `nstk` at most `maxProfStackDepth` (1024 for
//!   every supported release; the runtime itself throws above it); bucket type checked.
//! - A byte budget on what one walk copies (headers, stacks, records), checked before each copy:
//!   what the process has readable in `/proc/PID/maps` at that capture (a real list lives in
//!   that memory, each bucket in its own bytes), and never more than 1 GiB. A list of wild but
//!   well-formed buckets is refused when it passes it, not after gigabytes.
//! - The deadline: the walk checks it between attempts and every 64 buckets (the reader thread
//!   that makes a blocked read harmless is `ProcSource`'s, in `mod.rs`).
//! - The runtime only prepends buckets, so one head gives a fixed list. A memory copy is not
//!   atomic: a sweep's flush (`mProf_PostSweep`, which go1.23 to go1.26 call from
//!   `runtime.GC()` alone: an explicit GC, `debug.FreeOSMemory`, pprof's `?gc=1`, the gcloop
//!   fixture) rewrites the records of every bucket under
//!   `profMemActiveLock` without touching `mProfCycle`, and on a large profile it can start and
//!   end inside one walk, leaving the buckets read before it from one published state and the
//!   rest from the next. So the walk reads every record twice: the list (stacks and records),
//!   then `mProfCycle` and the lock, then every bucket's record again. It is trusted only when
//!   the counter (and its flushed bit) never changed, the lock was free at the start, at that
//!   middle instant and at the end, and every record read the second time equals the first
//!   (`active` and the future slot the capture uses). Between flushes those figures only grow
//!   (a `MemProfile` flush, which moves counts between them, holds the lock), so equal reads on
//!   either side of the middle instant are the records at that instant, a state the runtime
//!   published. Otherwise the walk is retried; after four tries the attempt fails ("the heap
//!   profile changed under the reader"). The gcloop fixture shows it: GC cycles back to back,
//!   one sampled allocation at each of 16 sites between them, so every published state has all
//!   16 sites equal; 500 captures in a row all have them equal, where without the second read
//!   187 of 922 mixed two states.
//! - **The GC clock comes from the same read.** `memstats.numgc` (found where the MemStats
//!   reader finds `runtime.memstats`) is read with `mProfCycle` at each of the three instants,
//!   and the walk is trusted only when it too never changed, so a heap record's `gc` (`num_gc`,
//!   and `profile_cycle`, the counter without its flushed bit) is the clock under which its
//!   profile was the published one. Mark termination bumps `numgc` a few statements before
//!   `mProf_NextCycle`, with the world stopped but not this reader: a walk that began and ended
//!   inside that window would pair the new count with the old cycle; three reads around a walk
//!   take longer than those statements. Tested against the runtime's own `NumGC`
//!   (tests/cli/gc_clock.rs: after 0, 1, 3, 7 and 2 more `runtime.GC()` calls, the capture's
//!   count is the program's, and the cycle moved by as many).
//! - A later capture reads only what can have changed. The runtime never frees, moves or
//!   changes a bucket's stack and only prepends, so the walker keeps the last whole list it read
//!   (`Snapshot::head`, `Snapshot::list`) and walks from the new head only until it meets the old
//!   one; those buckets' stacks are read once per list. A list that does not lead back to the
//!   known head is read whole again (a new `list` number); one that leads back through a bucket
//!   already known (a new bucket pointing into the middle of the old list) is refused as a loop.
//!   A refused or unfinished walk keeps nothing: the next one starts from scratch.
//! - Records are read where they are, in address order (`RecordPlan`, kept and merged as the list
//!   grows): records less than 4 KiB apart are one range, ranges go 1,024 to a
//!   `process_vm_readv`, in windows of 128 KiB. The stacks and headers between records are copied
//!   too: the kernel pins the target's pages once per range, and a 128-byte range per record cost
//!   more in pinning than the bytes between cost to copy (sys time 2.4 → 3.4 s over 60 captures,
//!   against 1.2 s merged); 128 KiB windows are still in the cache when the records are taken out
//!   (1 MiB windows: 48 against 41 ms a capture).
//! - A first walk reads its buckets through 256 KiB aligned blocks (`BlockReader`, in
//!   `memory.rs`): the buckets sit packed in `persistentalloc` chunks, so this is one system call
//!   per block instead of two per bucket.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::time::Instant;

use super::memory::{BlockReader, ReadFault, TargetMemory};

/// The runtime's data layout for one range of Go releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `bucket`: next, allnext, typ, hash, size, nstk (six words).
    pub header: usize,
    /// `memRecord`: active plus `future[3]`, four words each.
    pub record: usize,
    /// `maxProfStackDepth`: no bucket holds more PCs.
    pub max_stack: usize,
    /// `memProfile` in `bucketType`.
    pub mem_bucket: u64,
    /// Go 1.24+ on amd64 uses the spinbit mutex (bit 0 = locked); before, the futex mutex
    /// (any nonzero key = locked).
    pub spinbit_mutex: bool,
    /// `protomem.go` hides leading `internal/runtime/…` frames too (Go 1.24+), not only
    /// `runtime.` ones.
    pub hides_internal_runtime: bool,
}

/// The layouts a test has verified against the runtime's own profile. `None`: refused.
pub fn layout_for(release: (u32, u32)) -> Option<Layout> {
    match release {
        (1, minor @ 23..=26) => Some(Layout {
            header: 48,
            record: 128,
            max_stack: 1024,
            mem_bucket: 1,
            spinbit_mutex: minor >= 24,
            hides_internal_runtime: minor >= 24,
        }),
        _ => None,
    }
}

/// The layout under the build's GOEXPERIMENTs, or the experiment heapwatch cannot read
/// under. Only two touch what the walker reads: `spinbitmutex` (default on amd64 from go1.24;
/// `nospinbitmutex` brings back the futex lock, held whenever its key is not 0, so a lock with
/// sleeping waiters, key 2, must not read as free) and `staticlockranking` (puts a rank before
/// every mutex's key). The others change code generation, the GC, maps or the compiler, not
/// the buckets, the profile lock or the module data.
pub fn with_experiments(mut layout: Layout, experiments: &[String]) -> Result<Layout, String> {
    for x in experiments {
        match x.as_str() {
            "nospinbitmutex" => layout.spinbit_mutex = false,
            "spinbitmutex" => layout.spinbit_mutex = true,
            "staticlockranking" => return Err(x.clone()),
            _ => {}
        }
    }
    Ok(layout)
}

/// The Go releases `layout_for` accepts, for messages.
pub const SUPPORTED: &str = "go1.23 to go1.26";

/// Runtime addresses (load bias applied) of the variables the walker reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchors {
    pub mbuckets: u64,
    pub mprof_cycle: u64,
    pub prof_mem_active_lock: Option<u64>,
    /// `memstats.numgc`, when the runtime's MemStats are found: read with the cycle counter,
    /// so a capture says how many GC cycles had ended when its profile was the published one.
    pub numgc: Option<u64>,
}

/// One `memRecordCycle`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cycle {
    pub allocs: u64,
    pub frees: u64,
    pub alloc_bytes: u64,
    pub free_bytes: u64,
}

impl Cycle {
    fn add(&mut self, o: &Cycle) {
        self.allocs = self.allocs.wrapping_add(o.allocs);
        self.frees = self.frees.wrapping_add(o.frees);
        self.alloc_bytes = self.alloc_bytes.wrapping_add(o.alloc_bytes);
        self.free_bytes = self.free_bytes.wrapping_add(o.free_bytes);
    }
}

/// One bucket as read: its stack of return PCs and its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Where the bucket lives in the target: the runtime never frees or moves one, so for the
    /// life of the process this address stands for this stack.
    pub addr: u64,
    /// Where its PCs are in [`Snapshot::stacks`]: empty once forgotten
    /// ([`Snapshot::forget_stacks`]).
    pub stack: Range<usize>,
    /// How many PCs its stack holds (its record follows them), kept when the stack is not.
    pub depth: u32,
    pub active: Cycle,
    pub future: [Cycle; 3],
}

/// The profile state at one instant: the cycle counter and every bucket, head first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `mProfCycle.read()`: the counter without its flushed bit.
    pub cycle: u32,
    /// `memstats.numgc` over the same walk (when its address is known): the GC cycles
    /// completed, unchanged from before the walk to after it, as the cycle counter was.
    pub num_gc: Option<u32>,
    /// The clock (cycle counter word, `numgc`) read last when this list was trusted: a later
    /// walk under the same clock that finds every published figure as it was needs no second
    /// read (see `attempts`).
    pub trusted: Option<(u32, Option<u32>)>,
    /// `runtime.mbuckets` when the list was read: a later walk reads only the buckets in
    /// front of it (0: not a whole list).
    pub head: u64,
    /// Which reading of the list from its end this one extends: a new number each time the
    /// list is read whole. Within one, each bucket's stack was read once, so its address
    /// stands for that stack.
    pub list: u64,
    pub buckets: Vec<Bucket>,
    /// Every bucket's stack, one after the other. One buffer rather than one per bucket:
    /// in a process with a second thread each `malloc` and `free` that misses glibc's
    /// per-thread cache takes its arena's lock, and 100,000 buckets made that about 10 ms of
    /// an 80 ms capture (docs/benchmarks.md).
    pub stacks: Vec<u64>,
}

impl Snapshot {
    /// The return PCs of one of this snapshot's buckets (none once forgotten).
    pub fn stack(&self, b: &Bucket) -> &[u64] {
        &self.stacks[b.stack.clone()]
    }

    /// Drops every bucket's stack but the head's (which the next walk reads again to know the
    /// list for the same): the encoder keeps what it made of each stack (its locations) the
    /// first time it saw the bucket, and a later walk reads the stacks of the buckets added in
    /// front only, so the PCs would be a second copy of every stack, some 20 MiB on a
    /// 100,000-bucket profile (docs/benchmarks.md). A list read whole again reads them all.
    pub fn forget_stacks(&mut self) {
        let Some(first) = self.buckets.first() else {
            return;
        };
        let head = self.stack(first).to_vec();
        for b in &mut self.buckets {
            b.stack = 0..0;
        }
        self.buckets[0].stack = 0..head.len();
        // A fresh buffer: the old one's pages go back, where a cleared one would keep them.
        self.stacks = head;
    }

    /// PCs in every bucket's stack, forgotten or not.
    fn depth(&self) -> usize {
        self.buckets.iter().map(|b| b.depth as usize).sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    Read {
        what: &'static str,
        fault: ReadFault,
    },
    TooManyBuckets(usize),
    /// The list came back to a bucket it had already passed.
    Cycle {
        addr: u64,
        index: usize,
    },
    /// The buckets read so far hold more bytes than the budget (what the process has mapped).
    OverBudget {
        budget: u64,
        buckets: usize,
    },
    BucketType {
        addr: u64,
        typ: u64,
    },
    StackTooDeep {
        addr: u64,
        nstk: u64,
        max: usize,
    },
    /// The profile changed (a GC cycle or a flush) during every attempt.
    Busy {
        attempts: usize,
    },
    /// The deadline passed before a whole, checked walk.
    Deadline {
        buckets: usize,
    },
    /// `runtime.allgs` says more goroutines than its mapping holds (or than its capacity).
    BadAllgs {
        ptr: u64,
        len: u64,
        cap: u64,
    },
    /// The same `g` twice in `allgs`.
    GoroutineRepeat {
        addr: u64,
        index: usize,
    },
    /// A `g` whose status no runtime uses: not a goroutine.
    GoroutineStatus {
        addr: u64,
        status: u32,
    },
    /// The deadline passed before every goroutine was read.
    GoroutineDeadline {
        read: usize,
    },
    /// `runtime.allp` says more Ps than a runtime has (or than its capacity).
    BadAllp {
        ptr: u64,
        len: u64,
    },
    /// The goroutines would take more bytes than the process has mapped.
    GoroutinesOverBudget {
        budget: u64,
        goroutines: u64,
    },
}

impl WalkError {
    /// A walk that ran out of time or met a changing profile: worth another try later, unlike
    /// a damaged list.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            WalkError::Busy { .. }
                | WalkError::Deadline { .. }
                | WalkError::GoroutineDeadline { .. }
        )
    }
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::Read { what, fault } => write!(f, "reading {what}: {fault}"),
            WalkError::TooManyBuckets(n) => write!(
                f,
                "more than {n} heap profile buckets (a corrupt or cyclic list?)"
            ),
            WalkError::Cycle { addr, index } => write!(
                f,
                "the heap profile's bucket list loops: bucket {} (at {addr:#x}) is one it \
                 already passed, so the list is corrupt",
                index + 1
            ),
            WalkError::OverBudget { budget, buckets } => write!(
                f,
                "the first {buckets} heap profile buckets already hold more than {} MiB, more \
                 than the process has mapped or heapwatch copies in one walk (a corrupt list?)",
                budget >> 20
            ),
            WalkError::BucketType { addr, typ } => {
                write!(f, "bucket at {addr:#x} has type {typ}, not a heap bucket")
            }
            WalkError::StackTooDeep { addr, nstk, max } => write!(
                f,
                "bucket at {addr:#x} claims {nstk} stack frames, above the runtime's limit of {max}"
            ),
            WalkError::Busy { attempts } => write!(
                f,
                "the heap profile changed under the reader in {attempts} attempts (a GC cycle \
                 was flushing it); try again"
            ),
            WalkError::Deadline { buckets } => write!(
                f,
                "the timeout passed before a whole heap profile was read ({buckets} buckets in \
                 the last attempt)"
            ),
            WalkError::BadAllgs { ptr, len, cap } => write!(
                f,
                "runtime.allgs is corrupt: it says {len} goroutines (capacity {cap}) at \
                 {ptr:#x}, more than its capacity or than the memory mapped there holds"
            ),
            WalkError::GoroutineRepeat { addr, index } => write!(
                f,
                "runtime.allgs is corrupt: goroutine {} (at {addr:#x}) is one it already \
                 listed, so the list loops",
                index + 1
            ),
            WalkError::GoroutineStatus { addr, status } => write!(
                f,
                "the goroutine at {addr:#x} has status {status}, which no Go runtime uses (a \
                 corrupt runtime.allgs?)"
            ),
            WalkError::GoroutineDeadline { read } => write!(
                f,
                "the timeout passed before every goroutine was read ({read} read)"
            ),
            WalkError::BadAllp { ptr, len } => write!(
                f,
                "runtime.allp is corrupt: it says {len} Ps at {ptr:#x}, more than its \
                 capacity or than a Go runtime runs"
            ),
            WalkError::GoroutinesOverBudget { budget, goroutines } => write!(
                f,
                "runtime.allgs lists {goroutines} goroutines, more than the {} MiB the process \
                 has mapped could hold (a corrupt list?)",
                budget >> 20
            ),
        }
    }
}

/// Bounds on one walk.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_buckets: usize,
    pub attempts: usize,
    /// Bytes of bucket headers, stacks and records one walk may copy. A real list cannot hold
    /// more than the process has mapped; the proc source lowers it to that at each capture.
    pub max_bytes: u64,
    /// When the walk gives up (checked between blocks, buckets and attempts).
    pub deadline: Option<Instant>,
}

/// The most one walk copies, whatever the target has mapped: 1 GiB (a profile of two million
/// buckets of 64 frames each is 1.3 GiB in the runtime; real ones are a few MiB).
pub const MAX_WALK_BYTES: u64 = 1 << 30;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_buckets: 2_000_000,
            attempts: 4,
            max_bytes: MAX_WALK_BYTES,
            deadline: None,
        }
    }
}

impl Limits {
    fn past(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

fn word(bytes: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    u64::from_le_bytes(a)
}

fn read_u32(mem: &dyn TargetMemory, addr: u64, what: &'static str) -> Result<u32, WalkError> {
    let mut b = [0u8; 4];
    mem.read(addr, &mut b)
        .map_err(|fault| WalkError::Read { what, fault })?;
    Ok(u32::from_le_bytes(b))
}

/// What is read before, in the middle of and after a walk: the walk stands when the clock is
/// the same at all three and the lock free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Guard {
    /// The cycle counter word and `numgc`.
    clock: (u32, Option<u32>),
    /// The active-profile lock is held.
    held: bool,
}

fn guard(mem: &dyn TargetMemory, a: &Anchors, layout: &Layout) -> Result<Guard, WalkError> {
    let cycle = read_u32(mem, a.mprof_cycle, "runtime.mProfCycle")?;
    let numgc = match a.numgc {
        Some(at) => Some(read_u32(mem, at, "runtime.memstats.numgc")?),
        None => None,
    };
    let held = match a.prof_mem_active_lock {
        Some(addr) => {
            let key = mem.read_u64(addr).map_err(|fault| WalkError::Read {
                what: "runtime.profMemActiveLock",
                fault,
            })?;
            if layout.spinbit_mutex {
                key & 1 != 0
            } else {
                key != 0
            }
        }
        None => false,
    };
    Ok(Guard {
        clock: (cycle, numgc),
        held,
    })
}

fn cycle_at(body: &[u8], n: usize, k: usize) -> Cycle {
    Cycle {
        allocs: word(body, n + 4 * k),
        frees: word(body, n + 4 * k + 1),
        alloc_bytes: word(body, n + 4 * k + 2),
        free_bytes: word(body, n + 4 * k + 3),
    }
}

/// What one walk fills, kept from capture to capture by a caller that walks again: refilling
/// buffers that already have the room costs nothing, where growing fresh ones each capture
/// (100,000 buckets: some 70 MiB of new pages) cost more than the walk itself.
#[derive(Debug, Default)]
pub struct Buffers {
    /// The last whole list read, handed back once used (see [`Snapshot::head`]); a snapshot
    /// that is not a whole list lends only its capacity.
    pub spare: Snapshot,
    /// std's keyed hasher: the addresses are the target's to choose, and must not be able to
    /// make the set's lookups collide.
    seen: HashSet<u64>,
    /// The buckets found in front of the known list by one pass.
    fresh: Vec<Bucket>,
    /// Where the list's records are, and the ranges and bytes of one window of reads.
    plan: RecordPlan,
    ranges: Vec<(u64, usize)>,
    window: Vec<u8>,
}

/// What [`walk_from`] starts from: the buckets already in hand, counted against the limits.
#[derive(Default)]
struct Known {
    /// The head of the list in hand: the pass stops there (0: walk to the end).
    head: u64,
    /// What the head bucket held when it was read: its link and its stack. A pass that meets
    /// `head` reads them again, so a list in hand is never taken for another at the same
    /// address (the same pid after an exec, its allocator placing buckets where the old ones were).
    head_next: u64,
    head_stack: Vec<u64>,
    buckets: usize,
    stacks: usize,
    bytes: u64,
}

impl Known {
    fn of(list: &Snapshot, layout: &Layout) -> Known {
        let Some(first) = list.buckets.first() else {
            return Known::default();
        };
        Known {
            head: list.head,
            head_next: list.buckets.get(1).map_or(0, |b| b.addr),
            head_stack: list.stack(first).to_vec(),
            buckets: list.buckets.len(),
            stacks: list.stacks.len(),
            bytes: (list.buckets.len() * (layout.header + layout.record) + 8 * list.depth()) as u64,
        }
    }
}

/// Where a pass of [`walk_from`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// At the known head, which still holds what it held.
    Known,
    /// At the list's end, without meeting the known head.
    End,
    /// At the known head, which no longer holds what it held: the list in hand is not this one.
    Stale,
}

/// One pass from `at` down the list until `known.head` or the list's end, into `fresh` (cleared
/// first) with its stacks appended to `stacks`.
#[allow(clippy::too_many_arguments)]
fn walk_from(
    mem: &dyn TargetMemory,
    mut at: u64,
    known: &Known,
    layout: &Layout,
    limits: &Limits,
    fresh: &mut Vec<Bucket>,
    stacks: &mut Vec<u64>,
    seen: &mut HashSet<u64>,
) -> Result<Reach, WalkError> {
    fresh.clear();
    seen.clear();
    let mut copied = known.bytes;
    let mut header = vec![0u8; layout.header];
    let mut body = Vec::new();
    while at != 0 {
        if at == known.head {
            return still_known(mem, known, layout, &mut header, &mut body);
        }
        let index = known.buckets + fresh.len();
        if index >= limits.max_buckets {
            return Err(WalkError::TooManyBuckets(limits.max_buckets));
        }
        if !seen.insert(at) {
            return Err(WalkError::Cycle { addr: at, index });
        }
        // Every 64 buckets: a clock read per bucket would cost more than the bucket.
        if fresh.len() % 64 == 63 && limits.past() {
            return Err(WalkError::Deadline { buckets: index });
        }
        mem.read(at, &mut header).map_err(|fault| WalkError::Read {
            what: "a bucket header",
            fault,
        })?;
        let (allnext, typ, nstk) = (word(&header, 1), word(&header, 2), word(&header, 5));
        if typ != layout.mem_bucket {
            return Err(WalkError::BucketType { addr: at, typ });
        }
        if nstk > layout.max_stack as u64 {
            return Err(WalkError::StackTooDeep {
                addr: at,
                nstk,
                max: layout.max_stack,
            });
        }
        let n = nstk as usize;
        copied += (layout.header + 8 * n + layout.record) as u64;
        if copied > limits.max_bytes {
            return Err(WalkError::OverBudget {
                budget: limits.max_bytes,
                buckets: index + 1,
            });
        }
        body.resize(8 * n + layout.record, 0);
        let body_at = at
            .checked_add(layout.header as u64)
            .ok_or(WalkError::Read {
                what: "a bucket",
                fault: ReadFault::Unmapped { addr: at, len: 0 },
            })?;
        mem.read(body_at, &mut body)
            .map_err(|fault| WalkError::Read {
                what: "a bucket's stack and record",
                fault,
            })?;
        let first = stacks.len();
        stacks.extend((0..n).map(|i| word(&body, i)));
        fresh.push(Bucket {
            addr: at,
            stack: first..stacks.len(),
            depth: n as u32,
            active: cycle_at(&body, n, 0),
            future: [
                cycle_at(&body, n, 1),
                cycle_at(&body, n, 2),
                cycle_at(&body, n, 3),
            ],
        });
        at = allnext;
    }
    Ok(Reach::End)
}

/// Reads the known head bucket again: [`Reach::Known`] when its type, link and stack are what
/// they were, [`Reach::Stale`] otherwise.
fn still_known(
    mem: &dyn TargetMemory,
    known: &Known,
    layout: &Layout,
    header: &mut [u8],
    body: &mut Vec<u8>,
) -> Result<Reach, WalkError> {
    let what = "the known head bucket, read again";
    mem.read(known.head, header)
        .map_err(|fault| WalkError::Read { what, fault })?;
    let (next, typ, nstk) = (word(header, 1), word(header, 2), word(header, 5));
    if typ != layout.mem_bucket || next != known.head_next {
        return Ok(Reach::Stale);
    }
    if nstk != known.head_stack.len() as u64 {
        return Ok(Reach::Stale);
    }
    body.resize(8 * known.head_stack.len(), 0);
    let body_at = known.head.saturating_add(layout.header as u64);
    mem.read(body_at, body)
        .map_err(|fault| WalkError::Read { what, fault })?;
    let same = (0..known.head_stack.len()).all(|i| word(body, i) == known.head_stack[i]);
    Ok(if same { Reach::Known } else { Reach::Stale })
}

/// Where a list's records are, by address. The runtime packs buckets into 256 KiB chunks, so
/// records a few hundred bytes apart are read as one range, with the stacks and headers between
/// them: the kernel pins the target's pages once per range, and a read of each 128-byte record
/// on its own cost more than copying the bytes between (docs/benchmarks.md).
#[derive(Debug, Default)]
struct RecordPlan {
    /// The list it was made for: its head and length.
    list: (u64, usize),
    /// (record address, bucket index), in address order.
    spots: Vec<(u64, u32)>,
}

impl RecordPlan {
    /// Made for `buckets` (head first, starting at `head`): from the plan in hand when the list
    /// is the one it was made for with `added` buckets in front (`extended`: that list's
    /// head and the number added), from scratch otherwise.
    fn update(
        &mut self,
        layout: &Layout,
        head: u64,
        buckets: &[Bucket],
        extended: Option<(u64, usize)>,
    ) {
        let at = |b: &Bucket| b.addr + (layout.header + 8 * b.depth as usize) as u64;
        match extended {
            Some((known, added)) if self.list == (known, buckets.len() - added) => {
                if added > 0 {
                    for spot in &mut self.spots {
                        spot.1 += added as u32;
                    }
                    let old = self.spots.len();
                    let new = buckets[..added].iter().enumerate();
                    self.spots.extend(new.map(|(i, b)| (at(b), i as u32)));
                    self.spots[old..].sort_unstable();
                    // Two sorted runs: the stable sort merges them in one pass.
                    self.spots.sort();
                }
            }
            _ => {
                self.spots.clear();
                let all = buckets.iter().enumerate();
                self.spots.extend(all.map(|(i, b)| (at(b), i as u32)));
                self.spots.sort_unstable();
            }
        }
        self.list = (head, buckets.len());
    }
}

/// Bytes between two records below which they are read as one range.
const RECORD_GAP: u64 = 4096;
/// Bytes of records (and what lies between them) read per window: few enough to still be in
/// the cache when the records are taken out of them after the kernel's copy (1 MiB windows cost
/// 48 ms a capture on the 100k-bucket target, 128 KiB ones 41 ms; docs/benchmarks.md).
const RECORD_WINDOW: usize = 128 << 10;
/// Ranges per window: one `process_vm_readv` takes up to 1024.
const RECORD_RANGES: usize = 1024;

/// Reads every record the plan places, window by window in address order, handing each to
/// `each` with its bucket's index; stops early when `each` says so. False when it was stopped.
fn read_records(
    mem: &dyn TargetMemory,
    (layout, limits): (&Layout, &Limits),
    buffers: &mut Buffers,
    what: &'static str,
    mut each: impl FnMut(usize, &[u8]) -> bool,
) -> Result<bool, WalkError> {
    let Buffers {
        plan,
        ranges,
        window,
        ..
    } = buffers;
    let rec = layout.record;
    let spots = &plan.spots;
    let mut i = 0;
    while i < spots.len() {
        if limits.past() {
            return Err(WalkError::Deadline {
                buckets: spots.len(),
            });
        }
        let first = i;
        ranges.clear();
        let mut bytes = 0;
        // Where the readable memory under the last range ends: a range never grows past it,
        // so joining two records never makes a read that no single record needed.
        let mut span_end = 0;
        while let Some(&(a, _)) = spots.get(i) {
            let end = a.saturating_add(rec as u64);
            let full = ranges.len() == RECORD_RANGES || bytes >= RECORD_WINDOW;
            match ranges.last_mut() {
                Some((start, len))
                    if a <= start.saturating_add(*len as u64).saturating_add(RECORD_GAP)
                        && end <= span_end
                        && end - *start <= RECORD_WINDOW as u64 =>
                {
                    let grown = (end.max(*start + *len as u64) - *start) as usize;
                    bytes += grown - *len;
                    *len = grown;
                }
                _ if full => break,
                _ => {
                    ranges.push((a, rec));
                    bytes += rec;
                    span_end = mem.readable_span(a).map_or(end, |(_, hi)| hi);
                }
            }
            i += 1;
        }
        window.resize(bytes, 0);
        mem.read_ranges(ranges, window)
            .map_err(|fault| WalkError::Read { what, fault })?;
        let (mut r, mut offset) = (0, 0);
        for &(a, bucket) in &spots[first..i] {
            // Each record lies wholly in one range, the ranges in address order.
            while a.saturating_add(rec as u64) > ranges[r].0 + ranges[r].1 as u64 {
                offset += ranges[r].1;
                r += 1;
            }
            let at = offset + (a - ranges[r].0) as usize;
            if !each(bucket as usize, &window[at..at + rec]) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The numbers [`Snapshot::list`] takes, one per list read whole, unique in this process.
static LISTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Brings `list` to the list that starts at `head`. The runtime only ever prepends buckets and
/// never frees, moves or changes one's stack, so when `list` is a whole list read before, only
/// the buckets in front of its head are walked; the others' records are read where they are,
/// in many-range reads, their stacks not read again. A list that does not lead back to the
/// known head is read whole; one that leads back through a bucket already known is damaged.
/// True when `steady` (the profile cycle whose figures are compared) was given, the list in
/// hand was extended, and every known bucket's published figures (active and that cycle's
/// future slot) were what the list held.
fn bring_up_to(
    mem: &dyn TargetMemory,
    head: u64,
    layout: &Layout,
    limits: &Limits,
    list: &mut Snapshot,
    buffers: &mut Buffers,
    steady: Option<u32>,
) -> Result<bool, WalkError> {
    if list.head == 0 {
        list.buckets.clear();
        list.stacks.clear();
    }
    let mut known = Known::of(list, layout);
    let mut pass = |known: &Known, list: &mut Snapshot| {
        // A first walk reads every bucket: through blocks, dozens of buckets a read.
        let blocks = BlockReader::new(mem);
        let reader: &dyn TargetMemory = if known.head == 0 { &blocks } else { mem };
        let (fresh, seen) = (&mut buffers.fresh, &mut buffers.seen);
        let stacks = &mut list.stacks;
        walk_from(reader, head, known, layout, limits, fresh, stacks, seen)
    };
    let mut reach = pass(&known, list);
    let again = matches!(
        reach,
        Ok(Reach::Stale) | Err(WalkError::TooManyBuckets(_) | WalkError::OverBudget { .. })
    );
    if known.head != 0 && again {
        // The list in hand is not this list, or keeping it while reading this one whole would
        // pass the limits: this one is read whole, from nothing.
        list.buckets.clear();
        list.stacks.clear();
        known = Known::default();
        reach = pass(&known, list);
    }
    let reached = reach? == Reach::Known;
    let base = known.stacks;
    let fresh = &mut buffers.fresh;
    if !reached {
        // Read whole after all: what was known goes.
        list.buckets.clear();
        list.stacks.drain(..base);
        for b in fresh.iter_mut() {
            b.stack = b.stack.start - base..b.stack.end - base;
        }
    } else if known.head != 0 {
        let mut ahead: Vec<u64> = fresh.iter().map(|b| b.addr).collect();
        ahead.sort_unstable();
        if let Some(index) = list
            .buckets
            .iter()
            .position(|b| ahead.binary_search(&b.addr).is_ok())
        {
            return Err(WalkError::Cycle {
                addr: list.buckets[index].addr,
                index: fresh.len() + index,
            });
        }
    }
    let extended = (reached && known.head != 0).then_some((known.head, fresh.len()));
    if list.buckets.is_empty() {
        // A first walk: its buckets are the list (and the list's spare room is the next
        // pass's), rather than a second copy of 100,000 buckets.
        std::mem::swap(&mut list.buckets, fresh);
    } else if !fresh.is_empty() {
        list.buckets.splice(0..0, fresh.drain(..));
    }
    list.head = head;
    if extended.is_none() {
        list.list = LISTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    buffers.plan.update(layout, head, &list.buckets, extended);
    let mut same = steady.is_some();
    if let Some((_, added)) = extended {
        // The known buckets' records, read where they are (the new ones' with them).
        let buckets = &mut list.buckets;
        let bounds = (layout, limits);
        let slot = steady.map_or(0, |cycle| 1 + (cycle % 3) as usize);
        read_records(mem, bounds, buffers, "a bucket's record", |i, record| {
            let b = &mut buckets[i];
            let active = cycle_at(record, 0, 0);
            let future = [
                cycle_at(record, 0, 1),
                cycle_at(record, 0, 2),
                cycle_at(record, 0, 3),
            ];
            // A bucket added in front has no figures in hand; its published ones are zero
            // until a cycle is flushed (its first allocations go to a later cycle's slot).
            if same && i >= added {
                same = active == b.active && future[slot - 1] == b.future[slot - 1];
            }
            b.active = active;
            b.future = future;
            true
        })?;
    } else {
        same = false;
    }
    Ok(same)
}

/// Reads every bucket's record again: true when the figures the profile is made of (the active
/// record and the future slot of `cycle`) are as the walk saw them.
fn unchanged(
    mem: &dyn TargetMemory,
    layout: &Layout,
    buckets: &[Bucket],
    cycle: u32,
    limits: &Limits,
    buffers: &mut Buffers,
) -> Result<bool, WalkError> {
    let index = (cycle % 3) as usize;
    let what = "a bucket's record, read again";
    read_records(mem, (layout, limits), buffers, what, |i, record| {
        let b = &buckets[i];
        cycle_at(record, 0, 0) == b.active && cycle_at(record, 0, 1 + index) == b.future[index]
    })
}

/// How long one attempt waits for a held active-profile lock: 40 × 250 µs = 10 ms.
const LOCK_POLLS: usize = 40;
const LOCK_POLL: std::time::Duration = std::time::Duration::from_micros(250);

/// Reads the whole heap profile state, as it was at one instant the runtime could have
/// published it. The runtime only ever prepends buckets, so one head gives a fixed list. A
/// sweep's flush (`mProf_PostSweep`) rewrites the records under the active-profile lock
/// without touching `mProfCycle`, and can start and end inside one walk: a memory copy is not
/// atomic. So the records are read twice, with the lock read in between; the walk is trusted
/// when the cycle held, the lock was free at that middle instant and at both ends, and every
/// record read the second time equals the first. Records only grow between flushes, so equal
/// reads on either side of the middle instant are the records at that instant.
pub fn walk(
    mem: &dyn TargetMemory,
    anchors: &Anchors,
    layout: &Layout,
    limits: &Limits,
) -> Result<Snapshot, WalkError> {
    walk_reusing(mem, anchors, layout, limits, &mut Buffers::default())
}

/// [`walk`], starting from the list a previous walk left in `buffers` (only the buckets added
/// since are walked; see `bring_up_to`).
pub fn walk_reusing(
    mem: &dyn TargetMemory,
    anchors: &Anchors,
    layout: &Layout,
    limits: &Limits,
    buffers: &mut Buffers,
) -> Result<Snapshot, WalkError> {
    let mut list = std::mem::take(&mut buffers.spare);
    match attempts(mem, anchors, layout, limits, &mut list, buffers) {
        Ok((cycle, num_gc)) => {
            list.cycle = cycle >> 1;
            list.num_gc = num_gc;
            list.trusted = Some((cycle, num_gc));
            Ok(list)
        }
        Err(e) => {
            // A list read whole but never read still is kept for the next walk; anything
            // else lends only its room.
            if !matches!(e, WalkError::Busy { .. }) {
                list.head = 0;
            }
            list.trusted = None;
            buffers.spare = list;
            Err(e)
        }
    }
}

/// Up to `limits.attempts` tries at a still list: the clock it was read under (the cycle
/// counter word, `numgc`) when one is read.
fn attempts(
    mem: &dyn TargetMemory,
    anchors: &Anchors,
    layout: &Layout,
    limits: &Limits,
    list: &mut Snapshot,
    buffers: &mut Buffers,
) -> Result<(u32, Option<u32>), WalkError> {
    for _ in 0..limits.attempts.max(1) {
        if limits.past() {
            return Err(WalkError::Deadline {
                buckets: list.buckets.len(),
            });
        }
        let mut before = guard(mem, anchors, layout)?;
        // A GC's flush holds the lock for a pass over every bucket (milliseconds on a large
        // profile): waiting it out costs nothing, where walking into it wastes a whole attempt.
        for _ in 0..LOCK_POLLS {
            if !before.held || limits.past() {
                break;
            }
            std::thread::sleep(LOCK_POLL);
            before = guard(mem, anchors, layout)?;
        }
        if before.held {
            continue;
        }
        let head = mem
            .read_u64(anchors.mbuckets)
            .map_err(|fault| WalkError::Read {
                what: "runtime.mbuckets",
                fault,
            })?;
        // The list in hand was trusted under this same clock: its published figures are
        // compared as its records are read.
        let cycle = before.clock.0 >> 1;
        let steady = (list.trusted == Some(before.clock)).then_some(cycle);
        let same = bring_up_to(mem, head, layout, limits, list, buffers, steady)?;
        if guard(mem, anchors, layout)? != before {
            continue;
        }
        if same {
            // Every record read now equals its last trusted reading, under one clock from
            // that reading (after it) to now, with the lock free at this walk's start and
            // end: between flushes those figures only grow, so each held still from its last
            // reading to this one, through this walk's first instant. One read was enough.
            return Ok(before.clock);
        }
        if !unchanged(mem, layout, &list.buckets, cycle, limits, buffers)? {
            continue;
        }
        if guard(mem, anchors, layout)? == before {
            return Ok(before.clock);
        }
    }
    Err(WalkError::Busy {
        attempts: limits.attempts.max(1),
    })
}

/// One record as `runtime.MemProfile(p, true)` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemRecord<'a> {
    /// The bucket's address in the target (see [`Bucket::addr`]).
    pub bucket: u64,
    pub stack: &'a [u64],
    pub alloc_objects: i64,
    pub alloc_bytes: i64,
    pub free_objects: i64,
    pub free_bytes: i64,
    /// Allocated in the cycles the profile has not published yet (the two `future` slots
    /// other than the one the current cycle flushes), their frees not yet known. Zero before
    /// the first GC, when every cycle is summed into the figures above.
    pub recent_objects: i64,
    pub recent_bytes: i64,
}

/// `memProfileInternal`'s rule: the active record plus the future slot the current cycle
/// flushes; when every bucket is still empty after that (no GC yet), all cycles summed.
pub fn mem_profile(snapshot: &Snapshot) -> Vec<MemRecord<'_>> {
    mem_records(snapshot).collect()
}

/// [`mem_profile`]'s records one at a time, head first, with nothing collected.
pub fn mem_records(snapshot: &Snapshot) -> impl ExactSizeIterator<Item = MemRecord<'_>> {
    let index = (snapshot.cycle % 3) as usize;
    let flushed = move |b: &Bucket| {
        let mut c = b.active;
        c.add(&b.future[index]);
        c
    };
    let clear = snapshot.buckets.iter().all(|b| {
        let c = flushed(b);
        c.allocs == 0 && c.frees == 0
    });
    snapshot.buckets.iter().map(move |b| {
        let c = if clear {
            let mut c = b.active;
            b.future.iter().for_each(|f| c.add(f));
            c
        } else {
            flushed(b)
        };
        let mut recent = Cycle::default();
        if !clear {
            for k in [(index + 1) % 3, (index + 2) % 3] {
                recent.add(&b.future[k]);
            }
        }
        MemRecord {
            bucket: b.addr,
            stack: snapshot.stack(b),
            alloc_objects: c.allocs as i64,
            alloc_bytes: c.alloc_bytes as i64,
            free_objects: c.frees as i64,
            free_bytes: c.free_bytes as i64,
            recent_objects: recent.allocs as i64,
            recent_bytes: recent.alloc_bytes as i64,
        }
    })
}

#[cfg(test)]
mod tests;
