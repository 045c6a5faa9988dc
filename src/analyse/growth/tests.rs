use super::*;
use crate::model::memory::CgroupBreakdown;

const MIB: f64 = 1024.0 * 1024.0;

/// A heap growing 32 MiB/s from 4 MiB, with Go's pacing (next GC when the heap doubles)
/// and Go's publication (a GC publishes the snapshot of the GC before), captured every
/// 250 ms for 7 s: what an OOM-bound target looks like to the collector.
fn doubling_heap(forced_gc: bool) -> GrowthReport {
    let live = |t: f64| 4.0 * MIB + 32.0 * MIB * t;
    let mut gcs = vec![0.0];
    while let Some(&last) = gcs.last() {
        let next = (2.0 * live(last) - 4.0 * MIB) / (32.0 * MIB);
        if next > 7.0 {
            break;
        }
        gcs.push(next);
    }
    let mut builder = GrowthBuilder::default().forced_gc(forced_gc);
    let mut records = Vec::new();
    for k in 0..=28u64 {
        let t = k as f64 * 0.25;
        let value = if forced_gc {
            live(t)
        } else {
            let done = gcs.iter().filter(|&&g| g <= t).count();
            live(gcs[done.saturating_sub(2)])
        };
        let record = CaptureRecord::new(k + 1, RecordKind::Heap, 1, (t * 1000.0) as i64);
        let sites = [SiteFigures {
            name: "main.grow".into(),
            value: value as i64,
            alloc: value as i64,
        }];
        builder.heap(&record, &sites);
        records.push(record);
    }
    builder.finish(&records, &[], None)
}

#[test]
fn a_heap_published_ever_more_rarely_grows_at_its_true_rate() {
    for forced_gc in [false, true] {
        let report = doubling_heap(forced_gc);
        let c = &report.cycles[0];
        let site = c.sites.first().expect("main.grow grows");
        assert!(
            (28.0 * MIB..=36.0 * MIB).contains(&site.bytes_per_sec),
            "forced_gc {forced_gc}: {:.1} MiB/s, truly 32",
            site.bytes_per_sec / MIB
        );
        assert!(c.alloc_storms.is_empty(), "{:?}", c.alloc_storms);
    }
}

/// nats-server under `heapwatch run`: 3 s idle at 10 MiB, then the cgroup full in 0.3 s. A
/// line through that is flat and is not given as the memory's rate; a steady climb is.
#[test]
fn a_memory_rate_is_given_only_when_its_line_accounts_for_the_rise() {
    const MIB: f64 = 1048576.0;
    let mut late: Vec<(f64, f64)> = (0..60).map(|i| (i as f64 * 0.05, 10.0 * MIB)).collect();
    late.extend((0..6).map(|i| (3.0 + i as f64 * 0.05, (10.0 + 23.6 * i as f64) * MIB)));
    let fit = fit_points(&late).unwrap();
    assert!(fit.slope.abs() < MIB, "{}", fit.slope);
    assert!(!accounts_for_rise(&fit, &late));
    let steady: Vec<(f64, f64)> = (0..66)
        .map(|i| (i as f64 * 0.05, (10.0 + i as f64) * MIB))
        .collect();
    assert!(accounts_for_rise(&fit_points(&steady).unwrap(), &steady));
    let flat: Vec<(f64, f64)> = (0..66)
        .map(|i| (i as f64 * 0.05, (100 + i % 3) as f64 * MIB))
        .collect();
    assert!(accounts_for_rise(&fit_points(&flat).unwrap(), &flat));
}

