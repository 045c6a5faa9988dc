//! Which boot cycles a comparison uses: each cycle's build (from the `cycle` records, else the
//! run's label), `RUN@N` on the command line, and the default pairing — the cycles of B's newest
//! build against the cycles of A's build, never a build against itself when another exists.
//!
//! A pair is like with like when B's cycle holds the place among its build's cycles that A's
//! holds among A's (a first boot with a first boot, a second with a second), or when the user
//! picked the cycles. Where B has more lives than A, its later ones are each set against A's
//! last, a restart against what may be a first boot: compared and shown, but a relative gate
//! judges the like pairs (`Comparison::gate_pair`).

use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::model::build::BuildInfo;
use crate::model::capture::{CaptureRecord, RecordKind};

/// One boot cycle and the build it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CycleBuild {
    pub index: u32,
    /// What people call the build: the version the process reported, else its VCS revision,
    /// else the run's `--label`, else the run directory's name.
    pub label: String,
    /// What the source could tell about the process, when it wrote a `cycle` record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

#[derive(Debug, Error, PartialEq)]
pub enum SelectError {
    #[error(
        "{run}: boot cycle {wanted} has no stored heap capture (cycles with any: {available}); \
         pick one of those with RUN@N or --cycle N"
    )]
    NoSuchCycle {
        run: String,
        wanted: u32,
        available: String,
    },
    #[error("{0}: no boot cycle has a stored heap capture to compare")]
    Nothing(String),
}

/// A version as builds are told apart: "v2.1.0" and "2.1.0" are one version (Go modules
/// write the `v`, people and labels often do not).
pub fn version_key(version: &str) -> String {
    let v = version.trim();
    match v.strip_prefix(['v', 'V']) {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => rest.to_string(),
        _ => v.to_string(),
    }
}

/// The short name of a build, when the process told anything that names one.
pub fn build_name(build: &BuildInfo) -> Option<String> {
    if let Some(v) = build.version.as_deref().filter(|v| !v.is_empty()) {
        return Some(version_key(v));
    }
    build
        .vcs_revision
        .as_deref()
        .filter(|r| !r.is_empty())
        .map(|r| format!("rev {}", r.chars().take(12).collect::<String>()))
}

/// The build of every boot cycle that has a record, in cycle order. `run_label` names the
/// cycles whose source told nothing.
pub fn cycle_builds(records: &[CaptureRecord], run_label: &str) -> Vec<CycleBuild> {
    let mut out: Vec<CycleBuild> = Vec::new();
    let mut indices: Vec<u32> = records.iter().map(|r| r.cycle).collect();
    indices.sort_unstable();
    indices.dedup();
    for index in indices {
        let cycle_record = records
            .iter()
            .find(|r| r.kind == RecordKind::Cycle && r.cycle == index);
        let build = cycle_record
            .and_then(|r| r.build.clone())
            .filter(|b| !b.is_empty());
        let pid = cycle_record.and_then(|r| r.pid).or_else(|| {
            records
                .iter()
                .find(|r| r.cycle == index && r.pid.is_some() && !r.kind.is_event())
                .and_then(|r| r.pid)
        });
        out.push(CycleBuild {
            index,
            label: build
                .as_ref()
                .and_then(build_name)
                .unwrap_or_else(|| version_key(run_label)),
            build,
            pid,
        });
    }
    out
}

/// `RUN@N`: a run directory and, after the last `@`, a boot cycle. A path that exists as given
/// is taken whole, so a directory whose name holds an `@` still opens.
pub fn parse_run_arg(text: &Path) -> (PathBuf, Option<u32>) {
    if text.exists() {
        return (text.to_path_buf(), None);
    }
    let shown = text.to_string_lossy();
    match shown.rsplit_once('@') {
        Some((run, n)) if !run.is_empty() => match n.parse::<u32>() {
            Ok(n) => (PathBuf::from(run), Some(n)),
            Err(_) => (text.to_path_buf(), None),
        },
        _ => (text.to_path_buf(), None),
    }
}

