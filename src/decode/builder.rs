//! One pass over a profile's top-level fields as they stream in. Go's runtime/pprof writes the
//! sample types first, then each sample after the locations and functions it first uses, and
//! the mappings and the string table last. So locations and samples go straight into the
//! model's pools as they arrive, while every string index and every reference to a mapping or
//! function waits for [`super::validate::finish`], which checks them in a fixed order.

use prost::Message;

use super::input::Input;
use super::wire::{LEN, VARINT, Wire, bad};
use super::{DecodeError, pb};
use crate::model::{Frame, Label, LocId, Location, Sample};

/// The longest tag (5 bytes) and length (10 bytes) of a top-level field.
const FIELD_HEAD: usize = 15;

/// A profile as decoded so far, with its references not checked yet.
#[derive(Default)]
pub(super) struct Builder {
    // The header, with string indices as the message spells them.
    pub sample_types: Vec<pb::ValueType>,
    pub period_type: Option<pb::ValueType>,
    pub default_sample_type: i64,
    pub period: i64,
    pub time_nanos: i64,
    pub duration_nanos: i64,
    pub comments: Vec<i64>,
    pub drop_frames: i64,
    pub keep_frames: i64,
    pub strings: Vec<String>,
    pub mappings: Vec<pb::Mapping>,
    pub functions: Vec<pb::Function>,

    // Locations in the model's form, and the ids they are known by and refer to.
    pub locations: Vec<Location>,
    pub location_ids: Vec<u64>,
    pub location_mapping_ids: Vec<u64>,
    pub frames: Vec<Frame>,
    /// Per frame, the function id of its line; None for the one frame of a location with no
    /// lines.
    pub frame_function_ids: Vec<Option<u64>>,
    pub location_index: super::samples::LocationIndex,
    /// The first location whose id is 0 or taken: reported after the header's errors.
    pub location_id_fault: Option<DecodeError>,

    // Samples, straight into the model's pools (see samples.rs).
    pub samples: Vec<Sample>,
    pub stacks: Vec<LocId>,
    pub values: Vec<i64>,
    pub labels: Vec<Label>,
    pub forward: super::samples::ForwardLocations,
    pub label_strings: super::samples::LabelStrings,
    pub value_counts: super::samples::ValueCounts,
    /// The first sample the wire format broke in, and how.
    pub sample_fault: Option<(usize, DecodeError)>,
    /// Set once a sample is known to be refused: later samples cannot change which error is
    /// reported, so they are framed but not decoded.
    pub samples_stopped: bool,
    /// For `top`: each stack folded into sites as it arrives, and not kept (see fold.rs).
    pub fold: Option<super::fold::Fold>,
}

/// Reads every top-level field of the input into a [`Builder`]. Errors in the framing or in a
/// field other than a sample stop at once; errors inside a sample are kept for
/// [`super::validate::finish`], which orders them after the header's.
/// With `fold`, stacks are folded into it and not kept.
pub(super) fn read(
    input: &mut impl Input,
    fold: Option<super::fold::Fold>,
) -> Result<Builder, DecodeError> {
    let mut b = Builder {
        fold,
        ..Builder::default()
    };
    loop {
        let window = input.fill(FIELD_HEAD)?;
        if window.is_empty() {
            return Ok(b);
        }
        let mut w = Wire::new(window);
        let (field, wire) = w.tag()?;
        if wire != LEN {
            match (field, wire) {
                (13, VARINT) => b.comments.push(w.varint()? as i64),
                (7..=10 | 12 | 14 | 15, VARINT) => b.header_scalar(field, w.varint()? as i64),
                (1..=15, _) => return Err(wrong_wire_type(field, wire)),
                (_, wire) => w.skip(wire)?,
            }
            let used = w.pos();
            input.consume(used);
            continue;
        }
        let len = w.length()?;
        let head = w.pos();
        let end = head
            .checked_add(len)
            .ok_or_else(|| bad("buffer underflow"))?;
        let window = input.fill(end)?;
        let Some(body) = window.get(head..end) else {
            return Err(bad("buffer underflow"));
        };
        b.field(field, body)?;
        input.consume(end);
    }
}

/// A known field of Profile with the wrong wire type, named as prost names it.
fn wrong_wire_type(field: u64, wire: u8) -> DecodeError {
    const NAMES: [&str; 16] = [
        "",
        "sample_type",
        "sample",
        "mapping",
        "location",
        "function",
        "string_table",
        "drop_frames",
        "keep_frames",
        "time_nanos",
        "duration_nanos",
        "period_type",
        "period",
        "comment",
        "default_sample_type",
        "doc_url",
    ];
    let name = NAMES.get(field as usize).copied().unwrap_or("?");
    DecodeError::Protobuf(format!("Profile.{name}: invalid wire type {wire}"))
}

