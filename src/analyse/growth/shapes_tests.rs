//! The reading against the model of the runtime's publication (issue 33, item 10): made-up
//! lives of many shapes ([`shapes`](super::shapes)), recorded through the model
//! ([`go_runtime`](super::go_runtime)) and read as `heapwatch growth` reads a run, each held
//! to what its generator knows: which site (or caller) leaks, at what rate, from when, and
//! that it still grows at the end. Deterministic: the runner's seed is fixed, and each shape
//! carries the seed of its own sampling, so a shape is the same life every time; the same
//! life read twice gives the same sentence, and recorded twice is the same life.
//!
//! What holds, over [`CASES`] shapes each (20 to 30 s for both in a debug build on two busy
//! cores, 34 s of CPU), shapes that cannot tell their truth set aside by [`bands`]:
//! - Read by the GC clock (`proc:`), GOGC 50, 100 or 400, or 100 under GOMEMLIMIT, storms and
//!   spikes before the culprit's rise: the culprit named (its site, or its caller when it
//!   leaks through several leaves), still growing, its rate and its onset within [`bands`].
//!   A survey of 5,000 more shapes (`survey`, `PROC=1`): 2,263 told their truth, none read
//!   wrong.
//! - The same shapes read without the clock (HTTP, publications placed by estimate): the
//!   culprit named and still growing. The survey: 3 of 2,263 read wrong, rate or onset.
//!
//! What does not hold yet, each with a minimized shape in a `known_minimal_` test and a
//! `known_` property that finds it (ignored; run with `--ignored`); surveys of 5,000 shapes
//! each:
//! - Without the GC clock, the rate and the onset: 3 of 2,263 shapes
//!   (`known_minimal_without_the_clock`: HTTP under GOMEMLIMIT, a leak from the start and
//!   nothing else, read 12.4 MiB/s from 8.6 s for 9.3 MiB/s from 0 s).
//! - A storm or a spike during the culprit's rise (`ANYWHERE=1`): 19 of 1,881. A storm's
//!   buffers allocated while a GC marks are published in use, and the culprit's part of the
//!   rate is its share of the rise at the rise's two ends times the heap's rate, so garbage at
//!   one end takes share from it; a spike near the heap's top reads as the peak
//!   (`known_minimal_a_storm_during_the_rise`: 25.4 MiB/s for 33.9).
//! - GOGC=off under GOMEMLIMIT (`GOGC_OFF=1`): 4 of 1,941. Nothing is published until the
//!   heap reaches the soft limit, and every capture before sums what was allocated, garbage
//!   included (`known_minimal_under_gogc_off`: a storm at the start, read as the start of a
//!   leak that began at 19.3 s).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::go_runtime::{Life, MIB, record};
use super::shapes::{
    Bands, Domain, GcSetting, Leak, Shape, Transients, Truth, bands, describe, process, shape,
};
use super::{CycleGrowth, GrowthBuilder, GrowthReport};
use crate::analyse::cause::common_caller;
use crate::analyse::reduce::OwnCode;
use crate::model::capture::RecordKind;

/// Shapes per property, and the runner's seed. A debug build records and reads a shape twice
/// in about 17 ms; more than half of the shapes drawn are set aside as telling too little (see
/// [`bands`]) and cost a recording each.
const CASES: u32 = 1000;
const SEED: u64 = 33;

/// The shapes of each property: recorded by the GC clock or not, storms and spikes before the
/// rise or anywhere, GOGC=off among the GC settings or not.
const BY_THE_CLOCK: Domain = Domain {
    proc: Some(true),
    transients: Transients::BeforeRise,
    gogc_off: false,
};
const BY_ESTIMATE: Domain = Domain {
    proc: Some(false),
    ..BY_THE_CLOCK
};
const TRANSIENTS_IN_THE_RISE: Domain = Domain {
    transients: Transients::Anywhere,
    ..BY_THE_CLOCK
};
const UNDER_GOGC_OFF: Domain = Domain {
    gogc_off: true,
    ..BY_THE_CLOCK
};

