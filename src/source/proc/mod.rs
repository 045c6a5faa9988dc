//! `proc:PID`: the heap profile read straight out of a Go process's memory. No endpoint, no
//! agent, nothing asked of the target: the runtime's profile buckets are copied with
//! `process_vm_readv`, symbolised from the binary's own `.gopclntab`, and written as the
//! gzipped pprof profile `runtime/pprof` would have served at that instant.
//!
//! # The proc source (`src/source/proc/`): the heap profile out of the target's memory
//!
//! `heapwatch collect proc:PID` asks the target for nothing. The Go runtime keeps its heap
//! profile in its own memory, so heapwatch copies it out with `process_vm_readv` and writes the
//! gzipped pprof profile `runtime/pprof` would have served at that instant. The module follows
//! the data:
//!
//! | file | job |
//! | --- | --- |
//! | `binary.rs` | the ELF at `/proc/PID/exe`: `.go.buildinfo` (version, GOEXPERIMENTs), build ids, runtime variables from `.symtab`; cached per Go build id |
//! | `module.rs` | `runtime.firstmoduledata` read from the file: where the pclntab is, the text base and text sections, `gofunc` |
//! | `stripped.rs` | the same variables without `.symtab`, from the code that loads them |
//! | `pclntab.rs` | the pclntab (Go 1.20+ layout): function table, names, files, lines, inline tree |
//! | `memory.rs` | `TargetMemory`: `process_vm_readv` bounded by `/proc/PID/maps`, or a byte image |
//! | `walk.rs` | the bucket walker and `MemProfile`'s flush rule |
//! | `encode.rs` | `protomem.go` and `proto.go`'s profile builder, on the project's prost types |
//! | `pieces.rs` | the gzip member put together from pieces deflated on their own |
//! | `sites.rs` | a capture's `sites.idx` entry, kept as the samples are written |
//! | `goroutines.rs`, `memstats.rs` | the goroutine profile and `runtime.MemStats`, read the same way |
//! | `follow.rs` | `proc:exe:` and `proc:cgroup:`: following a process across restarts |
//! | `mod.rs` | `ProcSource` (a `Source`), `ProcError` |
//!
//! Each file's own doc holds the decisions about it: the walk's bounds and its two reads
//! (`walk`), the samples and what is not published yet (`encode`), the gzip pieces (`pieces`),
//! symbols (`pclntab`, `module`, `stripped`, `binary`), goroutines and MemStats.
//!
//! ## What a capture is
//!
//! Exactly `runtime.MemProfile(nil, true)` at that instant: per bucket, `active` plus the future
//! slot `mProfCycle % 3` that `memProfileInternal` flushes first; when every bucket is still empty
//! after that (no GC has run), all cycles summed, as the runtime does. Scaling
//! (`scaleHeapSample`), the hidden leading `runtime.` frames (and `internal/runtime/` from Go 1.24,
//! as each release's `protomem.go` does), the `bytes` label, period = `MemProfileRate`, and the
//! grouping of inlined frames into locations (the `pcDeck` rule, location cache included) follow
//! the target's own Go release. The future cycles (allocations the runtime has not published yet)
//! are left out of the four standard sample types: they would make a capture differ from what the
//! target's pprof says (they get two sample types of their own, `encode`'s doc says how).
//!
//! The judge is the target itself: the procheap fixture freezes its published profile (two GCs,
//! then `SetGCPercent(-1)`), and tests/cli/proc.rs holds `go tool pprof -top` on all four sample
//! types and `-traces` of the proc capture against `/debug/pprof/heap`, byte for byte, for Go
//! 1.26, go1.25.5, go1.24.6 and go1.23.12, each plain, stripped and PIE, and each also linked by
//! the system linker: a cgo program (its own C code) and a pure Go one built with
//! `-ldflags=-linkmode=external`, each plain, stripped and PIE; and go1.24.6 built with
//! `GOEXPERIMENT=nospinbitmutex`. Only releases whose layout a test has verified are read
//! (`walk::layout_for`, go1.23 to go1.26); any other is refused with its version named. amd64
//! only.
//!
//! ## The reader thread, and what is never done to the target
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
//!
//! ## Goroutines and MemStats out of a process's memory (`goroutines.rs`, `memstats.rs`)
//!
//! The `proc:` source reads two more things than the heap profile, on the same reader thread
//! and under the same deadline, byte budget and checks as the bucket walk. Both come back in the
//! form the HTTP source gets them, so the collector, `growth`, the report and Pyroscope take them
//! unchanged (no code in `src/collect/` knows where they came from). How each is read is in
//! `goroutines`' and `memstats`' docs.
//!
//! ## Errors
//!
//! `ProcError` names the pid and the target and what is wrong: no process; permission (root,
//! `CAP_SYS_PTRACE`, the same uid under `kernel.yama.ptrace_scope`, or in Kubernetes a debug
//! container sharing the pod's process namespace with `SYS_PTRACE`); not Go; heap profiling
//! disabled by the linker (`runtime.disableMemoryProfiling`, set when nothing references
//! `runtime.MemProfile`); an unsupported release or GOEXPERIMENT, named; a stripped binary whose
//! variables could not be recovered; a binary whose function table cannot be mapped. After
//! attach, a fetch that fails is a recorded failed attempt like any HTTP one, its reason in
//! words with addresses in hex ("reading a bucket header: 48 bytes at 0x7fc4da808040 are
//! outside the process's readable memory (a pointer into unmapped memory)"). The corrupt fixture
//! (`testdata/go/procheap/corrupt`, built with `-ldflags=-checklinkname=0`) damages its own
//! profile through a linkname to `runtime.mbuckets`, GC off: a looping list, `nstk` of 2^40, a
//! pointer into unmapped memory, a pointer into pages a userfaultfd never serves; one collect of
//! all four beside a healthy target records a failed attempt with its reason for each, each
//! within the timeout, the healthy target captured throughout, the collector under 200 MiB.
//!
//! ## Dependencies
//!
//! - **object** (read-only: `read_core`, `elf`, `std`), in `binary.rs` and `module.rs`: section headers,
//!   `.symtab`, notes and segments of the target's ELF file. The gimli/backtrace ecosystem's ELF
//!   reader, maintained alongside the Rust toolchain's own use of it; hand-parsing ELF safely
//!   against arbitrary files would be more code to trust than the crate.
//! - **iced-x86** (`decoder` and `std` only), in `stripped.rs`: decodes x86-64 to find the
//!   RIP-relative operands in stripped binaries. A widely used, actively maintained decoder; only
//!   the decoder is compiled (no formatter, encoder or instruction-info tables).

