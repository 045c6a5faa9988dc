//! CI gates: `--fail-on` rules such as `growth>5MiB/s`, `time-to-limit<60s` or
//! `regression>1.5x`, parsed from text and checked against a run's findings. A rule trips when
//! any boot cycle crosses its bar. Pure: the figures come in, outcomes go out.
//!
//! For a run of an Envoy proxy (manifest records of kind `envoy`) the growth and
//! time-to-limit rules also weigh Envoy's own growth fit, and `live-share<X` checks how much
//! of the mapped heap is live data (Envoy's tcmalloc figures, or Go's MemStats).

use serde::Serialize;

use super::compare::Comparison;
use super::envoy::EnvoyReport;
use super::growth::{CycleGrowth, GrowthReport};
use crate::store::{CaptureRecord, RecordKind};
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

/// Sum of the fitted rates of the sites that grow steadily (the profiler's own site excluded).
pub fn cycle_growth(c: &CycleGrowth) -> f64 {
    // `+ 0.0`: an empty sum is −0.0, which would read "-0 B/s".
    c.sites.iter().map(|s| s.bytes_per_sec).sum::<f64>() + 0.0
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
                let top = c.sites.first().map_or(String::new(), |s| {
                    format!(", fastest {} at {}", s.name, rate(s.bytes_per_sec))
                });
                Some((
                    cycle_growth(c),
                    format!("in-use heap grew {}{top}", rate(cycle_growth(c))),
                ))
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
                        format!("the cgroup sat {}", a.summary)
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
                    format!("; worst site {}: {}", r.name, r.why)
                });
            Some(Measure {
                value,
                cycle: Some(1),
                detail: format!(
                    "peak in-use heap {} against {} in the baseline over the first {:.1} s ({value:.2}x){site}",
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
                    "{} OOM kill(s): the cgroup's oom_kill counter rose, or heapwatch run saw SIGKILL",
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
                    None => "no live-share figures (needs Envoy's /memory or Go MemStats; \
                             collect with --profiles heap,memstats)"
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
            let p = peaks.entry(r.incarnation).or_insert(v);
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
mod tests {
    use super::*;
    use crate::analyse::growth::{AcrossCycles, SiteGrowth};

    const MIB: f64 = 1024.0 * 1024.0;

    fn cycle(index: u32, growth_mib: f64, killed_at: Option<f64>) -> CycleGrowth {
        CycleGrowth {
            index,
            build: "test".into(),
            breakdown: None,
            at_limit: None,
            memory_peak_anon: None,
            peaks: Default::default(),
            episode: None,
            heap_sustained: false,
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
            heap_first: Some(0),
            heap_last: Some(1),
            total_bytes_per_sec: Some(growth_mib * MIB),
            total_fit_r2: Some(1.0),
            memory_bytes_per_sec: None,
            memory_peak: Some(200 << 20),
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
            verdict: String::new(),
        }
    }

    fn report(cycles: Vec<CycleGrowth>) -> GrowthReport {
        GrowthReport {
            schema: 1,
            limit_bytes: Some(256 << 20),
            across: AcrossCycles {
                cycles: cycles.len(),
                died: 0,
                same_top_site: None,
                ages_s: vec![],
                summary: String::new(),
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
        assert!(o.reason.starts_with("boot cycle 2:"), "{}", o.reason);
        assert!(o.reason.contains("main.leak"), "{}", o.reason);
        assert_eq!(check("growth>50MiB/s", &g, None).status, Status::Pass);

        let o = check("time-to-limit<60s", &g, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.shown, "7.2 s");
        assert!(o.reason.contains("OOM-killed"), "{}", o.reason);
        assert_eq!(check("time-to-limit<5s", &g, None).status, Status::Pass);
        assert_eq!(check("kills>0", &g, None).status, Status::Fail);
        assert_eq!(check("restarts>1", &g, None).status, Status::Pass);
        assert_eq!(check("heap>64MiB", &g, None).status, Status::Fail);
        assert_eq!(check("memory>256MiB", &g, None).status, Status::Pass);
        let line = failure_line(&[check("growth>5MiB/s", &g, None)]).unwrap();
        assert!(!line.contains('\n'));
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
        };
        let o = check("regression>1.5x", &g, Some(&ratio));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.shown, "4.53x");
        assert_eq!(
            check("regression>5x", &g, Some(&ratio)).status,
            Status::Pass
        );
    }

    fn envoy_report(memory: &[&str], limit: Option<u64>) -> EnvoyReport {
        use crate::analyse::envoy::{self, EnvoyLimits};
        use crate::source::envoy::{EnvoyMemory, EnvoySnapshot, EnvoyStats, HeapDumpState};
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
        assert_eq!(o.shown, "0.6 %");
        assert!(
            o.reason.starts_with("Envoy: live data is 0.6 %"),
            "{}",
            o.reason
        );
        let o = check_envoy("live-share<0.6", &g, &live);
        assert_eq!((o.status, o.shown.as_str()), (Status::Pass, "91.5 %"));
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
        assert_eq!(o.shown, "1.00 MiB/s");
        assert!(o.reason.contains("total_physical_bytes"), "{}", o.reason);
        // 110 s of snapshots, then 214 MiB to go at 1 MiB/s.
        let o = check_envoy("time-to-limit<10m", &g, &e);
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(o.shown, "324.0 s");
        assert_eq!(check_envoy("time-to-limit<2m", &g, &e).status, Status::Pass);
    }
}
