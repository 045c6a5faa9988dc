//! Shapes of a Go service's life for the property test of the reading: a culprit that leaks
//! from an onset, what the service allocates beside it (a start-up load, churn, a storm, a
//! bounded cache, a spike), how its GC is set and how it is recorded. Each shape becomes a
//! [`Process`] of the runtime model and the truth the reading is held to, with the bands that
//! heap sampling and publication leave it.

use proptest::prelude::*;

use super::go_runtime::{Collector, Gc, Life, Lifetime, MIB, Pacer, Process, Site};
use crate::model::capture::RecordKind;

/// The culprit's site, where it leaks alone.
pub const LEAK: &str = "main.(*store).keep";
/// The culprit's caller, where it leaks through several leaves under it.
pub const CAUSE: &str = "main.(*head).newSeries";
const CAUSE_LEAVES: [&str; 5] = [
    "main.newLabels",
    "main.newChunk",
    "main.(*encbuf).putString",
    "main.newPostings",
    "main.(*series).append",
];
const CHURN: [&str; 3] = [
    "main.(*conn).readFrame",
    "main.encodeResponse",
    "main.(*pool).scratch",
];
const LOAD: &str = "main.loadCatalog";
pub const STORM: &str = "main.(*client).parse";
const PLATEAU: &str = "main.(*lruCache).put";
const SPIKE: &str = "main.buildIndex";

/// Bytes per object of the culprit and the churn.
const OBJECTS: [f64; 5] = [64.0, 512.0, 4096.0, 32768.0, 262144.0];
/// The process's memory beside its heap.
const NON_HEAP: f64 = 6.0 * MIB;
/// The longest a culprit leaks in a made-up life, seconds, and the most captures and memory
/// samples of one (a slow leak is captured less often, as `collect --idle-backoff` would).
const MAX_SPAN: f64 = 90.0;
const MAX_CAPTURES: f64 = 200.0;
const MAX_MEMORY_SAMPLES: f64 = 200.0;

#[derive(Debug, Clone)]
pub enum GcSetting {
    Gogc(f64),
    /// GOMEMLIMIT at this share of the cgroup's limit, with GOGC (`None`: off).
    MemoryLimit(Option<f64>, f64),
}

#[derive(Debug, Clone)]
pub struct Leak {
    pub mib_s: f64,
    pub object: f64,
    /// Seconds after the start-up (the load's end, else the process's start).
    pub after: f64,
    /// What it adds over its life (a life is lengthened, up to [`MAX_SPAN`], until its
    /// rise shows in enough publications).
    pub rise_mib: f64,
    /// Its leaves under one caller, by weight; `None`: one site.
    pub spread: Option<Vec<f64>>,
}

#[derive(Debug, Clone)]
pub struct Churn {
    pub mib_s: f64,
    pub lifetime: f64,
    pub object: f64,
}

/// Where storms and spikes happen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transients {
    /// Before the culprit's onset (dropped when there is no room for them).
    BeforeRise,
    /// Anywhere in the life, during the culprit's rise included.
    Anywhere,
}

#[derive(Debug, Clone)]
pub struct Shape {
    pub seed: u64,
    pub gc: GcSetting,
    /// Where in its runway a GC starts, and how fast the machine marks (MiB/s).
    pub trigger: f64,
    pub mark_mib_s: f64,
    pub leak: Leak,
    /// A start-up load: MiB over seconds, kept.
    pub load: Option<(f64, f64)>,
    pub churn: Vec<Churn>,
    /// A storm of 1 MiB buffers dropped at once: MiB/s, when (a share of the time it may be
    /// placed in), seconds.
    pub storm: Option<(f64, f64, f64)>,
    /// A bounded cache, filled before the leak and kept full under replacement: MiB/s,
    /// capacity MiB.
    pub plateau: Option<(f64, f64)>,
    /// A spike: its height as a share of the leak's rise, when (as the storm), seconds
    /// rising, seconds held before it is let go.
    pub spike: Option<(f64, f64, f64, f64)>,
    pub transients: Transients,
    /// Seconds between captures; `proc:` (the GC clock) or HTTP; cgroup memory sampled.
    pub interval: f64,
    pub proc: bool,
    pub memory: bool,
    /// The cgroup's limit as a share of what the heap would reach at the horizon.
    pub kill: Option<f64>,
}

fn log_uniform(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
    (0.0f64..1.0).prop_map(move |u| lo * (hi / lo).powf(u))
}

fn object() -> impl Strategy<Value = f64> {
    prop::sample::select(OBJECTS.to_vec())
}

