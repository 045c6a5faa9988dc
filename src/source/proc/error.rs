//! What heapwatch says when it cannot attach to a process, or cannot read it.
//!
//! # Errors
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

use thiserror::Error;

use super::binary::BinaryError;
use super::walk;

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

#[cfg(test)]
mod tests {
    use super::*;

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
