//! Bytes to [`Profile`]: gunzip (when the bytes start with the gzip magic) under a ceiling on
//! the decompressed size, streamed into the protobuf decoder a window at a time, then a strict
//! check of every reference so the rest of heapwatch can index without fear. No I/O: callers
//! read files and add the file name.
//!
//! # `top` at the speed of gunzip (`src/decode/input.rs`, `src/decode/fold.rs`)
//!
//! **A gunzip thread.** `decode::decode` (and `decode_sites`) gunzips a gzipped profile of
//! 128 KiB or more on a thread of its own when the process may use a second core
//! (`available_parallelism`, asked once). The thread fills 64 KiB chunks and sends them through a
//! `sync_channel` of 4; the decoder copies each into the same sliding window it always read from
//! (`input::Window`, now generic over where its bytes come from), and hands the emptied chunk back
//! for reuse. Wall time is then about the longer of gunzip and decoding instead of their sum, and
//! at most ~6 chunks are ever alive, so the decompressed profile is still never whole in memory.
//! Every check of the gunzip stays in one place (`input::Gunzipper`: the `--max-decompressed`
//! ceiling, truncation, checksum, data after the member), run on whichever thread gunzips. Neither
//! side can leave the other blocked: the thread ends at the end of the stream or at its first
//! error, which it sends as its last message; when the decoder returns (done, or failed), it drops
//! the receiver inside the `thread::scope`, so the thread's next `send` fails and it ends. A failed
//! decode still drains the stream first, so a gzip error further on wins over the protobuf error
//! its garbage caused, as before. Small profiles (the collector's, most captures of a run) and
//! one-core machines gunzip on the decoding thread (`decode_on_one_thread`, the same result).
//! Tests: `decode::tests::the_gunzip_thread_*` (every fixture and a 2 MiB profile give the same
//! `Profile` on both paths; truncated, bomb, bad checksum, trailing data and garbage protobuf give
//! the same error) and `a_decoder_that_stops_early_does_not_leave_the_gunzip_thread_blocked`.
//!
//! **Stacks folded as they arrive.** `top` shows only sites, so it calls
//! `decode::decode_sites(bytes, limits, granularity)`, which folds each sample's stack into flat
//! and cum per site while the sample is decoded and keeps no stack, value or label: for a heap
//! profile those are almost all of the model (17 MB of `LocId`s, 8 MB of values and labels for the
//! 150k-stack bench profile), and the pass `aggregate::sites` made over them. The fold
//! (`decode::fold::Fold`) works on keys known before the string table (which Go writes last):
//! the function's id (and the line at `--granularity line`; the address for an unsymbolized
//! frame), which is `aggregate`'s key with the function's id in place of its position. A location
//! id maps straight to its frame's key (`key_by_id`, dense), so a stack entry is one varint, one
//! lookup and a branch-free "seen in this sample" stamp; values are added per distinct key once
//! the sample ends, for up to 4 sample types at once (one lane each). Once the string table is
//! in, each key is named with `aggregate::site_name` and the tables sorted as `sites` sorts.
//!
//! **Field order.** The fold needs each location before the first sample naming it, which is how
//! Go's `runtime/pprof` writes (functions may come after their location: only ids are needed
//! then; mappings and strings last are fine). Any other order is handled by not folding: a
//! sample naming a location not seen yet, location ids too sparse for the dense table, an id
//! used twice, two keys whose names are equal (a stack through both must count once in cum, as
//! the model would), more than 4 sample types, or any error at all
//! make `decode_sites` decode the whole model with `decode` and use `aggregate::sites`, so its
//! tables and every error message are exactly theirs. What the fold does not keep is still
//! checked: it sums |value| per type (the model's overflow check), and a label naming a string
//! past the table sends it to the full decode for the message. At `--granularity file` the fold is
//! not tried: a file holds several functions, so keys sharing a name are the rule there, and
//! they show only once the strings are in, after a whole first decode. The full decoder itself
//! still takes fields in any order (placeholders for locations named early, as before). Tests:
//! `decode::fold::tests` (every fixture at every granularity and sample type, gzipped and not,
//! against `aggregate::sites` of the whole model; prost's order, samples first, is not folded and
//! gives the same tables; two functions of one name; overflow and a bad label string give
//! `decode`'s error; truncations, bit flips and a small ceiling give `decode`'s error).
//!
//! The index builder (`src/index/`) decodes each capture whole with `decode` (with the gunzip
//! thread for captures of 128 KiB or more), not with the fold, though the fold has what an index
//! entry holds per leaf function and sample type. `growth`, `check` and the flamegraphs use
//! `decode` too.

mod builder;
mod error;
mod fold;
mod input;
mod samples;
pub mod stackdump;
mod summary;
mod validate;
mod wire;