/// nats-server under `heapwatch run`, captured every 0.5 s: idle at 2 MiB for 3 s (its
/// profile unchanged, stored once and then duplicates), flooded at 3 s, 48 MiB in use at
/// 3.5 s, GCs running unseen between. The rise is read from 3.0 s, not from the idle start.
#[test]
fn a_rise_past_the_gc_goal_after_a_quiet_start_is_read_from_its_last_quiet_capture() {
    let figures = [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.5, 48.0];
    let mut records = Vec::new();
    for (k, mib) in figures.iter().enumerate() {
        let mut r = CaptureRecord::new(k as u64 + 1, RecordKind::Heap, 1, k as i64 * 500);
        r.totals.insert("inuse_space".into(), (mib * MIB) as i64);
        r.totals.insert("alloc_space".into(), (mib * MIB) as i64);
        if k > 0 && *mib == figures[0] {
            r.dup_of = Some(1);
        }
        records.push(r);
    }
    let mut builder = GrowthBuilder::default().captures(&records);
    for (r, mib) in records
        .iter()
        .zip(figures)
        .filter(|(r, _)| r.dup_of.is_none())
    {
        let sites = [SiteFigures {
            name: "main.store".into(),
            value: (mib * MIB) as i64,
            alloc: (mib * MIB) as i64,
        }];
        builder.heap(r, &sites);
    }
    let report = builder.finish(&records, &[], None);
    let reading = report.cycles[0].reading.as_ref().expect("a rise");
    assert_eq!(reading.onset_s, 3.0, "{reading:?}");
    assert_eq!(reading.end_s, 3.25, "{reading:?}");
    assert!(reading.bytes_per_sec > 150.0 * MIB, "{reading:?}");
    // Below the goal a publication keeps the place before it: 2.5 MiB after 2 MiB.
    assert!(!gcs_unseen(2.0 * MIB, 2.5 * MIB) && !gcs_unseen(3.0 * MIB, 4.9 * MIB));
    assert!(gcs_unseen(2.5 * MIB, 48.0 * MIB) && gcs_unseen(10.0 * MIB, 26.0 * MIB));
}

/// `collect --gc`: every capture is current and placed at its own time, but a capture stored
/// as a twin of an earlier one (`dup_of`) is that one, not a second point.
#[test]
fn under_a_forced_gc_a_stored_twin_is_no_second_point() {
    let figures = [
        (0, 2.0, false),
        (500, 2.0, true),
        (1_000, 10.0, false),
        (1_500, 20.0, false),
    ];
    let mut records = Vec::new();
    for (k, (t_ms, mib, twin)) in figures.iter().enumerate() {
        let mut r = CaptureRecord::new(k as u64 + 1, RecordKind::Heap, 1, *t_ms);
        r.totals.insert("inuse_space".into(), (mib * MIB) as i64);
        r.totals.insert("alloc_space".into(), (mib * MIB) as i64);
        r.dup_of = twin.then_some(1);
        records.push(r);
    }
    let report = GrowthBuilder::default()
        .captures(&records)
        .forced_gc(true)
        .finish(&records, &[], None);
    let reading = report.cycles[0].reading.as_ref().expect("a rise");
    assert_eq!((reading.onset_s, reading.points), (0.0, 3), "{reading:?}");
}

/// etcd under `run --restarts 2` (issue 33, item 1): lives 1 and 2 killed by the kernel, life 3
/// sat at its limit until the run was stopped. Life 2's kill was first seen by the sampler
/// 0.75 s after its exit record, in a sample already naming life 3's pid. Two kills, not three.
#[test]
fn a_kill_seen_under_the_next_life_s_pid_ends_the_life_before_and_a_stopped_life_lives() {
    let mut builder = GrowthBuilder::default();
    let mut records = Vec::new();
    let mut memory = Vec::new();
    let mut seq = 0;
    let mut next = |kind, cycle, t_ms| {
        seq += 1;
        CaptureRecord::new(seq, kind, cycle, t_ms)
    };
    // Life 3 answers from 19.6 s; the sampler, slowed by the dying process, looks again at 20.15 s.
    let lives = [(1u32, 0i64, 100u32), (2, 10_000, 200), (3, 19_600, 300)];
    let mut kills = 0;
    for &(cycle, start, pid) in &lives {
        let end = if cycle == 3 { 240_000 } else { start + 9_000 };
        for t in (start..=end).step_by(500) {
            let mut r = next(RecordKind::Heap, cycle, t);
            r.pid = Some(pid);
            let value = (t - start) * 10_000;
            r.totals.insert("inuse_space".into(), value);
            builder.heap(
                &r,
                &[SiteFigures {
                    name: "main.grow".into(),
                    value,
                    alloc: value,
                }],
            );
            records.push(r);
            if cycle == 3 && t < 20_200 {
                continue;
            }
            memory.push(MemorySample {
                t_ms: t + 100,
                source: "cgroup".into(),
                pid: Some(pid),
                oom_kills: Some(kills),
                alive: true,
                ..MemorySample::default()
            });
        }
        if cycle < 3 {
            kills += 1;
            let mut exit = next(RecordKind::Exit, cycle, end + 400);
            exit.pid = Some(pid);
            exit.signal = Some(9);
            // `collect --cgroup` read the counter when it heard the exit: life 2's rise was
            // already counted for life 1's exit's reader only on the first kill.
            if cycle == 1 {
                exit.totals.insert("oom_kill".into(), 1);
            }
            records.push(exit);
            let seen = if cycle == 1 { end + 300 } else { end + 1_150 };
            memory.push(MemorySample {
                t_ms: seen,
                source: "cgroup".into(),
                pid: Some(if cycle == 1 { pid } else { 300 }),
                oom_kills: Some(kills),
                killed: true,
                alive: true,
                ..MemorySample::default()
            });
        }
    }
    records.push(next(RecordKind::Stop, 3, 240_100));
    memory.sort_by_key(|m| m.t_ms);
    let report = builder.finish(&records, &memory, Some(256 << 20));
    let ends: Vec<CycleEnd> = report.cycles.iter().map(|c| c.end).collect();
    assert_eq!(
        ends,
        [
            CycleEnd::OomKilled,
            CycleEnd::OomKilled,
            CycleEnd::CollectorStopped
        ]
    );
    let killed: Vec<bool> = report.cycles.iter().map(|c| c.killed).collect();
    assert_eq!(killed, [true, true, false]);
    assert_eq!(report.across.died, 2, "{:?}", report.across);
    assert!(report.cycles[2].kill_seen_s.is_none());
}

