//! What each kind of reply is checked for, and what the collector takes from it: MemStats, the
//! agent's stats and Envoy's figures are kept in the record (no file); a goroutine stack dump is
//! stored as text; a pprof profile is summed as it streamed in, or now on the blocking pool, or as
//! the proc source made it. A reply that fails its check is an `invalid` failure, never a capture.
//! Each good reply settles its boot cycle (`cycles.rs`) and names its file, or is marked a
//! duplicate of the last one stored.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Collector;
use super::intake::Streamed;
use super::tasks::joined;
use crate::decode::{self, stackdump};
use crate::index::Content as IndexContent;
use crate::source::{SourceKind, memstats};
use crate::store::{CaptureRecord, RecordKind};

impl Collector {
    pub(super) fn memstats(
        &mut self,
        record: &mut CaptureRecord,
        bytes: &[u8],
    ) -> Result<(), Invalid> {
        if self.kind == SourceKind::Envoy {
            return self.envoy(record, bytes);
        }
        let text = String::from_utf8_lossy(bytes);
        let stats = memstats::parse_debug_heap(&text)
            .or_else(|| memstats::parse_agent(&text))
            .ok_or_else(|| Invalid("the reply has no runtime.MemStats figures".into()))?;
        record.cycle = self.answered(&stats, record.pid);
        self.runtime_memory = memstats::held_bytes(&stats).map(|b| b.max(0) as u64);
        record.totals = stats;
        Ok(())
    }

    /// Envoy's `/memory` and `/stats` figures, kept in an `envoy` record. The memory the
    /// limit applies to is the physical figure tcmalloc reports, else what it allocated.
    fn envoy(&mut self, record: &mut CaptureRecord, bytes: &[u8]) -> Result<(), Invalid> {
        let totals = crate::source::envoy::totals_from_reply(bytes)
            .ok_or_else(|| Invalid("the reply has no Envoy /memory or /stats figures".into()))?;
        record.kind = RecordKind::Envoy;
        record.cycle = self.answered(&totals, record.pid);
        let memory = [
            "memory.total_physical_bytes",
            "memory.allocated",
            "server.memory_physical_size",
        ]
        .iter()
        .find_map(|k| totals.get(*k).copied().filter(|&v| v > 0));
        if let Some(m) = memory {
            self.runtime_memory = Some(m.max(0) as u64);
            self.status.heap(record.t_ms, m);
        }
        record.totals = totals;
        Ok(())
    }

    /// The agent's runtime counts (op 0x07), kept in the record like MemStats.
    pub(super) fn stats(
        &mut self,
        record: &mut CaptureRecord,
        bytes: &[u8],
    ) -> Result<(), Invalid> {
        let text = String::from_utf8_lossy(bytes);
        let stats = memstats::parse_agent_stats(&text).ok_or_else(|| {
            let head: String = text.chars().take(80).collect();
            Invalid(format!("the reply has no runtime stats: {head:?}"))
        })?;
        record.cycle = self.answered(&stats, record.pid);
        self.status.goroutines = stats.get("goroutines").copied();
        record.totals = stats;
        Ok(())
    }

    /// A goroutine stack dump as text (the agent's op 0x01), stored as it came,
    /// as `NNNNNN-goroutine.txt`; a dump cut short is an error, never a capture.
    pub(super) fn stack_dump(
        &mut self,
        record: &mut CaptureRecord,
        bytes: &[u8],
    ) -> Result<(), Invalid> {
        let dump = stackdump::parse(bytes).map_err(|e| Invalid(e.to_string()))?;
        let goroutines = dump.goroutines();
        let totals = BTreeMap::from([("goroutine".to_string(), goroutines)]);
        record.cycle = self.answered(&totals, record.pid);
        self.status.goroutines = Some(goroutines);
        record.totals = totals;
        self.keep_or_dedup(record, dump.content_hash(), "txt");
        self.to_index = Some(IndexContent::Dump(dump));
        Ok(())
    }

    /// A pprof profile, gunzipped and summed as it streamed in, or else now, on the blocking
    /// pool (a few ms of CPU for a large one, which would otherwise hold up every target
    /// sharing the runtime's thread); or, from a source that made it, its protobuf summed as
    /// given, under the same ceiling.
    pub(super) async fn profile(
        &mut self,
        record: &mut CaptureRecord,
        bytes: Arc<[u8]>,
        pid: Option<u32>,
        streamed: Body,
    ) -> Result<(), Invalid> {
        let limits = self.config.decode;
        let mut sites = None;
        let mut len = 0;
        let (raw, summary) = match streamed {
            Made(made) => {
                record.gc = made.gc;
                if made.len > limits.max_decompressed {
                    let max = limits.max_decompressed;
                    return Err(Invalid(decode::DecodeError::TooLarge { max }.to_string()));
                }
                len = made.len;
                sites = made.sites;
                (made.raw.unwrap_or_default(), made.summary)
            }
            Gunzipped(Streamed::Profile(raw, summary)) => (raw, summary),
            Gunzipped(Streamed::Invalid(message)) => return Err(Invalid(message)),
            Gunzipped(Streamed::Recheck) => {
                let decoded = tokio::task::spawn_blocking(move || {
                    let raw =
                        decode::decompress(&bytes, &limits).map_err(|e| Invalid(e.to_string()))?;
                    // Totals and hash in one pass; the model is built only when a run is
                    // analysed.
                    let summary = decode::summarize(&raw).map_err(|e| Invalid(e.to_string()))?;
                    Ok::<_, Invalid>((raw.into_owned(), summary))
                })
                .await;
                joined(decoded)?
            }
        };
        let hash = summary.hash;
        let totals: BTreeMap<String, i64> = summary.totals.into_iter().collect();
        record.cycle = self.answered(&totals, pid);
        if record.kind == RecordKind::Heap {
            if let Some(&inuse) = totals.get("inuse_space") {
                self.status.heap(record.t_ms, inuse);
            }
        }
        if record.kind == RecordKind::Goroutine {
            self.status.goroutines = totals.get("goroutine").copied();
        }
        record.totals = totals;
        self.keep_or_dedup(record, hash, "pb.gz");
        // Figures made with the profile need no decode, and the protobuf is let go now.
        self.to_index = Some(match sites {
            Some(sites) => {
                self.named_for = Some(sites.module.clone());
                IndexContent::Figures(sites.into(), len)
            }
            None => IndexContent::Profile(raw),
        });
        Ok(())
    }

    /// Names the file a capture goes to, or marks it a duplicate of the last stored one.
    fn keep_or_dedup(&mut self, record: &mut CaptureRecord, hash: String, extension: &str) {
        match self.last_stored.get(&record.kind) {
            Some((last_hash, seq, file)) if *last_hash == hash => {
                record.dup_of = Some(*seq);
                record.file = Some(file.clone());
                self.summary.duplicates += 1;
            }
            _ => {
                record.file = Some(format!(
                    "profiles/{:06}-{}.{extension}",
                    record.seq,
                    record.kind.as_str()
                ));
            }
        }
        record.hash = Some(hash);
    }
}

pub(super) struct Invalid(pub(super) String);

/// A profile's body as the collector checks it: what the gunzip beside the request made of
/// it, or the protobuf the source made and gzipped itself.
pub(super) enum Body {
    Gunzipped(Streamed),
    Made(crate::source::Made),
}
use Body::{Gunzipped, Made};

/// A goroutine reply in text (op 0x01, or `?debug=2`) rather than a gzipped pprof profile.
pub(super) fn is_stack_dump(bytes: &[u8]) -> bool {
    !decode::is_gzip(bytes) && bytes.starts_with(b"goroutine ")
}
