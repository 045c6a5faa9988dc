//! CI gates: `--fail-on` rules such as `growth>5MiB/s`, `time-to-limit<60s` or
//! `regression>1.5x`, parsed from text and checked against a run's findings. A rule trips when
//! any boot cycle crosses its bar. Pure: the figures come in, outcomes go out.
//!
//! # A chord is no fitted rate
//!
//! `growth>` judges fitted rates. A rise still going that the heap profile published only twice
//! (a flood killed within two GCs) has a rate through two points, a chord, that fits them
//! perfectly whatever the rise was: it trips nothing alone. A fitted rate over the bar in any
//! cycle trips the rule as before; where none does and a chord is over the bar, the rule is not
//! judged (`Status::Unknown`, the chord its evidence, no figure quoted), so `check` exits 2 as
//! for any rule it cannot check: a gate that cannot look does not pass, and does not fail on a
//! figure it cannot stand behind. A chord under the bar does not trip, as before. A death that
//! fast is what `time-to-limit<` and `kills>` judge.
//!
//! For a run of an Envoy proxy (manifest records of kind `envoy`) the growth and
//! time-to-limit rules also weigh Envoy's own growth fit, and `live-share<X` checks how much
//! of the mapped heap is live data (Envoy's tcmalloc figures, or Go's MemStats).

use serde::Serialize;

use super::compare::Comparison;
use super::envoy::EnvoyReport;
use super::growth::{CycleGrowth, GrowthReport};
use crate::model::capture::{CaptureRecord, RecordKind};

mod evidence;
mod parse;

pub use evidence::{Evidence, GrowthEnd, Missing, Sides, TopSite};

use parse::trips_above;
pub use parse::{Metric, Rule, RuleError, parse};

/// The baseline side of a comparison, as the regression rule sees it: the largest in-use heap
/// of each compared cycle over the span both cover, in the pair the gate judges
/// (`Comparison::gate_pair`: the worst of those compared like with like).
#[derive(Debug, Clone, Serialize)]
pub struct HeapRatio {
    /// The aligned span: seconds from each cycle's start.
    pub age_s: f64,
    pub baseline_bytes: i64,
    pub bytes: i64,
    /// The pair's cycles: the baseline's, and the run's.
    pub a_cycle: u32,
    pub b_cycle: u32,
}

impl HeapRatio {
    /// The ratio the regression gate judges in `c`: its gate pair's, else (no pair has a heap
    /// to set against) the lead's.
    pub fn of(c: &Comparison) -> Option<HeapRatio> {
        let p = c.gate_pair().unwrap_or(c);
        let (baseline_bytes, bytes) = p.a_heap_peak.zip(p.b_heap_peak)?;
        Some(HeapRatio {
            age_s: p.age_s,
            baseline_bytes,
            bytes,
            a_cycle: p.a_cycle,
            b_cycle: p.b_cycle,
        })
    }

    pub fn ratio(&self) -> Option<f64> {
        (self.baseline_bytes > 0).then(|| self.bytes as f64 / self.baseline_bytes as f64)
    }
}

/// Everything the rules are checked against.
pub struct Findings<'a> {
    pub growth: &'a GrowthReport,
    /// Largest in-use heap captured in each boot cycle, by cycle index.
    pub peak_heap: &'a [(u32, i64)],
    pub comparison: Option<&'a Comparison>,
    pub heap_ratio: Option<&'a HeapRatio>,
    /// Envoy's admin figures, when the run holds `envoy` records.
    pub envoy: Option<&'a EnvoyReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    /// The run holds nothing to measure this with (no limit, no baseline, no memory).
    Unknown,
}

/// What checking one rule found: the worst figure across boot cycles, where it was, and the
/// evidence behind it (`render::rules` words it).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub rule: String,
    pub metric: Metric,
    pub status: Status,
    /// The worst figure, in the metric's base unit; infinite for "never" (time to the limit)
    /// and for a baseline that lived where B was OOM-killed (regression). `None` when unknown.
    pub measured: Option<f64>,
    /// The boot cycle the figure comes from.
    pub cycle: Option<u32>,
    pub evidence: Evidence,
}

