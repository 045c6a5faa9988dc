//! Reads a run directory in capture order, decodes its profiles on every core a few at a time,
//! and hands each one, reduced to per-site figures, to the analysis. Memory stays bounded by
//! the batch, never by the number of captures.
//!
//! "The capture at age X" has one rule, `capture_at_age` (the last capture taken by that moment,
//! else the first), with `heap_at_age(run, cycle, age)` over a cycle's stored heaps; the spike
//! sites, the report's differential flamegraph and `flame --diff` of two runs use it.

use std::path::{Path, PathBuf};

use thiserror::Error;

use std::collections::BTreeMap;

use crate::analyse::cause::{Cause, common_caller};
use crate::analyse::compare::{AgedSites, Comparison, CycleSide};
use crate::analyse::growth::{CycleGrowth, GrowthBuilder, GrowthReport};
use crate::analyse::reduce::OwnCode;
use crate::analyse::select::{self, CycleBuild, SelectError, Selection};
use crate::decode::DecodeLimits;
use crate::index::{OwnCodes, SiteSource, Sites, SitesError};
use crate::source::procmem::MemorySample;
use crate::store::cluster::{ClusterInfo, TARGETS_DIR, read_cluster};
use crate::store::{CaptureRecord, RUN_FILE, RecordKind, RunDir, RunInfo, StoreError};

const BATCH: usize = 16;

#[derive(Debug, Error)]
pub enum ScanError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}: the run has no captures")]
    Empty(PathBuf),
    #[error("{0}: the run has no good capture: {1}")]
    NoGoodCapture(PathBuf, String),
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// What a scan could not use, reported beside the findings rather than failing the run.
#[derive(Debug, Default, Clone)]
pub struct ScanNotes {
    pub decoded: usize,
    pub missing: usize,
    pub unreadable: Vec<String>,
}

/// Runs the growth analysis over a run.
pub fn growth(
    run: &RunDir,
    limit: Option<u64>,
    limits: &DecodeLimits,
) -> Result<(GrowthReport, ScanNotes), ScanError> {
    let records = &run.manifest.records;
    if records.is_empty() {
        return Err(ScanError::Empty(run.root.clone()));
    }
    let mut wanted: Vec<&CaptureRecord> = run.manifest.counted();
    wanted.sort_by_key(|r| (r.cycle, r.t_ms, r.seq));
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    let forced_gc = run
        .info
        .as_ref()
        .and_then(|i| i.options.gc)
        .unwrap_or(false);
    let cpu_limit = run.info.as_ref().and_then(|i| i.options.cpu_cores());
    let mut builder = GrowthBuilder::default()
        .captures(records)
        .forced_gc(forced_gc)
        .cpu_limit(cpu_limit)
        .run_label(&build_label(run));
    let mut notes = ScanNotes::default();
    // The site index answers for every capture it has a fresh entry for; the rest are decoded
    // and their entries appended, batch by batch.
    let source = SiteSource::open(run, limits);
    for batch in wanted.chunks(BATCH) {
        let mut results: Vec<Option<Result<Sites, SitesError>>> = vec![None; batch.len()];
        std::thread::scope(|scope| {
            let chunk = batch.len().div_ceil(workers);
            for (slots, records) in results
                .chunks_mut(chunk.max(1))
                .zip(batch.chunks(chunk.max(1)))
            {
                let source = &source;
                scope.spawn(move || {
                    for (slot, record) in slots.iter_mut().zip(records) {
                        *slot = Some(source.sites(record));
                    }
                });
            }
        });
        let mut built = Vec::new();
        for (record, result) in batch.iter().zip(results) {
            match result {
                Some(Ok((sites, fresh))) => {
                    built.extend(fresh);
                    notes.decoded += 1;
                    if record.kind == RecordKind::Goroutine {
                        builder.goroutine(record, &sites);
                    } else {
                        builder.heap(record, &sites);
                    }
                }
                Some(Err(SitesError::Missing)) => notes.missing += 1,
                Some(Err(SitesError::Unreadable(e))) => notes.unreadable.push(e),
                None => notes.missing += 1,
            }
        }
        source.keep(built);
    }
    let memory: Vec<MemorySample> = run.memory_samples();
    let limit = limit
        .or_else(|| run.info.as_ref().and_then(|i| i.limit_bytes))
        .or_else(|| memory.iter().rev().find_map(|m| m.limit));
    let mut report = builder.finish(records, &memory, limit);
    if report.cycles.is_empty() {
        return Err(ScanError::NoGoodCapture(
            run.root.clone(),
            why_no_good_capture(records),
        ));
    }
    for c in &mut report.cycles {
        spike_sites(run, c, limits);
    }
    report.across.crash_loop = crate::analyse::crash_loop::crash_loop(&report.cycles, records);
    report.own = run.own_naming();
    Ok((report, notes))
}

