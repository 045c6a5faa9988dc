//! CI gates: `--fail-on` rules such as `growth>5MiB/s`, `time-to-limit<60s` or
//! `regression>1.5x`, parsed from text and checked against a run's findings. A rule trips when
//! any boot cycle crosses its bar. Pure: the figures come in, outcomes go out.
//!
//! For a run of an Envoy proxy (manifest records of kind `envoy`) the growth and
//! time-to-limit rules also weigh Envoy's own growth fit, and `live-share<X` checks how much
//! of the mapped heap is live data (Envoy's tcmalloc figures, or Go's MemStats).

use serde::Serialize;

use super::breakdown::AtLimit;
use super::compare::{Comparison, Regression};
use super::envoy::EnvoyReport;
use super::growth::{CycleGrowth, GrowthReport};
use crate::model::capture::{CaptureRecord, RecordKind};
use crate::units::format_bytes;

mod parse;

use parse::trips_above;
pub use parse::{Metric, Rule, RuleError, parse};

/// The baseline side of a comparison, as the regression rule sees it: the largest in-use heap
/// of each compared cycle over the span both cover.
#[derive(Debug, Clone, Serialize)]
pub struct HeapRatio {
    /// The aligned span: seconds from each cycle's start.
    pub age_s: f64,
    pub baseline_bytes: i64,
    pub bytes: i64,
}

impl HeapRatio {
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
    /// The sentences of other outputs that an outcome quotes, made by `render`.
    pub quoted: Quoted,
}

/// The words an outcome's reason quotes from the other outputs, so a rule says what `growth`
/// and `compare` say: handed in by the caller (`render` words them; the rules only figure).
#[derive(Clone, Copy)]
pub struct Quoted {
    /// How long the cgroup sat at its limit ("at its limit from 3.0 s for 1.2 s, …").
    pub at_limit: fn(&AtLimit) -> String,
    /// Why a site is worse in B ("grows 2 MiB/s in B against 0 B/s in A; …").
    pub why_worse: fn(&Regression) -> String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    /// The run holds nothing to measure this with (no limit, no baseline, no memory).
    Unknown,
}

/// What checking one rule found.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub rule: String,
    pub status: Status,
    /// The worst figure across boot cycles, in the metric's base unit.
    pub value: Option<f64>,
    /// The figure as people read it.
    pub shown: String,
    /// Which cycle, which site, and why.
    pub reason: String,
}

fn rate(bps: f64) -> String {
    format!("{}/s", format_bytes(bps as i64))
}

/// One measured figure: value, which cycle, and a phrase that explains it.
struct Measure {
    value: f64,
    cycle: Option<u32>,
    detail: String,
}

/// The in-use heap's rate at the end of the cycle, from the cycle's reading: the episode's
/// rate while it still went on (rising into the death, or at the last capture), else 0.
pub fn cycle_growth(c: &CycleGrowth) -> f64 {
    c.reading.as_ref().map_or(0.0, |r| r.rate_now())
}