impl Outcome {
    /// The figure as JSON keeps it: finite, to three decimals.
    pub fn value(&self) -> Option<f64> {
        self.measured
            .filter(|v| v.is_finite())
            .map(|v| (v * 1000.0).round() / 1000.0)
    }
}

/// One measured figure: value, which cycle, and its evidence.
struct Measure {
    value: f64,
    cycle: Option<u32>,
    evidence: Evidence,
}

/// The in-use heap's rate at the end of the cycle, from the cycle's reading: the episode's
/// rate while it still went on (rising into the death, or at the last capture), else 0.
pub fn cycle_growth(c: &CycleGrowth) -> f64 {
    c.reading.as_ref().map_or(0.0, |r| r.rate_now())
}

/// The growth rule's evidence for a cycle, from its reading.
fn growth_evidence(c: &CycleGrowth) -> Evidence {
    let Some(r) = &c.reading else {
        return Evidence::HeapDidNotRise;
    };
    // The caller most of a spread rise lies under, else its largest site: as growth says it.
    let top = r
        .cause
        .as_ref()
        .map(|k| TopSite {
            name: k.name.clone(),
            share: k.share,
        })
        .or_else(|| {
            c.rise_sites().first().map(|s| TopSite {
                name: s.name.clone(),
                share: s.share,
            })
        });
    if r.ongoing {
        let end = match c.died_after_s.filter(|_| c.end.is_death()) {
            Some(at_s) if c.killed => GrowthEnd::OomKilled { at_s },
            Some(at_s) => GrowthEnd::Died { at_s },
            None => GrowthEnd::LastCapture,
        };
        Evidence::HeapGrows {
            bytes_per_sec: r.bytes_per_sec,
            onset_s: r.onset_s,
            end_s: r.end_s,
            points: r.points,
            end,
            top,
        }
    } else {
        Evidence::HeapHeld {
            bytes_per_sec: r.bytes_per_sec,
            onset_s: r.onset_s,
            end_s: r.end_s,
            held_s: r.held_s.unwrap_or(0.0),
            top,
        }
    }
}

/// When the limit is (or was) reached: the earliest of the kill when the cycle died of it,
/// the measured arrival at the limit, and the forecast.
pub fn cycle_time_to_limit(c: &CycleGrowth) -> Option<f64> {
    let died = c.died_after_s.filter(|_| c.killed);
    let reached = c.at_limit.as_ref().map(|a| a.since_s);
    // A forecast only while the limit was not reached: then it is measured.
    let forecast = c.limit_at_s.filter(|_| reached.is_none());
    [died, reached, forecast]
        .into_iter()
        .flatten()
        .reduce(f64::min)
}

fn worst(measures: Vec<Measure>, above: bool) -> Option<Measure> {
    measures.into_iter().reduce(|a, b| {
        let b_worse = if above {
            b.value > a.value
        } else {
            b.value < a.value
        };
        if b_worse { b } else { a }
    })
}

/// The cycles and builds of a compared pair.
fn sides(c: &Comparison) -> Sides {
    Sides {
        b_cycle: c.b_cycle,
        b: c.b.clone(),
        a_cycle: c.a_cycle,
        a: c.a.clone(),
    }
}

