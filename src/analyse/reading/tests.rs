//! The reading on series recorded from real runs and shaped ones.
use super::*;

const MIB: f64 = 1024.0 * 1024.0;

fn input<'a>(heap: &'a [(f64, f64)], grid: &'a SeriesGrid) -> ReadingInput<'a> {
    ReadingInput {
        heap,
        seqs: &[],
        sites: grid,
        memory: &[],
        memory_of: "cgroup memory",
        limit: Some(256 << 20),
        died_s: None,
        at_limit: false,
        allocated: &[],
    }
}

/// Whether `heap` reads as a rise still going, with `memory` beside it.
fn ongoing_with(heap: &[(f64, f64)], memory: &[(f64, f64)], at_limit: bool) -> bool {
    let grid = SeriesGrid::default();
    read(&ReadingInput {
        memory,
        at_limit,
        ..input(heap, &grid)
    })
    .unwrap()
    .ongoing
}

fn series(f: impl Fn(f64) -> f64, until: f64) -> Vec<(f64, f64)> {
    (0..)
        .map(|i| i as f64 * 0.5)
        .take_while(|&t| t <= until)
        .map(|t| (t, f(t)))
        .collect()
}

/// A quiet heap publishes nothing: a flood at 6.04 s after an idle start with no GC read
/// "from 0.0 s" at 5.25 MiB/s (the last flat publication was the start's; a real `run` of
/// `flood -idle 6s -base 16MiB -rate 24MiB`). The captures' count of what was allocated
/// (published + recent_space) places the onset where allocation left its trend, and the rate
/// is fitted from there. Without that count, or where allocation never left its trend (a rise
/// made by frees stopping), the onset stays where the publications put it.
#[test]
fn a_quiet_start_s_onset_is_placed_where_allocation_left_its_trend() {
    // The publications of that run, placed by the GC clock, and every capture's count of
    // what was allocated (each 0.2 s; flat through the idle start, no GC ran).
    let heap = [(0.0, 17256682.0), (6.542, 31247667.0), (7.7505, 59895876.0)];
    let mut allocated: Vec<(f64, f64)> =
        (0..=30).map(|k| (k as f64 * 0.2016, 17256681.0)).collect();
    allocated.extend([
        (6.24, 23919054.0),
        (6.441, 26584004.0),
        (6.643, 31913904.0),
        (6.844, 36577566.0),
        (7.045, 40574991.0),
        (7.247, 45904890.0),
        (7.448, 53233502.0),
        (7.65, 57897164.0),
        (7.851, 63227063.0),
        (8.052, 69889437.0),
    ]);
    let grid = SeriesGrid::default();
    let without = read(&input(&heap, &grid)).unwrap();
    assert_eq!(without.onset_s, 0.0);
    let r = read(&ReadingInput {
        allocated: &allocated,
        ..input(&heap, &grid)
    })
    .unwrap();
    assert!((6.0..=6.05).contains(&r.onset_s), "onset {}", r.onset_s);
    let rate = r.bytes_per_sec / MIB;
    assert!((20.0..=28.0).contains(&rate), "rate {rate} MiB/s, {r:?}");
    assert!(rate > 2.0 * without.bytes_per_sec / MIB, "{without:?}");

    // Allocation on its trend all along: frees stopped, nothing to place it by.
    let steady: Vec<(f64, f64)> = (0..40)
        .map(|k| (k as f64 * 0.2, 17.0 * MIB + 6.0 * MIB * k as f64 * 0.2))
        .collect();
    let r = read(&ReadingInput {
        allocated: &steady,
        ..input(&heap, &grid)
    })
    .unwrap();
    assert_eq!(r.onset_s, without.onset_s);
}

