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

pub fn summarize(raw: &[u8]) -> Result<Summary, DecodeError> {
    let bad = |what: &str| DecodeError::Invalid(what.to_string());
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut strings: Vec<&[u8]> = Vec::new();
    let mut types: Vec<(u64, u64)> = Vec::new();
    let mut totals: Vec<i64> = Vec::new();
    let mut per_sample: Option<usize> = None;
    let mut rest = raw;
    while !rest.is_empty() {
        let (field, len) = top_level_field(rest).ok_or_else(|| bad("broken protobuf framing"))?;
        let whole = &rest[..len];
        if field != 9 && field != 10 {
            hasher.update(whole);
        }
        rest = &rest[len..];
        let body = || -> Result<&[u8], DecodeError> {
            let (tag, t) = varint(whole).ok_or_else(|| bad("tag"))?;
            if tag & 7 != 2 {
                return Err(bad("a message field that is not length-delimited"));
            }
            let (_, n) = varint(&whole[t..]).ok_or_else(|| bad("length"))?;
            Ok(&whole[t + n..])
        };
        match field {
            1 => {
                let (mut ty, mut unit) = (0, 0);
                walk(body()?, |f, wire, v, _| {
                    match (f, wire) {
                        (1, 0) => ty = v,
                        (2, 0) => unit = v,
                        _ => {}
                    }
                    Ok(())
                })?;
                types.push((ty, unit));
            }
            2 => {
                let mut count = 0usize;
                walk(body()?, |f, wire, v, bytes| {
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
                if *per_sample.get_or_insert(count) != count {
                    return Err(bad("samples with different numbers of values"));
                }
            }
            6 => strings.push(body()?),
            _ => {}
        }
    }
    if let Some(n) = per_sample {
        if n != types.len() {
            return Err(bad(
                "a sample's value count differs from the number of sample types",
            ));
        }
    }
    totals.resize(types.len(), 0);
    let name = |i: u64| -> Result<String, DecodeError> {
        let s = strings
            .get(i as usize)
            .ok_or_else(|| bad("sample type string index"))?;
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    let totals = types
        .iter()
        .zip(totals)
        .map(|(&(ty, _), v)| Ok((name(ty)?, v)))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    Ok(Summary {
        totals,
        hash: format!("xxh3:{:032x}", hasher.digest128()),
    })
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
}
