//! Stripped binaries (`-ldflags=-s -w`, the usual container image) have no `.symtab`, but they
//! keep `.gopclntab`, so the runtime's functions can still be found by name. The variables the
//! walker needs are recovered from the RIP-relative operands of the instructions that load
//! them, in two runtime functions whose shape has been the same from Go 1.23 to 1.26:
//!
//! - `runtime.schedinit`: `if disableMemoryProfiling { MemProfileRate = 0 }` compiles to a byte
//!   compare with 0, a `je`, and a qword store of 0;
//! - `runtime.memProfileInternal`: its first 32-bit load is `mProfCycle`, its first 64-bit load
//!   `mbuckets`, and the first `lea rax` handed straight to `runtime.lock2` is
//!   `&profMemActiveLock`.
//!
//! Both addresses of the first (`disableMemoryProfiling` and `MemProfileRate`) come from those
//! three instructions. The tests hold these against pprof like any other build (tests/cli/proc.rs
//! runs every release stripped).

use iced_x86::{Decoder, DecoderOptions, Instruction, MemorySize, Mnemonic, OpKind, Register};

use super::binary::RuntimeVars;
use super::pclntab::Pclntab;

/// The decoded instructions of one function.
fn instructions(table: &Pclntab, text: (u64, &[u8]), name: &str) -> Option<Vec<Instruction>> {
    let (entry, end) = table.func_range(name)?;
    let start = usize::try_from(entry.checked_sub(text.0)?).ok()?;
    let stop = usize::try_from(end.checked_sub(text.0)?).ok()?;
    let code = text.1.get(start..stop.min(text.1.len()))?;
    let decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    Some(decoder.into_iter().collect())
}

fn rip_target(i: &Instruction) -> Option<u64> {
    i.is_ip_rel_memory_operand()
        .then(|| i.ip_rel_memory_address())
}

/// (disableMemoryProfiling, MemProfileRate) from `runtime.schedinit`.
fn from_schedinit(code: &[Instruction]) -> Option<(u64, u64)> {
    code.windows(3).find_map(|w| {
        let (cmp, je, store) = (&w[0], &w[1], &w[2]);
        let is_flag_test = cmp.mnemonic() == Mnemonic::Cmp
            && cmp.op0_kind() == OpKind::Memory
            && cmp.memory_size() == MemorySize::UInt8
            && cmp.immediate(1) == 0;
        let is_zero_store = store.mnemonic() == Mnemonic::Mov
            && store.op0_kind() == OpKind::Memory
            && store.memory_size() == MemorySize::UInt64
            && store.op1_kind() == OpKind::Immediate32to64
            && store.immediate(1) == 0;
        if is_flag_test && je.mnemonic() == Mnemonic::Je && is_zero_store {
            Some((rip_target(cmp)?, rip_target(store)?))
        } else {
            None
        }
    })
}

/// (mProfCycle, mbuckets, profMemActiveLock) from `runtime.memProfileInternal`.
fn from_mem_profile(table: &Pclntab, code: &[Instruction]) -> Option<(u64, u64, u64)> {
    let load = |size: MemorySize| {
        code.iter().find_map(|i| {
            (i.mnemonic() == Mnemonic::Mov
                && i.op0_kind() == OpKind::Register
                && i.op1_kind() == OpKind::Memory
                && i.memory_size() == size)
                .then(|| rip_target(i))
                .flatten()
        })
    };
    let cycle = load(MemorySize::UInt32)?;
    let buckets = load(MemorySize::UInt64)?;
    let lock = code.windows(2).find_map(|w| {
        let (lea, call) = (&w[0], &w[1]);
        let callee = table
            .find_func(call.near_branch_target())
            .and_then(|f| table.func_name(f));
        (lea.mnemonic() == Mnemonic::Lea
            && lea.op0_register() == Register::RAX
            && call.mnemonic() == Mnemonic::Call
            && callee.is_some_and(|n| n.starts_with("runtime.lock")))
        .then(|| rip_target(lea))
        .flatten()
    })?;
    Some((cycle, buckets, lock))
}

/// The runtime variables of a stripped binary, from its code. `text` is `.text`'s address
/// and bytes.
pub fn recover_vars(table: &Pclntab, text: (u64, &[u8])) -> Result<RuntimeVars, String> {
    let schedinit = instructions(table, text, "runtime.schedinit")
        .ok_or("runtime.schedinit is not in .gopclntab")?;
    let (disable, rate) = from_schedinit(&schedinit).ok_or(
        "runtime.schedinit has no `if disableMemoryProfiling { MemProfileRate = 0 }` of the \
         expected shape",
    )?;
    let mem = instructions(table, text, "runtime.memProfileInternal")
        .ok_or("runtime.memProfileInternal is not in .gopclntab")?;
    let (cycle, buckets, lock) = from_mem_profile(table, &mem)
        .ok_or("runtime.memProfileInternal does not load mProfCycle and mbuckets as expected")?;
    Ok(RuntimeVars {
        mbuckets: buckets,
        mprof_cycle: cycle,
        mem_profile_rate: rate,
        disable_memory_profiling: disable,
        prof_mem_active_lock: Some(lock),
        allgs: instructions(table, text, "runtime.forEachG")
            .as_deref()
            .and_then(from_for_each_g),
        memstats: None,
    })
}