/// The fixed seed reproduces any failure: none is written to `proptest-regressions` (whose
/// cases would run before these, and make their count other than [`CASES`]).
fn config() -> Config {
    Config {
        cases: CASES,
        rng_seed: RngSeed::Fixed(SEED),
        max_global_rejects: 8 * CASES,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Reads a recorded life as `heapwatch growth` reads a run (pipeline/scan.rs): every capture
/// tells the builder when it was taken, each stored one gives its sites as the site index
/// holds them, and the reading's sites and cause are read from the two stored captures at
/// its onset and end.
fn read(life: &Life, limit: Option<u64>) -> GrowthReport {
    let mut builder = GrowthBuilder::default().captures(&life.records);
    for r in life
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap && r.dup_of.is_none())
    {
        builder.heap(r, &life.sites[&r.seq]);
    }
    let mut report = builder.finish(&life.records, &life.memory, limit);
    for c in &mut report.cycles {
        let Some((from, to)) = c
            .reading
            .as_ref()
            .and_then(|r| Some((r.onset_seq?, r.end_seq?)))
        else {
            continue;
        };
        let (Some(before), Some(after)) = (life.sites.get(&from), life.sites.get(&to)) else {
            continue;
        };
        if from != to && c.read_rise_sites((from, before), (to, after)) {
            let growth = crate::pipeline::flamegraphs::stack_growth(
                &life.stacks[&from],
                &life.stacks[&to],
                false,
            );
            c.set_cause(common_caller(&growth.added, &OwnCode::guess()));
        }
    }
    report.across.crash_loop =
        crate::analyse::crash_loop::crash_loop(&report.cycles, &life.records);
    report
}

/// What the reading said of the culprit: the site it names first (or the cause, for a rise
/// spread over leaves), that site's part of the rate, the onset, and whether it still grows.
#[derive(Debug, Clone)]
struct Said {
    name: Option<String>,
    bytes_per_sec: f64,
    onset_s: Option<f64>,
    ongoing: bool,
}

fn said(c: &CycleGrowth, spread: bool) -> Said {
    let r = c.reading.as_ref();
    let (name, bytes_per_sec) = if spread {
        r.and_then(|r| Some((r.cause.as_ref()?, r)))
            .map_or((None, 0.0), |(k, r)| {
                (Some(k.name.clone()), k.share * r.bytes_per_sec)
            })
    } else {
        c.sites
            .first()
            .map_or((None, 0.0), |s| (Some(s.name.clone()), s.bytes_per_sec))
    };
    Said {
        name,
        bytes_per_sec,
        onset_s: r.map(|r| r.onset_s),
        ongoing: r.is_some_and(|r| r.ongoing),
    }
}

/// A life read against its truth.
struct Judged {
    truth: Truth,
    bands: Bands,
    said: Said,
    /// What was wrong: "name", "held", "rate", "onset".
    wrong: Vec<&'static str>,
    /// The headline, read twice.
    sentences: [String; 2],
    /// The life recorded again is the same life.
    same_life: bool,
}

impl Judged {
    fn explain(&self, s: &Shape) -> String {
        format!(
            "{:?}: the truth {} {:.2} MiB/s from {:.2} s; read {:?} {:.2} MiB/s from {:?} s \
             (ongoing {}); bands {:.2}-{:.2} MiB/s, {:.2}-{:.2} s ({:.0} samples, {} \
             publications)\n  {}\n  {}",
            self.wrong,
            self.truth.culprit,
            self.truth.bytes_per_sec / MIB,
            self.truth.onset_s,
            self.said.name,
            self.said.bytes_per_sec / MIB,
            self.said.onset_s,
            self.said.ongoing,
            self.bands.rate.0 / MIB,
            self.bands.rate.1 / MIB,
            self.bands.onset.0,
            self.bands.onset.1,
            self.bands.samples,
            self.bands.publications,
            describe(s),
            self.sentences[0],
        )
    }
}

/// Records and reads a shape; `Err` with why when its publications cannot tell its truth.
fn judge(s: &Shape) -> Result<Judged, &'static str> {
    let (p, collector, truth) = process(s);
    let life = record(&p, &collector, s.seed);
    let bands = bands(&p, &collector, &life, &truth)?;
    let limit = p.limit.map(|l| l as u64);
    let sentence = |r: &GrowthReport| {
        r.cycles
            .iter()
            .map(|c| crate::render::verdict::cycle_verdict(c, r.limit_bytes))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let report = read(&life, limit);
    let sentences = [sentence(&report), sentence(&read(&life, limit))];
    let same_life = record(&p, &collector, s.seed) == life;
    let x = said(&report.cycles[0], truth.spread);
    let mut wrong = Vec::new();
    if x.name.as_deref() != Some(truth.culprit) {
        wrong.push("name");
    }
    if !x.ongoing {
        wrong.push("held");
    }
    if !(bands.rate.0..=bands.rate.1).contains(&x.bytes_per_sec) {
        wrong.push("rate");
    }
    if !x
        .onset_s
        .is_some_and(|o| (bands.onset.0..=bands.onset.1).contains(&o))
    {
        wrong.push("onset");
    }
    Ok(Judged {
        truth,
        bands,
        said: x,
        wrong,
        sentences,
        same_life,
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn by_the_gc_clock_the_reading_names_the_culprit_its_rate_and_its_onset(
        s in shape(BY_THE_CLOCK)
    ) {
        let j = judge(&s);
        prop_assume!(j.is_ok());
        let j = j.unwrap();
        prop_assert!(j.wrong.is_empty(), "{}", j.explain(&s));
        prop_assert_eq!(&j.sentences[0], &j.sentences[1]);
        prop_assert!(j.same_life);
    }

    #[test]
    fn by_estimate_the_reading_names_the_culprit_and_that_it_grows(
        s in shape(BY_ESTIMATE)
    ) {
        let j = judge(&s);
        prop_assume!(j.is_ok());
        let j = j.unwrap();
        let named = j.wrong.iter().all(|w| matches!(*w, "rate" | "onset"));
        prop_assert!(named, "{}", j.explain(&s));
        prop_assert_eq!(&j.sentences[0], &j.sentences[1]);
        prop_assert!(j.same_life);
    }
}

// The shapes the reading does not read right yet, each run as the strict property is (with
// `--ignored`): proptest minimizes the first failure it meets.
proptest! {
    #![proptest_config(config())]

    #[test]
    #[ignore = "known failure: without the GC clock the rate and the onset are estimated"]
    fn known_without_the_clock_the_rate_and_onset_are_estimated(
        s in shape(BY_ESTIMATE)
    ) {
        read_right(&s)?;
    }

    #[test]
    #[ignore = "known failure: a storm or a spike during the rise is read as part of it"]
    fn known_a_storm_or_a_spike_during_the_rise_is_read_as_part_of_it(
        s in shape(TRANSIENTS_IN_THE_RISE)
    ) {
        read_right(&s)?;
    }

    #[test]
    #[ignore = "known failure: under GOGC=off nothing is published until the soft limit"]
    fn known_under_gogc_off_nothing_is_published_until_the_soft_limit(
        s in shape(UNDER_GOGC_OFF)
    ) {
        read_right(&s)?;
    }
}

/// The strict property of one shape, for the known failures: the reading says its truth.
fn read_right(s: &Shape) -> Result<(), TestCaseError> {
    let j = judge(s);
    prop_assume!(j.is_ok());
    let j = j.unwrap();
    prop_assert!(j.wrong.is_empty(), "{}", j.explain(s));
    Ok(())
}

/// A minimized shape the reading does not read right yet, held to its truth.
fn known(s: &Shape) {
    let j = judge(s).expect("a shape whose publications tell its truth");
    assert!(j.wrong.is_empty(), "{}", j.explain(s));
}

/// HTTP under GOMEMLIMIT, a leak from the start and nothing else: the rate read 12.4 MiB/s
/// for 9.3, from 8.6 s for 0 s.
#[test]
#[ignore = "known failure: without the GC clock the rate and the onset are estimated"]
fn known_minimal_without_the_clock() {
    known(&Shape {
        seed: 17170880191839291538,
        gc: GcSetting::MemoryLimit(Some(100.0), 0.5),
        trigger: 0.8148123123722255,
        mark_mib_s: 258.9194544399442,
        leak: Leak {
            mib_s: 9.261338580125324,
            object: 64.0,
            after: 0.0,
            rise_mib: 24.0,
            spread: None,
        },
        load: None,
        churn: vec![],
        storm: None,
        plateau: None,
        spike: None,
        transients: Transients::BeforeRise,
        interval: 0.05,
        proc: false,
        memory: false,
        kill: None,
    });
}

/// A leak of 33.9 MiB/s from the start and a storm of 100 MiB/s in its rise: 74 % of the rise
/// in the leak, and its part of the rate 25.4 MiB/s.
#[test]
#[ignore = "known failure: a storm during the rise is read as part of it"]
fn known_minimal_a_storm_during_the_rise() {
    known(&Shape {
        seed: 606075209868942104,
        gc: GcSetting::Gogc(50.0),
        trigger: 0.7,
        mark_mib_s: 230.6501389072284,
        leak: Leak {
            mib_s: 33.903790413371546,
            object: 64.0,
            after: 0.0,
            rise_mib: 24.0,
            spread: None,
        },
        load: None,
        churn: vec![],
        storm: Some((100.0, 0.3793448026777566, 1.7597315628780463)),
        plateau: None,
        spike: None,
        transients: Transients::Anywhere,
        interval: 0.5,
        proc: true,
        memory: false,
        kill: None,
    });
}

/// GOGC=off under GOMEMLIMIT, a storm at the start and a leak through four leaves from 19.3
/// s: read from 0.3 s at 0.40 MiB/s for 0.72.
#[test]
#[ignore = "known failure: under GOGC=off nothing is published until the soft limit"]
fn known_minimal_under_gogc_off() {
    known(&Shape {
        seed: 1668307918943454885,
        gc: GcSetting::MemoryLimit(None, 0.5337307733473023),
        trigger: 0.8382414833483467,
        mark_mib_s: 476.0999880936713,
        leak: Leak {
            mib_s: 0.7201567502747606,
            object: 64.0,
            after: 19.349707950598344,
            rise_mib: 24.0,
            spread: Some(vec![
                1.0,
                1.3390557260291294,
                1.5380057283297481,
                1.5695112713343446,
            ]),
        },
        load: None,
        churn: vec![],
        storm: Some((100.0, 0.0, 0.5)),
        plateau: None,
        spike: None,
        transients: Transients::BeforeRise,
        interval: 0.05,
        proc: true,
        memory: false,
        kill: Some(0.8894917352191487),
    });
}

/// A survey of many shapes: how often, and how, the reading misses (`SURVEY=N`, `PROC=0|1`,
/// `ANYWHERE=1` for storms and spikes during the rise; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn survey() {
    use proptest::strategy::ValueTree;
    let env = |k: &str| std::env::var(k).ok();
    let n: usize = env("SURVEY").and_then(|v| v.parse().ok()).unwrap_or(500);
    let domain = Domain {
        proc: env("PROC").map(|v| v == "1"),
        transients: if env("ANYWHERE").is_some() {
            Transients::Anywhere
        } else {
            Transients::BeforeRise
        },
        gogc_off: env("GOGC_OFF").is_some(),
    };
    let mut runner = proptest::test_runner::TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(SEED),
        ..Config::default()
    });
    let strategy = shape(domain);
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let case: Option<usize> = env("CASE").and_then(|v| v.parse().ok());
    for k in 0..n {
        let s = strategy.new_tree(&mut runner).unwrap().current();
        if case.is_some_and(|c| c != k) {
            continue;
        }
        if case.is_some() {
            let (p, c, _) = process(&s);
            let life = record(&p, &c, s.seed);
            let gcs: Vec<String> = life
                .schedule
                .gcs
                .iter()
                .map(|g| format!("{:.2}", g.end))
                .collect();
            eprintln!("{s:?}\nGCs {}", gcs.join(" "));
            eprintln!(
                "{:?}",
                read(&life, p.limit.map(|l| l as u64)).cycles[0].reading
            );
        }
        let key = match judge(&s) {
            Err(why) => format!("set aside: {why}"),
            Ok(j) if j.wrong.is_empty() => "right".to_string(),
            Ok(j) => {
                eprintln!("#{k} {}", j.explain(&s));
                format!("wrong: {}", j.wrong.join("+"))
            }
        };
        *counts.entry(key).or_default() += 1;
    }
    eprintln!("{counts:#?}");
}
