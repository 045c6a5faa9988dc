//! What a walk that fails says: a damaged list, a read that faulted, a profile that kept
//! changing or a deadline that passed. Addresses are in hex, counts as the walk found them.

use std::fmt;

use crate::source::proc::memory::ReadFault;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    Read {
        what: &'static str,
        fault: ReadFault,
    },
    TooManyBuckets(usize),
    /// The list came back to a bucket it had already passed.
    Cycle {
        addr: u64,
        index: usize,
    },
    /// The buckets read so far hold more bytes than the budget (what the process has mapped).
    OverBudget {
        budget: u64,
        buckets: usize,
    },
    BucketType {
        addr: u64,
        typ: u64,
    },
    StackTooDeep {
        addr: u64,
        nstk: u64,
        max: usize,
    },
    /// The profile changed (a GC cycle or a flush) during every attempt.
    Busy {
        attempts: usize,
    },
    /// The deadline passed before a whole, checked walk.
    Deadline {
        buckets: usize,
    },
    /// `runtime.allgs` says more goroutines than its mapping holds (or than its capacity).
    BadAllgs {
        ptr: u64,
        len: u64,
        cap: u64,
    },
    /// The same `g` twice in `allgs`.
    GoroutineRepeat {
        addr: u64,
        index: usize,
    },
    /// A `g` whose status no runtime uses: not a goroutine.
    GoroutineStatus {
        addr: u64,
        status: u32,
    },
    /// The deadline passed before every goroutine was read.
    GoroutineDeadline {
        read: usize,
    },
    /// `runtime.allp` says more Ps than a runtime has (or than its capacity).
    BadAllp {
        ptr: u64,
        len: u64,
    },
    /// The goroutines would take more bytes than the process has mapped.
    GoroutinesOverBudget {
        budget: u64,
        goroutines: u64,
    },
}

impl WalkError {
    /// A walk that ran out of time or met a changing profile: worth another try later, unlike
    /// a damaged list.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            WalkError::Busy { .. }
                | WalkError::Deadline { .. }
                | WalkError::GoroutineDeadline { .. }
        )
    }
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::Read { what, fault } => write!(f, "reading {what}: {fault}"),
            WalkError::TooManyBuckets(n) => write!(
                f,
                "more than {n} heap profile buckets (a corrupt or cyclic list?)"
            ),
            WalkError::Cycle { addr, index } => write!(
                f,
                "the heap profile's bucket list loops: bucket {} (at {addr:#x}) is one it \
                 already passed, so the list is corrupt",
                index + 1
            ),
            WalkError::OverBudget { budget, buckets } => write!(
                f,
                "the first {buckets} heap profile buckets already hold more than {} MiB, more \
                 than the process has mapped or heapwatch copies in one walk (a corrupt list?)",
                budget >> 20
            ),
            WalkError::BucketType { addr, typ } => {
                write!(f, "bucket at {addr:#x} has type {typ}, not a heap bucket")
            }
            WalkError::StackTooDeep { addr, nstk, max } => write!(
                f,
                "bucket at {addr:#x} claims {nstk} stack frames, above the runtime's limit of {max}"
            ),
            WalkError::Busy { attempts } => write!(
                f,
                "the heap profile changed under the reader in {attempts} attempts (a GC cycle \
                 was flushing it); try again"
            ),
            WalkError::Deadline { buckets } => write!(
                f,
                "the timeout passed before a whole heap profile was read ({buckets} buckets in \
                 the last attempt)"
            ),
            WalkError::BadAllgs { ptr, len, cap } => write!(
                f,
                "runtime.allgs is corrupt: it says {len} goroutines (capacity {cap}) at \
                 {ptr:#x}, more than its capacity or than the memory mapped there holds"
            ),
            WalkError::GoroutineRepeat { addr, index } => write!(
                f,
                "runtime.allgs is corrupt: goroutine {} (at {addr:#x}) is one it already \
                 listed, so the list loops",
                index + 1
            ),
            WalkError::GoroutineStatus { addr, status } => write!(
                f,
                "the goroutine at {addr:#x} has status {status}, which no Go runtime uses (a \
                 corrupt runtime.allgs?)"
            ),
            WalkError::GoroutineDeadline { read } => write!(
                f,
                "the timeout passed before every goroutine was read ({read} read)"
            ),
            WalkError::BadAllp { ptr, len } => write!(
                f,
                "runtime.allp is corrupt: it says {len} Ps at {ptr:#x}, more than its \
                 capacity or than a Go runtime runs"
            ),
            WalkError::GoroutinesOverBudget { budget, goroutines } => write!(
                f,
                "runtime.allgs lists {goroutines} goroutines, more than the {} MiB the process \
                 has mapped could hold (a corrupt list?)",
                budget >> 20
            ),
        }
    }
}