fn measure(rule: &Rule, f: &Findings) -> Result<Option<Measure>, Missing> {
    let cycles = &f.growth.cycles;
    let per_cycle = |value: &dyn Fn(&CycleGrowth) -> Option<(f64, Evidence)>| {
        cycles
            .iter()
            .filter_map(|c| {
                value(c).map(|(v, evidence)| Measure {
                    value: v,
                    cycle: Some(c.index),
                    evidence,
                })
            })
            .collect::<Vec<_>>()
    };
    // In a run of Envoy admin figures alone, cycles without a heap profile have no heap
    // growth to measure: Envoy's own fit stands for them.
    let envoy_only = f.envoy.is_some() && f.peak_heap.is_empty();
    let found = match rule.metric {
        Metric::Growth => {
            let mut measures: Vec<Measure> = f.envoy.and_then(envoy_growth).into_iter().collect();
            measures.extend(per_cycle(&|c| {
                if envoy_only && c.heap_first.is_none() && c.sites.is_empty() {
                    return None;
                }
                Some((cycle_growth(c), growth_evidence(c)))
            }));
            // Chords set aside: the worst fitted rate, unless it holds and a chord is over the
            // bar (then that chord, not judged: see the module's doc).
            let (chords, fitted): (Vec<Measure>, Vec<Measure>) =
                measures.into_iter().partition(|m| m.evidence.is_chord());
            match (worst(fitted, true), worst(chords, true)) {
                (Some(f), Some(c)) if f.value <= rule.bar && c.value > rule.bar => Some(c),
                (Some(f), _) => Some(f),
                (None, c) => c,
            }
        }
        Metric::TimeToLimit => {
            let envoy_limit = f
                .envoy
                .and_then(|e| e.growth.as_ref())
                .and_then(|g| g.limit);
            if f.growth.limit_bytes.is_none()
                && envoy_limit.is_none()
                && !cycles.iter().any(|c| c.killed)
            {
                return Err(Missing::NoLimit);
            }
            let limit = f.growth.limit_bytes;
            let mut hits: Vec<Measure> =
                f.envoy.and_then(envoy_time_to_limit).into_iter().collect();
            hits.extend(per_cycle(&|c| {
                cycle_time_to_limit(c).map(|t| {
                    let how = if c.killed && c.died_after_s.is_some_and(|d| d <= t + 1e-9) {
                        Evidence::OomKilled { t }
                    } else if let Some(a) = c.at_limit.as_ref().filter(|a| a.since_s <= t + 1e-9) {
                        Evidence::SatAtLimit(a.clone())
                    } else {
                        Evidence::LimitForecast { limit, t }
                    };
                    (t, how)
                })
            }));
            if hits.is_empty() {
                return Ok(Some(Measure {
                    value: f64::INFINITY,
                    cycle: None,
                    evidence: Evidence::NoGrowthTowardLimit,
                }));
            }
            worst(hits, false)
        }
        Metric::Regression => {
            // B died of memory where A did not, in a pair the gate judges: the worst regression
            // there is, whatever the heaps read before the death.
            if let Some(c) = f.comparison.and_then(|c| {
                c.gate_pairs()
                    .find(|p| p.b_episode.oom_killed && !p.a_episode.oom_killed)
            }) {
                return Ok(Some(Measure {
                    value: f64::INFINITY,
                    cycle: Some(c.b_cycle),
                    evidence: Evidence::BOomKilled {
                        sides: sides(c),
                        died_s: c.b_episode.died_s.unwrap_or(c.b_episode.span_s),
                    },
                }));
            }
            let Some(ratio) = f.heap_ratio else {
                return Err(Missing::NoBaseline);
            };
            let Some(value) = ratio.ratio() else {
                return Err(Missing::BaselineHasNoHeap);
            };
            // The pair the ratio was measured on, which need not lead the comparison.
            let pair = f.comparison.and_then(|c| {
                c.all_pairs()
                    .find(|p| (p.a_cycle, p.b_cycle) == (ratio.a_cycle, ratio.b_cycle))
            });
            Some(Measure {
                value,
                cycle: Some(ratio.b_cycle),
                evidence: Evidence::PeakAgainstBaseline {
                    ratio: ratio.clone(),
                    sides: pair.map(sides),
                    worst: pair.and_then(|c| c.regressions.first()).cloned(),
                },
            })
        }
        Metric::MemoryRegression | Metric::AnonRegression => {
            let anon = rule.metric == Metric::AnonRegression;
            let Some(c) = f.comparison else {
                return Err(Missing::NoBaseline);
            };
            let peak = |s: &crate::analyse::compare::SideEpisode| {
                if anon {
                    s.memory_peak_anon
                } else {
                    s.memory_peak
                }
            };
            if peak(&c.a_episode).zip(peak(&c.b_episode)).is_none() {
                return Err(if anon {
                    Missing::NoAnonymousMemory
                } else {
                    Missing::NoMemory
                });
            }
            // The worst of the pairs the gate judges (like with like), as for the heap.
            let against = |c: &Comparison| {
                let (baseline_bytes, bytes) = peak(&c.a_episode).zip(peak(&c.b_episode))?;
                let of = if anon {
                    "anonymous memory".to_string()
                } else {
                    format!(
                        "{} memory",
                        c.b_episode.memory_of.as_deref().unwrap_or("process")
                    )
                };
                (baseline_bytes > 0).then(|| Measure {
                    value: bytes as f64 / baseline_bytes as f64,
                    cycle: Some(c.b_cycle),
                    evidence: Evidence::MemoryAgainstBaseline {
                        of,
                        bytes,
                        baseline_bytes,
                        sides: sides(c),
                    },
                })
            };
            let measures: Vec<Measure> = c.gate_pairs().filter_map(against).collect();
            if measures.is_empty() {
                return Err(Missing::NoMemory);
            }
            worst(measures, true)
        }
        Metric::Goroutines => worst(
            per_cycle(&|c| {
                let per_sec = c.goroutine_growth.iter().map(|g| g.per_sec).sum::<f64>() + 0.0;
                let fastest = c.goroutine_growth.first().map(|g| g.name.clone());
                Some((per_sec, Evidence::Goroutines { per_sec, fastest }))
            }),
            true,
        ),
        Metric::Storm => worst(
            per_cycle(&|c| {
                Some(
                    c.alloc_storms
                        .first()
                        .map_or((0.0, Evidence::NoStorm), |s| {
                            (
                                s.peak_bytes_per_sec,
                                Evidence::Storm {
                                    name: s.name.clone(),
                                    peak_bytes_per_sec: s.peak_bytes_per_sec,
                                    typical_bytes_per_sec: s.typical_bytes_per_sec,
                                },
                            )
                        }),
                )
            }),
            true,
        ),
        Metric::Heap => worst(
            f.peak_heap
                .iter()
                .map(|&(cycle, bytes)| Measure {
                    value: bytes as f64,
                    cycle: Some(cycle),
                    evidence: Evidence::HeapReached { bytes },
                })
                .collect(),
            true,
        ),
        Metric::Memory => {
            let seen = per_cycle(&|c| {
                c.memory_peak.map(|m| {
                    let cgroup = c.peaks.cgroup.is_some();
                    (m as f64, Evidence::MemoryReached { bytes: m, cgroup })
                })
            });
            if seen.is_empty() {
                return Err(Missing::NoMemory);
            }
            worst(seen, true)
        }
        Metric::Kills => {
            let killed: Vec<u32> = cycles
                .iter()
                .filter(|c| c.killed)
                .map(|c| c.index)
                .collect();
            // One kill is its cycle's; several are the run's, each cycle named.
            let one = (killed.len() == 1).then(|| killed[0]);
            Some(Measure {
                value: killed.len() as f64,
                cycle: one,
                evidence: Evidence::Kills {
                    n: killed.len(),
                    cycles: if one.is_some() { Vec::new() } else { killed },
                },
            })
        }
        Metric::Restarts => {
            let n = cycles.len().saturating_sub(1);
            let envoy = f.envoy.map_or(0, |e| e.restarts);
            Some(if envoy > n {
                Measure {
                    value: envoy as f64,
                    cycle: None,
                    evidence: Evidence::EnvoyRestarts { n: envoy },
                }
            } else {
                Measure {
                    value: n as f64,
                    cycle: None,
                    evidence: Evidence::Restarts {
                        cycles: cycles.len(),
                    },
                }
            })
        }
        Metric::LiveShare => {
            let mut seen: Vec<Measure> = Vec::new();
            let mut naive_only = None;
            if let Some(h) = f.envoy.and_then(|e| e.heap.as_ref()) {
                match h.live_share {
                    Some(live) => seen.push(Measure {
                        value: live,
                        cycle: None,
                        evidence: Evidence::EnvoyLiveShare {
                            live,
                            naive: h.naive_share,
                            held_not_returned: h.held_not_returned.unwrap_or(0),
                        },
                    }),
                    None => naive_only = Some(h.naive_share),
                }
            }
            seen.extend(per_cycle(&|c| {
                let m = c.memstats.as_ref()?;
                let live = m.live_share?;
                Some((
                    live,
                    Evidence::GoLiveShare {
                        live,
                        held_not_returned: m.held_not_returned,
                        at_s: m.at_s,
                    },
                ))
            }));
            if seen.is_empty() {
                return Err(match naive_only {
                    Some(naive_share) => Missing::EnvoyGaugesOnly { naive_share },
                    None => Missing::NoLiveShare,
                });
            }
            worst(seen, false)
        }
    };
    Ok(found)
}

