//! The push labels a run keeps. `--service` and `--push-label` given to `collect --push` or to
//! `heapwatch push` are written to run.json (`options.push`), and every later push of the run
//! uses them unless its own flags say otherwise: one run stays one set of series, whichever
//! command sends which part of it. A cluster node's name comes from the cluster's run.json.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use std::path::Path;

use super::PushError;
use super::labels::LabelOptions;
use crate::model::run_options::PushSettings;
use crate::store::{self, RUN_FILE, RunInfo};

/// Labels heapwatch sets itself: not for `--push-label`.
const OWN_PREFIX: &str = "heapwatch_";

/// The label flags of one command: what it says over the run's kept settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelFlags {
    /// `--service`.
    pub service: Option<String>,
    /// `--push-label K=V`, in order; an empty value takes a kept label away.
    pub labels: Vec<(String, String)>,
}

impl LabelFlags {
    pub fn is_empty(&self) -> bool {
        self.service.is_none() && self.labels.is_empty()
    }
}

/// Reads `K=V` as `--push-label` takes it: a Prometheus label name that is neither reserved
/// (`__…`) nor one of heapwatch's own (`heapwatch_…`); `service_name=X` is `--service X`.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("--push-label {text:?}: expected NAME=VALUE"))?;
    let name = name.trim();
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "--push-label {text:?}: a label name is letters, digits and _, not starting with a digit"
        ));
    }
    if name.starts_with("__") || name.starts_with(OWN_PREFIX) {
        return Err(format!(
            "--push-label {text:?}: {name} is set by heapwatch or Pyroscope itself"
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// The run's kept settings with the command's flags over them.
pub fn merge(kept: Option<&PushSettings>, flags: &LabelFlags) -> PushSettings {
    let mut settings = kept.cloned().unwrap_or_default();
    if let Some(service) = &flags.service {
        settings.service = Some(service.clone()).filter(|s| !s.is_empty());
    }
    for (name, value) in &flags.labels {
        if name == "service_name" {
            settings.service = Some(value.clone()).filter(|s| !s.is_empty());
        } else if value.is_empty() {
            settings.labels.remove(name);
        } else {
            settings.labels.insert(name.clone(), value.clone());
        }
    }
    settings
}

/// The labels a push of `run` goes with: the run's kept settings, the flags over them, and its
/// node's name when it is a node of a cluster run. When the flags change the kept settings,
/// run.json is rewritten (atomically) so the next push of the run uses the same.
pub fn resolve(run: &Path, flags: &LabelFlags) -> Result<LabelOptions, PushError> {
    let info = read_info(run)?;
    let kept = info.as_ref().and_then(|(i, _)| i.options.push.clone());
    let settings = merge(kept.as_ref(), flags);
    if let Some((_, mut raw)) = info {
        if kept.unwrap_or_default() != settings {
            keep_settings(&mut raw, &settings);
            store::write_info(run, &raw).map_err(|e| PushError::Run {
                path: run.join(RUN_FILE),
                why: e.to_string(),
            })?;
        }
    }
    let service_given =
        flags.service.is_some() || flags.labels.iter().any(|(name, _)| name == "service_name");
    Ok(LabelOptions {
        service: settings.service,
        service_given,
        extra: settings.labels,
        node: node_name(run),
    })
}

/// `settings` written into run.json as read, every other field left as it was (a field this
/// version does not know, or reads leniently, is not lost); the target in its shown form.
fn keep_settings(raw: &mut Value, settings: &PushSettings) {
    let Some(object) = raw.as_object_mut() else {
        return;
    };
    if let Some(Value::String(target)) = object.get_mut("target") {
        *target = crate::source::target::redact(target);
    }
    let options = object
        .entry("options")
        .or_insert_with(|| Value::Object(Map::new()));
    if !options.is_object() {
        *options = Value::Object(Map::new());
    }
    let push = serde_json::to_value(settings).expect("settings are plain data");
    if let Some(options) = options.as_object_mut() {
        if settings == &PushSettings::default() {
            options.remove("push");
        } else {
            options.insert("push".into(), push);
        }
    }
}

/// run.json, typed and as written.
fn read_info(run: &Path) -> Result<Option<(RunInfo, Value)>, PushError> {
    let path = run.join(RUN_FILE);
    let bad = |e: serde_json::Error| PushError::Run {
        path: path.clone(),
        why: e.to_string(),
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let info: RunInfo = serde_json::from_slice(&bytes).map_err(bad)?;
            let raw: Value = serde_json::from_slice(&bytes).map_err(bad)?;
            Ok(Some((info, raw)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PushError::io(&path, e)),
    }
}

/// The name of the node whose directory `run` is, in a cluster run (`CLUSTER/targets/NAME`,
/// named in `CLUSTER/run.json`).
pub fn node_name(run: &Path) -> Option<String> {
    let run = std::fs::canonicalize(run).ok()?;
    let targets = run.parent()?;
    if targets.file_name()? != store::cluster::TARGETS_DIR {
        return None;
    }
    let cluster = targets.parent()?;
    let info = store::cluster::read_cluster(cluster).ok()??;
    let dir_name = run.file_name()?.to_string_lossy().into_owned();
    let by_dir: BTreeMap<String, String> = info
        .targets
        .iter()
        .map(|t| {
            let dir = Path::new(&t.dir)
                .file_name()
                .map_or_else(String::new, |d| d.to_string_lossy().into_owned());
            (dir, t.name.clone())
        })
        .collect();
    by_dir.get(&dir_name).cloned().or(Some(dir_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewriting_the_push_settings_keeps_every_other_field_of_run_json() {
        let dir = tempfile::tempdir().unwrap();
        let original = serde_json::json!({
            "schema": 1,
            "tool": "heapwatch 0.1.0",
            "target": "http://alice:***@127.0.0.1:46001/debug/pprof/heap?token=***",
            "source": "http",
            "started_ms": 1796214470971u64,
            "resumed_ms": [1796214480000u64],
            "options": {
                "burst_at": 0.6,
                "burst_interval_ms": 100,
                "cgroup": "/sys/fs/cgroup/memory/x",
                "gc": "not a bool: read as absent, kept as written",
                "interval_ms": 250,
                "max_disk": 1048576,
                "memstats_interval_ms": 5000,
                "pid": 42,
                "profiles": ["heap", "goroutine"],
                "timeout_ms": 2000,
                "command": ["./ctrl", "-x"],
                "confinement": "v1",
                "restarts": 3,
                "backoff_ms": 500,
                "also": ["http://127.0.0.1:6061"],
                "cpu_limit": "500m",
                "max_duty": 0.05,
                "idle_backoff": 4,
                "memory_interval_ms": 1000,
                "agent_dir": "/var/run/heapwatch",
                "memory_source": "demo",
                "push": {"service": "ctrl", "labels": {"team": "a"}},
                "from_a_later_version": {"x": [1, 2]}
            },
            "limit_bytes": 268435456u64,
            "label": "2.1.0",
            "top_level_from_a_later_version": true
        });
        std::fs::write(
            dir.path().join(RUN_FILE),
            serde_json::to_vec_pretty(&original).unwrap(),
        )
        .unwrap();
        let flags = LabelFlags {
            service: None,
            labels: vec![("env".into(), "prod".into())],
        };
        let labels = resolve(dir.path(), &flags).unwrap();
        assert_eq!(labels.service.as_deref(), Some("ctrl"));
        assert!(!labels.service_given, "kept in run.json, not given now");
        let read: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(RUN_FILE)).unwrap()).unwrap();
        let mut want = original;
        want["options"]["push"]["labels"]["env"] = "prod".into();
        assert_eq!(read, want);
    }

    #[test]
    fn a_label_flag_is_checked_and_service_name_is_the_service() {
        assert_eq!(
            parse_label("cluster=eu-1"),
            Ok(("cluster".into(), "eu-1".into()))
        );
        assert_eq!(parse_label("pod="), Ok(("pod".into(), String::new())));
        for bad in [
            "nolabel",
            "1st=x",
            "a-b=x",
            "__name__=cpu",
            "heapwatch_node=x",
            "=x",
        ] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
        let kept = PushSettings {
            service: Some("ctrl".into()),
            labels: [("env", "prod"), ("pod", "ctrl-0")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let flags = LabelFlags {
            service: None,
            labels: vec![
                ("pod".into(), String::new()),
                ("cluster".into(), "eu-1".into()),
                ("service_name".into(), "gateway".into()),
            ],
        };
        let merged = merge(Some(&kept), &flags);
        assert_eq!(merged.service.as_deref(), Some("gateway"));
        let names: Vec<&str> = merged.labels.keys().map(String::as_str).collect();
        assert_eq!(names, ["cluster", "env"]);
        assert_eq!(merge(Some(&kept), &LabelFlags::default()), kept);
    }
}