/// Under `heapwatch run` on v1 (memory+swap bound at the limit) the kernel counted no charge
/// failure beside its kill (issue 33, item 2): no count is given, where "0 charge failures"
/// beside "sat at its limit" told a reader it was not under pressure.
#[test]
fn a_kill_beside_no_counted_charge_failure_gives_no_count() {
    const LIMIT: u64 = 64 << 20;
    let report = |failcnt: u64, killed: bool| {
        let mut builder = GrowthBuilder::default();
        let mut records = Vec::new();
        let mut memory = Vec::new();
        for k in 0..20u64 {
            let t = k as i64 * 250;
            let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, t);
            let value = (k * (2 << 20)) as i64;
            r.totals.insert("inuse_space".into(), value);
            builder.heap(
                &r,
                &[SiteFigures {
                    name: "main.grow".into(),
                    value,
                    alloc: value,
                }],
            );
            records.push(r);
            memory.push(MemorySample {
                t_ms: t + 10,
                source: "cgroup".into(),
                usage: Some(if k >= 12 { LIMIT } else { k * (4 << 20) }),
                limit: Some(LIMIT),
                oom_kills: Some(0),
                alive: true,
                cgroup: Some(CgroupBreakdown {
                    failcnt: Some(if k >= 12 { failcnt } else { 0 }),
                    ..CgroupBreakdown::default()
                }),
                ..MemorySample::default()
            });
        }
        if killed {
            let mut exit = CaptureRecord::new(99, RecordKind::Exit, 1, 5_100);
            exit.signal = Some(9);
            exit.totals.insert("oom_kill".into(), 1);
            records.push(exit);
        }
        builder.finish(&records, &memory, Some(LIMIT))
    };
    let at = |r: GrowthReport| r.cycles[0].at_limit.clone().expect("at its limit");
    assert_eq!(at(report(0, true)).charge_failures, None);
    assert_eq!(at(report(500, true)).charge_failures, Some(500));
    // Alive at its limit with no failure counted: the count stands.
    assert_eq!(at(report(0, false)).charge_failures, Some(0));
}