/// Why a run holds no good capture: its failed attempts by kind, or that it holds events only.
fn why_no_good_capture(records: &[CaptureRecord]) -> String {
    let failed: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| !r.kind.is_event() && !r.is_ok())
        .collect();
    if failed.is_empty() {
        return format!(
            "its {} record(s) are events only (cycle, exit, stop), no capture was attempted",
            records.len()
        );
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for r in &failed {
        *kinds
            .entry(r.error_kind.clone().unwrap_or_else(|| "other".into()))
            .or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let last = failed
        .last()
        .and_then(|r| r.error.clone())
        .unwrap_or_default();
    format!(
        "all {} attempt(s) failed ({}); the last: {last}",
        failed.len(),
        kinds.join(", ")
    )
}

/// Fills in the sites that made a cycle's heap episodes: the capture at each peak against the
/// one before its rise. False when there is no episode or its captures cannot be read.
fn spike_sites(run: &RunDir, c: &mut CycleGrowth, limits: &DecodeLimits) -> bool {
    let stored = stored_heaps(run, c.index);
    let start_ms = c.start_ms;
    let source = SiteSource::open(run, limits);
    let fill = |e: &mut crate::analyse::spikes::Episode| -> bool {
        let (Some(from), Some(to)) = (
            capture_at_age(&stored, start_ms, e.start_s),
            capture_at_age(&stored, start_ms, e.peak_s),
        ) else {
            return false;
        };
        if from.seq == to.seq {
            return false;
        }
        let read = |r: &CaptureRecord| source.sites(r).ok().map(|(sites, _)| sites);
        let (Some(before), Some(at_peak)) = (read(from), read(to)) else {
            return false;
        };
        e.from_seq = Some(from.seq);
        e.to_seq = Some(to.seq);
        e.sites = crate::analyse::spikes::spike_sites(&before, &at_peak);
        true
    };
    for e in &mut c.other_episodes {
        fill(e);
    }
    let filled = c.episode.as_mut().is_some_and(fill);
    // The reading's sites: the capture at its onset against the one at its end.
    // The captures that carried the figures (the reading's times are the moments they
    // describe, earlier than their captures).
    let by_seq = |seq: Option<u64>| seq.and_then(|q| stored.iter().find(|r| r.seq == q).copied());
    if let Some((onset, end)) = c.reading.as_ref().map(|r| (r.onset_seq, r.end_seq)) {
        if let (Some(from), Some(to)) = (by_seq(onset), by_seq(end)) {
            let read = |r: &CaptureRecord| source.sites(r).ok().map(|(sites, _)| sites);
            if let (true, Some(before), Some(after)) = (from.seq != to.seq, read(from), read(to)) {
                // Spread over several sites: the caller they share, when one holds most.
                if c.read_rise_sites((from.seq, &before), (to.seq, &after)) {
                    let own = OwnCodes::of_run(run);
                    c.set_cause(rise_cause(run, from, to, own.of_cycle(c.index), limits));
                }
            }
        }
    }
    filled
}

/// The caller under which most of what the heap gained from capture `from` to `to` lies
/// ([`common_caller`]), from the stacks of both profiles; `None` when one cannot be read.
fn rise_cause(
    run: &RunDir,
    from: &CaptureRecord,
    to: &CaptureRecord,
    own: &OwnCode,
    limits: &DecodeLimits,
) -> Option<Cause> {
    let stacks = |r: &CaptureRecord| {
        let bytes = std::fs::read(run.file_path(r)?).ok()?;
        let profile = crate::decode::decode(&bytes, limits).ok()?;
        let index = profile.find_sample_type("inuse_space")?;
        Some(crate::model::aggregate::folded(&profile, index))
    };
    let growth = super::flamegraphs::stack_growth(&stacks(from)?, &stacks(to)?, false);
    common_caller(&growth.added, own)
}

/// The first moment of a boot cycle: its first good capture (events and failed attempts do not
/// count). Ages in a cycle are measured from here.
pub fn cycle_start_ms(records: &[CaptureRecord], cycle: u32) -> Option<i64> {
    records
        .iter()
        .filter(|r| r.cycle == cycle && r.is_ok() && !r.kind.is_event())
        .map(|r| r.t_ms)
        .min()
}

/// The heap captures of a boot cycle whose profile is on disk, once each (an identical later
/// capture is stored only as its first), in time order.
pub fn stored_heaps(run: &RunDir, cycle: u32) -> Vec<&CaptureRecord> {
    let mut heaps: Vec<&CaptureRecord> = run
        .manifest
        .counted()
        .into_iter()
        .filter(|r| {
            r.kind == RecordKind::Heap
                && r.cycle == cycle
                && run.file_path(r).is_some_and(|p| p.is_file())
        })
        .collect();
    heaps.sort_by_key(|r| (r.t_ms, r.seq));
    heaps
}

/// The one rule for "the capture at age X" of a boot cycle, used by compare, the rules, the
/// report and flame: the data in effect then, which is the last capture taken by that moment
/// (a later identical capture adds nothing, and the next one was not taken yet); the first
/// capture when none was taken by then. `captures` in time order.
pub fn capture_at_age<'r>(
    captures: &[&'r CaptureRecord],
    start_ms: i64,
    age_s: f64,
) -> Option<&'r CaptureRecord> {
    let target = start_ms + (age_s * 1000.0).round() as i64;
    captures
        .iter()
        .rev()
        .find(|r| r.t_ms <= target)
        .or(captures.first())
        .copied()
}

