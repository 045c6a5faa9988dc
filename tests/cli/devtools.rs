//! A small client of Chromium's DevTools protocol over `--remote-debugging-pipe`, for the
//! report's browser test: open a page, evaluate expressions in it, and press, move and release
//! the mouse and type as a person would (`Input.dispatchMouseEvent`, `Input.insertText`).
//! Chromium reads commands from its fd 3 and writes replies and events to its fd 4, each
//! message one JSON object ended by a NUL byte. No port, no network, no npm toolchain.
//!
//! # The browser test drives Chromium itself
//!
//! About 250 lines: `Target.createTarget` and `attachToTarget`, `Runtime.evaluate`,
//! `Input.dispatchMouseEvent` for real presses, moves and releases, `Input.insertText` for
//! typing. Against playwright-core from npm with Debian's Chromium (known to work here): no Node
//! toolchain and no npm install in `.ci/run`, no port to pick or race for
//! (`--remote-debugging-port` would need a websocket client too), and the test stays in the one
//! test binary beside the others, using serde_json and libc already in the tree. It is small
//! because the test needs little: open, evaluate, mouse, type. `bench/chromium_cdp.py` is the
//! same client in Python's standard library for the bench and `demo/screenshot.sh`.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::fd::{FromRawFd as _, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long one command may take before the test fails, naming it.
const REPLY_WITHIN: Duration = Duration::from_secs(60);

/// A headless Chromium with one page open, driven over its DevTools pipe.
pub struct Browser {
    child: Child,
    commands: File,
    replies: Receiver<Value>,
    next_id: u64,
    session: Option<String>,
}

fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors it creates; both are owned below.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    (fds[0], fds[1])
}

impl Browser {
    /// Starts headless Chromium (the flags of the other browser tests) with a page of
    /// `width` × `height` CSS pixels.
    pub fn launch(browser: &Path, profile: &Path, width: u32, height: u32) -> Browser {
        let (their_in, our_out) = pipe();
        let (our_in, their_out) = pipe();
        let mut command = Command::new(browser);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(match std::env::var_os("HEAPWATCH_CHROMIUM_LOG") {
                Some(path) => Stdio::from(File::create(path).expect("the chromium log")),
                None => Stdio::null(),
            });
        // SAFETY: only async-signal-safe calls between fork and exec; dup2 leaves the new
        // descriptors without close-on-exec, so Chromium inherits exactly fds 3 and 4.
        unsafe {
            command.pre_exec(move || {
                // Moved above 4 first, so that neither dup2 below lands on the other's source
                // or on itself (which would keep close-on-exec).
                let read = libc::fcntl(their_in, libc::F_DUPFD, 10);
                let write = libc::fcntl(their_out, libc::F_DUPFD, 10);
                if read < 0 || write < 0 || libc::dup2(read, 3) < 0 || libc::dup2(write, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts");
        // SAFETY: the descriptors were created above and are closed or owned exactly once.
        unsafe {
            libc::close(their_in);
            libc::close(their_out);
        }
        let commands = unsafe { File::from_raw_fd(our_out) };
        let incoming = unsafe { File::from_raw_fd(our_in) };
        let (tx, replies) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(incoming);
            let mut message = Vec::new();
            loop {
                message.clear();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&message) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            commands,
            replies,
            next_id: 0,
            session: None,
        };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = b.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = Some(
            attached["sessionId"]
                .as_str()
                .expect("a session id")
                .to_string(),
        );
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    /// Sends a command (to the page once one is attached) and waits for its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("{method}: writing to chromium: {e}"));
        let deadline = Instant::now() + REPLY_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(v) if v["id"] == json!(id) => {
                    if let Some(e) = v.get("error") {
                        panic!("{method}: chromium says {e}");
                    }
                    return v["result"].clone();
                }
                Ok(_) => {} // an event, or another reply
                Err(RecvTimeoutError::Timeout) => panic!("{method}: no reply within 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!("{method}: chromium went away"),
            }
        }
    }

    /// Opens a page and waits until `ready` (an expression) is true in it.
    pub fn open(&mut self, url: &str, ready: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(ready);
    }

    /// The value of an expression in the page (JSON-serialisable values only).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: threw {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits (up to 30 s) until an expression is true in the page.
    pub fn wait_for(&mut self, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        // False while it throws: a page being loaded has no document element yet.
        let test = format!(
            "(() => {{ try {{ return Boolean({expression}); }} catch (e) {{ return false; }} }})()"
        );
        while self.eval(&test) != json!(true) {
            assert!(
                Instant::now() < deadline,
                "{expression}: still false after 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The centre of the element `selector` names, in the viewport's CSS pixels, scrolled into
    /// view first.
    pub fn centre(&mut self, selector: &str) -> (f64, f64) {
        let r = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2]; }})()",
            sel = json!(selector)
        ));
        let r = r
            .as_array()
            .unwrap_or_else(|| panic!("no element {selector}"));
        (r[0].as_f64().unwrap(), r[1].as_f64().unwrap())
    }

    fn mouse(&mut self, kind: &str, (x, y): (f64, f64), pressed: bool) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": kind, "x": x, "y": y, "button": if pressed || kind != "mouseMoved" { "left" } else { "none" },
                   "buttons": if pressed { 1 } else { 0 }, "clickCount": 1}),
        );
    }

    /// A left click at a point of the viewport.
    pub fn click(&mut self, at: (f64, f64)) {
        self.mouse("mouseMoved", at, false);
        self.mouse("mousePressed", at, true);
        self.mouse("mouseReleased", at, false);
    }

    /// Presses the left button at `from`, moves to `to` in steps, releases it there.
    pub fn drag(&mut self, from: (f64, f64), to: (f64, f64)) {
        self.mouse("mouseMoved", from, false);
        self.mouse("mousePressed", from, true);
        for k in 1..=8 {
            let f = f64::from(k) / 8.0;
            let at = (from.0 + (to.0 - from.0) * f, from.1 + (to.1 - from.1) * f);
            self.mouse("mouseMoved", at, true);
        }
        self.mouse("mouseReleased", to, false);
    }

    /// Types text into the focused element, as a keyboard's input would.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
