//! Which captures of a run a flamegraph is drawn from: the profiles a run still holds, the
//! boot cycle to use and two runs aligned on time since start, by `scan`'s rules for a
//! cycle's start and the capture at an age. Errors name the run and say why a capture cannot
//! be used.

use std::collections::BTreeMap;
use std::path::PathBuf;

use thiserror::Error;

use super::scan;
use crate::store::{CaptureRecord, RecordKind, RunDir};

/// Why a run has no capture to draw.
#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("{run}: no stored heap captures ({attempts} heap capture attempts in the manifest)")]
    NoStoredHeaps { run: String, attempts: usize },
    /// The chosen boot cycle has too few stored heap captures.
    #[error(
        "{run}: boot cycle {cycle} has {found} stored heap captures{} (cycles with any: {})",
        growth_needs_two(*need),
        if others.is_empty() { "none".to_string() } else { others.join(", ") }
    )]
    CycleTooSmall {
        run: String,
        cycle: u32,
        found: usize,
        need: usize,
        others: Vec<String>,
    },
    #[error("{run}: no boot cycle has {need} stored heap captures{}", growth_needs_two(*need))]
    NoCycleWith { run: String, need: usize },
    #[error("{run}: capture #{seq}: {why}")]
    NoSuchCapture {
        run: String,
        seq: u64,
        why: Unusable,
    },
}

fn growth_needs_two(need: usize) -> &'static str {
    if need > 1 { "; growth needs two" } else { "" }
}

/// Why a seq names no stored profile.
#[derive(Debug, Error)]
pub enum Unusable {
    #[error("there is no such capture")]
    Absent,
    #[error("that capture failed")]
    Failed,
    #[error("that capture is a duplicate of #{0}, use that one")]
    Duplicate(u64),
    #[error("that capture is a {0} record, not a profile")]
    NotAProfile(&'static str),
    #[error("its profile is no longer on disk")]
    Gone,
}

/// A profile a run holds on disk: its manifest record, its file and when in its boot cycle it
/// was taken.
pub struct StoredCapture<'a> {
    pub record: &'a CaptureRecord,
    pub path: PathBuf,
    /// Seconds since the first capture of its boot cycle.
    pub age_s: f64,
}

/// Every heap and goroutine profile of a run still on disk, once each (a capture identical to
/// an earlier one is stored only once), in boot-cycle and time order.
pub fn stored_captures(run: &RunDir) -> Vec<StoredCapture<'_>> {
    let cycle_start = cycle_starts(run);
    let mut stored: Vec<StoredCapture<'_>> = run
        .manifest
        .counted()
        .into_iter()
        .filter_map(|r| {
            let path = run.file_path(r).filter(|p| p.is_file())?;
            let start = cycle_start.get(&r.cycle).copied().unwrap_or(r.t_ms);
            Some(StoredCapture {
                record: r,
                path,
                age_s: (r.t_ms - start) as f64 / 1000.0,
            })
        })
        .collect();
    stored.sort_by_key(|c| (c.record.cycle, c.record.t_ms, c.record.seq));
    stored
}

/// Unix ms of the start of each boot cycle ([`scan::cycle_start_ms`]).
fn cycle_starts(run: &RunDir) -> BTreeMap<u32, i64> {
    let mut cycles: Vec<u32> = run.manifest.records.iter().map(|r| r.cycle).collect();
    cycles.sort_unstable();
    cycles.dedup();
    cycles
        .into_iter()
        .filter_map(|c| Some((c, scan::cycle_start_ms(&run.manifest.records, c)?)))
        .collect()
}

/// Seconds from the start of a boot cycle to its last successful heap capture, counting
/// captures identical to a stored one (their data is the stored one's, still current then).
fn last_heap_age(run: &RunDir, cycle: u32) -> f64 {
    let start = scan::cycle_start_ms(&run.manifest.records, cycle).unwrap_or(0);
    run.manifest
        .records
        .iter()
        .filter(|r| r.is_ok() && r.kind == RecordKind::Heap && r.cycle == cycle)
        .map(|r| (r.t_ms - start) as f64 / 1000.0)
        .fold(0.0, f64::max)
}

