use std::time::Instant;

use super::super::memory::{ImageMemory, ReadFault};
use super::*;

const LAYOUT: Layout = Layout {
    header: 48,
    record: 128,
    max_stack: 1024,
    mem_bucket: 1,
    spinbit_mutex: true,
    hides_internal_runtime: true,
};
const ANCHORS: Anchors = Anchors {
    mbuckets: 0x1000,
    mprof_cycle: 0x1008,
    prof_mem_active_lock: Some(0x1010),
    numgc: None,
};

/// An image: the three variables at 0x1000, then buckets from 0x2000 linked in order.
fn image(cycle_word: u32, buckets: &[(Vec<u64>, [u64; 16])], link: &[u64]) -> ImageMemory {
    let mut vars = vec![0u8; 24];
    let head = link.first().copied().unwrap_or(0);
    vars[0..8].copy_from_slice(&head.to_le_bytes());
    vars[8..12].copy_from_slice(&cycle_word.to_le_bytes());
    let mut heap = Vec::new();
    for (i, (stack, rec)) in buckets.iter().enumerate() {
        let next = link.get(i + 1).copied().unwrap_or(0);
        for w in [0, next, 1, 0, 0, stack.len() as u64] {
            heap.extend_from_slice(&w.to_le_bytes());
        }
        for w in stack.iter().chain(rec.iter()) {
            heap.extend_from_slice(&w.to_le_bytes());
        }
    }
    ImageMemory {
        segments: vec![(0x1000, vars), (0x2000, heap)],
    }
}

fn rec(active: [u64; 4], f0: [u64; 4], f1: [u64; 4], f2: [u64; 4]) -> [u64; 16] {
    let mut r = [0u64; 16];
    for (k, c) in [active, f0, f1, f2].iter().enumerate() {
        r[4 * k..4 * k + 4].copy_from_slice(c);
    }
    r
}

#[test]
fn walks_the_list_and_flushes_the_current_slot() {
    // Bucket sizes: header 48 + 1 pc + 128 = 184 → second bucket at 0x2000 + 184.
    let mem = image(
        (4 << 1) | 1, // cycle 4 → the slot MemProfile flushes is 4 % 3 = 1
        &[
            (
                vec![0x401000],
                rec([3, 1, 300, 100], [9, 9, 9, 9], [2, 0, 200, 0], [7, 7, 7, 7]),
            ),
            (
                vec![0x402000],
                rec([1, 1, 50, 50], [0; 4], [0; 4], [5, 0, 500, 0]),
            ),
        ],
        &[0x2000, 0x2000 + 184],
    );
    let snap = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(snap.cycle, 4);
    assert_eq!(snap.buckets.len(), 2);
    let recs = mem_profile(&snap);
    assert_eq!(
        (
            recs[0].alloc_objects,
            recs[0].free_objects,
            recs[0].alloc_bytes,
            recs[0].free_bytes
        ),
        (5, 1, 500, 100),
        "active + future[1]; future[0] and [2] are not yet published"
    );
    assert_eq!(
        (recs[0].recent_objects, recs[0].recent_bytes),
        (9 + 7, 9 + 7),
        "future[0] and [2]: allocated, not yet published"
    );
    assert_eq!((recs[1].recent_objects, recs[1].recent_bytes), (5, 500));
    assert_eq!(recs[1].stack, [0x402000]);
    assert_eq!((recs[1].alloc_objects, recs[1].alloc_bytes), (1, 50));
}

#[test]
fn before_the_first_gc_every_cycle_is_summed() {
    let snap = Snapshot {
        cycle: 0,
        num_gc: None,
        trusted: None,
        head: 0x2000,
        list: 1,
        stacks: vec![1],
        buckets: vec![Bucket {
            addr: 0x2000,
            stack: 0..1,
            depth: 1,
            active: Cycle::default(),
            future: [
                Cycle::default(),
                Cycle {
                    allocs: 1,
                    frees: 0,
                    alloc_bytes: 8,
                    free_bytes: 0,
                },
                Cycle {
                    allocs: 2,
                    frees: 1,
                    alloc_bytes: 16,
                    free_bytes: 8,
                },
            ],
        }],
    };
    let r = &mem_profile(&snap)[0];
    assert_eq!(
        (r.alloc_objects, r.free_objects, r.alloc_bytes, r.free_bytes),
        (3, 1, 24, 8)
    );
    assert_eq!(
        (r.recent_objects, r.recent_bytes),
        (0, 0),
        "all are counted above"
    );
}

