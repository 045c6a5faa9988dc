//! The push labels a run keeps. `--service` and `--push-label` given to `collect --push` or to
//! `heapwatch push` are written to run.json (`options.push`), and every later push of the run
//! uses them unless its own flags say otherwise: one run stays one set of series, whichever
//! command sends which part of it. A cluster node's name comes from the cluster's run.json.

use std::collections::BTreeMap;
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
    let kept = info.as_ref().and_then(|i| i.options.push.clone());
    let settings = merge(kept.as_ref(), flags);
    if let Some(mut info) = info {
        if kept.unwrap_or_default() != settings {
            info.options.push = Some(settings.clone());
            store::write_info(run, &info).map_err(|e| PushError::Run {
                path: run.join(RUN_FILE),
                why: e.to_string(),
            })?;
        }
    }
    Ok(LabelOptions {
        service: settings.service,
        extra: settings.labels,
        node: node_name(run),
    })
}

fn read_info(run: &Path) -> Result<Option<RunInfo>, PushError> {
    let path = run.join(RUN_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| PushError::Run {
                path,
                why: e.to_string(),
            }),
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
