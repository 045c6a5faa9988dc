//! Broken inputs to `heapwatch top`: each must end with exit code 2 and one line on stderr that
//! names the file and what is wrong with it, never a panic. The profiles are encoded by hand
//! here (a few lines of protobuf wire format) so each case breaks exactly one thing.

use std::io::Write as _;

use flate2::write::GzEncoder;
use flate2::{Compress, Compression, Crc, FlushCompress};

use crate::util;

/// A protobuf message under construction, field by field, in wire format.
#[derive(Clone, Default)]
struct Msg(Vec<u8>);

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

const VARINT: u32 = 0;
const LEN: u32 = 2;

impl Msg {
    fn tag(mut self, field: u32, wire: u32) -> Self {
        put_varint(&mut self.0, u64::from(field << 3 | wire));
        self
    }

    /// Any int64 or uint64 field; negative numbers take ten bytes, as in protobuf.
    fn int(self, field: u32, v: i64) -> Self {
        let mut m = self.tag(field, VARINT);
        put_varint(&mut m.0, v as u64);
        m
    }

    fn bytes(self, field: u32, data: &[u8]) -> Self {
        let mut m = self.tag(field, LEN);
        put_varint(&mut m.0, data.len() as u64);
        m.0.extend_from_slice(data);
        m
    }

    fn msg(self, field: u32, inner: Msg) -> Self {
        self.bytes(field, &inner.0)
    }

    fn packed(self, field: u32, values: &[i64]) -> Self {
        let mut body = Vec::new();
        for &v in values {
            put_varint(&mut body, v as u64);
        }
        self.bytes(field, &body)
    }

    fn raw(mut self, data: &[u8]) -> Self {
        self.0.extend_from_slice(data);
        self
    }
}

struct SampleSpec {
    locations: Vec<i64>,
    values: Vec<i64>,
    /// (key, str) string indices.
    labels: Vec<(i64, i64)>,
}

struct LocationSpec {
    id: u64,
    mapping: u64,
    functions: Vec<u64>,
}

/// A small Go-like heap profile, field by field, so a case can break one part of it.
struct Parts {
    strings: Vec<String>,
    sample_types: Vec<(i64, i64)>,
    samples: Vec<SampleSpec>,
    /// (id, file name)
    mappings: Vec<(u64, i64)>,
    locations: Vec<LocationSpec>,
    /// (id, name, file name)
    functions: Vec<(u64, i64, i64)>,
    default_sample_type: i64,
}

const STRINGS: &[&str] = &[
    "",
    "alloc_objects",
    "count",
    "alloc_space",
    "bytes",
    "inuse_objects",
    "inuse_space",
    "space",
    "main.leak",
    "main.main",
    "runtime.malg",
    "/src/main.go",
    "/go/src/runtime/proc.go",
    "/app/server",
    "handler",
    "api",
];

/// The total of `inuse_space` (the default sample type, being the last) in [`Parts::valid`].
const VALID_INUSE_SPACE: i64 = 1024 + 2048;

impl Parts {
    fn valid() -> Parts {
        Parts {
            strings: STRINGS.iter().map(|s| s.to_string()).collect(),
            sample_types: vec![(1, 2), (3, 4), (5, 2), (6, 4)],
            samples: vec![
                SampleSpec {
                    locations: vec![1, 2],
                    values: vec![4, 4096, 1, 1024],
                    labels: vec![(14, 15)],
                },
                SampleSpec {
                    locations: vec![3, 2],
                    values: vec![2, 8192, 1, 2048],
                    labels: vec![],
                },
            ],
            mappings: vec![(1, 13)],
            locations: vec![
                LocationSpec {
                    id: 1,
                    mapping: 1,
                    functions: vec![1],
                },
                LocationSpec {
                    id: 2,
                    mapping: 1,
                    functions: vec![2],
                },
                LocationSpec {
                    id: 3,
                    mapping: 1,
                    functions: vec![3],
                },
            ],
            functions: vec![(1, 8, 11), (2, 9, 11), (3, 10, 12)],
            default_sample_type: 0,
        }
    }

