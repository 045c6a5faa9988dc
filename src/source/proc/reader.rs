//! The reader thread: a process's reads run on a thread of their own, under the capture's
//! deadline.
//!
//! # The reader thread, and what is never done to the target
//!
//! - `--timeout` is honoured: the walk checks the deadline between attempts and every 64
//!   buckets, and the reads run on a thread of their own (`Reader`), because `process_vm_readv`
//!   cannot be interrupted: a page that never arrives (a userfaultfd nobody serves, a file on a
//!   stalled FUSE mount) blocks it for good. At the deadline the attempt fails as a timeout and
//!   the thread is left behind; while it is still blocked, the next attempts fail at once ("a read
//!   from an earlier capture is still blocked") rather than send a second thread after it.
//! - Nothing is written to the target and it is never stopped: no ptrace attach, no signals.
//! - A reused pid is caught by the start time in `/proc/PID/stat`; a process gone mid-read is a
//!   failed attempt of kind `refused` (gone), never a partial profile.
//!
//! The other bounds on a read (the mappings, the loop and size limits, the byte budget, the two
//! reads of every record) are the walker's: `walk`'s doc.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::binary::GoBinary;
use super::memory::{MapLine, ProcessMemory, ReadFault, TargetMemory as _};
use super::walk::{Anchors, Layout, Limits, WalkError};
use super::{FailureKind, FetchError, ProcSource, goroutines, memstats, start_time, walk};

/// What one capture reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Job {
    Heap,
    Goroutines,
    MemStats,
}

/// One capture's reads, handed to the reader thread.
struct ReadJob {
    memory: ProcessMemory,
    limits: Limits,
    /// The last capture's snapshot, handed back for its buffers.
    spare: walk::Snapshot,
    job: Job,
}

/// What the reader thread read.
pub(super) enum Read {
    Heap(i64, walk::Snapshot),
    Goroutines(goroutines::Goroutines),
    MemStats(String),
}

type ReadReply = Result<Read, WalkError>;

/// What the reader thread needs to know of the process, fixed at attach.
#[derive(Clone)]
struct ReaderSetup {
    anchors: Anchors,
    layout: Layout,
    rate_addr: u64,
    binary: Arc<GoBinary>,
    bias: u64,
    /// `runtime.allgs` (load bias applied) and the `g` layout, when goroutines can be read.
    goroutines: Option<(u64, goroutines::GLayout)>,
    /// Where MemStats are read from, when they can be.
    memstats: Option<(memstats::MemAnchors, memstats::MemLayout)>,
}

/// `process_vm_readv` cannot be interrupted: a page that never arrives (a userfaultfd nobody
/// serves, a file on a stalled FUSE mount) blocks it for good. So a process's reads run on a
/// thread of their own, one per attached process and kept from capture to capture; a capture
/// waits for its reply until the deadline, and a reader still blocked past it gets no more
/// work until it answers.
pub(super) struct Reader {
    requests: mpsc::Sender<ReadJob>,
    replies: mpsc::Receiver<ReadReply>,
    /// A job was sent whose reply has not come back.
    outstanding: bool,
}

impl ReaderSetup {
    fn heap(&self, job: &ReadJob, buffers: &mut walk::Buffers) -> ReadReply {
        let rate = job
            .memory
            .read_u64(self.rate_addr)
            .map_err(|fault| WalkError::Read {
                what: "runtime.MemProfileRate",
                fault,
            })?;
        let snapshot = walk::walk_reusing(
            &job.memory,
            &self.anchors,
            &self.layout,
            &job.limits,
            buffers,
        )?;
        Ok(Read::Heap(rate as i64, snapshot))
    }

    fn goroutines(&self, job: &ReadJob) -> ReadReply {
        let Some((allgs, layout)) = self.goroutines else {
            return Err(WalkError::Read {
                what: "runtime.allgs",
                fault: ReadFault::Other("its address is not known".into()),
            });
        };
        let unwinding = goroutines::Unwinding {
            table: &self.binary.pclntab,
            bias: self.bias,
            layout,
        };
        goroutines::walk(&job.memory, allgs, &unwinding, &job.limits).map(Read::Goroutines)
    }

    fn memstats(&self, job: &ReadJob) -> ReadReply {
        let Some((anchors, layout)) = self.memstats else {
            return Err(WalkError::Read {
                what: "runtime.memstats",
                fault: ReadFault::Other("its address is not known".into()),
            });
        };
        memstats::read(&job.memory, &anchors, &layout).map(Read::MemStats)
    }
}