/// Envoy's growth as the growth rule sees it: the fitted rate of the figure compared with the
/// limit when it grows steadily, else zero.
fn envoy_growth(e: &EnvoyReport) -> Option<Measure> {
    let g = e.growth.as_ref()?;
    Some(Measure {
        value: if g.growing { g.bytes_per_sec } else { 0.0 },
        cycle: None,
        evidence: Evidence::EnvoyGrowth {
            series: g.series.to_string(),
            bytes_per_sec: g.bytes_per_sec,
            fit_r2: g.fit_r2,
            first: g.first,
            last: g.last,
            growing: g.growing,
        },
    })
}

/// When Envoy meets the limit, counted like a boot cycle's: from its first snapshot since the
/// last restart.
fn envoy_time_to_limit(e: &EnvoyReport) -> Option<Measure> {
    let g = e.growth.as_ref()?;
    let left = g.limit_in_s?;
    let t = e.span_s + left;
    let evidence = if left <= 0.0 {
        Evidence::EnvoyAtLimit {
            series: g.series.to_string(),
            limit: g.limit,
        }
    } else {
        Evidence::EnvoyReaches {
            series: g.series.to_string(),
            limit: g.limit,
            t,
            bytes_per_sec: g.bytes_per_sec,
            left_s: left,
        }
    };
    Some(Measure {
        value: t,
        cycle: None,
        evidence,
    })
}

