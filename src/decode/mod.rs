//! Bytes to [`Profile`]: gunzip (when the bytes start with the gzip magic) under a ceiling on
//! the decompressed size, protobuf decoding, then a strict check of every reference so the rest
//! of heapwatch can index without fear. No I/O: callers read files and add the file name.

mod error;
mod validate;

pub use error::DecodeError;

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
    let message = decode_message(&raw)?;
    validate::build(message)
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
    let decoder = flate2::read::GzDecoder::new(bytes);
    let mut limited = decoder.take(max.saturating_add(1));
    limited.read_to_end(&mut out).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => DecodeError::TruncatedGzip,
        _ => DecodeError::BadGzip(e.to_string()),
    })?;
    if out.len() as u64 > max {
        return Err(DecodeError::TooLarge { max });
    }
    let mut decoder = limited.into_inner();
    // A gzip stream must end where its members end; trailing garbage is a corrupt capture.
    let mut rest = [0u8; 1];
    if matches!(decoder.get_mut().read(&mut rest), Ok(n) if n > 0) {
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
    fn empty_bytes_decode_as_nothing_to_read() {
        assert!(matches!(
            decode(b"", &DecodeLimits::default()),
            Err(DecodeError::Empty)
        ));
    }
}
