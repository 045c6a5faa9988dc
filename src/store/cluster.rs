//! A cluster run: one `collect` over several targets. `RUN/run.json` lists the nodes, each
//! node's directory (`RUN/targets/NAME/`) is an ordinary run of its own, and `events.jsonl`
//! holds the moments marked in log files (`--log NAME=PATH --mark LABEL=REGEX`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{RUN_FILE, StoreError};

/// Where the nodes of a cluster run live, under the run directory.
pub const TARGETS_DIR: &str = "targets";
/// Marked log lines, one JSON event per line (cluster and single-target runs alike).
pub const EVENTS_FILE: &str = "events.jsonl";
/// The `kind` a cluster run's `run.json` carries.
pub const CLUSTER_KIND: &str = "cluster";
/// Longest log line kept in an event, in bytes (cut at a character boundary).
pub const EVENT_LINE_MAX: usize = 512;

/// `RUN/run.json` of a cluster run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub schema: u32,
    pub tool: String,
    /// Always [`CLUSTER_KIND`].
    pub kind: String,
    pub started_ms: i64,
    #[serde(default)]
    pub resumed_ms: Vec<i64>,
    #[serde(default)]
    pub label: Option<String>,
    pub targets: Vec<ClusterTarget>,
    #[serde(default)]
    pub logs: Vec<LogSpec>,
    #[serde(default)]
    pub marks: Vec<MarkSpec>,
}

/// One node of a cluster run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterTarget {
    /// The node's name: `--name`, the agent's app id, or host and port.
    pub name: String,
    /// The target as the user gave it, its secrets hidden (a password as `***`).
    #[serde(with = "crate::source::target::shown")]
    pub target: String,
    /// `http`, `agent`, `envoy` or `proc`.
    pub source: String,
    /// The node's run directory, relative to the cluster run (`targets/NAME`).
    pub dir: String,
}

/// A log file tailed for events (`--log NAME=PATH`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogSpec {
    pub name: String,
    pub path: PathBuf,
}

/// A pattern that turns a log line into an event (`--mark LABEL=REGEX`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkSpec {
    pub label: String,
    pub regex: String,
}

/// Where an event's time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeFrom {
    /// A timestamp at the start of the line.
    Line,
    /// The moment the collector read the line.
    Read,
}

/// One marked log line in `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unix milliseconds.
    pub t_ms: i64,
    pub label: String,
    /// The `--log` NAME the line came from: a node's name, or a name of its own.
    pub log: String,
    pub line: String,
    pub time_from: TimeFrom,
}

impl ClusterInfo {
    /// The node's run directory.
    pub fn node_dir(&self, root: &Path, target: &ClusterTarget) -> PathBuf {
        root.join(&target.dir)
    }
}

/// Reads `RUN/run.json` as a cluster run: `Ok(None)` when the run is not one (no run.json, or
/// a run.json of a single target).
pub fn read_cluster(root: &Path) -> Result<Option<ClusterInfo>, StoreError> {
    let path = root.join(RUN_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
    if value.get("kind").and_then(|k| k.as_str()) != Some(CLUSTER_KIND) {
        return Ok(None);
    }
    let info: ClusterInfo = serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
        path: path.clone(),
        why: format!("a cluster run.json: {e}"),
    })?;
    for target in &info.targets {
        let dir = Path::new(&target.dir);
        if dir.is_absolute()
            || dir
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(StoreError::Corrupt {
                path,
                why: format!(
                    "node {:?} names a directory outside the run: {:?}",
                    target.name, target.dir
                ),
            });
        }
    }
    Ok(Some(info))
}

/// Reads `events.jsonl` when present, skipping a torn last line; oldest first.
pub fn read_events(root: &Path) -> Vec<Event> {
    let Ok(bytes) = fs::read(root.join(EVENTS_FILE)) else {
        return Vec::new();
    };
    let mut events: Vec<Event> = bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    events.sort_by_key(|e| e.t_ms);
    events
}

/// Cuts a log line to [`EVENT_LINE_MAX`] bytes at a character boundary.
pub fn clip_line(line: &str) -> &str {
    if line.len() <= EVENT_LINE_MAX {
        return line;
    }
    let mut end = EVENT_LINE_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_target_run_json_is_not_a_cluster() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_cluster(dir.path()).unwrap(), None);
        fs::write(
            dir.path().join(RUN_FILE),
            br#"{"schema":1,"tool":"x","target":"http://a","source":"http","started_ms":1}"#,
        )
        .unwrap();
        assert_eq!(read_cluster(dir.path()).unwrap(), None);
    }

    #[test]
    fn a_cluster_run_json_reads_back_and_refuses_paths_outside_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let info = ClusterInfo {
            schema: 1,
            tool: "heapwatch test".into(),
            kind: CLUSTER_KIND.into(),
            started_ms: 5,
            resumed_ms: vec![],
            label: None,
            targets: vec![ClusterTarget {
                name: "ctrl1".into(),
                target: "agent:auto:ctrl1".into(),
                source: "agent".into(),
                dir: "targets/ctrl1".into(),
            }],
            logs: vec![],
            marks: vec![],
        };
        fs::write(
            dir.path().join(RUN_FILE),
            serde_json::to_vec(&info).unwrap(),
        )
        .unwrap();
        assert_eq!(read_cluster(dir.path()).unwrap(), Some(info.clone()));

        let mut bad = info;
        bad.targets[0].dir = "../elsewhere".into();
        fs::write(dir.path().join(RUN_FILE), serde_json::to_vec(&bad).unwrap()).unwrap();
        let err = read_cluster(dir.path()).unwrap_err().to_string();
        assert!(err.contains("outside the run"), "{err}");
    }

    #[test]
    fn events_read_oldest_first_and_skip_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(EVENTS_FILE),
            concat!(
                r#"{"t_ms":20,"label":"b","log":"n","line":"y","time_from":"read"}"#,
                "\n",
                r#"{"t_ms":10,"label":"a","log":"n","line":"x","time_from":"line"}"#,
                "\n",
                r#"{"t_ms":30,"lab"#
            ),
        )
        .unwrap();
        let events = read_events(dir.path());
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].label, "a");
        assert_eq!(events[0].time_from, TimeFrom::Line);
    }

    #[test]
    fn long_lines_are_cut_at_a_character_boundary() {
        let line = "é".repeat(400);
        let cut = clip_line(&line);
        assert!(cut.len() <= EVENT_LINE_MAX);
        assert!(cut.len() >= EVENT_LINE_MAX - 1);
    }
}
