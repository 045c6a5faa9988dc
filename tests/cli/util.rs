//! Helpers shared by the integration tests: running the binary, finding fixtures and Go.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The heapwatch binary built for these tests.
pub fn heapwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_heapwatch"))
}

pub fn run(args: &[&str]) -> Output {
    heapwatch()
        .args(args)
        .output()
        .expect("heapwatch binary runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A committed capture under testdata/profiles.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("testdata/profiles").join(name)
}

/// Every committed capture whose name contains `part`.
pub fn fixtures_matching(part: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("testdata/profiles"))
        .expect("testdata/profiles exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".pb.gz") && name.contains(part)
        })
        .collect();
    files.sort();
    files
}

/// The Go toolchain, when installed. With HEAPWATCH_REQUIRE_GO set (as .ci/run does) a
/// missing toolchain fails the test instead of skipping it.
pub fn go() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("go"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var_os("HEAPWATCH_REQUIRE_GO").is_some() {
            panic!("HEAPWATCH_REQUIRE_GO is set but no `go` is on PATH");
        }
        eprintln!("SKIPPED: this test needs the Go toolchain (`go` not on PATH)");
    }
    found
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("heapwatch-test-")
        .tempdir()
        .expect("temp dir")
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write test file");
    p
}

/// Unix time in milliseconds.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A loopback TCP port that was free a moment ago (bound to port 0, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free loopback port")
        .port()
}

static GO_FIXTURES: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();

/// The folder holding every program of testdata/go/cmd, built once per test process with
/// `go build -trimpath` (CGO off) into the Cargo target dir. `None` when Go is missing (with
/// [`go`]'s rules: skipped locally, a failure under HEAPWATCH_REQUIRE_GO).
pub fn go_fixtures() -> Option<PathBuf> {
    let go = go()?;
    let built = GO_FIXTURES.get_or_init(|| {
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let bin = tmp.join("go-fixtures");
        // Go's work dir on the same file system as `bin`: the linked binaries are renamed into
        // place, so another test process never runs a half-copied one.
        let work = tmp.join("go-work");
        for dir in [&bin, &work] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let started = std::time::Instant::now();
        let out = Command::new(&go)
            .args(["build", "-trimpath", "-o"])
            .arg(&bin)
            .arg("./cmd/...")
            .current_dir(repo().join("testdata/go"))
            .env("CGO_ENABLED", "0")
            .env("GOTMPDIR", &work)
            .output()
            .map_err(|e| format!("{}: {e}", go.display()))?;
        if !out.status.success() {
            return Err(format!(
                "go build ./cmd/... failed ({}): {}",
                out.status,
                stderr(&out)
            ));
        }
        eprintln!(
            "built the Go fixtures into {} in {:.1}s",
            bin.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(bin)
    });
    match built {
        Ok(dir) => Some(dir.clone()),
        Err(e) => panic!("{e}"),
    }
}

/// One Go fixture program (`oomgrow`, `steady`, …), built by [`go_fixtures`].
pub fn go_fixture(name: &str) -> Option<PathBuf> {
    let path = go_fixtures()?.join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    Some(path)
}
