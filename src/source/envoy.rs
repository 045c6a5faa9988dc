//! Envoy's admin port (`envoy:http://HOST:PORT`, 15000 in Istio): tcmalloc figures from
//! `/memory`, a few counters from `/stats`, and the heap profile from `/heap_dump` when the
//! build has tcmalloc. A 501 from `/heap_dump` is remembered: the source stops asking.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::http::{HttpClient, HttpOptions, blocking, status_error};
use super::{FailureKind, FetchError, Fetching, Reply, Source, SourceKind, Want};

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

/// Asks Envoy for only those counters (Envoy matches `filter` as a regex; an Envoy that
/// ignores it still works, as the reply is filtered again here).
const STATS_QUERY: &str = "/stats?filter=%5E%28server%5C.%28concurrency%7Ctotal_connections%7Cmemory_allocated%7Cmemory_heap_size%7Cmemory_physical_size%7Cuptime%29%7Ccluster_manager%5C.active_clusters%7Clistener_manager%5C.total_listeners_active%29%24";

/// Prefix of the `/memory` figures among a snapshot's totals.
const MEMORY_PREFIX: &str = "memory.";

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

/// Reads the reply of `fetch(Want::MemStats)` on an [`EnvoySource`] back into manifest
/// totals. `None` when the bytes are not such a reply.
pub fn totals_from_reply(bytes: &[u8]) -> Option<BTreeMap<String, i64>> {
    let totals: BTreeMap<String, i64> = serde_json::from_slice(bytes).ok()?;
    let ours = totals
        .keys()
        .any(|k| k.starts_with(MEMORY_PREFIX) || STATS.contains(&k.as_str()));
    ours.then_some(totals)
}

/// What `/heap_dump` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeapDump {
    /// A gzipped pprof heap profile (tcmalloc's sample types `objects`, `space`, …).
    Profile(Vec<u8>),
    /// This Envoy cannot dump its heap (HTTP 501: a build without tcmalloc); with its text.
    NotAvailable(String),
}

/// Whether `/heap_dump` works on this target, as far as the source has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "detail")]
pub enum HeapDumpState {
    NotAsked,
    Available,
    NotAvailable(String),
}

pub struct EnvoySource {
    target: String,
    base: String,
    client: HttpClient,
    max_body: u64,
    heap_dump: HeapDumpState,
}

impl EnvoySource {
    /// `target` is `envoy:http://HOST:PORT` (or the bare URL). Of `options`, the headers, the
    /// body cap and `insecure` apply; the admin port speaks plain HTTP, so CA and client
    /// certificates are refused rather than ignored.
    pub fn new(target: &str, options: &HttpOptions) -> Result<EnvoySource, FetchError> {
        let url = target.strip_prefix("envoy:").unwrap_or(target);
        let url = url.trim_end_matches('/');
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        let has_path = url
            .split_once("://")
            .is_some_and(|(_, rest)| rest.contains('/'));
        if !scheme_ok || has_path {
            return Err(FetchError::new(
                FailureKind::Other,
                format!(
                    "{target}: not an Envoy admin address (example: envoy:http://127.0.0.1:15000)"
                ),
            ));
        }
        if options.cacert.is_some() || options.client_cert.is_some() || options.client_key.is_some()
        {
            return Err(FetchError::new(
                FailureKind::Tls,
                format!(
                    "{target}: CA and client certificates are not supported for envoy: targets"
                ),
            ));
        }
        let tls = super::tls::client_config(&HttpOptions {
            insecure: options.insecure,
            ..HttpOptions::default()
        })?;
        Ok(EnvoySource {
            target: target.to_string(),
            base: url.to_string(),
            client: HttpClient::new(&options.headers, tls)?,
            max_body: if options.max_body == 0 {
                512 << 20
            } else {
                options.max_body
            },
            heap_dump: HeapDumpState::NotAsked,
        })
    }

    pub fn heap_dump_state(&self) -> &HeapDumpState {
        &self.heap_dump
    }

    /// `/memory`.
    pub fn memory(&self, timeout: Duration) -> Result<EnvoyMemory, FetchError> {
        blocking(self.memory_async(timeout))
    }

