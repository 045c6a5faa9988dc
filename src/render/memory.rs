//! The words of a cycle's memory at its peak (where it went, by kind), of its stretch at
//! the limit (the `summary` of each in the growth report's JSON) and of its MemStats.

use crate::analyse::breakdown::{AtLimit, Filler, MemoryBreakdown};
use crate::analyse::growth::MemStatsView;
use crate::analyse::spikes::Peaks;
use crate::units::format_bytes;

/// "in-use heap X at T s, process RSS Y at U s, cgroup Z at V s", naming only the peaks
/// measured; `None` when none was: `growth`'s peaks line and the report's peaks fact.
pub fn peaks_words(p: &Peaks) -> Option<String> {
    let peaks: Vec<String> = [
        ("in-use heap", p.heap),
        ("process RSS", p.process),
        ("cgroup", p.cgroup),
    ]
    .into_iter()
    .filter_map(|(what, p)| {
        p.map(|p| format!("{what} {} at {:.1} s", format_bytes(p.bytes), p.at_s))
    })
    .collect();
    (!peaks.is_empty()).then(|| peaks.join(", "))
}

/// "HeapAlloc X, live share Y %, held and not returned Z, N GC/s", naming only what is known:
/// `growth`'s memstats line and the report's MemStats fact.
pub fn memstats_words(m: &MemStatsView) -> String {
    let mut s = format!("HeapAlloc {}", format_bytes(m.heap_alloc));
    if let Some(l) = m.live_share {
        s.push_str(&format!(", live share {:.0} %", l * 100.0));
    }
    if let Some(h) = m.held_not_returned {
        s.push_str(&format!(", held and not returned {}", format_bytes(h)));
    }
    if let Some(g) = m.gc_per_sec {
        s.push_str(&format!(", {g:.1} GC/s"));
    }
    s
}

/// "of 1 GiB: Go heap allocated (HeapAlloc) X, held free Y, runtime Z, other anonymous W, mapped files M,
/// other page cache C (dirty D)", naming only what is known.
pub fn breakdown_words(b: &MemoryBreakdown) -> String {
    let f = |v: u64| format_bytes(v as i64);
    let mut parts = Vec::new();
    for (name, v) in [
        ("Go heap allocated (HeapAlloc)", b.go_heap_live),
        ("held free", b.go_held_free),
        ("runtime", b.go_runtime),
        ("other anonymous", b.other_anon),
    ] {
        if let Some(v) = v {
            parts.push(format!("{name} {}", f(v)));
        }
    }
    if b.go_heap_live.is_none() {
        if let Some(a) = b.anon {
            parts.insert(0, format!("anonymous {}", f(a)));
        }
    }
    parts.extend(cache_kinds(b));
    let of = match b.limit {
        Some(l) => format!("{} of {}", f(b.total), f(l)),
        None => f(b.total),
    };
    let mut s = format!("at {:.1} s, {of}", b.at_s);
    if !parts.is_empty() {
        s.push_str(&format!(": {}", parts.join(", ")));
    }
    if let Some(t) = b.memstats_at_s {
        s.push_str(&format!(" (Go figures from MemStats read at {t:.1} s)"));
    }
    if let Some(e) = &b.memstats_elsewhere {
        let heap = e
            .heap_alloc
            .map(|h| format!(" (HeapAlloc {} then)", f(h)))
            .unwrap_or_default();
        s.push_str(&format!(
            " (no Go split: the nearest MemStats were read at {:.1} s, with {} of memory{heap}, \
             not this moment's)",
            e.at_s,
            f(e.total_then)
        ));
    }
    // MemStats and the memory sample are read at different moments: Go figures above the
    // total are no split of it, and are said to be none.
    let go = [b.go_heap_live, b.go_held_free, b.go_runtime]
        .into_iter()
        .flatten()
        .sum::<u64>();
    let whole = b.anon.unwrap_or(b.total);
    if go > whole {
        s.push_str(&format!(
            "; the Go figures sum to {}, more than the {} {} they would split (read at another \
             moment): they are not parts of it",
            f(go),
            f(whole),
            if b.anon.is_some() {
                "anonymous memory"
            } else {
                "total"
            }
        ));
    }
    // Without memory.stat or smaps (runs recorded before they were sampled, a bare --pid), the
    // Go figures are all there is: say how much of the total they leave unexplained.
    if b.anon.is_none() && b.other_cache.is_none() {
        let go = [b.go_heap_live, b.go_held_free, b.go_runtime]
            .into_iter()
            .flatten()
            .sum::<u64>();
        if go > 0 && b.total > go {
            s.push_str(&format!(
                "; {} not split (no memory.stat or smaps_rollup samples in this run)",
                f(b.total - go)
            ));
        }
    }
    if let Some(files) = crate::render::files::files_words(b) {
        s.push_str(&format!("; {files}"));
    }
    if b.cache_inherited {
        s.push_str(
            "; page cache was already charged when the cycle began (a reused cgroup): \
             cache figures are not comparable with another run's",
        );
    }
    s
}

