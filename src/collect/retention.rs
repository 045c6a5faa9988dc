//! `--max-disk`: when stored profiles pass the budget, thin the middle of the oldest boot
//! cycles first, evenly (the capture whose neighbours are closest goes), and keep every
//! cycle's first and last capture and the newest captures of the current cycle. The collector
//! thins after each attempt, and deletes at the top of its loop what was chosen outside it
//! (`budget.rs`); each deletion is a `delete` record appended before the file goes.

use std::collections::BTreeSet;

use super::Collector;
use crate::store::{CaptureRecord, RecordKind, StoreError};

/// Captures of the current cycle that are never thinned: the newest ones matter most.
const KEEP_NEWEST: usize = 8;

#[derive(Debug, Clone)]
pub struct Kept {
    pub seq: u64,
    pub cycle: u32,
    pub t_ms: i64,
    pub file: String,
    pub bytes: u64,
}

#[derive(Debug, Default)]
pub struct Retention {
    budget: Option<u64>,
    used: u64,
    kept: Vec<Kept>,
    /// Set once nothing more can be deleted, so the search is not repeated each capture.
    exhausted_at: Option<usize>,
}

impl Retention {
    pub fn resume(records: &[CaptureRecord], budget: Option<u64>) -> Retention {
        let deleted: BTreeSet<u64> = records.iter().filter_map(|r| r.deleted_seq).collect();
        let mut r = Retention {
            budget,
            ..Retention::default()
        };
        for rec in records {
            if !rec.kind.is_event() && rec.dup_of.is_none() && !deleted.contains(&rec.seq) {
                r.stored(rec);
            }
        }
        r
    }

    pub fn stored(&mut self, record: &CaptureRecord) {
        let (Some(file), true) = (&record.file, record.is_ok()) else {
            return;
        };
        if record.dup_of.is_some() {
            return;
        }
        self.used += record.bytes;
        self.kept.push(Kept {
            seq: record.seq,
            cycle: record.cycle,
            t_ms: record.t_ms,
            file: file.clone(),
            bytes: record.bytes,
        });
    }

    /// Takes a capture out of what is kept, for a deletion decided elsewhere (the node-wide
    /// budget of `heapwatch watch`); `None` if it is not kept (deleted already, unknown).
    pub fn take(&mut self, seq: u64) -> Option<Kept> {
        let index = self.kept.iter().position(|k| k.seq == seq)?;
        let victim = self.kept.remove(index);
        self.used -= victim.bytes;
        self.exhausted_at = None;
        Some(victim)
    }

    /// The next capture to delete, if the budget is passed and one may go.
    pub fn next_victim(&mut self, current: u32) -> Option<Kept> {
        let budget = self.budget?;
        if self.used <= budget || self.exhausted_at == Some(self.kept.len()) {
            return None;
        }
        let mut best: Option<(u32, i64, usize)> = None;
        let cycles: BTreeSet<u32> = self.kept.iter().map(|k| k.cycle).collect();
        for cycle in cycles {
            let members: Vec<usize> = (0..self.kept.len())
                .filter(|&i| self.kept[i].cycle == cycle)
                .collect();
            let protected_tail = if cycle == current { KEEP_NEWEST } else { 1 };
            if members.len() <= 1 + protected_tail {
                continue;
            }
            for w in 1..members.len() - protected_tail {
                let gap = self.kept[members[w + 1]].t_ms - self.kept[members[w - 1]].t_ms;
                let candidate = (cycle, gap, members[w]);
                if best.is_none_or(|b| (candidate.0, candidate.1) < (b.0, b.1)) {
                    best = Some(candidate);
                }
            }
            if best.is_some() {
                // The oldest cycle with something to thin goes first.
                break;
            }
        }
        match best {
            Some((_, _, index)) => {
                let victim = self.kept.remove(index);
                self.used -= victim.bytes;
                Some(victim)
            }
            None => {
                self.exhausted_at = Some(self.kept.len());
                None
            }
        }
    }
}

impl Collector {
    /// Deletes captures chosen by the retention policy and records each deletion.
    pub(super) async fn thin(&mut self) -> Result<(), StoreError> {
        let current = self.cycles.current();
        while let Some(victim) = self.retention.next_victim(current) {
            self.delete(victim).await?;
        }
        Ok(())
    }

    /// Deletes the captures asked for on the deletions channel that are still kept.
    pub(super) async fn delete_requested(&mut self) -> Result<(), StoreError> {
        let mut asked = Vec::new();
        if let Some(rx) = &mut self.deletions {
            while let Ok(seq) = rx.try_recv() {
                asked.push(seq);
            }
        }
        for seq in asked {
            if let Some(victim) = self.retention.take(seq) {
                self.delete(victim).await?;
            }
        }
        Ok(())
    }

    /// Deletes one stored capture, its `delete` record first.
    async fn delete(&mut self, victim: Kept) -> Result<(), StoreError> {
        {
            let mut record = CaptureRecord::new(
                self.next_seq,
                RecordKind::Delete,
                victim.cycle,
                self.clock.unix_ms(),
            );
            self.next_seq += 1;
            record.file = Some(victim.file.clone());
            record.deleted_seq = Some(victim.seq);
            record.bytes = victim.bytes;
            let file = victim.file.clone();
            self.on_disk(move |w| {
                w.append(&record)?;
                w.delete_profile(&file)
            })
            .await?;
            self.summary.deleted += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RecordKind;

    fn rec(seq: u64, cycle: u32, bytes: u64) -> CaptureRecord {
        let mut r = CaptureRecord::new(seq, RecordKind::Heap, cycle, seq as i64 * 100);
        r.file = Some(format!("profiles/{seq:06}-heap.pb.gz"));
        r.bytes = bytes;
        r
    }

    #[test]
    fn a_capture_taken_for_deletion_elsewhere_is_no_longer_counted() {
        let mut r = Retention::resume(&[], None);
        for seq in 1..=3 {
            r.stored(&rec(seq, 1, 100));
        }
        assert_eq!(r.take(2).map(|k| k.seq), Some(2));
        assert!(r.take(2).is_none());
        assert_eq!(r.used, 200);
        assert_eq!(r.kept.iter().map(|k| k.seq).collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn thinning_keeps_first_and_last_of_old_cycles_and_the_newest_of_the_current() {
        let mut r = Retention::resume(&[], Some(1000));
        for seq in 1..=10 {
            r.stored(&rec(seq, 1, 100));
        }
        for seq in 11..=22 {
            r.stored(&rec(seq, 2, 100));
        }
        let mut deleted = Vec::new();
        while let Some(v) = r.next_victim(2) {
            deleted.push(v.seq);
        }
        assert!(
            r.used <= 1000 || deleted.len() == 8 + 3,
            "used {} after {deleted:?}",
            r.used
        );
        assert!(
            !deleted.contains(&1) && !deleted.contains(&10),
            "{deleted:?}"
        );
        assert!(
            !deleted.contains(&11),
            "first of the current cycle kept: {deleted:?}"
        );
        assert!(
            deleted.iter().all(|&s| s < 15),
            "newest of the current cycle kept: {deleted:?}"
        );
        // Cycle 1 is thinned before cycle 2 is touched.
        let first_of_two = deleted.iter().position(|&s| s > 10);
        if let Some(p) = first_of_two {
            assert_eq!(p, 8, "all of cycle 1's middle goes first: {deleted:?}");
        }
    }
}
