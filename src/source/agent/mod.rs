//! The gops-style IPC agent that OpenZiti controllers and routers embed (`agent:` targets):
//! the only way into a controller, which has no HTTP pprof. Heap profiles, MemStats, runtime
//! stats and goroutine stack dumps over a unix socket or TCP, one connection per request.

pub mod discover;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use discover::{AppInfo, Discovery, pid_alive, pid_from_name};
use wire::{Endpoint, Op};

use super::{
    AskingBuild, BodyTap, FailureKind, FetchError, Fetching, Reply, Source, SourceKind, Want,
};
use crate::model::build::BuildInfo;

/// What follows `agent:` in a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentTarget {
    /// `agent:unix:/path/to.sock`
    Unix(PathBuf),
    /// `agent:tcp:HOST:PORT`
    Tcp(String),
    /// `agent:PID`: the agent's default socket of that process.
    Pid(u32),
    /// `agent:auto[:APP_ID]`: whichever live agent of the folder has the app id.
    Auto(Option<String>),
}

impl AgentTarget {
    /// Parses a whole target (`agent:…`).
    pub fn parse(target: &str) -> Result<AgentTarget, String> {
        let rest = target
            .strip_prefix("agent:")
            .ok_or_else(|| format!("{target}: not an agent target"))?;
        let bad = |why: &str| {
            format!(
                "{target}: {why} (expected agent:unix:/path.sock, agent:tcp:HOST:PORT, agent:PID or agent:auto[:APP_ID])"
            )
        };
        if let Some(path) = rest.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad("no socket path"));
            }
            Ok(AgentTarget::Unix(PathBuf::from(path)))
        } else if let Some(addr) = rest.strip_prefix("tcp:") {
            match addr.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    Ok(AgentTarget::Tcp(addr.to_string()))
                }
                _ => Err(bad("a tcp target needs HOST:PORT")),
            }
        } else if rest == "auto" {
            Ok(AgentTarget::Auto(None))
        } else if let Some(id) = rest.strip_prefix("auto:") {
            if id.is_empty() {
                return Err(bad("empty app id"));
            }
            Ok(AgentTarget::Auto(Some(id.to_string())))
        } else if let Ok(pid) = rest.parse::<u32>() {
            Ok(AgentTarget::Pid(pid))
        } else {
            Err(bad("unknown form"))
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    /// Where default sockets live: the target's temp dir (`$TMPDIR`, else `/tmp`), or a volume
    /// shared with its container.
    pub dir: Option<PathBuf>,
    /// Largest reply accepted.
    pub max_body: u64,
}

/// An agent `auto` found: its socket, the pid its name gives, and the pid it answered from.
#[derive(Debug, Clone)]
struct Settled {
    endpoint: Endpoint,
    name_pid: Option<u32>,
    peer_pid: Option<u32>,
}

pub struct AgentSource {
    target: String,
    how: AgentTarget,
    dir: PathBuf,
    discovery: Option<Discovery>,
    /// The socket `auto` settled on, until it stops answering.
    current: Option<Settled>,
    max_body: u64,
    pid: Arc<AtomicU32>,
}

impl AgentSource {
    pub fn new(target: &str, options: &AgentOptions) -> Result<AgentSource, FetchError> {
        let how = AgentTarget::parse(target).map_err(|e| FetchError::new(FailureKind::Other, e))?;
        let dir = options.dir.clone().unwrap_or_else(std::env::temp_dir);
        let discovery = match &how {
            AgentTarget::Auto(id) => Some(Discovery::new(dir.clone(), id.clone())),
            _ => None,
        };
        Ok(AgentSource {
            target: target.to_string(),
            how,
            dir,
            discovery,
            current: None,
            max_body: if options.max_body == 0 {
                512 << 20
            } else {
                options.max_body
            },
            pid: Arc::new(AtomicU32::new(0)),
        })
    }

    /// The pid of the process answering now (0 while unknown), shared with the memory sampler
    /// so it follows the target across restarts.
    pub fn pid_cell(&self) -> Arc<AtomicU32> {
        self.pid.clone()
    }

    fn fixed(&self) -> Option<(Endpoint, Option<u32>)> {
        match &self.how {
            AgentTarget::Unix(path) => Some((Endpoint::Unix(path.clone()), pid_from_name(path))),
            AgentTarget::Tcp(addr) => Some((Endpoint::Tcp(addr.clone()), None)),
            AgentTarget::Pid(pid) => Some((
                Endpoint::Unix(self.dir.join(format!("gops-agent.{pid}.sock"))),
                Some(*pid),
            )),
            AgentTarget::Auto(_) => None,
        }
    }

    /// The endpoint without looking: a fixed target's, or the socket `auto` settled on while
    /// its process lives (forgotten once it is gone).
    fn known_endpoint(&mut self) -> Option<(Endpoint, Option<u32>)> {
        if let Some(fixed) = self.fixed() {
            return Some(fixed);
        }
        if let Some(Settled {
            peer_pid: Some(pid),
            ..
        }) = &self.current
        {
            if !pid_alive(*pid) {
                self.current = None;
            }
        }
        self.current
            .as_ref()
            .map(|current| (current.endpoint.clone(), current.name_pid))
    }