#[test]
fn a_cyclic_list_is_refused_at_the_first_repeat() {
    let mem = image(2, &[(vec![1], [0; 16])], &[0x2000, 0x2000]);
    assert_eq!(
        walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()),
        Err(WalkError::Cycle {
            addr: 0x2000,
            index: 1
        })
    );
}

#[test]
fn pointers_out_of_the_image_and_absurd_stacks_are_errors() {
    let mem = image(2, &[(vec![1], [0; 16])], &[0x2000, 0x9999_0000]);
    assert!(matches!(
        walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()),
        Err(WalkError::Read {
            fault: ReadFault::Unmapped {
                addr: 0x9999_0000,
                ..
            },
            ..
        })
    ));
    let mut deep = image(2, &[(vec![1], [0; 16])], &[0x2000]);
    deep.segments[1].1[40..48].copy_from_slice(&5000u64.to_le_bytes());
    assert!(matches!(
        walk(&deep, &ANCHORS, &LAYOUT, &Limits::default()),
        Err(WalkError::StackTooDeep { nstk: 5000, .. })
    ));
}

#[test]
fn a_held_profile_lock_is_a_busy_attempt_not_a_capture() {
    let mut mem = image(2, &[(vec![1], [0; 16])], &[0x2000]);
    mem.segments[0].1[16] = 1;
    assert_eq!(
        walk(
            &mem,
            &ANCHORS,
            &LAYOUT,
            &Limits {
                max_buckets: 10,
                attempts: 2,
                ..Limits::default()
            }
        ),
        Err(WalkError::Busy { attempts: 2 })
    );
}

#[test]
fn a_list_holding_more_than_the_budget_is_refused_before_it_is_copied() {
    let mem = image(2, &[(vec![1, 2, 3], [0; 16])], &[0x2000]);
    let limits = Limits {
        max_bytes: 100,
        ..Limits::default()
    };
    assert_eq!(
        walk(&mem, &ANCHORS, &LAYOUT, &limits),
        Err(WalkError::OverBudget {
            budget: 100,
            buckets: 1
        })
    );
}

#[test]
fn a_passed_deadline_ends_the_walk_as_a_timeout() {
    let mem = image(2, &[(vec![1], [0; 16])], &[0x2000]);
    let limits = Limits {
        deadline: Some(Instant::now()),
        ..Limits::default()
    };
    let err = walk(&mem, &ANCHORS, &LAYOUT, &limits).unwrap_err();
    assert!(matches!(err, WalkError::Deadline { .. }), "{err}");
    assert!(err.is_timeout());
}

/// An image whose first bucket's active allocation count goes up by one on chosen reads
/// of its record (counted from 1): a sweep's flush landing while the walker reads.
struct Flushing {
    image: std::cell::RefCell<ImageMemory>,
    record_reads: std::cell::Cell<usize>,
    flush_on: Vec<usize>,
}

impl TargetMemory for Flushing {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault> {
        // The record of the first bucket (one PC) starts at 0x2000 + 48 + 8.
        let record = 0x2000 + 56;
        self.image.borrow().read(addr, buf)?;
        if addr <= record && record < addr + buf.len() as u64 {
            let n = self.record_reads.get() + 1;
            self.record_reads.set(n);
            if self.flush_on.contains(&n) {
                let mut image = self.image.borrow_mut();
                let heap = &mut image.segments[1].1;
                let v = u64::from_le_bytes(heap[56..64].try_into().unwrap()) + 1;
                heap[56..64].copy_from_slice(&v.to_le_bytes());
            }
        }
        Ok(())
    }
}

#[test]
fn a_flush_between_the_two_reads_of_a_record_is_seen_and_the_walk_retried() {
    let base = image(
        2,
        &[(vec![1], rec([3, 0, 30, 0], [0; 4], [0; 4], [0; 4]))],
        &[0x2000],
    );
    // The flush lands just after the first read of the record: the re-read differs, and
    // the second attempt reads 4 twice and is trusted.
    let mem = Flushing {
        image: std::cell::RefCell::new(base.clone()),
        record_reads: std::cell::Cell::new(0),
        flush_on: vec![1],
    };
    let snap = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(snap.buckets[0].active.allocs, 4);
    assert_eq!(mem.record_reads.get(), 4, "two attempts of two reads each");
    // A flush on every read: never trusted.
    let mem = Flushing {
        image: std::cell::RefCell::new(base),
        record_reads: std::cell::Cell::new(0),
        flush_on: (1..100).collect(),
    };
    assert_eq!(
        walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()),
        Err(WalkError::Busy { attempts: 4 })
    );
}

