//! The rules against hand-made findings: units, directions, the worst cycle, unknowns, Envoy.
use super::*;
use crate::analyse::growth::{AcrossCycles, SiteGrowth};

const MIB: f64 = 1024.0 * 1024.0;

pub(crate) fn cycle(index: u32, growth_mib: f64, killed_at: Option<f64>) -> CycleGrowth {
    CycleGrowth {
        index,
        build: "test".into(),
        breakdown: None,
        at_limit: None,
        stuck: None,
        memory_peak_anon: None,
        peaks: Default::default(),
        episode: None,
        other_episodes: vec![],
        heap_sustained: false,
        reading: (growth_mib > 0.0).then(|| crate::analyse::reading::Reading {
            onset_s: 0.0,
            end_s: 7.0,
            from_bytes: 0,
            to_bytes: (growth_mib * MIB * 7.0) as i64,
            bytes_per_sec: growth_mib * MIB,
            fit_r2: 1.0,
            points: 10,
            ongoing: true,
            held_s: None,
            last_bytes: (growth_mib * MIB * 7.0) as i64,
            sites: vec![crate::analyse::reading::RiseSite {
                name: "main.leak".into(),
                before: 0,
                after: (growth_mib * MIB * 7.0) as i64,
                share: 1.0,
                bytes_per_sec: growth_mib * MIB,
            }],
            onset_seq: None,
            end_seq: None,
            from_seq: None,
            to_seq: None,
            forecast: None,
            cause: None,
            into_death: None,
        }),
        interval_s: None,
        build_info: None,
        pid: None,
        captures: 10,
        stored: 10,
        duplicates: 0,
        errors: 0,
        start_ms: 0,
        span_s: 7.0,
        died_after_s: killed_at,
        end: if killed_at.is_some() {
            crate::analyse::ends::CycleEnd::OomKilled
        } else {
            crate::analyse::ends::CycleEnd::StillAnswering
        },
        killed: killed_at.is_some(),
        gc_clock: false,
        kill_seen_s: None,
        oom_held_ms: None,
        oom_held_below_bytes: None,
        unpublished: None,
        heap_first: Some(0),
        heap_last: Some(1),
        total_bytes_per_sec: Some(growth_mib * MIB),
        total_fit_r2: Some(1.0),
        memory_bytes_per_sec: None,
        memory_peak: Some(200 << 20),
        memory_from_s: None,
        limit_at_s: Some(9.0),
        sites: vec![SiteGrowth {
            name: "main.leak".into(),
            bytes_per_sec: growth_mib * MIB,
            fit_r2: 1.0,
            inuse_first: 0,
            inuse_last: 1,
            onset_s: None,
            share: 1.0,
        }],
        alloc_storms: vec![],
        goroutine_growth: vec![],
        profiling: None,
        memstats: None,
        runtime: None,
    }
}

fn report(cycles: Vec<CycleGrowth>) -> GrowthReport {
    GrowthReport {
        schema: 1,
        limit_bytes: Some(256 << 20),
        own: None,
        across: AcrossCycles {
            cycles: cycles.len(),
            died: 0,
            same_top_site: None,
            ages_s: vec![],
            crash_loop: None,
        },
        cycles,
    }
}

fn check(text: &str, growth: &GrowthReport, ratio: Option<&HeapRatio>) -> Outcome {
    let findings = Findings {
        growth,
        peak_heap: &[(1, 100 << 20)],
        comparison: None,
        heap_ratio: ratio,
        envoy: None,
    };
    evaluate(&parse(text).unwrap(), &findings)
}

#[test]
fn rules_parse_with_units_and_refuse_the_wrong_direction() {
    let r = parse("growth > 5MiB/s").unwrap();
    assert_eq!(
        (r.metric, r.bar, r.text.as_str()),
        (Metric::Growth, 5.0 * MIB, "growth>5MiB/s")
    );
    assert_eq!(parse("time-to-limit<60s").unwrap().bar, 60.0);
    assert_eq!(parse("time-to-limit<2m").unwrap().bar, 120.0);
    assert_eq!(parse("regression>1.5x").unwrap().bar, 1.5);
    assert_eq!(parse("regression>2").unwrap().bar, 2.0);
    assert_eq!(parse("goroutines>10/s").unwrap().bar, 10.0);
    assert_eq!(parse("kills>0").unwrap().bar, 0.0);
    for bad in [
        "growth<5MiB/s",
        "time-to-limit>60s",
        "growth>=5MiB/s",
        "growth",
        "speed>1",
        "growth>fast",
        "regression>0x",
        "kills>1.5",
        "time-to-limit<soon",
    ] {
        assert!(parse(bad).is_err(), "{bad} should be refused");
    }
    let e = parse("growth<5MiB/s").unwrap_err().to_string();
    assert!(e.contains("growth>5MiB/s"), "{e}");
}

