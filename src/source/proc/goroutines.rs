//! Goroutines read out of a live Go process: every `g` in `runtime.allgs`, counted by where
//! it was created, with the stack of each goroutine that is not running, unwound from its
//! saved `sched` (or syscall) PC and SP the way the runtime's own `tracebackPCs` unwinds it:
//! frame sizes from each function's `pcsp` table, inlined calls expanded through the inline
//! tree, wrappers elided. What `/debug/pprof/goroutine` records, taken without asking.
//!
//! A goroutine running on a thread while it is read has its registers on that thread, not in
//! its `g`: it is counted by its creation site and marked running, with no stack made up.
//!
//! # Goroutines out of a process's memory (`Want::Goroutine`, with `--profiles heap,goroutine`)
//!
//! Read on the same reader thread and under the same deadline, byte budget and checks as the
//! bucket walk; the reply is the profile the HTTP source would get, so nothing after the source
//! knows where it came from.
//!
//! - `runtime.allgs` is read as a slice header, then its array in one read. A length above its
//!   capacity, above 10 million, or past the end of the mapping its array starts in, and a `g`
//!   listed twice, are a failed attempt naming the damage; so is a status no runtime uses.
//! - Dead goroutines and system ones (started in a `runtime.` function other than `runtime.main`,
//!   as `isSystemGoroutine` says; the finalizer and cleanup goroutines count as system) are left
//!   out, as `/debug/pprof/goroutine` leaves them out.
//! - A goroutine that is not running is unwound from its saved `sched` PC/SP, or from
//!   `syscallpc`/`syscallsp` in a system call, the way `tracebackPCs` unwinds: each frame's size
//!   from its function's `pcsp` table (not frame pointers, which a preempted leaf does not set
//!   up), the return PC at the frame's top, the PC after an injected call (`asyncPreempt`,
//!   `sigpanic`) taken as is. Inlined calls are expanded through the inline tree, wrappers are
//!   elided as the runtime elides them, and the walk stops where the runtime stops: a top frame
//!   (`goexit`), a function that writes SP, a PC outside Go code; here also a frame outside the
//!   goroutine's stack bounds, and at 128 frames (`debug.profstackdepth`'s default). The used
//!   part of its stack is copied in one read (at most 64 KiB; beyond it, word by word).
//! - A goroutine is read, unwound, and its `g` read again: if it moved meanwhile it is read once
//!   more, then counted as running. Running goroutines (`_Grunning`, `_Gcopystack`) are counted,
//!   never unwound: their registers are on a thread.
//! - The profile is what `printCountProfile` writes (sample type and period `goroutine/count`,
//!   one sample per stack), with three labels the runtime's does not have: `created_by` (the
//!   physical function holding `gopc` and the file:line of the `go` statement, as a `debug=2`
//!   dump's `created by` line; none for goroutine 1 or a site in an unexported runtime function,
//!   which the dump does not name either), `go_func` (the function at `startpc`), and
//!   `state: running`. A running goroutine's sample has one location, its `go_func`. Goroutine
//!   labels (`pprof.Do`) are not read.
//! - The `g` offsets per release (go1.23–go1.26) are checked against each release's DWARF by
//!   `tests/cli/proc_goroutines.rs` (`testdata/go/procheap/layouts` prints them). Stripped
//!   binaries: `runtime.allgs` is recovered from `runtime.forEachG` (`stripped.rs`), whose loop
//!   loads the slice's pointer and length (two RIP-relative quadwords eight bytes apart).

use std::collections::HashSet;
use std::ops::Range;

use super::memory::TargetMemory;
use super::pclntab::{FUNC_FLAG_SP_WRITE, FUNC_FLAG_TOP_FRAME, Pclntab};
use super::walk::{Limits, WalkError};

/// Where the fields heapwatch reads sit in `runtime.g` for one range of Go releases (amd64),
/// and the `funcID` the release gives wrappers. Checked against each release's DWARF by
/// tests/cli/proc.rs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GLayout {
    /// `g.stack.lo`, `g.stack.hi`: offsets 0 and 8 in every release.
    pub sched_sp: u64,
    pub sched_pc: u64,
    pub syscallsp: u64,
    pub syscallpc: u64,
    pub atomicstatus: u64,
    pub goid: u64,
    pub gopc: u64,
    pub startpc: u64,
    /// `abi.FuncIDWrapper`.
    pub wrapper_id: u8,
}

