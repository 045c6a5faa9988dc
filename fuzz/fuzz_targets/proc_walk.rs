//! The proc source's bucket walker over fabricated memory images: whatever the "target"
//! holds (cyclic lists, wild pointers, absurd stack depths), the walk returns a whole snapshot
//! or an error, within its bounds, and never panics or loops. Half the inputs are raw bytes;
//! the other half build a well-formed list from the input and then damage it the ways a
//! broken or hostile process could: a bucket pointing back at one already passed (a cycle, a
//! self-loop at its simplest), or a bucket claiming a huge `nstk`; those must be refused as
//! exactly that. The raw bytes also go through the `.gopclntab` reader as a symbol table, with
//! the snapshot's PCs looked up in it.

#![no_main]

use heapwatch::source::proc::memory::ImageMemory;
use heapwatch::source::proc::pclntab::{FuncData, Pclntab};
use heapwatch::source::proc::walk::{self, Anchors, Layout, Limits, WalkError};
use libfuzzer_sys::fuzz_target;

const VARS: u64 = 0x1000;
const HEAP: u64 = 0x2000;

const ANCHORS: Anchors = Anchors {
    mbuckets: VARS,
    mprof_cycle: VARS + 8,
    prof_mem_active_lock: Some(VARS + 16),
    numgc: Some(VARS + 24),
};

const LIMITS: Limits = Limits {
    max_buckets: 4096,
    attempts: 2,
    max_bytes: 1 << 20,
    deadline: None,
};

fuzz_target!(|data: &[u8]| {
    if data.len() < 30 {
        return;
    }
    // The first byte picks a release and whether the input is raw or a damaged list.
    let Some(layout) = walk::layout_for((1, 23 + u32::from(data[0] % 5))) else {
        return;
    };
    if data[0] & 0x80 != 0 {
        damaged_list(&layout, &data[1..]);
    } else {
        raw_image(&layout, data);
    }
});

/// The second byte places a symbol table in the heap, the next 28 are mbuckets, mProfCycle,
/// the profile lock and `memstats.numgc`; the rest is the heap the list lives in (pointers into it start at
/// 0x2000).
fn raw_image(layout: &Layout, data: &[u8]) {
    let split = usize::from(data[1]) * 16;
    let vars = data[2..30].to_vec();
    let heap = data[30..].to_vec();
    let mem = ImageMemory {
        segments: vec![(VARS, vars), (HEAP, heap.clone())],
    };
    let Ok(snapshot) = walk::walk(&mem, &ANCHORS, layout, &LIMITS) else {
        return;
    };
    assert!(snapshot.buckets.len() <= LIMITS.max_buckets);
    let records = walk::mem_profile(&snapshot);
    assert_eq!(records.len(), snapshot.buckets.len());
    for r in &records {
        assert!(r.stack.len() <= layout.max_stack);
    }
    let table_bytes = heap
        .get(split.min(heap.len())..)
        .unwrap_or_default()
        .to_vec();
    let funcdata = FuncData {
        base: HEAP,
        section_addr: HEAP,
        section: heap,
    };
    if let Ok(table) = Pclntab::parse(table_bytes, HEAP, funcdata) {
        for r in records.iter().take(64) {
            let mut stack = r.stack.to_vec();
            for &pc in &stack {
                let _ = table.frame(pc);
                let _ = table.func_for_pc(pc);
            }
            table.expand_final_inline(&mut stack);
            assert!(stack.len() <= r.stack.len() + 1024);
        }
    }
}

/// Builds a list of up to 32 buckets from the input (each: a stack of 0 to 7 PCs and a
/// record), then damages bucket `j` as the input says: its `allnext` back to bucket `i <= j`,
/// or its `nstk` above the runtime's limit (up to 2^64 - 1).
fn damaged_list(layout: &Layout, data: &[u8]) {
    let (how, rest) = (data[0], &data[1..]);
    let mut bytes = rest.iter().copied().cycle();
    let mut next = || bytes.next().unwrap_or(0);
    let count = usize::from(next() % 32) + 1;
    let mut heap = Vec::new();
    let mut at = Vec::new();
    for _ in 0..count {
        at.push(HEAP + heap.len() as u64);
        let nstk = u64::from(next() % 8);
        for w in [0, 0, layout.mem_bucket, 0, 0, nstk] {
            heap.extend_from_slice(&u64::to_le_bytes(w));
        }
        let words = nstk as usize + layout.record / 8;
        for _ in 0..words {
            heap.extend_from_slice(&u64::from(next()).to_le_bytes());
        }
    }
    // Link them in order, the last to nothing.
    for k in 0..count - 1 {
        let off = (at[k] - HEAP) as usize + 8;
        heap[off..off + 8].copy_from_slice(&at[k + 1].to_le_bytes());
    }
    let j = usize::from(next()) % count;
    let bucket = (at[j] - HEAP) as usize;
    let expected = if how & 1 == 0 {
        let i = usize::from(next()) % (j + 1);
        heap[bucket + 8..bucket + 16].copy_from_slice(&at[i].to_le_bytes());
        WalkError::Cycle {
            addr: at[i],
            index: j + 1,
        }
    } else {
        let mut huge = [0u8; 8];
        huge.iter_mut().for_each(|b| *b = next());
        let nstk = (layout.max_stack as u64 + 1).max(u64::from_le_bytes(huge));
        heap[bucket + 40..bucket + 48].copy_from_slice(&nstk.to_le_bytes());
        WalkError::StackTooDeep {
            addr: at[j],
            nstk,
            max: layout.max_stack,
        }
    };
    let mut vars = vec![0u8; 28];
    vars[0..8].copy_from_slice(&at[0].to_le_bytes());
    vars[8..12].copy_from_slice(&u32::from(how >> 1).to_le_bytes());
    let mem = ImageMemory {
        segments: vec![(VARS, vars), (HEAP, heap)],
    };
    assert_eq!(walk::walk(&mem, &ANCHORS, layout, &LIMITS), Err(expected));
}
