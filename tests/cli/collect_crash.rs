//! The collector itself SIGKILLed at random moments, twenty times, on the same run directory,
//! while a real Go target keeps serving. After every kill the run directory must be readable:
//! every profile under its final name a complete gzip stream, every complete manifest line a
//! record, seq numbers strictly increasing, every named file present, durable files never
//! rewritten. What a kill may leave (a torn last line, a temporary file, a file made durable
//! but not yet recorded) must be repaired or accounted for by the next collector.
//!
//! A kill mid-`write` is rare (one `write` per manifest line), so some of the leftovers are
//! also planted by hand between two runs, exactly as a kill at the wrong moment leaves them.
//! `HEAPWATCH_CRASH_SEED=N` replays a sequence of kill delays.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{self, Reaped};

const KILLS: usize = 20;

/// xorshift64: enough randomness for kill delays, reproducible from the printed seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Seeds close together (two tests started in the same microsecond) still give unrelated
    /// sequences: the seed goes through one round of splitmix64 first.
    fn seeded(seed: u64) -> XorShift {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        XorShift((z ^ (z >> 31)) | 1)
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// A final profile name: `NNNNNN-KIND.pb.gz`.
fn is_final_name(name: &str) -> bool {
    let Some((digits, rest)) = name.split_once('-') else {
        return false;
    };
    digits.len() == 6
        && digits.bytes().all(|b| b.is_ascii_digit())
        && rest
            .strip_suffix(".pb.gz")
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase()))
}

/// What the run directory holds at one moment.
#[derive(Default)]
struct Snapshot {
    /// Complete manifest lines (without their newline), in order.
    lines: Vec<String>,
    records: Vec<Value>,
    /// Bytes after the last newline: a torn line.
    tail: String,
    /// Final-named profiles and their bytes.
    files: BTreeMap<String, Vec<u8>>,
    /// Temporary files (`.partial-…`) and anything else that is not a final name.
    others: BTreeSet<String>,
}

impl Snapshot {
    fn take(run: &Path) -> Snapshot {
        let text = match fs::read(run.join("manifest.jsonl")) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => panic!("read the manifest: {e}"),
        };
        let (body, tail) = match text.rfind('\n') {
            Some(i) => (&text[..=i], &text[i + 1..]),
            None => ("", text.as_str()),
        };
        let lines: Vec<String> = body.lines().map(str::to_string).collect();
        let records = lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!(
                        "manifest line {} is complete but not a record ({e}): {l}",
                        i + 1
                    )
                });
                assert!(
                    v["seq"].is_u64() && v["kind"].is_string(),
                    "manifest line {}: no seq or kind: {l}",
                    i + 1
                );
                v
            })
            .collect();
        let mut files = BTreeMap::new();
        let mut others = BTreeSet::new();
        if let Ok(entries) = fs::read_dir(run.join("profiles")) {
            for entry in entries {
                let entry = entry.expect("dir entry");
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_final_name(&name) {
                    // A file renamed away between read_dir and read is a bug too: nothing else
                    // touches the folder while no collector runs.
                    let bytes = fs::read(entry.path())
                        .unwrap_or_else(|e| panic!("read profiles/{name}: {e}"));
                    files.insert(name, bytes);
                } else {
                    others.insert(name);
                }
            }
        }
        Snapshot {
            lines,
            records,
            tail: tail.to_string(),
            files,
            others,
        }
    }

    fn max_seq(&self) -> u64 {
        self.records
            .iter()
            .filter_map(|r| r["seq"].as_u64())
            .max()
            .unwrap_or(0)
    }

    /// Files named by some record (and not deleted later: a deletion is itself a naming).
    fn named(&self) -> BTreeSet<String> {
        self.records
            .iter()
            .filter_map(|r| r["file"].as_str())
            .filter_map(|f| f.strip_prefix("profiles/"))
            .map(str::to_string)
            .collect()
    }
}

