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
//! | `pclntab.rs`, `pclntab/` | the pclntab (Go 1.20+ layout): function table, names, files, lines, inline tree |
//! | `memory.rs` | `TargetMemory`: `process_vm_readv` bounded by `/proc/PID/maps`, or a byte image |
//! | `walk.rs`, `walk/` | the bucket walker and `MemProfile`'s flush rule |
//! | `encode.rs`, `encode/` | `protomem.go` and `proto.go`'s profile builder, on the project's prost types |
//! | `pieces.rs` | the gzip member put together from pieces deflated on their own |
//! | `sites.rs` | a capture's `sites.idx` entry, kept as the samples are written |
//! | `goroutines.rs`, `memstats.rs` | the goroutine profile and `runtime.MemStats`, read the same way |
//! | `follow.rs` | `proc:exe:` and `proc:cgroup:`: following a process across restarts |
//! | `attach.rs` | `ProcSource::attach`: the process checked once, its binary found and its runtime variables placed |
//! | `reader.rs` | the reader thread that does a process's reads, under the deadline |
//! | `error.rs` | `ProcError` |
//! | `mod.rs` | `ProcSource` (a `Source`): a capture of each kind |
//!
//! Each file's own doc holds the decisions about it: the walk's bounds and its two reads
//! (`walk`), the samples and what is not published yet (`encode`), the gzip pieces (`pieces`),
//! symbols (`pclntab`, `module`, `stripped`, `binary`), goroutines and MemStats, the reader
//! thread and what is never done to the target (`reader`), the errors (`error`).
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
//! ## Goroutines and MemStats out of a process's memory (`goroutines.rs`, `memstats.rs`)
//!
//! The `proc:` source reads two more things than the heap profile, on the same reader thread
//! and under the same deadline, byte budget and checks as the bucket walk. Both come back in the
//! form the HTTP source gets them, so the collector, `growth`, the report and Pyroscope take them
//! unchanged (no code in `src/collect/` knows where they came from). How each is read is in
//! `goroutines`' and `memstats`' docs.
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

mod attach;
pub mod binary;
pub mod encode;
mod error;
pub mod follow;
pub mod goroutines;
pub mod memory;
pub mod memstats;
pub mod module;
pub mod pclntab;
pub mod pieces;
mod reader;
pub mod sites;
pub mod stripped;
pub mod walk;

use std::fs;
use std::sync::Arc;
use std::time::Duration;

use self::binary::GoBinary;
use self::encode::{Encoder, GoroutineEncoder, Symbols};
use self::memory::{ProcessMemory, ReadFault};
use self::reader::{Job, Read, Reader};
use self::walk::{Anchors, Layout, Limits, WalkError};
use super::{FailureKind, FetchError, Made, Reply, SiteNaming, Source, SourceKind, Want};
use crate::model::build::BuildInfo;
use crate::model::capture::GcClock;

pub use self::error::{PTRACE_HELP, ProcError};

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

fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::source::procfind::parse_stat(&stat).map(|(_, _, start)| start)
}
impl ProcSource {
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

    fn now_nanos() -> i64 {
        crate::time::now_ns()
    }

    /// One heap capture: the gzipped pprof bytes, or a failed attempt by `timeout`. Its GC
    /// clock is [`ProcSource::gc_clock`].
    pub fn capture_heap(&mut self, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        let Read::Heap(rate, mut snapshot) = self.read(Job::Heap, timeout)? else {
            return Err(self.fail(FailureKind::Other, "the reader answered another question"));
        };
        let syms = Symbols {
            table: &self.binary.pclntab,
            bias: self.bias,
            hide_internal_runtime: self.layout.hides_internal_runtime,
        };
        let gz = self
            .encoder
            .heap_profile_gz_of(&mut snapshot, rate, &syms, Self::now_nanos());
        self.gc = snapshot.num_gc.map(|num_gc| GcClock {
            num_gc,
            profile_cycle: Some(snapshot.cycle),
        });
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
}
