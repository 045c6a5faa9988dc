//! Reading `--fail-on` rules: `METRIC>BAR` or `METRIC<BAR`, with the bar in the metric's
//! units (`5MiB/s`, `60s`, `1.5x`, `0.6` or `60%`). The wrong direction or an unknown metric is
//! an error that says what would be right.

use serde::Serialize;
use thiserror::Error;

use crate::units;

/// What a rule measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// In-use heap growth of the steadily growing sites, bytes per second.
    Growth,
    /// Seconds from a cycle's first capture until the memory limit is (or was) reached.
    TimeToLimit,
    /// In-use heap of this build over the baseline's, at the same age of the first cycle.
    Regression,
    /// Peak memory seen from outside (the cgroup's, else the process's) over the baseline's.
    MemoryRegression,
    /// Peak anonymous memory of the cgroup over the baseline's: what page cache cannot explain.
    AnonRegression,
    /// Goroutines added per second by the stacks that keep growing.
    Goroutines,
    /// Peak allocation rate of a storm, bytes per second.
    Storm,
    /// Largest in-use heap captured, bytes.
    Heap,
    /// Largest process / cgroup memory sampled from outside, bytes.
    Memory,
    /// Boot cycles ended by a kernel OOM kill.
    Kills,
    /// Boot cycles after the first (or restarts Envoy's `server.uptime` shows).
    Restarts,
    /// Live data over the heap that is mapped: Envoy's `allocated / (heap_size −
    /// pageheap_unmapped)`, Go's `HeapAlloc / (HeapSys − HeapReleased)`. Low: memory held by
    /// the allocator and not returned dominates.
    LiveShare,
}

struct MetricSpec {
    metric: Metric,
    name: &'static str,
    /// `>`: trips above the bar; `<`: below it.
    above: bool,
    example: &'static str,
}

const METRICS: &[MetricSpec] = &[
    MetricSpec {
        metric: Metric::Growth,
        name: "growth",
        above: true,
        example: "growth>5MiB/s",
    },
    MetricSpec {
        metric: Metric::TimeToLimit,
        name: "time-to-limit",
        above: false,
        example: "time-to-limit<60s",
    },
    MetricSpec {
        metric: Metric::Regression,
        name: "regression",
        above: true,
        example: "regression>1.5x",
    },
    MetricSpec {
        metric: Metric::MemoryRegression,
        name: "memory-regression",
        above: true,
        example: "memory-regression>1.5x",
    },
    MetricSpec {
        metric: Metric::AnonRegression,
        name: "anon-regression",
        above: true,
        example: "anon-regression>1.5x",
    },
    MetricSpec {
        metric: Metric::Goroutines,
        name: "goroutines",
        above: true,
        example: "goroutines>10/s",
    },
    MetricSpec {
        metric: Metric::Storm,
        name: "storm",
        above: true,
        example: "storm>100MiB/s",
    },
    MetricSpec {
        metric: Metric::Heap,
        name: "heap",
        above: true,
        example: "heap>512MiB",
    },
    MetricSpec {
        metric: Metric::Memory,
        name: "memory",
        above: true,
        example: "memory>1GiB",
    },
    MetricSpec {
        metric: Metric::Kills,
        name: "kills",
        above: true,
        example: "kills>0",
    },
    MetricSpec {
        metric: Metric::Restarts,
        name: "restarts",
        above: true,
        example: "restarts>2",
    },
    MetricSpec {
        metric: Metric::LiveShare,
        name: "live-share",
        above: false,
        example: "live-share<0.6",
    },
];

/// Whether a metric trips above its bar (`>`) rather than below it (`<`).
pub(super) fn trips_above(metric: Metric) -> bool {
    METRICS
        .iter()
        .find(|m| m.metric == metric)
        .is_none_or(|m| m.above)
}

/// One `--fail-on` rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// As written, spaces removed.
    pub text: String,
    pub metric: Metric,
    /// In the metric's base unit: bytes, bytes/s, seconds, a ratio, a count.
    pub bar: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("--fail-on {text:?}: {why}")]
pub struct RuleError {
    pub text: String,
    pub why: String,
}

fn known() -> String {
    METRICS
        .iter()
        .map(|m| m.example)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `NAME>VALUE` (or `NAME<VALUE` for time-to-limit).
pub fn parse(text: &str) -> Result<Rule, RuleError> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let err = |why: String| RuleError {
        text: text.to_string(),
        why,
    };
    let Some(at) = compact.find(['>', '<']) else {
        return Err(err(format!(
            "expected NAME>VALUE or NAME<VALUE, one of {}",
            known()
        )));
    };
    let (name, rest) = compact.split_at(at);
    let above = rest.starts_with('>');
    let value = &rest[1..];
    if value.starts_with(['=', '>', '<']) {
        return Err(err("use > or < alone (no >=, <=)".into()));
    }
    let name = name.to_ascii_lowercase();
    let Some(spec) = METRICS.iter().find(|m| m.name == name) else {
        return Err(err(format!("unknown rule {name:?}; known: {}", known())));
    };
    if spec.above != above {
        return Err(err(format!(
            "{} trips when the figure is {} the bar: write {}",
            spec.name,
            if spec.above { "above" } else { "below" },
            spec.example
        )));
    }
    let bar =
        parse_bar(spec.metric, value).map_err(|why| err(format!("{why} ({})", spec.example)))?;
    Ok(Rule {
        text: compact,
        metric: spec.metric,
        bar,
    })
}

fn parse_bar(metric: Metric, value: &str) -> Result<f64, String> {
    let per_second = |v: &str| v.strip_suffix("/s").unwrap_or(v).to_string();
    let number = |v: &str| -> Result<f64, String> {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("{v:?} is not a number"))
    };
    match metric {
        Metric::Growth | Metric::Storm => units::parse_size(&per_second(value)).map(|b| b as f64),
        Metric::Heap | Metric::Memory => units::parse_size(value).map(|b| b as f64),
        Metric::TimeToLimit => units::parse_duration(value).map(|d| d.as_secs_f64()),
        Metric::Regression | Metric::MemoryRegression | Metric::AnonRegression => {
            let v = value.strip_suffix(['x', 'X']).unwrap_or(value);
            let ratio = number(v)?;
            if ratio <= 0.0 {
                return Err("a ratio must be above zero".into());
            }
            Ok(ratio)
        }
        Metric::Goroutines => number(&per_second(value)),
        Metric::Kills | Metric::Restarts => value
            .parse::<u32>()
            .map(f64::from)
            .map_err(|_| format!("{value:?} is not a whole number")),
        Metric::LiveShare => {
            let share = match value.strip_suffix('%') {
                Some(percent) => number(percent)? / 100.0,
                None => number(value)?,
            };
            if share <= 0.0 || share > 1.0 {
                return Err(format!(
                    "{value:?}: a share is above 0 and at most 1 (or 100%)"
                ));
            }
            Ok(share)
        }
    }
}
