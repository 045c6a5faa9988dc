use super::*;

fn copy_run(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/runs")
        .join(name);
    let to = dir.path().join(name);
    std::fs::create_dir_all(to.join("profiles")).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    for entry in std::fs::read_dir(from.join("profiles")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("profiles").join(entry.file_name())).unwrap();
    }
    let _ = std::fs::remove_file(to.join(INDEX_FILE));
    (dir, to)
}

fn all_sites(run: &RunDir, limits: &DecodeLimits) -> Vec<(u64, Vec<SiteFigures>, bool)> {
    let source = SiteSource::open(run, limits);
    indexed_captures(run)
        .into_iter()
        .filter_map(|r| source.sites(r).ok().map(|(s, b)| (r.seq, s, b.is_none())))
        .collect()
}

/// What the growth analysis made of a capture before there was an index: the reduction of
/// the decoded profile.
fn reduced(run: &RunDir, r: &CaptureRecord) -> Vec<SiteFigures> {
    use crate::analyse::reduce;
    let bytes = std::fs::read(run.file_path(r).unwrap()).unwrap();
    let profile = decode::decode(&bytes, &DecodeLimits::default()).unwrap();
    match r.kind {
        RecordKind::Goroutine => reduce::goroutine_sites(&profile, &reduce::OwnCode::guess()),
        _ => reduce::heap_sites(&profile, &reduce::OwnCode::guess()),
    }
}

#[test]
fn entries_read_back_equal_what_decoding_gives_on_every_recorded_run() {
    let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/runs");
    let mut names: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.jsonl").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    for name in names {
        let (_dir, root) = copy_run(&name);
        let run = RunDir::open(&root).unwrap();
        let limits = DecodeLimits::default();
        let decoded = all_sites(&run, &limits);
        assert!(decoded.iter().all(|d| !d.2), "{name}: nothing indexed yet");
        let done = rebuild(&run, &limits).unwrap();
        assert_eq!(done.rebuilt, decoded.len(), "{name}");
        assert!(done.unreadable.is_empty(), "{name}: {:?}", done.unreadable);
        let indexed = all_sites(&run, &limits);
        assert!(
            indexed.iter().all(|d| d.2),
            "{name}: every capture read from the index"
        );
        let oracle: Vec<_> = indexed_captures(&run)
            .into_iter()
            .map(|r| (r.seq, reduced(&run, r)))
            .collect();
        let strip = |v: Vec<(u64, Vec<SiteFigures>, bool)>| -> Vec<_> {
            v.into_iter().map(|(s, f, _)| (s, f)).collect()
        };
        assert_eq!(strip(decoded), oracle, "{name}: decoded for the index");
        assert_eq!(strip(indexed), oracle, "{name}: read from the index");
        let again = rebuild(&run, &limits).unwrap();
        assert_eq!((again.fresh, again.rebuilt), (done.rebuilt, 0), "{name}");
    }
}

