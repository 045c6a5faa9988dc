//! A goroutine stack dump as text (`pprof.Lookup("goroutine").WriteTo(w, 2)`, what the agent's
//! op 0x01 and `/debug/pprof/goroutine?debug=2` serve) turned into distinct stacks with the
//! number of goroutines on each, the same shape as a goroutine pprof profile. No I/O.

use std::collections::BTreeMap;

use super::DecodeError;

/// Distinct stacks, each with its goroutine count, in a stable order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackDump {
    pub stacks: Vec<DumpStack>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpStack {
    /// Function names, leaf first, as pprof spells them (`main.(*hub).subscribe`).
    pub frames: Vec<String>,
    pub count: i64,
}

impl StackDump {
    pub fn goroutines(&self) -> i64 {
        self.stacks.iter().map(|s| s.count).sum()
    }

    /// A hash of the stacks and counts only: goroutine ids and wait times change from one dump
    /// to the next while the data stays the same.
    pub fn content_hash(&self) -> String {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for s in &self.stacks {
            hasher.update(&s.count.to_le_bytes());
            for f in &s.frames {
                hasher.update(f.as_bytes());
                hasher.update(b"\n");
            }
            hasher.update(b"\0");
        }
        format!("xxh3:{:032x}", hasher.digest128())
    }
}

/// The stacks of a goroutine pprof profile (`goroutine/count`), for a replay that serves a
/// run recorded over HTTP to an agent client.
pub fn from_profile(profile: &crate::model::Profile) -> StackDump {
    let types = profile.sample_types.len().max(1);
    let index = profile.default_sample_index();
    let mut counts: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for (i, sample) in profile.samples.iter().enumerate() {
        let count = profile.values.get(i * types + index).copied().unwrap_or(0);
        let frames = profile
            .stack_frames(sample)
            .map(|f| profile.frame_name(f).to_string())
            .collect();
        *counts.entry(frames).or_insert(0) += count;
    }
    StackDump {
        stacks: counts
            .into_iter()
            .filter(|(_, c)| *c > 0)
            .map(|(frames, count)| DumpStack { frames, count })
            .collect(),
    }
}

impl StackDump {
    /// The dump as Go prints it with debug=2, one block per goroutine; ids count from 1, and
    /// arguments and file lines are placeholders (the stacks are all that is kept).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut id = 0;
        for stack in &self.stacks {
            for _ in 0..stack.count {
                id += 1;
                if id > 1 {
                    out.push('\n');
                }
                out.push_str(&format!("goroutine {id} [replayed]:\n"));
                for f in &stack.frames {
                    out.push_str(&format!("{f}(...)\n\t?:0\n"));
                }
            }
        }
        out
    }
}

/// The function of a frame line: `main.(*T).m(0xc000010000, {0x1, 0x2})` → `main.(*T).m`.
fn function_name(line: &str) -> &str {
    let line = line.trim_end();
    if line.ends_with(')') {
        if let Some(open) = line.rfind('(') {
            return &line[..open];
        }
    }
    line
}

