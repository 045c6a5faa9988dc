//! `pushes.jsonl`, beside the manifest: one JSON line per capture whose push reached an
//! outcome on one server (delivered, refused by it, or sent without an answer before a drain
//! ended), and a line where `heapwatch push --resend` began sending a run again. Appended,
//! never rewritten; a torn last line is cut on open. What has no line here (since the last
//! resend mark) is still to send: that is what makes a push resumable and idempotent.
//!
//! Each line is one `write` before the next push starts, so killing heapwatch loses none;
//! fsync comes at most once a second and at the end ([`Journal::sync`]), so a crash of the
//! machine can lose the last second of lines — those captures go again, with the same ids.
//! An fsync per line cost 6× the push itself on this disk and would compete with the
//! collector's own fsyncs, which carry the captures' durability.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::PushError;

pub const PUSHES_FILE: &str = "pushes.jsonl";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The server answered 200 to the push of this capture.
    Delivered,
    /// The server refused this capture (a 4xx such as Pyroscope's 400 "outside of ingestion
    /// window"): sending the same request again would be refused again.
    Refused,
    /// Sent, and the push ended (a drain ran out) with no answer within `--push-timeout`: the
    /// server may have stored it. Not sent again blindly (a store does not deduplicate);
    /// `--retry-unanswered` does.
    Unanswered,
}

/// One line of `pushes.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushRecord {
    /// The capture's manifest seq and file.
    pub seq: u64,
    pub file: String,
    /// The server: its base URL without credentials, and the tenant (`X-Scope-OrgID`).
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The `RawSample.ID` sent: the same for every attempt, so a store can tell a repeat.
    pub id: String,
    pub outcome: Outcome,
    /// The HTTP status and connect error code of the final answer.
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The server's own words for a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Requests made for this capture, the last one included.
    pub attempts: u32,
    /// Unix ms of the final answer.
    pub t_ms: i64,
    /// True when the profile went stamped with the push time (`--restamp`), its own time in
    /// the `heapwatch_captured_at` label.
    #[serde(default)]
    pub restamped: bool,
}

/// A line saying every outcome before it for this server is forgotten: `heapwatch push
/// --resend` sends the run there again (a wiped server, new labels), and a push cut short
/// after it resumes the resend rather than finding everything delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResendMark {
    pub resend: bool,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Unix ms when the resend began.
    pub t_ms: i64,
}

/// One line of `pushes.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JournalLine {
    Outcome(PushRecord),
    Resend(ResendMark),
}

/// `pushes.jsonl` opened for appending.
pub struct Journal {
    file: File,
    path: PathBuf,
    /// Length of the complete lines: a failed append is cut back to it.
    len: u64,
}

/// What an existing `pushes.jsonl` held.
#[derive(Debug, Default)]
pub struct JournalRead {
    /// Every line, in order.
    pub lines: Vec<JournalLine>,
    /// Complete lines that are not records, with their line numbers.
    pub bad_lines: Vec<(usize, String)>,
}

impl Journal {
    /// Opens (or creates) `RUN/pushes.jsonl`, cutting a torn last line.
    pub fn open(run: &Path) -> Result<(Journal, JournalRead), PushError> {
        let path = run.join(PUSHES_FILE);
        let text = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(PushError::io(&path, e)),
        };
        let (read, good_len) = parse(&text);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| PushError::io(&path, e))?;
        if good_len < text.len() as u64 {
            file.set_len(good_len)
                .and_then(|()| file.sync_all())
                .map_err(|e| PushError::io(&path, e))?;
        }
        Ok((
            Journal {
                file,
                path,
                len: good_len,
            },
            read,
        ))
    }

    /// Appends lines in one `write`.
    pub fn append(&mut self, lines: &[JournalLine]) -> Result<(), PushError> {
        let mut text = Vec::new();
        for line in lines {
            serde_json::to_writer(&mut text, line).expect("push records are plain data");
            text.push(b'\n');
        }
        if let Err(e) = self.file.write_all(&text) {
            let _ = self.file.set_len(self.len);
            return Err(PushError::io(&self.path, e));
        }
        self.len += text.len() as u64;
        Ok(())
    }

    /// Makes every line appended so far durable.
    pub fn sync(&self) -> Result<(), PushError> {
        self.file
            .sync_data()
            .map_err(|e| PushError::io(&self.path, e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads `RUN/pushes.jsonl` without opening it for writing (none yet: empty).
pub fn read(run: &Path) -> Result<JournalRead, PushError> {
    let path = run.join(PUSHES_FILE);
    match fs::read(&path) {
        Ok(bytes) => Ok(parse(&bytes).0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(JournalRead::default()),
        Err(e) => Err(PushError::io(&path, e)),
    }
}

impl JournalRead {
    /// The capture outcomes, in order.
    pub fn records(&self) -> impl Iterator<Item = &PushRecord> {
        self.lines.iter().filter_map(|l| match l {
            JournalLine::Outcome(r) => Some(r),
            JournalLine::Resend(_) => None,
        })
    }
}

/// Parses journal text; returns the records and the length of the complete lines.
fn parse(text: &[u8]) -> (JournalRead, u64) {
    let mut read = JournalRead::default();
    let mut good = 0u64;
    for (number, chunk) in text.split_inclusive(|&b| b == b'\n').enumerate() {
        if !chunk.ends_with(b"\n") {
            break;
        }
        good += chunk.len() as u64;
        let line = &chunk[..chunk.len() - 1];
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<JournalLine>(line) {
            Ok(entry) => read.lines.push(entry),
            Err(e) => read.bad_lines.push((number + 1, e.to_string())),
        }
    }
    (read, good)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> PushRecord {
        PushRecord {
            seq,
            file: format!("profiles/{seq:06}-heap.pb.gz"),
            to: "http://127.0.0.1:4040".into(),
            tenant: None,
            id: format!("id-{seq}"),
            outcome: Outcome::Delivered,
            status: 200,
            code: None,
            message: None,
            attempts: 1,
            t_ms: 5,
            restamped: false,
        }
    }

    #[test]
    fn a_torn_line_is_cut_and_appends_continue_after_it() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut j, read) = Journal::open(dir.path()).unwrap();
            assert!(read.lines.is_empty());
            j.append(&[JournalLine::Outcome(record(1))]).unwrap();
        }
        let path = dir.path().join(PUSHES_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":2,\"fi").unwrap();
        let (mut j, read) = Journal::open(dir.path()).unwrap();
        assert_eq!(read.records().cloned().collect::<Vec<_>>(), vec![record(1)]);
        let mark = JournalLine::Resend(ResendMark {
            resend: true,
            to: "http://127.0.0.1:4040".into(),
            tenant: None,
            t_ms: 9,
        });
        j.append(&[JournalLine::Outcome(record(3)), mark.clone()])
            .unwrap();
        let again = read_all(dir.path());
        assert_eq!(
            again.lines,
            vec![
                JournalLine::Outcome(record(1)),
                JournalLine::Outcome(record(3)),
                mark
            ]
        );
        assert!(again.bad_lines.is_empty());
    }

    fn read_all(dir: &Path) -> JournalRead {
        read(dir).unwrap()
    }
}
