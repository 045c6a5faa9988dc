//! The profile model that every later stage shares: interned strings, functions, frames with
//! inlined calls already expanded, and samples that point into flat pools. Pure data, no I/O;
//! `decode` builds it, `analyse` and `render` read it.
//!
//! # Where types live
//!
//! The types that cross a stage boundary live in `src/model`, the bottom layer, which does no I/O
//! and imports nothing above it (only `crate::units`):
//!
//! | type | file | written by | read by |
//! |---|---|---|---|
//! | `Profile` and its pools, `BuildInfo` | `model/mod.rs`, `model/build.rs` | decode, sources | analyse, render |
//! | `CaptureRecord`, `RecordKind`: one manifest line (the field `cycle` is `incarnation` in the JSON, its first name) | `model/capture.rs` | collect, through the store | analyse, render, push, pipeline |
//! | `MemorySample`, `CgroupBreakdown`, `ProcessBreakdown`: one line of memory.jsonl | `model/memory.rs` | `source::procmem`, the sampler | analyse, render |
//! | `EnvoySnapshot`, `EnvoyMemory`, `EnvoyStats`, `HeapDumpState` | `model/envoy.rs` | `source::envoy` | analyse, render |
//! | `RunOptions`, `CpuLimit`, `PushSettings`: run.json's `options` | `model/run_options.rs` | collect, run, demo; push (`options.push`) | pipeline, check, render, push |
//! | `SCHEMA`: the version of every JSON document | `model/mod.rs` | — | store, analyse, render |
//!
//! `source::procmem`, `source::envoy` and `store` re-export the types they produce, so code that
//! reads a run through the store keeps its paths. `RunOptions` keeps every field optional: a field
//! of the wrong type reads as absent and an unknown field is kept on rewrite, so a run.json of any
//! version stays readable; `CpuLimit::cores` is the one reading of `cpu_limit` (cores, or a
//! quantity such as `"500m"`).
//!
//! Which layer may import which (an arrow is "may import"):
//!
//! - `model`, `units` → nothing above them.
//! - `decode` → `model`.
//! - `analyse` → `model`, `decode`, `units`; never `source`, `store` or `render`. It returns
//!   figures; the sentences people read are made by `render` from finished results
//!   (`render::verdict` and `render::memory` word a growth report, `render::compare` a comparison,
//!   `render::envoy_words` an Envoy report, `render::triage_words` a triage, `render::ends` how a
//!   cycle ended), where an output needs them; JSON gets them through `render::worded`.
//! - `render` → `analyse`, `model`, `store` (run.json for the facts of a report), `units`; never
//!   `source`.
//! - `source`, `store` → `model`, `decode`; `index` → those and `analyse::reduce` (the site
//!   figures it keeps); `collect`, `launch` and `push` → any of these.
//! - `pipeline` (reading a run for the commands; `pipeline::scan` reads its captures) → `store`,
//!   `index`, `analyse`, and render's input types (`render::flame_titles::FlameTitle`,
//!   `render::report::flames::ReportFlame`, the report's model); it draws and words nothing.
//! - `cli` → anything; it turns flags into configuration and calls the library.
//!
//! The report's HTML is written with `html!`, `htmlln!` and `markup!` (`render/report/markup.rs`):
//! they format like `write!`, but every argument is escaped unless it is a `Markup` (built by those
//! macros, a literal, an SVG another writer drew, or JSON for a data block from `Markup::json`),
//! so no text reaches a page unescaped by forgetting a call. Flamegraph SVG is inferno's; `render::flame` changes only the tooltips of a
//! differential graph (both sides and the change, where inferno gives the drawn width), by reading
//! inferno's SVG back as XML events with **quick-xml** and writing every event back unchanged but
//! those tooltips' text; its "nothing to draw" SVG is written by quick-xml's writer, which escapes
//! every text. quick-xml is the XML crate inferno itself writes with, already in the lock file at
//! the same version; a string search over the SVG (what was here before) would have to know how
//! inferno escapes and where a tag ends. The report inlines each flamegraph into its page the same way
//! (`render::report::inline::inline_svg`): read as events, the prolog and every `<script>` dropped
//! whole, `on…` attributes dropped, ids and references to them prefixed, `<style>` rules scoped to
//! the graph; an SVG that cannot be read whole is inlined as an empty one.
//!
//! A boot cycle is `cycle` in every Rust name (`BootCycle` for the replay's timeline); `incarnation`
//! survives only as the manifest's JSON field and in the collector's own status types.
//!
//! The layering test (`src/layering.rs`, the floors in docs/architecture.md) holds the first two
//! rules.

pub mod aggregate;
pub mod build;
pub mod capture;
pub mod envoy;
pub mod failure;
pub mod memory;
pub mod run_options;

/// Version of the JSON documents heapwatch writes (run.json and every report). Bumped when a
/// field changes meaning.
pub const SCHEMA: u32 = 1;

use std::fmt;

/// Index into a profile's string table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StrId(pub u32);

/// Index into [`Profile::functions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FuncId(pub u32);

/// Index into [`Profile::locations`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocId(pub u32);

/// The string table. Index 0 is always the empty string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StringTable {
    strings: Vec<Box<str>>,
}

impl StringTable {
    pub fn from_vec(strings: Vec<String>) -> Self {
        StringTable {
            strings: strings.into_iter().map(String::into_boxed_str).collect(),
        }
    }

    pub fn get(&self, id: StrId) -> &str {
        self.strings.get(id.0 as usize).map_or("", |s| s)
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.strings.iter().map(|s| &**s)
    }
}

/// What one of a sample's values measures, e.g. `inuse_space` in `bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueType {
    pub kind: StrId,
    pub unit: StrId,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: StrId,
    pub system_name: StrId,
    pub file: StrId,
    pub start_line: i64,
}

