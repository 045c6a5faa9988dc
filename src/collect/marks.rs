//! Moments taken from log files (`--log NAME=PATH --mark LABEL=REGEX`): a thread tails each
//! log, and every line a mark's pattern matches becomes an [`Event`] appended (fsynced) to
//! `RUN/events.jsonl`, timed by the timestamp the line starts with, else by when it was read.
//!
//! One thread tails every log like `tail -F` (news only; a late file, a rotated one and a
//! truncated one are read from their start; a last line waits for its newline) and appends each
//! matching line, fsynced, to `RUN/events.jsonl`. The time is the line's leading RFC 3339 /
//! ISO 8601 timestamp (or a JSON line's `time`/`ts`), else the read time. The thread owns the
//! file: a slow disk there never touches a collector.
//!
//! **`regex`** (the rust-lang project's crate, already in the lock file through other
//! dependencies) compiles the `--mark` patterns: linear-time matching, so a user's pattern cannot
//! stall the tailer on a long line, and the syntax users know from grep -E. The timestamps are
//! parsed by hand (about 80 lines with tests): the forms are few and fixed, and a date-time crate
//! would bring time zones we do not need (a time with no offset is UTC).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use regex::Regex;
use thiserror::Error;

use crate::store::cluster::{EVENTS_FILE, Event, LogSpec, MarkSpec, TimeFrom, clip_line};

/// How often the logs are looked at.
pub const POLL: Duration = Duration::from_millis(100);
/// A line longer than this without a newline is taken as it is (the rest starts a new one).
const LONGEST_LINE: usize = 64 << 10;

#[derive(Debug, Error)]
pub enum MarkError {
    #[error("--mark {0:?}: expected LABEL=REGEX, e.g. --mark 'read-only=entering read-only mode'")]
    MarkForm(String),
    #[error("--mark {flag:?}: not a valid regular expression: {why}")]
    BadRegex { flag: String, why: String },
    #[error("--log {0:?}: expected NAME=PATH, e.g. --log ctrl2=/var/log/ctrl2.log")]
    LogForm(String),
    #[error("--mark needs at least one --log NAME=PATH to read lines from")]
    NoLog,
    #[error("--log needs at least one --mark LABEL=REGEX: without one no line is kept")]
    NoMark,
    #[error("--log {0:?} is given twice: give each log its own NAME")]
    DuplicateLog(String),
    #[error("{path}: cannot write events: {why}")]
    Write { path: PathBuf, why: String },
}

/// `--log NAME=PATH`.
pub fn parse_log(flag: &str) -> Result<LogSpec, MarkError> {
    match flag.split_once('=') {
        Some((name, path)) if !name.trim().is_empty() && !path.is_empty() => Ok(LogSpec {
            name: name.trim().to_string(),
            path: PathBuf::from(path),
        }),
        _ => Err(MarkError::LogForm(flag.to_string())),
    }
}

/// `--mark LABEL=REGEX`.
pub fn parse_mark(flag: &str) -> Result<MarkSpec, MarkError> {
    match flag.split_once('=') {
        Some((label, regex)) if !label.trim().is_empty() && !regex.is_empty() => Ok(MarkSpec {
            label: label.trim().to_string(),
            regex: regex.to_string(),
        }),
        _ => Err(MarkError::MarkForm(flag.to_string())),
    }
}

/// A mark with its pattern compiled.
#[derive(Debug, Clone)]
pub struct Mark {
    pub label: String,
    regex: Regex,
}

impl Mark {
    pub fn compile(spec: &MarkSpec) -> Result<Mark, MarkError> {
        let regex = Regex::new(&spec.regex).map_err(|e| MarkError::BadRegex {
            flag: format!("{}={}", spec.label, spec.regex),
            why: e.to_string(),
        })?;
        Ok(Mark {
            label: spec.label.clone(),
            regex,
        })
    }
}

/// Checks the logs and marks together: marks need a log, logs need a mark, names are unique.
pub fn compile(logs: &[LogSpec], marks: &[MarkSpec]) -> Result<Vec<Mark>, MarkError> {
    let compiled = marks
        .iter()
        .map(Mark::compile)
        .collect::<Result<Vec<_>, _>>()?;
    if !marks.is_empty() && logs.is_empty() {
        return Err(MarkError::NoLog);
    }
    if !logs.is_empty() && marks.is_empty() {
        return Err(MarkError::NoMark);
    }
    for (i, log) in logs.iter().enumerate() {
        if logs[..i].iter().any(|l| l.name == log.name) {
            return Err(MarkError::DuplicateLog(log.name.clone()));
        }
    }
    Ok(compiled)
}

