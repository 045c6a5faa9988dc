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

#[test]
fn entries_read_back_equal_what_decoding_gives() {
    let (_dir, root) = copy_run("hiddenleak");
    let run = RunDir::open(&root).unwrap();
    let limits = DecodeLimits::default();
    let decoded = all_sites(&run, &limits);
    assert!(decoded.iter().all(|d| !d.2), "nothing indexed yet");
    let done = rebuild(&run, &limits).unwrap();
    assert_eq!(done.rebuilt, decoded.len());
    let indexed = all_sites(&run, &limits);
    assert!(
        indexed.iter().all(|d| d.2),
        "every capture read from the index"
    );
    let strip = |v: Vec<(u64, Vec<SiteFigures>, bool)>| -> Vec<_> {
        v.into_iter().map(|(s, f, _)| (s, f)).collect()
    };
    assert_eq!(strip(indexed), strip(decoded));
    let again = rebuild(&run, &limits).unwrap();
    assert_eq!((again.fresh, again.rebuilt), (done.rebuilt, 0));
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
    let index = RunIndex::open(&root);
    let site_rows: usize = indexed_captures(&run)
        .into_iter()
        .map(|r| {
            let key = EntryKey::of(r, &run.file_path(r).unwrap()).unwrap();
            index.sites(r, &key).unwrap().len()
        })
        .sum();
    assert_eq!(index.names.len(), names.len());
    assert!(
        names.len() < site_rows,
        "{} names, {site_rows} site rows",
        names.len()
    );
}