/// The cycles a comparison uses on each side, and their builds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Selection {
    /// Pairs of (A's cycle, B's cycle), each compared; B's cycles in order.
    pub pairs: Vec<(u32, u32)>,
    /// The pairs that compare like with like (see the module's doc).
    #[serde(skip)]
    pub like: Vec<(u32, u32)>,
    pub a_build: String,
    pub b_build: String,
    /// True when both sides run the same build (no other build was there to compare with).
    pub same_build: bool,
    /// How the cycles were chosen.
    pub how: Chosen,
}

/// How the cycles of a comparison were chosen (`render::compare::chosen_words` words it, and
/// writes it into JSON as those words).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Chosen {
    /// By default: B's newest build against A's newest other build.
    NewestBuilds { b_build: String, a_build: String },
    /// With `RUN@N`, `--cycle` or `--baseline-cycle`.
    #[default]
    Picked,
}

fn pick<'c>(
    run: &str,
    cycles: &'c [CycleBuild],
    wanted: u32,
) -> Result<&'c CycleBuild, SelectError> {
    cycles
        .iter()
        .find(|c| c.index == wanted)
        .ok_or_else(|| SelectError::NoSuchCycle {
            run: run.to_string(),
            wanted,
            available: if cycles.is_empty() {
                "none".into()
            } else {
                cycles
                    .iter()
                    .map(|c| c.index.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
}

/// Chooses the cycles to compare. `a` and `b` list the cycles that have a stored heap
/// capture. A chosen cycle is used alone; otherwise B's cycles are those of its newest build
/// (the build of its last cycle), A's those of its newest build that is not B's (all of them
/// when A ran only B's build), and the k-th of B's is compared with the k-th of A's (A's last
/// when A has fewer).
pub fn choose(
    (a_run, a): (&str, &[CycleBuild]),
    (b_run, b): (&str, &[CycleBuild]),
    a_pick: Option<u32>,
    b_pick: Option<u32>,
) -> Result<Selection, SelectError> {
    let b_cycles: Vec<&CycleBuild> = match b_pick {
        Some(n) => vec![pick(b_run, b, n)?],
        None => {
            let newest = b.last().ok_or_else(|| SelectError::Nothing(b_run.into()))?;
            b.iter().filter(|c| c.label == newest.label).collect()
        }
    };
    let b_build = b_cycles[0].label.clone();
    let a_cycles: Vec<&CycleBuild> = match a_pick {
        Some(n) => vec![pick(a_run, a, n)?],
        None => {
            let other = a.iter().rev().find(|c| c.label != b_build);
            match other {
                Some(o) => a.iter().filter(|c| c.label == o.label).collect(),
                None if a.is_empty() => return Err(SelectError::Nothing(a_run.into())),
                None => a.iter().collect(),
            }
        }
    };
    let a_build = a_cycles[0].label.clone();
    let pairs: Vec<(u32, u32)> = b_cycles
        .iter()
        .enumerate()
        .map(|(k, bc)| (a_cycles[k.min(a_cycles.len() - 1)].index, bc.index))
        .collect();
    let picked = a_pick.is_some() || b_pick.is_some();
    let like = pairs
        .iter()
        .enumerate()
        .filter(|&(k, _)| picked || k < a_cycles.len())
        .map(|(_, &p)| p)
        .collect();
    let how = match (a_pick, b_pick) {
        (None, None) => Chosen::NewestBuilds {
            b_build: b_build.clone(),
            a_build: a_build.clone(),
        },
        _ => Chosen::Picked,
    };
    Ok(Selection {
        pairs,
        like,
        same_build: a_build == b_build,
        a_build,
        b_build,
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle_record(cycle: u32, version: &str, pid: u32) -> CaptureRecord {
        let mut r = CaptureRecord::new(cycle as u64 * 10, RecordKind::Cycle, cycle, 0);
        r.pid = Some(pid);
        r.build = Some(BuildInfo {
            version: Some(version.into()),
            ..BuildInfo::default()
        });
        r
    }

    fn heap(cycle: u32) -> CaptureRecord {
        CaptureRecord::new(cycle as u64 * 10 + 1, RecordKind::Heap, cycle, 0)
    }

    #[test]
    fn cycles_take_their_build_from_cycle_records_else_the_label() {
        let records = vec![
            cycle_record(1, "2.0.2", 100),
            heap(1),
            heap(2),
            cycle_record(3, "2.1.0", 300),
            heap(3),
        ];
        let builds = cycle_builds(&records, "run-label");
        let labels: Vec<(u32, &str)> = builds.iter().map(|c| (c.index, c.label.as_str())).collect();
        assert_eq!(labels, [(1, "2.0.2"), (2, "run-label"), (3, "2.1.0")]);
        assert_eq!(builds[2].pid, Some(300));
    }

    #[test]
    fn a_leading_v_names_the_same_version() {
        assert_eq!(version_key("v2.1.0"), "2.1.0");
        assert_eq!(version_key("2.1.0"), "2.1.0");
        assert_eq!(version_key("V10"), "10");
        // Not a version: kept as it is.
        assert_eq!(version_key("vendor-build"), "vendor-build");
        let records = vec![
            cycle_record(1, "v2.1.0", 10),
            CaptureRecord::new(2, RecordKind::Heap, 2, 2_000),
        ];
        let builds = cycle_builds(&records, "2.1.0");
        let labels: Vec<&str> = builds.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["2.1.0", "2.1.0"]);
    }

    fn cb(index: u32, label: &str) -> CycleBuild {
        CycleBuild {
            index,
            label: label.into(),
            build: None,
            pid: None,
        }
    }

    #[test]
    fn by_default_b_newest_build_meets_a_build_never_itself() {
        // The run the collector was attached to: cycle 1 is still the old build.
        let b = [
            cb(1, "2.0.2"),
            cb(2, "2.1.0"),
            cb(3, "2.1.0"),
            cb(4, "2.1.0"),
        ];
        let a = [cb(1, "2.0.2")];
        let s = choose(("a", &a), ("b", &b), None, None).unwrap();
        assert_eq!(s.pairs, [(1, 2), (1, 3), (1, 4)]);
        // B's first life of its build is like A's first; its restarts are set against it too.
        assert_eq!(s.like, [(1, 2)]);
        assert_eq!((s.a_build.as_str(), s.b_build.as_str()), ("2.0.2", "2.1.0"));
        assert!(!s.same_build);
        // Compared with itself, a mixed run's old cycle is the baseline of its new ones.
        let s = choose(("b", &b), ("b", &b), None, None).unwrap();
        assert_eq!(s.pairs, [(1, 2), (1, 3), (1, 4)]);
        // A run of one build against itself pairs cycle k with cycle k.
        let one = [cb(1, "x"), cb(2, "x")];
        let s = choose(("o", &one), ("o", &one), None, None).unwrap();
        assert_eq!(s.pairs, [(1, 1), (2, 2)]);
        assert_eq!(s.like, s.pairs);
        assert!(s.same_build);
    }

    #[test]
    fn a_chosen_cycle_is_used_alone_and_a_missing_one_is_named() {
        let b = [cb(1, "2.0.2"), cb(2, "2.1.0")];
        let a = [cb(1, "2.0.2"), cb(2, "2.0.2")];
        let s = choose(("a", &a), ("b", &b), Some(2), Some(1)).unwrap();
        assert_eq!(s.pairs, [(2, 1)]);
        assert_eq!(s.like, [(2, 1)]);
        let err = choose(("a", &a), ("b", &b), None, Some(7)).unwrap_err();
        assert!(err.to_string().contains("b: boot cycle 7"), "{err}");
        assert!(err.to_string().contains("cycles with any: 1, 2"), "{err}");
    }

    #[test]
    fn run_at_n_splits_only_when_the_whole_text_is_not_a_path() {
        assert_eq!(
            parse_run_arg(Path::new("/no/such/run@3")),
            (PathBuf::from("/no/such/run"), Some(3))
        );
        assert_eq!(
            parse_run_arg(Path::new("/no/such/run@x")),
            (PathBuf::from("/no/such/run@x"), None)
        );
        let dir = std::env::temp_dir();
        assert_eq!(parse_run_arg(&dir), (dir.clone(), None));
    }
}