pub mod binary;
pub mod encode;
pub mod follow;
pub mod goroutines;
pub mod memory;
pub mod memstats;
pub mod module;
pub mod pclntab;
pub mod pieces;
pub mod sites;
pub mod stripped;
pub mod walk;

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use thiserror::Error;

use self::binary::{BinaryError, GoBinary};
use self::encode::{Encoder, ExeMapping, GoroutineEncoder, Symbols};
use self::memory::{MapLine, ProcessMemory, ReadFault, TargetMemory as _};
use self::walk::{Anchors, Layout, Limits, WalkError};
use super::{FailureKind, FetchError, Made, Reply, SiteNaming, Source, SourceKind, Want};
use crate::model::build::BuildInfo;
use crate::model::capture::GcClock;

/// What a user without ptrace rights over the target needs; said on every EPERM.
pub const PTRACE_HELP: &str = "reading another process's memory needs ptrace rights over it: \
     run heapwatch as root, or give it CAP_SYS_PTRACE, or run it as the target's uid with \
     kernel.yama.ptrace_scope at 0 (1 allows only a parent); in Kubernetes, use a debug \
     container that shares the pod's process namespace (shareProcessNamespace: true, or \
     kubectl debug --target) with securityContext.capabilities.add: [SYS_PTRACE]";