    fn with(edit: impl FnOnce(&mut Parts)) -> Vec<u8> {
        let mut p = Parts::valid();
        edit(&mut p);
        p.encode()
    }

    fn encode(&self) -> Vec<u8> {
        let mut m = Msg::default();
        for &(kind, unit) in &self.sample_types {
            m = m.msg(1, Msg::default().int(1, kind).int(2, unit));
        }
        for s in &self.samples {
            let mut sample = Msg::default().packed(1, &s.locations).packed(2, &s.values);
            for &(key, value) in &s.labels {
                sample = sample.msg(3, Msg::default().int(1, key).int(2, value));
            }
            m = m.msg(2, sample);
        }
        for &(id, file) in &self.mappings {
            let mapping = Msg::default()
                .int(1, id as i64)
                .int(2, 0x400000)
                .int(3, 0x800000)
                .int(5, file);
            m = m.msg(3, mapping);
        }
        for l in &self.locations {
            let mut location = Msg::default()
                .int(1, l.id as i64)
                .int(2, l.mapping as i64)
                .int(3, (l.id as i64).wrapping_mul(16).wrapping_add(0x401000));
            for (i, &f) in l.functions.iter().enumerate() {
                let line = Msg::default().int(1, f as i64).int(2, 10 + i as i64);
                location = location.msg(4, line);
            }
            m = m.msg(4, location);
        }
        for &(id, name, file) in &self.functions {
            let function = Msg::default()
                .int(1, id as i64)
                .int(2, name)
                .int(3, name)
                .int(4, file);
            m = m.msg(5, function);
        }
        for s in &self.strings {
            m = m.bytes(6, s.as_bytes());
        }
        m = m
            .int(9, 1_700_000_000_000_000_000)
            .msg(11, Msg::default().int(1, 7).int(2, 4))
            .int(12, 512 * 1024);
        if self.default_sample_type != 0 {
            m = m.int(14, self.default_sample_type);
        }
        m.0
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).expect("gzip into memory");
    enc.finish().expect("gzip into memory")
}

/// Bytes that look random and are the same on every run.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `n` empty messages in `field`: two bytes each on the wire.
fn empty_messages(field: u32, n: usize) -> Msg {
    let one = Msg::default().bytes(field, &[]).0;
    Msg(one.repeat(n))
}

/// A gzip stream of `mib` MiB of zeros, about 1 KiB per MiB. Compressing that much in a
/// debug build takes seconds, so one MiB is compressed after a full flush (which resets the
/// compressor) and its bytes are repeated.
fn gzip_bomb(mib: u32) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    let mut deflate = Compress::new(Compression::best(), false);
    let mut chunk = Vec::with_capacity(1 << 16);
    deflate
        .compress_vec(&zeros, &mut chunk, FlushCompress::Full)
        .expect("deflate into memory");
    assert_eq!(
        deflate.total_in(),
        1 << 20,
        "one call compresses the whole MiB"
    );
    let mut end = Vec::with_capacity(64);
    deflate
        .compress_vec(&[], &mut end, FlushCompress::Finish)
        .expect("deflate into memory");
    let mut one = Crc::new();
    one.update(&zeros);
    let mut crc = Crc::new();
    for _ in 0..mib {
        crc.combine(&one);
    }
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    for _ in 0..mib {
        out.extend_from_slice(&chunk);
    }
    out.extend_from_slice(&end);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(mib << 20).to_le_bytes());
    out
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    args: &'static [&'static str],
    /// Must appear in the message on stderr.
    expect: &'static str,
}

fn case(name: &'static str, bytes: Vec<u8>, expect: &'static str) -> Case {
    Case {
        name,
        bytes,
        args: &[],
        expect,
    }
}