/// The page cache said by what the kernel can do with each kind, as `memory.stat` splits it:
/// shared memory cannot be dropped, dirty pages and those under writeback must be written
/// first, clean cache is dropped at once. Never "page cache" alone for memory that kills.
fn cache_kinds(b: &MemoryBreakdown) -> Vec<String> {
    let f = |v: u64| format_bytes(v as i64);
    let Some(clean) = b.clean_cache else {
        // Older samples: the split by mapping only.
        let mut parts: Vec<String> = b
            .mapped_files
            .map(|m| format!("mapped files {}", f(m)))
            .into_iter()
            .collect();
        if let Some(c) = b.other_cache {
            let dirty = b.dirty.map(|d| format!(" (dirty {})", f(d)));
            parts.push(format!(
                "other page cache {}{}",
                f(c),
                dirty.unwrap_or_default()
            ));
        }
        return parts;
    };
    let mut parts = Vec::new();
    if let Some(s) = b.shmem.filter(|&s| s > 0) {
        parts.push(format!(
            "shared memory and tmpfs {} (cannot be dropped)",
            f(s)
        ));
    }
    let dirty = b.dirty.unwrap_or(0);
    let writeback = b.writeback.unwrap_or(0);
    if dirty + writeback > 0 {
        parts.push(format!(
            "dirty {} and under writeback {} (written before they can be dropped)",
            f(dirty),
            f(writeback)
        ));
    }
    let mapped = b
        .mapped_files
        .filter(|&m| m > 0)
        .map(|m| format!("; {} of the page cache mapped into the process", f(m)));
    parts.push(format!(
        "clean page cache {} (can be dropped{})",
        f(clean),
        mapped.unwrap_or_default()
    ));
    parts
}

/// What filled the limit, when a kind other than the Go heap did: "shared memory and tmpfs
/// filled the limit (886 MiB of the 1020 MiB charged at 1.9 s; the kernel cannot drop it), 854 MiB of it
/// …/ctrl-ha.db-20261207-031333 (open, written 0.3–1.9 s)". A verdict leads with it.
pub fn filled_words(b: &MemoryBreakdown) -> Option<String> {
    let filled = b.filled_by()?;
    let f = |v: u64| format_bytes(v as i64);
    let what = filler_name(filled.kind);
    let (can, file) = match filled.kind {
        Filler::SharedMemory => (
            "the kernel cannot drop it",
            crate::render::files::largest_file_words(b, true),
        ),
        Filler::Unwritten => (
            "the kernel must write it before it can drop it",
            crate::render::files::largest_file_words(b, false),
        ),
        Filler::OtherAnonymous => ("it is not the Go heap", None),
    };
    let mut s = format!(
        "{what} filled the limit ({} of the {} charged at {:.1} s; {can})",
        f(filled.bytes),
        f(b.total),
        b.at_s
    );
    if let Some(file) = file {
        s.push_str(&format!(", {file}"));
    }
    Some(s)
}