fn prost_error(e: prost::DecodeError) -> DecodeError {
    DecodeError::Protobuf(e.to_string())
}

impl Builder {
    fn header_scalar(&mut self, field: u64, v: i64) {
        match field {
            7 => self.drop_frames = v,
            8 => self.keep_frames = v,
            9 => self.time_nanos = v,
            10 => self.duration_nanos = v,
            12 => self.period = v,
            14 => self.default_sample_type = v,
            _ => {} // 15, doc_url: not kept
        }
    }

    /// A length-delimited top-level field.
    fn field(&mut self, field: u64, body: &[u8]) -> Result<(), DecodeError> {
        match field {
            2 => self.sample(body),
            4 => self.location(body)?,
            1 => self
                .sample_types
                .push(pb::ValueType::decode(body).map_err(prost_error)?),
            3 => self
                .mappings
                .push(pb::Mapping::decode(body).map_err(prost_error)?),
            5 => self
                .functions
                .push(pb::Function::decode(body).map_err(prost_error)?),
            6 => {
                let text = std::str::from_utf8(body)
                    .map_err(|_| bad("invalid string value: data is not UTF-8 encoded"))?;
                self.strings.push(text.to_owned());
            }
            11 => self
                .period_type
                .get_or_insert_with(Default::default)
                .merge(body)
                .map_err(prost_error)?,
            13 => super::wire::packed(body, |v| self.comments.push(v as i64))?,
            7..=10 | 12 | 14 | 15 => return Err(wrong_wire_type(field, LEN)),
            _ => {}
        }
        Ok(())
    }

    /// A location, decoded into the model; its mapping and functions are looked up at the end
    /// (Go writes a location's new functions after it, and the mappings last).
    fn location(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        let frames_start = self.frames.len();
        let (mut id, mut mapping_id, mut address) = (0, 0, 0);
        let mut w = Wire::new(body);
        while !w.at_end() {
            match w.tag()? {
                (1, wire) => id = w.scalar(wire)?,
                (2, wire) => mapping_id = w.scalar(wire)?,
                (3, wire) => address = w.scalar(wire)?,
                (4, wire) => {
                    let mut line = Wire::new(w.message(wire)?);
                    let (mut function_id, mut number) = (0, 0);
                    while !line.at_end() {
                        match line.tag()? {
                            (1, wire) => function_id = line.scalar(wire)?,
                            (2, wire) => number = line.scalar(wire)? as i64,
                            (3, wire) => drop(line.scalar(wire)?), // column
                            (_, wire) => line.skip(wire)?,
                        }
                    }
                    self.frames.push(Frame {
                        function: None,
                        line: number,
                        address: 0,
                        inlined: true,
                    });
                    self.frame_function_ids.push(Some(function_id));
                }
                (5, wire) => drop(w.scalar(wire)?), // is_folded
                (_, wire) => w.skip(wire)?,
            }
        }
        // The address may come after the lines; every frame of a location carries it.
        let frames = &mut self.frames[frames_start..];
        for frame in frames.iter_mut() {
            frame.address = address;
        }
        if let Some(last) = frames.last_mut() {
            last.inlined = false;
        } else {
            self.frames.push(Frame {
                function: None,
                line: 0,
                address,
                inlined: false,
            });
            self.frame_function_ids.push(None);
        }
        let index = self.locations.len();
        let position = u32::try_from(index)
            .ok()
            .filter(|&i| i < super::samples::FORWARD_FIRST - self.forward.len())
            .ok_or_else(|| DecodeError::Invalid("the profile has too many locations".into()))?;
        let fault = if id == 0 {
            Some(format!("location #{index} has the reserved id 0"))
        } else if !self.location_index.insert(id, position) {
            Some(format!("location id {id} is used twice"))
        } else {
            None
        };
        if let Some(message) = fault {
            self.location_id_fault
                .get_or_insert(DecodeError::Invalid(message));
        }
        self.locations.push(Location {
            address,
            mapping: None,
            frames_start: frames_start as u32,
            frames_len: (self.frames.len() - frames_start) as u32,
        });
        self.location_ids.push(id);
        self.location_mapping_ids.push(mapping_id);
        if let Some(fold) = &mut self.fold {
            let frames = self.frames[frames_start..].iter().map(|f| f.line);
            let functions = self.frame_function_ids[frames_start..].iter().copied();
            fold.location(id, position, address, functions.zip(frames));
        }
        Ok(())
    }
}
