//! One bucket's `Sample` message (location ids, values, `bytes` label) as `writeHeapProto` writes
//! it: the figures scaled like `scaleHeapSample`, the leading runtime frames hidden. A sample is
//! kept with the figures it was written from, so one whose record did not move is copied, not
//! written again.

use crate::decode::pb;
use crate::source::proc::sites::Values;
use crate::source::proc::walk::MemRecord;

/// One bucket's `Sample` message as last written: where its body lies in its piece's
/// protobuf, and the figures it was written from. Most buckets of a large profile do not move
/// between two captures (sites that allocated once, at start), and their samples are copied,
/// not written. No body of its own: 100,000 small buffers cost twice their bytes in the
/// allocator (a body of ~70 bytes grew to a 128-byte buffer), where the piece's protobuf holds
/// them packed.
#[derive(Default, Clone, Copy)]
pub(super) struct KeptSample {
    /// The bucket's address (0: no sample yet).
    pub(super) bucket: u64,
    /// The record's six figures, as `MemRecord` gives them (the rate is the encoder's).
    pub(super) figures: Figures,
    /// Its site (see [`sites`](crate::source::proc::sites)).
    pub(super) site: u32,
    /// Its body (after the field's key and length) in its piece's protobuf: where it starts,
    /// its length, and the bytes of it that hold the location ids (written once).
    pub(super) body: u32,
    pub(super) len: u32,
    pub(super) locations: u32,
}

/// A record's six figures: allocated, freed and recent objects and bytes, unscaled.
pub(super) type Figures = [i64; 6];

/// The figures of `r`, in [`Figures`]' order.
pub(super) fn figures_of(r: &MemRecord) -> Figures {
    [
        r.alloc_objects,
        r.alloc_bytes,
        r.free_objects,
        r.free_bytes,
        r.recent_objects,
        r.recent_bytes,
    ]
}

/// `scaleHeapSample`: undo the sampling, given each sample's chance to be recorded.
pub fn scale_heap_sample(count: i64, size: i64, rate: i64) -> (i64, i64) {
    if count == 0 || size == 0 {
        return (0, 0);
    }
    if rate <= 1 {
        return (count, size);
    }
    let avg = size as f64 / count as f64;
    let scale = 1.0 / (1.0 - (-avg / rate as f64).exp());
    ((count as f64 * scale) as i64, (size as f64 * scale) as i64)
}

/// `protomem`'s rule: drop the leading runtime frames, unless that leaves nothing.
pub fn hide_leading_runtime(stack: &[u64], is_runtime: impl Fn(u64) -> bool) -> &[u64] {
    match stack.iter().position(|&pc| !is_runtime(pc)) {
        Some(i) => &stack[i..],
        None => stack,
    }
}

pub(super) fn subtract(totals: &mut Values, values: &Values) {
    for (t, v) in totals.iter_mut().zip(values) {
        *t = t.wrapping_sub(*v);
    }
}

/// The location ids a `Sample` body starts with (field 1, packed), as written above.
pub(super) fn sample_locations(mut packed: &[u8], locs: &mut Vec<u64>) {
    use prost::encoding::decode_varint;
    if packed.is_empty()
        || decode_varint(&mut packed).is_err()
        || decode_varint(&mut packed).is_err()
    {
        return;
    }
    while !packed.is_empty() {
        match decode_varint(&mut packed) {
            Ok(id) => locs.push(id),
            Err(_) => return,
        }
    }
}

/// A heap `Sample`'s six values from a record's figures at the sampling rate `rate`, scaled as
/// `writeHeapProto` scales them.
pub(super) fn heap_values(figures: &Figures, rate: i64) -> Values {
    let [
        alloc_objects,
        alloc_bytes,
        free_objects,
        free_bytes,
        recent_objects,
        recent_bytes,
    ] = *figures;
    let (ao, ab) = scale_heap_sample(alloc_objects, alloc_bytes, rate);
    let (io, ib) = scale_heap_sample(alloc_objects - free_objects, alloc_bytes - free_bytes, rate);
    let (ro, rb) = scale_heap_sample(recent_objects, recent_bytes, rate);
    [ao, ab, io, ib, ro, rb]
}

/// A heap `Sample`'s values and its `bytes` label (the average object size), after its
/// location ids: what `writeHeapProto` writes for one record of these figures.
pub(super) fn write_heap_values(
    figures: &Figures,
    values: &Values,
    bytes_key: i64,
    body: &mut Vec<u8>,
) {
    prost::encoding::int64::encode_packed(2, values, body);
    let [alloc_objects, alloc_bytes, ..] = *figures;
    let block = if alloc_objects > 0 {
        alloc_bytes / alloc_objects
    } else {
        0
    };
    if block != 0 {
        let label = pb::Label {
            key: bytes_key,
            str: 0,
            num: block,
            num_unit: 0,
        };
        prost::encoding::message::encode(3, &label, body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_matches_scale_heap_sample() {
        assert_eq!(scale_heap_sample(0, 100, 512 * 1024), (0, 0));
        assert_eq!(scale_heap_sample(3, 0, 512 * 1024), (0, 0));
        assert_eq!(
            scale_heap_sample(3, 300, 1),
            (3, 300),
            "rate 1: every sample kept"
        );
        // One 1 KiB object at the default rate stands for about 512 of them.
        let (n, s) = scale_heap_sample(1, 1024, 512 * 1024);
        assert_eq!((n, s), (512, 524_800));
        // Large objects are nearly always sampled.
        assert_eq!(scale_heap_sample(2, 64 << 20, 512 * 1024), (2, 64 << 20));
        // In-use may be negative in flight; the formula is applied as is.
        assert_eq!(scale_heap_sample(-1, -4096, 4096).0, -1);
    }

    #[test]
    fn leading_runtime_frames_are_hidden_unless_all_are() {
        let runtime = |pc: u64| pc < 10;
        assert_eq!(
            hide_leading_runtime(&[1, 2, 30, 4, 50], runtime),
            &[30, 4, 50]
        );
        assert_eq!(hide_leading_runtime(&[30, 1], runtime), &[30, 1]);
        assert_eq!(hide_leading_runtime(&[1, 2], runtime), &[1, 2]);
        assert_eq!(hide_leading_runtime(&[], runtime), &[] as &[u64]);
    }
}