/// One log file followed like `tail -F`: a file there at the start is read from its end, one
/// that appears later (or replaces it: rotation, a new inode) from its start, and one that
/// shrinks (truncation) from its start again. A last line without its newline waits for it.
pub struct LogTail {
    pub name: String,
    path: PathBuf,
    file: Option<File>,
    inode: u64,
    offset: u64,
    partial: Vec<u8>,
    /// Whether the file has been there at any look so far.
    appeared: bool,
}

impl LogTail {
    /// Starts following `path`: what it holds now is history, not news.
    pub fn new(name: &str, path: &Path) -> LogTail {
        let mut tail = LogTail {
            name: name.to_string(),
            path: path.to_path_buf(),
            file: None,
            inode: 0,
            offset: 0,
            partial: Vec::new(),
            appeared: false,
        };
        if let Ok(file) = File::open(path) {
            if let Ok(meta) = file.metadata() {
                tail.inode = meta.ino();
                tail.offset = meta.len();
                tail.file = Some(file);
                tail.appeared = true;
            }
        }
        tail
    }

    /// Whether the file was there at the start or at any poll since.
    pub fn appeared(&self) -> bool {
        self.appeared
    }

    /// The complete lines written since the last call.
    pub fn poll(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let on_disk = fs::metadata(&self.path).ok();
        let replaced = match (&self.file, &on_disk) {
            (Some(_), Some(meta)) => meta.ino() != self.inode,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if replaced {
            // Rotated away: what the old file still holds comes first, and its last line is
            // complete now that nothing more will be written to it.
            self.read_new(&mut lines);
            self.flush_partial(&mut lines);
            self.file = None;
        }
        if self.file.is_none() {
            if let Ok(file) = File::open(&self.path) {
                if let Ok(meta) = file.metadata() {
                    self.inode = meta.ino();
                    self.offset = 0;
                    self.file = Some(file);
                    self.appeared = true;
                }
            }
        }
        if let (Some(file), Some(_)) = (&self.file, &on_disk) {
            if file.metadata().is_ok_and(|m| m.len() < self.offset) {
                // Truncated in place: start again at its beginning.
                self.flush_partial(&mut lines);
                self.offset = 0;
            }
        }
        self.read_new(&mut lines);
        lines
    }

    fn read_new(&mut self, lines: &mut Vec<String>) {
        let Some(file) = &mut self.file else { return };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = file.read_to_end(&mut buf) else {
            return;
        };
        self.offset += n as u64;
        for &b in &buf {
            if b == b'\n' {
                let line = std::mem::take(&mut self.partial);
                lines.push(text(&line));
            } else {
                self.partial.push(b);
                if self.partial.len() >= LONGEST_LINE {
                    self.flush_partial(lines);
                }
            }
        }
    }

    fn flush_partial(&mut self, lines: &mut Vec<String>) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            lines.push(text(&line));
        }
    }
}

fn text(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line).into_owned()
}

/// The event a line makes, if a mark matches it (the first mark that does).
pub fn event_for(line: &str, log: &str, marks: &[Mark], read_ms: i64) -> Option<Event> {
    let mark = marks.iter().find(|m| m.regex.is_match(line))?;
    let (t_ms, time_from) = match line_time(line) {
        Some(t) => (t, TimeFrom::Line),
        None => (read_ms, TimeFrom::Read),
    };
    Some(Event {
        t_ms,
        label: mark.label.clone(),
        log: log.to_string(),
        line: clip_line(line).to_string(),
        time_from,
    })
}

/// Appends events to `events.jsonl`, each made durable before the next.
pub struct EventLog {
    path: PathBuf,
    file: File,
}

impl EventLog {
    pub fn open(run: &Path) -> Result<EventLog, MarkError> {
        let path = run.join(EVENTS_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| MarkError::Write {
                path: path.clone(),
                why: e.to_string(),
            })?;
        Ok(EventLog { path, file })
    }

