//! From a target string to what a collector needs: the source that talks to it, the memory
//! probe that watches it from outside, and the node name it gets in a cluster run. The
//! command line only turns flags into [`TargetOptions`]; the wiring lives here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::source::agent::{AgentOptions, AgentSource, AgentTarget};
use crate::source::envoy::EnvoySource;
use crate::source::http::{HttpOptions, HttpSource};
use crate::source::proc::follow::{Attacher, FollowSource};
use crate::source::proc::{ProcError, ProcSource};
use crate::source::procfind::ProcSelector;
use crate::source::procmem::{CgroupMemory, MemoryProbe};
use crate::source::{FailureKind, FetchError, Source, Target};

#[derive(Debug, Error)]
pub enum TargetError {
    /// The target or one of its options is malformed: nothing was contacted.
    #[error("{0}")]
    Usage(String),
    /// The target is well-formed but cannot be reached now (a `proc:PID` that is gone).
    #[error("{0}")]
    Unreachable(String),
}

/// How to reach one target and watch its memory, already validated by the caller.
#[derive(Debug, Clone, Default)]
pub struct TargetOptions {
    pub http: HttpOptions,
    /// Where `agent:PID` and `agent:auto` look for sockets.
    pub agent_dir: Option<PathBuf>,
    /// Sample this process's memory (`--pid`).
    pub pid: Option<u32>,
    /// Sample this memory cgroup (`--cgroup`).
    pub cgroup: Option<PathBuf>,
    /// The heap interval: how often a following proc target looks for its process.
    pub interval: Duration,
    /// The per-request timeout, which bounds a proc target's attach too.
    pub timeout: Duration,
}

/// A target ready to be collected.
pub struct OpenedTarget {
    /// The target as the user gave it, its secrets hidden.
    pub target: String,
    pub source: Box<dyn Source>,
    /// Where its memory is sampled from outside, when anywhere.
    pub probe: Option<MemoryProbe>,
}

impl OpenedTarget {
    /// The probe that names the process behind a reply which does not name it (HTTP, Envoy):
    /// a new pid there opens a new boot cycle.
    pub fn pid_probe(&self) -> Option<MemoryProbe> {
        self.probe
            .clone()
            .filter(|p| !matches!(p, MemoryProbe::Follow(_)))
    }
}

const KNOWN_TARGETS: &str = "expected http://HOST:PORT, https://…, envoy:http://HOST:PORT, \
     agent:unix:/path.sock, agent:tcp:HOST:PORT, agent:PID, agent:auto[:APP_ID], proc:PID, \
     proc:exe:NAME or proc:cgroup:PATH";

/// Opens the source a target names, and the memory probe that goes with it. Only the HTTP
/// and Envoy sources see a target's secrets; everything else gets its shown form.
pub fn open_target(target: &Target, options: &TargetOptions) -> Result<OpenedTarget, TargetError> {
    let spec = target.as_str();
    let usage = TargetError::Usage;
    let mut probe = match (&options.cgroup, options.pid) {
        (Some(path), _) => Some(MemoryProbe::Cgroup(
            CgroupMemory::open(path).map_err(usage)?,
        )),
        (None, Some(pid)) => {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(usage(format!(
                    "--pid {pid}: there is no process {pid} (not in /proc; in a container, \
                     the pid as this PID namespace sees it)"
                )));
            }
            Some(MemoryProbe::Pid(pid))
        }
        (None, None) => None,
    };
    if options.agent_dir.is_some() && !spec.starts_with("agent:") {
        return Err(usage(format!(
            "--agent-dir is for agent:PID and agent:auto targets, not {spec}"
        )));
    }
    let source: Box<dyn Source> = if spec.starts_with("http://") || spec.starts_with("https://") {
        Box::new(HttpSource::new(target, &options.http).map_err(|e| usage(e.message))?)
    } else if spec.starts_with("envoy:") {
        Box::new(EnvoySource::new(target, &options.http).map_err(|e| usage(e.message))?)
    } else if spec.starts_with("agent:") {
        let agent = AgentSource::new(
            spec,
            &AgentOptions {
                dir: options.agent_dir.clone(),
                max_body: options.http.max_body,
            },
        )
        .map_err(|e| usage(e.message))?;
        if probe.is_none() {
            probe = Some(MemoryProbe::Follow(agent.pid_cell()));
        }
        Box::new(agent)
    } else if let Some(selector) = ProcSelector::parse(spec) {
        // proc:exe:NAME, proc:cgroup:PATH: whichever process that is now, across restarts.
        let selector = selector.map_err(usage)?;
        if let ProcSelector::Exe(name) = &selector {
            crate::source::procfind::check_exe_target(spec, name).map_err(usage)?;
        }
        let follow = FollowSource::new(spec, selector, proc_attacher(spec), options.interval);
        if probe.is_none() {
            let cgroup = follow.finder().cgroup_dir();
            probe = Some(match cgroup.and_then(|d| CgroupMemory::open(&d).ok()) {
                Some(cg) => MemoryProbe::Cgroup(cg),
                None => MemoryProbe::Follow(follow.pid_cell()),
            });
        }
        Box::new(follow)
    } else if let Some(pid) = crate::source::proc::parse_target(spec) {
        let pid = pid.map_err(usage)?;
        let proc = ProcSource::attach_within(pid, spec.to_string(), options.timeout)
            .map_err(|e| TargetError::Unreachable(e.to_string()))?;
        if probe.is_none() {
            probe = Some(MemoryProbe::Pid(pid));
        }
        Box::new(proc)
    } else {
        return Err(usage(format!("{spec}: unknown target ({KNOWN_TARGETS})")));
    };
    Ok(OpenedTarget {
        target: spec.to_string(),
        source,
        probe,
    })
}