/// The stored heap capture of a run's boot cycle in effect `age_s` seconds into it, by
/// [`capture_at_age`].
pub fn heap_at_age(run: &RunDir, cycle: u32, age_s: f64) -> Option<&CaptureRecord> {
    let start = cycle_start_ms(&run.manifest.records, cycle)?;
    capture_at_age(&stored_heaps(run, cycle), start, age_s)
}

/// Total in-use heap of every good heap capture of a cycle, duplicates included, as
/// `(seconds since the cycle's start, bytes)` in time order.
pub fn heap_totals(records: &[CaptureRecord], cycle: u32, start_ms: i64) -> Vec<(f64, i64)> {
    let mut out: Vec<(i64, u64, i64)> = records
        .iter()
        .filter(|r| r.is_ok() && r.kind == RecordKind::Heap && r.cycle == cycle)
        .filter_map(|r| r.totals.get("inuse_space").map(|&v| (r.t_ms, r.seq, v)))
        .collect();
    out.sort_unstable();
    out.into_iter()
        .map(|(t, _, v)| ((t - start_ms) as f64 / 1000.0, v))
        .collect()
}

/// The reduced sites of every stored heap capture of a boot cycle, in time order. A profile
/// that cannot be read is left out (the growth scan reports it).
pub fn cycle_sites(run: &RunDir, cycle: u32, limits: &DecodeLimits) -> Vec<AgedSites> {
    let Some(start) = cycle_start_ms(&run.manifest.records, cycle) else {
        return Vec::new();
    };
    let source = SiteSource::open(run, limits);
    stored_heaps(run, cycle)
        .into_iter()
        .filter_map(|r| {
            let (sites, _) = source.sites(r).ok()?;
            Some(AgedSites {
                seq: r.seq,
                age_s: (r.t_ms - start) as f64 / 1000.0,
                sites,
            })
        })
        .collect()
}

/// Where `heapwatch run --also` records its N-th other target: a run of its own inside the run.
pub fn also_dir(run: &Path, n: usize) -> PathBuf {
    run.join(format!("{ALSO_DIR_PREFIX}{n}"))
}

const ALSO_DIR_PREFIX: &str = "also-";