/// OpenZiti 2.1.0 with its data directory on tmpfs (issue 33, item 14a): 886 MiB of shared
/// memory filled the 1 GiB limit while the heap rose 46.8 MiB in `migrateEdgeServiceBucket`,
/// and every output led with the heap. The kind that filled the limit leads the headline and
/// the verdict; the heap's rise follows. The same life with anonymous memory at the limit
/// leads with the rise, as before.
#[test]
fn what_filled_the_limit_leads_the_account_of_the_death_not_the_heap() {
    const LIMIT: u64 = 1 << 30;
    let life = |shmem: u64| {
        let mut builder = GrowthBuilder::default();
        let mut records = Vec::new();
        let mut memory = Vec::new();
        for k in 0..20u64 {
            let t = k as i64 * 100;
            let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, t);
            let value = (4.0 * MIB + k as f64 * 2.4 * MIB) as i64;
            r.totals.insert("inuse_space".into(), value);
            let site = "ziti/controller/db.(*migrationManager).migrateEdgeServiceBucket";
            builder.heap(
                &r,
                &[SiteFigures {
                    name: site.into(),
                    value,
                    alloc: value,
                }],
            );
            records.push(r);
            let usage = LIMIT * (k + 1) / 20;
            let shmem_now = shmem * (k + 1) / 20;
            memory.push(MemorySample {
                t_ms: t + 10,
                source: "cgroup".into(),
                usage: Some(usage),
                limit: Some(LIMIT),
                alive: true,
                cgroup: Some(CgroupBreakdown {
                    anon: Some(usage - shmem_now),
                    file: Some(shmem_now),
                    shmem: Some(shmem_now),
                    file_dirty: Some(0),
                    file_writeback: Some(0),
                    ..CgroupBreakdown::default()
                }),
                ..MemorySample::default()
            });
        }
        records.push(CaptureRecord::oom_exit(99, 1, 2_000, 2_050));
        builder.finish(&records, &memory, Some(LIMIT))
    };
    let tmpfs = life(886 << 20);
    let headline = crate::render::headline::of_growth(&tmpfs);
    assert!(
        headline.lead.starts_with(
            "OOM-killed 2.0 s after the first capture; shared memory and tmpfs filled the limit \
             (886 MiB of the 1.00 GiB charged at 1.9 s; the kernel cannot drop it)"
        ),
        "{}",
        headline.lead
    );
    assert!(
        !headline.lead.contains("migrateEdgeServiceBucket"),
        "{}",
        headline.lead
    );
    // The heap's rise is still said, once, after it.
    let verdict = crate::render::verdict::cycle_verdict(&tmpfs.cycles[0], Some(LIMIT));
    assert!(
        verdict.starts_with("shared memory and tmpfs filled the limit"),
        "{verdict}"
    );
    assert!(verdict.contains("migrateEdgeServiceBucket"), "{verdict}");
    assert_eq!(
        headline
            .points
            .iter()
            .filter(|p| p.contains("filled the limit"))
            .count(),
        0,
        "{headline:?}"
    );

    let heap = life(0);
    let lead = crate::render::headline::of_growth(&heap).lead;
    assert!(!lead.contains("filled the limit"), "{lead}");
    assert!(lead.contains("the rise is in"), "{lead}");
}

/// A heap growing `rate` bytes/s from `base` under GOGC `gogc` (the next GC when the live heap
/// has grown by gogc %), with Go's publication (a capture at GC count n shows the heap as of
/// mark termination n − 1), captured every 250 ms for `secs`; `clocked` gives each capture the
/// runtime's GC count as `proc:` reads it. Until the runtime publishes a cycle (GC 2), a
/// profile sums every allocation since the start: the live heap plus the `churn` (bytes/s
/// allocated and dropped) so far, with nothing in `recent_space`.
fn paced_heap(gogc: f64, rate: f64, base: f64, secs: f64, clocked: bool) -> GrowthReport {
    paced_heap_churning(gogc, rate, base, secs, clocked, 0.0)
}

