//! The walk down `runtime.mbuckets`: every bucket's header, stack and record copied out, each
//! read bounded and checked, and a later walk that reads only the buckets in front of the list
//! it already holds.
//!
//! - A bucket address seen twice ends the walk: the list loops ("bucket N (at 0x…) is one it
//!   already passed"). At most 2,000,000 buckets; `nstk` at most `maxProfStackDepth` (1024 for
//!   every supported release; the runtime itself throws above it); bucket type checked.
//! - A byte budget on what one walk copies (headers, stacks, records), checked before each copy:
//!   what the process has readable in `/proc/PID/maps` at that capture (a real list lives in
//!   that memory, each bucket in its own bytes), and never more than 1 GiB. A list of wild but
//!   well-formed buckets is refused when it passes it, not after gigabytes.
//! - A later capture reads only what can have changed. The runtime never frees, moves or
//!   changes a bucket's stack and only prepends, so the walker keeps the last whole list it read
//!   (`Snapshot::head`, `Snapshot::list`) and walks from the new head only until it meets the old
//!   one; those buckets' stacks are read once per list. A list that does not lead back to the
//!   known head is read whole again (a new `list` number); one that leads back through a bucket
//!   already known (a new bucket pointing into the middle of the old list) is refused as a loop.
//!   A refused or unfinished walk keeps nothing: the next one starts from scratch.
//! - A first walk reads its buckets through 256 KiB aligned blocks (`BlockReader`, in
//!   `memory.rs`): the buckets sit packed in `persistentalloc` chunks, so this is one system call
//!   per block instead of two per bucket.

use std::collections::HashSet;
use std::time::Instant;

use super::records::{RecordPlan, read_records};
use super::snapshot::{Bucket, Snapshot, cycle_at, word};
use super::{Layout, WalkError};
use crate::source::proc::memory::{BlockReader, ReadFault, TargetMemory};

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
    pub(super) fn past(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
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
    pub(super) seen: HashSet<u64>,
    /// The buckets found in front of the known list by one pass.
    pub(super) fresh: Vec<Bucket>,
    /// Where the list's records are, and the ranges and bytes of one window of reads.
    pub(super) plan: RecordPlan,
    pub(super) ranges: Vec<(u64, usize)>,
    pub(super) window: Vec<u8>,
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
pub(super) fn bring_up_to(
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
