//! Envoy's admin port (`envoy:http://HOST:PORT`, 15000 in Istio): tcmalloc figures from
//! `/memory`, a few counters from `/stats`, and the heap profile from `/heap_dump` when the
//! build has tcmalloc. A 501 from `/heap_dump` is remembered: the source stops asking.

use std::collections::BTreeMap;
use std::time::Duration;

use super::http::{HttpClient, HttpOptions, blocking};
use super::target::{Endpoint, Target, TargetUrl};
use super::{BodyTap, FailureKind, FetchError, Fetching, Reply, Source, SourceKind, Want};
use crate::model::envoy::MEMORY_PREFIX;
pub use crate::model::envoy::{EnvoyMemory, EnvoySnapshot, EnvoyStats, HeapDumpState, STATS};

/// Asks Envoy's `/stats` for only the counters of [`STATS`] (Envoy matches `filter` as a regex;
/// an Envoy that ignores it still works, as the reply is filtered again here).
const STATS_FILTER: &str = "filter=%5E%28server%5C.%28concurrency%7Ctotal_connections%7Cmemory_allocated%7Cmemory_heap_size%7Cmemory_physical_size%7Cuptime%29%7Ccluster_manager%5C.active_clusters%7Clistener_manager%5C.total_listeners_active%29%24";

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

pub struct EnvoySource {
    target: Target,
    url: TargetUrl,
    client: HttpClient,
    max_body: u64,
    heap_dump: HeapDumpState,
}

impl EnvoySource {
    /// `target` is `envoy:http://HOST:PORT` (or the bare URL). Of `options`, the headers, the
    /// body cap and `insecure` apply; the admin port speaks plain HTTP, so CA and client
    /// certificates are refused rather than ignored.
    pub fn new(
        target: impl Into<Target>,
        options: &HttpOptions,
    ) -> Result<EnvoySource, FetchError> {
        let target: Target = target.into();
        let url = target.url().filter(|u| u.path.is_empty()).ok_or_else(|| {
            FetchError::new(
                FailureKind::Other,
                format!(
                    "{target}: not an Envoy admin address (example: envoy:http://127.0.0.1:15000)"
                ),
            )
        })?;
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
            client: HttpClient::new(&url, &options.headers, tls)?,
            target,
            url,
            max_body: if options.max_body == 0 {
                512 << 20
            } else {
                options.max_body
            },
            heap_dump: HeapDumpState::NotAsked,
        })
    }

    /// One of the admin port's endpoints (`/memory`), with any parameters of the target.
    fn endpoint(&self, path: &str, own: &[&str]) -> Endpoint {
        self.url.endpoint(path, own, true)
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
        blocking(self.heap_dump_async(timeout, None))
    }

    async fn memory_async(&self, timeout: Duration) -> Result<EnvoyMemory, FetchError> {
        let url = self.endpoint("/memory", &[]);
        let bytes = self.ok(&url, timeout).await?;
        EnvoyMemory::parse(&bytes).map_err(|e| {
            FetchError::new(
                FailureKind::Other,
                format!("{url}: not Envoy's /memory: {e}"),
            )
        })
    }

    async fn stats_async(&self, timeout: Duration) -> Result<EnvoyStats, FetchError> {
        let url = self.endpoint("/stats", &[STATS_FILTER]);
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

    async fn heap_dump_async(
        &mut self,
        timeout: Duration,
        tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<HeapDump, FetchError> {
        if let HeapDumpState::NotAvailable(why) = &self.heap_dump {
            return Ok(HeapDump::NotAvailable(why.clone()));
        }
        let url = self.endpoint("/heap_dump", &[]);
        let (status, bytes) = self.client.get(&url, timeout, self.max_body, tap).await?;
        match status {
            200 => {
                self.heap_dump = HeapDumpState::Available;
                Ok(HeapDump::Profile(bytes))
            }
            // 404: an Envoy older than the endpoint; the same answer for good.
            501 | 404 => {
                let why = format!("HTTP {status}: {}", self.client.answer_text(&bytes));
                self.heap_dump = HeapDumpState::NotAvailable(why.clone());
                Ok(HeapDump::NotAvailable(why))
            }
            _ => Err(self.client.status_error(&url, status, &bytes)),
        }
    }

    async fn ok(&self, url: &Endpoint, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        let (status, bytes) = self.client.get(url, timeout, self.max_body, None).await?;
        if status != 200 {
            return Err(self.client.status_error(url, status, &bytes));
        }
        Ok(bytes)
    }

    /// What the collector asks for: MemStats replies with the snapshot's totals as one JSON
    /// object, which [`totals_from_reply`] reads back; Heap replies with the gzipped pprof as
    /// served.
    async fn answer(
        &mut self,
        want: Want,
        timeout: Duration,
        tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<Reply, FetchError> {
        match want {
            Want::Heap => match self.heap_dump_async(timeout, tap).await? {
                HeapDump::Profile(bytes) => Ok(Reply {
                    bytes,
                    pid: None,
                    made: None,
                }),
                HeapDump::NotAvailable(why) => Err(FetchError::new(
                    FailureKind::Status,
                    format!(
                        "{}: not available ({why}); not asked again",
                        self.endpoint("/heap_dump", &[])
                    ),
                )),
            },
            Want::MemStats => {
                let snapshot = self.snapshot_async(0, timeout).await?;
                let bytes =
                    serde_json::to_vec(&snapshot.totals()).expect("a map of numbers serialises");
                Ok(Reply {
                    bytes,
                    pid: None,
                    made: None,
                })
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
        self.target.as_str()
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
        blocking(self.answer(want, timeout, None))
    }

    fn fetch_async<'a>(
        &'a mut self,
        want: Want,
        timeout: Duration,
        tap: Option<&'a mut dyn BodyTap>,
    ) -> Option<Fetching<'a>> {
        Some(Box::pin(self.answer(want, timeout, tap)))
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
        assert_eq!(
            s.endpoint("/memory", &[]).url.expose(),
            "http://127.0.0.1:15000/memory"
        );
        let s = EnvoySource::new("envoy:http://admin:pw@h:1?token=abc", &o).unwrap();
        let stats = s.endpoint("/stats", &[STATS_FILTER]);
        assert_eq!(
            stats.url.expose(),
            format!("http://h:1/stats?{STATS_FILTER}&token=abc")
        );
        assert_eq!(
            stats.shown,
            format!("http://h:1/stats?{STATS_FILTER}&token=***")
        );
        assert_eq!(s.target(), "envoy:http://admin:***@h:1?token=***");
        assert!(EnvoySource::new("envoy:127.0.0.1:15000", &o).is_err());
        assert!(EnvoySource::new("envoy:http://h:1/stats", &o).is_err());
    }

    #[test]
    fn the_stats_filter_is_the_counter_list() {
        let decoded = STATS_FILTER
            .trim_start_matches("filter=")
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