#[test]
fn errors_are_sentences_with_hex_addresses() {
    let mem = image(2, &[(vec![1], [0; 16])], &[0x2000, 0x7ff0_1234_5000]);
    let text = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        text,
        "reading a bucket header: 48 bytes at 0x7ff012345000 are outside the process's \
         readable memory (a pointer into unmapped memory)"
    );
    let cyc = WalkError::Cycle {
        addr: 0x2000,
        index: 1,
    }
    .to_string();
    assert!(cyc.contains("loops") && cyc.contains("0x2000"), "{cyc}");
}

#[test]
fn a_futex_lock_with_sleeping_waiters_is_held_under_nospinbitmutex() {
    let go124 = layout_for((1, 24)).unwrap();
    let futex = with_experiments(go124, &["nospinbitmutex".into()]).unwrap();
    assert!(!futex.spinbit_mutex);
    assert_eq!(
        with_experiments(go124, &["staticlockranking".into()]),
        Err("staticlockranking".into())
    );
    assert_eq!(with_experiments(go124, &["nodwarf5".into()]), Ok(go124));
    // Key 2: locked with sleepers. The spinbit reading (bit 0) would call it free.
    let mut mem = image(2, &[(vec![1], [0; 16])], &[0x2000]);
    mem.segments[0].1[16] = 2;
    let limits = Limits {
        attempts: 1,
        ..Limits::default()
    };
    assert_eq!(
        walk(&mem, &ANCHORS, &futex, &limits),
        Err(WalkError::Busy { attempts: 1 })
    );
    assert!(walk(&mem, &ANCHORS, &LAYOUT, &limits).is_ok());
}

/// Writes one word into an image (a test's change to the target between walks).
fn poke(mem: &mut ImageMemory, addr: u64, value: u64) {
    let (start, bytes) = mem
        .segments
        .iter_mut()
        .find(|(start, bytes)| (*start..*start + bytes.len() as u64).contains(&addr))
        .expect("an address in the image");
    let at = (addr - *start) as usize;
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Counts the reads of a bucket header's length: the buckets a walk went through.
struct Counting<'a> {
    inner: &'a ImageMemory,
    headers: std::cell::Cell<usize>,
}

impl TargetMemory for Counting<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault> {
        if buf.len() == LAYOUT.header {
            self.headers.set(self.headers.get() + 1);
        }
        self.inner.read(addr, buf)
    }
}

/// Three one-PC buckets at 0x2000, 0x20b8, 0x2170, linked in that order; the list starts
/// at the second: the first is the bucket a later allocation site adds.
fn three_buckets() -> ImageMemory {
    let mut mem = image(
        2 << 1,
        &[
            (vec![0x401000], rec([1, 0, 10, 0], [0; 4], [0; 4], [0; 4])),
            (vec![0x402000], rec([2, 1, 20, 10], [0; 4], [0; 4], [0; 4])),
            (vec![0x403000], rec([3, 0, 30, 0], [0; 4], [0; 4], [0; 4])),
        ],
        &[0x2000, 0x20b8, 0x2170],
    );
    poke(&mut mem, 0x1000, 0x20b8);
    mem
}

/// `three_buckets` walked once (its list kept for the next walk), then the first bucket
/// put at the head: a site added in front.
fn walked_then_prepended() -> (ImageMemory, Buffers) {
    let mut mem = three_buckets();
    let mut buffers = Buffers::default();
    let first = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers);
    let first = first.unwrap();
    assert_eq!((first.buckets.len(), first.head), (2, 0x20b8));
    buffers.spare = first;
    poke(&mut mem, 0x1000, 0x2000);
    (mem, buffers)
}

