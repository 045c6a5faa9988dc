//! The heap profile as `runtime/pprof` writes it (`protomem.go`, `proto.go`): its four sample
//! types, then `recent_objects` and `recent_space` (what was allocated since the last
//! published cycle), `inuse_space` named the default, period = MemProfileRate, samples scaled like `scaleHeapSample`, leading runtime
//! frames hidden, a `bytes` label, and each run of inlined frames grouped into one location
//! the way `profileBuilder`'s pc deck groups them.
//!
//! One file per idea: `tables.rs` (the strings, functions and locations kept for the life of the
//! process, and the pc deck), `samples.rs` (one bucket's `Sample` message), `heap.rs` (a heap
//! capture: the samples kept by place, deflated in pieces, the site index entry), `goroutine.rs`
//! (the goroutine profile). Here: the symbols a PC is resolved against.

mod goroutine;
mod heap;
mod samples;
mod tables;

use super::pclntab::{Frame, Pclntab};

pub use self::goroutine::GoroutineEncoder;
pub use self::heap::Encoder;
pub use self::samples::{hide_leading_runtime, scale_heap_sample};

/// Resolves the target's runtime PCs against the binary's table (link-time addresses).
pub struct Symbols<'a> {
    pub table: &'a Pclntab,
    /// Added to link-time addresses to get the target's (PIE load bias, else 0).
    pub bias: u64,
    /// Go 1.24+ also hides `internal/runtime/…` frames; Go 1.23 only `runtime.`.
    pub hide_internal_runtime: bool,
}

impl Symbols<'_> {
    /// `allFrames`: the frame one return PC stands for; none for `runtime.goexit` or a PC
    /// outside Go code.
    fn frames(&self, addr: u64) -> Vec<Frame> {
        match self.table.frame(addr.wrapping_sub(self.bias)) {
            Some(mut f) if f.function != "runtime.goexit" => {
                f.pc = f.pc.wrapping_add(self.bias);
                f.entry = f.entry.wrapping_add(self.bias);
                vec![f]
            }
            _ => Vec::new(),
        }
    }

    fn is_runtime(&self, addr: u64) -> bool {
        self.table
            .func_for_pc(addr.wrapping_sub(self.bias))
            .is_some_and(|name| {
                name.starts_with("runtime.")
                    || (self.hide_internal_runtime && name.starts_with("internal/runtime/"))
            })
    }
}

/// One executable mapping of the target, for the profile's mapping table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExeMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub file: String,
    pub build_id: String,
}

impl Pclntab {
    /// `expand_final_inline` over runtime addresses.
    fn expand_final_inline_biased(&self, stack: &mut Vec<u64>, bias: u64) {
        for pc in stack.iter_mut() {
            *pc = pc.wrapping_sub(bias);
        }
        self.expand_final_inline(stack);
        for pc in stack.iter_mut() {
            *pc = pc.wrapping_add(bias);
        }
    }
}