/// The heap captures of the boot cycle to draw from: `wanted`, else the first or last cycle
/// with at least `need` of them.
pub fn cycle_captures<'c, 'a>(
    run: &RunDir,
    captures: &'c [StoredCapture<'a>],
    wanted: Option<u32>,
    need: usize,
    first: bool,
) -> Result<Vec<&'c StoredCapture<'a>>, CaptureError> {
    let shown = run.root.display().to_string();
    let mut by_cycle: BTreeMap<u32, Vec<&StoredCapture<'a>>> = BTreeMap::new();
    for c in captures
        .iter()
        .filter(|c| c.record.kind == RecordKind::Heap)
    {
        by_cycle.entry(c.record.cycle).or_default().push(c);
    }
    if by_cycle.is_empty() {
        let attempts = run
            .manifest
            .records
            .iter()
            .filter(|r| r.kind == RecordKind::Heap)
            .count();
        return Err(CaptureError::NoStoredHeaps {
            run: shown,
            attempts,
        });
    }
    if let Some(n) = wanted {
        let found = by_cycle.remove(&n).unwrap_or_default();
        if found.len() < need {
            return Err(CaptureError::CycleTooSmall {
                run: shown,
                cycle: n,
                found: found.len(),
                need,
                others: by_cycle.keys().map(u32::to_string).collect(),
            });
        }
        return Ok(found);
    }
    let mut fit = by_cycle.into_values().filter(|c| c.len() >= need);
    let chosen = if first { fit.next() } else { fit.next_back() };
    chosen.ok_or(CaptureError::NoCycleWith { run: shown, need })
}

/// A stored capture by its seq, or an error that says why there is none.
pub fn by_seq<'c, 'a>(
    run: &RunDir,
    captures: &'c [StoredCapture<'a>],
    seq: u64,
) -> Result<&'c StoredCapture<'a>, CaptureError> {
    captures
        .iter()
        .find(|c| c.record.seq == seq)
        .ok_or_else(|| {
            let why = match run.manifest.records.iter().find(|r| r.seq == seq) {
                None => Unusable::Absent,
                Some(r) if r.error.is_some() => Unusable::Failed,
                Some(r) if r.dup_of.is_some() => Unusable::Duplicate(r.dup_of.unwrap_or_default()),
                Some(r) if !matches!(r.kind, RecordKind::Heap | RecordKind::Goroutine) => {
                    Unusable::NotAProfile(r.kind.as_str())
                }
                Some(_) => Unusable::Gone,
            };
            CaptureError::NoSuchCapture {
                run: run.root.display().to_string(),
                seq,
                why,
            }
        })
}

/// One capture of each of two runs (from their chosen boot cycles) at the same age, the way
/// `compare` aligns two builds: the age of the earlier of the two cycles' last heap captures
/// (duplicates count: their data was still current then), and on each side the data in effect
/// at that age, the last stored capture taken by then. `None` when a side has no capture.
pub fn at_same_age<'c, 'a>(
    base_run: &RunDir,
    base: &[&'c StoredCapture<'a>],
    new_run: &RunDir,
    new: &[&'c StoredCapture<'a>],
) -> Option<(&'c StoredCapture<'a>, &'c StoredCapture<'a>)> {
    let seen = |run, c: &[&StoredCapture<'_>]| {
        c.first()
            .map(|first| last_heap_age(run, first.record.cycle))
    };
    let age = seen(base_run, base)?.min(seen(new_run, new)?);
    // The one rule for "the capture at age X" (scan::capture_at_age), over stored captures.
    let at_age = |run: &RunDir, c: &[&'c StoredCapture<'a>]| -> Option<&'c StoredCapture<'a>> {
        let cycle = c.first()?.record.cycle;
        let start = scan::cycle_start_ms(&run.manifest.records, cycle)?;
        let records: Vec<&CaptureRecord> = c.iter().map(|x| x.record).collect();
        let chosen = scan::capture_at_age(&records, start, age)?;
        c.iter().find(|x| x.record.seq == chosen.seq).copied()
    };
    Some((at_age(base_run, base)?, at_age(new_run, new)?))
}