/// Checks one rule.
pub fn evaluate(rule: &Rule, findings: &Findings) -> Outcome {
    let unknown = |why: Missing| Outcome {
        rule: rule.text.clone(),
        metric: rule.metric,
        status: Status::Unknown,
        measured: None,
        cycle: None,
        evidence: Evidence::Missing(why),
    };
    let m = match measure(rule, findings) {
        Ok(Some(m)) => m,
        Ok(None) => return unknown(Missing::NoCycles),
        Err(why) => return unknown(why),
    };
    let tripped = if trips_above(rule.metric) {
        m.value > rule.bar
    } else {
        m.value < rule.bar
    };
    if tripped && m.evidence.is_chord() {
        return Outcome {
            rule: rule.text.clone(),
            metric: rule.metric,
            status: Status::Unknown,
            measured: None,
            cycle: m.cycle,
            evidence: m.evidence,
        };
    }
    Outcome {
        rule: rule.text.clone(),
        metric: rule.metric,
        status: if tripped { Status::Fail } else { Status::Pass },
        measured: Some(m.value),
        cycle: m.cycle,
        evidence: m.evidence,
    }
}

pub fn evaluate_all(rules: &[Rule], findings: &Findings) -> Vec<Outcome> {
    rules.iter().map(|r| evaluate(r, findings)).collect()
}

/// Largest in-use heap captured in each boot cycle, from the manifest totals.
pub fn peak_heap(records: &[CaptureRecord]) -> Vec<(u32, i64)> {
    use crate::analyse::growth::before_first_publication;
    let mut peaks: std::collections::BTreeMap<u32, i64> = std::collections::BTreeMap::new();
    let heaps = || {
        records
            .iter()
            .filter(|r| r.is_ok() && r.kind == RecordKind::Heap)
    };
    // Captures before the runtime published any cycle count garbage as in use: no peak of the
    // heap where the cycle goes on to publish one.
    let publishes: std::collections::BTreeSet<u32> = heaps()
        .filter(|r| r.gc.is_some() && !before_first_publication(r))
        .map(|r| r.cycle)
        .collect();
    for r in heaps().filter(|r| !(before_first_publication(r) && publishes.contains(&r.cycle))) {
        if let Some(&v) = r.totals.get("inuse_space") {
            let p = peaks.entry(r.cycle).or_insert(v);
            *p = (*p).max(v);
        }
    }
    peaks.into_iter().collect()
}

/// Whether a rule needs a baseline run to be checked.
pub fn needs_baseline(rule: &Rule) -> bool {
    matches!(
        rule.metric,
        Metric::Regression | Metric::MemoryRegression | Metric::AnonRegression
    )
}

#[cfg(test)]
pub(crate) mod tests;