/// The run that recorded `root` as one of its `--also` targets, with that run's run.json.
fn also_parent(root: &Path) -> Option<(&Path, RunInfo)> {
    let name = root.file_name()?.to_str()?;
    name.strip_prefix(ALSO_DIR_PREFIX)?.parse::<usize>().ok()?;
    let parent = root.parent()?;
    let bytes = std::fs::read(parent.join(RUN_FILE)).ok()?;
    let info: RunInfo = serde_json::from_slice(&bytes).ok()?;
    info.options
        .also
        .as_ref()
        .is_some_and(|a| !a.is_empty())
        .then_some((parent, info))
}

/// The run's `--label`, else its directory's name. A node of a cluster run
/// (`RUN/targets/NAME`) takes the cluster's label or the cluster directory's name, and an
/// `--also` sub-run of `heapwatch run` (`RUN/also-N`) the run's label or name: their own
/// directories name the target, not its build.
pub fn run_label(run: &RunDir) -> String {
    let dir_name = |p: &std::path::Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    run.info
        .as_ref()
        .and_then(|i| i.label.clone())
        .unwrap_or_else(|| {
            if let Some((dir, info)) = cluster_of(run) {
                return info.label.unwrap_or_else(|| dir_name(&dir));
            }
            let root = std::fs::canonicalize(&run.root).unwrap_or_else(|_| run.root.clone());
            match also_parent(&root) {
                Some((dir, info)) => info.label.unwrap_or_else(|| dir_name(dir)),
                None => dir_name(&root),
            }
        })
}

/// The label that names a run's builds where its processes tell none: [`run_label`], but for a
/// node of a cluster run that records a cgroup (`proc:cgroup:PATH`, each container `heapwatch
/// watch` records) only a label given, never the directory's name: whatever runs in the cgroup
/// says its build, and the node's recording is no build (empty: none known).
pub fn build_label(run: &RunDir) -> String {
    let own = run.info.as_ref().and_then(|i| i.label.clone());
    let records_a_cgroup = run
        .info
        .as_ref()
        .is_some_and(|i| i.target.starts_with("proc:cgroup:"));
    match (own, cluster_of(run)) {
        (Some(label), _) => label,
        (None, Some((_, cluster))) if records_a_cgroup => cluster.label.unwrap_or_default(),
        // A run of its own (`heapwatch run` records its cgroup too) is named by its directory.
        (None, _) => run_label(run),
    }
}

/// The cluster run a node's directory (`CLUSTER/targets/NAME`) belongs to, when it is one.
fn cluster_of(run: &RunDir) -> Option<(PathBuf, ClusterInfo)> {
    let root = std::fs::canonicalize(&run.root).unwrap_or_else(|_| run.root.clone());
    let cluster = root
        .parent()
        .filter(|p| p.file_name() == Some(std::ffi::OsStr::new(TARGETS_DIR)))
        .and_then(|p| p.parent())?;
    Some((cluster.to_path_buf(), read_cluster(cluster).ok()??))
}

/// The build of each boot cycle that has a stored heap capture.
pub fn compared_cycles(run: &RunDir) -> Vec<CycleBuild> {
    select::cycle_builds(&run.manifest.records, &run_label(run))
        .into_iter()
        .filter(|c| !stored_heaps(run, c.index).is_empty())
        .collect()
}

/// Which cycles of A and B a comparison uses: `a_pick`/`b_pick` when given, else the default
/// pairing of [`select::choose`].
pub fn select_cycles(
    a: &RunDir,
    b: &RunDir,
    a_pick: Option<u32>,
    b_pick: Option<u32>,
) -> Result<Selection, ScanError> {
    let (ca, cb) = (compared_cycles(a), compared_cycles(b));
    let shown = |r: &RunDir| r.root.display().to_string();
    Ok(select::choose(
        (&shown(a), &ca),
        (&shown(b), &cb),
        a_pick,
        b_pick,
    )?)
}