/// The shapes a property ranges over.
#[derive(Debug, Clone, Copy)]
pub struct Domain {
    /// Recorded by `proc:` (the GC clock) or not; `None`: either.
    pub proc: Option<bool>,
    pub transients: Transients,
    /// GOMEMLIMIT with GOGC=off among the GC settings.
    pub gogc_off: bool,
}

/// Any shape of `domain`.
pub fn shape(domain: Domain) -> impl Strategy<Value = Shape> {
    let transients = domain.transients;
    let limited =
        |gogc: Option<f64>| (0.5f64..0.9).prop_map(move |s| GcSetting::MemoryLimit(gogc, s));
    let gc = if domain.gogc_off {
        prop_oneof![
            Just(GcSetting::Gogc(50.0)),
            Just(GcSetting::Gogc(100.0)),
            Just(GcSetting::Gogc(400.0)),
            limited(Some(100.0)),
            limited(None),
        ]
        .boxed()
    } else {
        prop_oneof![
            Just(GcSetting::Gogc(50.0)),
            Just(GcSetting::Gogc(100.0)),
            Just(GcSetting::Gogc(400.0)),
            limited(Some(100.0)),
        ]
        .boxed()
    };
    let leak = (
        log_uniform(0.5, 64.0),
        object(),
        prop_oneof![Just(0.0), 0.5f64..20.0],
        log_uniform(24.0, 256.0),
        prop::option::weighted(0.2, prop::collection::vec(1.0f64..1.6, 3..=5)),
    )
        .prop_map(|(mib_s, object, after, rise_mib, spread)| Leak {
            mib_s,
            object,
            after,
            rise_mib,
            spread,
        });
    let churn = prop::collection::vec(
        (log_uniform(1.0, 200.0), log_uniform(0.001, 0.3), object()).prop_map(
            |(mib_s, lifetime, object)| Churn {
                mib_s,
                lifetime,
                object,
            },
        ),
        0..=3,
    );
    let beside = (
        prop::option::weighted(0.3, (log_uniform(8.0, 128.0), 0.1f64..3.0)),
        churn,
        prop::option::weighted(0.3, (100.0f64..800.0, 0.0f64..1.0, 0.5f64..3.0)),
        prop::option::weighted(0.2, (log_uniform(2.0, 64.0), log_uniform(4.0, 64.0))),
        prop::option::weighted(0.2, (0.1f64..0.5, 0.0f64..1.0, 0.2f64..2.0, 0.0f64..3.0)),
    );
    let by_proc = match domain.proc {
        Some(p) => Just(p).boxed(),
        None => any::<bool>().boxed(),
    };
    let recording = (
        prop::sample::select(vec![0.05, 0.1, 0.25, 0.5, 1.0]),
        by_proc,
        any::<bool>(),
        prop::option::weighted(0.5, 0.6f64..1.3),
    );
    (
        any::<u64>(),
        gc,
        0.7f64..0.95,
        log_uniform(200.0, 2000.0),
        leak,
        beside,
        recording,
    )
        .prop_map(
            move |(seed, gc, trigger, mark_mib_s, leak, beside, recording)| {
                let (load, churn, storm, plateau, spike) = beside;
                let (interval, proc, memory, kill) = recording;
                Shape {
                    seed,
                    gc,
                    trigger,
                    mark_mib_s,
                    leak,
                    load,
                    churn,
                    storm,
                    plateau,
                    spike,
                    transients,
                    interval,
                    proc,
                    memory,
                    kill,
                }
            },
        )
}

/// What the generator knows of a life, in the reading's clock (seconds from its first
/// capture).
#[derive(Debug, Clone)]
pub struct Truth {
    /// The site, or the caller of the leaves, that leaks.
    pub culprit: &'static str,
    pub spread: bool,
    pub bytes_per_sec: f64,
    pub onset_s: f64,
    /// How many of the process's sites (its first) are the culprit's.
    pub leaves: usize,
}

/// A shape's process, its recording and its truth; the life is lengthened (up to
/// [`MAX_SPAN`]) until the culprit's rise shows in enough publications, with enough samples.
pub fn process(s: &Shape) -> (Process, Collector, Truth) {
    let mut span = (s.leak.rise_mib / s.leak.mib_s).clamp(4.0, MAX_SPAN);
    loop {
        let built = build(s, span);
        if span >= MAX_SPAN || observable(&built) {
            return built;
        }
        span = (span * 1.5).min(MAX_SPAN);
    }
}