fn cases() -> Vec<Case> {
    let valid = Parts::valid().encode();
    let valid_gz = gzip(&valid);

    let mut bad_crc = valid_gz.clone();
    let crc_at = bad_crc.len() - 8;
    bad_crc[crc_at] ^= 0xff;

    let mut gzip_then_garbage = vec![0x1f, 0x8b];
    gzip_then_garbage.extend(noise(300));

    let mut trailing_garbage = valid_gz.clone();
    trailing_garbage.extend_from_slice(b"garbage after the stream");

    let bomb = gzip_bomb(64);

    // A million sample types and a million samples: four MiB on the wire, but a value table
    // sized by their product would be eight TiB.
    let types_times_samples = empty_messages(1, 1 << 20)
        .raw(&empty_messages(2, 1 << 20).0)
        .bytes(6, b"")
        .0;

    vec![
        case("empty", Vec::new(), "empty"),
        case(
            "html",
            b"<!DOCTYPE html>\n<html><body><h1>502 Bad Gateway</h1></body></html>\n".to_vec(),
            "HTML",
        ),
        case(
            "json",
            br#"{"error": "profiling is disabled"}"#.to_vec(),
            "JSON",
        ),
        case(
            "legacy_text",
            b"heap profile: 1: 2 [3: 4] @ heap/1048576\n1: 2 [3: 4] @ 0x1 0x2\n".to_vec(),
            "legacy text format",
        ),
        case("plain_text", b"404 page not found\n".to_vec(), "it is text"),
        case(
            "truncated_gzip",
            valid_gz[..valid_gz.len() / 2].to_vec(),
            "truncated gzip",
        ),
        case(
            "gzip_header_only",
            valid_gz[..10].to_vec(),
            "truncated gzip",
        ),
        case("gzip_bad_crc", bad_crc, "checksum"),
        case("gzip_magic_then_garbage", gzip_then_garbage, "corrupt gzip"),
        case(
            "gzip_trailing_garbage",
            trailing_garbage,
            "data after the end of the gzip stream",
        ),
        case(
            "gzip_of_noise",
            gzip(&noise(4096)),
            "not a valid pprof protobuf",
        ),
        case("raw_noise", noise(4096), "not a valid pprof protobuf"),
        case(
            "truncated_protobuf",
            valid[..valid.len() / 2].to_vec(),
            "not a valid pprof protobuf",
        ),
        case(
            // sample_type (field 1) is a message; here it comes as a varint.
            "wrong_wire_type",
            Msg::default().int(1, 5).bytes(6, b"").0,
            "wire type",
        ),
        case(
            "length_past_end",
            Msg::default().bytes(6, b"").raw(&[0x32, 0x7f, b'x']).0,
            "buffer underflow",
        ),
        case(
            "empty_string_table",
            Msg::default().msg(1, Msg::default()).0,
            "string table is empty",
        ),
        case(
            "string_table_entry_0",
            Parts::with(|p| p.strings[0] = "oops".into()),
            "entry 0",
        ),
        case(
            "sample_type_string_out_of_range",
            Parts::with(|p| p.sample_types[1].0 = 99),
            "string 99",
        ),
        case(
            "negative_string_index",
            Parts::with(|p| p.functions[0].1 = -1),
            "string -1",
        ),
        case(
            "label_key_out_of_range",
            Parts::with(|p| p.samples[0].labels[0].0 = 50),
            "string 50",
        ),
        case(
            "default_sample_type_out_of_range",
            Parts::with(|p| p.default_sample_type = 1000),
            "string 1000",
        ),
        case(
            "missing_location",
            Parts::with(|p| p.samples[1].locations[0] = 7),
            "location 7",
        ),
        case(
            "missing_function",
            Parts::with(|p| p.locations[2].functions[0] = 42),
            "function 42",
        ),
        case(
            "missing_mapping",
            Parts::with(|p| p.locations[0].mapping = 9),
            "mapping 9",
        ),
        case(
            "location_id_0",
            Parts::with(|p| p.locations[1].id = 0),
            "reserved id 0",
        ),
        case(
            "duplicate_function_id",
            Parts::with(|p| p.functions[2].0 = 2),
            "function id 2 is used twice",
        ),
        case(
            // Large ids take the sparse index path.
            "duplicate_sparse_location_id",
            Parts::with(|p| {
                p.locations[0].id = 1 << 60;
                p.locations[1].id = 1 << 60;
            }),
            "is used twice",
        ),
        case(
            "value_count",
            Parts::with(|p| p.samples[1].values.truncate(3)),
            "3 values",
        ),
        case(
            // Summing these would overflow i64 in every later stage.
            "values_overflow_i64",
            Parts::with(|p| {
                p.samples[0].values[3] = i64::MAX;
                p.samples[1].values[3] = 1;
            }),
            "add up to more than",
        ),
        case(
            "value_i64_min",
            Parts::with(|p| p.samples[0].values[1] = i64::MIN),
            "add up to more than",
        ),
        case(
            "many_types_times_many_samples",
            types_times_samples,
            "has 0 values",
        ),
        case(
            "no_sample_types",
            Msg::default().bytes(6, b"").0,
            "no sample types",
        ),
        Case {
            name: "decompression_bomb",
            bytes: bomb,
            args: &["--max-decompressed", "16MiB"],
            expect: "larger than 16777216 bytes",
        },
    ]
}