#[test]
fn a_later_walk_reads_only_the_buckets_added_in_front_and_every_record() {
    let (mut mem, mut buffers) = walked_then_prepended();
    // And an old site allocates again (its active count 3 → 4).
    poke(&mut mem, 0x2170 + 56, 4);
    let counting = Counting {
        inner: &mem,
        headers: std::cell::Cell::new(0),
    };
    let second = walk_reusing(
        &counting,
        &ANCHORS,
        &LAYOUT,
        &Limits::default(),
        &mut buffers,
    )
    .unwrap();
    assert_eq!(
        counting.headers.get(),
        2,
        "only the new bucket is walked, and the known head's header read again"
    );
    let fresh = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(mem_profile(&second), mem_profile(&fresh));
    assert_eq!(second.head, 0x2000);
    let stacks: Vec<_> = second.buckets.iter().map(|b| second.stack(b)[0]).collect();
    assert_eq!(stacks, [0x401000, 0x402000, 0x403000], "head first");
    assert_eq!(second.buckets[2].active.allocs, 4);
}

#[test]
fn a_list_that_does_not_lead_back_to_the_known_head_is_read_whole() {
    let (mut mem, mut buffers) = walked_then_prepended();
    // The new head leads straight to the last bucket: not the list read before.
    poke(&mut mem, 0x2000 + 8, 0x2170);
    let again = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    let fresh = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(mem_profile(&again), mem_profile(&fresh));
    assert_eq!(again.buckets.len(), 2);
    assert_eq!(again.stacks.len(), 2, "the old list's stacks are gone");
}

#[test]
fn a_list_that_leads_back_through_a_known_bucket_is_refused() {
    let (mut mem, mut buffers) = walked_then_prepended();
    // new → last → the known head: the known list's last bucket would be read twice.
    poke(&mut mem, 0x2000 + 8, 0x2170);
    poke(&mut mem, 0x2170 + 8, 0x20b8);
    let err = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers);
    assert_eq!(
        err,
        Err(WalkError::Cycle {
            addr: 0x2170,
            index: 3
        })
    );
    assert!(
        matches!(
            walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()),
            Err(WalkError::Cycle { .. })
        ),
        "a walk from scratch refuses it too"
    );
    assert_eq!(
        buffers.spare.head, 0,
        "nothing of a refused list is trusted later"
    );
}

#[test]
fn a_known_head_that_holds_another_stack_is_not_taken_for_the_list_in_hand() {
    let (mut mem, mut buffers) = walked_then_prepended();
    // Another program at the same addresses (an exec in the same pid): the bucket at the
    // known head's address now has another stack.
    poke(&mut mem, 0x20b8 + 48, 0x40a000);
    let again = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    let fresh = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(mem_profile(&again), mem_profile(&fresh));
    let stacks: Vec<_> = again.buckets.iter().map(|b| again.stack(b)[0]).collect();
    assert_eq!(stacks, [0x401000, 0x40a000, 0x403000]);
    // And one whose link moved: read whole again too.
    poke(&mut mem, 0x20b8 + 8, 0);
    let again = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    assert_eq!(again.buckets.len(), 2);
    assert_eq!(
        mem_profile(&again),
        mem_profile(&walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap())
    );
}

#[test]
fn a_list_read_whole_after_a_miss_is_held_to_the_limits_alone() {
    let (mut mem, mut buffers) = walked_then_prepended();
    poke(&mut mem, 0x2000 + 8, 0x2170);
    // Two buckets in the new list, two in the one in hand: the new list alone fits.
    let limits = Limits {
        max_buckets: 2,
        ..Limits::default()
    };
    let again = walk_reusing(&mem, &ANCHORS, &LAYOUT, &limits, &mut buffers).unwrap();
    assert_eq!(again.buckets.len(), 2);
    assert_eq!(
        mem_profile(&again),
        mem_profile(&walk(&mem, &ANCHORS, &LAYOUT, &limits).unwrap())
    );
}

/// Splits the image's segment holding `at` in two there: two neighbouring mappings.
fn split_at(mem: &mut ImageMemory, at: u64) {
    let i = mem
        .segments
        .iter()
        .position(|(start, bytes)| *start < at && at < *start + bytes.len() as u64)
        .expect("an address inside a segment");
    let (start, bytes) = &mut mem.segments[i];
    let tail = bytes.split_off((at - *start) as usize);
    mem.segments.insert(i + 1, (at, tail));
}

#[test]
fn records_on_either_side_of_a_mapping_edge_are_never_read_as_one_range() {
    let (mut mem, mut buffers) = walked_then_prepended();
    // The records of the first and second buckets lie 56 bytes apart, across this edge.
    split_at(&mut mem, 0x20b8);
    let first = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    let again = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    assert_eq!(mem_profile(&again), mem_profile(&first));
    assert_eq!(first.buckets.len(), 3);
}