/// Parses a debug=2 goroutine dump. A dump cut short (its writer killed mid-write) is an error:
/// every goroutine must end on a file line, and the text on a newline.
pub fn parse(text: &[u8]) -> Result<StackDump, DecodeError> {
    let text = std::str::from_utf8(text).map_err(|_| {
        DecodeError::NotProfile("a stack dump is text, and this is not UTF-8".into())
    })?;
    if !text.starts_with("goroutine ") {
        let head: String = text.chars().take(60).collect();
        return Err(if text.trim().is_empty() {
            DecodeError::Empty
        } else {
            DecodeError::NotProfile(format!("not a goroutine stack dump (it starts {head:?})"))
        });
    }
    if !text.ends_with('\n') {
        return Err(DecodeError::Invalid(
            "the stack dump ends mid-line: cut short (the target died mid-write?)".into(),
        ));
    }
    let mut counts: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    let blocks: Vec<&str> = text
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .collect();
    for (i, block) in blocks.iter().enumerate() {
        let mut lines = block.lines();
        let header = lines.next().unwrap_or("");
        if !(header.starts_with("goroutine ") && header.ends_with(':')) {
            return Err(DecodeError::Invalid(format!(
                "goroutine {} of the dump has no header (found {:?})",
                i + 1,
                header.chars().take(60).collect::<String>()
            )));
        }
        let mut frames = Vec::new();
        let mut awaiting_file = false;
        let mut created_by = false;
        for line in lines {
            if let Some(rest) = line.strip_prefix('\t') {
                if !awaiting_file && !rest.starts_with("goroutine running on other thread") {
                    return Err(DecodeError::Invalid(format!(
                        "goroutine {} of the dump: a file line without its function",
                        i + 1
                    )));
                }
                awaiting_file = false;
                continue;
            }
            if awaiting_file {
                break;
            }
            if line.starts_with("...") {
                continue; // "...additional frames elided..."
            }
            awaiting_file = true;
            if line.starts_with("created by ") {
                created_by = true;
            } else if !created_by {
                frames.push(function_name(line).to_string());
            }
        }
        if awaiting_file {
            let why = if i + 1 == blocks.len() {
                "ends before the file line of its last frame: cut short (the target died mid-write?)"
            } else {
                "has a frame without its file line"
            };
            return Err(DecodeError::Invalid(format!(
                "goroutine {} of the dump {why}",
                i + 1
            )));
        }
        *counts.entry(frames).or_insert(0) += 1;
    }
    Ok(StackDump {
        stacks: counts
            .into_iter()
            .map(|(frames, count)| DumpStack { frames, count })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &[u8] = include_bytes!("../../testdata/agent/goroutine-stack.txt");

    #[test]
    fn a_real_dump_groups_identical_stacks() {
        let dump = parse(REAL).unwrap();
        let text = std::str::from_utf8(REAL).unwrap();
        let headers = text.lines().filter(|l| l.starts_with("goroutine ")).count() as i64;
        assert_eq!(dump.goroutines(), headers);
        let leak = dump
            .stacks
            .iter()
            .find(|s| s.frames.first().map(String::as_str) == Some("main.watchPeer"))
            .expect("the leaked goroutines");
        assert!(leak.count >= 10, "{leak:?}");
        assert_eq!(leak.frames, vec!["main.watchPeer".to_string()]);
        let pace = dump
            .stacks
            .iter()
            .find(|s| s.frames.iter().any(|f| f == "main.main"))
            .unwrap();
        assert_eq!(
            pace.frames,
            [
                "heapwatch.test/fixtures/internal/fixture.Pace",
                "heapwatch.test/fixtures/internal/fixture.PaceConstant",
                "main.main"
            ]
        );
    }

    #[test]
    fn cut_and_foreign_text_is_refused() {
        for cut in [REAL.len() / 2, REAL.len() - 1, REAL.len() - 20] {
            let e = parse(&REAL[..cut]).unwrap_err();
            assert!(e.to_string().contains("cut short"), "{cut}: {e}");
        }
        // Cut right after a function line's newline.
        let text = "goroutine 1 [running]:\nmain.main()\n";
        assert!(
            parse(text.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("cut short")
        );
        assert!(matches!(parse(b""), Err(DecodeError::Empty)));
        assert!(parse(b"unknown op\n").is_err());
        assert!(parse(&[0x1f, 0x8b, 8, 0]).is_err());
    }

    #[test]
    fn the_hash_ignores_ids_and_wait_times() {
        let a = "goroutine 7 [chan receive, 2 minutes]:\nmain.w(0x1)\n\t/a.go:1 +0x1\n";
        let b = "goroutine 9 [chan receive, 3 minutes]:\nmain.w(0x2)\n\t/a.go:1 +0x1\n";
        let c = "goroutine 9 [chan receive]:\nmain.v()\n\t/a.go:1 +0x1\n";
        let h = |t: &str| parse(t.as_bytes()).unwrap().content_hash();
        assert_eq!(h(a), h(b));
        assert_ne!(h(a), h(c));
        assert_eq!(
            function_name("main.(*T).m(0xc0, {0x1, 0x2})"),
            "main.(*T).m"
        );
        assert_eq!(
            function_name("fixture.PaceConstant(...)"),
            "fixture.PaceConstant"
        );
    }

    #[test]
    fn a_dump_written_as_text_parses_back() {
        let dump = parse(REAL).unwrap();
        assert_eq!(parse(dump.to_text().as_bytes()).unwrap(), dump);
        let profile = crate::decode::decode(
            include_bytes!("../../testdata/profiles/goroutineleak-goroutine.pb.gz"),
            &crate::decode::DecodeLimits::default(),
        )
        .unwrap();
        let from = from_profile(&profile);
        assert_eq!(from.goroutines(), profile.total(0));
        assert_eq!(parse(from.to_text().as_bytes()).unwrap(), from);
    }
}