fn assert_input_error(path: &str, out: &std::process::Output, expect: &str, name: &str) {
    let stderr = util::stderr(out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{name}: exit status {:?}, stderr: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{name}: panicked: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{name}: stderr is not one line: {stderr:?}"
    );
    assert!(stderr.ends_with('\n'), "{name}: {stderr:?}");
    assert!(stderr.contains(path), "{name}: path missing: {stderr}");
    assert!(
        stderr.contains(expect),
        "{name}: {expect:?} missing: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{name}: stdout not empty: {}",
        util::stdout(out)
    );
}

#[test]
fn bad_input_is_refused_with_one_line_naming_file_and_problem() {
    let dir = util::tempdir();
    let cases = cases();
    assert!(cases.len() >= 18);
    let mut failures = Vec::new();
    for c in &cases {
        let path = util::write(dir.path(), &format!("{}.pb.gz", c.name), &c.bytes);
        let shown = path.display().to_string();
        let mut args = vec!["top", shown.as_str()];
        args.extend_from_slice(c.args);
        let out = util::run(&args);
        let checked =
            std::panic::catch_unwind(|| assert_input_error(&shown, &out, c.expect, c.name));
        if let Err(e) = checked {
            let message = e
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "assertion failed".into());
            failures.push(message);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn bad_input_control_valid_profile_decodes() {
    let dir = util::tempdir();
    let valid = Parts::valid().encode();
    for (name, bytes) in [("valid.pb", valid.clone()), ("valid.pb.gz", gzip(&valid))] {
        let path = util::write(dir.path(), name, &bytes);
        let out = util::run(&["top", &path.display().to_string(), "--json"]);
        let stderr = util::stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        assert!(stderr.is_empty(), "{name}: {stderr}");
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("top --json prints JSON");
        assert_eq!(doc["sample"], "inuse_space", "{name}: {doc}");
        assert_eq!(doc["total"], VALID_INUSE_SPACE, "{name}: {doc}");
        let flat = |site: &str| {
            doc["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .find(|r| r["name"] == site)
                .map(|r| (r["flat"].as_i64().unwrap(), r["cum"].as_i64().unwrap()))
        };
        assert_eq!(flat("runtime.malg"), Some((2048, 2048)), "{doc}");
        assert_eq!(flat("main.leak"), Some((1024, 1024)), "{doc}");
        assert_eq!(flat("main.main"), Some((0, 3072)), "{doc}");
    }
}

#[test]
fn bad_input_directory_and_missing_path() {
    let dir = util::tempdir();
    let missing = dir.path().join("no-such-profile.pb.gz");
    for (name, path) in [
        ("directory", dir.path().to_path_buf()),
        ("missing", missing),
    ] {
        let shown = path.display().to_string();
        let out = util::run(&["top", &shown]);
        let expect = if name == "missing" {
            "No such file"
        } else {
            "directory"
        };
        assert_input_error(&shown, &out, expect, name);
    }
}
