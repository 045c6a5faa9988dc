//! `agent:auto`: the agents of a folder (`gops-agent.<pid>.sock`, as the agent names its socket
//! in the temp dir), with the stale sockets of dead processes skipped and each live one asked
//! who it is (op 0x0a), so the collector can follow one application across restarts.
//!
//! A socket is stale when nothing accepts on it (a killed process leaves its file behind). The
//! pid in its name is not checked: in a folder shared with a container it counts in that
//! container's pid namespace, not ours.
//!
//! **Short `agent:auto` errors.** "no live agent with app id X (N other agent(s) seen)" in one
//! line; the other agents are named (three at most) only when they change.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::wire::{self, Endpoint, Op};
use crate::source::{FailureKind, FetchError};

/// What an agent says about its application (op 0x0a). Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AppInfo {
    #[serde(default, rename = "type")]
    pub app_type: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub alias: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
}

impl AppInfo {
    /// An empty reply means an agent without app info, not an error.
    pub fn parse(bytes: &[u8]) -> Result<AppInfo, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(AppInfo::default());
        }
        serde_json::from_slice(bytes).map_err(|e| {
            let head: String = String::from_utf8_lossy(bytes).chars().take(80).collect();
            format!("app info is not JSON ({e}): {head:?}")
        })
    }

    pub fn is(&self, app_id: &str) -> bool {
        self.id.as_deref() == Some(app_id) || self.alias.as_deref() == Some(app_id)
    }

    fn describe(&self) -> String {
        match (&self.id, &self.app_type) {
            (Some(id), _) => id.clone(),
            (None, Some(t)) => format!("({t})"),
            (None, None) => "(no app id)".into(),
        }
    }
}

/// One `gops-agent.<pid>.sock` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSocket {
    pub path: PathBuf,
    pub pid: u32,
    modified: Option<SystemTime>,
}

/// The pid in a socket name made by the agent (`gops-agent.<pid>.sock`).
pub fn pid_from_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("gops-agent.")?
        .strip_suffix(".sock")?
        .parse()
        .ok()
}

/// The agent sockets in `dir`, newest first.
pub fn sockets(dir: &Path) -> Vec<AgentSocket> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<AgentSocket> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let path = e.path();
            let pid = pid_from_name(&path)?;
            let modified = e.metadata().ok().and_then(|m| m.modified().ok());
            Some(AgentSocket {
                path,
                pid,
                modified,
            })
        })
        .collect();
    found.sort_by(|a, b| b.modified.cmp(&a.modified).then(b.pid.cmp(&a.pid)));
    found
}

/// False once the process (a pid of this namespace) is gone, or a zombie waiting to be reaped.
/// Where there is no `/proc`, every pid counts as alive and the connection decides.
pub fn pid_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in brackets and may hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Finds the agent of one application among the sockets of a folder, remembering what each
/// live socket answered so a decoy is asked only once.
#[derive(Debug)]
pub struct Discovery {
    dir: PathBuf,
    app_id: Option<String>,
    known: HashMap<(PathBuf, u32, Option<SystemTime>), AppInfo>,
    /// The other agents named in the last error: named again only when they change, so a
    /// machine with a dozen agents does not fill every failed attempt with the list.
    last_others: Vec<String>,
}

/// At most this many other agents are named in one error.
const NAMED_OTHERS: usize = 3;

