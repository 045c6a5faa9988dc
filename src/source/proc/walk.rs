//! The bucket walker: follows `runtime.mbuckets` through each bucket's `allnext` and copies out
//! its stack and `memRecord`, then applies `runtime.MemProfile`'s flush rule. Every read is
//! bounded and checked; a list that changes under the reader gives a failed attempt, never a
//! partial one.
//!
//! One file per idea: `layout.rs` (the runtime's layout per Go release, and the GOEXPERIMENTs
//! that change it), `list.rs` (the bounded walk down the list, and the later walk that reads only
//! the buckets in front of the last one), `records.rs` (the records read where they are, many to
//! a read), `snapshot.rs` (what a walk read, and `MemProfile`'s flush rule over it), `error.rs`
//! (what a walk that fails says). Here: the attempts, each with its two reads under one clock.
//!
//! # Reads are bounded and never trusted
//!
//! - Only addresses inside a readable mapping of `/proc/PID/maps` are read (`memory.rs`); a
//!   pointer outside is an error, not a fault.
//! - The deadline: the walk checks it between attempts and every 64 buckets (the reader thread
//!   that makes a blocked read harmless is `ProcSource`'s, in `reader.rs`).
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
//! - The bounds on the list itself (loops, size, byte budget) are `list.rs`'s; how the records
//!   are read, `records.rs`'s.
//!
//! # Why the second read is of every record, not of those that changed
//!
//! Re-reading only the records that differ from the last trusted reading (issue 34, item 4)
//! was worked through against `mprof.go` and not built: it would let a capture mix two
//! states. A flush is a pass over every bucket under the lock, and one that starts and ends
//! inside the first read (between the instants whose lock reads were free) changes a bucket
//! read before the pass reached it only after it was read: its first reading equals the last
//! trusted one, so it would not be read again, while a bucket the pass reached first differs
//! and is read again, equal, after it. The capture would hold the one bucket before the flush
//! and the other after it. Only a second read of a record that spans the middle instant says
//! its figure at that instant. What would cut the second read on sound ground is a witness
//! that no flush ran during the walk: a bucket whose next slot (`(cycle+1) % 3`, what
//! `mProf_PostSweep` moves) is not empty, its `active` read before the first guard and again
//! before the last (a pass in between moves the slot into `active`; one still running at the
//! end holds the lock). It does not yet cover `mProf_Flush`'s pass over the current slot
//! between `setFlushed` and taking the lock (the flushed bit is set first), whose moves keep
//! each sum but can tear a record copied as it is rewritten; on the benchmark target the
//! clock moves between nearly every two captures, so either way most walks read twice.

mod error;
mod layout;
mod list;
mod records;
mod snapshot;

use super::memory::TargetMemory;

pub use self::error::WalkError;
pub use self::layout::{Anchors, Layout, SUPPORTED, layout_for, with_experiments};
pub use self::list::{Buffers, Limits, MAX_WALK_BYTES};
pub use self::snapshot::{
    Bucket, Cycle, FlushRule, MemRecord, Snapshot, flush_rule, mem_profile, mem_records,
    mem_records_of,
};

use self::list::bring_up_to;
use self::records::read_records;
use self::snapshot::cycle_at;

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

#[cfg(test)]
mod tests;
