//! What a replay over HTTP cannot serve, carried over: a replay serves heap profiles, not what
//! the kernel saw (the process's and the cgroup's memory, the OOM kills), so the recording's
//! `memory.jsonl` is moved onto the replay's clock and written into the run that collected the
//! replay, whose `run.json` then says where its memory came from and names the recorded cgroup.
//! Nor can it say that its recording ended: a replay that runs out goes silent as a process
//! that stopped answering does, so the run that collected it is told ([`note_recording_ended`]).

use std::path::Path;

use crate::model::capture::{CaptureRecord, RecordKind, StopReason};
use crate::source::procmem::MemorySample;
use crate::store::{self, MEMORY_FILE, RunDir, RunInfo, RunWriter, StoreError};

/// Appends to the run at `collected` (its collector done) a `stop` record saying the replay it
/// recorded ran out of recording, its process still answering: its last life ended with the
/// recording, not with a death. For a recording whose last life lived to its end.
pub fn note_recording_ended(collected: &Path) -> Result<(), StoreError> {
    let (mut writer, existing) = RunWriter::open(collected)?;
    let seq = existing.records.iter().map(|r| r.seq).max().unwrap_or(0) + 1;
    let cycle = existing.records.iter().map(|r| r.cycle).max().unwrap_or(1);
    let mut record = CaptureRecord::new(seq, RecordKind::Stop, cycle, crate::time::now_ms());
    record.reason = Some(StopReason::RecordingEnded);
    writer.append(&record)
}

/// Writes `recording`'s memory samples into the run at `collected`, each moved from the
/// recording's clock (its first good capture) to the replay's (`started_ms`, played at
/// `speed`), and marks `collected`'s `run.json` with their source. A recording with no good
/// capture or no memory sample leaves `collected` as it is.
pub fn carry_memory_over(
    recording: &RunDir,
    collected: &Path,
    started_ms: i64,
    speed: f64,
) -> Result<(), StoreError> {
    let samples: Vec<MemorySample> = recording.memory_samples();
    let origin = recording
        .manifest
        .records
        .iter()
        .filter(|r| r.is_ok())
        .map(|r| r.t_ms)
        .min();
    let Some(origin) = origin.filter(|_| !samples.is_empty()) else {
        return Ok(());
    };
    let mut text = String::new();
    for mut m in samples {
        m.t_ms = started_ms + ((m.t_ms - origin) as f64 / speed).round() as i64;
        text.push_str(&serde_json::to_string(&m).expect("memory samples are plain data"));
        text.push('\n');
    }
    let path = collected.join(MEMORY_FILE);
    std::fs::write(&path, text).map_err(|e| StoreError::io(&path, e))?;

    let info_path = collected.join(store::RUN_FILE);
    let bytes = std::fs::read(&info_path).map_err(|e| StoreError::io(&info_path, e))?;
    let mut info: RunInfo = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path: info_path.clone(),
        why: e.to_string(),
    })?;
    info.options.memory_source = Some(
        "the recording's memory.jsonl, moved onto this run's clock by heapwatch demo (a replay serves profiles, not the kernel's view)"
            .into(),
    );
    if let Some(cg) = recording
        .info
        .as_ref()
        .and_then(|i| i.options.cgroup.clone())
    {
        info.options.cgroup = Some(cg);
    }
    store::write_info(collected, &info)
}
