//! The records of a list read where they are, in address order, many to a read.
//!
//! Records are read where they are, in address order (`RecordPlan`, kept and merged as the list
//! grows): records less than 4 KiB apart are one range, ranges go 1,024 to a
//! `process_vm_readv`, in windows of 128 KiB. The stacks and headers between records are copied
//! too: the kernel pins the target's pages once per range, and a 128-byte range per record cost
//! more in pinning than the bytes between cost to copy (sys time 2.4 → 3.4 s over 60 captures,
//! against 1.2 s merged); 128 KiB windows are still in the cache when the records are taken out
//! (1 MiB windows: 48 against 41 ms a capture).

use super::list::{Buffers, Limits};
use super::snapshot::Bucket;
use super::{Layout, WalkError};
use crate::source::proc::memory::TargetMemory;

/// Where a list's records are, by address. The runtime packs buckets into 256 KiB chunks, so
/// records a few hundred bytes apart are read as one range, with the stacks and headers between
/// them: the kernel pins the target's pages once per range, and a read of each 128-byte record
/// on its own cost more than copying the bytes between (docs/benchmarks.md).
#[derive(Debug, Default)]
pub(super) struct RecordPlan {
    /// The list it was made for: its head and length.
    list: (u64, usize),
    /// (record address, bucket index), in address order.
    spots: Vec<(u64, u32)>,
}

impl RecordPlan {
    /// Made for `buckets` (head first, starting at `head`): from the plan in hand when the list
    /// is the one it was made for with `added` buckets in front (`extended`: that list's
    /// head and the number added), from scratch otherwise.
    pub(super) fn update(
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
pub(super) fn read_records(
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