#[test]
fn an_idle_start_then_a_flood_is_rated_from_its_onset() {
    // Idle at 4 MiB for 20 s, then 20 MiB/s for 7 s.
    let heap = series(
        |t| {
            4.0 * MIB
                + if t > 20.0 {
                    20.0 * MIB * (t - 20.0)
                } else {
                    0.0
                }
        },
        27.0,
    );
    let grid = SeriesGrid::default();
    let r = read(&ReadingInput {
        died_s: Some(27.2),
        ..input(&heap, &grid)
    })
    .unwrap();
    assert_eq!(r.onset_s, 20.0);
    assert_eq!(r.end_s, 27.0);
    assert!((r.bytes_per_sec - 20.0 * MIB).abs() < 0.01 * MIB, "{r:?}");
    assert!(r.ongoing);
    assert_eq!(r.forecast, None, "it died: no forecast");
}

/// A bounded cache recorded under `heapwatch run` (flood -idle 3s -rate 30MiB -cap 48MiB):
/// one GC cycle every 1.6 s, so the heap's plateau shows in three publications before
/// the run ends, while its cgroup memory, sampled every 50 ms, held for 5 s.
fn seldom_published_plateau() -> Vec<(f64, f64)> {
    [
        (0.0, 6101799.0),
        (3.421, 12236923.0),
        (4.023, 28411339.0),
        (4.827, 55740525.0),
        (6.436, 57971479.0),
        (8.043, 55740525.0),
        (9.654, 57971479.0),
    ]
    .to_vec()
}

/// Cgroup memory as sampled every 50 ms to `until` s: flat at `idle` MiB to `from` s, a ramp
/// to `top` MiB at `to` s, then what the caller gives.
struct Ramp {
    until: f64,
    idle: f64,
    from: f64,
    top: f64,
    to: f64,
}

/// The bounded cache's fill: flat at 4 MiB to 3 s, a ramp to 101 MiB at 7 s, to 12 s.
const FILL: Ramp = Ramp {
    until: 12.0,
    idle: 4.0,
    from: 3.0,
    top: 101.0,
    to: 7.0,
};

fn memory(ramp: Ramp, after: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
    (1..)
        .map(|i| i as f64 * 0.05)
        .take_while(|&t| t <= ramp.until)
        .map(|t| {
            let v = match t {
                t if t < ramp.from => ramp.idle * MIB,
                t if t < ramp.to => {
                    (ramp.idle + (ramp.top - ramp.idle) * (t - ramp.from) / (ramp.to - ramp.from))
                        * MIB
                }
                t => after(t),
            };
            (t, v)
        })
        .collect()
}

#[test]
fn a_plateau_published_seldom_is_held_when_the_memory_held() {
    let heap = seldom_published_plateau();
    let grid = SeriesGrid::default();
    let flat = memory(FILL, |t| 101.0 * MIB + 0.1 * MIB * (t - 7.0));
    let r = read(&ReadingInput {
        memory: &flat,
        died_s: Some(12.0),
        ..input(&heap, &grid)
    })
    .unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert_eq!(r.end_s, 4.827);
    assert_eq!(r.rate_now(), 0.0);

    // The same publications without the memory's word are too few to call it held.
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(r.ongoing, "{r:?}");

    // Memory still climbing: the heap's few flat figures do not make it a plateau.
    let climbing = memory(FILL, |t| 101.0 * MIB + 8.0 * MIB * (t - 7.0));
    assert!(ongoing_with(&heap, &climbing, false));

    // Flat because it reached its limit: no plateau.
    assert!(ongoing_with(&heap, &flat, true));
}

/// The bounded cache of a CI run: its published heap wobbled 53–63 MiB after the fill
/// (garbage not yet swept counts as in use), four figures that fit a rise of ~2 MiB/s,
/// while the cgroup's memory held.
#[test]
fn a_plateau_whose_few_figures_wobble_upward_is_held_when_the_memory_held() {
    let heap: Vec<(f64, f64)> = [
        (0.0, 5.3),
        (3.219, 11.0),
        (4.02, 30.0),
        (4.82, 53.0),
        (6.43, 55.5),
        (8.05, 63.3),
        (9.66, 60.5),
    ]
    .iter()
    .map(|&(t, m)| (t, m * MIB))
    .collect();
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(r.ongoing, "without the memory, a rise: {r:?}");
    let flat = memory(FILL, |t| 101.0 * MIB + 0.1 * MIB * (t - 7.0));
    assert!(!ongoing_with(&heap, &flat, false));
    let climbing = memory(FILL, |t| 101.0 * MIB + 8.0 * MIB * (t - 7.0));
    assert!(ongoing_with(&heap, &climbing, false));
}