#[test]
fn only_verified_releases_have_a_layout() {
    assert!(layout_for((1, 22)).is_none());
    assert!(layout_for((1, 27)).is_none());
    assert!(!layout_for((1, 23)).unwrap().spinbit_mutex);
    assert!(layout_for((1, 26)).unwrap().spinbit_mutex);
}

mod garbage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any image: a whole snapshot within the bounds, or an error; never a panic.
        #[test]
        fn any_image_walks_within_bounds_or_fails(
            vars in proptest::collection::vec(any::<u8>(), 24),
            heap in proptest::collection::vec(any::<u8>(), 0..4096),
            links in proptest::collection::vec(0u64..4096, 0..8),
        ) {
            let mut heap = heap;
            // Plant plausible pointers so lists of several buckets (and cycles) occur.
            for (i, l) in links.iter().enumerate() {
                let at = (i * 184 + 8) % heap.len().max(1);
                if at + 8 <= heap.len() {
                    heap[at..at + 8].copy_from_slice(&(0x2000 + l).to_le_bytes());
                }
            }
            let mem = ImageMemory { segments: vec![(0x1000, vars), (0x2000, heap)] };
            let limits = Limits { max_buckets: 64, attempts: 2, ..Limits::default() };
            if let Ok(snap) = walk(&mem, &ANCHORS, &LAYOUT, &limits) {
                prop_assert!(snap.buckets.len() <= 64);
                prop_assert!(snap.buckets.iter().all(|b| snap.stack(b).len() <= LAYOUT.max_stack));
                prop_assert_eq!(mem_profile(&snap).len(), snap.buckets.len());
            }
            // A second walk from the first one's list, after the head moved to a planted
            // pointer: the same answer as a walk from scratch, or an error.
            let mut buffers = Buffers::default();
            if let Ok(first) = walk_reusing(&mem, &ANCHORS, &LAYOUT, &limits, &mut buffers) {
                buffers.spare = first;
            }
            let mut mem = mem;
            mem.segments[0].1[0..8].copy_from_slice(&(0x2000 + links.first().copied().unwrap_or(0)).to_le_bytes());
            let again = walk_reusing(&mem, &ANCHORS, &LAYOUT, &limits, &mut buffers);
            if let (Ok(again), Ok(fresh)) = (again, walk(&mem, &ANCHORS, &LAYOUT, &limits)) {
                prop_assert_eq!(mem_profile(&again), mem_profile(&fresh));
            }
        }
    }
}

/// `numgc` read at each of the walk's guard reads; the `at`-th read and those after it see
/// one more GC ended.
struct EndingGc {
    image: ImageMemory,
    reads: std::cell::Cell<usize>,
    at: usize,
}

impl TargetMemory for EndingGc {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault> {
        if addr == 0x100c {
            let n = self.reads.get() + 1;
            self.reads.set(n);
            let numgc: u32 = if n >= self.at { 8 } else { 7 };
            buf.copy_from_slice(&numgc.to_le_bytes());
            return Ok(());
        }
        self.image.read(addr, buf)
    }
}