    pub fn append(&mut self, event: &Event) -> Result<(), MarkError> {
        let mut line = serde_json::to_vec(event).map_err(|e| MarkError::Write {
            path: self.path.clone(),
            why: e.to_string(),
        })?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| MarkError::Write {
                path: self.path.clone(),
                why: e.to_string(),
            })
    }
}

/// The `--log` files not seen yet, for the progress lines: a log that is never there gives
/// no event and no error, so the user is told while it is missing, not only at the end.
pub struct AwaitedLogs(Vec<LogSpec>);

impl AwaitedLogs {
    pub fn new(logs: &[LogSpec]) -> AwaitedLogs {
        AwaitedLogs(logs.to_vec())
    }

    /// What to say of each log still not there after a look at it now (once seen, a log is
    /// no longer awaited).
    pub fn missing_now(&mut self) -> Vec<String> {
        self.0.retain(|l| fs::metadata(&l.path).is_err());
        self.0
            .iter()
            .map(|l| format!("{}: not there yet", log_flag(l)))
            .collect()
    }
}

/// The summary's line for a log whose file was never there while the collector ran.
pub fn never_appeared(log: &LogSpec) -> String {
    format!(
        "{}: the file never appeared, so no event came from it (check the path)",
        log_flag(log)
    )
}

fn log_flag(log: &LogSpec) -> String {
    format!("--log {}={}", log.name, log.path.display())
}

/// The thread tailing the logs: it owns the event log, so no collector ever waits on it.
pub struct Tailer {
    stop: Arc<AtomicBool>,
    handle: Result<JoinHandle<TailTally>, String>,
}

/// What the tailer did over the run.
#[derive(Debug, Clone, Default)]
pub struct TailTally {
    pub events: u64,
    /// The logs whose file was never there while the collector ran: no event could come from
    /// them (a wrong path, or a service that never started logging).
    pub never_appeared: Vec<LogSpec>,
    /// The first write that failed (the tailer stops writing then).
    pub error: Option<String>,
}

impl Tailer {
    pub fn start(logs: &[LogSpec], marks: Vec<Mark>, mut events: EventLog) -> Tailer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut tails: Vec<LogTail> = logs
            .iter()
            .map(|l| LogTail::new(&l.name, &l.path))
            .collect();
        let handle = std::thread::Builder::new()
            .name("heapwatch-logs".into())
            .spawn(move || {
                let mut tally = TailTally::default();
                loop {
                    // Read once more after the stop: the lines written up to it count.
                    let last = flag.load(Ordering::Relaxed);
                    for tail in &mut tails {
                        for line in tail.poll() {
                            let Some(event) =
                                event_for(&line, &tail.name, &marks, crate::time::now_ms())
                            else {
                                continue;
                            };
                            if tally.error.is_some() {
                                continue;
                            }
                            match events.append(&event) {
                                Ok(()) => tally.events += 1,
                                Err(e) => tally.error = Some(e.to_string()),
                            }
                        }
                    }
                    if last {
                        tally.never_appeared = tails
                            .iter()
                            .filter(|t| !t.appeared())
                            .map(|t| LogSpec {
                                name: t.name.clone(),
                                path: t.path.clone(),
                            })
                            .collect();
                        return tally;
                    }
                    std::thread::sleep(POLL);
                }
            })
            .map_err(|e| format!("cannot start the thread that reads the logs: {e}"));
        Tailer { stop, handle }
    }

    pub fn finish(self) -> TailTally {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle {
            Ok(h) => h.join().unwrap_or_else(|_| TailTally {
                error: Some("the thread that reads the logs failed".into()),
                ..TailTally::default()
            }),
            Err(e) => TailTally {
                error: Some(e),
                ..TailTally::default()
            },
        }
    }
}

