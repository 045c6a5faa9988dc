//! When the memory sampler notes the files its process holds, and when it counts their pages:
//! listed at detailed samples and written only when they changed; their resident pages counted
//! when the page cache is large and near its highest so far. Each is spaced by what it cost the
//! last time, so thousands of descriptors or a file of gigabytes never make the sampler late
//! for long, nor cost it more than a small share of a core.

use std::time::{Duration, Instant};

use crate::model::memory::{HeldFiles, MemorySample};
use crate::source::procfiles::{FileBudget, held_files};

/// Page cache (the cgroup's `file`, shared memory included) below this is not worth naming.
const MEASURE_FROM: u64 = 16 << 20;
/// The least time between two counts of resident pages.
const MEASURE_SPACING: Duration = Duration::from_millis(250);
/// Listings and counts are spaced by at least this many times what the last one cost: 2 % of a
/// core at most (a listing of 4,000 descriptors costs ~12 ms: one every 0.6 s).
const COST_FACTOR: u32 = 50;
/// A count at least this often while the page cache is large, when it is not at its highest.
const MEASURE_ANYWAY: Duration = Duration::from_secs(5);

/// One process's files from sample to sample.
#[derive(Debug, Default)]
pub struct FileWatch {
    budget: FileBudget,
    /// The listing last written, without its counts: the next is written when it differs.
    last: Option<HeldFiles>,
    last_list: Option<Instant>,
    list_cost: Duration,
    last_count: Option<Instant>,
    count_cost: Duration,
    /// The highest page cache seen while this pid ran.
    highest: Option<(u32, u64)>,
}

impl FileWatch {
    /// Lists the files the sample's process holds into `sample.files` when they changed since
    /// the last written, or when their resident pages were counted now.
    pub fn note(&mut self, sample: &mut MemorySample) {
        let Some(pid) = sample.pid.filter(|_| sample.alive) else {
            return;
        };
        let count = self.count_due(sample, pid);
        if !count && !self.list_due() {
            return;
        }
        let started = Instant::now();
        let files = held_files(pid, &self.budget, count);
        let cost = started.elapsed();
        self.last_list = Some(Instant::now());
        if count {
            self.last_count = self.last_list;
            self.count_cost = cost;
        } else {
            self.list_cost = cost;
        }
        let Some(files) = files else {
            return;
        };
        let listing = uncounted(&files);
        if files.measured || self.last.as_ref() != Some(&listing) {
            self.last = Some(listing);
            sample.files = Some(files);
        }
    }

    /// Whether the last listing is far enough behind for its cost.
    fn list_due(&self) -> bool {
        self.last_list
            .is_none_or(|t| t.elapsed() >= self.list_cost * COST_FACTOR)
    }

    /// Whether to count resident pages at this sample: page cache worth naming, near its
    /// highest so far for this process (or not counted for a while), and the spacing kept.
    fn count_due(&mut self, sample: &MemorySample, pid: u32) -> bool {
        let cache = sample.cgroup.as_ref().and_then(|c| c.file).or_else(|| {
            let p = sample.process.as_ref()?;
            Some(p.rss_file.unwrap_or(0) + p.rss_shmem.unwrap_or(0))
        });
        let Some(cache) = cache.filter(|&c| c >= MEASURE_FROM) else {
            return false;
        };
        let highest = match self.highest {
            Some((p, h)) if p == pid => h.max(cache),
            _ => cache,
        };
        self.highest = Some((pid, highest));
        let since = self.last_count.map(|t| t.elapsed());
        let spacing = MEASURE_SPACING.max(self.count_cost * COST_FACTOR);
        if since.is_some_and(|s| s < spacing) {
            return false;
        }
        let near_highest = cache >= highest - highest / 16;
        near_highest || since.is_none_or(|s| s >= MEASURE_ANYWAY)
    }
}

/// A listing as it reads without counts, for telling whether the files changed.
fn uncounted(files: &HeldFiles) -> HeldFiles {
    let mut f = files.clone();
    f.measured = false;
    for file in &mut f.files {
        file.resident = None;
        file.dirty = None;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::memory::CgroupBreakdown;

    fn sample(pid: u32, file: u64) -> MemorySample {
        MemorySample {
            pid: Some(pid),
            alive: true,
            cgroup: Some(CgroupBreakdown {
                file: Some(file),
                ..CgroupBreakdown::default()
            }),
            ..MemorySample::default()
        }
    }

    #[test]
    fn pages_are_counted_near_the_highest_page_cache_and_spaced_by_their_cost() {
        const MIB: u64 = 1 << 20;
        let mut w = FileWatch::default();
        assert!(!w.count_due(&sample(7, 8 * MIB), 7), "too little to name");
        assert!(w.count_due(&sample(7, 100 * MIB), 7));
        w.last_count = Some(Instant::now());
        assert!(!w.count_due(&sample(7, 200 * MIB), 7), "spaced");
        w.last_count = Some(Instant::now() - MEASURE_SPACING);
        assert!(w.count_due(&sample(7, 200 * MIB), 7), "the highest");
        w.last_count = Some(Instant::now() - MEASURE_SPACING);
        assert!(
            !w.count_due(&sample(7, 120 * MIB), 7),
            "fallen far below it"
        );
        w.last_count = Some(Instant::now() - MEASURE_ANYWAY);
        assert!(w.count_due(&sample(7, 120 * MIB), 7), "but not for long");
        // A count that cost 20 ms waits a second.
        w.count_cost = Duration::from_millis(20);
        w.last_count = Some(Instant::now() - Duration::from_millis(500));
        assert!(!w.count_due(&sample(7, 300 * MIB), 7));
        // A listing that cost 12 ms waits 0.6 s; one of 0.1 ms comes at the next sample.
        w.list_cost = Duration::from_millis(12);
        w.last_list = Some(Instant::now() - Duration::from_millis(300));
        assert!(!w.list_due());
        w.last_list = Some(Instant::now() - Duration::from_millis(600));
        assert!(w.list_due());
        w.list_cost = Duration::from_micros(100);
        w.last_list = Some(Instant::now() - Duration::from_millis(5));
        assert!(w.list_due());
        // A new process starts its own highest.
        w.count_cost = Duration::ZERO;
        w.last_count = None;
        assert!(w.count_due(&sample(8, 40 * MIB), 8));
    }
}