/// One frame of a call stack: a function at a line. A location holding inlined calls expands
/// into several frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    /// `None` for an unsymbolized location (no line information).
    pub function: Option<FuncId>,
    pub line: i64,
    pub address: u64,
    /// True when this frame was inlined into the frame that follows it (its caller).
    pub inlined: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
    pub file: StrId,
    pub build_id: StrId,
}

/// A program location: the frames it expands to, leaf first, live in `Profile::frames`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Location {
    pub address: u64,
    pub mapping: Option<u32>,
    pub frames_start: u32,
    pub frames_len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LabelValue {
    Str(StrId),
    Num { value: i64, unit: StrId },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Label {
    pub key: StrId,
    pub value: LabelValue,
}

/// One sample: its stack (locations, leaf first) and labels live in the profile's pools, its
/// values in `Profile::values`, one per sample type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub stack_start: u32,
    pub stack_len: u32,
    pub labels_start: u32,
    pub labels_len: u32,
}

/// A decoded, validated profile. Every index in it is known to be in range.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Profile {
    pub strings: StringTable,
    pub sample_types: Vec<ValueType>,
    pub default_sample_type: Option<StrId>,
    pub period_type: Option<ValueType>,
    pub period: i64,
    pub time_nanos: i64,
    pub duration_nanos: i64,
    pub comments: Vec<StrId>,
    pub drop_frames: StrId,
    pub keep_frames: StrId,
    pub functions: Vec<Function>,
    pub mappings: Vec<Mapping>,
    pub locations: Vec<Location>,
    pub frames: Vec<Frame>,
    pub samples: Vec<Sample>,
    /// Location indices of every sample's stack, concatenated.
    pub stacks: Vec<LocId>,
    /// `samples.len() * sample_types.len()` values, sample by sample.
    pub values: Vec<i64>,
    pub labels: Vec<Label>,
}

impl Profile {
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id)
    }

    pub fn sample_type_name(&self, index: usize) -> &str {
        self.sample_types
            .get(index)
            .map_or("", |t| self.str(t.kind))
    }

    pub fn sample_type_unit(&self, index: usize) -> &str {
        self.sample_types
            .get(index)
            .map_or("", |t| self.str(t.unit))
    }

    /// The sample type pprof shows when none is asked for: the profile's default if it names
    /// one of its types, else the last one.
    pub fn default_sample_index(&self) -> usize {
        if let Some(id) = self.default_sample_type {
            let wanted = self.str(id);
            if let Some(i) =
                (0..self.sample_types.len()).find(|&i| self.sample_type_name(i) == wanted)
            {
                return i;
            }
        }
        self.sample_types.len().saturating_sub(1)
    }

    /// Finds a sample type by name (`inuse_space`) or by position (`2`).
    pub fn find_sample_type(&self, wanted: &str) -> Option<usize> {
        (0..self.sample_types.len())
            .find(|&i| self.sample_type_name(i) == wanted)
            .or_else(|| {
                wanted
                    .parse::<usize>()
                    .ok()
                    .filter(|&i| i < self.sample_types.len())
            })
    }

    pub fn sample_values(&self, sample: usize) -> &[i64] {
        let n = self.sample_types.len();
        &self.values[sample * n..(sample + 1) * n]
    }

    pub fn sample_stack(&self, sample: &Sample) -> &[LocId] {
        let start = sample.stack_start as usize;
        &self.stacks[start..start + sample.stack_len as usize]
    }

    pub fn sample_labels(&self, sample: &Sample) -> &[Label] {
        let start = sample.labels_start as usize;
        &self.labels[start..start + sample.labels_len as usize]
    }

    pub fn location_frames(&self, loc: LocId) -> &[Frame] {
        let l = &self.locations[loc.0 as usize];
        let start = l.frames_start as usize;
        &self.frames[start..start + l.frames_len as usize]
    }

    /// The frames of a sample's stack, leaf first, inlined calls expanded.
    pub fn stack_frames<'a>(&'a self, sample: &Sample) -> impl Iterator<Item = &'a Frame> + 'a {
        self.sample_stack(sample)
            .iter()
            .flat_map(move |&loc| self.location_frames(loc))
    }

    pub fn function(&self, id: FuncId) -> &Function {
        &self.functions[id.0 as usize]
    }

    /// The name pprof shows for a frame: the function name, or the address when unsymbolized.
    pub fn frame_name(&self, frame: &Frame) -> FrameName<'_> {
        match frame.function {
            Some(f) => FrameName::Function(self.str(self.function(f).name)),
            None => FrameName::Address(frame.address),
        }
    }

    pub fn frame_file(&self, frame: &Frame) -> &str {
        frame
            .function
            .map_or("", |f| self.str(self.function(f).file))
    }

    /// Sum of one sample type over all samples.
    pub fn total(&self, sample_index: usize) -> i64 {
        let n = self.sample_types.len();
        if sample_index >= n {
            return 0;
        }
        self.values.iter().skip(sample_index).step_by(n).sum()
    }

    /// Totals of every sample type, in order.
    pub fn totals(&self) -> Vec<i64> {
        let n = self.sample_types.len();
        let mut totals = vec![0i64; n];
        for chunk in self.values.chunks_exact(n.max(1)) {
            for (t, v) in totals.iter_mut().zip(chunk) {
                *t = t.wrapping_add(*v);
            }
        }
        totals
    }
}

/// How a frame is named when it is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameName<'a> {
    Function(&'a str),
    Address(u64),
}

impl fmt::Display for FrameName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameName::Function(name) => f.write_str(name),
            FrameName::Address(addr) => write!(f, "{addr:016x}"),
        }
    }
}