/// The time a log line gives for itself, in unix ms: an RFC 3339 / ISO 8601 timestamp at its
/// start (`2026-12-03T10:15:02.123Z`, `…+01:00`, `2026-12-03 10:15:02,123`; after an opening
/// `[` too), or a JSON line's `"time"` / `"ts"` field (text as above, or unix seconds). A
/// time without an offset is taken as UTC.
pub fn line_time(line: &str) -> Option<i64> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(trimmed).ok()?;
        let field = value.get("time").or_else(|| value.get("ts"))?;
        return match field {
            serde_json::Value::String(s) => crate::time::parse_leading(s),
            serde_json::Value::Number(n) => {
                let secs = n.as_f64()?;
                // Unix seconds (zap) or milliseconds.
                Some(if secs > 1e11 { secs } else { secs * 1e3 } as i64)
            }
            _ => None,
        };
    }
    crate::time::parse_leading(trimmed.strip_prefix('[').unwrap_or(trimmed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-03T10:15:02.123Z in unix ms.
    const AT: i64 = 1_796_292_902_123;

    #[test]
    fn timestamps_at_the_start_of_a_line_in_the_usual_forms() {
        assert_eq!(line_time("2026-12-03T10:15:02.123Z entering"), Some(AT));
        assert_eq!(line_time("2026-12-03T11:15:02.123+01:00 x"), Some(AT));
        assert_eq!(line_time("2026-12-03T05:15:02.123-0500 x"), Some(AT));
        assert_eq!(line_time("2026-12-03 10:15:02.123 x"), Some(AT));
        assert_eq!(line_time("2026-12-03 10:15:02,123 x"), Some(AT));
        assert_eq!(line_time("[2026-12-03T10:15:02.123456789Z] x"), Some(AT));
        assert_eq!(line_time("2026-12-03T10:15:02Z x"), Some(AT - 123));
        assert_eq!(line_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(line_time("2000-03-01T00:00:00Z"), Some(951_868_800_000));
        assert_eq!(
            line_time(r#"{"level":"info","time":"2026-12-03T10:15:02.123Z","msg":"x"}"#),
            Some(AT)
        );
        assert_eq!(line_time(r#"{"ts":1796292902.123,"msg":"x"}"#), Some(AT));
        for none in [
            "entering read-only mode",
            "2026-13-03T10:15:02Z month 13",
            "2026-12-03T10:15 no seconds",
            "12/03/2026 10:15:02",
            "",
        ] {
            assert_eq!(line_time(none), None, "{none:?}");
        }
    }

    fn marks(specs: &[&str]) -> Vec<Mark> {
        specs
            .iter()
            .map(|s| Mark::compile(&parse_mark(s).unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn a_matching_line_is_an_event_timed_by_the_line_else_by_the_read() {
        let marks = marks(&["read-only=entering read-only mode", "rw=exiting read-only"]);
        let e = event_for(
            "2026-12-03T10:15:02.123Z entering read-only mode",
            "ctrl2",
            &marks,
            5,
        )
        .unwrap();
        assert_eq!((e.t_ms, e.time_from), (AT, TimeFrom::Line));
        assert_eq!((e.label.as_str(), e.log.as_str()), ("read-only", "ctrl2"));
        let e = event_for("exiting read-only mode", "ctrl2", &marks, 5).unwrap();
        assert_eq!(
            (e.t_ms, e.time_from, e.label.as_str()),
            (5, TimeFrom::Read, "rw")
        );
        assert!(event_for("nothing here", "ctrl2", &marks, 5).is_none());
    }

    #[test]
    fn a_bad_regex_or_form_names_the_flag() {
        let err = Mark::compile(&parse_mark("broken=(unclosed").unwrap()).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("--mark \"broken=(unclosed\""), "{text}");
        assert!(text.contains("not a valid regular expression"), "{text}");
        assert!(
            parse_mark("no-equals-sign")
                .unwrap_err()
                .to_string()
                .contains("LABEL=REGEX")
        );
        assert!(
            parse_log("=/x")
                .unwrap_err()
                .to_string()
                .contains("NAME=PATH")
        );
        let log = parse_log("a=/var/log/a.log").unwrap();
        assert!(matches!(
            compile(&[], &[parse_mark("x=y").unwrap()]),
            Err(MarkError::NoLog)
        ));
        assert!(matches!(
            compile(std::slice::from_ref(&log), &[]),
            Err(MarkError::NoMark)
        ));
        assert!(matches!(
            compile(&[log.clone(), log], &[parse_mark("x=y").unwrap()]),
            Err(MarkError::DuplicateLog(_))
        ));
    }

    fn append(path: &Path, text: &str) {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_tail_reads_only_news_and_holds_a_partial_line_until_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.log");
        append(&path, "old line\n");
        let mut tail = LogTail::new("app", &path);
        assert!(tail.poll().is_empty(), "history is not news");
        append(&path, "one\ntw");
        assert_eq!(tail.poll(), ["one"]);
        assert!(tail.poll().is_empty(), "the partial line waits");
        append(&path, "o\r\n");
        assert_eq!(tail.poll(), ["two"]);
    }

    #[test]
    fn a_log_that_appears_late_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("late.log");
        let mut tail = LogTail::new("late", &path);
        assert!(tail.poll().is_empty());
        append(&path, "first\n");
        assert_eq!(tail.poll(), ["first"]);
    }

    #[test]
    fn rotation_and_truncation_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.log");
        append(&path, "");
        let mut tail = LogTail::new("app", &path);
        append(&path, "a\nunfinished");
        assert_eq!(tail.poll(), ["a"]);
        // Rotation: the old file moves away with a last line, a new one takes its name.
        append(&path, " but ended\nlast of old\n");
        fs::rename(&path, dir.path().join("app.log.1")).unwrap();
        append(&path, "new 1\n");
        assert_eq!(
            tail.poll(),
            ["unfinished but ended", "last of old", "new 1"]
        );
        // Truncation in place (copytruncate): read again from the start.
        append(&path, "new 2 is long enough\n");
        assert_eq!(tail.poll(), ["new 2 is long enough"]);
        fs::write(&path, "x\n").unwrap();
        assert_eq!(tail.poll(), ["x"]);
        // Removed, then back.
        fs::remove_file(&path).unwrap();
        assert!(tail.poll().is_empty());
        append(&path, "back\n");
        assert_eq!(tail.poll(), ["back"]);
    }

    #[test]
    fn the_tailer_writes_each_marked_line_to_events_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ctrl2.log");
        let spec = parse_log(&format!("ctrl2={}", log.display())).unwrap();
        let marks = compile(
            std::slice::from_ref(&spec),
            &[parse_mark("read-only=entering read-only").unwrap()],
        )
        .unwrap();
        let tailer = Tailer::start(&[spec], marks, EventLog::open(dir.path()).unwrap());
        append(
            &log,
            "2026-12-03T10:15:02.123Z entering read-only mode\nnoise\n",
        );
        std::thread::sleep(POLL * 3);
        append(&log, "entering read-only mode again\n");
        let tally = tailer.finish();
        assert_eq!((tally.events, tally.error), (2, None));
        let events = crate::store::cluster::read_events(dir.path());
        assert_eq!(events.len(), 2);
        assert_eq!((events[0].t_ms, events[0].time_from), (AT, TimeFrom::Line));
        assert_eq!(events[1].time_from, TimeFrom::Read);
        assert!(
            events
                .iter()
                .all(|e| e.log == "ctrl2" && e.label == "read-only")
        );
    }

    #[test]
    fn the_tally_names_each_log_that_never_appeared_and_only_those() {
        let dir = tempfile::tempdir().unwrap();
        let late = parse_log(&format!("late={}", dir.path().join("late.log").display())).unwrap();
        let gone = parse_log(&format!("gone={}", dir.path().join("gone.log").display())).unwrap();
        let never = parse_log(&format!("typo={}", dir.path().join("nope.log").display())).unwrap();
        let logs = [late.clone(), gone.clone(), never.clone()];
        let marks = compile(&logs, &[parse_mark("x=x").unwrap()]).unwrap();
        append(&gone.path, "there at the start\n");
        let mut awaited = AwaitedLogs::new(&logs);
        let tailer = Tailer::start(&logs, marks, EventLog::open(dir.path()).unwrap());
        assert_eq!(awaited.missing_now().len(), 2);
        fs::remove_file(&gone.path).unwrap();
        append(&late.path, "here now\n");
        assert_eq!(
            awaited.missing_now(),
            [format!(
                "--log typo={}: not there yet",
                never.path.display()
            )]
        );
        std::thread::sleep(POLL * 3);
        // Seen once is enough: a log rotated away since is not "never there".
        fs::remove_file(&late.path).unwrap();
        assert_eq!(awaited.missing_now().len(), 1);
        let tally = tailer.finish();
        assert_eq!(tally.never_appeared, std::slice::from_ref(&never));
        assert!(never_appeared(&never).contains("never appeared"));
    }
}