/// A profile of `testdata/profiles/` (real captures of the Go programs under `testdata/go/`),
/// decoded, for the tests of the modules that read profiles.
#[cfg(test)]
pub(crate) fn testdata_profile(name: &str) -> Profile {
    let path = format!("{}/testdata/profiles/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    decode(&bytes, &DecodeLimits::default()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub use error::DecodeError;
pub use summary::{Summarizer, Summary, summarize};

use prost::Message;

use crate::model::Profile;
use crate::model::aggregate::{self, Granularity, SiteTable};

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

/// Decodes a pprof profile, gzipped or not, and checks every reference in it. A gzipped
/// profile is gunzipped as it is decoded, never whole in memory; a large one on a thread of
/// its own while this one decodes, where a second core is there to run it.
pub fn decode(bytes: &[u8], limits: &DecodeLimits) -> Result<Profile, DecodeError> {
    if is_gzip(bytes) && bytes.len() >= GUNZIP_THREAD_MIN && second_core() {
        let piped = input::with_gunzip_thread(bytes, limits.max_decompressed, decode_from);
        if let Some(decoded) = piped {
            return decoded;
        }
    }
    decode_on_one_thread(bytes, limits)
}

/// What [`decode`] does without a gunzip thread: the same result, gunzip and decode taking
/// turns on one core.
pub fn decode_on_one_thread(bytes: &[u8], limits: &DecodeLimits) -> Result<Profile, DecodeError> {
    if is_gzip(bytes) {
        decode_from(&mut input::Gunzip::new(bytes, limits.max_decompressed))
    } else {
        decode_protobuf(&decompress(bytes, limits)?)
    }
}

/// A profile's header with its site tables: what `top` needs, without the stacks.
pub struct ProfileSites {
    /// The profile without its samples when they were folded on the way in; the whole
    /// profile when they could not be (see [`decode_sites`]).
    pub profile: Profile,
    granularity: Granularity,
    /// One per sample type, when folded.
    folded: Option<Vec<SiteTable>>,
}

impl ProfileSites {
    /// The sites of one sample type: `aggregate::sites` of the whole profile.
    pub fn sites(&self, sample_index: usize) -> SiteTable {
        match &self.folded {
            Some(tables) => tables.get(sample_index).cloned().unwrap_or(SiteTable {
                total: 0,
                sites: Vec::new(),
            }),
            None => aggregate::sites(&self.profile, sample_index, self.granularity),
        }
    }
}

/// Decodes a profile as [`decode`] does, folding each stack into the sites of every sample
/// type as it arrives instead of keeping it: for a heap profile that is most of the model's
/// memory, and the pass over it. A profile in an order the fold cannot follow (a sample
/// before its locations) or whose sites it cannot tell apart is decoded whole instead, as is
/// a broken one, so the tables and every error are those of [`decode`] and
/// [`aggregate::sites`].
pub fn decode_sites(
    bytes: &[u8],
    limits: &DecodeLimits,
    granularity: Granularity,
) -> Result<ProfileSites, DecodeError> {
    // Files nearly always hold several functions, whose keys then share a name: the fold
    // would only find that at the end, and the profile be decoded twice.
    let folded = if granularity == Granularity::File {
        Ok(None)
    } else if is_gzip(bytes) {
        let max = limits.max_decompressed;
        let piped = (bytes.len() >= GUNZIP_THREAD_MIN && second_core())
            .then(|| input::with_gunzip_thread(bytes, max, |i| fold_from(i, granularity)))
            .flatten();
        piped.unwrap_or_else(|| fold_from(&mut input::Gunzip::new(bytes, max), granularity))
    } else {
        match decompress(bytes, limits) {
            Ok(raw) => fold_from(&mut &raw[..], granularity),
            Err(e) => Err(e),
        }
    };
    if let Ok(Some(sites)) = folded {
        return Ok(sites);
    }
    Ok(ProfileSites {
        profile: decode(bytes, limits)?,
        granularity,
        folded: None,
    })
}

fn fold_from(
    input: &mut impl input::Input,
    granularity: Granularity,
) -> Result<Option<ProfileSites>, DecodeError> {
    let mut b = builder::read(input, Some(fold::Fold::new(granularity)))?;
    if b.label_strings.max as usize >= b.strings.len() {
        // A label names a string past the table: an error, whose message needs the labels
        // the fold did not keep.
        return Ok(None);
    }
    let fold = b.fold.take();
    let mut profile = validate::finish(b)?;
    let Some(folded) = fold.and_then(|f| f.tables(&profile)) else {
        return Ok(None);
    };
    // The samples' stacks were not kept: none of them is left to misread.
    profile.samples = Vec::new();
    profile.stacks = Vec::new();
    profile.values = Vec::new();
    profile.labels = Vec::new();
    Ok(Some(ProfileSites {
        profile,
        granularity,
        folded: Some(folded),
    }))
}

/// Gzipped profiles smaller than this are gunzipped on the decoding thread: starting a thread
/// and passing chunks would cost more than it overlaps.
const GUNZIP_THREAD_MIN: usize = 128 << 10;

/// Whether this process may run on more than one core (asked once: it reads the cgroup's
/// CPU quota).
fn second_core() -> bool {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())) > 1
}

