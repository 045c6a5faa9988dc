//! Profile.sample decoded by hand, straight into the model's pools: a heap profile is mostly
//! samples, and each stack entry's location id becomes a `LocId` in the same loop that reads
//! its varint. A sample that names a location not seen yet (legal, if not what Go writes) gets
//! a placeholder, resolved once every location is known.

use std::collections::HashMap;

use super::DecodeError;
use super::builder::Builder;
use super::wire::{self, LEN, VARINT, Wire, bad};
use crate::model::{Label, LabelValue, LocId, Sample, StrId};

/// Placeholders for locations not seen yet count down from here: `LocId(FORWARD_FIRST - k)`
/// stands for the k-th such id. Real positions stay below the lowest placeholder.
pub(super) const FORWARD_FIRST: u32 = u32::MAX;

/// A location id (any nonzero u64) to the location's position, as locations arrive.
pub(super) enum LocationIndex {
    /// Indexed by id; `u32::MAX` where no location has the id. Used while ids stay small,
    /// as Go's (1, 2, 3, …) do.
    Dense(Vec<u32>),
    Sparse(HashMap<u64, u32>),
}

impl Default for LocationIndex {
    fn default() -> Self {
        LocationIndex::Dense(Vec::new())
    }
}

impl LocationIndex {
    /// Adds `id`; false if it is taken already.
    pub(super) fn insert(&mut self, id: u64, position: u32) -> bool {
        if let LocationIndex::Dense(table) = self {
            // Dense while the table stays within a few entries per location.
            let limit = (u64::from(position) + 1).saturating_mul(4) + 64;
            if id <= limit {
                let id = id as usize;
                if table.len() <= id {
                    table.resize(id + 1, u32::MAX);
                }
                return std::mem::replace(&mut table[id], position) == u32::MAX;
            }
            let sparse = table
                .iter()
                .enumerate()
                .filter(|&(_, &p)| p != u32::MAX)
                .map(|(id, &p)| (id as u64, p))
                .collect();
            *self = LocationIndex::Sparse(sparse);
        }
        match self {
            LocationIndex::Sparse(map) => map.insert(id, position).is_none(),
            LocationIndex::Dense(_) => unreachable!("made sparse above"),
        }
    }

    #[inline]
    pub(super) fn get(&self, id: u64) -> Option<u32> {
        match self {
            LocationIndex::Dense(table) => table
                .get(usize::try_from(id).ok()?)
                .copied()
                .filter(|&p| p != u32::MAX),
            LocationIndex::Sparse(map) => map.get(&id).copied(),
        }
    }
}

/// The location ids samples named before any location had them, each with its placeholder.
#[derive(Default)]
pub(super) struct ForwardLocations {
    pub ids: Vec<u64>,
    slots: HashMap<u64, u32>,
}

impl ForwardLocations {
    pub(super) fn len(&self) -> u32 {
        self.ids.len() as u32
    }

    fn placeholder(&mut self, id: u64, locations: usize) -> Result<LocId, DecodeError> {
        let next = self.len();
        let k = *self.slots.entry(id).or_insert(next);
        if k == next {
            if locations as u64 + u64::from(next) + 1 >= u64::from(FORWARD_FIRST) {
                return Err(DecodeError::Invalid(
                    "the profile has too many locations".into(),
                ));
            }
            self.ids.push(id);
        }
        Ok(LocId(FORWARD_FIRST - k))
    }
}

