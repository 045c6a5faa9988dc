//! The event records the collector writes beside the capture attempts: a boot cycle's start
//! (`cycle`, with its process and build), a watched process's end (`exit`, from the kernel),
//! and the collector stopping on purpose (`stop`); and the inbox of records others send
//! (`Collector::with_events`: `heapwatch run`'s `exit` and `stop`), given their seq and boot
//! cycle here so the manifest has one writer, and looked into while the collector sleeps.
//!
//! # What a run records about each boot cycle (the collector's side)
//!
//! The collector writes evidence; `growth`, `report` and `compare` word it. What it writes:
//!
//! | question | evidence in the run | written by |
//! |---|---|---|
//! | which process and build is this cycle? | a `cycle` manifest record after the cycle's first answer: `pid`, `build` (agent: app info op 0x0a `version`, `id` as `app_id`, and op 0x04 `go_version`; then, whenever the pid is this machine's — proc targets, `heapwatch run`, `--pid`/`--cgroup`, `agent:PID`/`agent:auto` — what `/proc/PID/exe` says: the main module's `version`, `vcs_revision`, `ldflags`, `go_version` and the Go `build_id`) | `collect/events.rs` `note_cycle`, `AgentSource::build_info`, `source/buildinfo.rs` |
//! | how did a process end? | an `exit` record with `exit_code` or `signal`, read from the kernel's process-event connector for every process that answered or was sampled (root only; `collect/exits.rs`); in memory.jsonl, `killed: true` on the sample where the cgroup's `oom_kill` counter rose, and `alive` / `pid` per sample | exit watcher, sampler |
//! | did the collector stop, not the target? | a `stop` record (Ctrl-C, `--duration`) with the pid it last answered from; no `stop` when `--until-exit` ended the run | `Collector::stopped` |
//! | where did the memory go? | memory.jsonl `cgroup` (`memory.stat` split, failcnt, events, PSI on v2) and `process` (`smaps_rollup`) every 500 ms, and at once when usage moves by 16 MiB | `source/procmem.rs`, `collect/sampler.rs` |
//! | which files hold it? | memory.jsonl `files` (collect, run): the regular files the process has open (`/proc/PID/fd`) or maps (`/proc/PID/maps`), with length and tmpfs, written when they change; their resident pages (`mincore`, as `fincore`) and the dirty pages of shared mappings (`smaps`) when the page cache is large and near its highest, spaced by their cost | `source/procfiles.rs`, `collect/held_files.rs` |
//!
//! How to tell the ends apart from this (what the analysis words): an OOM kill is a `killed`
//! sample (the kernel's counter) or an `exit` with signal 9 in a cgroup whose `oom_kill` rose; an
//! `exit` with another signal or an exit code is that; a self-restart is an `exit` (often code 0)
//! whose cgroup has a new pid by then (the next `cycle` record, the memory samples) without a kill;
//! `stop` is the collector; a cycle with none of these "stopped answering, cause unknown".
//! `exit` records are filed under the cycle the process answered in (else the current one, so
//! compare the pid); an OOM-kill sample can name the next process or none (the victim is gone
//! from `cgroup.procs` by then): it belongs to the last pid seen alive before it.
//!
//! **The `cycle` record keeps evidence only.** `--label` stays in run.json (the default where a
//! cycle has no build, and the override where the analysis is told to prefer it); the record's
//! `build` is what the process said of itself. The collector never copies the label into a
//! cycle, so a label given for the wrong process (a 2.0.2 run labelled 2.1.0) cannot
//! hide what the process said.

use std::sync::mpsc::TryRecvError;
use std::time::Duration;

use super::{CaptureRecord, Collector, RecordKind, StoreError};
use crate::model::build::BuildInfo;
use crate::source::SourceKind;
use crate::source::buildinfo;
use crate::source::procmem::MemoryProbe;

impl Collector {
    /// Whether the pids of this collector's records name processes of this machine's PID
    /// namespace: the proc source's, those of `--pid`/`--cgroup`, an agent found locally.
    fn pid_is_local(&self) -> bool {
        self.kind == SourceKind::Proc
            || matches!(
                self.pid_probe,
                Some(MemoryProbe::Pid(_) | MemoryProbe::Cgroup(_))
            )
            || (self.kind == SourceKind::Agent && self.local_agent)
    }

    /// An `exit` record for each watched process the kernel saw end, filed under the boot
    /// cycle the process answered in (else the current one: compare the pid).
    pub(super) async fn note_exits(&mut self) -> Result<(), StoreError> {
        let Some(exits) = &self.exits else {
            return Ok(());
        };
        for exit in exits.take() {
            let cycle = self
                .cycle_of_pid
                .get(&exit.pid)
                .copied()
                .unwrap_or_else(|| self.cycles.current());
            let mut record = CaptureRecord::new(self.next_seq, RecordKind::Exit, cycle, exit.t_ms);
            self.next_seq += 1;
            record.pid = Some(exit.pid);
            record.exit_code = exit.exit_code;
            record.signal = exit.signal;
            if let Some(rise) = self.oom_kills_since_last_exit() {
                record.totals.insert("oom_kill".into(), rise as i64);
            }
            self.ends_to_tell.push(record.clone());
            self.append(record).await?;
        }
        Ok(())
    }

    /// How much the cgroup's `oom_kill` count rose since the last exit noted (`None` without a
    /// cgroup). Read when the exit is heard: the kernel counts its kill before the victim can
    /// finish exiting, while the memory sampler, on its own pace, may first look only after a
    /// restarted process has taken the cgroup over and file the kill under the new life.
    fn oom_kills_since_last_exit(&mut self) -> Option<u64> {
        let Some(MemoryProbe::Cgroup(cg)) = &self.pid_probe else {
            return None;
        };
        let now = cg.oom_kills()?;
        let before = self.oom_kills_seen.replace(now)?;
        Some(now.saturating_sub(before))
    }