impl Discovery {
    pub fn new(dir: PathBuf, app_id: Option<String>) -> Discovery {
        Discovery {
            dir,
            app_id,
            known: HashMap::new(),
            last_others: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn info(&mut self, socket: &AgentSocket, timeout: Duration) -> Result<AppInfo, FetchError> {
        let key = (socket.path.clone(), socket.pid, socket.modified);
        let endpoint = Endpoint::Unix(socket.path.clone());
        let answer = wire::request(&endpoint, Op::AppInfo, timeout, 64 << 10)?;
        let info = AppInfo::parse(&answer.bytes)
            .map_err(|e| FetchError::new(FailureKind::Other, format!("{endpoint}: {e}")))?;
        self.known.insert(key, info.clone());
        Ok(info)
    }

    /// The socket to talk to now. `Refused` when no live agent matches: the process is gone or
    /// has not opened its agent yet.
    pub fn find(&mut self, timeout: Duration) -> Result<AgentSocket, FetchError> {
        let all = sockets(&self.dir);
        self.known.retain(|(path, pid, m), _| {
            all.iter()
                .any(|s| (&s.path, s.pid, &s.modified) == (path, *pid, m))
        });
        let mut stale = 0;
        let mut others = Vec::new();
        let mut matching = Vec::new();
        // Each live socket gets a short, bounded question: a stalled decoy must not eat the
        // whole request budget.
        let ask = timeout.min(Duration::from_millis(500));
        for socket in all {
            // Another application's answer is remembered; a candidate is asked again, so a
            // dead one is seen dead before it is chosen.
            let key = (socket.path.clone(), socket.pid, socket.modified);
            let remembered = self.known.get(&key).filter(|info| match &self.app_id {
                Some(id) => !info.is(id),
                None => false,
            });
            let info = match remembered {
                Some(info) => Ok(info.clone()),
                None => self.info(&socket, ask),
            };
            match info {
                Ok(info) => match &self.app_id {
                    Some(id) if !info.is(id) => {
                        others.push(format!("pid {} is {}", socket.pid, info.describe()))
                    }
                    _ => matching.push((socket, info)),
                },
                Err(e) if e.kind == FailureKind::Refused => stale += 1,
                Err(e) => others.push(format!(
                    "pid {} did not answer ({})",
                    socket.pid,
                    e.kind.as_str()
                )),
            }
        }
        if matching.is_empty() {
            let mut parts = vec![format!("{} other agent(s) seen", others.len())];
            if stale > 0 {
                parts.push(format!("{stale} stale socket(s) skipped"));
            }
            if !others.is_empty() && others != self.last_others {
                let mut named = others[..others.len().min(NAMED_OTHERS)].join(", ");
                if others.len() > NAMED_OTHERS {
                    named.push_str(&format!(" and {} more", others.len() - NAMED_OTHERS));
                }
                parts.push(named);
            }
            self.last_others = others;
            return Err(FetchError::new(
                FailureKind::Refused,
                format!(
                    "{}: no live agent{} ({})",
                    self.dir.display(),
                    self.app_id
                        .as_ref()
                        .map(|id| format!(" with app id {id:?}"))
                        .unwrap_or_default(),
                    parts.join("; ")
                ),
            ));
        }
        self.last_others.clear();
        match (&self.app_id, matching.len()) {
            // With an app id, the newest socket wins: a process restarted moments ago.
            (Some(_), _) | (None, 1) => Ok(matching.swap_remove(0).0),
            (None, n) => {
                let list: Vec<String> = matching
                    .iter()
                    .map(|(s, i)| format!("pid {} is {}", s.pid, i.describe()))
                    .collect();
                Err(FetchError::new(
                    FailureKind::Other,
                    format!(
                        "{}: {n} live agents ({}); name one with agent:auto:APP_ID or agent:PID",
                        self.dir.display(),
                        list.join(", ")
                    ),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake agent answering app info with `json` until the test ends; counts its requests.
    fn agent(path: PathBuf, json: &'static str) -> Arc<AtomicUsize> {
        let listener = UnixListener::bind(&path).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                let mut req = [0u8; 14];
                if s.read_exact(&mut req).is_ok() {
                    seen.fetch_add(1, Ordering::Relaxed);
                    let _ = s.write_all(json.as_bytes());
                }
            }
        });
        count
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn names_give_the_pid() {
        assert_eq!(
            pid_from_name(Path::new("/tmp/gops-agent.4242.sock")),
            Some(4242)
        );
        assert_eq!(pid_from_name(Path::new("/tmp/gops-agent.x.sock")), None);
        assert_eq!(pid_from_name(Path::new("/tmp/ctrl.sock")), None);
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(dead_pid()));
    }

    #[test]
    fn app_info_is_read_from_real_and_empty_replies() {
        let real = include_bytes!("../../../testdata/agent/appinfo.json");
        let info = AppInfo::parse(real).unwrap();
        assert_eq!(info.id.as_deref(), Some("record"));
        assert_eq!(info.app_type.as_deref(), Some("controller"));
        assert_eq!(info.version.as_deref(), Some("1.2.3"));
        assert_eq!(AppInfo::parse(b"").unwrap(), AppInfo::default());
        assert!(AppInfo::parse(b"unknown op").is_err());
    }

    #[test]
    fn other_agents_are_counted_in_one_line_and_named_only_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        // Live agents: sockets named with live pids (this test's and its parent's, and pids
        // that only need to parse), each answering as another application.
        for n in 0..5 {
            agent(
                dir.path().join(format!("gops-agent.{}.sock", 100_000 + n)),
                r#"{"id":"router","type":"router"}"#,
            );
        }
        let mut d = Discovery::new(dir.path().to_path_buf(), Some("ctrl".into()));
        let first = d.find(Duration::from_secs(1)).unwrap_err().message;
        assert!(first.contains("5 other agent(s) seen"), "{first}");
        assert!(first.contains("and 2 more"), "{first}");
        assert_eq!(first.matches("pid ").count(), 3, "{first}");
        let again = d.find(Duration::from_secs(1)).unwrap_err().message;
        assert!(!again.contains("pid "), "{again}");
        assert!(
            again.ends_with(r#"no live agent with app id "ctrl" (5 other agent(s) seen)"#),
            "{again}"
        );
        assert!(!again.contains('\n'));
    }

    #[test]
    fn auto_picks_the_app_id_and_skips_decoys_and_stale_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        // Our own pid is alive, so these sockets are asked; pick pids that differ only by name.
        let decoy = agent(
            dir.path().join(format!("gops-agent.{me}.sock")),
            r#"{"id":"decoy","type":"router"}"#,
        );
        // A dead process's socket: nothing accepts on it.
        drop(
            UnixListener::bind(dir.path().join(format!("gops-agent.{}.sock", dead_pid()))).unwrap(),
        );
        let mut d = Discovery::new(dir.path().to_path_buf(), Some("ctrl".into()));
        let e = d.find(Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind, FailureKind::Refused, "{e}");
        assert!(
            e.message.contains("pid") && e.message.contains("decoy"),
            "{e}"
        );
        assert!(e.message.contains("1 stale"), "{e}");

        // The controller comes up: a live process (the parent of this test) with the app id.
        let parent = std::os::unix::process::parent_id();
        let ctrl_path = dir.path().join(format!("gops-agent.{parent}.sock"));
        let ctrl = agent(
            ctrl_path.clone(),
            r#"{"id":"ctrl","type":"controller","version":"2.1.0"}"#,
        );
        let found = d.find(Duration::from_secs(1)).unwrap();
        assert_eq!(found.path, ctrl_path);
        assert_eq!(found.pid, parent);
        d.find(Duration::from_secs(1)).unwrap();
        assert_eq!(decoy.load(Ordering::Relaxed), 1, "the decoy is asked once");
        assert_eq!(
            ctrl.load(Ordering::Relaxed),
            2,
            "a candidate is asked each time"
        );

        // Without an app id, two live agents are ambiguous.
        let mut any = Discovery::new(dir.path().to_path_buf(), None);
        let e = any.find(Duration::from_secs(1)).unwrap_err();
        assert!(e.message.contains("agent:auto:APP_ID"), "{e}");
    }
}