/// The checks that hold after any kill. `before` is the directory as the killed collector found
/// it; `ran` says whether that collector got as far as writing a record.
fn check(when: &str, before: &Snapshot, now: &Snapshot, ran: bool) {
    // Appended, never rewritten.
    assert!(
        now.lines.len() >= before.lines.len()
            && now.lines[..before.lines.len()] == before.lines[..],
        "{when}: earlier manifest lines were rewritten or removed"
    );
    let seqs: Vec<u64> = now
        .records
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    if let Some(w) = seqs.windows(2).find(|w| w[0] >= w[1]) {
        panic!(
            "{when}: seq not strictly increasing: {} then {}",
            w[0], w[1]
        );
    }
    // Every named file is there, unless a later delete record removed it.
    for (i, r) in now.records.iter().enumerate() {
        let Some(file) = r["file"].as_str() else {
            continue;
        };
        let name = file
            .strip_prefix("profiles/")
            .filter(|n| is_final_name(n))
            .unwrap_or_else(|| panic!("{when}: seq {} names {file:?}", r["seq"]));
        if r["kind"] == "delete" {
            continue;
        }
        let deleted_later = now.records[i + 1..]
            .iter()
            .any(|d| d["kind"] == "delete" && d["file"].as_str() == Some(file));
        assert!(
            deleted_later || now.files.contains_key(name),
            "{when}: seq {} names {file}, which is missing, and no later delete record names it",
            r["seq"]
        );
    }
    // Every final file is a complete gzip stream.
    for (name, bytes) in &now.files {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut raw)
            .unwrap_or_else(|e| panic!("{when}: profiles/{name} is not a complete gzip: {e}"));
        assert!(
            !raw.is_empty(),
            "{when}: profiles/{name} decodes to nothing"
        );
    }
    // A durable file is never rewritten: a capture made durable by a killed collector is not
    // overwritten by the next one (which would happen if its seq were handed out again).
    let deleted: BTreeSet<&str> = now
        .records
        .iter()
        .filter(|r| r["kind"] == "delete")
        .filter_map(|r| r["file"].as_str()?.strip_prefix("profiles/"))
        .collect();
    for (name, old) in &before.files {
        match now.files.get(name) {
            Some(new) => assert!(
                new == old,
                "{when}: profiles/{name} was durable before this collector started and was \
                 rewritten with other content ({} bytes -> {} bytes)",
                old.len(),
                new.len()
            ),
            None => assert!(
                deleted.contains(name.as_str()),
                "{when}: profiles/{name} vanished without a delete record"
            ),
        }
    }
    // The target never restarted: a collector restart is not a new boot cycle.
    for r in now.records.iter().filter(|r| r["error"].is_null()) {
        assert_eq!(
            r["incarnation"].as_u64(),
            Some(1),
            "{when}: seq {} is filed under boot cycle {}, but the target never restarted",
            r["seq"],
            r["incarnation"]
        );
    }
    if ran {
        // The collector that ran resumed the run: what the previous kill left is repaired.
        for name in &before.others {
            assert!(
                !now.others.contains(name),
                "{when}: profiles/{name}, left by an earlier collector, is still there"
            );
        }
        let named = now.named();
        for name in before.files.keys() {
            assert!(
                named.contains(name),
                "{when}: profiles/{name} was made durable by a killed collector and is still \
                 not in the manifest (expected a `recovered` record on resume)"
            );
        }
    }
}

/// Leftovers as a kill at the wrong moment leaves them, planted between two runs.
fn plant(round: usize, run: &Path, snap: &Snapshot) -> Option<&'static str> {
    let next = snap.max_seq() + 1;
    match round % 5 {
        // Killed in the middle of appending a manifest line.
        1 if snap.tail.is_empty() => {
            let last = snap.lines.last()?;
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(run.join("manifest.jsonl"))
                .expect("open the manifest");
            std::io::Write::write_all(&mut f, &last.as_bytes()[..last.len() / 2]).unwrap();
            Some("a torn manifest line")
        }
        // Killed while writing a profile under its temporary name.
        2 => {
            let (_, bytes) = snap.files.iter().next_back()?;
            fs::write(
                run.join(format!("profiles/.partial-1-1-{next:06}-heap.pb.gz")),
                &bytes[..bytes.len() / 2],
            )
            .unwrap();
            Some("a half-written temporary file")
        }
        // Killed after the profile became durable, before its manifest line was appended.
        3 => {
            let (_, bytes) = snap.files.iter().next_back()?;
            let name = format!("{next:06}-heap.pb.gz");
            if snap.files.contains_key(&name) {
                return None;
            }
            let path = run.join("profiles").join(&name);
            fs::write(&path, bytes).unwrap();
            fs::File::open(&path).and_then(|f| f.sync_all()).unwrap();
            Some("a durable profile without its manifest line")
        }
        _ => None,
    }
}

#[test]
fn a_collector_killed_twenty_times_leaves_a_readable_run_each_time() {
    crash_loop(&[], true);
}

/// Thinning for `--max-disk` deletes files and records the deletions: a kill between the two
/// must not leave a manifest that names a missing file with no delete record. Only real kills
/// here, nothing planted (a real kill can still leave a durable but unrecorded profile).
#[test]
fn a_collector_killed_while_thinning_for_max_disk_leaves_a_readable_run() {
    crash_loop(&["--max-disk", "48KiB"], false);
}