#[derive(Debug, Error)]
pub enum ProcError {
    #[error("{target}: no process {pid} (it has exited, or the pid is wrong)")]
    NoProcess { pid: u32, target: String },
    #[error("{target}: permission denied reading process {pid}: {help}", help = PTRACE_HELP)]
    Permission { pid: u32, target: String },
    #[error("{target}: process {pid}: {source}")]
    Binary {
        pid: u32,
        target: String,
        source: BinaryError,
    },
    #[error(
        "{target}: process {pid} was built with {version}; heapwatch reads the heap profile out \
         of memory only for {supported} (layouts verified by its tests); use the HTTP or agent \
         source for this one",
        supported = walk::SUPPORTED
    )]
    UnsupportedVersion {
        pid: u32,
        target: String,
        version: String,
    },
    #[error(
        "{target}: process {pid} was built with GOEXPERIMENT={experiment} ({version}), which \
         changes the layout of the runtime's profile lock that heapwatch reads; use the HTTP or \
         agent source for this one"
    )]
    UnsupportedExperiment {
        pid: u32,
        target: String,
        version: String,
        experiment: String,
    },
    #[error(
        "{target}: process {pid} has heap profiling disabled by the linker \
         (runtime.disableMemoryProfiling: nothing in the program calls runtime.MemProfile or \
         imports runtime/pprof), so it keeps no heap profile to read"
    )]
    ProfilingDisabled { pid: u32, target: String },
    #[error("{target}: process {pid}: {detail}")]
    Unreadable {
        pid: u32,
        target: String,
        detail: String,
    },
}

/// A Go process whose heap profile heapwatch reads out of its memory.
pub struct ProcSource {
    pid: u32,
    target: String,
    binary: Arc<GoBinary>,
    layout: Layout,
    anchors: Anchors,
    rate_addr: u64,
    bias: u64,
    /// Tables and per-PC symbols kept from one capture to the next.
    encoder: Encoder,
    goroutine_encoder: GoroutineEncoder,
    /// `runtime.allgs` (load bias applied) and the release's `g` layout, when known.
    goroutines: Option<(u64, goroutines::GLayout)>,
    /// Where MemStats are read from, when they can be.
    memstats: Option<(memstats::MemAnchors, memstats::MemLayout)>,
    memory: ProcessMemory,
    /// `/proc/PID/stat` start time: a reused pid is another process, not this one.
    started: Option<u64>,
    /// The executable's code mapping at attach (inode, start, file offset): gone from the
    /// maps, the process runs another program (an exec keeps the pid and the start time).
    text: Option<(u64, u64, u64)>,
    limits: Limits,
    /// The thread that does this process's reads, started at the first capture.
    reader: Option<Reader>,
    /// The last capture's snapshot, handed back to the reader for its buffers: 100,000
    /// buckets refilled in place rather than in fresh memory each capture.
    spare: walk::Snapshot,
    /// The last heap capture's GC clock.
    gc: Option<GcClock>,
}

/// What one capture reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
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
enum Read {
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
struct Reader {
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

fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::source::procfind::parse_stat(&stat).map(|(_, _, start)| start)
}

impl ProcSource {
    /// Checks the process now: that it is a supported Go program keeping a heap profile, and
    /// that heapwatch may read its memory.
    pub fn attach(pid: u32, target: impl Into<String>) -> Result<ProcSource, ProcError> {
        let target = target.into();
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        if pid == 0 || !proc_dir.is_dir() {
            return Err(ProcError::NoProcess { pid, target });
        }
        let started = start_time(pid);
        let exe = proc_dir.join("exe");
        let exe_meta = match fs::metadata(&exe) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(ProcError::Permission { pid, target });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let gone = !proc_dir.is_dir();
                return Err(if gone {
                    ProcError::NoProcess { pid, target }
                } else {
                    ProcError::Unreadable {
                        pid,
                        target,
                        detail: "it has no executable (a kernel thread or a zombie)".into(),
                    }
                });
            }
            Err(e) => {
                return Err(ProcError::Unreadable {
                    pid,
                    target,
                    detail: format!("{}: {e}", exe.display()),
                });
            }
        };
        let binary = binary::load(&exe).map_err(|source| match source {
            BinaryError::Read(ref e) if e.contains("denied") => ProcError::Permission {
                pid,
                target: target.clone(),
            },
            source => ProcError::Binary {
                pid,
                target: target.clone(),
                source,
            },
        })?;
        let version = binary.build.go_version.clone();
        let layout = binary
            .build
            .release()
            .and_then(walk::layout_for)
            .ok_or_else(|| ProcError::UnsupportedVersion {
                pid,
                target: target.clone(),
                version: version.clone(),
            })?;
        let layout =
            walk::with_experiments(layout, &binary.build.experiments()).map_err(|experiment| {
                ProcError::UnsupportedExperiment {
                    pid,
                    target: target.clone(),
                    version,
                    experiment,
                }
            })?;

