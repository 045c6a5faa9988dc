//! The site index (`sites.idx`): growth read from it equals growth from decoding every profile,
//! on every recorded run; an entry whose profile changed is rebuilt, a torn index is cut back
//! and a missing one is rebuilt.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::push::copy_run;
use crate::util;

const INDEX: &str = "sites.idx";

/// A copy of testdata/runs/NAME without any index the other tests left in it.
fn fresh_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let (dir, run) = copy_run(name);
    let _ = fs::remove_file(run.join(INDEX));
    (dir, run)
}

fn growth_json(run: &Path) -> String {
    let out = util::run(&["growth", run.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    util::stdout(&out)
}

fn index(run: &Path) -> Value {
    let out = util::run(&["index", run.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    serde_json::from_str(&util::stdout(&out)).unwrap()
}

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn recorded_runs() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(util::repo().join("testdata/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.jsonl").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The stored heap profiles of a run, in manifest order.
fn heap_files(run: &Path) -> Vec<PathBuf> {
    crate::push::lines(&run.join("manifest.jsonl"))
        .into_iter()
        .filter(|r| r["kind"] == "heap" && r["error"].is_null() && r["dup_of"].is_null())
        .filter_map(|r| r["file"].as_str().map(|f| run.join(f)))
        .collect()
}

#[test]
fn growth_from_the_index_equals_growth_from_decoding_on_every_recorded_run() {
    let runs = recorded_runs();
    assert!(runs.len() >= 5, "{runs:?}");
    let mut indexed_somewhere = false;
    for name in runs {
        let (_dir, run) = fresh_copy(&name);
        // No index: every profile is decoded, and the index is written on the way.
        let decoded = growth_json(&run);
        let built = index(&run);
        assert_eq!(
            count(&built, "rebuilt"),
            0,
            "{name}: growth indexed everything: {built}"
        );
        assert_eq!(
            count(&built, "fresh"),
            count(&built, "captures"),
            "{name}: {built}"
        );
        indexed_somewhere |= count(&built, "captures") > 0;
        let size = fs::metadata(run.join(INDEX)).map(|m| m.len()).unwrap_or(0);
        // Every entry fresh: this growth reads the index and decodes nothing.
        let from_index = growth_json(&run);
        assert_eq!(from_index, decoded, "{name}: growth from the index differs");
        assert_eq!(
            fs::metadata(run.join(INDEX)).map(|m| m.len()).unwrap_or(0),
            size,
            "{name}: nothing was rebuilt"
        );
    }
    assert!(indexed_somewhere);
}

#[test]
fn a_replaced_profile_makes_its_entry_stale_and_it_is_rebuilt() {
    let (_dir, run) = fresh_copy("hiddenleak");
    let before = growth_json(&run);
    let heaps = heap_files(&run);
    assert!(heaps.len() > 3);
    // The last heap capture now holds the first one's profile (as a restore from a backup
    // might leave it): the index must not keep answering with the old figures.
    fs::copy(&heaps[0], heaps.last().unwrap()).unwrap();
    let (_other, oracle) = fresh_copy("hiddenleak");
    fs::copy(
        &heaps[0],
        oracle.join(heaps.last().unwrap().strip_prefix(&run).unwrap()),
    )
    .unwrap();
    let expected = growth_json(&oracle);
    assert_ne!(expected, before, "the replacement changes the analysis");
    let redone = index(&run);
    assert_eq!(count(&redone, "rebuilt"), 1, "{redone}");
    assert_eq!(count(&redone, "fresh") + 1, count(&redone, "captures"));
    assert_eq!(growth_json(&run), expected);
    // Growth itself rebuilds a stale entry too.
    fs::copy(&heaps[1], heaps.last().unwrap()).unwrap();
    fs::copy(
        &heaps[1],
        oracle.join(heaps.last().unwrap().strip_prefix(&run).unwrap()),
    )
    .unwrap();
    assert_eq!(growth_json(&run), growth_json(&oracle));
    assert_eq!(count(&index(&run), "rebuilt"), 0);
}

#[test]
fn a_torn_index_is_cut_back_and_a_missing_one_rebuilt() {
    let (_dir, run) = fresh_copy("oomgrow");
    let decoded = growth_json(&run);
    let path = run.join(INDEX);
    let whole = fs::read(&path).unwrap();
    // Killed mid-append: half of a frame after the last good one.
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[16..16 + 40]);
    fs::write(&path, &torn).unwrap();
    assert_eq!(growth_json(&run), decoded, "a torn tail is read past");
    let repaired = index(&run);
    assert_eq!(count(&repaired, "repaired_bytes"), 40, "{repaired}");
    assert_eq!(count(&repaired, "rebuilt"), 0, "{repaired}");
    assert_eq!(
        fs::read(&path).unwrap(),
        whole,
        "cut back to the last whole frame"
    );
    // Cut inside the last frame: that capture's entry is gone and built again.
    fs::write(&path, &whole[..whole.len() - 7]).unwrap();
    let redone = index(&run);
    assert!(count(&redone, "repaired_bytes") > 0, "{redone}");
    assert_eq!(count(&redone, "rebuilt"), 1, "{redone}");
    assert_eq!(growth_json(&run), decoded);
    // Damage in the middle: everything from the damaged frame on is rebuilt.
    let mut flipped = fs::read(&path).unwrap();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0xff;
    fs::write(&path, &flipped).unwrap();
    assert_eq!(
        growth_json(&run),
        decoded,
        "a damaged frame is never read as figures"
    );
    // That analysis decoded the captures from the damaged frame on, cut the file back to the
    // frame before and appended them again: nothing is left to repair or build.
    let after = index(&run);
    assert_eq!(count(&after, "repaired_bytes"), 0, "{after}");
    assert_eq!(count(&after, "fresh"), count(&after, "captures"), "{after}");
    assert_eq!(growth_json(&run), decoded);
    // Missing: rebuilt by the next analysis.
    fs::remove_file(&path).unwrap();
    assert_eq!(growth_json(&run), decoded);
    assert!(path.is_file());
    let again = index(&run);
    assert_eq!(count(&again, "fresh"), count(&again, "captures"), "{again}");
}

#[test]
fn a_run_that_cannot_be_written_is_analysed_without_an_index() {
    let (_dir, run) = fresh_copy("steady");
    let decoded = growth_json(&run);
    fs::remove_file(run.join(INDEX)).unwrap();
    // A directory in the index's place: nothing can be written, the analysis is the same.
    fs::create_dir(run.join(INDEX)).unwrap();
    assert_eq!(growth_json(&run), decoded);
    let out = util::run(&["index", run.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = util::stderr(&out);
    assert!(err.contains("sites.idx"), "{err}");
}

/// `growth RUN` with `--max-decompressed`, its stdout and its stderr with the run's path
/// taken out.
fn growth_limited(run: &Path, max: &str) -> (String, String) {
    let out = util::run(&[
        "growth",
        run.to_str().unwrap(),
        "--json",
        "--max-decompressed",
        max,
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let shown = run.to_str().unwrap();
    (util::stdout(&out), util::stderr(&out).replace(shown, "RUN"))
}

#[test]
fn an_indexed_capture_over_max_decompressed_is_reported_not_read() {
    let (_dir, run) = fresh_copy("hiddenleak");
    growth_json(&run);
    let built = index(&run);
    assert_eq!(count(&built, "fresh"), count(&built, "captures"), "{built}");
    // Every capture indexed; now a ceiling that some of them gunzip past (they decompress to
    // 0.9-5.6 KB). The index must refuse those as decoding does, not answer for them.
    let (_other, unindexed) = fresh_copy("hiddenleak");
    let expected = growth_limited(&unindexed, "3000");
    let skipped = expected.1.lines().filter(|l| l.contains("skipped")).count();
    assert!(
        skipped > 0 && (skipped as u64) < count(&built, "captures"),
        "{}",
        expected.1
    );
    assert!(
        expected.1.contains("larger than 3000 bytes"),
        "{}",
        expected.1
    );
    let size = fs::metadata(run.join(INDEX)).unwrap().len();
    assert_eq!(growth_limited(&run, "3000"), expected);
    assert_eq!(
        fs::metadata(run.join(INDEX)).unwrap().len(),
        size,
        "answered from the index, nothing decoded"
    );
    // The index does not keep the refusal: with the ceiling back, the figures are there.
    assert_eq!(growth_json(&run), growth_json(&unindexed));
}