/// The RIP-relative targets of a function's plain loads of `size`.
fn loads(code: &[Instruction], size: MemorySize) -> Vec<u64> {
    code.iter()
        .filter(|i| {
            i.mnemonic() == Mnemonic::Mov
                && i.op0_kind() == OpKind::Register
                && i.op1_kind() == OpKind::Memory
                && i.memory_size() == size
        })
        .filter_map(rip_target)
        .collect()
}

/// `runtime.memstats`, `runtime.gcController`, `runtime.mheap_` and `runtime.allp` of a
/// stripped binary built by `release`, from the loads `runtime.readmemstats_m` makes of their
/// fields at the offsets the release's layout gives (its two 32-bit loads are `numgc` and
/// `numforcedgc`; six quadwords eight bytes apart from `heapInUse` on, outside `memstats`,
/// are `gcController`'s;
/// two at the distance between `spanalloc.inuse` and `cachealloc.inuse` are `mheap_`'s), and
/// from `runtime.flushmcache`'s loads of `allp`'s pointer and length. `None` unless all four
/// are found, and found once.
pub fn recover_memstats(
    table: &Pclntab,
    text: (u64, &[u8]),
    release: (u32, u32),
) -> Option<[u64; 4]> {
    use super::memstats::{gc, mem_layout_for};
    let l = mem_layout_for(release)?;
    let code = instructions(table, text, "runtime.readmemstats_m")?;
    let q = loads(&code, MemorySize::UInt64);
    let d = loads(&code, MemorySize::UInt32);
    let has = |set: &[u64], a: u64| set.contains(&a);
    let numgc = l.stacks_sys + 4160;
    let memstats = unique(d.iter().filter_map(|&a| {
        let base = a.checked_sub(numgc)?;
        (has(&d, a + 4) && has(&q, base + l.stacks_sys) && has(&q, base + l.stacks_sys + 8))
            .then_some(base)
    }))?;
    // memstats' six *_sys words are six quadwords eight bytes apart too.
    let in_memstats = |a: u64| (memstats..memstats + numgc + 8).contains(&a);
    let gc_fields: Vec<u64> = (0..6).map(|i| gc::HEAP_IN_USE + 8 * i).collect();
    let controller = unique(q.iter().filter_map(|&a| {
        let base = a.checked_sub(gc::HEAP_IN_USE)?;
        (!in_memstats(a) && gc_fields.iter().all(|f| has(&q, base + f))).then_some(base)
    }))?;
    let apart = l.cachealloc_inuse - l.spanalloc_inuse;
    let mheap = unique(q.iter().filter_map(|&a| {
        let base = a.checked_sub(l.spanalloc_inuse)?;
        let elsewhere = in_memstats(a) || (controller..controller + gc::SIZE as u64).contains(&a);
        (!elsewhere && has(&q, a + apart)).then_some(base)
    }))?;
    let flush = instructions(table, text, "runtime.flushmcache")?;
    let fq = loads(&flush, MemorySize::UInt64);
    let allp = unique(fq.iter().copied().filter(|&a| fq.contains(&(a + 8))))?;
    Some([memstats, controller, mheap, allp])
}

/// The one value an iterator gives (repeats allowed), or `None` for none or several.
fn unique(values: impl Iterator<Item = u64>) -> Option<u64> {
    let mut found = None;
    for v in values {
        match found {
            None => found = Some(v),
            Some(f) if f == v => {}
            Some(_) => return None,
        }
    }
    found
}

/// `runtime.allgs` from `runtime.forEachG`: its `for _, gp := range allgs` loads the slice's
/// pointer and length, two RIP-relative quadwords eight bytes apart.
fn from_for_each_g(code: &[Instruction]) -> Option<u64> {
    let loads: Vec<u64> = code
        .iter()
        .filter(|i| {
            i.mnemonic() == Mnemonic::Mov
                && i.op0_kind() == OpKind::Register
                && i.op1_kind() == OpKind::Memory
                && i.memory_size() == MemorySize::UInt64
        })
        .filter_map(rip_target)
        .collect();
    loads
        .windows(2)
        .find(|w| w[1] == w[0].wrapping_add(8))
        .map(|w| w[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(ip: u64, bytes: &[u8]) -> Vec<Instruction> {
        Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE)
            .into_iter()
            .collect()
    }

    #[test]
    fn the_schedinit_pattern_names_both_variables() {
        // The bytes go1.26 emits (from `go tool objdump`): CMPB disableMemoryProfiling, $0;
        // JE; MOVQ $0, MemProfileRate — at 0x4549db.
        let code = decode(
            0x4549db,
            &[
                0x80, 0x3d, 0x9b, 0x1e, 0x5f, 0x00, 0x00, 0x74, 0x0b, 0x48, 0xc7, 0x05, 0x31, 0x40,
                0x58, 0x00, 0x00, 0x00, 0x00, 0x00,
            ],
        );
        let (disable, rate) = from_schedinit(&code).unwrap();
        assert_eq!(disable, 0x4549db + 7 + 0x5f1e9b);
        assert_eq!(rate, 0x4549e4 + 11 + 0x584031);
    }

    #[test]
    fn other_code_matches_nothing() {
        let code = decode(0x1000, &[0x90, 0x90, 0xc3]);
        assert_eq!(from_schedinit(&code), None);
    }
}
