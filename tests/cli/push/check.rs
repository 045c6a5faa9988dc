//! What a push must have sent, checked against the run's own manifest and files: every
//! capture once, at its own time, in-use figures as captured and allocation figures as the
//! change since the capture before it (per-type totals by Go's pprof, at the receiver).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;

use serde_json::Value;

use super::lines;
use super::receiver::Receiver;

/// The manifest records a push must send: stored pprof files, duplicates included (each
/// capture is a point in time), and the `recovered` ones a collector killed between storing a
/// profile and writing its line leaves for the next to record (they carry no totals).
pub fn pushable(run: &Path) -> Vec<Value> {
    lines(&run.join("manifest.jsonl"))
        .into_iter()
        .filter(|r| {
            let file = r["file"].as_str().unwrap_or("");
            let profile = match r["kind"].as_str() {
                Some("heap" | "goroutine") => file.ends_with(".pb.gz"),
                Some("recovered") => {
                    file.ends_with("-heap.pb.gz") || file.ends_with("-goroutine.pb.gz")
                }
                _ => false,
            };
            profile && r["error"].is_null()
        })
        .collect()
}

fn is_heap(record: &Value) -> bool {
    record["kind"] == "heap"
        || record["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("-heap.pb.gz")
}

/// The profile's own time (unix ns) of a stored file.
fn stored_time(run: &Path, record: &Value) -> i64 {
    let raw = fs::read(run.join(record["file"].as_str().unwrap())).unwrap();
    let limits = heapwatch::decode::DecodeLimits::default();
    let bytes = heapwatch::decode::decompress(&raw, &limits).unwrap();
    heapwatch::decode::decode_message(&bytes)
        .unwrap()
        .time_nanos
}

/// Checks that every pushable capture of `run` arrived exactly once, as a point at its own
/// time (a duplicate at the moment it was answered; those in `restamped` at the push's),
/// with its in-use and goroutine figures as the manifest has them and its allocation figures
/// as the change since the capture before it in its boot cycle (the first of a cycle whole,
/// and byte for byte as stored) — per-type totals by Go's pprof, at the receiver. Returns the
/// accepted events by seq.
pub fn assert_all_delivered_once(
    run: &Path,
    receiver: &Receiver,
    restamped: &[u64],
) -> BTreeMap<u64, Value> {
    assert_delivered(run, receiver, receiver.accepted(), restamped)
}

/// [`assert_all_delivered_once`] over `accepted`, some of the receiver's events.
pub fn assert_delivered(
    run: &Path,
    receiver: &Receiver,
    accepted: Vec<Value>,
    restamped: &[u64],
) -> BTreeMap<u64, Value> {
    let expected = pushable(run);
    let outcomes: HashMap<u64, Value> = lines(&run.join("pushes.jsonl"))
        .into_iter()
        .filter(|r| r["outcome"] == "delivered")
        .map(|r| (r["seq"].as_u64().unwrap(), r))
        .collect();
    let mut by_id: HashMap<String, Vec<Value>> = HashMap::new();
    for event in accepted {
        by_id
            .entry(event["id"].as_str().unwrap().to_string())
            .or_default()
            .push(event);
    }
    assert_eq!(
        by_id.len(),
        expected.len(),
        "distinct captures received, of {} to send",
        expected.len()
    );
    let mut found = BTreeMap::new();
    // Per boot cycle, the heap capture before (its totals, when it has them).
    let mut previous: HashMap<u64, Option<Value>> = HashMap::new();
    for record in &expected {
        let seq = record["seq"].as_u64().unwrap();
        let outcome = outcomes
            .get(&seq)
            .unwrap_or_else(|| panic!("seq {seq}: no delivered record in pushes.jsonl"));
        let id = outcome["id"].as_str().unwrap();
        let events = by_id
            .get(id)
            .unwrap_or_else(|| panic!("seq {seq}: id {id} never reached the receiver"));
        assert_eq!(events.len(), 1, "seq {seq} arrived {} times", events.len());
        let event = &events[0];
        let own = !restamped.contains(&seq);
        let at_ms = event["time_nanos"].as_i64().unwrap() / 1_000_000;
        if own && record["dup_of"].is_null() {
            assert_eq!(
                event["time_nanos"].as_i64().unwrap(),
                stored_time(run, record),
                "seq {seq}: the profile's own time"
            );
        } else if own {
            let answered = record["t_ms"].as_i64().unwrap()
                + record["latency_ms"].as_f64().unwrap().round() as i64;
            assert_eq!(at_ms, answered, "seq {seq}: a duplicate at its own time");
        }
        let cycle = record["incarnation"].as_u64().unwrap();
        let totals = &record["totals"];
        let has_totals = record["kind"] != "recovered";
        if has_totals {
            for (name, value) in totals.as_object().unwrap() {
                let got = &event["totals"][name];
                if !name.starts_with("alloc_") {
                    assert_eq!(got, value, "seq {seq}: {name} as captured");
                }
            }
        }
        if is_heap(record) {
            let before = previous.insert(cycle, has_totals.then(|| totals.clone()));
            match before {
                None => {
                    if own && has_totals {
                        let file = record["file"].as_str().unwrap();
                        assert_eq!(
                            receiver.kept(event),
                            fs::read(run.join(file)).unwrap(),
                            "seq {seq}: the first of its cycle goes as stored in {file}"
                        );
                    }
                    if has_totals {
                        for name in ["alloc_objects", "alloc_space"] {
                            assert_eq!(
                                event["totals"][name], totals[name],
                                "seq {seq}: {name} whole"
                            );
                        }
                    }
                }
                Some(Some(before)) if has_totals => {
                    for name in ["alloc_objects", "alloc_space"] {
                        let change =
                            totals[name].as_i64().unwrap() - before[name].as_i64().unwrap();
                        assert_eq!(
                            event["totals"][name].as_i64().unwrap_or(0),
                            change,
                            "seq {seq}: {name}, the change since the capture before"
                        );
                    }
                }
                _ => {}
            }
        }
        found.insert(seq, event.clone());
    }
    found
}

/// The allocation figures pushed for each boot cycle add up to the cycle's last capture's
/// (cumulative) figures: what Pyroscope shows for a range covering the cycle is what the
/// process allocated. Cycles with a recovered capture (no totals) are left out.
pub fn assert_allocations_add_up(run: &Path, events: &BTreeMap<u64, Value>) -> usize {
    let mut cycles: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    let expected = pushable(run);
    for record in expected.iter().filter(|r| is_heap(r)) {
        cycles
            .entry(record["incarnation"].as_u64().unwrap())
            .or_default()
            .push(record);
    }
    let mut checked = 0;
    for (cycle, records) in cycles {
        if records.iter().any(|r| r["kind"] == "recovered") {
            continue;
        }
        let last = records.last().unwrap();
        for name in ["alloc_objects", "alloc_space"] {
            let pushed: i64 = records
                .iter()
                .map(|r| {
                    events[&r["seq"].as_u64().unwrap()]["totals"][name]
                        .as_i64()
                        .unwrap_or(0)
                })
                .sum();
            assert_eq!(
                pushed,
                last["totals"][name].as_i64().unwrap(),
                "cycle {cycle}: {name} pushed over the cycle against its last capture's"
            );
        }
        checked += 1;
    }
    checked
}

/// [`assert_all_delivered_once`] for one run among several pushed to the same receiver.
pub fn assert_all_delivered_once_among(run: &Path, receiver: &Receiver) -> BTreeMap<u64, Value> {
    let ids: std::collections::HashSet<String> = lines(&run.join("pushes.jsonl"))
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    let mine = receiver
        .accepted()
        .into_iter()
        .filter(|e| ids.contains(e["id"].as_str().unwrap_or("")))
        .collect();
    assert_delivered(run, receiver, mine, &[])
}