/// A kind of memory that filled a limit, named.
pub fn filler_name(kind: Filler) -> &'static str {
    match kind {
        Filler::SharedMemory => "shared memory and tmpfs",
        Filler::Unwritten => "page cache waiting to be written (dirty or under writeback)",
        Filler::OtherAnonymous => {
            "anonymous memory the Go runtime does not account for (cgo, mmap)"
        }
    }
}

/// Shared memory under this is not said apart from the page cache it is part of.
const FILE_WORTH_SAYING: u64 = 1 << 20;

/// Whether the stretch at the limit is one sample (it reads "for 0.0 s").
fn one_sample(a: &AtLimit) -> bool {
    a.for_s < 0.05
}

/// "the cgroup sat at its limit from 20.0 s for 69.0 s, …", or "the cgroup reached its limit
/// at 7.4 s, …" when only one sample found it there.
pub fn cgroup_at_limit(a: &AtLimit) -> String {
    let words = at_limit_words(a);
    match words.strip_prefix("at its limit at ") {
        Some(rest) => format!("the cgroup reached its limit at {rest}"),
        None => format!("the cgroup sat {words}"),
    }
}

/// "at its limit from 20.0 s for 69.0 s, 12420 charge failures, 660 MiB of it page cache and
/// 360 MiB anonymous, not killed"; "at its limit at 7.4 s, …" when only one sample found it
/// there.
pub fn at_limit_words(a: &AtLimit) -> String {
    let mut words = if one_sample(a) {
        format!("at its limit at {:.1} s", a.since_s)
    } else {
        format!("at its limit from {:.1} s for {:.1} s", a.since_s, a.for_s)
    };
    if let Some(n) = a.charge_failures {
        words.push_str(&format!(", {n} charge failures"));
    }
    if let (Some(file), Some(anon)) = (a.file, a.anon) {
        // Shared memory is page cache the kernel cannot drop: never said as page cache alone.
        let kept = match a.shmem.filter(|&s| s >= FILE_WORTH_SAYING) {
            Some(s) if s >= file => " (all of it shared memory and tmpfs)".to_string(),
            Some(s) => format!(
                " ({} of that shared memory and tmpfs)",
                format_bytes(s as i64)
            ),
            None => String::new(),
        };
        words.push_str(&format!(
            ", {} of it page cache{kept} and {} anonymous",
            format_bytes(file as i64),
            format_bytes(anon as i64)
        ));
    }
    words.push_str(if a.killed {
        ", then OOM-killed"
    } else {
        ", not killed"
    });
    words
}

