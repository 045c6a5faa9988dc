//! The files that hold a target's memory, named: a Go program (`tmpfsfile`) writes 64 MiB to a
//! file on tmpfs and keeps it open under `heapwatch run` in a real memory cgroup; its pages are
//! shared memory that the kernel cannot drop, and growth names the file, its resident size and
//! when it was written.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prerequisite::{self, Need};
use crate::util;

const MIB: f64 = 1048576.0;
/// What the fixture writes.
const WRITTEN: u64 = 64 << 20;

/// A tmpfs of its own under a temporary directory (as a memory-backed `emptyDir` is), unmounted
/// when dropped; `/dev/shm` where mounting one fails.
struct Tmpfs {
    dir: PathBuf,
    mounted: bool,
    _holder: tempfile::TempDir,
}

impl Tmpfs {
    fn new() -> Option<Tmpfs> {
        let holder = util::tempdir();
        let dir = holder.path().join("data");
        fs::create_dir(&dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256m", "heapwatch-test"])
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            return Some(Tmpfs {
                dir,
                mounted,
                _holder: holder,
            });
        }
        let shm = tempfile::tempdir_in("/dev/shm").ok()?;
        let dir = shm.path().to_path_buf();
        Some(Tmpfs {
            dir,
            mounted: false,
            _holder: shm,
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// `heapwatch run FLAGS -- tmpfsfile -file FILE ARGS` into `run`, every 200 ms, quietly.
fn run_tmpfsfile(
    fixture: &Path,
    file: &Path,
    run: &Path,
    flags: &[&str],
    args: &[&str],
) -> std::process::Child {
    util::heapwatch()
        .args(["run", "-q", "--interval", "200ms"])
        .args(flags)
        .arg("--out")
        .arg(run)
        .arg("--")
        .arg(fixture)
        .arg("-file")
        .arg(file)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("heapwatch run starts")
}

/// Whether the run was confined in a memory cgroup; says what is missed when it was not.
fn confined(run: &Path, without: &str) -> bool {
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    let mode = info["options"]["confinement"].as_str().unwrap_or("");
    if !mode.starts_with("cgroup") {
        prerequisite::skip(
            Need::Root,
            &format!("heapwatch run made no memory cgroup (confinement {mode}): {without}"),
        );
    }
    mode.starts_with("cgroup")
}

fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mib(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) / MIB
}

#[test]
fn growth_names_the_tmpfs_file_that_holds_the_shared_memory_with_its_size() {
    let Some(fixture) = util::go_fixture("tmpfsfile") else {
        return;
    };
    let Some(tmpfs) = Tmpfs::new() else {
        prerequisite::skip(Need::Root, "neither a tmpfs mount nor /dev/shm");
        return;
    };
    let file = tmpfs.dir.join("ctrl-ha.db-20261207-031333");
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let mut child = run_tmpfsfile(
        &fixture,
        &file,
        &run,
        &["--limit", "256MiB"],
        &["-size", "64MiB"],
    );
    let written = || fs::metadata(&file).is_ok_and(|m| m.len() == WRITTEN);
    wait_until("the file written", Duration::from_secs(120), written);
    // A few detailed samples with the file whole.
    std::thread::sleep(Duration::from_secs(2));
    util::signal(child.id(), "INT");
    let (status, _) = util::wait_for_exit(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");

    if !confined(&run, "no shmem figure") {
        return;
    }
    let path = file.to_str().unwrap();

    // The samples: the file listed, on tmpfs, open, its pages counted.
    let samples: Vec<Value> = fs::read_to_string(run.join("memory.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let counted: Vec<&Value> = samples
        .iter()
        .filter_map(|s| {
            let files = s["files"]["files"].as_array()?;
            files
                .iter()
                .find(|f| f["path"] == path && f["resident"].is_number())
        })
        .collect();
    let last = counted
        .last()
        .expect("the file's pages counted in memory.jsonl");
    assert_eq!(last["size"], WRITTEN, "{last}");
    assert!(last["shmem"] == true && last["open"] == true, "{last}");
    assert!(
        (mib(&last["resident"]) - 64.0).abs() <= 1.0,
        "resident {last}"
    );

    // growth's words: the file named with its resident size, of the shared memory.
    let out = util::run(&["growth", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("where the memory went"))
        .unwrap_or_else(|| panic!("no breakdown:\n{text}"));
    let said = regex::Regex::new(&format!(
        r"files in memory at [0-9.]+ s \(mincore\): ([0-9.]+) MiB of shared memory and tmpfs, (all|[0-9.]+ MiB) of it {} \(open, written ([0-9.]+)–([0-9.]+) s\)",
        regex::escape(path)
    ))
    .unwrap();
    let caps = said
        .captures(line)
        .unwrap_or_else(|| panic!("the file is not named as expected:\n{line}"));
    let figure = |i: usize| caps[i].trim_end_matches(" MiB").parse::<f64>().unwrap();
    // The cgroup's shmem counts the file, and little else.
    assert!((64.0..=72.0).contains(&figure(1)), "{line}");
    // "all of it" where the cgroup's counter, read a moment before the count, lagged it.
    let file_mib = if &caps[2] == "all" {
        figure(1)
    } else {
        figure(2)
    };
    assert!((file_mib - 64.0).abs() <= 1.0, "{line}");
    // Written in a second or two (64 writes of 1 MiB, 20 ms apart), after it started.
    assert!(
        figure(3) < figure(4) && figure(4) - figure(3) < 10.0,
        "{line}"
    );
    assert!(
        line.contains("shared memory and tmpfs") && line.contains("(cannot be dropped)"),
        "{line}"
    );

    // The same in the JSON, from the one reading.
    let out = util::run(&["growth", run.to_str().unwrap(), "--json"]);
    let growth: Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = &growth["cycles"][0]["breakdown"]["files"];
    assert_eq!(files["counted"], true, "{files}");
    let first = &files["files"][0];
    assert_eq!(first["path"], path, "largest first: {files}");
    assert!((mib(&first["resident"]) - 64.0).abs() <= 1.0, "{first}");
    assert!(
        growth["cycles"][0]["breakdown"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains(path)),
        "{}",
        growth["cycles"][0]["breakdown"]
    );
    drop(tmpfs);
}

/// A data directory on tmpfs that fills the limit (issue 33, item 14a): OpenZiti 2.1.0's copy
/// of its database was 886 MiB of shared memory in a 1 GiB limit, and every output led with a
/// 46.8 MiB heap rise. Here a Go program writes 256 MiB to tmpfs under a 128 MiB limit,
/// keeping a little on its heap as it goes, and the kernel kills it: the headline, the verdict
/// and summary.json lead with the shared memory and name the file; the heap follows.
#[test]
fn a_tmpfs_file_that_fills_the_limit_leads_the_account_of_the_kill() {
    let Some(fixture) = util::go_fixture("tmpfsfile") else {
        return;
    };
    let Some(tmpfs) = Tmpfs::new() else {
        prerequisite::skip(Need::Root, "neither a tmpfs mount nor /dev/shm");
        return;
    };
    let file = tmpfs.dir.join("ctrl-ha.db-20261207-031333");
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let mut child = run_tmpfsfile(
        &fixture,
        &file,
        &run,
        &["--limit", "128MiB", "--restarts", "0"],
        &["-size", "256MiB", "-heap", "24MiB"],
    );
    // The kernel may hold the process at its limit a while before it kills it.
    let (status, _) = util::wait_for_exit(&mut child, Duration::from_secs(300));
    assert!(status.success(), "{status}");
    if !confined(&run, "no kill") {
        return;
    }
    let path = file.to_str().unwrap();

    let out = util::run(&["growth", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    let lead = text.lines().next().unwrap_or("");
    let said = regex::Regex::new(&format!(
        r"^OOM-killed [0-9.]+ s after the first capture; shared memory and tmpfs filled the limit \(([0-9.]+) MiB of the ([0-9.]+) MiB charged at [0-9.]+ s; the kernel cannot drop it\), (all|[0-9.]+ MiB) of it {} \(open, written [0-9.]+–[0-9.]+ s\)$",
        regex::escape(path)
    ))
    .unwrap();
    let caps = said
        .captures(lead)
        .unwrap_or_else(|| panic!("the lead does not name the shared memory:\n{text}"));
    let figure = |i: usize| caps[i].parse::<f64>().unwrap();
    // At the limit, most of it the file's pages.
    assert!(figure(2) >= 120.0 && figure(2) <= 128.0, "{lead}");
    assert!(figure(1) >= 64.0 && figure(1) <= figure(2), "{lead}");
    // The heap's rise is still said, after the lead, in main.migrate.
    let verdict = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("verdict: "))
        .unwrap_or_else(|| panic!("no verdict:\n{text}"));
    assert!(
        verdict.starts_with("shared memory and tmpfs filled the limit"),
        "{verdict}"
    );
    assert!(!lead.contains("main.migrate"), "{lead}");
    assert!(
        text.contains("of it page cache (all of it shared memory and tmpfs)")
            || text.contains("of that shared memory and tmpfs)"),
        "{text}"
    );

    // The report's summary.json leads the same way.
    let report = dir.path().join("report");
    let out = util::run(&[
        "report",
        run.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let summary: Value =
        serde_json::from_slice(&fs::read(report.join("summary.json")).unwrap()).unwrap();
    let headline = summary["headline"].as_str().unwrap_or("");
    assert!(
        headline.starts_with(&lead[..lead.find(" (").unwrap()]),
        "{headline}\nagainst\n{lead}"
    );
    drop(tmpfs);
}