#[test]
fn an_idle_start_that_published_nothing_does_not_dilute_the_rate() {
    // One figure at 0 s, none during 3 s of idle (no GC), then 30 MiB/s every 0.2 s: too
    // few figures for two segments to be fitted.
    let mut heap = vec![(0.0, 4.0 * MIB)];
    heap.extend((0..5).map(|i| {
        let t = 3.2 + i as f64 * 0.2;
        (t, 4.0 * MIB + 30.0 * MIB * (t - 3.0))
    }));
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!((r.bytes_per_sec - 30.0 * MIB).abs() < 0.5 * MIB, "{r:?}");
    assert!((r.onset_s - 3.0).abs() < 0.05, "{r:?}");
    assert_eq!(r.from_bytes, (4.0 * MIB) as i64);
}

#[test]
fn a_cache_that_fills_and_holds_is_not_going_and_has_no_forecast() {
    let heap = series(|t| (4.0 + 10.0 * t.min(6.0)) * MIB, 40.0);
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(!r.ongoing, "{r:?}");
    // Near its top (within a fifth of the rise) from 5.0 s.
    assert!((r.end_s - 5.0).abs() < 0.6, "{r:?}");
    assert!((r.held_s.unwrap() - 35.0).abs() < 0.6);
    assert!((r.bytes_per_sec - 10.0 * MIB).abs() < 0.1 * MIB, "{r:?}");
    assert_eq!(r.forecast, None);
    assert_eq!(r.rate_now(), 0.0);
}

#[test]
fn a_noisy_plateau_ends_where_it_was_reached() {
    // 30 MiB/s to 48 MiB, then ±15 % of sampling noise with a late spike.
    let heap: Vec<(f64, f64)> = series(
        |t| {
            let base = (4.0 + 30.0 * t).min(48.0);
            let wobble = if (t * 2.0) as i64 % 3 == 0 {
                1.15
            } else {
                0.95
            };
            (if t > 2.0 { base * wobble } else { base }) * MIB
        },
        14.0,
    );
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert!(r.end_s < 3.0, "{r:?}");
    assert_eq!(r.forecast, None);
}

#[test]
fn a_gomemlimit_plateau_that_wobbles_to_its_highest_late_held() {
    // The in-use heap (MiB) of testdata/go/cmd/flood -cap 40MiB -storm-rate 200MiB under
    // GOMEMLIMIT=96MiB, as captured: full by 2.8 s, then ±8 MiB with the GC's timing.
    let mib = [
        1, 3, 10, 16, 21, 24, 30, 35, 40, 46, 43, 43, 45, 42, 43, 35, 34, 33, 38, 39, 41, 42, 42,
        45, 47, 41, 41, 39, 40, 40, 37, 37, 35, 35, 37, 38, 39, 41, 42, 43, 43, 47, 49, 47, 47, 48,
        48, 47, 48, 53, 51, 50, 47, 44, 41, 43, 42, 41, 40, 42, 41, 46, 43, 47, 44, 50,
    ];
    let heap: Vec<(f64, f64)> = mib
        .iter()
        .enumerate()
        .map(|(i, &m)| (i as f64 * 0.2, m as f64 * MIB))
        .collect();
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert!(r.end_s < 3.0, "{r:?}");
    assert_eq!(r.forecast, None);
}