#[test]
fn the_worst_cycle_trips_the_rule_and_is_named() {
    let g = report(vec![cycle(1, 1.0, None), cycle(2, 29.0, Some(7.2))]);
    let o = check("growth>5MiB/s", &g, None);
    assert_eq!(o.status, Status::Fail);
    assert_eq!(o.cycle, Some(2));
    assert!(
        matches!(&o.evidence, Evidence::HeapGrows { top: Some(t), end: GrowthEnd::OomKilled { .. }, .. } if t.name == "main.leak"),
        "{o:?}"
    );
    assert_eq!(check("growth>50MiB/s", &g, None).status, Status::Pass);

    let o = check("time-to-limit<60s", &g, None);
    assert_eq!(o.status, Status::Fail);
    assert_eq!(o.measured, Some(7.2));
    assert!(matches!(o.evidence, Evidence::OomKilled { .. }), "{o:?}");
    assert_eq!(check("time-to-limit<5s", &g, None).status, Status::Pass);
    assert_eq!(check("kills>0", &g, None).status, Status::Fail);
    assert_eq!(check("restarts>1", &g, None).status, Status::Pass);
    assert_eq!(check("heap>64MiB", &g, None).status, Status::Fail);
    assert_eq!(check("memory>256MiB", &g, None).status, Status::Pass);
}

/// NATS under a flood (issue 33, item 13): a rise seen between two publications is a chord,
/// no fitted rate. It trips nothing alone: above the bar where no fitted rate is, the rule is
/// not judged (unknown, the chord's figures its evidence); a fitted rate above the bar still
/// trips it; a chord below the bar clears nothing it would not.
#[test]
fn a_chord_is_no_fitted_rate_and_trips_the_growth_rule_nowhere_alone() {
    let chord = |index: u32, mib: f64| {
        let mut c = cycle(index, mib, Some(3.9));
        if let Some(r) = c.reading.as_mut() {
            r.points = 2;
        }
        c
    };
    let o = check("growth>5MiB/s", &report(vec![chord(1, 247.0)]), None);
    assert_eq!(o.status, Status::Unknown, "{o:?}");
    assert_eq!(o.measured, None);
    assert_eq!(o.cycle, Some(1));
    assert!(
        matches!(o.evidence, Evidence::HeapGrows { points: 2, .. }),
        "{o:?}"
    );
    // Beside a fitted rate under the bar: still not judged.
    let o = check(
        "growth>5MiB/s",
        &report(vec![cycle(1, 1.0, None), chord(2, 247.0)]),
        None,
    );
    assert_eq!((o.status, o.cycle), (Status::Unknown, Some(2)), "{o:?}");
    // A fitted rate over the bar trips it, whatever a chord says.
    let o = check(
        "growth>5MiB/s",
        &report(vec![cycle(1, 29.0, None), chord(2, 247.0)]),
        None,
    );
    assert_eq!((o.status, o.cycle), (Status::Fail, Some(1)), "{o:?}");
    assert_eq!(o.measured, Some(29.0 * MIB));
    // Under the bar, a chord does not trip: the rule passes on what was judged.
    let o = check(
        "growth>5MiB/s",
        &report(vec![cycle(1, 2.0, None), chord(2, 3.0)]),
        None,
    );
    assert_eq!((o.status, o.cycle), (Status::Pass, Some(1)), "{o:?}");
    assert_eq!(
        check("growth>5MiB/s", &report(vec![chord(1, 3.0)]), None).status,
        Status::Pass
    );
}

#[test]
fn a_rule_without_its_figures_is_unknown_not_passed() {
    let mut g = report(vec![cycle(1, 1.0, None)]);
    g.limit_bytes = None;
    assert_eq!(check("time-to-limit<60s", &g, None).status, Status::Unknown);
    assert_eq!(check("regression>1.5x", &g, None).status, Status::Unknown);
    let ratio = HeapRatio {
        age_s: 7.0,
        baseline_bytes: 30 << 20,
        bytes: 136 << 20,
        a_cycle: 1,
        b_cycle: 1,
    };
    let o = check("regression>1.5x", &g, Some(&ratio));
    assert_eq!(o.status, Status::Fail);
    assert_eq!(o.value(), Some(4.533));
    assert_eq!(
        check("regression>5x", &g, Some(&ratio)).status,
        Status::Pass
    );
}

fn envoy_report(memory: &[&str], limit: Option<u64>) -> EnvoyReport {
    use crate::analyse::envoy::{self, EnvoyLimits};
    use crate::model::envoy::{EnvoyMemory, EnvoySnapshot, EnvoyStats, HeapDumpState};
    let snapshots: Vec<EnvoySnapshot> = memory
        .iter()
        .enumerate()
        .map(|(i, m)| EnvoySnapshot {
            t_ms: i as i64 * 10_000,
            memory: Some(EnvoyMemory::parse(m.as_bytes()).unwrap()),
            stats: EnvoyStats::default(),
        })
        .collect();
    let limits = EnvoyLimits {
        memory_bytes: limit,
        cpu_cores: None,
    };
    envoy::analyse(&snapshots, &limits, HeapDumpState::NotAsked)
}

