//! `heapwatch collect https://…` against a real Go process (testdata/go/cmd/tlsserve) that
//! serves net/http/pprof over HTTPS with a throw-away CA, optionally requiring a client
//! certificate and a bearer token. The TLS options must get captures through, and their
//! absence must fail clearly: a `tls` error in the manifest and a message naming the
//! certificate problem, never a stored file.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::util;

const TOKEN: &str = "s3cret-token";

/// A running tlsserve and the PEM files it wrote.
struct TlsServe {
    url: String,
    certs: PathBuf,
    _child: util::Reaped,
    _dir: tempfile::TempDir,
}

impl TlsServe {
    /// Starts tlsserve with `args`, or `None` without Go (see `util::go`).
    fn start(args: &[&str]) -> Option<TlsServe> {
        let program = util::go_fixture("tlsserve")?;
        let dir = util::tempdir();
        let certs = dir.path().join("certs");
        fs::create_dir(&certs).unwrap();
        let out = dir.path().join("tlsserve.stdout");
        let mut child = std::process::Command::new(program)
            .arg("-certs")
            .arg(&certs)
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(dir.path().join("tlsserve.stderr")).unwrap())
            .spawn()
            .expect("tlsserve starts");
        let addr = util::wait_for_line(&out, "listening on ", &mut child, Duration::from_secs(30));
        let first = fs::read_to_string(&out).unwrap();
        assert!(
            first.starts_with("listening on 127.0.0.1:"),
            "the first stdout line is not the address: {first:?}"
        );
        // The address is printed only once the PEM files are complete.
        for name in ["ca.pem", "client.pem", "client-key.pem"] {
            let text = fs::read_to_string(certs.join(name)).unwrap();
            assert!(text.starts_with("-----BEGIN "), "{name}: {text:?}");
        }
        let key = fs::read_to_string(certs.join("client-key.pem")).unwrap();
        assert!(
            key.starts_with("-----BEGIN PRIVATE KEY-----"),
            "not PKCS #8: {key}"
        );
        Some(TlsServe {
            url: format!("https://{}", addr.trim()),
            certs,
            _child: util::Reaped(child),
            _dir: dir,
        })
    }

    fn pem(&self, name: &str) -> String {
        self.certs.join(name).to_string_lossy().into_owned()
    }
}

struct Ran {
    code: Option<i32>,
    stderr: String,
}

/// `heapwatch collect URL --out RUN --interval 200ms --duration 2s --memstats-interval 0
/// --quiet EXTRA…`, killed (failing the test) if it runs past 30 s.
fn collect(url: &str, run: &Path, extra: &[&str]) -> Ran {
    let logs = run.with_extension("stderr");
    let mut child = util::heapwatch()
        .arg("collect")
        .arg(url)
        .arg("--out")
        .arg(run)
        .args(["--interval", "200ms", "--duration", "2s"])
        .args(["--memstats-interval", "0", "--quiet"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&logs).unwrap())
        .spawn()
        .expect("heapwatch collect starts");
    let (status, _) = util::wait_for_exit(&mut child, Duration::from_secs(30));
    Ran {
        code: status.code(),
        stderr: fs::read_to_string(&logs).unwrap_or_default(),
    }
}

fn records(run: &Path) -> Vec<Value> {
    let manifest = run.join("manifest.jsonl");
    fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|r| !util::is_event(r))
        .collect()
}