#[test]
fn growth_still_going_is_forecast_with_its_range() {
    let heap = series(|t| (4.0 + 2.0 * t) * MIB, 30.0);
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(r.ongoing);
    let f = r.forecast.expect("a forecast");
    // (256 - 4) / 2 = 126 s.
    assert!((f.at_s - 126.0).abs() < 1.0, "{f:?}");
    assert!(f.earliest_s <= f.at_s && f.at_s <= f.latest_s);
    assert_eq!(f.of, "in-use heap");
}

#[test]
fn a_flat_heap_has_no_reading() {
    let heap = series(|_| 40.0 * MIB, 30.0);
    let grid = SeriesGrid::default();
    assert_eq!(read(&input(&heap, &grid)), None);
}

/// The in-use heap (MiB) of a CI-like run of flood -cap 40MiB -storm-rate 200MiB under
/// GOMEMLIMIT=96MiB with the machine busy: full by 2.4 s, then 35–45 MiB with the GC's
/// timing, and a last stretch of publications that climbs to its highest figure.
fn gomemlimit_late_climb() -> Vec<(f64, f64)> {
    [
        (0.0, 5.3),
        (1.206, 9.0),
        (1.408, 15.4),
        (1.608, 20.1),
        (1.809, 26.9),
        (2.01, 32.2),
        (2.212, 35.3),
        (2.413, 41.2),
        (2.614, 40.5),
        (2.815, 43.2),
        (3.016, 42.6),
        (3.217, 44.8),
        (3.419, 43.6),
        (3.62, 40.4),
        (3.82, 41.0),
        (4.022, 42.1),
        (4.223, 42.6),
        (4.423, 43.2),
        (4.624, 44.8),
        (4.826, 42.7),
        (5.027, 42.0),
        (5.227, 39.5),
        (5.428, 36.1),
        (5.63, 37.8),
        (5.831, 36.2),
        (6.032, 35.7),
        (6.233, 36.2),
        (6.434, 36.2),
        (6.636, 36.7),
        (6.837, 34.5),
        (7.037, 39.3),
        (7.241, 37.2),
        (7.443, 36.7),
        (7.644, 40.1),
        (7.845, 41.6),
        (8.046, 39.4),
        (8.248, 39.3),
        (8.449, 37.9),
        (8.651, 38.3),
        (8.851, 40.6),
        (9.053, 37.2),
        (9.254, 37.7),
        (9.456, 42.5),
        (9.657, 38.8),
        (9.858, 37.4),
        (10.059, 36.6),
        (10.26, 38.8),
        (10.461, 39.5),
        (10.662, 36.7),
        (10.863, 38.5),
        (11.064, 35.6),
        (11.265, 37.2),
        (11.466, 35.6),
        (11.667, 36.0),
        (11.868, 35.6),
        (12.069, 37.8),
        (12.27, 36.8),
        (12.472, 40.7),
        (12.673, 40.4),
        (12.875, 44.6),
        (13.076, 46.3),
        (13.277, 49.4),
        (13.478, 48.4),
        (13.679, 54.8),
    ]
    .iter()
    .map(|&(t, m)| (t, m * MIB))
    .collect()
}

/// That run's cgroup memory: 3.2 MiB to 1 s, a ramp to 87.2 MiB at 2.7 s, to 13.85 s.
const GOMEMLIMIT_FILL: Ramp = Ramp {
    until: 13.85,
    idle: 3.2,
    from: 1.0,
    top: 87.2,
    to: 2.7,
};

/// A spike of 1.5 MiB every 2 s, as that run's memory showed.
fn spikes(t: f64) -> f64 {
    if (t / 0.05).round() as i64 % 40 == 0 {
        1.5 * MIB
    } else {
        0.0
    }
}