fn check_envoy(text: &str, growth: &GrowthReport, e: &EnvoyReport) -> Outcome {
    let findings = Findings {
        growth,
        peak_heap: &[],
        comparison: None,
        heap_ratio: None,
        envoy: Some(e),
    };
    evaluate(&parse(text).unwrap(), &findings)
}

#[test]
fn live_share_parses_as_a_share_below_a_bar() {
    assert_eq!(parse("live-share<0.6").unwrap().bar, 0.6);
    assert_eq!(parse("live-share < 60%").unwrap().bar, 0.6);
    for bad in [
        "live-share>0.6",
        "live-share<0",
        "live-share<1.5",
        "live-share<most",
    ] {
        assert!(parse(bad).is_err(), "{bad} should be refused");
    }
}

#[test]
fn live_share_trips_when_memory_held_dominates() {
    let held = envoy_report(
        &[
            r#"{"allocated":"69132952","heap_size":"11276386304","pageheap_unmapped":"3571712",
               "pageheap_free":"11155046400","total_thread_cache":"24026688"}"#,
        ],
        None,
    );
    let live = envoy_report(
        &[
            r#"{"allocated":"2793932032","heap_size":"4162846720","pageheap_unmapped":"1109401600",
               "pageheap_free":"4145152","total_thread_cache":"22500080"}"#,
        ],
        None,
    );
    let g = report(vec![]);
    let o = check_envoy("live-share<0.6", &g, &held);
    assert_eq!(o.status, Status::Fail, "{o:?}");
    assert_eq!(o.value(), Some(0.006));
    assert!(
        matches!(o.evidence, Evidence::EnvoyLiveShare { .. }),
        "{o:?}"
    );
    let o = check_envoy("live-share<0.6", &g, &live);
    assert_eq!((o.status, o.value()), (Status::Pass, Some(0.915)));
    // Without Envoy or MemStats figures there is nothing to look at.
    let o = check("live-share<0.6", &report(vec![cycle(1, 1.0, None)]), None);
    assert_eq!(o.status, Status::Unknown);
}

#[test]
fn envoy_growth_counts_for_the_growth_and_time_to_limit_rules() {
    const M: u64 = 1 << 20;
    let series: Vec<String> = (0..12u64)
        .map(|i| {
            let p = 700 * M + i * 10 * M;
            format!(
                r#"{{"allocated":"{}","heap_size":"{}","total_physical_bytes":"{p}"}}"#,
                p - 60 * M,
                p + 200 * M
            )
        })
        .collect();
    let refs: Vec<&str> = series.iter().map(String::as_str).collect();
    let e = envoy_report(&refs, Some(1 << 30));
    let mut g = report(vec![]);
    g.limit_bytes = None;
    let o = check_envoy("growth>512KiB/s", &g, &e);
    assert_eq!(o.status, Status::Fail);
    assert_eq!(o.value(), Some(MIB));
    assert!(
        matches!(&o.evidence, Evidence::EnvoyGrowth { series, growing: true, .. } if series == "total_physical_bytes"),
        "{o:?}"
    );
    // 110 s of snapshots, then 214 MiB to go at 1 MiB/s.
    let o = check_envoy("time-to-limit<10m", &g, &e);
    assert_eq!(o.status, Status::Fail, "{o:?}");
    assert_eq!(o.value(), Some(324.0));
    assert_eq!(check_envoy("time-to-limit<2m", &g, &e).status, Status::Pass);
}

#[test]
fn live_share_without_figures_is_unknown() {
    let g = report(vec![cycle(1, 1.0, None)]);
    let o = check("live-share<50%", &g, None);
    assert_eq!(o.status, Status::Unknown);
    assert!(
        matches!(o.evidence, Evidence::Missing(Missing::NoLiveShare)),
        "{o:?}"
    );
}

#[test]
fn a_storm_site_holding_the_rise_is_not_called_in_use_flat() {
    // storeRawMsg both allocates in a storm and holds the rise (the nats flood).
    let mut c = cycle(1, 20.0, Some(7.0));
    c.alloc_storms = vec![crate::analyse::growth::AllocStorm {
        name: "main.store".into(),
        bytes_per_sec: 30.0 * MIB,
        typical_bytes_per_sec: 1.0 * MIB,
        peak_bytes_per_sec: 300.0 * MIB,
        windows: vec![],
        inuse_flat: true,
    }];
    let rise = crate::analyse::reading::RiseSite {
        name: "main.store".into(),
        before: 0,
        after: (140.0 * MIB) as i64,
        share: 0.0,
        bytes_per_sec: 0.0,
    };
    c.set_rise_sites(vec![rise], 1, 9);
    assert_eq!(c.sites[0].name, "main.store");
    assert!(!c.alloc_storms[0].inuse_flat, "{:?}", c.alloc_storms);
}
