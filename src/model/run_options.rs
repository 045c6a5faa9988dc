//! The `options` of `run.json`: how a run was collected (`collect`, `run`, `demo` each write
//! the ones they have). Every field is optional, a field of the wrong type reads as absent, and
//! fields this version does not know are kept as they are, so any run.json stays readable.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::units::parse_quantity;

/// Time between heap captures when `--interval` is not given, the one place it is written:
/// the flag's default, the collector's default configuration, and what a replay assumes of a
/// capture that recorded none.
pub const DEFAULT_INTERVAL_MS: u64 = 500;
/// [`DEFAULT_INTERVAL_MS`] as the `--interval` flag's default text.
pub const DEFAULT_INTERVAL_FLAG: &str = "500ms";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunOptions {
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub interval_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub burst_interval_ms: Option<u64>,
    /// Share of the limit past which burst mode starts.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub burst_at: Option<f64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_duty: Option<f64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_backoff: Option<u32>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_limit: Option<CpuLimit>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub profiles: Option<Vec<String>>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub memstats_interval_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_interval_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub pid: Option<u32>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroup: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub agent_dir: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_disk: Option<u64>,
    /// Heap profiles were asked for with `?gc=1` (a GC before each).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub gc: Option<bool>,
    /// `heapwatch run`: the command and its arguments.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub command: Option<Vec<String>>,
    /// `heapwatch run`: how the command was confined (`v1`, `v2`, `none`).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub confinement: Option<String>,
    /// `run --oom-hold`: what holding the command at its OOM kill for a capture could do
    /// here (held on cgroup v1, not possible on v2 or without a cgroup, or off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_hold: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub restarts: Option<u32>,
    /// `heapwatch run --restart-policy`: Always, OnFailure or Never.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub restart_policy: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub backoff_ms: Option<u64>,
    /// `heapwatch run --also` targets.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub also: Option<Vec<String>>,
    /// Where memory.jsonl came from when it is not the kernel's view (`heapwatch demo`).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_source: Option<String>,
    /// `--own` of `collect`, `run`, `watch`: module path prefixes of the user's own code, as
    /// given (`go.etcd.io/`). Every analysis of the run names its sites by them unless given its
    /// own `--own`; the collector's site index is named by them. Absent: none were named.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub own: Option<Vec<String>>,
    /// The labels the run is pushed to Pyroscope with (`--service`, `--push-label`), kept so a
    /// later push of the run uses them.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub push: Option<PushSettings>,
    /// Options this version does not know, kept so a rewrite of run.json loses nothing.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// The push labels chosen for a run: `service_name` and the extra labels (`--push-label`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PushSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `cpu_limit` as it was written: cores as a number (`--cpu-limit 2`) or a Kubernetes quantity
/// (`"500m"`). Kept as written so it is shown as written; [`CpuLimit::cores`] is the one
/// reading of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CpuLimit {
    Cores(serde_json::Number),
    Quantity(String),
}

impl CpuLimit {
    /// Cores, when the limit is a positive finite number or quantity.
    pub fn cores(&self) -> Option<f64> {
        let cores = match self {
            CpuLimit::Cores(n) => n.as_f64()?,
            CpuLimit::Quantity(s) => parse_quantity(s).ok()?,
        };
        (cores.is_finite() && cores > 0.0).then_some(cores)
    }
}

impl From<f64> for CpuLimit {
    fn from(cores: f64) -> CpuLimit {
        serde_json::Number::from_f64(cores)
            .map_or_else(|| CpuLimit::Quantity(cores.to_string()), CpuLimit::Cores)
    }
}

impl fmt::Display for CpuLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuLimit::Cores(n) => write!(f, "{n}"),
            CpuLimit::Quantity(s) => f.write_str(s),
        }
    }
}

impl RunOptions {
    /// The CPU limit in cores (`cpu_limit` as a number or a quantity such as "500m").
    pub fn cpu_cores(&self) -> Option<f64> {
        self.cpu_limit.as_ref().and_then(CpuLimit::cores)
    }

    /// For `RunInfo::options`: anything but an object (null, a run.json of an older version)
    /// reads as no options rather than making run.json unreadable.
    pub fn tolerant<'de, D: Deserializer<'de>>(d: D) -> Result<RunOptions, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(match value {
            Value::Object(_) => serde_json::from_value(value).unwrap_or_default(),
            _ => RunOptions::default(),
        })
    }
}