/// The growth rule's words for a cycle, from its reading.
fn growth_words(c: &CycleGrowth) -> String {
    let Some(r) = &c.reading else {
        return "in-use heap did not rise".into();
    };
    let top = c.rise_sites().first().map_or(String::new(), |s| {
        format!(", {:.0} % of the rise in {}", s.share * 100.0, s.name)
    });
    if r.ongoing {
        let end = match c.died_after_s.filter(|_| c.end.is_death()) {
            Some(d) if c.killed => format!(" until it was OOM-killed at {d:.1} s"),
            Some(d) => format!(" until it died at {d:.1} s"),
            None => " to the last capture".into(),
        };
        format!(
            "in-use heap grew {} from {:.1} s{end}{top}",
            rate(r.bytes_per_sec),
            r.onset_s
        )
    } else {
        format!(
            "in-use heap not growing at the end: it rose {} from {:.1} to {:.1} s{top}, then held or fell for {:.1} s",
            rate(r.bytes_per_sec),
            r.onset_s,
            r.end_s,
            r.held_s.unwrap_or(0.0)
        )
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

fn measure(rule: &Rule, f: &Findings) -> Result<Option<Measure>, String> {
    let cycles = &f.growth.cycles;
    let per_cycle = |value: &dyn Fn(&CycleGrowth) -> Option<(f64, String)>| {
        cycles
            .iter()
            .filter_map(|c| {
                value(c).map(|(v, detail)| Measure {
                    value: v,
                    cycle: Some(c.index),
                    detail,
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
                Some((cycle_growth(c), growth_words(c)))
            }));
            worst(measures, true)
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
                return Err("no memory limit known (collect with --limit or --cgroup)".into());
            }
            let limit = f
                .growth
                .limit_bytes
                .map_or("the limit".to_string(), |l| format_bytes(l as i64));
            let mut hits: Vec<Measure> =
                f.envoy.and_then(envoy_time_to_limit).into_iter().collect();
            hits.extend(per_cycle(&|c| {
                cycle_time_to_limit(c).map(|t| {
                    let how = if c.killed && c.died_after_s.is_some_and(|d| d <= t + 1e-9) {
                        format!("OOM-killed {t:.1} s after the first capture")
                    } else if let Some(a) = c.at_limit.as_ref().filter(|a| a.since_s <= t + 1e-9) {
                        format!("the cgroup sat {}", (f.quoted.at_limit)(a))
                    } else {
                        format!("{limit} reached {t:.1} s after the first capture at this rate")
                    };
                    (t, how)
                })
            }));
            if hits.is_empty() {
                return Ok(Some(Measure {
                    value: f64::INFINITY,
                    cycle: None,
                    detail: "memory does not grow toward the limit".into(),
                }));
            }
            worst(hits, false)
        }
        Metric::Regression => {
            // B died of memory where A did not: the worst regression there is, whatever the
            // heaps read before the death.
            if let Some(c) = f
                .comparison
                .filter(|c| c.b_episode.oom_killed && !c.a_episode.oom_killed)
            {
                return Ok(Some(Measure {
                    value: f64::INFINITY,
                    cycle: Some(c.b_cycle),
                    detail: format!(
                        "B (cycle {} of {}) was OOM-killed at {:.1} s and A, the baseline (cycle {} of {}), was not",
                        c.b_cycle,
                        c.b,
                        c.b_episode.died_s.unwrap_or(c.b_episode.span_s),
                        c.a_cycle,
                        c.a
                    ),
                }));
            }
            let Some(ratio) = f.heap_ratio else {
                return Err("needs --baseline RUN".into());
            };
            let Some(value) = ratio.ratio() else {
                return Err("the baseline has no in-use heap to compare with".into());
            };
            let site = f
                .comparison
                .and_then(|c| c.regressions.first())
                .map_or(String::new(), |r| {
                    format!("; worst site {}: {}", r.name, (f.quoted.why_worse)(r))
                });
            let (this, base) = f.comparison.map_or((String::new(), String::new()), |c| {
                (
                    format!(" (B: cycle {} of {})", c.b_cycle, c.b),
                    format!(" (A: cycle {} of {})", c.a_cycle, c.a),
                )
            });
            Some(Measure {
                value,
                cycle: Some(f.comparison.map_or(1, |c| c.b_cycle)),
                detail: format!(
                    "peak in-use heap {}{this} against {} in the baseline{base} over the first {:.1} s ({value:.2}x){site}",
                    format_bytes(ratio.bytes),
                    format_bytes(ratio.baseline_bytes),
                    ratio.age_s
                ),
            })
        }
        Metric::Goroutines => worst(
            per_cycle(&|c| {
                let per_sec = c.goroutine_growth.iter().map(|g| g.per_sec).sum::<f64>() + 0.0;
                let top = c
                    .goroutine_growth
                    .first()
                    .map_or(String::new(), |g| format!(", fastest in {}", g.name));
                Some((per_sec, format!("goroutines grew {per_sec:.1}/s{top}")))
            }),
            true,
        ),
        Metric::Storm => worst(
            per_cycle(&|c| {
                Some(
                    c.alloc_storms
                        .first()
                        .map_or((0.0, "no allocation storm".to_string()), |s| {
                            (
                                s.peak_bytes_per_sec,
                                format!(
                                    "{} allocated {} (typically {})",
                                    s.name,
                                    rate(s.peak_bytes_per_sec),
                                    rate(s.typical_bytes_per_sec)
                                ),
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
                    detail: format!("in-use heap reached {}", format_bytes(bytes)),
                })
                .collect(),
            true,
        ),
        Metric::Memory => {
            let seen = per_cycle(&|c| {
                c.memory_peak.map(|m| {
                    (
                        m as f64,
                        format!("process memory reached {}", format_bytes(m as i64)),
                    )
                })
            });
            if seen.is_empty() {
                return Err("no process memory sampled (collect with --pid or --cgroup)".into());
            }
            worst(seen, true)
        }
        Metric::Kills => {
            let killed: Vec<u32> = cycles
                .iter()
                .filter(|c| c.killed)
                .map(|c| c.index)
                .collect();
            Some(Measure {
                value: killed.len() as f64,
                cycle: killed.first().copied(),
                detail: format!(
                    "{} OOM kill(s): the kernel's oom_kill counter rose (a SIGKILL alone is not counted)",
                    killed.len()
                ),
            })
        }
        Metric::Restarts => {
            let n = cycles.len().saturating_sub(1);
            let envoy = f.envoy.map_or(0, |e| e.restarts);
            Some(if envoy > n {
                Measure {
                    value: envoy as f64,
                    cycle: None,
                    detail: format!("Envoy's server.uptime dropped {envoy} time(s)"),
                }
            } else {
                Measure {
                    value: n as f64,
                    cycle: None,
                    detail: format!("{} boot cycles, so {n} restart(s)", cycles.len()),
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
                        detail: format!(
                            "Envoy: live data is {:.1} % of the mapped heap (naive allocated / \
                             heap_size {:.1} %), {} held and not returned",
                            live * 100.0,
                            h.naive_share * 100.0,
                            format_bytes(clamp(h.held_not_returned.unwrap_or(0)))
                        ),
                    }),
                    None => naive_only = Some(h.naive_share),
                }
            }
            seen.extend(per_cycle(&|c| {
                let m = c.memstats.as_ref()?;
                let live = m.live_share?;
                let held = m.held_not_returned.map_or(String::new(), |h| {
                    format!(", {} held and not returned", format_bytes(h))
                });
                Some((
                    live,
                    format!(
                        "MemStats: HeapAlloc is {:.1} % of the heap the runtime retains{held}",
                        live * 100.0
                    ),
                ))
            }));
            if seen.is_empty() {
                return Err(match naive_only {
                    Some(naive) => format!(
                        "Envoy reported only the /stats gauges: the naive share is {:.1} %, \
                         the live share (needs /memory's pageheap_unmapped) is unknown",
                        naive * 100.0
                    ),
                    None => "no live-share figures (needs Envoy's /memory or Go MemStats: \
                             collect from an http:// or agent: target with --memstats-interval \
                             above 0, 5s by default)"
                        .into(),
                });
            }
            worst(seen, false)
        }
    };
    Ok(found)
}

fn show(metric: Metric, value: f64) -> String {
    match metric {
        Metric::Growth | Metric::Storm => rate(value),
        Metric::Heap | Metric::Memory => format_bytes(value as i64),
        Metric::TimeToLimit if value.is_infinite() => "never".into(),
        Metric::TimeToLimit => format!("{value:.1} s"),
        Metric::Regression if value.is_infinite() => "B OOM-killed".into(),
        Metric::Regression => format!("{value:.2}x"),
        Metric::Goroutines => format!("{value:.1}/s"),
        Metric::Kills | Metric::Restarts => format!("{value:.0}"),
        Metric::LiveShare => format!("{:.1} %", value * 100.0),
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Envoy's growth as the growth rule sees it: the fitted rate of the figure compared with the
/// limit when it grows steadily, else zero.
fn envoy_growth(e: &EnvoyReport) -> Option<Measure> {
    let g = e.growth.as_ref()?;
    let value = if g.growing { g.bytes_per_sec } else { 0.0 };
    let detail = if g.growing {
        format!(
            "Envoy's {} grew {} (R² {:.2}), {} → {}",
            g.series,
            rate(g.bytes_per_sec),
            g.fit_r2,
            format_bytes(clamp(g.first)),
            format_bytes(clamp(g.last))
        )
    } else {
        format!(
            "Envoy's {} does not grow steadily ({}, R² {:.2})",
            g.series,
            rate(g.bytes_per_sec),
            g.fit_r2
        )
    };
    Some(Measure {
        value,
        cycle: None,
        detail,
    })
}

/// When Envoy meets the limit, counted like a boot cycle's: from its first snapshot since the
/// last restart.
fn envoy_time_to_limit(e: &EnvoyReport) -> Option<Measure> {
    let g = e.growth.as_ref()?;
    let left = g.limit_in_s?;
    let limit = g
        .limit
        .map_or("the limit".to_string(), |l| format_bytes(clamp(l)));
    let t = e.span_s + left;
    let detail = if left <= 0.0 {
        format!("Envoy's {} is at {limit} already", g.series)
    } else {
        format!(
            "Envoy's {} reaches {limit} {t:.1} s after the first snapshot at {} ({} after the last)",
            g.series,
            rate(g.bytes_per_sec),
            super::triage::format_span(left)
        )
    };
    Some(Measure {
        value: t,
        cycle: None,
        detail,
    })
}

/// Checks one rule.
pub fn evaluate(rule: &Rule, findings: &Findings) -> Outcome {
    let measured = match measure(rule, findings) {
        Ok(m) => m,
        Err(why) => {
            return Outcome {
                rule: rule.text.clone(),
                status: Status::Unknown,
                value: None,
                shown: "-".into(),
                reason: why,
            };
        }
    };
    let Some(m) = measured else {
        return Outcome {
            rule: rule.text.clone(),
            status: Status::Unknown,
            value: None,
            shown: "-".into(),
            reason: "the run has no boot cycle with captures".into(),
        };
    };
    let above = trips_above(rule.metric);
    let tripped = if above {
        m.value > rule.bar
    } else {
        m.value < rule.bar
    };
    let place = m
        .cycle
        .filter(|_| rule.metric != Metric::Regression)
        .map_or(String::new(), |c| format!("boot cycle {c}: "));
    Outcome {
        rule: rule.text.clone(),
        status: if tripped { Status::Fail } else { Status::Pass },
        value: m
            .value
            .is_finite()
            .then_some((m.value * 1000.0).round() / 1000.0),
        shown: show(rule.metric, m.value),
        reason: format!("{place}{}", m.detail),
    }
}

pub fn evaluate_all(rules: &[Rule], findings: &Findings) -> Vec<Outcome> {
    rules.iter().map(|r| evaluate(r, findings)).collect()
}

/// The one line CI prints when rules trip, `None` when none did.
pub fn failure_line(outcomes: &[Outcome]) -> Option<String> {
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status == Status::Fail)
        .map(|o| format!("{} tripped ({}): {}", o.rule, o.shown, o.reason))
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// Largest in-use heap captured in each boot cycle, from the manifest totals.
pub fn peak_heap(records: &[CaptureRecord]) -> Vec<(u32, i64)> {
    let mut peaks: std::collections::BTreeMap<u32, i64> = std::collections::BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.is_ok() && r.kind == RecordKind::Heap)
    {
        if let Some(&v) = r.totals.get("inuse_space") {
            let p = peaks.entry(r.cycle).or_insert(v);
            *p = (*p).max(v);
        }
    }
    peaks.into_iter().collect()
}

/// Whether a rule needs a baseline run to be checked.
pub fn needs_baseline(rule: &Rule) -> bool {
    rule.metric == Metric::Regression
}

#[cfg(test)]
mod tests;
