//! Bytes to [`Profile`]: gunzip (when the bytes start with the gzip magic) under a ceiling on
//! the decompressed size, protobuf decoding, then a strict check of every reference so the rest
//! of heapwatch can index without fear. No I/O: callers read files and add the file name.

mod error;
mod samples;
pub mod stackdump;
mod summary;
mod validate;

pub use error::DecodeError;
pub use summary::{Summary, summarize};

use std::io::Read;

use prost::Message;

use crate::model::Profile;

/// Generated from `proto/profile.proto` by `build.rs`.
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// The default ceiling on a profile's decompressed size: a decompression bomb stops here
/// instead of taking the collector's own memory.
pub const DEFAULT_MAX_DECOMPRESSED: u64 = 1 << 30;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    pub max_decompressed: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_decompressed: DEFAULT_MAX_DECOMPRESSED,
        }
    }
}

pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// Decodes a pprof profile, gzipped or not, and checks every reference in it.
pub fn decode(bytes: &[u8], limits: &DecodeLimits) -> Result<Profile, DecodeError> {
    let raw = decompress(bytes, limits)?;
    decode_protobuf(&raw)
}

/// Decodes and checks an already decompressed profile.
pub fn decode_protobuf(raw: &[u8]) -> Result<Profile, DecodeError> {
    let (header, bodies) = samples::split(raw)?;
    validate::build(header, &bodies)
}

/// A hash of a profile's content without its timestamp fields (`time_nanos`,
/// `duration_nanos`): two captures taken between the same two GCs hash the same although
/// Go stamps each with the time it was written.
pub fn content_hash(raw: &[u8]) -> String {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let Some((field, len)) = top_level_field(rest) else {
            // Not walkable: hash everything that is left.
            hasher.update(rest);
            break;
        };
        if field != 9 && field != 10 {
            hasher.update(&rest[..len]);
        }
        rest = &rest[len..];
    }
    format!("xxh3:{:032x}", hasher.digest128())
}

/// The field number and encoded length (tag included) of the protobuf field at the start.
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

/// The protobuf bytes of a profile: gunzipped when gzipped, as given otherwise.
pub fn decompress<'a>(
    bytes: &'a [u8],
    limits: &DecodeLimits,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    if !is_gzip(bytes) {
        if let Some(kind) = sniff_text(bytes) {
            return Err(DecodeError::NotProfile(kind));
        }
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    gunzip(bytes, limits.max_decompressed).map(std::borrow::Cow::Owned)
}

/// Gunzips a whole stream, refusing more than `max` bytes of output and a stream that ends
/// early or fails its checksum.
pub fn gunzip(bytes: &[u8], max: u64) -> Result<Vec<u8>, DecodeError> {
    // Go's compress/gzip output is usually 3-8x smaller than the protobuf.
    let guess = (bytes.len() as u64).saturating_mul(6).min(max) as usize;
    let mut out = Vec::with_capacity(guess);
    // The bufread decoder takes from the slice only what the gzip member spans, so what is
    // left afterwards is exactly the trailing data (the read decoder buffers ahead of it).
    let decoder = flate2::bufread::GzDecoder::new(bytes);
    let mut limited = decoder.take(max.saturating_add(1));
    limited.read_to_end(&mut out).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => DecodeError::TruncatedGzip,
        _ => DecodeError::BadGzip(e.to_string()),
    })?;
    if out.len() as u64 > max {
        return Err(DecodeError::TooLarge { max });
    }
    // A gzip stream must end where its member ends; trailing garbage is a corrupt capture.
    if !limited.into_inner().get_ref().is_empty() {
        return Err(DecodeError::BadGzip(
            "data after the end of the gzip stream".into(),
        ));
    }
    Ok(out)
}

/// Decodes the protobuf message alone, with no reference checks.
pub fn decode_message(raw: &[u8]) -> Result<pb::Profile, DecodeError> {
    pb::Profile::decode(raw).map_err(|e| DecodeError::Protobuf(e.to_string()))
}

/// Recognises the usual wrong answers from a profile endpoint so the error can say what they
/// are: an HTML page, the legacy text format, JSON, plain text.
fn sniff_text(bytes: &[u8]) -> Option<String> {
    let head = &bytes[..bytes.len().min(512)];
    let text = std::str::from_utf8(head).ok().or_else(|| {
        // A cut in the middle of a UTF-8 sequence at 512 bytes is still text.
        std::str::from_utf8(&head[..head.len().saturating_sub(3)]).ok()
    })?;
    let printable = text
        .chars()
        .all(|c| !c.is_control() || c == '\n' || c == '\r' || c == '\t');
    if !printable || text.trim().is_empty() {
        return None;
    }
    let trimmed = text.trim_start();
    let lower = trimmed.to_ascii_lowercase();
    let first_line: String = trimmed
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(80)
        .collect();
    let kind =
        if lower.starts_with("<!doctype") || lower.starts_with("<html") || lower.starts_with('<') {
            format!("it is an HTML or XML page (starts {first_line:?})")
        } else if lower.starts_with("heap profile:") || lower.starts_with("goroutine profile:") {
            "it is pprof's legacy text format (?debug=1); fetch the profile without debug=1"
                .to_string()
        } else if lower.starts_with('{') || lower.starts_with('[') {
            format!("it is JSON (starts {first_line:?})")
        } else {
            format!("it is text, not protobuf (starts {first_line:?})")
        };
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_told_apart_by_magic() {
        assert!(is_gzip(&[0x1f, 0x8b, 8]));
        assert!(!is_gzip(&[0x0a, 0x1f]));
    }

    #[test]
    fn html_is_named() {
        let err = decode(
            b"<html><body>502 Bad Gateway</body></html>",
            &DecodeLimits::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("HTML"), "{err}");
    }

    #[test]
    fn the_content_hash_ignores_the_timestamp() {
        // field 6 (string table) "", field 9 (time_nanos) varint.
        let a = [0x32, 0x00, 0x48, 0x01];
        let b = [0x32, 0x00, 0x48, 0x7f];
        let c = [0x32, 0x01, b'x', 0x48, 0x01];
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&c));
    }

    #[test]
    fn empty_bytes_decode_as_nothing_to_read() {
        assert!(matches!(
            decode(b"", &DecodeLimits::default()),
            Err(DecodeError::Empty)
        ));
    }
}