/// What each capture of a life shows: at GC count n, the heap as of mark termination n − 1;
/// each such GC (its index) once, in order.
fn shown(gcs: &[Gc], captures: impl Iterator<Item = f64>) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for t in captures {
        let n = gcs.partition_point(|g| g.end <= t);
        if n >= 2 && out.last().is_none_or(|&v| v < n - 2) {
            out.push(n - 2);
        }
    }
    out
}

/// Whether the culprit's rise shows in enough publications, with enough samples, before the
/// life ends (with a margin over what [`bands`] asks).
fn observable((p, c, truth): &(Process, Collector, Truth)) -> bool {
    let schedule = p.schedule();
    let gcs = &schedule.gcs;
    let onset = truth.onset_s + c.first;
    let captures = (0..)
        .map(|k| c.first + k as f64 * c.interval)
        .take_while(|&t| t < schedule.end);
    let of_rise: Vec<usize> = shown(gcs, captures)
        .into_iter()
        .filter(|&k| gcs[k].end > onset)
        .collect();
    let Some(&last) = of_rise.last() else {
        return false;
    };
    let samples = truth.bytes_per_sec * (gcs[last].end - onset) / p.sites[0].bytes_per_sample();
    of_rise.len() >= MIN_PUBLICATIONS + 2 && samples >= 1.5 * MIN_SAMPLES
}

/// The process a shape makes when its culprit leaks for `span` seconds, and its recording.
fn build(s: &Shape, span: f64) -> (Process, Collector, Truth) {
    let start_up = s.load.map_or(0.0, |(_, secs)| secs);
    let onset = start_up + s.leak.after;
    let rate = s.leak.mib_s * MIB;
    let horizon = onset + span;
    let mut sites = Vec::new();
    let kept = |stack: String, object: f64, from: f64, to: f64, rate: f64| Site {
        stack,
        object,
        from,
        to,
        rate,
        lifetime: Lifetime::Kept,
    };
    match &s.leak.spread {
        None => sites.push(kept(
            format!("main.main;main.(*server).handle;{LEAK}"),
            s.leak.object,
            onset,
            f64::INFINITY,
            rate,
        )),
        Some(weights) => {
            let total: f64 = weights.iter().sum();
            for (leaf, w) in CAUSE_LEAVES.iter().zip(weights) {
                sites.push(kept(
                    format!("main.main;main.(*db).Append;{CAUSE};{leaf}"),
                    s.leak.object,
                    onset,
                    f64::INFINITY,
                    rate * w / total,
                ));
            }
        }
    }
    if let Some((mib, secs)) = s.load {
        sites.push(kept(
            format!("main.main;{LOAD}"),
            4096.0,
            0.0,
            secs,
            mib * MIB / secs,
        ));
    }
    for (c, name) in s.churn.iter().zip(CHURN) {
        sites.push(Site {
            stack: format!("main.main;main.(*server).serve;{name}"),
            object: c.object,
            from: 0.0,
            to: f64::INFINITY,
            rate: c.mib_s * MIB,
            lifetime: Lifetime::For(c.lifetime),
        });
    }
    // When a transient of `length` seconds starts, at `at` of the time it may take.
    let place = |at: f64, length: f64| match s.transients {
        Transients::Anywhere => Some(at * horizon),
        Transients::BeforeRise => (onset > length).then_some(at * (onset - length)),
    };
    if let Some((mib_s, at, secs)) = s.storm {
        if let Some(from) = place(at, secs) {
            sites.push(Site {
                stack: format!("main.main;main.(*client).readLoop;{STORM}"),
                object: MIB,
                from,
                to: from + secs,
                rate: mib_s * MIB,
                lifetime: Lifetime::For(0.005),
            });
        }
    }
    if let Some((mib_s, cap)) = s.plateau {
        let fill = cap / mib_s;
        if fill < onset {
            sites.push(Site {
                stack: format!("main.main;main.(*server).handle;{PLATEAU}"),
                object: 4096.0,
                from: (onset - fill) * 0.5,
                to: f64::INFINITY,
                rate: mib_s * MIB,
                lifetime: Lifetime::For(fill),
            });
        }
    }
    if let Some((share, at, rise, hold)) = s.spike {
        if let Some(from) = place(at, rise + hold) {
            let bytes = share * rate * span;
            sites.push(Site {
                stack: format!("main.main;{SPIKE}"),
                object: 32768.0,
                from,
                to: from + rise,
                rate: bytes / rise,
                lifetime: Lifetime::Until(from + rise + hold),
            });
        }
    }
    let (gogc, memory_limit_share) = match s.gc {
        GcSetting::Gogc(g) => (Some(g), None),
        GcSetting::MemoryLimit(g, share) => (g, Some(share)),
    };
    let mut p = Process {
        sites,
        pacer: Pacer {
            gogc,
            memory_limit: None,
            trigger: s.trigger,
            mark_rate: s.mark_mib_s * MIB,
        },
        non_heap: NON_HEAP,
        limit: None,
        horizon,
    };
    // The limit: a share of what the heap would reach at the horizon with GOGC's headroom.
    let live_end: f64 = p.sites.iter().map(|x| x.live(horizon)).sum();
    let reach = live_end * (1.0 + gogc.unwrap_or(100.0) / 100.0);
    let limit = s
        .kill
        .map(|f| NON_HEAP + f * reach)
        .or(memory_limit_share.map(|_| NON_HEAP + 1.2 * reach));
    p.limit = limit;
    p.pacer.memory_limit = memory_limit_share.zip(limit).map(|(m, l)| m * l);
    let collector = Collector {
        interval: s.interval.max(horizon / MAX_CAPTURES),
        first: 0.002,
        proc: s.proc,
        memory_every: s.memory.then_some((horizon / MAX_MEMORY_SAMPLES).max(0.1)),
    };
    let truth = Truth {
        culprit: if s.leak.spread.is_some() { CAUSE } else { LEAK },
        spread: s.leak.spread.is_some(),
        bytes_per_sec: rate,
        onset_s: onset - collector.first,
        leaves: s.leak.spread.as_ref().map_or(1, |w| w.len()),
    };
    (p, collector, truth)
}