/// Starts `collect --interval 50ms` with `extra` flags on one run directory KILLS times, SIGKILLs
/// each after a random 100-600ms and checks the directory after every kill; with
/// `plant_leftovers`, also plants the leftovers of an unlucky kill between some rounds.
fn crash_loop(extra: &[&str], plant_leftovers: bool) {
    let Some(steady) = util::go_fixture("steady") else {
        return;
    };
    let test_started = Instant::now();
    // A small working set and fast churn: the GC (and so the heap profile) moves every ~100ms,
    // so many captures are new data that has to be written.
    let (_target, addr) = util::start_listening(
        &steady,
        &[
            "-listen",
            "127.0.0.1:0",
            "-working-set",
            "4MiB",
            "-rate",
            "48MiB",
        ],
    );
    let url = format!("http://{addr}");

    let seed = std::env::var("HEAPWATCH_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            nanos ^ u64::from(std::process::id()).rotate_left(32)
        });
    eprintln!("{extra:?}: seed {seed} (HEAPWATCH_CRASH_SEED={seed} replays these kill delays)");
    let mut rng = XorShift::seeded(seed);

    let dir = util::tempdir();
    let run = dir.path().join("run");
    let log = dir.path().join("collector.stderr");
    let mut before = Snapshot::default();
    let mut planted = Vec::new();
    let mut torn_seen = 0;
    let mut partial_seen = 0;
    let mut orphan_seen = 0;
    for round in 1..=KILLS {
        let delay = rng.between(100, 600);
        let mut collector = Reaped(
            util::heapwatch()
                .args(["collect", &url, "--out"])
                .arg(&run)
                .args(["--interval", "50ms", "--quiet"])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(fs::File::create(&log).unwrap())
                .spawn()
                .expect("start the collector"),
        );
        std::thread::sleep(Duration::from_millis(delay));
        if let Some(status) = collector.0.try_wait().unwrap() {
            panic!(
                "round {round}: the collector exited by itself ({status}): {}",
                fs::read_to_string(&log).unwrap_or_default()
            );
        }
        collector.0.kill().expect("SIGKILL the collector");
        let status = collector.0.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "round {round}: {status}");

        let when = format!("after kill {round} ({delay}ms)");
        let now = Snapshot::take(&run);
        let ran = now.lines.len() > before.lines.len();
        let named = now.named();
        let orphans = now.files.keys().filter(|n| !named.contains(*n)).count();
        torn_seen += usize::from(!now.tail.is_empty());
        partial_seen += now.others.len();
        orphan_seen += orphans;
        eprintln!(
            "kill {round:2} after {delay:3}ms: {} lines (+{}), {} files, torn tail {}B, \
             {} temporary, {orphans} unrecorded",
            now.lines.len(),
            now.lines.len().saturating_sub(before.lines.len()),
            now.files.len(),
            now.tail.len(),
            now.others.len(),
        );
        check(&when, &before, &now, ran);
        if !ran {
            eprintln!("  (this collector wrote no record before its kill)");
        }
        let planted_now = plant_leftovers.then(|| plant(round, &run, &now)).flatten();
        if let Some(what) = planted_now {
            eprintln!("  planted {what}");
            planted.push(what);
        }
        before = if planted_now.is_some() {
            Snapshot::take(&run)
        } else {
            now
        };
    }

    // One last collector resumes the run and stops cleanly: nothing torn, nothing left over.
    let out = util::heapwatch()
        .args(["collect", &url, "--out"])
        .arg(&run)
        .args(["--interval", "50ms", "--quiet", "--duration", "1s"])
        .args(extra)
        .output()
        .expect("run the last collector");
    assert!(
        out.status.success(),
        "the last collector should exit 0: {}",
        util::stderr(&out)
    );
    let end = Snapshot::take(&run);
    check("after the clean run", &before, &end, true);
    assert!(end.tail.is_empty(), "a clean stop leaves no torn line");
    assert!(
        end.others.is_empty(),
        "a clean stop leaves no temporary file: {:?}",
        end.others
    );
    let named = end.named();
    for name in end.files.keys() {
        assert!(
            named.contains(name),
            "profiles/{name} is not in the manifest"
        );
    }
    for name in end.files.keys() {
        let path = run.join("profiles").join(name);
        let top = util::run(&["top", path.to_str().unwrap()]);
        assert!(
            top.status.success(),
            "heapwatch top profiles/{name}: {}",
            util::stderr(&top)
        );
    }
    let heap_ok = end
        .records
        .iter()
        .filter(|r| r["kind"] == "heap" && r["error"].is_null())
        .count();
    assert!(heap_ok >= KILLS, "captures were made: {heap_ok}");
    eprintln!(
        "{KILLS} kills: {} records ({heap_ok} heap captures), {} files; seen after kills: \
         {torn_seen} torn tails, {partial_seen} temporary files, {orphan_seen} unrecorded files; \
         {} leftovers planted; {:.1}s",
        end.records.len(),
        end.files.len(),
        planted.len(),
        test_started.elapsed().as_secs_f64()
    );
}