/// Label string indices cannot be checked before the string table, which comes last. Those
/// that fit a `StrId` are kept as they are and their maximum tracked; one that does not is
/// kept as `u32::MAX` (never a valid index) and the first such is remembered for its message.
#[derive(Default)]
pub(super) struct LabelStrings {
    pub max: u32,
    /// (label position, which of key/str/unit, the index as given).
    pub first_unfit: Option<(usize, LabelPart, i64)>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum LabelPart {
    Key,
    Str,
    Unit,
}

impl LabelStrings {
    #[inline]
    fn keep(&mut self, index: i64, position: usize, part: LabelPart) -> StrId {
        match u32::try_from(index) {
            Ok(i) => {
                self.max = self.max.max(i);
                StrId(i)
            }
            Err(_) => {
                self.max = u32::MAX;
                self.first_unfit.get_or_insert((position, part, index));
                StrId(u32::MAX)
            }
        }
    }
}

/// Decodes the packed ids into `out` (at least one slot per byte), each through `position`
/// (`u32::MAX` for an id with no location yet): how many, and whether any was unknown. Kept
/// apart from the pools so the loop's slices stay in registers.
#[inline(always)]
fn map_ids(
    mut ids: &[u8],
    out: &mut [LocId],
    position: impl Fn(u64) -> u32,
) -> Result<(usize, bool), DecodeError> {
    let mut count = 0;
    let mut unknown = false;
    for slot in out.iter_mut() {
        if ids.is_empty() {
            break;
        }
        let p = position(next_varint(&mut ids)?);
        unknown |= p == u32::MAX;
        *slot = LocId(p);
        count += 1;
    }
    Ok((count, unknown))
}

/// The varint at the front of `rest`, which then starts after it.
#[inline(always)]
pub(super) fn next_varint(rest: &mut &[u8]) -> Result<u64, DecodeError> {
    let bytes: &[u8] = rest;
    match bytes {
        [b, tail @ ..] if *b < 0x80 => {
            *rest = tail;
            return Ok(u64::from(*b));
        }
        [b0, b1, tail @ ..] if *b1 < 0x80 => {
            *rest = tail;
            return Ok(u64::from(b0 & 0x7f) | u64::from(*b1) << 7);
        }
        _ => {}
    }
    let (value, len) = wire::long_varint(rest)?;
    *rest = &rest[len..];
    Ok(value)
}

/// Whether every sample has one value per sample type, decided at the end (the sample types
/// may, in principle, come after the samples): it is enough to know the first sample's count
/// and the first sample whose count differs from it.
#[derive(Default)]
pub(super) struct ValueCounts {
    pub first: Option<usize>,
    /// (sample number, its count)
    pub first_other: Option<(usize, usize)>,
}

impl Builder {
    /// Decodes one sample into the pools. A sample the wire format breaks in is recorded, not
    /// returned: an error of the header, found later in the stream, is reported before it.
    pub(super) fn sample(&mut self, body: &[u8]) {
        if self.samples_stopped {
            return;
        }
        let number = self.samples.len();
        if let Some(fold) = &mut self.fold {
            fold.begin_sample();
        }
        let (stack_start, values_start, labels_start) =
            (self.stacks.len(), self.values.len(), self.labels.len());
        let decoded = self.sample_fields(body);
        let count = self.values.len() - values_start;
        let refused = match decoded {
            Err(e) => {
                self.sample_fault = Some((number, e));
                true
            }
            Ok(()) => match self.value_counts.first {
                None => {
                    self.value_counts.first = Some(count);
                    false
                }
                Some(first) if first != count => {
                    self.value_counts.first_other = Some((number, count));
                    true
                }
                Some(_) => false,
            },
        };
        let pools_fit =
            u32::try_from(self.stacks.len()).is_ok() && u32::try_from(self.labels.len()).is_ok();
        if refused || !pools_fit {
            if !refused {
                self.sample_fault = Some((
                    number,
                    DecodeError::Invalid("the samples have more than 2^32 stack entries".into()),
                ));
            }
            self.stacks.truncate(stack_start);
            self.values.truncate(values_start);
            self.labels.truncate(labels_start);
            if matches!(self.label_strings.first_unfit, Some((p, _, _)) if p >= labels_start) {
                self.label_strings.first_unfit = None;
            }
            self.samples_stopped = true;
            return;
        }
        self.samples.push(Sample {
            stack_start: stack_start as u32,
            stack_len: (self.stacks.len() - stack_start) as u32,
            labels_start: labels_start as u32,
            labels_len: (self.labels.len() - labels_start) as u32,
        });
        if let Some(fold) = &mut self.fold {
            fold.end_sample(&self.values[values_start..]);
            // Folded, the values and labels are not kept either: the fold checks the values'
            // magnitude itself, and a label naming a string past the table is left to the
            // full model (see `decode::fold_from`).
            self.values.truncate(values_start);
            self.labels.truncate(labels_start);
        }
    }