#[test]
fn names_are_shared_across_captures() {
    let (_dir, root) = copy_run("hiddenleak");
    let run = RunDir::open(&root).unwrap();
    let done = rebuild(&run, &DecodeLimits::default()).unwrap();
    let bytes = std::fs::read(root.join(INDEX_FILE)).unwrap();
    let mut names = QuickMap::default();
    let mut offset = HEADER_LEN;
    let mut reader = &bytes[HEADER_LEN as usize..];
    let mut frames = 0;
    while let Some((frame, len)) =
        format::read_frame_header(&mut reader, offset, bytes.len() as u64)
    {
        let (head, rest) = reader.split_at(frame.head_len as usize);
        assert!(frame.head_ok(head));
        format::learn(head, &mut names).unwrap();
        frames += 1;
        reader = rest;
        offset += len;
    }
    assert_eq!(offset, bytes.len() as u64, "nothing follows the last head");
    assert_eq!(frames, done.rebuilt);
    // Every site and sample type is named once for the run, not once per capture.
    let index = RunIndex::open(&root, &[]);
    let site_rows: usize = indexed_captures(&run)
        .into_iter()
        .map(|r| {
            let key = EntryKey::of(r, &run.file_path(r).unwrap()).unwrap();
            index
                .sites(r, &key, &DecodeLimits::default())
                .unwrap()
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(index.names.len(), names.len());
    assert!(
        names.len() < site_rows,
        "{} names, {site_rows} site rows",
        names.len()
    );
}

#[test]
fn an_entry_over_the_ceiling_on_decompressed_size_is_refused() {
    let (_dir, root) = copy_run("hiddenleak");
    let run = RunDir::open(&root).unwrap();
    rebuild(&run, &DecodeLimits::default()).unwrap();
    let index = RunIndex::open(&root, &[]);
    let mut refused = 0;
    for r in indexed_captures(&run) {
        let path = run.file_path(r).unwrap();
        let raw = decode::gunzip(&std::fs::read(&path).unwrap(), u64::MAX).unwrap();
        let key = EntryKey::of(r, &path).unwrap();
        let exact = DecodeLimits {
            max_decompressed: raw.len() as u64,
        };
        assert!(index.sites(r, &key, &exact).unwrap().is_ok(), "{path:?}");
        let below = DecodeLimits {
            max_decompressed: raw.len() as u64 - 1,
        };
        let decoded = decode::decode(&std::fs::read(&path).unwrap(), &below).unwrap_err();
        assert_eq!(index.sites(r, &key, &below).unwrap().unwrap_err(), decoded);
        // Through the source, the error names the file as a decoding error does.
        let source = SiteSource::open(&run, &below);
        let SitesError::Unreadable(why) = source.sites(r).unwrap_err() else {
            panic!("capture #{} read as missing, not refused", r.seq);
        };
        assert!(
            why.contains(&path.display().to_string()) && why.contains("larger than"),
            "{why}"
        );
        refused += 1;
    }
    assert!(refused > 3);
}

#[test]
fn the_collector_keeps_the_decompressed_size_of_what_it_indexes() {
    let (_dir, root) = copy_run("hiddenleak");
    let run = RunDir::open(&root).unwrap();
    // The queue holds 4: these are never left out.
    let captures: Vec<&CaptureRecord> = indexed_captures(&run).into_iter().take(4).collect();
    let mut sizes = Vec::new();
    {
        let indexer = CaptureIndexer::start(&root);
        for r in &captures {
            let path = run.file_path(r).unwrap();
            let raw = decode::gunzip(&std::fs::read(&path).unwrap(), u64::MAX).unwrap();
            sizes.push(raw.len() as u64);
            indexer.add(
                r,
                path,
                Content::Profile(raw),
                &crate::analyse::reduce::OwnCode::guess(),
            );
        }
    }
    let index = RunIndex::open(&root, &[]);
    assert_eq!(index.len(), captures.len());
    for (r, size) in captures.iter().zip(sizes) {
        let key = EntryKey::of(r, &run.file_path(r).unwrap()).unwrap();
        let at = |max| DecodeLimits {
            max_decompressed: max,
        };
        assert_eq!(
            index.sites(r, &key, &at(size)).unwrap(),
            Ok(reduced(&run, r))
        );
        assert!(matches!(
            index.sites(r, &key, &at(size - 1)),
            Some(Err(DecodeError::TooLarge { .. }))
        ));
    }
}

/// The proc encoder's figures per site, kept from capture to capture by the samples that
/// moved, are what decoding each profile it made gives: through growth, a site that appears,
/// recent allocations that count nowhere, a list read whole again.
#[test]
fn the_proc_encoders_site_figures_are_those_of_its_profiles_decoded() {
    use crate::source::proc::encode::{Encoder, Symbols};
    use crate::source::proc::walk::MemRecord;
    let table = crate::source::proc::pclntab::tests::fabricated();
    let syms = Symbols {
        table: &table,
        bias: 0,
        hide_internal_runtime: true,
    };
    fn rec(bucket: u64, stack: &[u64], allocs: i64, frees: i64, recent: i64) -> MemRecord<'_> {
        MemRecord {
            bucket,
            stack,
            alloc_objects: allocs,
            alloc_bytes: 48 * allocs,
            free_objects: frees,
            free_bytes: 48 * frees,
            recent_objects: recent,
            recent_bytes: 48 * recent,
        }
    }
    let (inner, outer, other) = ([0x1003, 0x1007, 0x100b], [0x1007, 0x100b], [0x100b]);
    let captures: Vec<(u64, Vec<MemRecord>)> = vec![
        (
            1,
            vec![rec(0x2000, &inner, 3, 1, 0), rec(0x1f00, &other, 0, 0, 4)],
        ),
        (
            1,
            vec![
                rec(0x3000, &outer, 2, 0, 1),
                rec(0x2000, &inner, 5, 5, 2),
                rec(0x1f00, &other, 4, 0, 0),
            ],
        ),
        (
            1,
            vec![
                rec(0x3000, &outer, 2, 0, 1),
                rec(0x2000, &inner, 5, 5, 2),
                rec(0x1f00, &other, 4, 0, 0),
            ],
        ),
        // Read whole again: every sum starts over.
        (2, vec![rec(0x2000, &other, 1, 0, 0)]),
    ];
    let own = crate::analyse::reduce::OwnCode::module("example.com/app");
    for rate in [1, 512 * 1024] {
        let mut encoder = Encoder::new(&[]);
        encoder.name_sites(&build::site_naming(), Some("example.com/app"));
        for (i, (list, records)) in captures.iter().enumerate() {
            encoder.heap_profile_gz(records.iter().cloned(), *list, rate, &syms, i as i64);
            let raw = encoder.take_raw();
            assert_eq!(
                encoder.summary(),
                decode::summarize(&raw).unwrap(),
                "the totals and hash of capture {i} at rate {rate}"
            );
            assert_eq!(encoder.raw_len(), raw.len());
            let made: CaptureFigures = encoder.take_sites().expect("named").into();
            let profile = decode::decode_protobuf(&raw).unwrap();
            let decoded = build::from_profile(&profile, RecordKind::Heap, &own);
            assert_eq!(made, decoded, "capture {i} at rate {rate}");
            assert!(!made.sites.is_empty());
        }
    }
}

/// Named only after its first profile, and given no stack for the buckets it has seen (as the
/// walk forgets them), the encoder names every site from what it kept: the same figures as a
/// decode of what it wrote.
#[test]
fn the_proc_encoder_names_buckets_it_has_seen_without_their_stacks() {
    use crate::source::proc::encode::{Encoder, Symbols};
    use crate::source::proc::walk::MemRecord;
    let table = crate::source::proc::pclntab::tests::fabricated();
    let syms = Symbols {
        table: &table,
        bias: 0,
        hide_internal_runtime: true,
    };
    let rec = |bucket: u64, stack: &'static [u64], allocs: i64| MemRecord {
        bucket,
        stack,
        alloc_objects: allocs,
        alloc_bytes: 64 * allocs,
        free_objects: 1,
        free_bytes: 64,
        recent_objects: 0,
        recent_bytes: 0,
    };
    let mut encoder = Encoder::new(&[]);
    let first = [
        rec(0x2000, &[0x1003, 0x1007, 0x100b], 3),
        rec(0x1f00, &[0x100b], 2),
    ];
    encoder.heap_profile_gz(first.iter().cloned(), 9, 1, &syms, 1);
    assert!(encoder.take_sites().is_none(), "no namer yet");
    encoder.name_sites(&build::site_naming(), None);
    let later = [
        rec(0x3000, &[0x1007, 0x100b], 1),
        rec(0x2000, &[], 4),
        rec(0x1f00, &[], 2),
    ];
    encoder.heap_profile_gz(later.iter().cloned(), 9, 1, &syms, 2);
    let raw = encoder.take_raw();
    let made: CaptureFigures = encoder.take_sites().unwrap().into();
    let profile = decode::decode_protobuf(&raw).unwrap();
    let own = crate::analyse::reduce::OwnCode::guess();
    assert_eq!(made, build::from_profile(&profile, RecordKind::Heap, &own));
    assert_eq!(profile.samples.len(), 3);
    assert!(
        profile
            .samples
            .iter()
            .all(|s| !profile.sample_stack(s).is_empty())
    );
}

