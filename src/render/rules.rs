//! The words of the `--fail-on` rules' outcomes: the figure as people read it (`shown`), the
//! reason (which cycle, which site, and why), the one line CI prints when rules trip, and
//! the outcome as JSON keeps it. The rules themselves (`analyse::rules`) give figures and
//! typed evidence only; where a reason quotes another output, it quotes that output's own
//! words (`memory::at_limit_words`, `compare::why_worse`).

use serde::Serialize;

use crate::analyse::cluster::NodeOutcomes;
use crate::analyse::rules::{Evidence, GrowthEnd, Metric, Missing, Outcome, Status, TopSite};
use crate::analyse::triage::format_span;
use crate::units::format_bytes;

use super::{compare, memory};

fn rate(bps: f64) -> String {
    format!("{}/s", format_bytes(bps as i64))
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The figure as people read it: "7.2 s", "1.00 MiB/s", "never", "-" when unknown.
pub fn shown(o: &Outcome) -> String {
    let Some(value) = o.measured else {
        return "-".into();
    };
    match o.metric {
        Metric::Growth | Metric::Storm => rate(value),
        Metric::Heap | Metric::Memory => format_bytes(value as i64),
        Metric::TimeToLimit if value.is_infinite() => "never".into(),
        Metric::TimeToLimit => format!("{value:.1} s"),
        Metric::Regression if value.is_infinite() => "B OOM-killed".into(),
        Metric::Regression | Metric::MemoryRegression | Metric::AnonRegression => {
            format!("{value:.2}x")
        }
        Metric::Goroutines => format!("{value:.1}/s"),
        Metric::Kills | Metric::Restarts => format!("{value:.0}"),
        Metric::LiveShare => format!("{:.1} %", value * 100.0),
    }
}

/// Which cycle, which site, and why: "boot cycle 2: in-use heap grew …".
pub fn reason(o: &Outcome) -> String {
    let not_judged = o.status == Status::Unknown && o.evidence.is_chord();
    let place = o
        .cycle
        .filter(|_| {
            !matches!(
                o.metric,
                Metric::Regression | Metric::MemoryRegression | Metric::AnonRegression
            ) && (o.status != Status::Unknown || not_judged)
        })
        .map_or(String::new(), |c| format!("boot cycle {c}: "));
    if not_judged {
        return format!(
            "{place}not judged: {}; a rise the heap profile published twice is judged by \
             time-to-limit< and kills>, not by its rate",
            evidence_words(&o.evidence)
        );
    }
    format!("{place}{}", evidence_words(&o.evidence))
}

fn top_words(top: &Option<TopSite>) -> String {
    top.as_ref().map_or(String::new(), |s| {
        format!(", {:.0} % of the rise in {}", s.share * 100.0, s.name)
    })
}

fn limit_words(limit: Option<u64>) -> String {
    limit.map_or("the limit".to_string(), |l| format_bytes(clamp(l)))
}

fn missing_words(why: &Missing) -> String {
    match why {
        Missing::NoCycles => "the run has no boot cycle with captures".into(),
        Missing::NoLimit => "no memory limit known (collect with --limit or --cgroup)".into(),
        Missing::NoBaseline => "needs --baseline RUN".into(),
        Missing::BaselineHasNoHeap => "the baseline has no in-use heap to compare with".into(),
        Missing::NoMemory => "no process memory sampled (collect with --pid or --cgroup)".into(),
        Missing::NoAnonymousMemory => {
            "no cgroup memory.stat sampled on both sides (collect with --cgroup, or heapwatch run)"
                .into()
        }
        Missing::EnvoyGaugesOnly { naive_share } => format!(
            "Envoy reported only the /stats gauges: the naive share is {:.1} %, \
             the live share (needs /memory's pageheap_unmapped) is unknown",
            naive_share * 100.0
        ),
        Missing::NoLiveShare => "no live-share figures (needs Envoy's /memory or Go MemStats: \
                                 collect from an http:// or agent: target with --memstats-interval \
                                 above 0, 5s by default)"
            .into(),
    }
}

fn evidence_words(e: &Evidence) -> String {
    match e {
        Evidence::Missing(why) => missing_words(why),
        Evidence::HeapDidNotRise => "in-use heap did not rise".into(),
        Evidence::HeapGrows {
            bytes_per_sec,
            onset_s,
            end_s,
            points,
            end,
            top,
        } => {
            // The rate holds over the publications it was taken from, and no further: a rise
            // seen in its last 0.4 s is not stretched to the kill.
            let over = if e.is_chord() {
                format!(
                    "from {onset_s:.1} to {end_s:.1} s between two publications (a chord, no fit to judge)"
                )
            } else {
                format!("from {onset_s:.1} to {end_s:.1} s ({points} publications)")
            };
            // Past the rise's last publication the profile may say nothing more (no GC
            // finished): say so rather than leave a gap that reads as a stop.
            let silent = |at_s: f64| {
                if at_s - end_s >= 1.0 {
                    "no published profile describes a later moment; "
                } else {
                    ""
                }
            };
            let end = match end {
                GrowthEnd::OomKilled { at_s } => {
                    format!("; {}OOM-killed at {at_s:.1} s", silent(*at_s))
                }
                GrowthEnd::Died { at_s } => format!("; {}died at {at_s:.1} s", silent(*at_s)),
                GrowthEnd::LastCapture => ", still rising at the last capture".into(),
            };
            format!(
                "in-use heap grew {} {over}{}{end}",
                rate(*bytes_per_sec),
                top_words(top)
            )
        }
        Evidence::HeapHeld {
            bytes_per_sec,
            onset_s,
            end_s,
            held_s,
            top,
        } => format!(
            "in-use heap not growing at the end: it rose {} from {onset_s:.1} to {end_s:.1} s{}, then held or fell for {held_s:.1} s",
            rate(*bytes_per_sec),
            top_words(top)
        ),
        Evidence::EnvoyGrowth {
            series,
            bytes_per_sec,
            fit_r2,
            first,
            last,
            growing: true,
        } => format!(
            "Envoy's {series} grew {} (R² {fit_r2:.2}), {} → {}",
            rate(*bytes_per_sec),
            format_bytes(clamp(*first)),
            format_bytes(clamp(*last))
        ),
        Evidence::EnvoyGrowth {
            series,
            bytes_per_sec,
            fit_r2,
            growing: false,
            ..
        } => format!(
            "Envoy's {series} does not grow steadily ({}, R² {fit_r2:.2})",
            rate(*bytes_per_sec)
        ),
        Evidence::OomKilled { t } => format!("OOM-killed {t:.1} s after the first capture"),
        Evidence::SatAtLimit(a) => memory::cgroup_at_limit(a),
        Evidence::LimitForecast { limit, t } => format!(
            "{} reached {t:.1} s after the first capture at this rate",
            limit_words(*limit)
        ),
        Evidence::EnvoyAtLimit { series, limit } => {
            format!("Envoy's {series} is at {} already", limit_words(*limit))
        }
        Evidence::EnvoyReaches {
            series,
            limit,
            t,
            bytes_per_sec,
            left_s,
        } => format!(
            "Envoy's {series} reaches {} {t:.1} s after the first snapshot at {} ({} after the last)",
            limit_words(*limit),
            rate(*bytes_per_sec),
            format_span(*left_s)
        ),
        Evidence::NoGrowthTowardLimit => "memory does not grow toward the limit".into(),
        Evidence::BOomKilled { sides, died_s } => format!(
            "B (cycle {} of {}) was OOM-killed at {died_s:.1} s and A, the baseline (cycle {} of {}), was not",
            sides.b_cycle, sides.b, sides.a_cycle, sides.a
        ),
        Evidence::PeakAgainstBaseline {
            ratio,
            sides,
            worst,
        } => {
            let (this, base) = sides.as_ref().map_or((String::new(), String::new()), |s| {
                (
                    format!(" (B: cycle {} of {})", s.b_cycle, s.b),
                    format!(" (A: cycle {} of {})", s.a_cycle, s.a),
                )
            });
            let site = worst.as_ref().map_or(String::new(), |r| {
                format!("; worst site {}: {}", r.name, compare::why_worse(r))
            });
            format!(
                "peak in-use heap {}{this} against {} in the baseline{base} over the first {:.1} s ({:.2}x){site}",
                format_bytes(ratio.bytes),
                format_bytes(ratio.baseline_bytes),
                ratio.age_s,
                ratio.ratio().unwrap_or(0.0)
            )
        }
        Evidence::MemoryAgainstBaseline {
            of,
            bytes,
            baseline_bytes,
            sides,
        } => format!(
            "{of} peaked at {} (B: cycle {} of {}) against {} in the baseline (A: cycle {} of {}) ({:.2}x)",
            format_bytes(*bytes),
            sides.b_cycle,
            sides.b,
            format_bytes(*baseline_bytes),
            sides.a_cycle,
            sides.a,
            *bytes as f64 / *baseline_bytes as f64
        ),
        Evidence::Goroutines { per_sec, fastest } => {
            let top = fastest
                .as_ref()
                .map_or(String::new(), |name| format!(", fastest in {name}"));
            format!("goroutines grew {per_sec:.1}/s{top}")
        }
        Evidence::NoStorm => "no allocation storm".into(),
        Evidence::Storm {
            name,
            peak_bytes_per_sec,
            typical_bytes_per_sec,
        } => format!(
            "{name} allocated {} (typically {})",
            rate(*peak_bytes_per_sec),
            rate(*typical_bytes_per_sec)
        ),
        Evidence::HeapReached { bytes } => format!("in-use heap reached {}", format_bytes(*bytes)),
        Evidence::MemoryReached { bytes, cgroup } => format!(
            "{} memory reached {}",
            if *cgroup { "cgroup" } else { "process" },
            format_bytes(clamp(*bytes))
        ),
        Evidence::Kills { n: 0, .. } => {
            "no OOM kill: the kernel's oom_kill counter never rose (a SIGKILL alone is not counted)"
                .to_string()
        }
        Evidence::Kills { n, cycles } => format!(
            "{n} OOM kill{}{}: the kernel's oom_kill counter rose (a SIGKILL alone is not counted)",
            if *n == 1 { "" } else { "s" },
            match cycles.as_slice() {
                [] => String::new(),
                [one] => format!(", ending boot cycle {one}"),
                [rest @ .., last] => format!(
                    ", ending boot cycles {} and {last}",
                    rest.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        ),
        Evidence::Restarts { cycles } => format!(
            "{cycles} boot cycles, so {} restart(s)",
            cycles.saturating_sub(1)
        ),
        Evidence::EnvoyRestarts { n } => format!("Envoy's server.uptime dropped {n} time(s)"),
        Evidence::EnvoyLiveShare {
            live,
            naive,
            held_not_returned,
        } => format!(
            "Envoy: live data is {:.1} % of the mapped heap (naive allocated / \
             heap_size {:.1} %), {} held and not returned",
            live * 100.0,
            naive * 100.0,
            format_bytes(clamp(*held_not_returned))
        ),
        Evidence::GoLiveShare {
            live,
            held_not_returned,
            at_s,
        } => {
            let held = held_not_returned.map_or(String::new(), |h| {
                format!(", {} held and not returned", format_bytes(h))
            });
            format!(
                "MemStats read at {at_s:.1} s: HeapAlloc is {:.1} % of the heap the runtime \
                 retains{held}",
                live * 100.0
            )
        }
    }
}

/// The one line CI prints when rules trip, `None` when none did.
pub fn failure_line(outcomes: &[Outcome]) -> Option<String> {
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status == Status::Fail)
        .map(|o| format!("{} tripped ({}): {}", o.rule, shown(o), reason(o)))
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// The one line CI prints when rules trip on any node of a cluster, each failure led by the
/// node that crossed the bar (`ctrl2: growth>1MiB/s tripped …`); `None` when none did.
pub fn cluster_failure_line(nodes: &[NodeOutcomes]) -> Option<String> {
    let failed: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            n.outcomes
                .iter()
                .filter(|o| o.status == Status::Fail)
                .map(move |o| {
                    format!(
                        "{}: {} tripped ({}): {}",
                        n.node,
                        o.rule,
                        shown(o),
                        reason(o)
                    )
                })
        })
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// An outcome as JSON keeps it: the rule, its status, the figure (finite, three decimals), and
/// its words.
#[derive(Serialize)]
pub struct OutcomeView<'a> {
    rule: &'a str,
    status: Status,
    value: Option<f64>,
    shown: String,
    reason: String,
}

pub fn outcome_view(o: &Outcome) -> OutcomeView<'_> {
    OutcomeView {
        rule: &o.rule,
        status: o.status,
        value: o.value(),
        shown: shown(o),
        reason: reason(o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::rules::{Evidence, Metric};

    fn kills(rule: &str, status: Status, n: usize) -> Outcome {
        Outcome {
            rule: rule.into(),
            metric: Metric::Kills,
            status,
            measured: Some(n as f64),
            cycle: Some(2),
            evidence: Evidence::Kills {
                n,
                cycles: Vec::new(),
            },
        }
    }

    #[test]
    fn the_failure_line_names_each_node_that_crossed_a_bar() {
        let nodes = vec![
            NodeOutcomes {
                node: "ctrl1".into(),
                outcomes: vec![kills("kills>0", Status::Pass, 0)],
            },
            NodeOutcomes {
                node: "ctrl2".into(),
                outcomes: vec![kills("kills>0", Status::Fail, 1)],
            },
        ];
        assert_eq!(
            cluster_failure_line(&nodes).as_deref(),
            Some(
                "ctrl2: kills>0 tripped (1): boot cycle 2: 1 OOM kill: the kernel's oom_kill \
                 counter rose (a SIGKILL alone is not counted)"
            )
        );
        assert_eq!(cluster_failure_line(&nodes[..1]), None);
    }

    /// NATS under a flood (issue 33, items 13 and 14): a rate from two publications is said as
    /// the chord it is, over the span it covers, and not stretched to the kill.
    #[test]
    fn a_growth_rate_is_said_over_its_own_span_and_a_chord_as_a_chord() {
        let grows = |points: usize, end_s: f64| Outcome {
            rule: "growth>5MiB/s".into(),
            metric: Metric::Growth,
            status: Status::Fail,
            measured: Some(247.0 * 1048576.0),
            cycle: Some(1),
            evidence: Evidence::HeapGrows {
                bytes_per_sec: 247.0 * 1048576.0,
                onset_s: 3.0,
                end_s,
                points,
                end: crate::analyse::rules::GrowthEnd::OomKilled { at_s: 3.9 },
                top: None,
            },
        };
        assert_eq!(
            reason(&grows(2, 3.4)),
            "boot cycle 1: in-use heap grew 247 MiB/s from 3.0 to 3.4 s between two \
             publications (a chord, no fit to judge); OOM-killed at 3.9 s"
        );
        let later = reason(&grows(5, 2.8));
        assert!(
            later.contains("(5 publications); no published profile describes a later moment; OOM-killed at 3.9 s"),
            "{later}"
        );
        // Over the bar, a chord is not judged (item 13): no figure quoted, the chord and why
        // in the line, and nothing tripped.
        let not_judged = Outcome {
            status: Status::Unknown,
            measured: None,
            ..grows(2, 3.4)
        };
        assert_eq!(shown(&not_judged), "-");
        assert_eq!(
            reason(&not_judged),
            "boot cycle 1: not judged: in-use heap grew 247 MiB/s from 3.0 to 3.4 s between two \
             publications (a chord, no fit to judge); OOM-killed at 3.9 s; a rise the heap \
             profile published twice is judged by time-to-limit< and kills>, not by its rate"
        );
        assert_eq!(failure_line(std::slice::from_ref(&not_judged)), None);
    }

    #[test]
    fn an_unknown_outcome_shows_a_dash_and_says_what_is_missing() {
        let o = Outcome {
            rule: "regression>1.5x".into(),
            metric: Metric::Regression,
            status: Status::Unknown,
            measured: None,
            cycle: None,
            evidence: Evidence::Missing(Missing::NoBaseline),
        };
        assert_eq!(
            (shown(&o), reason(&o)),
            ("-".into(), "needs --baseline RUN".into())
        );
        let json = serde_json::to_string(&outcome_view(&o)).unwrap();
        assert_eq!(
            json,
            r#"{"rule":"regression>1.5x","status":"unknown","value":null,"shown":"-","reason":"needs --baseline RUN"}"#
        );
    }

    #[test]
    fn live_share_without_figures_names_a_flag_collect_accepts() {
        let words = missing_words(&Missing::NoLiveShare);
        assert!(words.contains("--memstats-interval"), "{words}");
        assert!(!words.contains("--profiles heap,memstats"), "{words}");
    }

    #[test]
    fn kills_in_several_cycles_name_each_and_no_one_cycle() {
        let words = evidence_words(&Evidence::Kills {
            n: 3,
            cycles: vec![1, 2, 4],
        });
        assert!(
            words.starts_with("3 OOM kills, ending boot cycles 1, 2 and 4: "),
            "{words}"
        );
        let one = evidence_words(&Evidence::Kills {
            n: 1,
            cycles: Vec::new(),
        });
        assert!(one.starts_with("1 OOM kill: "), "{one}");
        let none = evidence_words(&Evidence::Kills {
            n: 0,
            cycles: Vec::new(),
        });
        assert!(
            none.starts_with("no OOM kill: the kernel's oom_kill counter never rose"),
            "{none}"
        );
    }

    #[test]
    fn memory_reached_names_what_was_measured() {
        let cgroup = evidence_words(&Evidence::MemoryReached {
            bytes: 128 << 20,
            cgroup: true,
        });
        assert_eq!(cgroup, "cgroup memory reached 128 MiB");
        let process = evidence_words(&Evidence::MemoryReached {
            bytes: 128 << 20,
            cgroup: false,
        });
        assert_eq!(process, "process memory reached 128 MiB");
    }
}