    /// `/stats`, reduced to the counters of [`STATS`].
    pub fn stats(&self, timeout: Duration) -> Result<EnvoyStats, FetchError> {
        blocking(self.stats_async(timeout))
    }

    /// `/memory` and `/stats` at `t_ms` (the caller's clock). An Envoy without `/memory`
    /// (HTTP 404) still gives a snapshot of its counters.
    pub fn snapshot(&self, t_ms: i64, timeout: Duration) -> Result<EnvoySnapshot, FetchError> {
        blocking(self.snapshot_async(t_ms, timeout))
    }

    /// `/heap_dump`. After one 501 the answer is remembered and Envoy is not asked again.
    pub fn heap_dump(&mut self, timeout: Duration) -> Result<HeapDump, FetchError> {
        blocking(self.heap_dump_async(timeout))
    }

    async fn memory_async(&self, timeout: Duration) -> Result<EnvoyMemory, FetchError> {
        let url = format!("{}/memory", self.base);
        let bytes = self.ok(&url, timeout).await?;
        EnvoyMemory::parse(&bytes).map_err(|e| {
            FetchError::new(
                FailureKind::Other,
                format!("{url}: not Envoy's /memory: {e}"),
            )
        })
    }

    async fn stats_async(&self, timeout: Duration) -> Result<EnvoyStats, FetchError> {
        let url = format!("{}{STATS_QUERY}", self.base);
        let bytes = self.ok(&url, timeout).await?;
        Ok(EnvoyStats::parse(&String::from_utf8_lossy(&bytes)))
    }

    async fn snapshot_async(
        &self,
        t_ms: i64,
        timeout: Duration,
    ) -> Result<EnvoySnapshot, FetchError> {
        let memory = match self.memory_async(timeout).await {
            Ok(m) => Some(m),
            Err(e) if e.kind == FailureKind::Status && e.message.contains("HTTP 404") => None,
            Err(e) => return Err(e),
        };
        let stats = self.stats_async(timeout).await?;
        Ok(EnvoySnapshot {
            t_ms,
            memory,
            stats,
        })
    }

    async fn heap_dump_async(&mut self, timeout: Duration) -> Result<HeapDump, FetchError> {
        if let HeapDumpState::NotAvailable(why) = &self.heap_dump {
            return Ok(HeapDump::NotAvailable(why.clone()));
        }
        let url = format!("{}/heap_dump", self.base);
        let (status, bytes) = self.client.get(&url, timeout, self.max_body).await?;
        match status {
            200 => {
                self.heap_dump = HeapDumpState::Available;
                Ok(HeapDump::Profile(bytes))
            }
            // 404: an Envoy older than the endpoint; the same answer for good.
            501 | 404 => {
                let text = String::from_utf8_lossy(&bytes);
                let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                let why = format!(
                    "HTTP {status}: {}",
                    text.chars().take(160).collect::<String>()
                );
                self.heap_dump = HeapDumpState::NotAvailable(why.clone());
                Ok(HeapDump::NotAvailable(why))
            }
            _ => Err(status_error(&url, status, &bytes)),
        }
    }

    async fn ok(&self, url: &str, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        let (status, bytes) = self.client.get(url, timeout, self.max_body).await?;
        if status != 200 {
            return Err(status_error(url, status, &bytes));
        }
        Ok(bytes)
    }

    /// What the collector asks for: MemStats replies with the snapshot's totals as one JSON
    /// object, which [`totals_from_reply`] reads back; Heap replies with the gzipped pprof as
    /// served.
    async fn answer(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        match want {
            Want::Heap => match self.heap_dump_async(timeout).await? {
                HeapDump::Profile(bytes) => Ok(Reply { bytes, pid: None }),
                HeapDump::NotAvailable(why) => Err(FetchError::new(
                    FailureKind::Status,
                    format!(
                        "{}/heap_dump: not available ({why}); not asked again",
                        self.base
                    ),
                )),
            },
            Want::MemStats => {
                let snapshot = self.snapshot_async(0, timeout).await?;
                let bytes =
                    serde_json::to_vec(&snapshot.totals()).expect("a map of numbers serialises");
                Ok(Reply { bytes, pid: None })
            }
            other => Err(FetchError::new(
                FailureKind::Other,
                format!("{}: Envoy serves no {} data", self.target, other.as_str()),
            )),
        }
    }
}