/// The module prefixes that named a run's sites as the user's own code, and where they came
/// from: an analysis says both, so a report read later says which frames it calls the user's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnNamed {
    pub prefixes: Vec<String>,
    pub from: OwnFrom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnFrom {
    /// Kept in run.json by the recording's `--own` (`collect`, `run`, `watch`).
    Recorded,
    /// The analysis's own `--own`, which replaced any recorded.
    Given,
}

/// Module path prefixes in one spelling, as `OwnCode::named` reads them: whatever the order,
/// repeats and trailing `/` they were given with, sorted, once each, each ending in `/` (whole
/// path elements): `example.org,example.org/` is `example.org/`.
pub fn canonical_prefixes(prefixes: &[String]) -> Vec<String> {
    let mut out: Vec<String> = prefixes
        .iter()
        .map(|p| p.trim().trim_end_matches('/'))
        .filter(|p| !p.is_empty())
        .map(|p| format!("{p}/"))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether two lists of module path prefixes name the same own code.
pub fn same_prefixes(a: &[String], b: &[String]) -> bool {
    canonical_prefixes(a) == canonical_prefixes(b)
}

/// A field of the wrong type (or null) reads as absent.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_limit_reads_the_same_as_a_number_or_a_quantity() {
        let read = |json: &str| {
            serde_json::from_str::<RunOptions>(json)
                .unwrap()
                .cpu_cores()
        };
        assert_eq!(read(r#"{"cpu_limit": 2}"#), Some(2.0));
        assert_eq!(read(r#"{"cpu_limit": 0.5}"#), Some(0.5));
        assert_eq!(read(r#"{"cpu_limit": "500m"}"#), Some(0.5));
        assert_eq!(read(r#"{"cpu_limit": null}"#), None);
        assert_eq!(read(r#"{"cpu_limit": 0}"#), None);
        assert_eq!(read(r#"{"cpu_limit": "lots"}"#), None);
    }

    #[test]
    fn unknown_and_mistyped_fields_never_make_options_unreadable() {
        let text = r#"{"interval_ms": "soon", "gc": true, "future": {"x": 1}}"#;
        let o: RunOptions = serde_json::from_str(text).unwrap();
        assert_eq!(o.interval_ms, None);
        assert_eq!(o.gc, Some(true));
        let again = serde_json::to_value(&o).unwrap();
        assert_eq!(again["future"]["x"], 1);
        let shown = serde_json::from_str::<RunOptions>(r#"{"cpu_limit": "500m"}"#).unwrap();
        assert_eq!(shown.cpu_limit.unwrap().to_string(), "500m");
    }

    #[test]
    fn own_prefixes_round_trip_and_a_run_json_without_them_names_none() {
        let given = RunOptions {
            own: Some(vec!["go.etcd.io/".into(), "github.com/openziti/".into()]),
            ..RunOptions::default()
        };
        let text = serde_json::to_string(&given).unwrap();
        assert!(
            text.contains(r#""own":["go.etcd.io/","github.com/openziti/"]"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<RunOptions>(&text).unwrap(), given);
        // Older run.json files: no field, or one of the wrong type, is none named; and none
        // named writes no field.
        for old in [
            r#"{"interval_ms": 500}"#,
            r#"{"own": "go.etcd.io/"}"#,
            r#"{"own": null}"#,
        ] {
            let o: RunOptions = serde_json::from_str(old).unwrap();
            assert_eq!(o.own, None, "{old}");
        }
        let none = serde_json::to_string(&RunOptions::default()).unwrap();
        assert!(!none.contains("own"), "{none}");
    }

    #[test]
    fn prefixes_are_the_same_in_any_order_and_spelling() {
        let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(same_prefixes(
            &v(&["go.etcd.io/", "b.io"]),
            &v(&["b.io/", "go.etcd.io", "b.io"])
        ));
        assert!(same_prefixes(&v(&[]), &v(&[" "])));
        assert!(!same_prefixes(&v(&["go.etcd.io/"]), &v(&[])));
        assert!(!same_prefixes(
            &v(&["go.etcd.io/"]),
            &v(&["go.etcd.io/raft"])
        ));
        assert_eq!(
            canonical_prefixes(&v(&["example.org", "b.io ", "example.org/", "example.org"])),
            ["b.io/", "example.org/"]
        );
    }

    #[test]
    fn the_interval_flag_default_is_the_default_interval() {
        assert_eq!(
            crate::units::parse_duration(DEFAULT_INTERVAL_FLAG).unwrap(),
            std::time::Duration::from_millis(DEFAULT_INTERVAL_MS)
        );
    }
}