    /// The endpoint to ask and the pid its name gives: fixed targets as given; `auto` keeps its
    /// socket while its process lives and looks again otherwise.
    fn endpoint(&mut self, timeout: Duration) -> Result<(Endpoint, Option<u32>), FetchError> {
        if let Some(known) = self.known_endpoint() {
            return Ok(known);
        }
        let dir = self.dir.clone();
        let discovery = match (&mut self.discovery, &self.how) {
            (Some(d), _) => d,
            (slot, AgentTarget::Auto(id)) => slot.insert(Discovery::new(dir, id.clone())),
            (None, _) => unreachable!("only auto targets discover"),
        };
        let socket = discovery.find(timeout)?;
        Ok(self.settle_on(socket))
    }

    /// The socket discovery found is the one asked from now on, its pid as its name gives it.
    fn settle_on(&mut self, socket: discover::AgentSocket) -> (Endpoint, Option<u32>) {
        let endpoint = Endpoint::Unix(socket.path);
        self.current = Some(Settled {
            endpoint: endpoint.clone(),
            name_pid: Some(socket.pid),
            peer_pid: None,
        });
        (endpoint, Some(socket.pid))
    }

    /// The endpoint as [`AgentSource::endpoint`] gives it, without blocking: looking through
    /// the folder (which asks each agent there) runs on tokio's blocking pool.
    async fn endpoint_async(
        &mut self,
        timeout: Duration,
    ) -> Result<(Endpoint, Option<u32>), FetchError> {
        if let Some(known) = self.known_endpoint() {
            return Ok(known);
        }
        // Away while it looks; made anew should a stop drop this future meanwhile.
        let mut discovery = match (self.discovery.take(), &self.how) {
            (Some(d), _) => d,
            (None, AgentTarget::Auto(id)) => Discovery::new(self.dir.clone(), id.clone()),
            (None, _) => unreachable!("only auto targets discover"),
        };
        let looked = tokio::task::spawn_blocking(move || {
            let found = discovery.find(timeout);
            (discovery, found)
        })
        .await;
        let (discovery, found) = match looked {
            Ok(done) => done,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.discovery = Some(discovery);
        Ok(self.settle_on(found?))
    }

    /// [`AgentSource::ask`] on tokio's sockets.
    /// `tap` is told the pieces of the reply as they are read.
    async fn ask_async(
        &mut self,
        op: Op,
        timeout: Duration,
        mut tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<Reply, FetchError> {
        let deadline = Instant::now() + timeout;
        let (endpoint, name_pid) = self.endpoint_async(timeout).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        let first =
            wire::request_async(&endpoint, op, left, self.max_body, tap.as_deref_mut()).await;
        match first {
            Err(e) if e.kind == FailureKind::Refused && self.discovers() => {
                self.current = None;
                let (endpoint, name_pid) = self
                    .endpoint_async(deadline.saturating_duration_since(Instant::now()))
                    .await?;
                let left = deadline.saturating_duration_since(Instant::now());
                let answer = wire::request_async(&endpoint, op, left, self.max_body, tap).await?;
                Ok(self.answered(answer, name_pid))
            }
            Err(e) => Err(e),
            Ok(answer) => Ok(self.answered(answer, name_pid)),
        }
    }

    fn discovers(&self) -> bool {
        matches!(self.how, AgentTarget::Auto(_))
    }

    async fn build_info_native(&mut self, timeout: Duration) -> Option<BuildInfo> {
        let mut build = BuildInfo::default();
        if let Ok(reply) = self.ask_async(Op::AppInfo, timeout, None).await {
            build.read_app_info(&reply.bytes);
        }
        if let Ok(reply) = self.ask_async(Op::Version, timeout, None).await {
            build.go_version = go_version(&reply.bytes);
        }
        (!build.is_empty()).then_some(build)
    }

    fn ask(&mut self, op: Op, timeout: Duration) -> Result<Reply, FetchError> {
        let deadline = Instant::now() + timeout;
        let (endpoint, name_pid) = self.endpoint(timeout)?;
        let left = deadline.saturating_duration_since(Instant::now());
        match wire::request(&endpoint, op, left, self.max_body) {
            // The process behind a remembered socket is gone: look for its successor now, so a
            // restart costs no interval.
            Err(e) if e.kind == FailureKind::Refused && self.discovers() => {
                self.current = None;
                let (endpoint, name_pid) =
                    self.endpoint(deadline.saturating_duration_since(Instant::now()))?;
                let left = deadline.saturating_duration_since(Instant::now());
                let answer = wire::request(&endpoint, op, left, self.max_body)?;
                Ok(self.answered(answer, name_pid))
            }
            Err(e) => Err(e),
            Ok(answer) => Ok(self.answered(answer, name_pid)),
        }
    }

    /// The reply names the process that sent it: the socket's peer when known (a pid of this
    /// namespace, which the memory sampler can read), else the pid in the socket's name.
    fn answered(&mut self, answer: wire::Answer, name_pid: Option<u32>) -> Reply {
        if let Some(pid) = answer.peer_pid {
            self.pid.store(pid, Ordering::Relaxed);
            if let Some(current) = &mut self.current {
                current.peer_pid = Some(pid);
            }
        }
        Reply {
            bytes: answer.bytes,
            pid: answer.peer_pid.or(name_pid),
            made: None,
        }
    }
}

impl Source for AgentSource {
    fn target(&self) -> &str {
        &self.target
    }

    fn kind(&self) -> SourceKind {
        SourceKind::Agent
    }

    fn supports(&self, _want: Want) -> bool {
        true
    }

    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        self.ask(op_for(want), timeout)
    }

    fn fetch_async<'a>(
        &'a mut self,
        want: Want,
        timeout: Duration,
        tap: Option<&'a mut dyn BodyTap>,
    ) -> Option<Fetching<'a>> {
        Some(Box::pin(self.ask_async(op_for(want), timeout, tap)))
    }

    fn build_info_async(&mut self, timeout: Duration) -> Option<AskingBuild<'_>> {
        Some(Box::pin(self.build_info_native(timeout)))
    }

    /// App info (op 0x0a: version and app id) and the Go version (op 0x04) of the process
    /// answering now. Either may fail alone: what one of them says is still worth keeping.
    fn build_info(&mut self, timeout: Duration) -> Option<BuildInfo> {
        let mut build = BuildInfo::default();
        if let Ok(reply) = self.ask(Op::AppInfo, timeout) {
            build.read_app_info(&reply.bytes);
        }
        if let Ok(reply) = self.ask(Op::Version, timeout) {
            build.go_version = go_version(&reply.bytes);
        }
        (!build.is_empty()).then_some(build)
    }
}

