//! A profile's summary (totals per sample type, content hash) read while its protobuf bytes
//! are still being gunzipped: each top-level field is summed as soon as it is whole, so when
//! the last byte comes only the last fields are left. It gives what `decode::summarize` gives
//! for the same bytes (a test holds the two equal on real profiles); whatever it cannot read,
//! it leaves to `decode::summarize`, whose error is the one reported.
//! (A candidate for `src/decode`, as an incremental form of `summarize`.)

use xxhash_rust::xxh3::Xxh3;

use crate::decode::Summary;

/// The summary so far of a protobuf that grows at its end.
pub(super) struct RunningSummary {
    hasher: Xxh3,
    /// Bytes summed, from the start: whole top-level fields only.
    done: usize,
    /// Where each string of the string table lies in the bytes.
    strings: Vec<(usize, usize)>,
    /// The string index of each sample type's name.
    types: Vec<u64>,
    totals: Vec<i64>,
    /// The number of values in every sample, once one was seen.
    per_sample: Option<usize>,
    /// Something could not be read: `decode::summarize` says what.
    unreadable: bool,
}

impl RunningSummary {
    pub(super) fn new() -> RunningSummary {
        RunningSummary {
            hasher: Xxh3::new(),
            done: 0,
            strings: Vec::new(),
            types: Vec::new(),
            totals: Vec::new(),
            per_sample: None,
            unreadable: false,
        }
    }

    /// Sums the whole fields of `raw` past those already summed. `raw` only grows between
    /// calls; what was there stays as it was.
    pub(super) fn advance(&mut self, raw: &[u8]) {
        while !self.unreadable {
            let Some((field, len)) = top_level_field(&raw[self.done..]) else {
                return;
            };
            let whole = &raw[self.done..self.done + len];
            if self.take(field, whole, self.done).is_none() {
                self.unreadable = true;
                return;
            }
            self.done += len;
        }
    }

    /// The summary of `raw`, whole now; `None` when it could not be read.
    pub(super) fn finish(mut self, raw: &[u8]) -> Option<Summary> {
        self.advance(raw);
        if self.unreadable || self.done != raw.len() {
            return None;
        }
        if self.per_sample.is_some_and(|n| n != self.types.len()) {
            return None;
        }
        self.totals.resize(self.types.len(), 0);
        let mut totals = Vec::with_capacity(self.types.len());
        for (&ty, &total) in self.types.iter().zip(&self.totals) {
            let &(start, end) = self.strings.get(usize::try_from(ty).ok()?)?;
            totals.push((
                String::from_utf8_lossy(&raw[start..end]).into_owned(),
                total,
            ));
        }
        Some(Summary {
            totals,
            hash: format!("xxh3:{:032x}", self.hasher.digest128()),
        })
    }

    /// One whole top-level field, found at `at` in the bytes.
    fn take(&mut self, field: u64, whole: &[u8], at: usize) -> Option<()> {
        // The timestamps are left out of the hash: two captures between the same two GCs are
        // the same capture.
        if field != 9 && field != 10 {
            self.hasher.update(whole);
        }
        if !matches!(field, 1 | 2 | 6) {
            return Some(());
        }
        let (tag, t) = varint(whole)?;
        if tag & 7 != 2 {
            return None;
        }
        let (_, n) = varint(&whole[t..])?;
        let body = &whole[t + n..];
        match field {
            1 => {
                let mut ty = 0;
                walk(body, |f, wire, v, _| {
                    if (f, wire) == (1, 0) {
                        ty = v;
                    }
                    Some(())
                })?;
                self.types.push(ty);
            }
            2 => {
                let totals = &mut self.totals;
                let mut count = 0usize;
                walk(body, |f, wire, v, bytes| {
                    if f != 2 {
                        return Some(());
                    }
                    let mut add = |v: u64| {
                        if totals.len() <= count {
                            totals.push(0);
                        }
                        totals[count] = totals[count].wrapping_add(v as i64);
                        count += 1;
                    };
                    match wire {
                        0 => add(v),
                        2 => {
                            let mut packed = bytes;
                            while !packed.is_empty() {
                                let (x, n) = varint(packed)?;
                                add(x);
                                packed = &packed[n..];
                            }
                        }
                        _ => return None,
                    }
                    Some(())
                })?;
                if *self.per_sample.get_or_insert(count) != count {
                    return None;
                }
            }
            _ => self.strings.push((at + t + n, at + whole.len())),
        }
        Some(())
    }
}

