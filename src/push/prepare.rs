//! A capture made ready to send: its stored file read back, its allocation figures made the
//! change since the capture of its boot cycle the server had before it (that one read back
//! too, unless it was the capture prepared just before), its time set (a duplicate's own, or the push time with
//! `--restamp`), and gzipped again. A capture that needs none of this goes as stored. The
//! stored files are never changed. Runs on the blocking pool: it reads files and spends CPU.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use super::delta::{self, Basis, Cumulative};
use super::spool::{Earlier, Pending};
use crate::decode::{self, DecodeLimits, pb};

/// Per boot cycle, the cumulative figures of the capture prepared last: the next capture's
/// delta starts there without reading that file again.
#[derive(Default)]
pub struct Bases(HashMap<u32, (u64, Cumulative)>);

/// What to prepare: the capture, the earlier heap captures of its cycle the server has or
/// will have (newest first, see [`Spool::earlier`](super::spool::Spool::earlier)), and the
/// time to stamp it with (`--restamp`).
pub struct Job {
    pub pending: Pending,
    pub earlier: Vec<Earlier>,
    pub restamp_at_ns: Option<i64>,
}

/// A capture ready to go.
#[derive(Debug, Clone)]
pub struct Ready {
    pub pending: Pending,
    /// The profile to send (gzipped).
    pub bytes: Vec<u8>,
    /// Its size before gzip: what Pyroscope's rate limit counts.
    pub raw_len: usize,
    /// The capture's own time, unix ns.
    pub captured_ns: i64,
    pub basis: Basis,
    /// The main mapping's file: the executable the profile came from.
    pub executable: Option<String>,
}

pub enum Prepared {
    Ready(Box<Ready>),
    /// The file is gone: retention deleted it since the manifest said otherwise.
    Gone,
    Unreadable(String),
}

pub fn prepare(root: &Path, job: Job, bases: &mut Bases, limits: &DecodeLimits) -> Prepared {
    let pending = job.pending;
    let raw = match std::fs::read(root.join(&pending.file)) {
        Ok(raw) => raw,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Prepared::Gone,
        Err(e) => return Prepared::Unreadable(e.to_string()),
    };
    let mut profile = match message(&raw, limits) {
        Ok(p) => p,
        Err(why) => return Prepared::Unreadable(why),
    };
    let stored_time = profile.time_nanos;
    let own_time = match pending.dup_at_ms {
        Some(ms) => ms.saturating_mul(1_000_000),
        None if stored_time != 0 => stored_time,
        None => pending.t_ms.saturating_mul(1_000_000),
    };
    let (basis, now) = match base_of(root, pending.cycle, &job.earlier, bases, limits) {
        Base::Figures(base) => delta::apply(&mut profile, Some(&base)),
        Base::None => delta::apply(&mut profile, None),
        Base::Lost => {
            // Against itself: an empty allocation delta, the in-use figures as captured.
            let own = Cumulative::of(&profile);
            let (_, now) = delta::apply(&mut profile, own.as_ref());
            (Basis::BaseLost, now)
        }
    };
    if let Some(now) = now {
        bases.0.insert(pending.cycle, (pending.seq, now));
    }
    profile.time_nanos = job.restamp_at_ns.unwrap_or(own_time);
    let executable = profile
        .mapping
        .first()
        .and_then(|m| usize::try_from(m.filename).ok())
        .and_then(|i| profile.string_table.get(i))
        .filter(|f| !f.is_empty())
        .cloned();
    let whole = matches!(basis, Basis::NotCumulative | Basis::First | Basis::Reset);
    let unchanged = whole && profile.time_nanos == stored_time;
    let (bytes, raw_len) = if unchanged && decode::is_gzip(&raw) {
        let len = profile.encoded_len();
        (raw, len)
    } else {
        let encoded = profile.encode_to_vec();
        (gzip(&encoded), encoded.len())
    };
    Prepared::Ready(Box::new(Ready {
        pending,
        bytes,
        raw_len,
        captured_ns: own_time,
        basis,
        executable,
    }))
}

/// Where a capture's allocation delta starts.
enum Base {
    /// The first capture of its cycle the server gets: sent whole.
    None,
    Figures(Cumulative),
    /// The capture the server had before this one was deleted after it went, and its figures
    /// are not held (an earlier push sent it): no delta can be taken without counting a
    /// change twice, so none is sent.
    Lost,
}

/// The cumulative figures of the capture the server has (or will have) before this one: the
/// one prepared last when it is that one (taken, not copied: this capture's replace them),
/// else its file read back. A candidate not sent yet whose file cannot be read is passed over
/// (it will not be sent either); one sent whose file is gone leaves the base lost.
fn base_of(
    root: &Path,
    cycle: u32,
    earlier: &[Earlier],
    bases: &mut Bases,
    limits: &DecodeLimits,
) -> Base {
    for candidate in earlier {
        if bases
            .0
            .get(&cycle)
            .is_some_and(|(kept, _)| *kept == candidate.seq)
        {
            if let Some((_, figures)) = bases.0.remove(&cycle) {
                return Base::Figures(figures);
            }
        }
        let figures = if candidate.deleted {
            None
        } else {
            std::fs::read(root.join(&candidate.file))
                .ok()
                .and_then(|raw| message(&raw, limits).ok())
                .and_then(|p| Cumulative::of(&p))
        };
        match figures {
            Some(figures) => return Base::Figures(figures),
            None if candidate.sent => return Base::Lost,
            None => {}
        }
    }
    Base::None
}

fn message(raw: &[u8], limits: &DecodeLimits) -> Result<pb::Profile, String> {
    let bytes = decode::decompress(raw, limits).map_err(|e| e.to_string())?;
    decode::decode_message(&bytes).map_err(|e| e.to_string())
}

/// Gzip at the fast level: the network is seldom the bottleneck, the pusher's core may be.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 4), Compression::fast());
    gz.write_all(bytes)
        .and_then(|()| gz.finish())
        .expect("writing to a Vec does not fail")
}