/// What a right reading of a life says, as far as its publications can tell, in the
/// reading's clock.
#[derive(Debug, Clone)]
pub struct Bands {
    /// Expected samples of the culprit in its published rise.
    pub samples: f64,
    pub rate: (f64, f64),
    pub onset: (f64, f64),
    /// Publications of the culprit's rise.
    pub publications: usize,
}

/// A rise is read from at least this many publications and samples.
const MIN_PUBLICATIONS: usize = 8;
const MIN_SAMPLES: f64 = 100.0;
/// The spread of a fitted rate over a sampled rise, in standard deviations of its count:
/// measured over lives with nothing beside the culprit, read by the GC clock (the z of the
/// rate error, √n × error, had its quartiles at −0.78 and 0.65 and its 5th and 95th
/// percentiles at −1.84 and 2.41: a standard deviation of about 1.1–1.3).
const SAMPLING_K: f64 = 1.3;

/// The bands of a life, or why its publications cannot tell the truth: too few publications
/// of the culprit's rise or samples in it, an earlier heap that stands as high as the end's
/// (a spike above the leak), other sites whose change over the rise, with their sampling
/// noise at both ends, is half the rise or more, or whose sampling noise makes a figure
/// wobble by a fifth of the rise (the reading's peak and last figure are single figures).
///
/// - The rate: three of the fit's standard deviations ([`SAMPLING_K`] / √n, n the culprit's
///   expected samples up to its last publication), and the placement of the two ends of the
///   fit (each within a capture interval of its GC: the GC clock brackets it between two
///   captures) over the rise's length.
/// - The onset: from the last publication at or before the culprit's onset, to the first
///   that can show it (a twentieth of the rise above the level, reading.rs's rule for the
///   low point, with three standard deviations of the culprit's count to it and of the other
///   sites' noise), each widened by that placement.
pub fn bands(
    p: &Process,
    c: &Collector,
    life: &Life,
    truth: &Truth,
) -> Result<Bands, &'static str> {
    let gcs = &life.schedule.gcs;
    let captures = life
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .map(|r| r.t_ms as f64 / 1000.0);
    let visible = shown(gcs, captures);
    let onset = truth.onset_s + life.first;
    let rate = truth.bytes_per_sec;
    let of_rise: Vec<usize> = visible
        .iter()
        .copied()
        .filter(|&k| gcs[k].end > onset)
        .collect();
    let &last = of_rise.last().ok_or("no publication of the rise")?;
    let end = gcs[last].end;
    let culprit = &p.sites[..truth.leaves];
    let per_sample = culprit[0].bytes_per_sample();
    let samples = rate * (end - onset) / per_sample;
    if of_rise.len() < MIN_PUBLICATIONS {
        return Err("too few publications of the rise");
    }
    if samples < MIN_SAMPLES {
        return Err("too few samples of the rise");
    }
    let rise = rate * (end - onset);
    // What the other sites hold at each publication, as the runtime marks it, and the noise
    // of their samples.
    let others = &p.sites[truth.leaves..];
    let held = |k: usize| -> f64 { others.iter().map(|x| x.marked(&gcs[k])).sum() };
    let noise = |k: usize| -> f64 {
        others
            .iter()
            .map(|x| x.marked(&gcs[k]) * x.bytes_per_sample())
            .sum::<f64>()
            .sqrt()
    };
    let grown = |k: usize| -> f64 {
        culprit
            .iter()
            .map(|x| x.marked(&gcs[last]) - x.marked(&gcs[k]))
            .sum()
    };
    // The rise into the end is the culprit's: no earlier publication stands near the end's
    // heap, and what the other sites gained or lost over the rise, with their noise at both
    // ends, is under half of it.
    if visible
        .iter()
        .any(|&k| k < last && held(k) - held(last) > 0.75 * grown(k))
    {
        return Err("an earlier heap near the end's");
    }
    // Against the last publication before the onset; with none, against the first capture,
    // which the reading takes as the heap's low (the start-up's own rise is then part of the
    // heap's, and before the first GC it summed nothing yet).
    let (held_before, noise_before) = visible
        .iter()
        .copied()
        .rfind(|&k| gcs[k].end <= onset)
        .map_or((0.0, 0.0), |k| (held(k), noise(k)));
    let beside = (held(last) - held_before).abs() + 3.0 * (noise(last) + noise_before);
    if beside > 0.5 * rise {
        return Err("other sites move as much");
    }
    // The reading takes the peak and the last figure each as one figure: the highest of many
    // sits about three of the figures' standard deviations above their trend and the last may
    // sit three below it, and that gap must stay under a fifth of the rise (reading.rs,
    // NEAR_TOP) for a rise going on not to read as one that fell.
    let wobble = of_rise.iter().map(|&k| noise(k)).fold(0.0, f64::max);
    if 6.0 * wobble > 0.2 * rise {
        return Err("figures wobble by a fifth of the rise");
    }
    // The culprit's count to a twentieth of its rise is a Poisson count: three of its
    // standard deviations, and three of the other sites' noise, later at most.
    let near = 0.05 * samples;
    let told =
        onset + ((near + 3.0 * (near + 1.0).sqrt()) * per_sample + 3.0 * noise_before) / rate;
    let before = visible
        .iter()
        .map(|&k| gcs[k].end)
        .filter(|&m| m <= onset)
        .fold(life.first, f64::max);
    let after = of_rise
        .iter()
        .map(|&k| gcs[k].end)
        .find(|&m| m >= told)
        .unwrap_or(end);
    let placement = 1.1 * c.interval;
    let tolerance = 3.0 * SAMPLING_K / samples.sqrt() + 2.0 * placement / (end - onset);
    Ok(Bands {
        samples,
        rate: (rate * (1.0 - tolerance), rate * (1.0 + tolerance)),
        onset: (
            before.min(onset) - placement - life.first,
            after + placement - life.first,
        ),
        publications: of_rise.len(),
    })
}