#[test]
fn numgc_is_read_with_the_walk_and_a_gc_ending_inside_it_is_retried() {
    let anchors = Anchors {
        numgc: Some(0x100c),
        ..ANCHORS
    };
    let image = || {
        image(
            (4 << 1) | 1,
            &[(vec![1], rec([3, 0, 30, 0], [0; 4], [0; 4], [0; 4]))],
            &[0x2000],
        )
    };
    let still = EndingGc {
        image: image(),
        reads: std::cell::Cell::new(0),
        at: usize::MAX,
    };
    let snap = walk(&still, &anchors, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!((snap.cycle, snap.num_gc), (4, Some(7)));
    assert_eq!(
        still.reads.get(),
        3,
        "before, in the middle and after the walk"
    );
    // A GC ends between the first read and the middle one: that attempt is not trusted, the
    // next reads 8 three times.
    let ending = EndingGc {
        image: image(),
        reads: std::cell::Cell::new(0),
        at: 2,
    };
    let snap = walk(&ending, &anchors, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(snap.num_gc, Some(8));
    assert_eq!(ending.reads.get(), 5);
    // Without the address, no count.
    let snap = walk(&image(), &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_eq!(snap.num_gc, None);
}

#[test]
fn a_list_whose_stacks_were_forgotten_is_extended_with_the_new_stacks_and_every_record() {
    let mut mem = three_buckets();
    let mut buffers = Buffers::default();
    let mut first =
        walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    first.forget_stacks();
    assert_eq!(first.stacks, [0x402000], "only the head's stack is kept");
    assert!(first.stack(&first.buckets[1]).is_empty());
    buffers.spare = first;
    poke(&mut mem, 0x1000, 0x2000);
    poke(&mut mem, 0x2170 + 56, 4);
    let second = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    let fresh = walk(&mem, &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    let figures = |s: &Snapshot| -> Vec<_> {
        mem_profile(s)
            .into_iter()
            .map(|r| (r.bucket, r.alloc_objects, r.alloc_bytes, r.free_objects))
            .collect()
    };
    assert_eq!(figures(&second), figures(&fresh));
    assert_eq!(
        second.stack(&second.buckets[0]),
        [0x401000],
        "the new bucket's stack"
    );
    assert_eq!(
        second.buckets[2].active.allocs, 4,
        "a forgotten bucket's record, read"
    );
    // A head that no longer holds its stack (another program at the same address): read whole.
    let mut again = second;
    again.forget_stacks();
    buffers.spare = again;
    poke(&mut mem, 0x2000 + 48, 0x409000);
    let whole = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    assert_eq!(whole.stacks, [0x409000, 0x402000, 0x403000]);
}

#[test]
fn a_list_trusted_under_the_same_clock_is_read_once_while_its_figures_hold() {
    let mem = Flushing {
        image: std::cell::RefCell::new(image(
            2,
            &[(vec![1], rec([3, 0, 30, 0], [0; 4], [0; 4], [0; 4]))],
            &[0x2000],
        )),
        record_reads: std::cell::Cell::new(0),
        // A flush lands just after the fourth read of the record.
        flush_on: vec![4],
    };
    let mut buffers = Buffers::default();
    let again = |buffers: &mut Buffers| {
        let snap = walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), buffers).unwrap();
        let allocs = snap.buckets[0].active.allocs;
        buffers.spare = snap;
        (allocs, mem.record_reads.get())
    };
    assert_eq!(
        again(&mut buffers),
        (3, 2),
        "a first walk reads every record twice"
    );
    assert_eq!(
        again(&mut buffers),
        (3, 3),
        "the same figures under the same clock: once"
    );
    // The flush came after this read: the figures held at the walk's first instant.
    assert_eq!(again(&mut buffers), (3, 4));
    // Now a figure moved: read twice, and the new figure taken.
    assert_eq!(again(&mut buffers), (4, 6));
    assert_eq!(again(&mut buffers), (4, 7));
    // Another clock (a GC ended): read twice.
    poke(&mut mem.image.borrow_mut(), 0x1008, 4);
    assert_eq!(again(&mut buffers), (4, 9));
}

#[test]
fn stacks_are_let_go_from_the_end_of_a_list_read_whole_and_kept_otherwise() {
    // Read whole: the stacks lie in bucket order.
    let mut whole = walk(&three_buckets(), &ANCHORS, &LAYOUT, &Limits::default()).unwrap();
    assert_in_bucket_order(&mut whole);
    let before = mem_profile(&whole)
        .iter()
        .map(|r| r.stack.to_vec())
        .collect::<Vec<_>>();
    whole.release_stacks(1..2);
    assert_eq!(whole.stacks, [0x402000], "the head's stack stays");
    assert!(whole.stack(&whole.buckets[1]).is_empty());
    assert_eq!(whole.stack(&whole.buckets[0]), before[0].as_slice());
    whole.release_stacks(0..1);
    assert_eq!(whole.stacks, [0x402000], "never the head's");
    // Extended at its head: the new bucket's stack after the known ones', which are
    // forgotten: nothing is let go, whatever is asked.
    let (mem, mut buffers) = walked_then_prepended();
    buffers.spare.forget_stacks();
    let mut second =
        walk_reusing(&mem, &ANCHORS, &LAYOUT, &Limits::default(), &mut buffers).unwrap();
    let held = second.stacks.clone();
    for range in [2..3, 1..3, 1..2] {
        second.release_stacks(range);
        assert_eq!(second.stacks, held);
    }
    assert_eq!(second.stack(&second.buckets[0]), [0x401000]);
}

/// Checks the walk read the list in bucket order (what `release_stacks` lets go from).
fn assert_in_bucket_order(snap: &mut Snapshot) {
    let starts: Vec<_> = snap.buckets.iter().map(|b| b.stack.start).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
}
