//! The collector's one pass over a capture: the totals per sample type and the content hash,
//! read straight from the protobuf without building the model. The framing of every field and
//! one value per sample type in every sample are checked; the full reference check runs when
//! an analysis decodes the file.

use super::{DecodeError, top_level_field, varint};

/// What the collector needs from each capture, read in one pass without building the model:
/// the totals per sample type and the content hash. Checks the protobuf framing of every
/// top-level field and of every sample, and one value per sample type in each sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub totals: Vec<(String, i64)>,
    pub hash: String,
}

/// The summary of a whole protobuf.
pub fn summarize(raw: &[u8]) -> Result<Summary, DecodeError> {
    Summarizer::new().finish(raw)
}

/// A summary read while the protobuf is still arriving (the collector gunzips a body as it
/// comes): each top-level field is summed as soon as it is whole, so when the last byte comes
/// only the last fields are left. Fields are taken in order, so the first error is the one
/// [`summarize`] gives for the same bytes.
pub struct Summarizer {
    hasher: xxhash_rust::xxh3::Xxh3,
    /// Bytes summed, from the start: whole top-level fields only.
    done: usize,
    /// Where each string of the string table lies in the bytes (the bytes may move as they
    /// grow, so no borrows).
    strings: Vec<(usize, usize)>,
    /// The string index of each sample type's name.
    types: Vec<u64>,
    totals: Vec<i64>,
    /// The number of values in every sample, once one was seen.
    per_sample: Option<usize>,
}

impl Default for Summarizer {
    fn default() -> Self {
        Summarizer::new()
    }
}

impl Summarizer {
    pub fn new() -> Summarizer {
        Summarizer {
            hasher: xxhash_rust::xxh3::Xxh3::new(),
            done: 0,
            strings: Vec::new(),
            types: Vec::new(),
            totals: Vec::new(),
            per_sample: None,
        }
    }

    /// Sums the whole fields of `raw` past those already summed. `raw` only grows between
    /// calls; what was there stays as it was. A field not yet whole waits for the next call.
    pub fn advance(&mut self, raw: &[u8]) -> Result<(), DecodeError> {
        while let Some((field, len)) = top_level_field(&raw[self.done..]) {
            let at = self.done;
            self.take(field, &raw[at..at + len], at)?;
            self.done += len;
        }
        Ok(())
    }

    /// The summary of `raw`, whole now.
    pub fn finish(mut self, raw: &[u8]) -> Result<Summary, DecodeError> {
        self.advance(raw)?;
        if self.done != raw.len() {
            return Err(bad("broken protobuf framing"));
        }
        if self.per_sample.is_some_and(|n| n != self.types.len()) {
            return Err(bad(
                "a sample's value count differs from the number of sample types",
            ));
        }
        self.totals.resize(self.types.len(), 0);
        let mut totals = Vec::with_capacity(self.types.len());
        for (&ty, &total) in self.types.iter().zip(&self.totals) {
            let &(start, end) = usize::try_from(ty)
                .ok()
                .and_then(|i| self.strings.get(i))
                .ok_or_else(|| bad("sample type string index"))?;
            totals.push((
                String::from_utf8_lossy(&raw[start..end]).into_owned(),
                total,
            ));
        }
        Ok(Summary {
            totals,
            hash: format!("xxh3:{:032x}", self.hasher.digest128()),
        })
    }