/// A shape in a line.
pub fn describe(s: &Shape) -> String {
    let mut w = vec![format!("{:?}", s.gc), format!("every {} s", s.interval)];
    w.push(if s.proc { "proc".into() } else { "http".into() });
    w.push(format!(
        "leak {:.1} MiB/s of {} B after {:.1} s{}",
        s.leak.mib_s,
        s.leak.object,
        s.leak.after,
        if s.leak.spread.is_some() {
            " spread"
        } else {
            ""
        }
    ));
    if let Some((mib, secs)) = s.load {
        w.push(format!("load {mib:.0} MiB in {secs:.1} s"));
    }
    for c in &s.churn {
        w.push(format!(
            "churn {:.0} MiB/s x {:.0} ms",
            c.mib_s,
            c.lifetime * 1000.0
        ));
    }
    if let Some((r, at, secs)) = s.storm {
        w.push(format!("storm {r:.0} MiB/s at {at:.2} for {secs:.1} s"));
    }
    if let Some((r, cap)) = s.plateau {
        w.push(format!("plateau {cap:.0} MiB at {r:.0} MiB/s"));
    }
    if let Some((share, at, rise, hold)) = s.spike {
        w.push(format!(
            "spike {share:.2} at {at:.2} rise {rise:.1} hold {hold:.1}"
        ));
    }
    if let Some(k) = s.kill {
        w.push(format!("kill {k:.2}"));
    }
    if s.memory {
        w.push("memory".into());
    }
    w.join(", ")
}
