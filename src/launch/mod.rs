//! `heapwatch run`: start a command under a memory limit, record it through the proc source
//! from its first milliseconds, write how each process ended, and restart it as a kubelet
//! would. An OOM loop reproduced in one command; the CLI only turns flags into this.
//!
//! # `heapwatch run` and following proc targets (`src/launch/`, `src/source/procfind.rs`, `src/source/proc/follow.rs`)
//!
//! | part | file | job |
//! |---|---|---|
//! | discovery | `source/procfind.rs` | `proc:exe:NAME`, `proc:cgroup:PATH` → a `ProcessId` (pid and start time) |
//! | following | `source/proc/follow.rs` | `FollowSource`: one `ProcSource` per process found, a new one after each end |
//! | memory cgroups | `source/cgroup.rs` | where the controller is mounted, its version, a v1 or v2 cgroup made with a limit and removed on drop (also read by `node/`, the sampler and `watch`) |
//! | confinement | `launch/confinement.rs` | the run's cgroup with the limit, or the watchdog |
//! | supervision | `launch/child.rs` | spawn (join the cgroup in `pre_exec`), wait, classify the end, back off, restart |
//! | recording | `launch/record.rs` | the threads of one run: supervisor, collector(s), memory sampler |
//! | the OOM hold | `launch/hold.rs` | hold the command at its OOM kill (v1), or slow it just below its limit (v2), until a capture is in the run |
//!
//! `src/cli/run.rs` only turns flags into a `launch::Recording`.
//!
//! ## One collector per run; deaths reach it through an inbox
//!
//! `run` reuses the `Collector`. No second capture loop was written, and no second writer touches a
//! manifest.
//!
//! - The supervisor runs on its own thread. It learns of each death from `waitpid`, which is
//!   exact, where the collector only sees refusals.
//! - It sends the `exit` record through a channel. The channel is the collector's inbox
//!   (`Collector::with_events`).
//! - The collector gives each record its seq before its next attempt, and when it stops.
//! - The boot cycle an `exit` belongs to is the one its pid answered in (`CycleTracker::ended`).
//!   This stays right when the successor was already captured before the record was written.
//! - A pid that never answered was a cycle of its own.
//! - A collector with an inbox sleeps in 20 ms slices and looks into it between them. An `exit`
//!   makes the next attempt at once. That attempt finds the process gone and waits (polling)
//!   for its successor, so after the kubelet-style backoff the restarted process is read
//!   within milliseconds of its exec, with no refused attempt in between.
//! - Without a supervisor (`collect proc:exe:`), an end is seen at the next attempt. From then
//!   on, the attempts poll continuously.
//! - When the supervisor is done (restarts used, an end the restart policy does not restart), it drops the inbox's senders. The
//!   collector writes what is queued, then ends as for a target gone for good. It writes no
//!   `stop`, because the target was seen to end.
//!
//! `--also` targets get `RUN/also-N/`, a complete run of their own: one collector, manifest and
//! `run.json` each. They share the memory sampler's figures (for burst mode) and receive the same
//! `exit` and `stop` records. A second collector writing into the same manifest would break "one
//! run, one manifest". Restricting `--also` to the memory sampler would lose exactly the agent or
//! HTTP profiles it is meant to add. A sub-run can be analysed with every command as it is.
//!
//! ## Ctrl-C is not a death
//!
//! The child is put in its own process group, so the terminal's SIGINT reaches only heapwatch.
//! On Ctrl-C the order is:
//!
//! 1. each collector writes its own `stop` record (its stop flag is Ctrl-C's). The supervisor
//!    waits for them, up to 5 s, so the `stop` comes while the command still runs;
//! 2. the process group is SIGKILLed;
//! 3. the child is reaped, with no `exit` record (the target was not seen to end by itself);
//! 4. the cgroup is removed.
//!
//! `PR_SET_PDEATHSIG` kills the child if the supervisor thread dies. A heapwatch killed with
//! SIGKILL leaves the cgroup behind: nothing can run after that.
//!
//! ## When a process has ended
//!
//! - A process is known by its pid **and its start time** (`/proc/PID/stat` field 22), so a
//!   reused pid is another process.
//! - A task with `PF_EXITING` counts as gone. An OOM-killed process spends tens of milliseconds
//!   tearing down its memory before it becomes a zombie. Reads in that window fail as "unmapped"
//!   and are recorded as refused, not as errors.
//! - The `exit` record's time is when the kill was seen: the cgroup's `oom_kill` counter, polled
//!   every 5 ms with the child. The reap would be that teardown later.
//!
//! ## The same pid, never seen gone, is the same boot cycle
//!
//! `CycleTracker` does not open a cycle on every drop in a cumulative total. A proc capture taken
//! before the first GC sums every cycle as `MemProfile` would. The runtime's `MemProfile` *moves*
//! those counts into `active` when it does so. The proc source never writes to the target, so it
//! cannot, and the first GC then publishes fewer. When both captures carry the same pid and no
//! refusal came between them, the pid decides.
//!
//! This holds only for proc sources, whose pid is checked with its start time. An agent's pid
//! can stay the same while what answers changes (a replay serves every boot cycle of a recording
//! from one process), so agent and HTTP sources keep the drop rule.

pub mod child;
pub mod confinement;
pub mod hold;
mod record;

use std::io;

use thiserror::Error;

use crate::source::cgroup::CgroupError;

pub use child::{Death, Ending, Launch, LifeEvent, RestartOn, RestartPolicy};
pub use confinement::Confinement;
pub use record::{Recording, RecordingOutcome, SubRun, record};

#[derive(Debug, Error)]
pub enum LaunchError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("{program}: cannot start it: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("waiting for pid {pid}: {source}")]
    Wait { pid: u32, source: io::Error },
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    /// The OOM hold's guardian could not put the cgroup's file back as it found it.
    #[error("{}: cannot put {value} back: {source}", .file.display())]
    PutBack {
        file: std::path::PathBuf,
        value: String,
        source: io::Error,
    },
}
