//! `heapwatch replay` as the test double of a dying target: a hand-made recording of two boot
//! cycles is served over loopback and collected again; the collector sees both cycles, the
//! cut answer, and the very bytes that were recorded.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::util;

/// A run directory with two boot cycles built from committed captures: cycle 1 serves the
/// early then the late hiddenleak capture and is refused for a second; cycle 2 starts over.
fn recorded_run(dir: &Path) {
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    let early = util::fixture("hiddenleak-heap-early.pb.gz");
    let late = util::fixture("hiddenleak-heap-late.pb.gz");
    let mut lines = Vec::new();
    let t0 = 1_800_000_000_000i64;
    let mut seq = 0;
    let mut push = |t: i64, incarnation: u32, file: Option<(&Path, &str)>| {
        seq += 1;
        let (file, error) = match file {
            Some((src, name)) => {
                std::fs::copy(src, profiles.join(name)).unwrap();
                (format!("\"profiles/{name}\""), "null".to_string())
            }
            None => ("null".to_string(), "\"refused\"".to_string()),
        };
        lines.push(format!(
            "{{\"seq\":{seq},\"kind\":\"heap\",\"file\":{file},\"incarnation\":{incarnation},\"t_ms\":{},\"latency_ms\":3.0,\"bytes\":0,\"dup_of\":null,\"interval_ms\":500,\"error\":{error}}}",
            t0 + t
        ));
    };
    push(0, 1, Some((&early, "000001-heap.pb.gz")));
    push(500, 1, Some((&late, "000002-heap.pb.gz")));
    push(1000, 1, None);
    push(1500, 1, None);
    push(2000, 2, Some((&early, "000005-heap.pb.gz")));
    push(2500, 2, Some((&late, "000006-heap.pb.gz")));
    std::fs::write(dir.join("manifest.jsonl"), lines.join("\n") + "\n").unwrap();
}

#[test]
fn a_replayed_recording_is_collected_as_two_boot_cycles_with_the_recorded_bytes() {
    let dir = util::tempdir();
    let recording = dir.path().join("recording");
    recorded_run(&recording);
    let mut replay = util::heapwatch()
        .args([
            "replay",
            recording.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(replay.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("replay announced {first:?}"))
        .to_string();
    let out = dir.path().join("collected");
    let collect = util::run(&[
        "collect",
        &format!("http://{addr}"),
        "--out",
        out.to_str().unwrap(),
        "--interval",
        "100ms",
        "--memstats-interval",
        "0",
        "--until-exit",
        "--grace",
        "1500ms",
        "--quiet",
    ]);
    let status = replay.wait().unwrap();
    assert!(status.success());
    let announced: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        announced.iter().any(|l| l.contains("boot cycle 2")),
        "{announced:?}"
    );
    assert_eq!(collect.status.code(), Some(0), "{}", util::stderr(&collect));

    let manifest = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = manifest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cycles: std::collections::BTreeSet<i64> = records
        .iter()
        .filter(|r| r["error"].is_null())
        .map(|r| r["incarnation"].as_i64().unwrap())
        .collect();
    assert_eq!(cycles.into_iter().collect::<Vec<_>>(), vec![1, 2]);
    assert!(
        records.iter().any(|r| r["error_kind"] == "refused"),
        "the gap between cycles is refused connections"
    );
    // Every stored file is byte for byte one of the recorded captures.
    let originals = [
        std::fs::read(util::fixture("hiddenleak-heap-early.pb.gz")).unwrap(),
        std::fs::read(util::fixture("hiddenleak-heap-late.pb.gz")).unwrap(),
    ];
    let mut stored = 0;
    for r in records.iter().filter(|r| r["dup_of"].is_null()) {
        if let Some(file) = r["file"].as_str() {
            let bytes = std::fs::read(out.join(file)).unwrap();
            assert!(
                originals.contains(&bytes),
                "{file} differs from the recording"
            );
            stored += 1;
        }
    }
    assert!(stored >= 4, "both captures of both cycles stored: {stored}");
}

#[test]
fn replay_refuses_a_run_without_captures_and_a_public_address() {
    let dir = util::tempdir();
    std::fs::write(dir.path().join("manifest.jsonl"), "").unwrap();
    let out = util::run(&["replay", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("no successful capture"),
        "{}",
        util::stderr(&out)
    );
    let out = util::run(&[
        "replay",
        dir.path().to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(util::stderr(&out).contains("loopback"));
}