/// The name of the memory figure sampled from outside a cycle's process: its cgroup's usage
/// where that was sampled (what the limit counts), else the process's RSS (its binary's file
/// pages included, which no cgroup limit set it against), said as RSS.
pub fn outside_figure(cgroup_sampled: bool) -> &'static str {
    if cgroup_sampled {
        "cgroup memory"
    } else {
        "process RSS"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `growth` said "held not returned" where the report said "held and not returned": one
    /// wording now, and only the figures known.
    #[test]
    fn memstats_are_worded_once_naming_only_what_is_known() {
        let mut m = MemStatsView {
            at_s: 1.0,
            heap_alloc: 48 << 20,
            live_share: Some(0.62),
            held_not_returned: Some(12 << 20),
            gc_per_sec: Some(3.25),
        };
        assert_eq!(
            memstats_words(&m),
            "HeapAlloc 48.0 MiB, live share 62 %, held and not returned 12.0 MiB, 3.2 GC/s"
        );
        (m.live_share, m.held_not_returned, m.gc_per_sec) = (None, None, None);
        assert_eq!(memstats_words(&m), "HeapAlloc 48.0 MiB");
    }
    use crate::analyse::breakdown::{at_limit, at_peak, mark_inherited};
    use crate::model::capture::{CaptureRecord, RecordKind};
    use crate::model::memory::{CgroupBreakdown, MemorySample};

    const MIB: u64 = 1 << 20;

    /// A MemStats record at `t_ms`: HeapAlloc, HeapInuse, HeapIdle, HeapReleased, HeapSys, Sys.
    fn memstats(t_ms: i64, figures: [u64; 6]) -> CaptureRecord {
        let mut ms = CaptureRecord::new(1, RecordKind::Memstats, 1, t_ms);
        let keys = [
            "HeapAlloc",
            "HeapInuse",
            "HeapIdle",
            "HeapReleased",
            "HeapSys",
            "Sys",
        ];
        for (k, v) in keys.into_iter().zip(figures) {
            ms.totals.insert(k.into(), v as i64);
        }
        ms
    }

    fn sample(t_ms: i64, usage: u64, file: u64, failcnt: u64) -> MemorySample {
        MemorySample {
            t_ms,
            source: "cgroup".into(),
            usage: Some(usage),
            limit: Some(1024 * MIB),
            alive: true,
            cgroup: Some(CgroupBreakdown {
                anon: Some(usage - file),
                file: Some(file),
                file_mapped: Some(file / 2),
                file_dirty: Some(3 * MIB),
                failcnt: Some(failcnt),
                ..CgroupBreakdown::default()
            }),
            ..MemorySample::default()
        }
    }

    /// OpenZiti 2.1.0 with its data directory on tmpfs (issue 33, item 14): 886 MiB of shared
    /// memory filled the limit and was printed "other page cache … (dirty 0 B)", which reads
    /// as reclaimable. Each kind is said as what the kernel can do with it.
    #[test]
    fn shared_memory_and_writeback_are_never_said_as_page_cache() {
        let mut tmpfs = sample(1_900, 1020 * MIB, 888 * MIB, 0);
        let cg = tmpfs.cgroup.as_mut().unwrap();
        cg.shmem = Some(886 * MIB);
        cg.file_dirty = Some(0);
        cg.file_mapped = Some(0);
        let refs = [&tmpfs];
        let b = at_peak(&refs, &[], 0, None).unwrap();
        let words = breakdown_words(&b);
        assert!(
            words.contains("anonymous 132 MiB, shared memory and tmpfs 886 MiB (cannot be dropped), clean page cache 2.00 MiB (can be dropped)"),
            "{words}"
        );
        assert!(!words.contains("other page cache"), "{words}");
        let a = at_limit(&refs, 0, Some(1024 * MIB), true).unwrap();
        assert!(
            at_limit_words(&a).contains(
                "888 MiB of it page cache (886 MiB of that shared memory and tmpfs) and 132 MiB anonymous"
            ),
            "{}",
            at_limit_words(&a)
        );

        let mut throttled = sample(1_900, 1020 * MIB, 850 * MIB, 0);
        let cg = throttled.cgroup.as_mut().unwrap();
        cg.file_dirty = Some(4 * MIB);
        cg.file_writeback = Some(842 * MIB);
        let refs = [&throttled];
        let words = breakdown_words(&at_peak(&refs, &[], 0, None).unwrap());
        assert!(
            words.contains("dirty 4.00 MiB and under writeback 842 MiB (written before they can be dropped), clean page cache 4.00 MiB"),
            "{words}"
        );
    }

    /// The same two lives (issue 33, item 14a): the verdict led with a 46.8 MiB heap where
    /// shared memory, or pages waiting to be written, filled the limit. What filled it is
    /// named first; a heap that filled it, or memory under the limit, names no other kind.
    #[test]
    fn the_kind_that_filled_the_limit_is_said_and_only_when_it_filled_it() {
        let mut tmpfs = sample(1_900, 1020 * MIB, 888 * MIB, 0);
        let cg = tmpfs.cgroup.as_mut().unwrap();
        (cg.shmem, cg.file_dirty, cg.file_mapped) = (Some(886 * MIB), Some(0), Some(0));
        let b = at_peak(&[&tmpfs], &[], 0, None).unwrap();
        assert_eq!(
            filled_words(&b).as_deref(),
            Some(
                "shared memory and tmpfs filled the limit (886 MiB of the 1020 MiB charged at \
                 1.9 s; the kernel cannot drop it)"
            )
        );

        let mut throttled = sample(1_900, 1020 * MIB, 850 * MIB, 0);
        let cg = throttled.cgroup.as_mut().unwrap();
        (cg.file_dirty, cg.file_writeback) = (Some(4 * MIB), Some(842 * MIB));
        let b = at_peak(&[&throttled], &[], 0, None).unwrap();
        assert_eq!(
            b.filled_by().map(|f| (f.kind, f.bytes)),
            Some((Filler::Unwritten, 846 * MIB))
        );
        assert!(
            filled_words(&b).is_some_and(|w| w.starts_with(
                "page cache waiting to be written (dirty or under writeback) filled the limit (846 MiB"
            )),
            "{:?}",
            filled_words(&b)
        );

        // cgo's own memory beside a small Go heap: MemStats account for 100 MiB of 900.
        let cgo = sample(1_900, 1020 * MIB, 120 * MIB, 0);
        let stats = memstats(
            1_900,
            [60 * MIB, 70 * MIB, 20 * MIB, 10 * MIB, 90 * MIB, 100 * MIB],
        );
        let b = at_peak(&[&cgo], &[&stats], 0, None).unwrap();
        assert_eq!(b.filled_by().map(|f| f.kind), Some(Filler::OtherAnonymous));

        // MemStats read 0.7 s before the peak, when the memory stood at 100 MiB (etcd's WAL
        // replay filled 190 MiB in that time): they split no peak, and nothing is "outside the
        // Go runtime's accounts".
        let early = sample(100, 100 * MIB, 60 * MIB, 0);
        let peak = sample(800, 1020 * MIB, 60 * MIB, 0);
        let stats = memstats(100, [2 * MIB, 4 * MIB, 2 * MIB, MIB, 8 * MIB, 12 * MIB]);
        let b = at_peak(&[&early, &peak], &[&stats], 0, None).unwrap();
        assert!(b.memstats_elsewhere.is_some(), "{b:?}");
        assert_eq!(b.filled_by(), None, "{b:?}");

        // The heap filled it: no other kind leads.
        let heap = sample(1_900, 1020 * MIB, 20 * MIB, 0);
        let stats = memstats(
            1_900,
            [
                900 * MIB,
                950 * MIB,
                20 * MIB,
                10 * MIB,
                980 * MIB,
                990 * MIB,
            ],
        );
        let b = at_peak(&[&heap], &[&stats], 0, None).unwrap();
        assert_eq!(b.filled_by(), None);
        // Shared memory that did not fill the limit: under it, nothing filled.
        let mut under = sample(1_900, 600 * MIB, 500 * MIB, 0);
        under.cgroup.as_mut().unwrap().shmem = Some(480 * MIB);
        let b = at_peak(&[&under], &[], 0, None).unwrap();
        assert_eq!(b.filled_by(), None);
    }

    #[test]
    fn one_sample_at_the_limit_is_a_moment_not_a_stretch_of_no_time() {
        let memory = [
            sample(0, 300 * MIB, 10 * MIB, 0),
            sample(7_400, 1020 * MIB, 10 * MIB, 5),
        ];
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let a = at_limit(&refs, 0, Some(1024 * MIB), true).expect("at the limit");
        assert_eq!(a.for_s, 0.0);
        assert!(
            at_limit_words(&a).starts_with("at its limit at 7.4 s,"),
            "{}",
            at_limit_words(&a)
        );
        assert!(
            cgroup_at_limit(&a).starts_with("the cgroup reached its limit at 7.4 s,"),
            "{}",
            cgroup_at_limit(&a)
        );
        assert!(!cgroup_at_limit(&a).contains("for 0.0 s"));
    }

    #[test]
    fn a_controller_at_its_limit_on_page_cache_is_measured_not_forecast() {
        // The field case: 1 GiB cgroup, ~660 MiB of page cache, at the limit for over a minute.
        let mut memory = vec![
            sample(0, 300 * MIB, 10 * MIB, 0),
            sample(10_000, 900 * MIB, 500 * MIB, 0),
        ];
        for k in 0..70 {
            memory.push(sample(
                20_000 + k * 1000,
                1020 * MIB,
                660 * MIB,
                180 * k as u64,
            ));
        }
        memory.push(sample(95_000, 700 * MIB, 400 * MIB, 12_600));
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let a = at_limit(&refs, 0, None, false).expect("at the limit");
        assert_eq!((a.since_s, a.for_s), (20.0, 69.0));
        assert_eq!(a.charge_failures, Some(180 * 69));
        assert!(!a.killed);
        assert!(
            at_limit_words(&a).contains("660 MiB of it page cache"),
            "{}",
            at_limit_words(&a)
        );
        assert!(
            at_limit_words(&a).ends_with("not killed"),
            "{}",
            at_limit_words(&a)
        );

        let ms = memstats(
            20_000,
            [
                200 * MIB,
                220 * MIB,
                40 * MIB,
                10 * MIB,
                260 * MIB,
                290 * MIB,
            ],
        );
        let b = at_peak(&refs, &[&ms], 0, None).unwrap();
        assert_eq!(b.go_heap_live, Some(200 * MIB));
        assert_eq!(b.go_held_free, Some(50 * MIB));
        assert_eq!(b.go_runtime, Some(30 * MIB));
        assert_eq!(b.other_anon, Some(360 * MIB - 280 * MIB));
        assert_eq!(b.mapped_files, Some(330 * MIB));
        assert_eq!(b.other_cache, Some(330 * MIB));
        assert!(!b.cache_inherited);
        assert!(
            breakdown_words(&b).contains("1020 MiB of 1.00 GiB: Go heap allocated (HeapAlloc) 200 MiB, held free 50.0 MiB, runtime 30.0 MiB, other anonymous 80.0 MiB, dirty 3.00 MiB and under writeback 0 B (written before they can be dropped), clean page cache 657 MiB (can be dropped; 330 MiB of the page cache mapped into the process)"),
            "{}",
            breakdown_words(&b)
        );
        assert!(!breakdown_words(&b).contains("not parts of it"));

        // MemStats read at another moment than the sample: its figures exceed what they would
        // split, and are said to be no parts of it.
        let mut late = ms.clone();
        late.totals.insert("HeapAlloc".into(), (500 * MIB) as i64);
        late.totals.insert("HeapInuse".into(), (520 * MIB) as i64);
        let b = at_peak(&refs, &[&late], 0, None).unwrap();
        let words = breakdown_words(&b);
        assert!(
            words.contains("the Go figures sum to 580 MiB, more than the 360 MiB anonymous memory they would split"),
            "{words}"
        );
    }

    #[test]
    fn the_page_cache_at_the_limit_is_named_whichever_sample_was_last() {
        // Every other sample carries memory.stat: the stretch's last one does not.
        let mut memory = vec![sample(0, 300 * MIB, 10 * MIB, 0)];
        for k in 0..10 {
            let mut m = sample(10_000 + k * 1000, 1020 * MIB, 660 * MIB, 10 * k as u64);
            if k % 2 == 1 {
                m.cgroup = None;
            }
            memory.push(m);
        }
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let a = at_limit(&refs, 0, None, false).expect("at the limit");
        assert_eq!(a.file, Some(660 * MIB));
        assert_eq!(a.charge_failures, Some(80));
        assert!(at_limit_words(&a).contains("660 MiB of it page cache"));
    }

    #[test]
    fn cache_charged_before_the_cycle_began_is_flagged_and_nothing_at_limit_is_none() {
        let memory = [
            sample(0, 200 * MIB, 150 * MIB, 0),
            sample(500, 210 * MIB, 150 * MIB, 0),
        ];
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let mut b = at_peak(&refs, &[], 0, None).unwrap();
        mark_inherited(&mut b, &refs, false);
        assert!(
            !b.cache_inherited,
            "a run's first cycle may have read its own files"
        );
        mark_inherited(&mut b, &refs, true);
        assert!(b.cache_inherited);
        assert!(
            breakdown_words(&b).contains("reused cgroup"),
            "{}",
            breakdown_words(&b)
        );
        assert!(at_limit(&refs, 0, None, false).is_none());
        // Runs recorded before the split existed: no breakdown fields, still a total.
        let plain = MemorySample {
            t_ms: 0,
            rss: Some(50 * MIB),
            alive: true,
            ..MemorySample::default()
        };
        let b = at_peak(&[&plain], &[], 0, None).unwrap();
        assert_eq!((b.total, b.anon, b.other_cache), (50 * MIB, None, None));
    }

    #[test]
    fn old_memstats_say_when_they_were_read_and_an_unsplit_total_says_what_is_unexplained() {
        // The demo's case: RSS only, MemStats read every 5 s, the peak 2 s after the last.
        let peak = MemorySample {
            t_ms: 7_400,
            rss: Some(254 * MIB),
            alive: true,
            ..MemorySample::default()
        };
        let mut ms = memstats(5_400, [26 * MIB, 27 * MIB, 0, 0, 27 * MIB, 32 * MIB]);
        let b = at_peak(&[&peak], &[&ms], 0, None).unwrap();
        assert_eq!(b.memstats_at_s, Some(5.4));
        assert!(
            breakdown_words(&b)
                .contains("(Go figures from MemStats read at 5.4 s); 222 MiB not split"),
            "{}",
            breakdown_words(&b)
        );
        // MemStats read beside the peak need no time.
        ms.t_ms = 7_000;
        let b = at_peak(&[&peak], &[&ms], 0, None).unwrap();
        assert_eq!(b.memstats_at_s, None);
        assert!(
            !breakdown_words(&b).contains("MemStats read at"),
            "{}",
            breakdown_words(&b)
        );
    }

    /// A server idle for 3 s (MemStats read then), flooded, OOM-killed 0.3 s later (nats-server
    /// under `heapwatch run`): the idle MemStats would put the flood's heap in "other anonymous".
    #[test]
    fn memstats_read_when_the_memory_was_far_from_the_peak_do_not_split_it() {
        let memory = [
            sample(0, 12 * MIB, 2 * MIB, 0),
            sample(3_000, 13 * MIB, 2 * MIB, 0),
            sample(3_300, 1020 * MIB, 2 * MIB, 0),
        ];
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let mut ms = memstats(40, [MIB, 2 * MIB, 6 * MIB, 6 * MIB, 8 * MIB, 12 * MIB]);
        let b = at_peak(&refs, &[&ms], 0, None).unwrap();
        assert_eq!((b.go_heap_live, b.other_anon), (None, None));
        assert_eq!(b.anon, Some(1018 * MIB));
        let words = breakdown_words(&b);
        assert!(
            words.contains("anonymous 1018 MiB")
                && words.contains("(no Go split: the nearest MemStats were read at 0.0 s, with 12.0 MiB of memory (HeapAlloc 1.00 MiB then), not this moment's)"),
            "{words}"
        );
        // Read 2 s before the peak while the memory stood within an eighth of it: still a split.
        ms.t_ms = 1_300;
        let memory = [sample(1_300, 960 * MIB, 2 * MIB, 0), memory[2].clone()];
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let b = at_peak(&refs, &[&ms], 0, None).unwrap();
        assert_eq!(
            (b.go_heap_live, b.memstats_elsewhere.is_none()),
            (Some(MIB), true)
        );
        assert_eq!(b.memstats_at_s, Some(1.3));
    }
}
