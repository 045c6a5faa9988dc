//! The words of a process stuck at its limit: the stretch, the memory pinned there, and what
//! showed that nothing moved.

use crate::analyse::stuck::Stuck;
use crate::units::format_bytes;

/// "stuck at its limit from 20.0 s for 85.0 s: usage pinned at 1018 MiB–1020 MiB of 1.00 GiB;
/// much under writeback through 100 % of it, up to 846 MiB, and 4.00 MiB dirty (the kernel
/// writes them before it can reclaim them); the published heap the same in 118 of 120
/// captures".
pub fn stuck_words(s: &Stuck) -> String {
    let f = |v: u64| format_bytes(v as i64);
    let usage = if s.usage_high - s.usage_low < 1 << 20 {
        f(s.usage_high)
    } else {
        format!("{}–{}", f(s.usage_low), f(s.usage_high))
    };
    let mut parts = vec![format!("usage pinned at {usage} of {}", f(s.limit))];
    if s.writeback_stall() {
        let dirty = s
            .dirty
            .filter(|&d| d > 0)
            .map(|d| format!(", and {} dirty", f(d)))
            .unwrap_or_default();
        parts.push(format!(
            "much under writeback through {:.0} % of it, up to {}{dirty} (the kernel writes \
             them before it can reclaim them)",
            s.writeback_share * 100.0,
            f(s.writeback.unwrap_or(0))
        ));
    }
    if s.psi_stall() {
        parts.push(format!(
            "every task stalled on memory {:.0} % of the time (PSI full avg10)",
            s.psi_full.unwrap_or(0.0)
        ));
    }
    if let (true, Some(g)) = (s.heap_unmoved(), &s.no_gc) {
        let mut heap = format!(
            "no GC finished for {:.1} s of it (the runtime's count at {} from {:.1} to {:.1} s)",
            g.for_s(),
            g.num_gc,
            g.from_s,
            g.to_s
        );
        if let (true, Some(from)) = (s.gc_stall(), s.allocated_from) {
            heap.push_str(&format!(
                " while {} more was allocated ({from})",
                f(s.allocated.unwrap_or(0))
            ));
        }
        parts.push(heap);
    } else if s.heap_unmoved() {
        let mut heap = format!(
            "the published heap the same in {} of {} captures",
            s.unchanged, s.captures
        );
        if let (true, Some(from)) = (s.gc_stall(), s.allocated_from) {
            heap.push_str(&format!(
                " while {} more was allocated ({from}): no GC finished",
                f(s.allocated.unwrap_or(0))
            ));
        }
        parts.push(heap);
    }
    format!(
        "stuck at its limit from {:.1} s for {:.1} s: {}",
        s.since_s,
        s.for_s,
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn stuck() -> Stuck {
        Stuck {
            since_s: 20.0,
            for_s: 85.0,
            usage_low: 1018 * MIB,
            usage_high: 1020 * MIB,
            limit: 1024 * MIB,
            captures: 120,
            unchanged: 118,
            allocated: None,
            allocated_from: None,
            writeback: Some(846 * MIB),
            writeback_share: 1.0,
            dirty: Some(4 * MIB),
            psi_full: None,
            no_gc: None,
        }
    }

    /// Issue 33, item 14: 846 MiB under writeback for 85 s at the limit and 118 of 120 heap
    /// captures the same went unsaid.
    #[test]
    fn a_process_stuck_on_writeback_is_said_once_with_its_span() {
        assert_eq!(
            stuck_words(&stuck()),
            "stuck at its limit from 20.0 s for 85.0 s: usage pinned at 1018 MiB–1020 MiB of \
             1.00 GiB; much under writeback through 100 % of it, up to 846 MiB, and 4.00 MiB \
             dirty (the kernel writes them before it can reclaim them); the published heap the \
             same in 118 of 120 captures"
        );
        let gc = Stuck {
            writeback: Some(0),
            writeback_share: 0.0,
            allocated: Some(108 * MIB),
            allocated_from: Some("recent_space"),
            ..stuck()
        };
        assert!(
            stuck_words(&gc).ends_with(
                "the published heap the same in 118 of 120 captures while 108 MiB more was \
                 allocated (recent_space): no GC finished"
            ),
            "{}",
            stuck_words(&gc)
        );
    }

    /// The whole way, as `heapwatch growth` prints a life: a heap that stopped moving at 10 s,
    /// the cgroup at its limit from 12 s with 200 MiB under writeback, stopped at 60 s. The
    /// stuck line comes once, with the stretch.
    #[test]
    fn growth_says_once_that_a_life_was_stuck_at_its_limit_and_for_how_long() {
        use crate::analyse::growth::GrowthBuilder;
        use crate::analyse::reduce::SiteFigures;
        use crate::model::capture::{CaptureRecord, RecordKind};
        use crate::model::memory::{CgroupBreakdown, MemorySample};
        const LIMIT: u64 = 256 * MIB;
        let mut records = Vec::new();
        let mut memory = Vec::new();
        let mut stored = Vec::new();
        for k in 0..120u64 {
            let t = k as i64 * 500;
            let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, t);
            let value = ((k.min(20) * 2) << 20) as i64;
            r.totals.insert("inuse_space".into(), value);
            r.totals.insert("alloc_space".into(), value);
            if k > 20 {
                r.dup_of = Some(21);
            } else {
                stored.push((r.clone(), value));
            }
            records.push(r);
            let full = k >= 24;
            memory.push(MemorySample {
                t_ms: t + 10,
                source: "cgroup".into(),
                usage: Some(if full { LIMIT - MIB } else { k * 8 * MIB }),
                limit: Some(LIMIT),
                oom_kills: Some(0),
                alive: true,
                cgroup: Some(CgroupBreakdown {
                    anon: Some(48 * MIB),
                    file: Some(if full { 200 * MIB } else { 0 }),
                    file_writeback: Some(if full { 200 * MIB } else { 0 }),
                    file_dirty: Some(0),
                    shmem: Some(0),
                    ..CgroupBreakdown::default()
                }),
                ..MemorySample::default()
            });
        }
        records.push(CaptureRecord::new(200, RecordKind::Stop, 1, 60_000));
        let mut builder = GrowthBuilder::default().captures(&records);
        for (r, value) in &stored {
            builder.heap(
                r,
                &[SiteFigures {
                    name: "main.grow".into(),
                    value: *value,
                    alloc: *value,
                }],
            );
        }
        let report = builder.finish(&records, &memory, Some(LIMIT));
        let text = crate::render::growth::text(&report, 5, None);
        let said: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("stuck at its limit"))
            .collect();
        assert_eq!(said.len(), 1, "{text}");
        assert_eq!(
            said[0].trim(),
            "stuck at its limit from 12.0 s for 47.5 s: usage pinned at 255 MiB of 256 MiB; \
             much under writeback through 100 % of it, up to 200 MiB (the kernel writes them \
             before it can reclaim them); the published heap the same in 95 of 95 captures",
            "{text}"
        );
        let json = crate::render::growth::json(&report, None);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        let stuck = &doc["cycles"][0]["stuck"];
        assert_eq!(
            (
                stuck["captures"].as_u64(),
                stuck["writeback_share"].as_f64()
            ),
            (Some(95), Some(1.0))
        );
        assert_eq!(stuck["summary"].as_str(), Some(said[0].trim()));
    }
}