    /// The collector stops on purpose: a `stop` record says the target was not seen to end
    /// here, with the process it last answered from (the attempts before it say whether that
    /// process still answered).
    pub(super) async fn stopped(&mut self) -> Result<(), StoreError> {
        let mut record = CaptureRecord::new(
            self.next_seq,
            RecordKind::Stop,
            self.cycles.current(),
            self.clock.unix_ms(),
        );
        self.next_seq += 1;
        record.pid = self.cycles.pid();
        self.append(record).await
    }

    /// The first answer of a boot cycle: a `cycle` record with its process and build.
    pub(super) async fn note_cycle(&mut self, first: &CaptureRecord) -> Result<(), StoreError> {
        let mut build = self.build_info(self.timeout()).await;
        if let Some(pid) = first.pid.filter(|_| self.pid_is_local()) {
            // What the executable itself says: the module version, vcs.revision, -ldflags.
            let read = tokio::task::spawn_blocking(move || buildinfo::read_process(pid)).await;
            if let Some(exe) = read.ok().flatten() {
                build = merge_builds(build, exe);
            }
        }
        let mut record = CaptureRecord::new(
            self.next_seq,
            RecordKind::Cycle,
            first.cycle,
            self.clock.unix_ms(),
        );
        self.next_seq += 1;
        record.pid = first.pid;
        record.build = build;
        if let Some(pid) = first.pid {
            self.cycle_of_pid.insert(pid, first.cycle);
        }
        self.cycle_noted = first.cycle;
        self.own_codes.note(&record);
        self.append(record).await
    }
}

/// The source's build, filled from the executable's: the source's figures win, but an
/// executable of another toolchain than the one the source reported is another program (a pid
/// of another namespace), and is left out.
fn merge_builds(source: Option<BuildInfo>, exe: BuildInfo) -> Option<BuildInfo> {
    match source {
        None => Some(exe),
        Some(b)
            if b.go_version.is_some()
                && exe.go_version.is_some()
                && b.go_version != exe.go_version =>
        {
            Some(b)
        }
        Some(mut b) => {
            b.fill_from(&exe);
            Some(b)
        }
    }
}

/// What the inbox held at the top of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inbox {
    Quiet,
    /// A process's end was written: the next attempt is due at once.
    Ended,
    /// Its senders are gone (`heapwatch run` is done with the command): the collector ends,
    /// as for a target gone for good, with no `stop` record.
    Closed,
}

/// How often a sleeping collector with an inbox looks into it.
const EVENT_POLL: Duration = Duration::from_millis(20);

impl Collector {
    /// Writes the events received so far.
    pub(super) async fn record_events(&mut self) -> Result<Inbox, StoreError> {
        let Some(events) = &self.events else {
            return Ok(Inbox::Quiet);
        };
        let mut pending = std::mem::take(&mut self.pending_events);
        let mut closed = self.events_closed;
        loop {
            match events.try_recv() {
                Ok(record) => pending.push(record),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        let ended = pending.iter().any(|r| r.kind == RecordKind::Exit);
        for mut record in pending {
            record.seq = self.next_seq;
            self.next_seq += 1;
            record.cycle = if record.kind == RecordKind::Exit {
                self.cycles.ended(record.pid)
            } else {
                self.cycles.current()
            };
            if record.kind == RecordKind::Exit {
                self.ends_to_tell.push(record.clone());
            }
            self.append(record).await?;
        }
        Ok(if closed {
            Inbox::Closed
        } else if ended {
            Inbox::Ended
        } else {
            Inbox::Quiet
        })
    }

    /// Sleeps until `wake`, or until an event arrives: a death told by whoever started the
    /// target makes the next attempt at once, which then waits for its successor.
    pub(super) async fn sleep_until(&mut self, wake: Duration) {
        if self.events.is_none() {
            return self.sleep_or_stop(wake).await;
        }
        loop {
            let now = self.clock.now();
            if now >= wake || self.stop.is_set() {
                return;
            }
            self.sleep_or_stop(wake.min(now + EVENT_POLL)).await;
            match self.events.as_ref().map(|e| e.try_recv()) {
                Some(Ok(record)) => {
                    self.pending_events.push(record);
                    return;
                }
                Some(Err(TryRecvError::Disconnected)) => {
                    self.events_closed = true;
                    return;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executables_build_fills_what_the_source_left_out_unless_it_is_another_program() {
        let agent = BuildInfo {
            version: Some("v2.1.0".into()),
            go_version: Some("go1.26.8".into()),
            ..BuildInfo::default()
        };
        let exe = BuildInfo {
            version: Some("v2.1.1".into()),
            go_version: Some("go1.26.8".into()),
            vcs_revision: Some("abc".into()),
            ldflags: Some("-X main.version=2.1.0".into()),
            ..BuildInfo::default()
        };
        let merged = merge_builds(Some(agent.clone()), exe.clone()).unwrap();
        assert_eq!(merged.version.as_deref(), Some("v2.1.0"));
        assert_eq!(merged.vcs_revision.as_deref(), Some("abc"));
        assert_eq!(merged.ldflags.as_deref(), Some("-X main.version=2.1.0"));
        let other = BuildInfo {
            go_version: Some("go1.22.1".into()),
            ..exe.clone()
        };
        assert_eq!(merge_builds(Some(agent.clone()), other), Some(agent));
        assert_eq!(merge_builds(None, exe.clone()), Some(exe));
    }
}