impl GLayout {
    /// Bytes of a `g` read: up to and with `startpc`.
    pub fn prefix(&self) -> usize {
        self.startpc as usize + 8
    }
}

/// The `g` layout of a release, `None` for one not verified.
pub fn g_layout_for(release: (u32, u32)) -> Option<GLayout> {
    // go1.25 dropped `gobuf.ret`; go1.26 added fields before `gopc`.
    let (sys, status, gopc, wrapper_id) = match release {
        (1, 23 | 24) => (112, 152, 288, 22),
        (1, 25) => (104, 144, 280, 23),
        (1, 26) => (104, 144, 288, 23),
        _ => return None,
    };
    Some(GLayout {
        sched_sp: 56,
        sched_pc: 64,
        syscallsp: sys,
        syscallpc: sys + 8,
        atomicstatus: status,
        goid: status + 8,
        gopc,
        startpc: gopc + 16,
        wrapper_id,
    })
}

/// `debug.profstackdepth`'s default: the most frames the runtime records per goroutine.
pub const MAX_DEPTH: usize = 128;
/// Goroutines one walk accepts: a longer `allgs` is taken as corrupt.
pub const MAX_GOROUTINES: u64 = 10_000_000;
/// Bytes of one goroutine's stack copied at once, from its saved SP up.
const STACK_CHUNK: u64 = 64 << 10;

const G_RUNNING: u32 = 2;
const G_SYSCALL: u32 = 3;
const G_DEAD: u32 = 6;
const G_COPYSTACK: u32 = 8;
const G_DEAD_EXTRA: u32 = 11;
const G_SCAN: u32 = 0x1000;

/// What a goroutine was doing when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GState {
    /// Not on a thread: its stack is the one it saved.
    Parked,
    /// On a thread (or moved while read): counted, no stack.
    Running,
}

/// One live user goroutine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goroutine {
    pub goid: u64,
    /// Return PC of the `go` statement that created it (`g.gopc`).
    pub gopc: u64,
    /// Its function (`g.startpc`).
    pub startpc: u64,
    pub state: GState,
    /// Where its return PCs (runtime addresses, inlined calls expanded) are in
    /// [`Goroutines::pcs`]; empty when running.
    pub stack: Range<usize>,
}

/// Every live user goroutine at one walk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Goroutines {
    pub goroutines: Vec<Goroutine>,
    pub pcs: Vec<u64>,
}

impl Goroutines {
    pub fn stack(&self, g: &Goroutine) -> &[u64] {
        &self.pcs[g.stack.clone()]
    }
}

/// The binary's table, where it is loaded, and the release's layout.
pub struct Unwinding<'a> {
    pub table: &'a Pclntab,
    pub bias: u64,
    pub layout: GLayout,
}

impl Unwinding<'_> {
    fn name_at(&self, pc: u64) -> Option<&str> {
        let f = self.table.find_func(pc.wrapping_sub(self.bias))?;
        self.table.func_name(f)
    }

    /// `isSystemGoroutine(gp, false)`: started in a `runtime.` function other than the main
    /// goroutine's, a coroutine's or a wasm event's. The finalizer and cleanup goroutines
    /// count as system ones (the runtime counts them as user ones only while they run user
    /// code).
    fn is_system(&self, startpc: u64) -> bool {
        match self.name_at(startpc) {
            None => false,
            Some("runtime.main" | "runtime.corostart" | "runtime.handleAsyncEvent") => false,
            Some(name) => name.starts_with("runtime."),
        }
    }
}

fn word(bytes: &[u8], off: u64) -> u64 {
    let off = off as usize;
    let mut a = [0u8; 8];
    a.copy_from_slice(&bytes[off..off + 8]);
    u64::from_le_bytes(a)
}

/// One goroutine's stack memory, copied from its saved SP up in one read where it can be.
struct StackMem<'a> {
    mem: &'a dyn TargetMemory,
    lo: u64,
    hi: u64,
    at: u64,
    bytes: Vec<u8>,
}

impl StackMem<'_> {
    fn load(&mut self, sp: u64) {
        let end = self.hi.min(sp.saturating_add(STACK_CHUNK));
        self.bytes.resize(end.saturating_sub(sp) as usize, 0);
        if self.mem.read(sp, &mut self.bytes).is_err() {
            self.bytes.clear();
        }
        self.at = sp;
    }

    /// The word at `addr`, which must lie on the goroutine's stack.
    fn word(&self, addr: u64) -> Option<u64> {
        if addr < self.lo || addr.checked_add(8)? > self.hi {
            return None;
        }
        if let Some(off) = addr.checked_sub(self.at) {
            if off + 8 <= self.bytes.len() as u64 {
                return Some(word(&self.bytes, off));
            }
        }
        self.mem.read_u64(addr).ok()
    }
}

