//! The manifest: one JSON object per capture attempt, appended and fsynced, never rewritten.
//! Reading tolerates a torn last line (the collector killed mid-write) and refuses any file
//! name that would lead outside `profiles/`.

pub use crate::model::capture::{CaptureRecord, RecordKind};

/// What reading a manifest found.
#[derive(Debug, Default)]
pub struct ManifestRead {
    pub records: Vec<CaptureRecord>,
    /// Byte length of the readable part; a torn tail starts here.
    pub good_len: u64,
    /// The torn last line, if any (the collector was killed while writing it).
    pub torn_tail: Option<String>,
    /// Lines that are complete but not valid records, with their line numbers.
    pub bad_lines: Vec<(usize, String)>,
}

impl ManifestRead {
    /// The captures an analysis counts, the one rule for it: good heap and goroutine captures,
    /// once each (a capture identical to an earlier one names the earlier file), not deleted
    /// since by retention; in manifest order. Whether the file is still on disk is the
    /// caller's to ask (`pipeline::scan` does, for everything it reads).
    pub fn counted(&self) -> Vec<&CaptureRecord> {
        let deleted: std::collections::BTreeSet<u64> =
            self.records.iter().filter_map(|r| r.deleted_seq).collect();
        self.records
            .iter()
            .filter(|r| {
                r.is_ok()
                    && r.dup_of.is_none()
                    && matches!(r.kind, RecordKind::Heap | RecordKind::Goroutine)
                    && !deleted.contains(&r.seq)
            })
            .collect()
    }
}

/// Parses manifest text. A last line without its newline is torn and set aside; a complete
/// line that is not a valid record is reported, not fatal.
pub fn parse(text: &[u8]) -> ManifestRead {
    let mut read = ManifestRead::default();
    let mut offset = 0usize;
    for (number, chunk) in text.split_inclusive(|&b| b == b'\n').enumerate() {
        if !chunk.ends_with(b"\n") {
            read.torn_tail = Some(String::from_utf8_lossy(chunk).into_owned());
            break;
        }
        offset += chunk.len();
        read.good_len = offset as u64;
        let line = &chunk[..chunk.len() - 1];
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<CaptureRecord>(line) {
            Ok(record) => match check_file_name(record.file.as_deref()) {
                Ok(()) => read.records.push(record),
                Err(why) => read.bad_lines.push((number + 1, why)),
            },
            Err(e) => read.bad_lines.push((number + 1, e.to_string())),
        }
    }
    read
}

/// A manifest may only name files directly inside `profiles/`.
pub fn check_file_name(file: Option<&str>) -> Result<(), String> {
    let Some(file) = file else { return Ok(()) };
    let Some(name) = file.strip_prefix("profiles/") else {
        return Err(format!("file {file:?} is outside profiles/"));
    };
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.contains('\0');
    if plain {
        Ok(())
    } else {
        Err(format!(
            "file {file:?} is not a plain name inside profiles/"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64) -> String {
        let mut r = CaptureRecord::new(seq, RecordKind::Heap, 1, 1000 + seq as i64);
        r.file = Some(format!("profiles/{seq:06}-heap.pb.gz"));
        serde_json::to_string(&r).unwrap() + "\n"
    }

    #[test]
    fn a_torn_last_line_is_set_aside() {
        let mut text = line(1) + &line(2);
        let good = text.len() as u64;
        text.push_str(&line(3)[..20]);
        let read = parse(text.as_bytes());
        assert_eq!(read.records.len(), 2);
        assert_eq!(read.good_len, good);
        assert!(read.torn_tail.is_some());
        assert!(read.bad_lines.is_empty());
    }

    #[test]
    fn names_outside_profiles_are_refused() {
        for bad in [
            "../etc/passwd",
            "profiles/../../x",
            "/etc/passwd",
            "profiles/a/b",
            "profiles/..",
        ] {
            assert!(check_file_name(Some(bad)).is_err(), "{bad}");
        }
        assert!(check_file_name(Some("profiles/000001-heap.pb.gz")).is_ok());
        let evil = line(1).replace("profiles/000001-heap.pb.gz", "../../etc/shadow");
        let read = parse(evil.as_bytes());
        assert!(read.records.is_empty());
        assert_eq!(read.bad_lines.len(), 1);
    }
}
