//! What an Envoy admin port tells of its memory: tcmalloc's `/memory` figures, a few `/stats`
//! counters, and whether `/heap_dump` works. Plain data and the parsing of the two replies;
//! `source::envoy` fetches them, `analyse::envoy` reads them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// The `/stats` counters heapwatch reads. `server.uptime` only grows within one process, so
/// a drop marks a restart.
pub const STATS: &[&str] = &[
    "server.concurrency",
    "cluster_manager.active_clusters",
    "listener_manager.total_listeners_active",
    "server.total_connections",
    "server.memory_allocated",
    "server.memory_heap_size",
    "server.memory_physical_size",
    "server.uptime",
];

/// Prefix of the `/memory` figures among a snapshot's totals.
pub const MEMORY_PREFIX: &str = "memory.";

/// Envoy's `/memory` reply (tcmalloc's figures). Numbers come as strings; each may be absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnvoyMemory {
    /// Bytes in use by the application (live data).
    pub allocated: Option<u64>,
    /// Bytes tcmalloc reserved from the system, including pages already returned to it.
    pub heap_size: Option<u64>,
    /// Pages returned to the system: counted in `heap_size`, not resident.
    pub pageheap_unmapped: Option<u64>,
    /// Free pages tcmalloc holds, still mapped.
    pub pageheap_free: Option<u64>,
    /// Free bytes in the per-thread caches.
    pub total_thread_cache: Option<u64>,
    pub total_physical_bytes: Option<u64>,
}

const MEMORY_FIELDS: [&str; 6] = [
    "allocated",
    "heap_size",
    "pageheap_unmapped",
    "pageheap_free",
    "total_thread_cache",
    "total_physical_bytes",
];

impl EnvoyMemory {
    /// Reads `/memory`. Numbers may be strings (as protobuf's JSON writes uint64) or numbers.
    pub fn parse(bytes: &[u8]) -> Result<EnvoyMemory, String> {
        let doc: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(map) = doc else {
            return Err("not a JSON object".into());
        };
        let mut values = [None; 6];
        for (slot, field) in values.iter_mut().zip(MEMORY_FIELDS) {
            *slot = match map.get(field) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(
                    s.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{field} is {s:?}, not a number"))?,
                ),
                Some(Value::Number(n)) => Some(
                    n.as_u64()
                        .ok_or_else(|| format!("{field} is {n}, not a byte count"))?,
                ),
                Some(other) => return Err(format!("{field} is {other}, not a number")),
            };
        }
        let [
            allocated,
            heap_size,
            pageheap_unmapped,
            pageheap_free,
            total_thread_cache,
            total_physical_bytes,
        ] = values;
        Ok(EnvoyMemory {
            allocated,
            heap_size,
            pageheap_unmapped,
            pageheap_free,
            total_thread_cache,
            total_physical_bytes,
        })
    }

    /// False for a build without tcmalloc, which reports `heap_size` 0.
    pub fn has_data(&self) -> bool {
        self.heap_size.is_some_and(|h| h > 0)
    }

    fn fields(&self) -> [(&'static str, Option<u64>); 6] {
        [
            ("allocated", self.allocated),
            ("heap_size", self.heap_size),
            ("pageheap_unmapped", self.pageheap_unmapped),
            ("pageheap_free", self.pageheap_free),
            ("total_thread_cache", self.total_thread_cache),
            ("total_physical_bytes", self.total_physical_bytes),
        ]
    }
}

/// The `/stats` counters of [`STATS`] that the reply held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnvoyStats {
    pub values: BTreeMap<String, u64>,
}

impl EnvoyStats {
    /// Reads plain `/stats` (`name: value` lines), keeping the counters of [`STATS`].
    /// Histogram lines and other names are skipped.
    pub fn parse(text: &str) -> EnvoyStats {
        let mut values = BTreeMap::new();
        for line in text.lines() {
            let Some((name, value)) = line.split_once(": ") else {
                continue;
            };
            let name = name.trim();
            if !STATS.contains(&name) {
                continue;
            }
            if let Ok(v) = value.trim().parse::<u64>() {
                values.insert(name.to_string(), v);
            }
        }
        EnvoyStats { values }
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.get(name).copied()
    }

    /// Worker threads (`server.concurrency`).
    pub fn concurrency(&self) -> Option<u64> {
        self.get("server.concurrency")
    }

    pub fn active_clusters(&self) -> Option<u64> {
        self.get("cluster_manager.active_clusters")
    }

    pub fn listeners_active(&self) -> Option<u64> {
        self.get("listener_manager.total_listeners_active")
    }

    pub fn total_connections(&self) -> Option<u64> {
        self.get("server.total_connections")
    }

    pub fn uptime_s(&self) -> Option<u64> {
        self.get("server.uptime")
    }
}

/// `/memory` and `/stats` taken together at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvoySnapshot {
    /// Unix ms when the request started.
    pub t_ms: i64,
    /// `None` when `/memory` was not served (an old Envoy).
    pub memory: Option<EnvoyMemory>,
    pub stats: EnvoyStats,
}

impl EnvoySnapshot {
    /// The snapshot as manifest totals: `memory.allocated`, `memory.heap_size`, … for
    /// `/memory`, and the `/stats` names as they are (`server.concurrency`, …).
    pub fn totals(&self) -> BTreeMap<String, i64> {
        let mut totals = BTreeMap::new();
        if let Some(m) = &self.memory {
            for (name, value) in m.fields() {
                if let Some(v) = value {
                    totals.insert(format!("{MEMORY_PREFIX}{name}"), clamp(v));
                }
            }
        }
        for (name, &v) in &self.stats.values {
            totals.insert(name.clone(), clamp(v));
        }
        totals
    }

    /// Rebuilds a snapshot from manifest totals written by [`EnvoySnapshot::totals`].
    pub fn from_totals(t_ms: i64, totals: &BTreeMap<String, i64>) -> EnvoySnapshot {
        let get = |field: &str| {
            totals
                .get(&format!("{MEMORY_PREFIX}{field}"))
                .map(|&v| v.max(0) as u64)
        };
        let memory = EnvoyMemory {
            allocated: get("allocated"),
            heap_size: get("heap_size"),
            pageheap_unmapped: get("pageheap_unmapped"),
            pageheap_free: get("pageheap_free"),
            total_thread_cache: get("total_thread_cache"),
            total_physical_bytes: get("total_physical_bytes"),
        };
        let has_memory = memory.fields().iter().any(|(_, v)| v.is_some());
        let values = totals
            .iter()
            .filter(|(k, _)| STATS.contains(&k.as_str()))
            .map(|(k, &v)| (k.clone(), v.max(0) as u64))
            .collect();
        EnvoySnapshot {
            t_ms,
            memory: has_memory.then_some(memory),
            stats: EnvoyStats { values },
        }
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Whether `/heap_dump` works on this target, as far as the source has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "detail")]
pub enum HeapDumpState {
    NotAsked,
    Available,
    NotAvailable(String),
}