#[test]
fn an_index_named_by_other_own_code_than_the_run_records_is_rebuilt_not_read() {
    let (_dir, root) = copy_run("oomgrow");
    let limits = DecodeLimits::default();
    // Built before run.json named any prefixes (or by a heapwatch that does not read them).
    let plain = rebuild(&RunDir::open(&root).unwrap(), &limits).unwrap();
    assert!(plain.rebuilt > 0);
    assert!(!RunIndex::open(&root, &[]).entries.is_empty());
    let own = vec!["github.com/openziti/".to_string()];
    assert!(RunIndex::open(&root, &own).entries.is_empty());
    // The run records them now: its entries are named by them, and every one is built again.
    let path = root.join(crate::store::RUN_FILE);
    let mut info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    info["options"]["own"] = serde_json::json!(own);
    std::fs::write(&path, serde_json::to_vec(&info).unwrap()).unwrap();
    let run = RunDir::open(&root).unwrap();
    let named = rebuild(&run, &limits).unwrap();
    assert_eq!((named.fresh, named.rebuilt), (0, plain.rebuilt));
    assert!(RunIndex::open(&root, &[]).entries.is_empty());
    // The same prefixes spelled otherwise are the same index.
    assert_eq!(
        RunIndex::open(&root, &["github.com/openziti".to_string()])
            .entries
            .len(),
        plain.rebuilt
    );
    // Read by the recorded prefixes, every capture comes from the index, named by them.
    let indexed = all_sites(&run, &limits);
    assert!(indexed.iter().all(|d| d.2), "nothing left to index");
    let named_as = |name: &str| indexed.iter().any(|d| d.1.iter().any(|s| s.name == name));
    assert!(named_as(
        "main.main (leaf main.(*routerDataModel).buildEventList)"
    ));
    assert!(!named_as("main.(*routerDataModel).buildEventList"));
}
