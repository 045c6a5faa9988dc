//! The proc source's bucket walker over fabricated memory images: whatever the "target"
//! holds (cyclic lists, wild pointers, absurd stack depths), the walk returns a whole snapshot
//! or an error, within its bounds, and never panics or loops. The same bytes also go through
//! the `.gopclntab` reader as a symbol table, with the snapshot's PCs looked up in it.

#![no_main]

use heapwatch::source::proc::memory::ImageMemory;
use heapwatch::source::proc::pclntab::{FuncData, Pclntab};
use heapwatch::source::proc::walk::{self, Anchors, Limits};
use libfuzzer_sys::fuzz_target;

const VARS: u64 = 0x1000;
const HEAP: u64 = 0x2000;

fuzz_target!(|data: &[u8]| {
    if data.len() < 26 {
        return;
    }
    // The first two bytes pick a release, the next 24 are mbuckets, mProfCycle and the
    // profile lock; the rest is the heap the list lives in (pointers into it start at 0x2000).
    let layout = match walk::layout_for((1, 23 + u32::from(data[0] % 5))) {
        Some(l) => l,
        None => return,
    };
    let split = usize::from(data[1]) * 16;
    let vars = data[2..26].to_vec();
    let heap = data[26..].to_vec();
    let mem = ImageMemory {
        segments: vec![(VARS, vars), (HEAP, heap.clone())],
    };
    let anchors = Anchors {
        mbuckets: VARS,
        mprof_cycle: VARS + 8,
        prof_mem_active_lock: Some(VARS + 16),
    };
    let limits = Limits {
        max_buckets: 4096,
        attempts: 2,
        max_bytes: 1 << 20,
        deadline: None,
    };
    let Ok(snapshot) = walk::walk(&mem, &anchors, &layout, &limits) else {
        return;
    };
    assert!(snapshot.buckets.len() <= limits.max_buckets);
    let records = walk::mem_profile(&snapshot);
    assert_eq!(records.len(), snapshot.buckets.len());
    for r in &records {
        assert!(r.stack.len() <= layout.max_stack);
    }
    let table_bytes = heap.get(split.min(heap.len())..).unwrap_or_default().to_vec();
    let funcdata = FuncData {
        base: HEAP,
        section_addr: HEAP,
        section: heap,
    };
    if let Ok(table) = Pclntab::parse(table_bytes, HEAP, funcdata) {
        for r in records.iter().take(64) {
            let mut stack = r.stack.clone();
            for &pc in &stack {
                let _ = table.frame(pc);
                let _ = table.func_for_pc(pc);
            }
            table.expand_final_inline(&mut stack);
            assert!(stack.len() <= r.stack.len() + 1024);
        }
    }
});
