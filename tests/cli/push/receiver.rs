//! Drives testdata/go/pyroscope-receiver: builds it once per test process (its own Go module,
//! downloaded through the module proxy on a fresh machine), starts it on loopback, sends it
//! fault commands, restarts it, and reads what it received.

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::util;

pub const MODULE: &str = "testdata/go/pyroscope-receiver";

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The receiver binary, or `None` without Go (skipped locally, a failure under
/// HEAPWATCH_REQUIRE_GO).
pub fn binary() -> Option<PathBuf> {
    let go = util::go()?;
    let built = BUILT.get_or_init(|| {
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let work = tmp.join("go-work");
        fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        let bin = tmp.join("pyroscope-receiver");
        let out = Command::new(&go)
            .args(["build", "-trimpath", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(util::repo().join(MODULE))
            .env("CGO_ENABLED", "0")
            .env("GOTMPDIR", &work)
            .output()
            .map_err(|e| format!("{}: {e}", go.display()))?;
        if !out.status.success() {
            return Err(format!(
                "go build {MODULE} failed ({}): {}",
                out.status,
                util::stderr(&out)
            ));
        }
        Ok(bin)
    });
    match built {
        Ok(bin) => Some(bin.clone()),
        Err(e) => panic!("{e}"),
    }
}

/// Where the Go module cache holds `module` at the version the receiver's go.mod requires
/// (present once [`binary`] has built).
pub fn module_dir(module: &str) -> Option<PathBuf> {
    binary()?;
    let go = util::go()?;
    let out = Command::new(go)
        .args(["list", "-m", "-f", "{{.Dir}}", module])
        .current_dir(util::repo().join(MODULE))
        .output()
        .expect("go list runs");
    assert!(
        out.status.success(),
        "go list -m {module}: {}",
        util::stderr(&out)
    );
    Some(PathBuf::from(util::stdout(&out).trim()))
}

/// A running receiver and the files it writes.
pub struct Receiver {
    /// `http://127.0.0.1:PORT` (the receiver may serve https on it: see `-tls`).
    pub url: String,
    pub addr: String,
    args: Vec<String>,
    child: Option<util::Reaped>,
    stdin: Option<ChildStdin>,
    acks: usize,
    lives: usize,
    dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts a receiver on a free loopback port with `args`.
    pub fn start(args: &[&str]) -> Option<Receiver> {
        Receiver::start_at("127.0.0.1:0", args)
    }

    /// Starts a receiver on `addr`.
    pub fn start_at(addr: &str, args: &[&str]) -> Option<Receiver> {
        binary()?;
        let dir = util::tempdir();
        fs::create_dir(dir.path().join("keep")).unwrap();
        let mut receiver = Receiver {
            url: String::new(),
            addr: addr.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            stdin: None,
            acks: 0,
            lives: 0,
            dir,
        };
        receiver.spawn();
        Some(receiver)
    }

    fn spawn(&mut self) {
        self.lives += 1;
        let stdout = self.dir.path().join(format!("stdout.{}", self.lives));
        let mut child = Command::new(binary().unwrap())
            .arg("-listen")
            .arg(&self.addr)
            .arg("-out")
            .arg(self.events_file())
            .arg("-keep")
            .arg(self.dir.path().join("keep"))
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(
                fs::File::create(self.dir.path().join(format!("stderr.{}", self.lives))).unwrap(),
            )
            .spawn()
            .expect("the receiver starts");
        let listening = util::wait_for_line(
            &stdout,
            "listening on ",
            &mut child,
            Duration::from_secs(60),
        );
        self.addr = listening.trim().to_string();
        self.url = format!("http://{}", self.addr);
        self.stdin = child.stdin.take();
        self.acks = 0;
        self.child = Some(util::Reaped(child));
    }

    pub fn events_file(&self) -> PathBuf {
        self.dir.path().join("events.jsonl")
    }

    /// Sends a fault command and waits for its acknowledgement.
    pub fn command(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the receiver is running");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        self.acks += 1;
        let stdout = self.dir.path().join(format!("stdout.{}", self.lives));
        let child = &mut self.child.as_mut().unwrap().0;
        util::wait_for_line(
            &stdout,
            &format!("ack {}: ", self.acks),
            child,
            Duration::from_secs(10),
        );
    }

    /// SIGTERM, as a rolling restart sends: pushes being answered are finished first.
    pub fn stop(&mut self) {
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            util::signal(child.0.id(), "TERM");
            util::wait_for_exit(&mut child.0, Duration::from_secs(30));
        }
    }

    /// Stops it and starts it again on the same address, appending to the same events.
    pub fn restart(&mut self, down_for: Duration) {
        self.stop();
        std::thread::sleep(down_for);
        self.spawn();
    }

    pub fn events(&self) -> Vec<Value> {
        super::lines(&self.events_file())
    }

    fn of(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == kind)
            .collect()
    }

    pub fn accepted(&self) -> Vec<Value> {
        self.of("accepted")
    }

    pub fn refused(&self) -> Vec<Value> {
        self.of("refused")
    }

    pub fn faults(&self) -> Vec<Value> {
        self.of("fault")
    }

    /// Pushes that reached the push handler, as they arrived.
    pub fn arrived(&self) -> Vec<Value> {
        self.of("arrived")
    }

    /// Every event: a push that arrived, each profile accepted or refused, each fault. Zero
    /// new events means not even a request was made.
    pub fn requests(&self) -> usize {
        self.events().len()
    }

    /// The raw bytes the receiver got for an accepted event.
    pub fn kept(&self, event: &Value) -> Vec<u8> {
        let name = event["sha256"].as_str().unwrap();
        fs::read(self.dir.path().join("keep").join(name)).unwrap()
    }
}