impl Reader {
    fn spawn(pid: u32, setup: ReaderSetup) -> std::io::Result<Reader> {
        let (requests, jobs) = mpsc::channel::<ReadJob>();
        let (answer, replies) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("proc-read-{pid}"))
            .spawn(move || {
                let mut buffers = walk::Buffers::default();
                // Ends when the source is dropped (its sender with it).
                while let Ok(mut job) = jobs.recv() {
                    let read = match job.job {
                        Job::Heap => {
                            // An empty one: the capture it came back from failed, and what
                            // the walk kept then is still the newest list read.
                            if job.spare.head != 0 || buffers.spare.head == 0 {
                                buffers.spare = std::mem::take(&mut job.spare);
                            }
                            setup.heap(&job, &mut buffers)
                        }
                        Job::Goroutines => setup.goroutines(&job),
                        Job::MemStats => setup.memstats(&job),
                    };
                    if answer.send(read).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Reader {
            requests,
            replies,
            outstanding: false,
        })
    }
}

impl ProcSource {
    /// One read on the reader thread, bounded by `timeout`.
    pub(super) fn read(&mut self, job: Job, timeout: Duration) -> Result<Read, FetchError> {
        let deadline = Instant::now() + timeout;
        if start_time(self.pid) != self.started || self.started.is_none() {
            return Err(self.gone());
        }
        // A read still blocked from an earlier capture: nothing more is sent after it.
        if let Some(reader) = &mut self.reader {
            if reader.outstanding {
                match reader.replies.try_recv() {
                    Err(mpsc::TryRecvError::Empty) => {
                        return Err(self.fail(
                            FailureKind::Timeout,
                            "a read of its memory from an earlier capture is still blocked (a \
                             page that never arrives: userfaultfd, or a file on a stalled FUSE \
                             mount)",
                        ));
                    }
                    Ok(_) => reader.outstanding = false,
                    Err(mpsc::TryRecvError::Disconnected) => self.reader = None,
                }
            }
        }
        let Ok(lines) = self.memory.refresh() else {
            return Err(self.gone());
        };
        if let Some((inode, start, offset)) = self.text {
            let same = |l: &MapLine| {
                l.executable && (l.inode, l.start, l.offset) == (inode, start, offset)
            };
            if !lines.iter().any(same) {
                return Err(self.fail(
                    FailureKind::Refused,
                    "it no longer runs the program heapwatch attached to: its executable's code \
                     is not where it was (an exec in the same process); attach to it again",
                ));
            }
        }
        let limits = Limits {
            max_bytes: self.limits.max_bytes.min(self.memory.readable_bytes()),
            deadline: Some(deadline),
            ..self.limits
        };
        if self.reader.is_none() {
            let setup = ReaderSetup {
                anchors: self.anchors,
                layout: self.layout,
                rate_addr: self.rate_addr,
                binary: Arc::clone(&self.binary),
                bias: self.bias,
                goroutines: self.goroutines,
                memstats: self.memstats,
            };
            self.reader = Some(Reader::spawn(self.pid, setup).map_err(|e| {
                self.fail(FailureKind::Other, format!("starting a reader thread: {e}"))
            })?);
        }
        let Some(reader) = self.reader.as_mut() else {
            return Err(self.fail(FailureKind::Other, "no reader thread"));
        };
        let spare = if job == Job::Heap {
            std::mem::take(&mut self.spare)
        } else {
            walk::Snapshot::default()
        };
        let job = ReadJob {
            memory: self.memory.clone(),
            limits,
            spare,
            job,
        };
        if reader.requests.send(job).is_err() {
            self.reader = None;
            return Err(self.fail(FailureKind::Other, "the reader thread ended"));
        }
        match reader
            .replies
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(read) => read.map_err(|e| self.walk_error(e)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                reader.outstanding = true;
                Err(self.fail(
                    FailureKind::Timeout,
                    format!(
                        "no whole read of its memory within the {} timeout: a read \
                         blocked (a page that never arrives: userfaultfd, or a file on a \
                         stalled FUSE mount)",
                        crate::units::format_duration(timeout)
                    ),
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.reader = None;
                Err(self.fail(FailureKind::Other, "the reader thread ended"))
            }
        }
    }
}