    /// One whole top-level field, found at `at` in the bytes.
    fn take(&mut self, field: u64, whole: &[u8], at: usize) -> Result<(), DecodeError> {
        // The timestamps are left out of the hash: two captures between the same two GCs are
        // the same capture.
        if field != 9 && field != 10 {
            self.hasher.update(whole);
        }
        if !matches!(field, 1 | 2 | 6) {
            return Ok(());
        }
        let (tag, t) = varint(whole).ok_or_else(|| bad("tag"))?;
        if tag & 7 != 2 {
            return Err(bad("a message field that is not length-delimited"));
        }
        let (_, n) = varint(&whole[t..]).ok_or_else(|| bad("length"))?;
        let body = &whole[t + n..];
        match field {
            1 => {
                let mut ty = 0;
                walk(body, |f, wire, v, _| {
                    if (f, wire) == (1, 0) {
                        ty = v;
                    }
                    Ok(())
                })?;
                self.types.push(ty);
            }
            2 => {
                let totals = &mut self.totals;
                let mut count = 0usize;
                walk(body, |f, wire, v, bytes| {
                    if f != 2 {
                        return Ok(());
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
                                let (x, n) = varint(packed).ok_or_else(|| bad("packed value"))?;
                                add(x);
                                packed = &packed[n..];
                            }
                        }
                        _ => return Err(bad("sample value wire type")),
                    }
                    Ok(())
                })?;
                if *self.per_sample.get_or_insert(count) != count {
                    return Err(bad("samples with different numbers of values"));
                }
            }
            _ => self.strings.push((at + t + n, at + whole.len())),
        }
        Ok(())
    }
}

fn bad(what: &str) -> DecodeError {
    DecodeError::Invalid(what.to_string())
}

/// Calls `f(field, wire type, varint value, length-delimited bytes)` for every field of a
/// message body.
fn walk<'a>(
    mut body: &'a [u8],
    mut f: impl FnMut(u64, u64, u64, &'a [u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let bad = || DecodeError::Invalid("broken protobuf framing inside a message".into());
    while !body.is_empty() {
        let (tag, t) = varint(body).ok_or_else(bad)?;
        body = &body[t..];
        let (v, bytes, used) = match tag & 7 {
            0 => {
                let (v, n) = varint(body).ok_or_else(bad)?;
                (v, &body[..0], n)
            }
            1 => (0, &body[..0], 8),
            2 => {
                let (n, k) = varint(body).ok_or_else(bad)?;
                let end = k
                    .checked_add(usize::try_from(n).map_err(|_| bad())?)
                    .ok_or_else(bad)?;
                if end > body.len() {
                    return Err(bad());
                }
                (0, &body[k..end], end)
            }
            5 => (0, &body[..0], 4),
            _ => return Err(bad()),
        };
        if used > body.len() {
            return Err(bad());
        }
        f(tag >> 3, tag & 7, v, bytes)?;
        body = &body[used..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{DecodeLimits, content_hash, decode_protobuf, decompress};

    #[test]
    fn summary_matches_the_full_decode_on_real_profiles() {
        for entry in
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/profiles")).unwrap()
        {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".pb.gz") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let raw = decompress(&bytes, &DecodeLimits::default()).unwrap();
            let p = decode_protobuf(&raw).unwrap();
            let s = summarize(&raw).unwrap();
            let want: Vec<(String, i64)> = p
                .totals()
                .into_iter()
                .enumerate()
                .map(|(i, v)| (p.sample_type_name(i).to_string(), v))
                .collect();
            assert_eq!(s.totals, want, "{}", path.display());
            assert_eq!(s.hash, content_hash(&raw));
        }
    }

    /// Sums `raw` as it would arrive in pieces of `step` bytes.
    fn in_pieces(raw: &[u8], step: usize) -> Result<Summary, DecodeError> {
        let mut running = Summarizer::new();
        let mut end = 0;
        while end < raw.len() {
            end = (end + step).min(raw.len());
            running.advance(&raw[..end])?;
        }
        running.finish(raw)
    }

    #[test]
    fn a_summary_read_in_pieces_is_the_summary_of_the_whole_on_real_profiles() {
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
            let raw = decompress(&gz, &DecodeLimits::default()).unwrap();
            let whole = summarize(&raw).unwrap();
            for step in [1, 7, 4096] {
                assert_eq!(
                    in_pieces(&raw, step).unwrap(),
                    whole,
                    "{} in {step}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn a_broken_profile_read_in_pieces_gives_the_error_of_the_whole() {
        let gz = include_bytes!("../../testdata/profiles/hiddenleak-heap-rate4k.pb.gz");
        let raw = decompress(gz, &DecodeLimits::default()).unwrap();
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
            let whole = summarize(&broken).unwrap_err().to_string();
            assert_eq!(in_pieces(&broken, 100).unwrap_err().to_string(), whole);
        }
    }
}