fn profile_files(run: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(run.join("profiles"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// At least three heap captures stored, each decoding with `heapwatch top`, and every attempt
/// a success.
fn assert_captured(run: &Path, ran: &Ran) {
    assert_eq!(ran.code, Some(0), "collect failed: {}", ran.stderr);
    let records = records(run);
    for r in &records {
        assert!(r["error"].is_null(), "a failed attempt: {r}");
    }
    let files = profile_files(run);
    assert!(
        files.len() >= 3,
        "only {} heap captures stored: {files:?}",
        files.len()
    );
    for f in &files {
        assert!(f.to_string_lossy().ends_with("-heap.pb.gz"), "{f:?}");
        let top = util::run(&["top", f.to_str().unwrap()]);
        assert!(
            top.status.success(),
            "{}: {}",
            f.display(),
            util::stderr(&top)
        );
        assert!(
            util::stdout(&top).contains("main.retainRecord"),
            "{}: the fixture's allocation site is missing:\n{}",
            f.display(),
            util::stdout(&top)
        );
    }
}

/// Nothing stored, and every attempt failed with `kind`, its message containing `mentions`.
fn assert_all_failed(run: &Path, kind: &str, mentions: &str) -> Vec<Value> {
    assert!(
        profile_files(run).is_empty(),
        "files were stored: {:?}",
        profile_files(run)
    );
    let records = records(run);
    assert!(records.len() >= 3, "too few attempts: {records:?}");
    for r in &records {
        assert!(r["file"].is_null(), "{r}");
        assert_eq!(r["error_kind"], kind, "wrong error class: {r}");
        let error = r["error"].as_str().expect("an error message");
        assert!(
            error.contains(mentions),
            "error {error:?} does not mention {mentions:?}"
        );
    }
    records
}

#[test]
fn collect_tls_mutual_tls_with_ca_and_token_stores_decodable_heaps() {
    let Some(server) = TlsServe::start(&["-require-client-cert", "-token", TOKEN]) else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let ran = collect(
        &server.url,
        &run,
        &[
            "--cacert",
            &server.pem("ca.pem"),
            "--cert",
            &server.pem("client.pem"),
            "--key",
            &server.pem("client-key.pem"),
            "-H",
            &auth,
        ],
    );
    assert_captured(&run, &ran);
}

#[test]
fn collect_tls_insecure_skips_verification_but_still_sends_the_client_cert() {
    let Some(server) = TlsServe::start(&["-require-client-cert", "-token", TOKEN]) else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let ran = collect(
        &server.url,
        &run,
        &[
            "--insecure",
            "--cert",
            &server.pem("client.pem"),
            "--key",
            &server.pem("client-key.pem"),
            "--header",
            &auth,
        ],
    );
    assert_captured(&run, &ran);
}

#[test]
fn collect_tls_unknown_issuer_without_cacert_is_a_tls_error() {
    let Some(server) = TlsServe::start(&["-require-client-cert", "-token", TOKEN]) else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let auth = format!("Authorization: Bearer {TOKEN}");
    // Everything but the trust anchor: the system roots do not know the fixture's CA.
    let ran = collect(
        &server.url,
        &run,
        &[
            "--cert",
            &server.pem("client.pem"),
            "--key",
            &server.pem("client-key.pem"),
            "-H",
            &auth,
        ],
    );
    assert_all_failed(&run, "tls", "invalid peer certificate: UnknownIssuer");
    // A handshake that never completed is not an answer: exit 3, naming the certificate.
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert!(ran.stderr.contains("never answered"), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("invalid peer certificate"),
        "the message does not say why: {}",
        ran.stderr
    );
}

#[test]
fn collect_tls_missing_client_cert_is_refused_in_the_handshake() {
    let Some(server) = TlsServe::start(&["-require-client-cert", "-token", TOKEN]) else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let ran = collect(
        &server.url,
        &run,
        &["--cacert", &server.pem("ca.pem"), "-H", &auth],
    );
    // Go negotiates TLS 1.3: the client's handshake completes, then the server's
    // certificate_required alert arrives on the first read (before the server closes), so
    // rustls reports the alert, not a reset (0 resets in 600 attempts at a 10 ms interval).
    assert_all_failed(&run, "tls", "received fatal alert: CertificateRequired");
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert!(ran.stderr.contains("CertificateRequired"), "{}", ran.stderr);
}

#[test]
fn collect_tls_wrong_token_is_a_401_status_error() {
    let Some(server) = TlsServe::start(&["-require-client-cert", "-token", TOKEN]) else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let ran = collect(
        &server.url,
        &run,
        &[
            "--cacert",
            &server.pem("ca.pem"),
            "--cert",
            &server.pem("client.pem"),
            "--key",
            &server.pem("client-key.pem"),
            "-H",
            "Authorization: Bearer not-the-token",
        ],
    );
    assert_all_failed(&run, "status", "HTTP 401");
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("never with a valid profile"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("401"), "{}", ran.stderr);
}

#[test]
fn collect_tls_cert_and_key_come_together() {
    // Checked before anything is contacted or created: no server needed.
    let url = format!("https://127.0.0.1:{}", util::free_port());
    let dir = util::tempdir();
    let pem = util::write(dir.path(), "client.pem", b"unused");
    let pem = pem.to_str().unwrap();
    for flags in [["--cert", pem], ["--key", pem]] {
        let run = dir.path().join("run");
        let ran = collect(&url, &run, &flags);
        assert_eq!(ran.code, Some(2), "{flags:?}: {}", ran.stderr);
        assert_eq!(
            ran.stderr.trim_end().lines().count(),
            1,
            "{flags:?}: not one line: {:?}",
            ran.stderr
        );
        assert!(
            ran.stderr.contains("needs both --cert and --key"),
            "{flags:?}: {}",
            ran.stderr
        );
        assert!(!run.exists(), "{flags:?}: a run directory was created");
    }
}