fn paced_heap_churning(
    gogc: f64,
    rate: f64,
    base: f64,
    secs: f64,
    clocked: bool,
    churn: f64,
) -> GrowthReport {
    let live = |t: f64| base + rate * t;
    let mut gcs: Vec<f64> = Vec::new();
    let mut goal = (live(0.0) * (1.0 + gogc / 100.0)).max(4.0 * MIB);
    loop {
        let at = (goal - base) / rate;
        if at > secs {
            break;
        }
        gcs.push(at);
        goal = (live(at) * (1.0 + gogc / 100.0)).max(4.0 * MIB);
    }
    let mut builder = GrowthBuilder::default();
    let mut records = Vec::new();
    for k in 0..=((secs / 0.25) as u64) {
        let t = k as f64 * 0.25;
        let n = gcs.iter().filter(|&&g| g <= t).count();
        let (value, recent) = match n {
            0 | 1 => (live(t) + churn * t, 0.0),
            n => (live(gcs[n - 2]), (rate + churn) * (t - gcs[n - 2])),
        };
        let mut record = CaptureRecord::new(k + 1, RecordKind::Heap, 1, (t * 1000.0) as i64);
        record.totals.insert("inuse_space".into(), value as i64);
        record.totals.insert(
            "recent_space".into(),
            recent.max(1.0) as i64 * i64::from(n >= 2),
        );
        if clocked {
            record.gc = Some(crate::model::capture::GcClock {
                num_gc: n as u32,
                profile_cycle: None,
            });
        }
        records.push(record);
    }
    let mut builder2 = std::mem::take(&mut builder).captures(&records);
    for r in &records {
        let value = r.totals["inuse_space"];
        builder2.heap(
            r,
            &[SiteFigures {
                name: "main.grow".into(),
                value,
                alloc: value,
            }],
        );
    }
    builder2.finish(&records, &[], None)
}

/// Issue 33, item 9: with the runtime's GC count, a publication's moment is known, not guessed
/// from the size of its jump (which assumes GOGC=100): a steady leak reads at its rate under
/// GOGC 50, 100 and 200 alike (without it, GOGC=200 read 7 MiB/s here).
#[test]
fn with_the_gc_count_a_steady_leak_reads_at_its_rate_whatever_gogc() {
    for gogc in [50.0, 100.0, 200.0] {
        let r = paced_heap(gogc, 16.0 * MIB, 2.0 * MIB, 12.0, true);
        let c = &r.cycles[0];
        assert!(c.gc_clock);
        let rate = c.sites.first().map_or(0.0, |s| s.bytes_per_sec / MIB);
        assert!(
            (12.0..=20.0).contains(&rate),
            "GOGC {gogc}: {rate:.1} MiB/s, truly 16"
        );
    }
    assert!(!paced_heap(200.0, 16.0 * MIB, 2.0 * MIB, 12.0, false).cycles[0].gc_clock);
}

/// GOGC=400 with churn (the zoo's shape i): no cycle is published until the second GC, and the
/// captures before it sum every allocation, garbage included (here 4 MiB/s of it beside an
/// 8 MiB/s leak). The first publication then describes the first GC's moment: read there, the
/// captures after that moment give way, and the leak reads as a leak rising to the end, not as
/// a spike of garbage that fell back at the first publication.
#[test]
fn captures_before_the_first_publication_give_way_to_it() {
    let r = paced_heap_churning(400.0, 8.0 * MIB, 2.0 * MIB, 10.0, true, 4.0 * MIB);
    let c = &r.cycles[0];
    let reading = c.reading.as_ref().expect("a reading");
    assert!(reading.ongoing, "{reading:?}");
    assert!(c.episode.is_none(), "no transient episode: {:?}", c.episode);
    let peak = c.peaks.heap.map(|p| p.bytes).unwrap_or(0) as f64 / MIB;
    // What the last publication described, not the garbage the early captures counted.
    assert!(peak < 30.0, "peak in-use {peak:.1} MiB");
    let rate = reading.bytes_per_sec / MIB;
    assert!(
        (5.0..=14.0).contains(&rate),
        "{rate:.1} MiB/s, truly 8 (plus churn before GC 1)"
    );
    // Without the clock, nothing says the early captures were unpublished: read as before.
    let unclocked = paced_heap_churning(400.0, 8.0 * MIB, 2.0 * MIB, 10.0, false, 4.0 * MIB);
    assert!(!unclocked.cycles[0].gc_clock);
}

#[test]
fn a_gc_s_moment_is_between_the_captures_that_read_the_count_before_and_after_it() {
    let captures = [
        (0.0, Some(0)),
        (1.0, Some(0)),
        (1.5, Some(1)),
        (3.0, Some(2)),
    ];
    assert_eq!(gc_moment(&captures, 1), Some(1.25));
    assert_eq!(gc_moment(&captures, 2), Some(2.25));
    assert_eq!(gc_moment(&captures, 3), None);
    assert_eq!(gc_moment(&[(0.5, None), (1.0, Some(1))], 1), Some(1.0));
}