#[test]
fn a_late_climb_the_memory_never_saw_ends_no_plateau() {
    let heap = gomemlimit_late_climb();
    let grid = SeriesGrid::default();
    // From the heap alone the last publications are the highest: a rise into the end.
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(r.ongoing, "{r:?}");
    // The memory held at 87–89 MiB from 2.7 s on: the rise ended when it settled.
    let flat = memory(GOMEMLIMIT_FILL, |t| {
        87.2 * MIB + 0.12 * MIB * (t - 2.7) + spikes(t)
    });
    let r = read(&ReadingInput {
        memory: &flat,
        ..input(&heap, &grid)
    })
    .unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert!(r.end_s < 3.0 && r.held_s.unwrap() > 10.0, "{r:?}");
    assert_eq!(r.forecast, None);
    // At its limit the memory cannot move: that says nothing.
    assert!(ongoing_with(&heap, &flat, true));
    // The memory still climbing at the end: the climb is growth.
    let climbing = memory(GOMEMLIMIT_FILL, |t| {
        87.2 * MIB + 6.0 * MIB * (t - 2.7) + spikes(t)
    });
    assert!(ongoing_with(&heap, &climbing, false));
}

#[test]
fn a_leak_eating_the_gc_headroom_under_flat_memory_goes_on() {
    // Full at 40 MiB by 2.4 s, then a leak of 2 MiB/s in 40 publications: under GOMEMLIMIT
    // the GC runs harder and the memory stays flat, but the heap's own trend is growth.
    let mut heap: Vec<(f64, f64)> = (0..=12)
        .map(|i| (i as f64 * 0.2, (5.0 + 35.0 * i as f64 / 12.0) * MIB))
        .collect();
    heap.extend((1..=56).map(|i| {
        let t = 2.4 + i as f64 * 0.2;
        let wobble = if i % 3 == 0 { 2.0 } else { -1.0 };
        (t, (40.0 + 2.0 * (t - 2.4) + wobble) * MIB)
    }));
    let flat = memory(GOMEMLIMIT_FILL, |t| {
        87.2 * MIB + 0.12 * MIB * (t - 2.7) + spikes(t)
    });
    assert!(ongoing_with(&heap, &flat, false));
}

/// The in-use heap (MiB) of testdata/go/cmd/steady (-working-set 8MiB -rate 4MiB) collected
/// over HTTP every 200 ms for 40 s and stopped with Ctrl-C: a wobble of 9.5–11.6 MiB, and
/// its highest figure published last.
fn steady_with_a_last_wobble() -> Vec<(f64, f64)> {
    [
        (0.0, 7.95),
        (0.202, 9.54),
        (1.008, 10.99),
        (1.813, 9.54),
        (2.617, 10.75),
        (3.422, 11.06),
        (5.027, 11.56),
        (6.629, 10.42),
        (8.231, 11.06),
        (9.835, 10.42),
        (11.44, 10.42),
        (12.241, 9.54),
        (13.844, 9.54),
        (15.447, 10.42),
        (17.049, 10.11),
        (17.85, 9.54),
        (19.452, 9.54),
        (21.056, 10.75),
        (22.658, 11.06),
        (24.266, 10.99),
        (25.067, 9.54),
        (26.669, 10.96),
        (27.47, 9.54),
        (29.072, 9.54),
        (29.873, 9.54),
        (31.475, 10.11),
        (33.077, 11.06),
        (34.68, 10.42),
        (36.282, 10.42),
        (37.083, 9.54),
        (38.685, 12.66),
    ]
    .iter()
    .map(|&(t, m)| (t, m * MIB))
    .collect()
}

#[test]
fn a_steady_heap_whose_last_figure_is_its_highest_is_not_growing() {
    let heap = steady_with_a_last_wobble();
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert_eq!(r.rate_now(), 0.0);
    assert_eq!(
        r.last_bytes,
        (12.66 * MIB) as i64,
        "the last figure is kept"
    );
    // Two figures at the top are more than a wobble falling last.
    let mut two = heap.clone();
    two.push((39.487, 12.9 * MIB));
    assert!(read(&input(&two, &grid)).unwrap().ongoing);
    // A cycle that died rose into its death, however few its figures at the top.
    let r = read(&ReadingInput {
        died_s: Some(38.9),
        ..input(&heap, &grid)
    })
    .unwrap();
    assert!(r.ongoing, "{r:?}");
}