/// Attaches the proc source to each process a following target finds; a process that is
/// gone by then is refused (gone), anything else an error for that attempt.
pub fn proc_attacher(target: &str) -> Attacher {
    let target = target.to_string();
    Box::new(move |pid, timeout| {
        ProcSource::attach_within(pid, target.clone(), timeout)
            .map(|s| Box::new(s) as Box<dyn Source>)
            .map_err(|e| {
                let kind = match e {
                    ProcError::NoProcess { .. } => FailureKind::Refused,
                    _ => FailureKind::Other,
                };
                FetchError::new(kind, e.to_string())
            })
    })
}

/// The name a target's node gets in a cluster run when `--name` gives none: the agent's app
/// id, the executable of `proc:exe:`, the last part of a `proc:cgroup:` path, `pid-N` for
/// `proc:N`, else host and port (`127.0.0.1-6060`).
pub fn node_name(spec: &str) -> String {
    let name = if let Ok(AgentTarget::Auto(Some(id))) = AgentTarget::parse(spec) {
        id
    } else if let Ok(AgentTarget::Pid(pid)) = AgentTarget::parse(spec) {
        format!("agent-{pid}")
    } else if let Ok(AgentTarget::Unix(path)) = AgentTarget::parse(spec) {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else if let Ok(AgentTarget::Tcp(addr)) = AgentTarget::parse(spec) {
        addr
    } else if let Some(Ok(selector)) = ProcSelector::parse(spec) {
        match selector {
            ProcSelector::Exe(name) => name,
            ProcSelector::Cgroup(path) => path
                .components()
                .next_back()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default(),
            ProcSelector::Launched(_) => String::new(),
        }
    } else if let Some(Ok(pid)) = crate::source::proc::parse_target(spec) {
        format!("pid-{pid}")
    } else {
        // A URL (http, https, envoy:http…): its host and port.
        let url = spec.strip_prefix("envoy:").unwrap_or(spec);
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let authority = rest.split('/').next().unwrap_or(rest);
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        authority.to_string()
    };
    safe_name(&name)
}

/// A node name usable as one directory name: anything but letters, digits, `.`, `_` and `-`
/// becomes `-`; never empty, never `.` or `..`.
pub fn safe_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cleaned = cleaned.trim_matches('-').to_string();
    if cleaned.is_empty() || cleaned.chars().all(|c| c == '.') {
        "node".to_string()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_come_from_the_target() {
        assert_eq!(node_name("agent:auto:ctrl1"), "ctrl1");
        assert_eq!(node_name("proc:exe:ziti"), "ziti");
        assert_eq!(
            node_name("proc:cgroup:/sys/fs/cgroup/memory/router2"),
            "router2"
        );
        assert_eq!(node_name("proc:4242"), "pid-4242");
        assert_eq!(node_name("http://127.0.0.1:6060"), "127.0.0.1-6060");
        assert_eq!(
            node_name("https://user:pw@host.example:8443/debug/pprof/heap"),
            "host.example-8443"
        );
        assert_eq!(node_name("envoy:http://10.0.0.2:9901"), "10.0.0.2-9901");
        assert_eq!(node_name("agent:tcp:10.0.0.3:1234"), "10.0.0.3-1234");
        assert_eq!(node_name("agent:unix:/tmp/ctrl.sock"), "ctrl");
    }

    #[test]
    fn a_name_is_one_safe_directory_name() {
        assert_eq!(safe_name("../etc"), "..-etc");
        assert_eq!(safe_name(".."), "node");
        assert_eq!(safe_name("a/b c"), "a-b-c");
        assert_eq!(safe_name(""), "node");
    }

    #[test]
    fn an_unknown_target_is_a_usage_error_listing_the_forms() {
        let err = open_target(&"ftp://x".into(), &TargetOptions::default())
            .err()
            .expect("refused");
        assert!(matches!(err, TargetError::Usage(_)));
        assert!(err.to_string().contains("ftp://x: unknown target"), "{err}");
    }
}