/// The field number and encoded length (tag included) of the protobuf field at the start of
/// `bytes`; `None` while it is not whole (or not readable).
fn top_level_field(bytes: &[u8]) -> Option<(u64, usize)> {
    let (tag, tag_len) = varint(bytes)?;
    let body = &bytes[tag_len..];
    let body_len = match tag & 7 {
        0 => varint(body)?.1,
        1 => 8,
        2 => {
            let (n, n_len) = varint(body)?;
            n_len.checked_add(usize::try_from(n).ok()?)?
        }
        5 => 4,
        _ => return None,
    };
    let total = tag_len.checked_add(body_len)?;
    (total <= bytes.len()).then_some((tag >> 3, total))
}

fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Calls `f(field, wire type, varint value, length-delimited bytes)` for every field of a
/// message body; `None` at broken framing or when `f` says so.
fn walk<'a>(
    mut body: &'a [u8],
    mut f: impl FnMut(u64, u64, u64, &'a [u8]) -> Option<()>,
) -> Option<()> {
    while !body.is_empty() {
        let (tag, t) = varint(body)?;
        body = &body[t..];
        let (v, bytes, used) = match tag & 7 {
            0 => {
                let (v, n) = varint(body)?;
                (v, &body[..0], n)
            }
            1 => (0, &body[..0], 8),
            2 => {
                let (n, k) = varint(body)?;
                let end = k.checked_add(usize::try_from(n).ok()?)?;
                if end > body.len() {
                    return None;
                }
                (0, &body[k..end], end)
            }
            5 => (0, &body[..0], 4),
            _ => return None,
        };
        if used > body.len() {
            return None;
        }
        f(tag >> 3, tag & 7, v, bytes)?;
        body = &body[used..];
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{self, DecodeLimits};

    /// Sums `raw` as it would arrive in pieces of `step` bytes.
    fn in_pieces(raw: &[u8], step: usize) -> Option<Summary> {
        let mut running = RunningSummary::new();
        let mut end = 0;
        while end < raw.len() {
            end = (end + step).min(raw.len());
            running.advance(&raw[..end]);
        }
        running.finish(raw)
    }

    #[test]
    fn the_running_summary_is_the_summary_of_real_profiles_in_any_pieces() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata");
        let mut profiles = Vec::new();
        for sub in ["profiles", "runs"] {
            let mut stack = vec![std::path::PathBuf::from(dir).join(sub)];
            while let Some(path) = stack.pop() {
                if path.is_dir() {
                    stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                } else if path.to_string_lossy().ends_with(".pb.gz") {
                    profiles.push(path);
                }
            }
        }
        assert!(profiles.len() >= 10, "{profiles:?}");
        for path in &profiles {
            let gz = std::fs::read(path).unwrap();
            let raw = decode::decompress(&gz, &DecodeLimits::default()).unwrap();
            let whole = decode::summarize(&raw).unwrap();
            for step in [1, 7, 4096, raw.len()] {
                let running = in_pieces(&raw, step);
                assert_eq!(
                    running.as_ref(),
                    Some(&whole),
                    "{} in {step}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn what_summarize_refuses_the_running_summary_does_not_read() {
        let gz = include_bytes!("../../testdata/profiles/hiddenleak-heap-rate4k.pb.gz");
        let raw = decode::decompress(gz, &DecodeLimits::default()).unwrap();
        // Cut off inside a field; a sample type naming a string that is not there; a sample
        // with a value too many; a field of a wire type that does not exist.
        let cut = raw[..raw.len() - 3].to_vec();
        let mut no_name = raw.to_vec();
        no_name.extend_from_slice(&[0x0a, 0x02, 0x08, 0x7f]);
        let mut extra_value = raw.to_vec();
        extra_value.extend_from_slice(&[0x12, 0x06, 0x10, 0x01, 0x10, 0x01, 0x10, 0x01]);
        let mut bad_wire = raw.to_vec();
        bad_wire.push(0x0f);
        for broken in [cut, no_name, extra_value, bad_wire] {
            assert!(decode::summarize(&broken).is_err());
            assert_eq!(in_pieces(&broken, 100), None);
        }
    }
}