fn op_for(want: Want) -> Op {
    match want {
        Want::Heap => Op::HeapProfile,
        Want::Goroutine => Op::StackTrace,
        Want::MemStats => Op::MemStats,
        Want::Stats => Op::Stats,
    }
}

/// What the app info op's reply says of the build: its version and app id.
trait ReadAppInfo {
    fn read_app_info(&mut self, bytes: &[u8]);
}

impl ReadAppInfo for BuildInfo {
    fn read_app_info(&mut self, bytes: &[u8]) {
        if let Ok(info) = AppInfo::parse(bytes) {
            self.version = info.version.filter(|v| !v.trim().is_empty());
            self.app_id = info.id.or(info.alias).filter(|v| !v.trim().is_empty());
        }
    }
}

/// The Go version op's reply (`go1.26.0\n`); anything else (an error text) is not one.
fn go_version(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    // Release builds say `go1.26.8`; toolchains built from source `devel go1.27-abc …`.
    let plausible = (text.starts_with("go1") || text.starts_with("devel go"))
        && text.len() <= 128
        && !text.contains('\n');
    plausible.then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(
            AgentTarget::parse("agent:unix:/tmp/a.sock").unwrap(),
            AgentTarget::Unix("/tmp/a.sock".into())
        );
        assert_eq!(
            AgentTarget::parse("agent:tcp:127.0.0.1:6000").unwrap(),
            AgentTarget::Tcp("127.0.0.1:6000".into())
        );
        assert_eq!(
            AgentTarget::parse("agent:4242").unwrap(),
            AgentTarget::Pid(4242)
        );
        assert_eq!(
            AgentTarget::parse("agent:auto").unwrap(),
            AgentTarget::Auto(None)
        );
        assert_eq!(
            AgentTarget::parse("agent:auto:ctrl").unwrap(),
            AgentTarget::Auto(Some("ctrl".into()))
        );
        for bad in [
            "agent:",
            "agent:unix:",
            "agent:tcp:nohost",
            "agent:auto:",
            "agent:x",
        ] {
            assert!(AgentTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_go_version_reply_is_read_and_error_text_is_not() {
        let real = include_bytes!("../../../testdata/agent/version.txt");
        assert_eq!(go_version(real).as_deref(), Some("go1.26.8"));
        assert_eq!(
            go_version(b"devel go1.27-abc Mon").as_deref(),
            Some("devel go1.27-abc Mon")
        );
        assert_eq!(go_version(b"unknown op"), None);
    }

    #[test]
    fn a_pid_target_names_the_default_socket() {
        let options = AgentOptions {
            dir: Some("/run/shared".into()),
            max_body: 0,
        };
        let s = AgentSource::new("agent:77", &options).unwrap();
        assert_eq!(
            s.fixed(),
            Some((
                Endpoint::Unix("/run/shared/gops-agent.77.sock".into()),
                Some(77)
            ))
        );
        let s = AgentSource::new("agent:unix:/x/gops-agent.12.sock", &options).unwrap();
        assert_eq!(s.fixed().unwrap().1, Some(12));
    }
}