/// Compares two runs of the same work on two builds: the chosen (or default) cycles of B
/// against those of A, the worst pair leading.
pub fn compare(
    a: &RunDir,
    b: &RunDir,
    a_pick: Option<u32>,
    b_pick: Option<u32>,
    limits: &DecodeLimits,
) -> Result<Comparison, ScanError> {
    let selection = select_cycles(a, b, a_pick, b_pick)?;
    let (ga, _) = growth(a, None, limits)?;
    let (gb, _) = growth(b, None, limits)?;
    struct Loaded {
        captures: Vec<AgedSites>,
        heap: Vec<(f64, i64)>,
    }
    let load = |run: &RunDir, g: &GrowthReport, cycle: u32| -> Option<Loaded> {
        let c = g.cycles.iter().find(|c| c.index == cycle)?;
        Some(Loaded {
            captures: cycle_sites(run, cycle, limits),
            heap: heap_totals(&run.manifest.records, cycle, c.start_ms),
        })
    };
    let mut loaded_a: BTreeMap<u32, Loaded> = BTreeMap::new();
    let mut loaded_b: BTreeMap<u32, Loaded> = BTreeMap::new();
    for &(ia, ib) in &selection.pairs {
        if !loaded_a.contains_key(&ia) {
            loaded_a.extend(load(a, &ga, ia).map(|l| (ia, l)));
        }
        if !loaded_b.contains_key(&ib) {
            loaded_b.extend(load(b, &gb, ib).map(|l| (ib, l)));
        }
    }
    fn side<'s>(
        g: &'s GrowthReport,
        loaded: &'s BTreeMap<u32, Loaded>,
        cycle: u32,
        build: String,
    ) -> Option<CycleSide<'s>> {
        let c = g.cycles.iter().find(|c| c.index == cycle)?;
        let l = loaded.get(&cycle)?;
        Some(CycleSide {
            build,
            growth: c,
            captures: &l.captures,
            heap: &l.heap,
        })
    }
    let builds_a = select::cycle_builds(&a.manifest.records, &run_label(a));
    let builds_b = select::cycle_builds(&b.manifest.records, &run_label(b));
    let build_of = |builds: &[CycleBuild], n: u32| {
        builds
            .iter()
            .find(|c| c.index == n)
            .map_or_else(String::new, |c| c.label.clone())
    };
    let pairs: Vec<(CycleSide, CycleSide)> = selection
        .pairs
        .iter()
        .filter_map(|&(ia, ib)| {
            Some((
                side(&ga, &loaded_a, ia, build_of(&builds_a, ia))?,
                side(&gb, &loaded_b, ib, build_of(&builds_b, ib))?,
            ))
        })
        .collect();
    let mut comparison = crate::analyse::compare::compare(&pairs, &selection)
        .ok_or_else(|| ScanError::Empty(b.root.clone()))?;
    // Each side named by its own prefixes (recorded with it, unless --own was given).
    (comparison.a_own, comparison.b_own) = (ga.own, gb.own);
    Ok(comparison)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::cluster::{CLUSTER_KIND, ClusterTarget};

    fn cluster_with_node(label: Option<&str>) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("run-2.1.0");
        let node = root.join(TARGETS_DIR).join("ctrl1");
        std::fs::create_dir_all(&node).unwrap();
        std::fs::write(node.join(crate::store::MANIFEST_FILE), b"").unwrap();
        let info = ClusterInfo {
            schema: crate::model::SCHEMA,
            tool: "heapwatch test".into(),
            kind: CLUSTER_KIND.into(),
            started_ms: 1,
            resumed_ms: vec![],
            label: label.map(str::to_string),
            targets: vec![ClusterTarget {
                name: "ctrl1".into(),
                target: "agent:auto:ctrl1".into(),
                source: "agent".into(),
                dir: "targets/ctrl1".into(),
            }],
            logs: vec![],
            marks: vec![],
        };
        std::fs::write(
            root.join(crate::store::RUN_FILE),
            serde_json::to_vec(&info).unwrap(),
        )
        .unwrap();
        (dir, node)
    }

    /// A run directory named `run`, not in a cluster, whose target is a cgroup (as
    /// `heapwatch run` records it).
    fn run_of_its_own_recording_a_cgroup() -> (tempfile::TempDir, RunDir) {
        let alone = tempfile::tempdir().unwrap();
        let root = alone.path().join("run");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join(crate::store::MANIFEST_FILE), b"").unwrap();
        std::fs::write(
            root.join(RUN_FILE),
            serde_json::to_vec(&serde_json::json!({
                "schema": 1, "tool": "heapwatch", "target": "proc:cgroup:/heapwatch-run-1",
                "source": "proc", "started_ms": 0
            }))
            .unwrap(),
        )
        .unwrap();
        let run = RunDir::open(&root).unwrap();
        (alone, run)
    }

    #[test]
    fn a_cluster_node_without_a_label_is_named_after_the_cluster_not_the_node() {
        let (_dir, node) = cluster_with_node(None);
        assert_eq!(run_label(&RunDir::open(&node).unwrap()), "run-2.1.0");
        // A run of its own that records a cgroup (`heapwatch run`) keeps its directory's name.
        let (_alone, run) = run_of_its_own_recording_a_cgroup();
        assert_eq!(build_label(&run), "run");
        let (_dir, node) = cluster_with_node(Some("2.1.0-rc1"));
        assert_eq!(run_label(&RunDir::open(&node).unwrap()), "2.1.0-rc1");
    }

    /// Issue 35, item 6: a container `watch` recorded (a node whose target is its cgroup)
    /// showed the node directory's name ("node") as its build. Its build is what its process
    /// tells, else a label given, else none; a node of `collect` keeps the cluster's name.
    #[test]
    fn a_watched_containers_build_is_a_label_given_never_the_directory() {
        let (_dir, node) = cluster_with_node(None);
        let run_json = |target: &str, label: Option<&str>| {
            let info: RunInfo = serde_json::from_value(serde_json::json!({
                "schema": 1, "tool": "heapwatch", "target": target, "source": "proc",
                "started_ms": 0, "label": label
            }))
            .unwrap();
            std::fs::write(node.join(RUN_FILE), serde_json::to_vec(&info).unwrap()).unwrap();
            RunDir::open(&node).unwrap()
        };
        let watched = run_json("proc:cgroup:/sys/fs/cgroup/kubepods/pod1/c1", None);
        assert_eq!(build_label(&watched), "");
        assert_eq!(
            run_label(&watched),
            "run-2.1.0",
            "compare still names the recording"
        );
        let labelled = run_json("proc:cgroup:/sys/fs/cgroup/kubepods/pod1/c1", Some("3.5.9"));
        assert_eq!(build_label(&labelled), "3.5.9");
        let collected = run_json("agent:auto:ctrl1", None);
        assert_eq!(build_label(&collected), "run-2.1.0");
        // A run of its own that records a cgroup (`heapwatch run`) keeps its directory's name.
        let (_alone, run) = run_of_its_own_recording_a_cgroup();
        assert_eq!(build_label(&run), "run");
        let (_dir, node) = cluster_with_node(Some("2.1.0-rc1"));
        std::fs::write(
            node.join(RUN_FILE),
            serde_json::to_vec(&serde_json::json!({
                "schema": 1, "tool": "heapwatch", "target": "proc:cgroup:/c1",
                "source": "proc", "started_ms": 0
            }))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(build_label(&RunDir::open(&node).unwrap()), "2.1.0-rc1");
    }

    #[test]
    fn an_also_sub_run_is_named_after_the_run_that_recorded_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("run-2.1.0");
        let also = super::also_dir(&root, 1);
        std::fs::create_dir_all(&also).unwrap();
        std::fs::write(also.join(crate::store::MANIFEST_FILE), b"").unwrap();
        let mut info: RunInfo = serde_json::from_value(serde_json::json!({
            "schema": 1, "tool": "heapwatch", "target": "proc:launched", "source": "proc",
            "started_ms": 0, "options": {"also": ["http://127.0.0.1:1"]}
        }))
        .unwrap();
        let write = |info: &RunInfo| {
            std::fs::write(root.join(RUN_FILE), serde_json::to_vec(info).unwrap()).unwrap()
        };
        write(&info);
        assert_eq!(run_label(&RunDir::open(&also).unwrap()), "run-2.1.0");
        info.label = Some("2.1.0-rc1".into());
        write(&info);
        assert_eq!(run_label(&RunDir::open(&also).unwrap()), "2.1.0-rc1");
        // A folder named also-N in a run that recorded no --also target is a run of its own.
        info.options.also = Some(Vec::new());
        write(&info);
        assert_eq!(run_label(&RunDir::open(&also).unwrap()), "also-1");
    }

    #[test]
    fn a_plain_run_without_a_label_is_named_after_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("targets").join("run-2.0.2");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join(crate::store::MANIFEST_FILE), b"").unwrap();
        assert_eq!(run_label(&RunDir::open(&root).unwrap()), "run-2.0.2");
    }
}