#[test]
fn a_jump_past_the_wobble_in_the_last_figure_is_a_rise() {
    // The same steady heap, and a last figure three times its level: no wobble.
    let mut heap = steady_with_a_last_wobble();
    heap.last_mut().unwrap().1 = 33.0 * MIB;
    let grid = SeriesGrid::default();
    assert!(read(&input(&heap, &grid)).unwrap().ongoing);
}

#[test]
fn a_rise_that_fell_back_is_not_going_on() {
    // testdata/go/cmd/steady collected for 40 s: a wobble of 10.6–12.2 MiB rose to 13.2 MiB
    // at 36.5 s, and its last two figures fell back to 10.6 MiB.
    let heap: Vec<(f64, f64)> = [
        (0.0, 10.11),
        (0.402, 12.09),
        (1.208, 11.27),
        (2.013, 11.52),
        (3.617, 12.02),
        (5.22, 10.64),
        (6.822, 10.64),
        (8.425, 11.52),
        (10.027, 12.09),
        (11.63, 12.15),
        (13.232, 10.64),
        (13.836, 11.27),
        (14.639, 10.64),
        (15.644, 11.52),
        (17.246, 10.64),
        (18.848, 11.14),
        (19.65, 10.64),
        (21.252, 11.52),
        (22.053, 10.64),
        (23.655, 11.17),
        (24.456, 10.64),
        (26.059, 10.64),
        (27.662, 10.64),
        (28.463, 10.64),
        (30.066, 10.64),
        (31.667, 10.64),
        (33.269, 12.05),
        (34.873, 12.58),
        (36.475, 13.23),
        (37.276, 10.64),
        (38.879, 10.64),
    ]
    .iter()
    .map(|&(t, m)| (t, m * MIB))
    .collect();
    let grid = SeriesGrid::default();
    let r = read(&input(&heap, &grid)).unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert_eq!(r.rate_now(), 0.0);
    assert_eq!(r.forecast, None);
    // Without the fall, into a death, the same figures rise into it.
    let r = read(&ReadingInput {
        died_s: Some(36.6),
        ..input(&heap[..heap.len() - 2], &grid)
    })
    .unwrap();
    assert!(r.ongoing, "{r:?}");
}

#[test]
fn a_plateau_after_a_quiet_start_is_measured_against_the_rise_not_the_idle_time() {
    // CI's failing run, as placed (episodes test, `flood -idle 3s -rate 30MiB -cap 48MiB
    // -churn 40MiB -for 12s` under load): no GC while idle, so the onset's figure is the one
    // from the start; the cache filled by 6.4 s and the cgroup's memory held at 101 MiB from
    // 6.5 s to the exit at 12 s, while the heap published three figures about its level.
    let heap = [
        (0.0, 2.7),
        (3.02, 5.9),
        (3.22, 8.0),
        (3.42, 13.3),
        (4.03, 21.8),
        (4.83, 40.4),
        (6.44, 61.2),
        (8.05, 49.5),
        (9.65, 54.2),
    ]
    .map(|(t, v)| (t, v * MIB));
    let memory: Vec<(f64, f64)> = (0..=24)
        .map(|i| i as f64 * 0.5)
        .map(|t| {
            let v = if t < 3.0 {
                3.5
            } else {
                (3.5 + 15.0 * (t - 3.0)).min(101.5)
            };
            (t, v * MIB)
        })
        .collect();
    let grid = SeriesGrid::default();
    let r = read(&ReadingInput {
        memory: &memory,
        died_s: Some(12.0),
        ..input(&heap, &grid)
    })
    .unwrap();
    assert!(!r.ongoing, "{r:?}");
    assert!(r.held_s.is_some_and(|h| h > 3.0), "{r:?}");
}