/// Names whose frames are not elided when a wrapper calls them (`elideWrapperCalling`).
fn keeps_wrapper(callee: &str) -> bool {
    matches!(
        callee,
        "runtime.gopanic" | "runtime.sigpanic" | "runtime.panicwrap"
    )
}

/// `isInjectedCall`: a frame that was not called but injected, so its caller's PC is the
/// interrupted instruction itself, not a return address.
fn is_injected(name: &str) -> bool {
    matches!(
        name,
        "runtime.asyncPreempt" | "runtime.debugCallV2" | "runtime.sigpanic"
    )
}

/// `tracebackPCs` from a saved PC and SP: the return PCs (runtime addresses) of every logical
/// frame, into `out`. Stops, as the runtime does, at a top frame (`goexit`), at a function
/// that writes SP, at a PC outside Go code, and here also at a frame outside the stack.
fn unwind(u: &Unwinding, stack: &StackMem, pc0: u64, sp0: u64, syscall: bool, out: &mut Vec<u64>) {
    let t = u.table;
    let (mut pc, mut sp) = (pc0, sp0);
    if pc == 0 {
        let Some(ret) = stack.word(sp) else { return };
        pc = ret;
        sp += 8;
    }
    let mut innermost = true;
    let mut trap = false;
    let mut callee = String::new();
    let mut levels = Vec::new();
    let limit = out.len() + MAX_DEPTH;
    while out.len() < limit {
        let link = pc.wrapping_sub(u.bias);
        let Some(f) = t.find_func(link) else { return };
        let Some(delta) = t.sp_delta(f, link) else {
            return;
        };
        let mut flag = t.func_flag(f);
        if innermost && syscall {
            flag &= !FUNC_FLAG_SP_WRITE;
        }
        let Some(fp) = sp.checked_add(delta + 8) else {
            return;
        };
        let lr = if flag & (FUNC_FLAG_TOP_FRAME | FUNC_FLAG_SP_WRITE) != 0 {
            0
        } else {
            stack.word(fp - 8).unwrap_or(0)
        };
        let sym = if !trap && link > f.entry {
            link - 1
        } else {
            link
        };
        t.inline_levels(f, sym, &mut levels);
        for (lpc, name, id) in levels.drain(..) {
            if out.len() >= limit {
                return;
            }
            if id != u.layout.wrapper_id || keeps_wrapper(&callee) {
                out.push(lpc.wrapping_add(u.bias).wrapping_add(1));
            }
            callee = name;
        }
        if lr == 0 || t.find_func(lr.wrapping_sub(u.bias)).is_none() {
            return;
        }
        trap = t.func_name(f).is_some_and(is_injected);
        pc = lr;
        sp = fp;
        innermost = false;
    }
}

/// The fields of one `g` that say where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GHead {
    status: u32,
    lo: u64,
    hi: u64,
    sched: (u64, u64),
    syscall: (u64, u64),
    goid: u64,
    gopc: u64,
    startpc: u64,
}

fn head(bytes: &[u8], l: &GLayout) -> GHead {
    let s = l.atomicstatus as usize;
    GHead {
        status: u32::from_le_bytes([bytes[s], bytes[s + 1], bytes[s + 2], bytes[s + 3]]) & !G_SCAN,
        lo: word(bytes, 0),
        hi: word(bytes, 8),
        sched: (word(bytes, l.sched_pc), word(bytes, l.sched_sp)),
        syscall: (word(bytes, l.syscallpc), word(bytes, l.syscallsp)),
        goid: word(bytes, l.goid),
        gopc: word(bytes, l.gopc),
        startpc: word(bytes, l.startpc),
    }
}

