//! `heapwatch ps`: the Go processes heapwatch can see on this node, as `gops` lists them but
//! with no agent in the target: pid, Go release, heap in use (read from its memory), its
//! container's memory against the limit, and the pod/container name.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use heapwatch::model::SCHEMA;
use heapwatch::node::{self, Listing, Row};
use heapwatch::units::format_bytes;

use super::{CliError, emit};

#[derive(clap::Args)]
pub struct PsArgs {
    /// The cgroup whose subtree is searched: a directory, or a path inside the memory
    /// hierarchy (`kubepods`, also found as `kubepods.slice`). Default: the whole hierarchy.
    #[arg(long, value_name = "PATH")]
    cgroup_root: Option<PathBuf>,
    /// The kubelet's pod log directory, for namespace/pod/container names; its sibling
    /// `containers` is read for container ids.
    #[arg(long, value_name = "DIR", default_value = node::DEFAULT_PODS_DIR)]
    pods_dir: PathBuf,
    /// Do not read heaps out of the processes' memory (no ptrace rights needed).
    #[arg(long)]
    no_heap: bool,
    /// JSON (with "schema": 1) instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: PsArgs) -> Result<ExitCode, CliError> {
    let options = node::Options {
        cgroup_root: args.cgroup_root,
        pods_dir: Some(args.pods_dir),
    };
    let listing =
        node::list(&options, !args.no_heap).map_err(|e| CliError::Usage(e.to_string()))?;
    if args.json {
        emit(&format!("{}\n", json(&listing)))?;
    } else {
        for note in &listing.notes {
            eprintln!("heapwatch: note: {note}");
        }
        emit(&table(&listing))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `12.0 MiB / 64.0 MiB (19%)`; a limit set above the container is marked with where: `pod`,
/// `node` (the kubelet's allocatable on kubepods or a QoS slice), or `ancestor`.
fn memory_words(row: &Row) -> String {
    let Ok(m) = &row.memory else {
        return "?".into();
    };
    let usage = format_bytes(m.usage as i64);
    let Some(limit) = m.limit else {
        return format!("{usage} / no limit");
    };
    let own = &row.process.container.cgroup;
    let level = match m.limit_cgroup.as_deref() {
        Some(at) if at == own.as_path() => "",
        Some(at) => match at
            .file_name()
            .and_then(|n| node::cgroup_level(&n.to_string_lossy()))
        {
            Some(node::CgroupLevel::Node) => " node",
            Some(node::CgroupLevel::Pod) => " pod",
            None => " ancestor",
        },
        None => " ancestor",
    };
    format!(
        "{usage} / {}{level} ({:.0}%)",
        format_bytes(limit as i64),
        m.usage as f64 * 100.0 / limit.max(1) as f64
    )
}

/// What the heap column is, said under the table: a figure beside the runtime's own
/// `heap_inuse` (etcd's 7.3 MB against 2.04 MiB here) is otherwise read as a wrong one.
const HEAP_COLUMN: &str = "PROFILED HEAP: the heap profile's in-use bytes (live objects as of \
the last finished GC, sampled); the runtime's heap_inuse also counts free space in its spans \
and what was allocated since that GC, so it reads higher";

fn table(listing: &Listing) -> String {
    let header = [
        "PID",
        "GO",
        "PROFILED HEAP",
        "MEMORY / LIMIT",
        "OOM",
        "NAME",
        "EXE",
    ];
    let mut rows: Vec<[String; 7]> = vec![header.map(str::to_string)];
    for row in &listing.rows {
        let p = &row.process;
        rows.push([
            p.pid.to_string(),
            p.go_version.clone().unwrap_or_else(|| "go?".into()),
            match &row.heap {
                Some(Ok(h)) => format_bytes(*h as i64),
                _ => "-".into(),
            },
            memory_words(row),
            row.memory
                .as_ref()
                .ok()
                .and_then(|m| m.oom_kills)
                .map_or_else(|| "-".into(), |k| k.to_string()),
            p.name(),
            p.exe.clone(),
        ]);
    }
    let mut widths = [0usize; 7];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if listing.rows.iter().any(|r| matches!(r.heap, Some(Ok(_)))) {
        out.push_str(HEAP_COLUMN);
        out.push('\n');
    }
    let unread: Vec<String> = listing
        .rows
        .iter()
        .filter_map(|r| r.heap.as_ref()?.as_ref().err())
        .cloned()
        .collect();
    for why in &unread {
        out.push_str(&format!("heap not read: {why}\n"));
    }
    if listing.rows.is_empty() {
        out.push_str(&format!(
            "no Go process under {} ({} processes looked at)\n",
            listing.root.display(),
            listing.seen
        ));
    }
    out
}

fn json(listing: &Listing) -> Value {
    let processes: Vec<Value> = listing
        .rows
        .iter()
        .map(|row| {
            let p = &row.process;
            let c = &p.container;
            let kube = c.kube.as_ref();
            json!({
                "pid": p.pid,
                "ns_pid": p.ns_pid,
                "start_ticks": p.start_ticks,
                "exe": p.exe,
                "go_version": p.go_version,
                "name": p.name(),
                "namespace": kube.map(|k| &k.namespace),
                "pod": kube.map(|k| &k.pod),
                "container": kube.and_then(|k| k.container.as_ref()),
                "pod_uid": c.pod_uid,
                "container_id": c.container_id,
                "qos": c.qos.map(|q| q.as_str()),
                "cgroup": c.path,
                "cgroup_dir": c.cgroup,
                "heap_inuse": row.heap.as_ref().and_then(|h| h.as_ref().ok()),
                "heap_error": row.heap.as_ref().and_then(|h| h.as_ref().err()),
                "memory": row.memory.as_ref().ok(),
                "memory_error": row.memory.as_ref().err(),
            })
        })
        .collect();
    json!({
        "schema": SCHEMA,
        "kind": "ps",
        "root": listing.root,
        "seen": listing.seen,
        "processes": processes,
        "notes": listing.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn row(heap: Option<Result<u64, String>>) -> Row {
        Row {
            process: node::GoProcess {
                pid: 4242,
                ns_pid: None,
                start_ticks: 1,
                exe: "/usr/local/bin/etcd".into(),
                go_version: Some("go1.26.1".into()),
                container: Arc::new(node::Container {
                    cgroup: PathBuf::from("/sys/fs/cgroup/memory/etcd"),
                    path: "/etcd".into(),
                    v2: false,
                    kube: None,
                    pod_uid: None,
                    container_id: None,
                    qos: None,
                }),
            },
            memory: Err("not read".into()),
            heap,
        }
    }

    fn listing(rows: Vec<Row>) -> Listing {
        Listing {
            root: PathBuf::from("/sys/fs/cgroup/memory"),
            rows,
            seen: 3,
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_heap_column_says_it_is_the_profiles_in_use_figure_as_of_the_last_gc() {
        let shown = table(&listing(vec![row(Some(Ok(2 << 20)))]));
        let header = shown.lines().next().unwrap();
        assert!(header.contains("PROFILED HEAP"), "{shown}");
        assert!(shown.contains("2.00 MiB"), "{shown}");
        assert!(
            shown.contains("PROFILED HEAP: the heap profile's in-use bytes (live objects as of the last finished GC"),
            "{shown}"
        );
        // No figure, no legend for it.
        let unread = table(&listing(vec![row(None)]));
        assert!(!unread.contains("PROFILED HEAP:"), "{unread}");
    }
}
