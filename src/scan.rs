//! Reads a run directory in capture order, decodes its profiles on every core a few at a time,
//! and hands each one, reduced to per-site figures, to the analysis. Memory stays bounded by
//! the batch, never by the number of captures.

use std::path::PathBuf;

use thiserror::Error;

use crate::analyse::growth::{GrowthBuilder, GrowthReport};
use crate::analyse::reduce::{self, SiteFigures};
use crate::decode::{self, DecodeLimits};
use crate::source::procmem::MemorySample;
use crate::store::{CaptureRecord, RecordKind, RunDir, StoreError};

const BATCH: usize = 16;

#[derive(Debug, Error)]
pub enum ScanError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}: the run has no captures")]
    Empty(PathBuf),
}

/// What a scan could not use, reported beside the findings rather than failing the run.
#[derive(Debug, Default, Clone)]
pub struct ScanNotes {
    pub decoded: usize,
    pub missing: usize,
    pub unreadable: Vec<String>,
}

fn reduce_file(
    path: &PathBuf,
    kind: RecordKind,
    limits: &DecodeLimits,
) -> Result<Vec<SiteFigures>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if kind == RecordKind::Goroutine && !decode::is_gzip(&bytes) && bytes.starts_with(b"goroutine ")
    {
        // A text stack dump (the agent's op 0x01), stored as NNNNNN-goroutine.txt.
        let dump =
            decode::stackdump::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(reduce::goroutine_dump_sites(&dump));
    }
    let profile = decode::decode(&bytes, limits).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(match kind {
        RecordKind::Goroutine => reduce::goroutine_sites(&profile),
        _ => reduce::heap_sites(&profile),
    })
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
    let deleted: std::collections::BTreeSet<u64> =
        records.iter().filter_map(|r| r.deleted_seq).collect();
    let mut wanted: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| {
            r.is_ok()
                && r.dup_of.is_none()
                && matches!(r.kind, RecordKind::Heap | RecordKind::Goroutine)
                && !deleted.contains(&r.seq)
        })
        .collect();
    wanted.sort_by_key(|r| (r.incarnation, r.t_ms, r.seq));
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    let forced_gc = run
        .info
        .as_ref()
        .and_then(|i| i.options.get("gc"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let cpu_limit = run
        .info
        .as_ref()
        .and_then(|i| i.options.get("cpu_limit"))
        .and_then(|v| v.as_f64());
    let mut builder = GrowthBuilder::default()
        .forced_gc(forced_gc)
        .cpu_limit(cpu_limit);
    let mut notes = ScanNotes::default();
    for batch in wanted.chunks(BATCH) {
        let mut results: Vec<Option<Result<Vec<SiteFigures>, String>>> = vec![None; batch.len()];
        std::thread::scope(|scope| {
            let chunk = batch.len().div_ceil(workers);
            for (slots, records) in results
                .chunks_mut(chunk.max(1))
                .zip(batch.chunks(chunk.max(1)))
            {
                scope.spawn(move || {
                    for (slot, record) in slots.iter_mut().zip(records) {
                        *slot = Some(match run.file_path(record) {
                            Some(path) if path.is_file() => reduce_file(&path, record.kind, limits),
                            _ => Err(String::new()),
                        });
                    }
                });
            }
        });
        for (record, result) in batch.iter().zip(results) {
            match result {
                Some(Ok(sites)) => {
                    notes.decoded += 1;
                    if record.kind == RecordKind::Goroutine {
                        builder.goroutine(record, &sites);
                    } else {
                        builder.heap(record, &sites);
                    }
                }
                Some(Err(e)) if e.is_empty() => notes.missing += 1,
                Some(Err(e)) => notes.unreadable.push(e),
                None => notes.missing += 1,
            }
        }
    }
    let memory: Vec<MemorySample> = run.memory_samples();
    let limit = limit
        .or_else(|| run.info.as_ref().and_then(|i| i.limit_bytes))
        .or_else(|| memory.iter().rev().find_map(|m| m.limit));
    Ok((builder.finish(records, &memory, limit), notes))
}

/// The heap sites of a run's first boot cycle at `age_s` seconds after its first capture.
fn sites_at_age(
    run: &RunDir,
    report: &GrowthReport,
    age_s: f64,
    limits: &DecodeLimits,
) -> Vec<SiteFigures> {
    let Some(cycle) = report.cycles.first() else {
        return Vec::new();
    };
    let target = cycle.start_ms + (age_s * 1000.0) as i64;
    let nearest = run
        .manifest
        .records
        .iter()
        .filter(|r| r.is_ok() && r.kind == RecordKind::Heap && r.incarnation == cycle.index)
        .filter(|r| run.file_path(r).is_some_and(|p| p.is_file()))
        .min_by_key(|r| (r.t_ms - target).abs());
    nearest
        .and_then(|r| run.file_path(r))
        .and_then(|p| reduce_file(&p, RecordKind::Heap, limits).ok())
        .unwrap_or_default()
}

fn label(run: &RunDir) -> String {
    run.info
        .as_ref()
        .and_then(|i| i.label.clone())
        .unwrap_or_else(|| run.root.display().to_string())
}

/// Compares two runs of the same work on two builds.
pub fn compare(
    a: &RunDir,
    b: &RunDir,
    limits: &DecodeLimits,
) -> Result<crate::analyse::compare::Comparison, ScanError> {
    use crate::analyse::compare::{Side, compare};
    let (ga, _) = growth(a, None, limits)?;
    let (gb, _) = growth(b, None, limits)?;
    let span = |g: &GrowthReport| g.cycles.first().map_or(0.0, |c| c.span_s);
    let age = span(&ga).min(span(&gb));
    let (sa, sb) = (
        sites_at_age(a, &ga, age, limits),
        sites_at_age(b, &gb, age, limits),
    );
    Ok(compare(
        &Side {
            label: label(a),
            growth: &ga,
            at_age: &sa,
        },
        &Side {
            label: label(b),
            growth: &gb,
            at_age: &sb,
        },
        age,
    ))
}