        let mut memory = ProcessMemory::new(pid);
        let lines = memory.refresh().map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => ProcError::Permission {
                pid,
                target: target.clone(),
            },
            _ => ProcError::NoProcess {
                pid,
                target: target.clone(),
            },
        })?;
        let exe_path = fs::read_link(&exe)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let exe_lines: Vec<_> = lines
            .iter()
            .filter(|l| l.inode == exe_meta.ino() && l.inode != 0)
            .cloned()
            .collect();
        let bias = binary
            .load_bias(&exe_lines)
            .ok_or_else(|| ProcError::Unreadable {
                pid,
                target: target.clone(),
                detail: "its executable is not in /proc/PID/maps, so its load address is unknown"
                    .into(),
            })?;
        let mappings: Vec<ExeMapping> = exe_lines
            .iter()
            .filter(|l| l.executable)
            .map(|l| ExeMapping {
                start: l.start,
                end: l.end,
                offset: l.offset,
                file: exe_path.clone(),
                build_id: binary.gnu_build_id.clone(),
            })
            .collect();
        let vars = binary.vars;
        let mem_layout = binary.build.release().and_then(memstats::mem_layout_for);
        let anchors = Anchors {
            mbuckets: vars.mbuckets.wrapping_add(bias),
            mprof_cycle: vars.mprof_cycle.wrapping_add(bias),
            prof_mem_active_lock: vars.prof_mem_active_lock.map(|a| a.wrapping_add(bias)),
            numgc: vars.memstats.zip(mem_layout).map(|([m, ..], layout)| {
                m.wrapping_add(bias)
                    .wrapping_add(memstats::numgc_offset(&layout))
            }),
        };
        let goroutines = vars
            .allgs
            .zip(binary.build.release().and_then(goroutines::g_layout_for));
        let source = ProcSource {
            pid,
            target,
            goroutines: goroutines.map(|(at, l)| (at.wrapping_add(bias), l)),
            goroutine_encoder: GoroutineEncoder::new(&mappings),
            memstats: vars.memstats.zip(mem_layout).map(|([m, g, h, p], layout)| {
                let at = |a: u64| a.wrapping_add(bias);
                let anchors = memstats::MemAnchors {
                    memstats: at(m),
                    gc_controller: at(g),
                    mheap: at(h),
                    allp: at(p),
                };
                (anchors, layout)
            }),
            rate_addr: vars.mem_profile_rate.wrapping_add(bias),
            binary,
            layout,
            anchors,
            bias,
            encoder: Encoder::new(&mappings),
            memory,
            started,
            text: exe_lines
                .iter()
                .find(|l| l.executable)
                .map(|l| (l.inode, l.start, l.offset)),
            limits: Limits::default(),
            reader: None,
            spare: walk::Snapshot::default(),
            gc: None,
        };
        let mut flag = [0u8; 1];
        let disable_at = vars.disable_memory_profiling.wrapping_add(bias);
        source
            .memory
            .read(disable_at, &mut flag)
            .map_err(|fault| source.attach_error(fault))?;
        if flag[0] != 0 {
            return Err(ProcError::ProfilingDisabled {
                pid,
                target: source.target,
            });
        }
        // The text base read from the file must be the one the live runtime uses, or every
        // PC would be named after a neighbour.
        let module = &source.binary.module;
        let text_at = module
            .addr
            .wrapping_add(module::TEXT_FIELD)
            .wrapping_add(bias);
        let live = source
            .memory
            .read_u64(text_at)
            .map_err(|fault| source.attach_error(fault))?;
        if live != module.text.wrapping_add(bias) {
            return Err(ProcError::Binary {
                pid,
                target: source.target.clone(),
                source: BinaryError::Module(format!(
                    "runtime.firstmoduledata.text is {live:#x} in the process, but the file \
                     gives {:#x} (load bias {bias:#x})",
                    module.text.wrapping_add(bias)
                )),
            });
        }
        Ok(source)
    }

    /// [`ProcSource::attach`] bounded by `timeout`: reading the executable (a file on a stalled
    /// FUSE mount) or the process's memory (a page that never arrives) can block for good, so
    /// the attach runs on a thread of its own, left behind at the timeout. While one is still
    /// blocked for a pid, another attach to it fails at once instead of adding a thread.
    pub fn attach_within(
        pid: u32,
        target: impl Into<String>,
        timeout: Duration,
    ) -> Result<ProcSource, ProcError> {
        static BLOCKED: OnceLock<Mutex<HashSet<u32>>> = OnceLock::new();
        let blocked = BLOCKED.get_or_init(Mutex::default);
        let target = target.into();
        let stalled = |detail: String| ProcError::Unreadable {
            pid,
            target: target.clone(),
            detail,
        };
        if blocked.lock().is_ok_and(|b| b.contains(&pid)) {
            return Err(stalled(
                "an earlier attach is still blocked reading its executable or its memory (a \
                 file on a stalled FUSE mount, or a page that never arrives)"
                    .into(),
            ));
        }
        if let Ok(mut b) = blocked.lock() {
            b.insert(pid);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let name = target.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("proc-attach-{pid}"))
            .spawn(move || {
                let _ = tx.send(ProcSource::attach(pid, name));
                if let Ok(mut b) = blocked.lock() {
                    b.remove(&pid);
                }
            });
        if let Err(e) = spawned {
            if let Ok(mut b) = blocked.lock() {
                b.remove(&pid);
            }
            return Err(stalled(format!("starting an attach thread: {e}")));
        }
        rx.recv_timeout(timeout).unwrap_or_else(|_| {
            Err(stalled(format!(
                "attaching did not finish within the {} timeout: reading its executable or its \
                 memory blocked (a file on a stalled FUSE mount, or a page that never arrives)",
                crate::units::format_duration(timeout)
            )))
        })
    }

    fn attach_error(&self, fault: ReadFault) -> ProcError {
        let (pid, target) = (self.pid, self.target.clone());
        match fault {
            ReadFault::Denied => ProcError::Permission { pid, target },
            ReadFault::Gone => ProcError::NoProcess { pid, target },
            other => ProcError::Unreadable {
                pid,
                target,
                detail: format!("reading the runtime's variables: {other}"),
            },
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The Go release the target was built with (`go1.26.8`).
    pub fn go_version(&self) -> &str {
        &self.binary.build.go_version
    }

    /// Bounds the walk (tests and the fuzzer use small ones).
    pub fn with_limits(mut self, limits: Limits) -> ProcSource {
        self.limits = limits;
        self
    }

    fn fail(&self, kind: FailureKind, what: impl std::fmt::Display) -> FetchError {
        FetchError::new(
            kind,
            format!("{}: process {}: {what}", self.target, self.pid),
        )
    }

    fn gone(&self) -> FetchError {
        self.fail(FailureKind::Refused, "the process has exited")
    }

    /// One read on the reader thread, bounded by `timeout`.
    fn read(&mut self, job: Job, timeout: Duration) -> Result<Read, FetchError> {
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

    fn now_nanos() -> i64 {
        crate::time::now_ns()
    }

    /// One heap capture: the gzipped pprof bytes, or a failed attempt by `timeout`. Its GC
    /// clock is [`ProcSource::gc_clock`].
    pub fn capture_heap(&mut self, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        let Read::Heap(rate, snapshot) = self.read(Job::Heap, timeout)? else {
            return Err(self.fail(FailureKind::Other, "the reader answered another question"));
        };
        let syms = Symbols {
            table: &self.binary.pclntab,
            bias: self.bias,
            hide_internal_runtime: self.layout.hides_internal_runtime,
        };
        let gz = self.encoder.heap_profile_gz(
            walk::mem_records(&snapshot),
            snapshot.list,
            rate,
            &syms,
            Self::now_nanos(),
        );
        self.gc = snapshot.num_gc.map(|num_gc| GcClock {
            num_gc,
            profile_cycle: Some(snapshot.cycle),
        });
        let mut snapshot = snapshot;
        snapshot.forget_stacks();
        self.spare = snapshot;
        Ok(gz)
    }

    /// The runtime's GC clock as the last heap capture read it, in the same consistent read
    /// as its profile: `numgc` and the profile cycle did not move from before its walk to
    /// after. `None` when the runtime's MemStats were not found.
    pub fn gc_clock(&self) -> Option<GcClock> {
        self.gc
    }

    /// True when this process's goroutines can be read (a supported release whose
    /// `runtime.allgs` was found).
    pub fn reads_goroutines(&self) -> bool {
        self.goroutines.is_some()
    }

    /// One goroutine capture: the gzipped pprof goroutine profile, or a failed attempt.
    pub fn capture_goroutines(&mut self, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        // An answer, as an HTTP status is: the process is there, and cannot give this.
        if self.goroutines.is_none() {
            return Err(self.fail(
                FailureKind::Status,
                format!(
                    "its goroutines cannot be read: runtime.allgs was not found in its \
                     executable, or {} is not one of {}",
                    self.go_version(),
                    walk::SUPPORTED
                ),
            ));
        }
        let Read::Goroutines(gs) = self.read(Job::Goroutines, timeout)? else {
            return Err(self.fail(FailureKind::Other, "the reader answered another question"));
        };
        let syms = Symbols {
            table: &self.binary.pclntab,
            bias: self.bias,
            hide_internal_runtime: self.layout.hides_internal_runtime,
        };
        Ok(self
            .goroutine_encoder
            .goroutine_profile_gz(&gs, &syms, Self::now_nanos()))
    }

    /// True when this process's MemStats can be read (a supported release whose runtime
    /// variables were found, by symbol or, stripped, from its code).
    pub fn reads_memstats(&self) -> bool {
        self.memstats.is_some()
    }

    /// The process's MemStats, as the `# runtime.MemStats` block of a debug=1 heap profile.
    pub fn capture_memstats(&mut self, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        // An answer, as an HTTP status is: the process is there, and cannot give this.
        if self.memstats.is_none() {
            return Err(self.fail(
                FailureKind::Status,
                format!(
                    "its MemStats cannot be read: runtime.memstats, gcController, mheap_ and \
                     allp were found neither in its symbol table nor from the code of \
                     runtime.readmemstats_m, or {} is not one of {}",
                    self.go_version(),
                    walk::SUPPORTED
                ),
            ));
        }
        match self.read(Job::MemStats, timeout)? {
            Read::MemStats(text) => Ok(text.into_bytes()),
            _ => Err(self.fail(FailureKind::Other, "the reader answered another question")),
        }
    }

    fn walk_error(&self, e: WalkError) -> FetchError {
        match e {
            WalkError::Read {
                fault: ReadFault::Gone,
                ..
            } => self.gone(),
            WalkError::Read {
                fault: ReadFault::Denied,
                ..
            } => self.fail(FailureKind::Other, PTRACE_HELP),
            // A mapping that vanished mid-read is the process going away, when it has.
            _ if start_time(self.pid) != self.started => self.gone(),
            e if e.is_timeout() => self.fail(FailureKind::Timeout, e),
            other => self.fail(FailureKind::Other, other),
        }
    }
}

impl Source for ProcSource {
    fn target(&self) -> &str {
        &self.target
    }

    fn kind(&self) -> SourceKind {
        SourceKind::Proc
    }

    fn supports(&self, want: Want) -> bool {
        match want {
            Want::Heap => true,
            Want::Goroutine => self.reads_goroutines(),
            Want::MemStats => self.reads_memstats(),
            Want::Stats => false,
        }
    }

    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        let mut made = None;
        let bytes = match want {
            Want::Heap => {
                let gz = self.capture_heap(timeout)?;
                let sites = self.encoder.take_sites();
                // Without sites the collector decodes the protobuf to index it; with them it
                // needs none, and the encoder keeps its buffer.
                let raw = sites.is_none().then(|| self.encoder.take_raw());
                made = Some(Made {
                    len: self.encoder.raw_len() as u64,
                    summary: self.encoder.summary(),
                    raw,
                    sites,
                    gc: self.gc,
                });
                gz
            }
            Want::Goroutine => self.capture_goroutines(timeout)?,
            Want::MemStats => self.capture_memstats(timeout)?,
            Want::Stats => {
                return Err(self.fail(
                    FailureKind::Other,
                    format!("the proc source does not read {}", want.as_str()),
                ));
            }
        };
        Ok(Reply {
            bytes,
            pid: Some(self.pid),
            made,
        })
    }

    fn name_sites(&mut self, naming: SiteNaming) {
        let module = self.binary.build.module.clone();
        self.encoder.name_sites(&naming, module.as_deref());
    }

    fn build_info(&mut self, _timeout: Duration) -> Option<BuildInfo> {
        let b = &self.binary.build;
        Some(BuildInfo {
            version: b
                .main_version
                .clone()
                .filter(|v| !v.is_empty() && v != "(devel)"),
            go_version: Some(b.go_version.clone()),
            vcs_revision: b.vcs_revision.clone(),
            // What the sites of its captures are named for (see `name_sites`).
            module: b.module.clone(),
            ..BuildInfo::default()
        })
    }
}

/// `proc:PID` → the pid. Other `proc:` forms are not parsed here.
pub fn parse_target(target: &str) -> Option<Result<u32, String>> {
    let rest = target.strip_prefix("proc:")?;
    Some(rest.parse::<u32>().map_err(|_| {
        format!("{target}: expected proc:PID with a numeric process id, e.g. proc:1234")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_proc_pid_targets_parse_here() {
        assert_eq!(parse_target("proc:4242"), Some(Ok(4242)));
        assert!(parse_target("proc:exe:app").is_some_and(|r| r.is_err()));
        assert!(parse_target("proc:-1").is_some_and(|r| r.is_err()));
        assert_eq!(parse_target("http://127.0.0.1:6060"), None);
    }

    #[test]
    fn this_process_is_not_go_and_a_missing_one_is_not_there() {
        let me = std::process::id();
        let err = ProcSource::attach(me, "proc:self").err().unwrap();
        assert!(
            err.to_string()
                .starts_with(&format!("proc:self: process {me}: not a Go program")),
            "{err}"
        );
        let err = ProcSource::attach(0, "proc:0").err().unwrap();
        assert!(matches!(err, ProcError::NoProcess { pid: 0, .. }), "{err}");
        let err = ProcSource::attach_within(0, "proc:0", Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(matches!(err, ProcError::NoProcess { pid: 0, .. }), "{err}");
    }

    #[test]
    fn the_permission_message_names_every_way_to_get_rights() {
        let text = ProcError::Permission {
            pid: 7,
            target: "proc:7".into(),
        }
        .to_string();
        for needed in [
            "proc:7",
            "process 7",
            "root",
            "CAP_SYS_PTRACE",
            "ptrace_scope",
            "SYS_PTRACE",
        ] {
            assert!(text.contains(needed), "{needed}: {text}");
        }
    }
}