    fn sample_fields(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        let mut w = Wire::new(body);
        while !w.at_end() {
            match w.tag()? {
                (1, LEN) => match &mut self.fold {
                    Some(fold) => fold.stack(w.bytes()?)?,
                    None => self.stack(w.bytes()?)?,
                },
                (1, VARINT) if self.fold.is_some() => {
                    let id = w.varint()?;
                    if let Some(fold) = &mut self.fold {
                        fold.id(id);
                    }
                }
                (1, VARINT) => {
                    let id = w.varint()?;
                    let position = match self.location_index.get(id) {
                        Some(p) => LocId(p),
                        None => self.forward.placeholder(id, self.locations.len())?,
                    };
                    self.stacks.push(position);
                }
                (2, LEN) => {
                    let mut packed = w.bytes()?;
                    self.values.reserve(packed.len());
                    while !packed.is_empty() {
                        self.values.push(next_varint(&mut packed)? as i64);
                    }
                }
                (2, VARINT) => self.values.push(w.varint()? as i64),
                (3, LEN) => self.label(w.bytes()?)?,
                (1..=3, _) => return Err(bad("invalid wire type")),
                (_, wire) => w.skip(wire)?,
            }
        }
        Ok(())
    }

    /// A packed run of location ids, each looked up as it is read.
    #[inline]
    fn stack(&mut self, ids: &[u8]) -> Result<(), DecodeError> {
        let start = self.stacks.len();
        // Each id takes at least a byte: room for all of them, cut to size after.
        self.stacks.extend(std::iter::repeat_n(LocId(0), ids.len()));
        let out = &mut self.stacks[start..];
        let (count, unknown) = match &self.location_index {
            LocationIndex::Dense(table) => {
                // A slice by value: its pointer and length stay in registers through the loop
                // instead of being read again from the Vec after every store into `out`.
                let table: &[u32] = table;
                map_ids(ids, out, move |id| {
                    table.get(id as usize).copied().unwrap_or(u32::MAX)
                })?
            }
            LocationIndex::Sparse(map) => map_ids(ids, out, move |id| {
                map.get(&id).copied().unwrap_or(u32::MAX)
            })?,
        };
        self.stacks.truncate(start + count);
        if unknown {
            // Rare: read the ids again to give the unknown ones placeholders.
            let mut k = start;
            let mut placeholders = Ok(());
            wire::packed(ids, |id| {
                if placeholders.is_ok() && self.stacks[k].0 == u32::MAX {
                    match self.forward.placeholder(id, self.locations.len()) {
                        Ok(p) => self.stacks[k] = p,
                        Err(e) => placeholders = Err(e),
                    }
                }
                k += 1;
            })?;
            placeholders?;
        }
        Ok(())
    }

    fn label(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        let (mut key, mut str, mut num, mut unit) = (0, 0, 0, 0);
        let mut l = Wire::new(body);
        while !l.at_end() {
            match l.tag()? {
                (1, wire) => key = l.scalar(wire)? as i64,
                (2, wire) => str = l.scalar(wire)? as i64,
                (3, wire) => num = l.scalar(wire)? as i64,
                (4, wire) => unit = l.scalar(wire)? as i64,
                (_, wire) => l.skip(wire)?,
            }
        }
        let position = self.labels.len();
        let strings = &mut self.label_strings;
        let key = strings.keep(key, position, LabelPart::Key);
        let value = if str != 0 {
            LabelValue::Str(strings.keep(str, position, LabelPart::Str))
        } else {
            LabelValue::Num {
                value: num,
                unit: strings.keep(unit, position, LabelPart::Unit),
            }
        };
        self.labels.push(Label { key, value });
        Ok(())
    }
}
