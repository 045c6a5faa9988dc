//! The protobuf wire format, read by hand: a cursor over one message's bytes with prost's
//! rules for varints, lengths and wire types, so the hand-written decoders accept and refuse
//! what prost would.

use super::DecodeError;

pub(super) fn bad(what: &str) -> DecodeError {
    DecodeError::Protobuf(what.to_string())
}

pub(super) const VARINT: u8 = 0;
pub(super) const LEN: u8 = 2;

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
    #[inline(always)]
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

    /// The length of a length-delimited field whose tag was just read; the body is not read.
    #[inline]
    pub(super) fn length(&mut self) -> Result<usize, DecodeError> {
        let len = self.varint()?;
        usize::try_from(len).map_err(|_| bad("buffer underflow"))
    }

    #[inline]
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.length()?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| bad("buffer underflow"))?;
        let body = &self.buf[self.pos..end];
        self.pos = end;
        Ok(body)
    }

    /// An int64 or uint64 field's value, as its two's complement bits.
    #[inline]
    pub(super) fn scalar(&mut self, wire: u8) -> Result<u64, DecodeError> {
        if wire != VARINT {
            return Err(bad("invalid wire type"));
        }
        self.varint()
    }

    /// A message field's body.
    #[inline]
    pub(super) fn message(&mut self, wire: u8) -> Result<&'a [u8], DecodeError> {
        if wire != LEN {
            return Err(bad("invalid wire type"));
        }
        self.bytes()
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
pub(super) fn long_varint(buf: &[u8]) -> Result<(u64, usize), DecodeError> {
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

/// Calls `each` with every varint of a packed field's body, in order.
#[inline(always)]
pub(super) fn packed(mut buf: &[u8], mut each: impl FnMut(u64)) -> Result<(), DecodeError> {
    while let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            each(u64::from(b));
            buf = rest;
        } else {
            let (value, len) = long_varint(buf)?;
            each(value);
            buf = &buf[len..];
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_follow_prost() {
        assert_eq!(long_varint(&[0x96, 0x01]).unwrap(), (150, 2));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(long_varint(&max).unwrap(), (u64::MAX, 10));
        let mut too_big = max;
        too_big[9] = 0x02;
        assert!(long_varint(&too_big).is_err());
        assert!(long_varint(&[0x80]).is_err(), "cut short");
    }

    #[test]
    fn packed_fields_are_read_to_their_end() {
        let mut got = Vec::new();
        packed(&[1, 0x96, 0x01, 3], |v| got.push(v)).unwrap();
        assert_eq!(got, [1, 150, 3]);
        assert!(packed(&[1, 0x80], |_| {}).is_err());
    }
}