impl Source for EnvoySource {
    fn target(&self) -> &str {
        &self.target
    }

    fn kind(&self) -> SourceKind {
        SourceKind::Envoy
    }

    /// Heap: `/heap_dump`, until it answered 501. MemStats: `/memory` with `/stats`.
    fn supports(&self, want: Want) -> bool {
        match want {
            Want::Heap => !matches!(self.heap_dump, HeapDumpState::NotAvailable(_)),
            Want::MemStats => true,
            _ => false,
        }
    }

    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        blocking(self.answer(want, timeout))
    }

    fn fetch_async(&mut self, want: Want, timeout: Duration) -> Option<Fetching<'_>> {
        Some(Box::pin(self.answer(want, timeout)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_reads_strings_numbers_and_missing_fields() {
        let m = EnvoyMemory::parse(
            br#"{"allocated":"2793932032","heap_size":4162846720,"pageheap_unmapped":"1109401600"}"#,
        )
        .unwrap();
        assert_eq!(m.allocated, Some(2_793_932_032));
        assert_eq!(m.heap_size, Some(4_162_846_720));
        assert_eq!(m.pageheap_free, None);
        assert!(m.has_data());
        assert!(
            !EnvoyMemory::parse(br#"{"heap_size":"0"}"#)
                .unwrap()
                .has_data()
        );
        assert!(!EnvoyMemory::parse(b"{}").unwrap().has_data());
        assert!(EnvoyMemory::parse(br#"{"allocated":"lots"}"#).is_err());
        assert!(EnvoyMemory::parse(b"<html>").is_err());
    }

    #[test]
    fn stats_keep_the_counters_heapwatch_reads() {
        let s = EnvoyStats::parse(
            "cluster_manager.active_clusters: 1564\n\
             cluster.outbound|80||a.svc.upstream_rq_time: P0(nan,1) P25(nan,2)\n\
             server.concurrency: 16\n\
             server.memory_allocated: 673689312\n\
             server.version: 10001\n\
             listener_manager.total_listeners_active: 4\n",
        );
        assert_eq!(s.concurrency(), Some(16));
        assert_eq!(s.active_clusters(), Some(1564));
        assert_eq!(s.listeners_active(), Some(4));
        assert_eq!(s.get("server.version"), None);
        assert_eq!(s.values.len(), 4);
    }

    #[test]
    fn totals_round_trip() {
        let snapshot = EnvoySnapshot {
            t_ms: 5,
            memory: Some(EnvoyMemory {
                allocated: Some(7),
                heap_size: Some(9),
                ..EnvoyMemory::default()
            }),
            stats: EnvoyStats::parse("server.concurrency: 16\nserver.uptime: 30\n"),
        };
        let totals = snapshot.totals();
        assert_eq!(totals["memory.allocated"], 7);
        assert_eq!(totals["server.concurrency"], 16);
        assert_eq!(EnvoySnapshot::from_totals(5, &totals), snapshot);
        let reply = serde_json::to_vec(&totals).unwrap();
        assert_eq!(totals_from_reply(&reply), Some(totals));
        assert_eq!(totals_from_reply(br#"{"HeapAlloc": 3}"#), None);
    }

    #[test]
    fn targets_name_the_admin_port() {
        let o = HttpOptions::default();
        let s = EnvoySource::new("envoy:http://127.0.0.1:15000/", &o).unwrap();
        assert_eq!(s.base, "http://127.0.0.1:15000");
        assert!(EnvoySource::new("envoy:127.0.0.1:15000", &o).is_err());
        assert!(EnvoySource::new("envoy:http://h:1/stats", &o).is_err());
    }

    #[test]
    fn the_stats_filter_is_the_counter_list() {
        let decoded = STATS_QUERY
            .trim_start_matches("/stats?filter=")
            .replace("%5E", "^")
            .replace("%28", "(")
            .replace("%29", ")")
            .replace("%5C", "\\")
            .replace("%7C", "|")
            .replace("%24", "$");
        for name in STATS {
            let (group, leaf) = name.split_once('.').unwrap();
            assert!(decoded.contains(group) && decoded.contains(leaf), "{name}");
        }
    }
}