/// Decodes and checks an already decompressed profile.
pub fn decode_protobuf(raw: &[u8]) -> Result<Profile, DecodeError> {
    decode_from(&mut { raw })
}

fn decode_from(input: &mut impl input::Input) -> Result<Profile, DecodeError> {
    match builder::read(input, None) {
        Ok(profile) => validate::finish(profile),
        Err(e) => {
            // A gzip stream broken further on is reported as such, not as the protobuf error
            // its garbage caused.
            input.drain()?;
            Err(e)
        }
    }
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
    input::gunzip_all(bytes, max)
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
    use crate::model::LocId;

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

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/testdata/profiles/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn gzip_bytes(raw: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(raw).unwrap();
        enc.finish().unwrap()
    }

    /// A profile of one sample type, one function, `locations` (id, function id) and samples
    /// naming `stacks`, in prost's field order: the samples come before the locations.
    fn message(locations: &[(u64, u64)], stacks: &[&[u64]]) -> pb::Profile {
        pb::Profile {
            sample_type: vec![pb::ValueType { r#type: 1, unit: 2 }],
            sample: stacks
                .iter()
                .map(|ids| pb::Sample {
                    location_id: ids.to_vec(),
                    value: vec![1],
                    label: vec![],
                })
                .collect(),
            location: locations
                .iter()
                .map(|&(id, function_id)| pb::Location {
                    id,
                    line: vec![pb::Line {
                        function_id,
                        line: 1,
                        column: 0,
                    }],
                    ..Default::default()
                })
                .collect(),
            function: vec![pb::Function {
                id: 1,
                name: 3,
                ..Default::default()
            }],
            string_table: ["", "space", "bytes", "main.f"].map(String::from).to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn streaming_the_gzip_gives_the_model_of_the_whole_buffer() {
        // The profile spans many of the gunzip windows, and its fields cross their edges.
        let big = many_chunks();
        let whole = decode_protobuf(&big).unwrap();
        assert!(whole.samples.len() > 10_000, "{}", whole.samples.len());
        let limits = DecodeLimits::default();
        assert_eq!(decode(&gzip_bytes(&big), &limits).unwrap(), whole);
    }

    #[test]
    fn samples_before_their_locations_decode_to_the_same_model() {
        // Go writes each location before the first sample that uses it; prost writes every
        // sample first. The model must not depend on the order.
        let gz = fixture("controller-2.1.0-heap.pb.gz");
        let go_order = decode(&gz, &DecodeLimits::default()).unwrap();
        let raw = gunzip(&gz, DEFAULT_MAX_DECOMPRESSED).unwrap();
        let prost_order = decode_message(&raw).unwrap().encode_to_vec();
        let first_location = prost_order.iter().position(|&b| b == 4 << 3 | 2);
        let first_sample = prost_order.iter().position(|&b| b == 2 << 3 | 2);
        assert!(first_sample < first_location, "samples come first");
        assert_eq!(decode_protobuf(&prost_order).unwrap(), go_order);
        assert_eq!(
            decode(&gzip_bytes(&prost_order), &DecodeLimits::default()).unwrap(),
            go_order
        );
    }

    #[test]
    fn a_location_that_never_arrives_is_named_with_its_first_sample() {
        let ok = message(&[(7, 1), (9, 1)], &[&[9, 7], &[7]]);
        let p = decode_protobuf(&ok.encode_to_vec()).unwrap();
        assert_eq!(p.stacks, [LocId(1), LocId(0), LocId(0)]);
        let missing = message(&[(7, 1), (9, 1)], &[&[9, 7], &[7, 8], &[8]]);
        let err = decode_protobuf(&missing.encode_to_vec()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid profile: sample #1 refers to location 8, which does not exist"
        );
    }

    #[test]
    fn the_header_is_blamed_before_a_sample_whatever_the_order() {
        // A missing location in a sample, found while streaming, and a function whose name is
        // not in the string table, found only at the end: the function is reported, as a
        // check of the header first would.
        let mut both = message(&[(7, 1)], &[&[8]]);
        both.function[0].name = 99;
        let err = decode_protobuf(&both.encode_to_vec()).unwrap_err();
        assert!(err.to_string().contains("the name of function 1"), "{err}");
        // Within the samples, the first broken sample wins over a later one broken earlier
        // in the order of checks.
        let mut two = message(&[(7, 1)], &[&[8], &[7]]);
        two.sample[1].value.push(2);
        let err = decode_protobuf(&two.encode_to_vec()).unwrap_err();
        assert!(
            err.to_string().contains("sample #0 refers to location 8"),
            "{err}"
        );
    }

    #[test]
    fn a_broken_gzip_stream_is_blamed_before_the_protobuf_it_garbles() {
        let noise: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let gz = gzip_bytes(&noise);
        let limits = DecodeLimits::default();
        assert!(matches!(
            decode(&gz, &limits),
            Err(DecodeError::Protobuf(_))
        ));
        assert_eq!(
            decode(&gz[..gz.len() - 4], &limits),
            Err(DecodeError::TruncatedGzip)
        );
        let mut bad_crc = gz.clone();
        let at = bad_crc.len() - 8;
        bad_crc[at] ^= 1;
        assert!(
            matches!(decode(&bad_crc, &limits), Err(DecodeError::BadGzip(m)) if m.contains("checksum"))
        );
        assert_eq!(
            decode(
                &gz,
                &DecodeLimits {
                    max_decompressed: 1000
                }
            ),
            Err(DecodeError::TooLarge { max: 1000 })
        );
    }
    /// A valid profile of 2 MiB, many chunks of the gunzip thread: the fixture's samples again
    /// and again after it (concatenated messages merge).
    fn many_chunks() -> Vec<u8> {
        let raw = gunzip(
            &fixture("hiddenleak-heap-rate4k.pb.gz"),
            DEFAULT_MAX_DECOMPRESSED,
        )
        .unwrap();
        let samples = pb::Profile {
            sample: decode_message(&raw).unwrap().sample,
            ..Default::default()
        }
        .encode_to_vec();
        let mut big = raw;
        while big.len() < 2 << 20 {
            big.extend_from_slice(&samples);
        }
        big
    }

    /// `decode` with the gunzip thread whatever the size of the input.
    fn decode_piped(gz: &[u8], limits: &DecodeLimits) -> Result<Profile, DecodeError> {
        input::with_gunzip_thread(gz, limits.max_decompressed, decode_from)
            .expect("a thread starts")
    }

    #[test]
    fn the_gunzip_thread_gives_what_one_thread_gives() {
        let limits = DecodeLimits::default();
        let mut inputs = Vec::new();
        for entry in
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/profiles")).unwrap()
        {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".pb.gz") {
                inputs.push(std::fs::read(&path).unwrap());
            }
        }
        inputs.push(gzip_bytes(&many_chunks()));
        assert!(inputs.len() > 3);
        for gz in &inputs {
            let one = decode_on_one_thread(gz, &limits);
            assert!(one.is_ok());
            assert_eq!(decode_piped(gz, &limits), one);
            assert_eq!(decode(gz, &limits), one);
        }
    }

    #[test]
    fn the_gunzip_thread_reports_every_broken_stream_as_one_thread_does() {
        let big = gzip_bytes(&many_chunks());
        let noise: Vec<u8> = (0..600_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let garbage = gzip_bytes(&noise);
        let mut bad_crc = big.clone();
        let at = bad_crc.len() - 8;
        bad_crc[at] ^= 1;
        let mut trailing = big.clone();
        trailing.extend_from_slice(b"junk");
        let cases: [(&str, &[u8], u64); 7] = [
            ("whole", &big, DEFAULT_MAX_DECOMPRESSED),
            ("truncated", &big[..big.len() / 2], DEFAULT_MAX_DECOMPRESSED),
            (
                "truncated trailer",
                &big[..big.len() - 3],
                DEFAULT_MAX_DECOMPRESSED,
            ),
            ("bomb", &big, 100_000),
            ("bad checksum", &bad_crc, DEFAULT_MAX_DECOMPRESSED),
            ("trailing data", &trailing, DEFAULT_MAX_DECOMPRESSED),
            ("garbage protobuf", &garbage, DEFAULT_MAX_DECOMPRESSED),
        ];
        for (name, gz, max) in cases {
            let limits = DecodeLimits {
                max_decompressed: max,
            };
            let one = decode_on_one_thread(gz, &limits);
            assert_eq!(decode_piped(gz, &limits), one, "{name}");
            assert_eq!(name == "whole", one.is_ok(), "{name}: {one:?}");
        }
    }

    #[test]
    fn a_decoder_that_stops_early_does_not_leave_the_gunzip_thread_blocked() {
        // Megabytes still to gunzip, a channel of a few chunks: the thread is blocked sending
        // when the reader returns, and must end for the scope to end.
        let gz = gzip_bytes(&vec![7u8; 4 << 20]);
        let first = input::with_gunzip_thread(&gz, DEFAULT_MAX_DECOMPRESSED, |input| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            use input::Input as _;
            input.fill(10).map(|w| w[..10].to_vec())
        });
        assert_eq!(first, Some(Ok(vec![7u8; 10])));
    }
}
