//! The profile state one walk read (the cycle counter and every bucket, head first), and
//! `runtime.MemProfile`'s flush rule over it: the records a capture is made of.

use std::ops::Range;

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

    /// Lets go of the stacks of `buckets` (indexes, head first), once their samples are made,
    /// when those stacks are the end of the buffer and follow the bucket before them (a list
    /// read whole, let go from its end: checked here, and nothing is let go otherwise): the
    /// buffer is cut to what the buckets before still need, and its pages go back. An encoder
    /// that goes from the list's end so never holds a first walk's stacks (22 MB on a
    /// 100,000-bucket profile) beside all the samples it makes of them. The head's stack stays
    /// (see [`Snapshot::forget_stacks`]).
    pub fn release_stacks(&mut self, buckets: Range<usize>) {
        if buckets.start == 0 || buckets.end > self.buckets.len() {
            return;
        }
        let keep = self.buckets[buckets.start - 1].stack.end;
        let mut at = keep;
        for b in &self.buckets[buckets.clone()] {
            if b.stack.start != at {
                return;
            }
            at = b.stack.end;
        }
        if at != self.stacks.len() {
            return;
        }
        for b in &mut self.buckets[buckets] {
            b.stack = 0..0;
        }
        self.stacks.truncate(keep);
        self.stacks.shrink_to_fit();
    }

    /// PCs in every bucket's stack, forgotten or not.
    pub(super) fn depth(&self) -> usize {
        self.buckets.iter().map(|b| b.depth as usize).sum()
    }
}

pub(super) fn word(bytes: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    u64::from_le_bytes(a)
}

pub(super) fn cycle_at(body: &[u8], n: usize, k: usize) -> Cycle {
    Cycle {
        allocs: word(body, n + 4 * k),
        frees: word(body, n + 4 * k + 1),
        alloc_bytes: word(body, n + 4 * k + 2),
        free_bytes: word(body, n + 4 * k + 3),
    }
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
    mem_records_of(snapshot, 0..snapshot.buckets.len(), flush_rule(snapshot))
}

/// How [`mem_profile`]'s rule reads a snapshot: the future slot the current cycle flushes, and
/// whether every bucket is still empty after that (all cycles are then summed).
#[derive(Debug, Clone, Copy)]
pub struct FlushRule {
    index: usize,
    clear: bool,
}

/// The rule for `snapshot`, read over all its buckets once.
pub fn flush_rule(snapshot: &Snapshot) -> FlushRule {
    let index = (snapshot.cycle % 3) as usize;
    let clear = snapshot.buckets.iter().all(|b| {
        let c = flushed(b, index);
        c.allocs == 0 && c.frees == 0
    });
    FlushRule { index, clear }
}

fn flushed(b: &Bucket, index: usize) -> Cycle {
    let mut c = b.active;
    c.add(&b.future[index]);
    c
}

/// The records of the buckets `buckets` (indexes, head first) under `rule`: [`mem_records`]'
/// for part of the list.
pub fn mem_records_of(
    snapshot: &Snapshot,
    buckets: std::ops::Range<usize>,
    rule: FlushRule,
) -> impl ExactSizeIterator<Item = MemRecord<'_>> {
    let FlushRule { index, clear } = rule;
    snapshot.buckets[buckets].iter().map(move |b| {
        let c = if clear {
            let mut c = b.active;
            b.future.iter().for_each(|f| c.add(f));
            c
        } else {
            flushed(b, index)
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
