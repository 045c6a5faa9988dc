//! One capture attempt or event of a run, as the manifest holds it (one JSON line each): what
//! was asked for, when, in which boot cycle, what came back. The store writes and reads these;
//! the analysis works on them without knowing where they are kept.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::build::BuildInfo;

/// What a manifest line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    /// A heap profile (gzipped pprof).
    Heap,
    /// A goroutine profile (gzipped pprof).
    Goroutine,
    /// Runtime MemStats figures, kept in the record itself.
    Memstats,
    /// Runtime stats over the agent (goroutines, threads, GOMAXPROCS, CPUs), in the record.
    Stats,
    /// An earlier capture's file was deleted to stay under `--max-disk`.
    Delete,
    /// A file found on resume that a killed collector made durable but never recorded.
    Recovered,
    /// Envoy admin figures (`/memory` and `/stats`), kept in the record's totals under
    /// `memory.*`, `server.*`, `cluster_manager.*` and `listener_manager.*` keys.
    Envoy,
    /// The end of a target process, seen by whoever started it (`heapwatch run`): its pid,
    /// and `exit_code` or `signal` (9 with an OOM kill).
    Exit,
    /// A boot cycle began: written once, after the cycle's first answer, with its `pid` and
    /// `build` (what the source could tell; `--label` stays the fallback and override).
    Cycle,
    /// The collector stopped on purpose (Ctrl-C, `--duration`): the target was not seen to end.
    /// Its `reason`, when another program stopped the recording for one.
    Stop,
}

/// Why a recording stopped, where a `stop` record says more than "on purpose".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The target was a replay (`heapwatch demo`) whose recording ended there, its process
    /// still answering: the end of the recording, not of the process.
    RecordingEnded,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Heap => "heap",
            RecordKind::Goroutine => "goroutine",
            RecordKind::Memstats => "memstats",
            RecordKind::Stats => "stats",
            RecordKind::Delete => "delete",
            RecordKind::Recovered => "recovered",
            RecordKind::Envoy => "envoy",
            RecordKind::Exit => "exit",
            RecordKind::Cycle => "cycle",
            RecordKind::Stop => "stop",
        }
    }

    /// True for records that note an event (a deletion, a process's end, a new boot cycle, the
    /// collector stopping) rather than an attempt to capture something.
    pub fn is_event(self) -> bool {
        matches!(
            self,
            RecordKind::Delete | RecordKind::Exit | RecordKind::Cycle | RecordKind::Stop
        )
    }
}

/// One line of `manifest.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureRecord {
    pub seq: u64,
    pub kind: RecordKind,
    /// Relative to the run directory (`profiles/000123-heap.pb.gz`); null when nothing was
    /// stored. A `dup_of` record names the earlier file that holds the same data.
    pub file: Option<String>,
    /// Boot cycle of the target, from 1 (`incarnation` in the manifest, its first name).
    #[serde(rename = "incarnation")]
    pub cycle: u32,
    /// Unix milliseconds when the request started.
    pub t_ms: i64,
    pub latency_ms: f64,
    /// Milliseconds from the last byte received to the file being durable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable_ms: Option<f64>,
    /// Bytes as served (0 on error).
    pub bytes: u64,
    /// Hash of the profile's content without its timestamp: equal hashes, equal data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    pub dup_of: Option<u64>,
    /// Sum of every sample type (`inuse_space`, `alloc_space`, …) or MemStats/stats figures.
    #[serde(default)]
    pub totals: BTreeMap<String, i64>,
    /// The pacing interval in force when this capture was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    pub error: Option<String>,
    /// A short class for errors: refused, timeout, reset, status, invalid, too-large, disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// For `delete` records: the capture whose file was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_seq: Option<u64>,
    /// The process id the capture came from, when the source knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// For `exit` records: the process's exit code, when it exited by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// For `exit` records: the signal that killed the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// For `cycle` records: the build of the boot cycle's process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildInfo>,
    /// For heap captures: the runtime's own GC clock read with the profile, where the source
    /// can read it (the `proc:` source does). Absent: the analysis estimates when each
    /// publication happened and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gc: Option<GcClock>,
    /// For `stop` records written for a reason of their own: which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<StopReason>,
}

/// The Go runtime's counters that say which published heap profile a capture holds. A heap
/// profile is the state as of the last finished GC cycle, so two captures with the same
/// `num_gc` hold the same publication, and the difference says how many cycles ran between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcClock {
    /// `memstats.numgc`: GC cycles completed since the process started.
    pub num_gc: u32,
    /// `runtime.mProfCycle` without its flushed bit: the profile cycle the next flush publishes
    /// into; it advances once per GC mark termination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_cycle: Option<u32>,
}

impl CaptureRecord {
    /// For tests: the exit record of a life the kernel OOM-killed (signal 9, `oom_kill` 1)
    /// after `lived_ms`, as the launcher writes it.
    #[cfg(test)]
    pub(crate) fn oom_exit(seq: u64, cycle: u32, t_ms: i64, lived_ms: i64) -> CaptureRecord {
        let mut x = CaptureRecord::new(seq, RecordKind::Exit, cycle, t_ms);
        x.signal = Some(9);
        x.totals.insert("oom_kill".into(), 1);
        x.totals.insert("lived_ms".into(), lived_ms);
        x
    }

    pub fn new(seq: u64, kind: RecordKind, cycle: u32, t_ms: i64) -> CaptureRecord {
        CaptureRecord {
            seq,
            kind,
            file: None,
            cycle,
            t_ms,
            latency_ms: 0.0,
            durable_ms: None,
            bytes: 0,
            hash: None,
            dup_of: None,
            totals: BTreeMap::new(),
            interval_ms: None,
            error: None,
            error_kind: None,
            deleted_seq: None,
            pid: None,
            exit_code: None,
            signal: None,
            build: None,
            gc: None,
            reason: None,
        }
    }

    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_cycle_keeps_its_manifest_name() {
        let record = CaptureRecord::new(7, RecordKind::Heap, 3, 1_000);
        let line = serde_json::to_value(&record).unwrap();
        assert_eq!(line["incarnation"], 3);
        assert!(line.get("cycle").is_none());
        let back: CaptureRecord = serde_json::from_value(line).unwrap();
        assert_eq!(back.cycle, 3);
    }
}