/// Reads `runtime.allgs` (the slice header at `allgs`) and every live user goroutine in it.
/// A length beyond its mapping or above [`MAX_GOROUTINES`], a `g` listed twice, a status no
/// runtime uses, or the byte budget or deadline passed: an error, never a partial list.
pub fn walk(
    mem: &dyn TargetMemory,
    allgs: u64,
    u: &Unwinding,
    limits: &Limits,
) -> Result<Goroutines, WalkError> {
    let read = |what: &'static str| move |fault| WalkError::Read { what, fault };
    let mut header = [0u8; 24];
    mem.read(allgs, &mut header)
        .map_err(read("runtime.allgs"))?;
    let (ptr, len, cap) = (word(&header, 0), word(&header, 8), word(&header, 16));
    let bytes = len
        .checked_mul(8)
        .filter(|_| len <= cap && len <= MAX_GOROUTINES);
    let span_end = mem.readable_span(ptr).map(|(_, end)| end);
    let fits = match (bytes, span_end) {
        (Some(b), Some(end)) => ptr.checked_add(b).is_some_and(|e| e <= end),
        (Some(_), None) => len == 0,
        (None, _) => false,
    };
    if !fits {
        return Err(WalkError::BadAllgs { ptr, len, cap });
    }
    let list_bytes = bytes.unwrap_or(0);
    let prefix = u.layout.prefix();
    if list_bytes.saturating_add(len.saturating_mul(prefix as u64)) > limits.max_bytes {
        return Err(WalkError::GoroutinesOverBudget {
            budget: limits.max_bytes,
            goroutines: len,
        });
    }
    let mut list = vec![0u8; list_bytes as usize];
    mem.read(ptr, &mut list)
        .map_err(read("runtime.allgs's array"))?;
    let mut seen = HashSet::with_capacity(len as usize);
    let mut out = Goroutines::default();
    let mut g = vec![0u8; prefix];
    let mut stack = StackMem {
        mem,
        lo: 0,
        hi: 0,
        at: 0,
        bytes: Vec::new(),
    };
    for (index, chunk) in list.chunks_exact(8).enumerate() {
        let at = word(chunk, 0);
        if !seen.insert(at) {
            return Err(WalkError::GoroutineRepeat { addr: at, index });
        }
        if index % 64 == 63
            && limits
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
        {
            return Err(WalkError::GoroutineDeadline { read: index });
        }
        mem.read(at, &mut g)
            .map_err(read("a goroutine (runtime.g)"))?;
        let h = head(&g, &u.layout);
        match h.status {
            G_DEAD | G_DEAD_EXTRA | 0 => continue,
            1..=11 => {}
            status => {
                return Err(WalkError::GoroutineStatus { addr: at, status });
            }
        }
        if u.is_system(h.startpc) {
            continue;
        }
        let first = out.pcs.len();
        let mut state = GState::Running;
        let parked = !matches!(h.status, G_RUNNING | G_COPYSTACK) || h.syscall.1 != 0;
        if parked && h.status != G_RUNNING {
            // Two tries: a goroutine that moves while its stack is read is read again,
            // then counted as running.
            let mut h = h;
            for _ in 0..2 {
                out.pcs.truncate(first);
                let (pc, sp) = if h.syscall.1 != 0 { h.syscall } else { h.sched };
                let sane = h.lo < h.hi && h.hi - h.lo <= 1 << 30 && (h.lo..h.hi).contains(&sp);
                if sane {
                    stack.lo = h.lo;
                    stack.hi = h.hi;
                    stack.load(sp);
                    let syscall = h.status == G_SYSCALL && h.syscall.1 != 0;
                    unwind(u, &stack, pc, sp, syscall, &mut out.pcs);
                }
                mem.read(at, &mut g)
                    .map_err(read("a goroutine (runtime.g)"))?;
                let again = head(&g, &u.layout);
                if again == h && sane && out.pcs.len() > first {
                    state = GState::Parked;
                    break;
                }
                h = again;
                if matches!(h.status, G_RUNNING | G_COPYSTACK | G_DEAD) {
                    break;
                }
            }
        }
        if state == GState::Running {
            out.pcs.truncate(first);
        }
        out.goroutines.push(Goroutine {
            goid: h.goid,
            gopc: h.gopc,
            startpc: h.startpc,
            state,
            stack: first..out.pcs.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::memory::ImageMemory;
    use super::super::pclntab::tests::fabricated;
    use super::*;

    fn layout() -> GLayout {
        g_layout_for((1, 26)).unwrap()
    }

    /// allgs at 0x1000 → array at 0x2000 of `gs` pointers; g structs at 0x10000 + 0x200 * i.
    fn image(len: u64, cap: u64, gs: &[u64], statuses: &[u32]) -> ImageMemory {
        let mut head = Vec::new();
        for w in [0x2000u64, len, cap] {
            head.extend_from_slice(&w.to_le_bytes());
        }
        let array: Vec<u8> = gs.iter().flat_map(|g| g.to_le_bytes()).collect();
        let l = layout();
        let mut gmem = vec![0u8; 0x200 * statuses.len()];
        for (i, s) in statuses.iter().enumerate() {
            let at = 0x200 * i + l.atomicstatus as usize;
            gmem[at..at + 4].copy_from_slice(&s.to_le_bytes());
            let goid = 0x200 * i + l.goid as usize;
            gmem[goid..goid + 8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        }
        ImageMemory {
            segments: vec![(0x1000, head), (0x2000, array), (0x10000, gmem)],
        }
    }

    fn walk_image(mem: &ImageMemory) -> Result<Goroutines, WalkError> {
        let table = fabricated();
        let u = Unwinding {
            table: &table,
            bias: 0,
            layout: layout(),
        };
        walk(mem, 0x1000, &u, &Limits::default())
    }

    #[test]
    fn running_goroutines_are_counted_without_a_stack_and_dead_ones_skipped() {
        let mem = image(
            3,
            4,
            &[0x10000, 0x10200, 0x10400],
            &[G_RUNNING, G_DEAD, G_RUNNING | G_SCAN],
        );
        let gs = walk_image(&mem).unwrap();
        assert_eq!(gs.goroutines.len(), 2);
        assert!(
            gs.goroutines
                .iter()
                .all(|g| g.state == GState::Running && g.stack.is_empty())
        );
        assert_eq!(gs.goroutines[1].goid, 3);
    }

    #[test]
    fn a_length_beyond_the_mapping_is_refused_before_anything_is_read() {
        let mem = image(1000, 1000, &[0x10000], &[G_RUNNING]);
        let err = walk_image(&mem).unwrap_err();
        assert_eq!(
            err,
            WalkError::BadAllgs {
                ptr: 0x2000,
                len: 1000,
                cap: 1000
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("1000 goroutines") && text.contains("0x2000"),
            "{text}"
        );
        let mem = image(2, 1, &[0x10000, 0x10200], &[G_RUNNING, G_RUNNING]);
        assert!(
            matches!(walk_image(&mem), Err(WalkError::BadAllgs { .. })),
            "len > cap"
        );
    }

    #[test]
    fn a_goroutine_listed_twice_is_a_loop_not_two_goroutines() {
        let mem = image(3, 3, &[0x10000, 0x10200, 0x10000], &[G_RUNNING, G_RUNNING]);
        let err = walk_image(&mem).unwrap_err();
        assert_eq!(
            err,
            WalkError::GoroutineRepeat {
                addr: 0x10000,
                index: 2
            }
        );
        assert!(err.to_string().contains("0x10000"), "{err}");
    }

    #[test]
    fn a_status_no_runtime_uses_is_corrupt() {
        let mem = image(1, 1, &[0x10000], &[77]);
        assert_eq!(
            walk_image(&mem),
            Err(WalkError::GoroutineStatus {
                addr: 0x10000,
                status: 77
            })
        );
    }

    #[test]
    fn a_parked_goroutine_whose_stack_is_garbage_is_counted_as_running() {
        // Waiting (4), with its stack bounds and saved SP pointing nowhere sane.
        let mem = image(1, 1, &[0x10000], &[4]);
        let gs = walk_image(&mem).unwrap();
        assert_eq!(gs.goroutines.len(), 1);
        assert_eq!(gs.goroutines[0].state, GState::Running);
    }

    #[test]
    fn layouts_exist_only_for_verified_releases() {
        assert!(g_layout_for((1, 22)).is_none());
        assert!(g_layout_for((1, 27)).is_none());
        assert_eq!(g_layout_for((1, 24)).unwrap().gopc, 288);
        assert_eq!(g_layout_for((1, 25)).unwrap().startpc, 296);
    }

    mod garbage {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any bytes where allgs and its goroutines are: a bounded list, or an error.
            #[test]
            fn any_image_walks_within_bounds_or_fails(
                head in proptest::collection::vec(any::<u8>(), 24),
                array in proptest::collection::vec(any::<u8>(), 0..256),
                gmem in proptest::collection::vec(any::<u8>(), 0..4096),
            ) {
                let mem = ImageMemory { segments: vec![(0x1000, head), (0x2000, array), (0x10000, gmem)] };
                if let Ok(gs) = walk_image(&mem) {
                    prop_assert!(gs.goroutines.len() <= 32);
                    prop_assert!(gs.goroutines.iter().all(|g| g.stack.len() <= MAX_DEPTH));
                }
            }
        }
    }
}
