//! `heapwatch ps` as a library call: one rescan, then for each Go process its container's
//! memory and its heap in use, read in parallel (each heap read walks the process's profile
//! buckets, which takes milliseconds to a second on a large heap).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use super::{ContainerMemory, Discovery, GoProcess, NodeError, Note, Options, heap_in_use};

/// Heap reads at once: the machine's cores, at most 4, so `ps` never floods a busy node.
const MAX_READERS: usize = 4;

/// One Go process with its figures.
#[derive(Debug, Clone)]
pub struct Row {
    pub process: GoProcess,
    /// The container's memory, or why it could not be read.
    pub memory: Result<ContainerMemory, String>,
    /// Heap in use, or why it could not be read; `None` when not asked for.
    pub heap: Option<Result<u64, String>>,
}

#[derive(Debug, Clone)]
pub struct Listing {
    /// The cgroup searched.
    pub root: PathBuf,
    pub rows: Vec<Row>,
    /// Processes looked at, Go or not.
    pub seen: usize,
    pub notes: Vec<Note>,
}

/// Finds the Go processes under the root and reads their figures; `heap: false` skips the
/// reads of their memory.
pub fn list(options: &Options, heap: bool) -> Result<Listing, NodeError> {
    let mut discovery = Discovery::new(options)?;
    let scan = discovery.rescan();
    let hierarchy = discovery.hierarchy().clone();
    let mut memory: HashMap<PathBuf, Result<ContainerMemory, String>> = HashMap::new();
    for p in &scan.processes {
        memory
            .entry(p.container.cgroup.clone())
            .or_insert_with(|| p.container.memory(&hierarchy).map_err(|e| e.to_string()));
    }
    let pids: Vec<u32> = scan.processes.iter().map(|p| p.pid).collect();
    let heaps = if heap {
        read_heaps(&pids)
    } else {
        HashMap::new()
    };
    let rows = scan
        .processes
        .into_iter()
        .map(|process| Row {
            memory: memory[&process.container.cgroup].clone(),
            heap: heaps.get(&process.pid).cloned(),
            process,
        })
        .collect();
    Ok(Listing {
        root: hierarchy.root,
        rows,
        seen: scan.seen,
        notes: scan.notes,
    })
}

fn read_heaps(pids: &[u32]) -> HashMap<u32, Result<u64, String>> {
    let readers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_READERS)
        .min(pids.len().max(1));
    let next = Mutex::new(pids.iter());
    let found = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..readers {
            s.spawn(|| {
                loop {
                    let pid = match next.lock() {
                        Ok(mut it) => it.next().copied(),
                        Err(_) => None,
                    };
                    let Some(pid) = pid else { break };
                    let heap = heap_in_use(pid);
                    if let Ok(mut f) = found.lock() {
                        f.insert(pid, heap);
                    }
                }
            });
        }
    });
    found.into_inner().unwrap_or_default()
}
