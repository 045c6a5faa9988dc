//! `--restamp`: a copy of a capture whose `Profile.time_nanos` is the push time, for a server
//! that refuses profiles older than its ingestion window. The stored file is never touched,
//! and without `--restamp` the bytes go exactly as captured.
//!
//! The copy is made by rewriting one field, not by decoding and re-encoding the profile: the
//! top-level protobuf fields are walked on the wire, every `time_nanos` (field 9) is dropped,
//! one with the new time is appended, and everything else is kept byte for byte, in order,
//! unknown fields included. Then the result is gzipped again (when the capture was gzipped).

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use thiserror::Error;

use crate::decode::{self, DecodeError, DecodeLimits};

/// `Profile.time_nanos` in profile.proto.
const TIME_NANOS: u64 = 9;

#[derive(Debug, Error)]
pub enum RestampError {
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("not a protobuf message: {0}")]
    Wire(String),
}

/// A restamped copy and the capture's own time.
#[derive(Debug)]
pub struct Restamped {
    pub bytes: Vec<u8>,
    /// The profile's own `time_nanos` (0 when it had none).
    pub captured_ns: i64,
}

/// The profile's `time_nanos`, 0 when absent (the last one on the wire wins, as in protobuf).
pub fn time_nanos(raw: &[u8], limits: &DecodeLimits) -> Result<i64, RestampError> {
    let message = decode::decompress(raw, limits)?;
    let mut found = 0;
    for field in fields(&message) {
        let field = field?;
        if field.number == TIME_NANOS && field.wire_type == 0 {
            found = field.varint as i64;
        }
    }
    Ok(found)
}

/// Rewrites `time_nanos` to `now_ns`, keeping the rest of the message as it was.
pub fn restamp(raw: &[u8], now_ns: i64, limits: &DecodeLimits) -> Result<Restamped, RestampError> {
    let gzipped = raw.starts_with(&[0x1f, 0x8b]);
    let message = decode::decompress(raw, limits)?;
    let mut out = Vec::with_capacity(message.len() + 11);
    let mut captured_ns = 0;
    for field in fields(&message) {
        let field = field?;
        if field.number == TIME_NANOS && field.wire_type == 0 {
            captured_ns = field.varint as i64;
        } else {
            out.extend_from_slice(field.bytes);
        }
    }
    put_varint(&mut out, TIME_NANOS << 3);
    put_varint(&mut out, now_ns as u64);
    let bytes = if gzipped {
        let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() + 16), Compression::default());
        gz.write_all(&out)
            .and_then(|()| gz.finish())
            .expect("writing to a Vec does not fail")
    } else {
        out
    };
    Ok(Restamped { bytes, captured_ns })
}

/// One top-level field as it sits on the wire.
struct Field<'a> {
    number: u64,
    wire_type: u8,
    /// The value of a varint field.
    varint: u64,
    /// The whole field, key included.
    bytes: &'a [u8],
}

fn fields(message: &[u8]) -> impl Iterator<Item = Result<Field<'_>, RestampError>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= message.len() {
            return None;
        }
        let start = at;
        let field = (|| {
            let key = varint(message, &mut at)?;
            let wire_type = (key & 7) as u8;
            let mut value = 0;
            match wire_type {
                0 => value = varint(message, &mut at)?,
                1 => at = skip(message, at, 8)?,
                2 => {
                    let len = varint(message, &mut at)?;
                    at = skip(message, at, len)?;
                }
                5 => at = skip(message, at, 4)?,
                other => {
                    return Err(RestampError::Wire(format!(
                        "wire type {other} at byte {start}"
                    )));
                }
            }
            Ok(Field {
                number: key >> 3,
                wire_type,
                varint: value,
                bytes: &message[start..at],
            })
        })();
        if field.is_err() {
            at = message.len();
        }
        Some(field)
    })
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, RestampError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&b) = bytes.get(*at) else {
            return Err(RestampError::Wire(format!(
                "varint cut off at byte {}",
                *at
            )));
        };
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RestampError::Wire(format!(
        "varint too long at byte {}",
        *at
    )))
}

fn skip(bytes: &[u8], at: usize, len: u64) -> Result<usize, RestampError> {
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| RestampError::Wire(format!("field at byte {at} runs past the end")))?;
    Ok(end)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/profiles")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn only_the_time_changes() {
        let limits = DecodeLimits::default();
        let raw = fixture("steady-heap.pb.gz");
        let own = time_nanos(&raw, &limits).unwrap();
        assert!(
            own > 1_600_000_000_000_000_000,
            "a real capture time: {own}"
        );
        let now = own + 3_600_000_000_000 * 5;
        let copy = restamp(&raw, now, &limits).unwrap();
        assert_eq!(copy.captured_ns, own);
        assert_eq!(time_nanos(&copy.bytes, &limits).unwrap(), now);
        let before =
            decode::pb::Profile::decode(&*decode::decompress(&raw, &limits).unwrap()).unwrap();
        let mut after =
            decode::pb::Profile::decode(&*decode::decompress(&copy.bytes, &limits).unwrap())
                .unwrap();
        assert_eq!(after.time_nanos, now);
        after.time_nanos = before.time_nanos;
        assert_eq!(after, before);
        // The stored bytes are the caller's: restamping twice from them gives the same copy.
        assert_eq!(restamp(&raw, now, &limits).unwrap().bytes, copy.bytes);
    }

    #[test]
    fn a_plain_protobuf_stays_plain_and_garbage_is_an_error() {
        let limits = DecodeLimits::default();
        let raw = decode::decompress(&fixture("steady-goroutine.pb.gz"), &limits)
            .unwrap()
            .into_owned();
        let copy = restamp(&raw, 42, &limits).unwrap();
        assert_ne!(copy.bytes[..2], [0x1f, 0x8b]);
        assert_eq!(time_nanos(&copy.bytes, &limits).unwrap(), 42);
        assert!(restamp(&raw[..raw.len() - 3], 42, &limits).is_err());
    }
}