#[test]
fn gcs_that_ran_unseen_between_two_captures_are_spread_over_the_gap() {
    assert_eq!(spread((0.0, 2), (1.0, 3), 3), 0.5);
    assert!((spread((0.0, 2), (1.0, 4), 3) - 1.0 / 3.0).abs() < 1e-9);
    assert!((spread((0.0, 2), (1.0, 4), 4) - 2.0 / 3.0).abs() < 1e-9);
}

/// A container's life under `watch` (recorded 2026-12-07): killed 3 s in, its profile
/// published at GC counts 2 (the first capture), 4 (at 1.0 s) and 5 (at 2.5 s). Both later
/// publications were put at one moment, a rise in no time that no reading took: "no capture
/// saw the heap rise" for a heap that went from 3.7 to 21.5 MiB.
#[test]
fn a_short_life_published_at_counts_two_four_and_five_reads_its_rise() {
    let shots: [(f64, u32, i64); 9] = [
        (0.0, 2, 3_870_958),
        (1.0, 4, 9_867_094),
        (1.7, 4, 9_867_094),
        (1.9, 4, 9_867_094),
        (2.1, 4, 9_867_094),
        (2.3, 4, 9_867_094),
        (2.5, 5, 22_525_605),
        (2.7, 5, 22_525_605),
        (2.9, 5, 22_525_605),
    ];
    let mut records = Vec::new();
    for (k, &(t, gc, inuse)) in shots.iter().enumerate() {
        let mut r = CaptureRecord::new(k as u64 + 1, RecordKind::Heap, 1, (t * 1000.0) as i64);
        r.totals.insert("inuse_space".into(), inuse);
        r.totals.insert("recent_space".into(), 5 << 20);
        r.gc = Some(crate::model::capture::GcClock {
            num_gc: gc,
            profile_cycle: Some(gc),
        });
        records.push(r);
    }
    let mut builder = GrowthBuilder::default().captures(&records);
    for r in &records {
        let value = r.totals["inuse_space"];
        builder.heap(
            r,
            &[SiteFigures {
                name: "main.grow".into(),
                value,
                alloc: value,
            }],
        );
    }
    let report = builder.finish(&records, &[], None);
    let c = &report.cycles[0];
    let reading = c.reading.as_ref().expect("the rise is read");
    assert_eq!(c.sites.first().map(|s| s.name.as_str()), Some("main.grow"));
    assert!(reading.bytes_per_sec > 10.0 * MIB, "{reading:?}");
}

/// etcd under `--also`: its third life was OOM-killed in its start-up replay before its HTTP
/// endpoint opened. The manifest held its exit record (`oom_kill` 1) and six failed attempts
/// tagged with the life before (the collector learns of a restart when the new process
/// answers); growth said "2 OOM-killed" and `check kills>2` passed.
#[test]
fn a_life_known_only_by_its_exit_is_a_life_and_the_attempts_after_a_death_are_the_next_lives() {
    let mut builder = GrowthBuilder::default();
    let mut records = Vec::new();
    let exit = CaptureRecord::oom_exit;
    for k in 0..8u64 {
        let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, k as i64 * 100);
        let value = ((k + 1) * (8 << 20)) as i64;
        r.totals.insert("inuse_space".into(), value);
        builder.heap(
            &r,
            &[SiteFigures {
                name: "main.grow".into(),
                value,
                alloc: value,
            }],
        );
        records.push(r);
    }
    records.push(exit(9, 1, 750, 900));
    // Refused, then timed out, while the next process replays: tagged with life 1.
    for (k, t) in [800, 1_300, 1_800].into_iter().enumerate() {
        let mut failed = CaptureRecord::new(10 + k as u64, RecordKind::Heap, 1, t);
        failed.error = Some("connection refused".into());
        records.push(failed);
    }
    records.push(exit(13, 2, 2_200, 1_400));
    let report = builder.finish(&records, &[], Some(256 << 20));
    assert_eq!(report.cycles.len(), 2, "{:?}", report.cycles);
    let second = &report.cycles[1];
    assert_eq!(second.end, CycleEnd::OomKilled);
    assert!(second.killed);
    assert_eq!((second.captures, second.errors), (0, 3));
    assert_eq!(second.died_after_s, Some(1.4));
    assert_eq!(report.cycles[0].errors, 0);
    assert_eq!(report.across.died, 2);
}
