//! Profile.sample decoded by hand: a heap profile is mostly samples, and prost gives each one
//! three Vecs of its own. Here every sample reuses one scratch record, so decoding allocates
//! only the model's pools.

use super::{DecodeError, pb};

fn bad(what: &str) -> DecodeError {
    DecodeError::Protobuf(what.to_string())
}

/// A cursor over protobuf bytes.
pub(super) struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Wire<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Wire { buf, pos: 0 }
    }

    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline(always)]
    pub(super) fn varint(&mut self) -> Result<u64, DecodeError> {
        // One byte is the usual case for ids, small values and tags.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        let (value, len) = long_varint(&self.buf[self.pos.min(self.buf.len())..])?;
        self.pos += len;
        Ok(value)
    }

    /// The next tag as (field number, wire type).
    #[inline]
    pub(super) fn tag(&mut self) -> Result<(u64, u8), DecodeError> {
        let tag = self.varint()?;
        if tag > u64::from(u32::MAX) {
            return Err(bad("invalid tag value"));
        }
        let field = tag >> 3;
        if field == 0 {
            return Err(bad("invalid tag value: 0"));
        }
        Ok((field, (tag & 7) as u8))
    }

    #[inline]
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| bad("buffer underflow"))?;
        let body = &self.buf[self.pos..end];
        self.pos = end;
        Ok(body)
    }

    pub(super) fn skip(&mut self, wire: u8) -> Result<(), DecodeError> {
        let n = match wire {
            0 => return self.varint().map(drop),
            1 => 8,
            2 => return self.bytes().map(drop),
            5 => 4,
            _ => return Err(bad("unsupported wire type (groups are not used by pprof)")),
        };
        if self.buf.len() - self.pos < n {
            return Err(bad("buffer underflow"));
        }
        self.pos += n;
        Ok(())
    }
}

/// A varint of any length at the start of `buf`, and its length.
#[inline(never)]
fn long_varint(buf: &[u8]) -> Result<(u64, usize), DecodeError> {
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&b) = buf.get(i) else {
            return Err(bad("buffer underflow"));
        };
        if i == 9 && b > 1 {
            return Err(bad("invalid varint"));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    Err(bad("invalid varint"))
}

/// Appends every varint of a packed field's body.
#[inline]
fn packed_varints(mut buf: &[u8], out: &mut Vec<u64>) -> Result<(), DecodeError> {
    // Each varint takes at least a byte.
    out.reserve(buf.len());
    while let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            out.push(u64::from(b));
            buf = rest;
        } else {
            let (value, len) = long_varint(buf)?;
            out.push(value);
            buf = &buf[len..];
        }
    }
    Ok(())
}

/// One sample as the message spells it, reused from sample to sample.
#[derive(Default)]
pub(super) struct RawSample {
    pub location_id: Vec<u64>,
    pub value: Vec<u64>,
    pub label: Vec<pb::Label>,
}

fn repeated_varint(w: &mut Wire, wire: u8, out: &mut Vec<u64>) -> Result<(), DecodeError> {
    match wire {
        0 => out.push(w.varint()?),
        2 => packed_varints(w.bytes()?, out)?,
        _ => return Err(bad("invalid wire type")),
    }
    Ok(())
}

fn int64(w: &mut Wire, wire: u8) -> Result<i64, DecodeError> {
    if wire != 0 {
        return Err(bad("invalid wire type"));
    }
    Ok(w.varint()? as i64)
}

impl RawSample {
    pub(super) fn decode(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        self.location_id.clear();
        self.value.clear();
        self.label.clear();
        let mut w = Wire::new(body);
        while !w.at_end() {
            match w.tag()? {
                (1, wire) => repeated_varint(&mut w, wire, &mut self.location_id)?,
                (2, wire) => repeated_varint(&mut w, wire, &mut self.value)?,
                (3, 2) => {
                    let mut l = Wire::new(w.bytes()?);
                    let mut label = pb::Label::default();
                    while !l.at_end() {
                        match l.tag()? {
                            (1, wire) => label.key = int64(&mut l, wire)?,
                            (2, wire) => label.str = int64(&mut l, wire)?,
                            (3, wire) => label.num = int64(&mut l, wire)?,
                            (4, wire) => label.num_unit = int64(&mut l, wire)?,
                            (_, wire) => l.skip(wire)?,
                        }
                    }
                    self.label.push(label);
                }
                (3, _) => return Err(bad("invalid wire type")),
                (_, wire) => w.skip(wire)?,
            }
        }
        Ok(())
    }
}

/// Splits a Profile message into everything but its samples, decoded by prost, and the
/// bodies of its samples, in order.
pub(super) fn split(raw: &[u8]) -> Result<(pb::Profile, Vec<&[u8]>), DecodeError> {
    use prost::Message;
    let mut header = pb::Profile::default();
    let mut bodies = Vec::new();
    let mut w = Wire::new(raw);
    let mut run_start = 0;
    let merge = |header: &mut pb::Profile, run: &[u8]| {
        if run.is_empty() {
            return Ok(());
        }
        header
            .merge(run)
            .map_err(|e| DecodeError::Protobuf(e.to_string()))
    };
    while !w.at_end() {
        let field_start = w.pos();
        match w.tag()? {
            (2, 2) => {
                merge(&mut header, &raw[run_start..field_start])?;
                bodies.push(w.bytes()?);
                run_start = w.pos();
            }
            (_, wire) => w.skip(wire)?,
        }
    }
    merge(&mut header, &raw[run_start..])?;
    Ok((header, bodies))
}
