//! Sources pull bytes from a live target: Go's net/http/pprof over HTTP(S), the OpenZiti agent
//! socket, and Envoy's admin port beside them. A source only fetches; it never decodes or stores.
//! Beside them, what every floor above reads of the machine: a process's and a memory cgroup's
//! figures (`procmem`), memory cgroups themselves (`cgroup`), the process behind a `proc:` target
//! (`procfind`).
//!
//! # Native fetching
//!
//! `Source::fetch_async` returns a future for sources that have one: HTTP(S) and Envoy over
//! reqwest (HTTP/1.1, rustls on the ring provider: the bundled webpki roots or `--cacert`'s,
//! `--cert`/`--key` for mutual TLS, `--insecure` as a verifier that takes any certificate but
//! still checks the handshake signatures; `src/source/tls.rs`), with the body read chunk by chunk
//! against `--max-body` and one deadline for the whole request; the agent over tokio's
//! `UnixStream`/`TcpStream` (`wire::request_async`, with SO_PEERCRED). The failure kinds are
//! the ones the blocking code gives (refused, timeout, reset, status, too-large, tls, other),
//! classified from reqwest's error chain, rustls errors found inside io::Error payloads. The
//! blocking `fetch` of these sources (the `envoy` command, tests) runs the same future on a
//! runtime of its own. A source whose work blocks (proc) gives only `fetch`, which the collector
//! runs on tokio's blocking pool.
//!
//! Through a `BodyTap`, a source with a native fetch tells the collector a good body's pieces as
//! they arrive (`collect/intake.rs` says what it does with them).
//!
//! # Dependencies
//!
//! **ureq.** Nothing in `src/` uses it: it stays only as a dev-dependency, for
//! `tests/cli/proc.rs`, which asks a Go fixture for its own heap profile over plain HTTP (no TLS
//! features). reqwest and rustls were already dependencies (the push), so the collector adds no
//! crate for its native fetching; tokio gains its `net` and `io-util` features.

pub mod agent;
pub mod buildinfo;
pub mod cgroup;
pub mod envoy;
pub mod http;
pub mod memstats;
pub mod proc;
pub mod procfiles;
pub mod procfind;
pub mod procmem;
pub mod target;
pub(crate) mod tls;

pub use target::{Secret, Target};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::model::build::BuildInfo;
use crate::model::capture::GcClock;

/// What the collector asks a target for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Want {
    Heap,
    Goroutine,
    /// Runtime MemStats (HTTP: the `# runtime.MemStats` block of `heap?debug=1`; agent: op 0x03).
    MemStats,
    /// Runtime counts: goroutines, OS threads, GOMAXPROCS, CPUs (agent: op 0x07).
    Stats,
}

impl Want {
    pub fn as_str(self) -> &'static str {
        match self {
            Want::Heap => "heap",
            Want::Goroutine => "goroutine",
            Want::MemStats => "memstats",
            Want::Stats => "stats",
        }
    }
}

/// What kind of target a source talks to: how it is paced, and its name in `run.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// Go's net/http/pprof over HTTP(S).
    Http,
    /// The gops-style agent socket.
    Agent,
    /// Envoy's admin port.
    Envoy,
    /// A Go process's heap read from outside (`proc:`).
    Proc,
}

impl SourceKind {
    /// The name `run.json` keeps (`"source"`).
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Http => "http",
            SourceKind::Agent => "agent",
            SourceKind::Envoy => "envoy",
            SourceKind::Proc => "proc",
        }
    }

    /// True when answering costs the target (it renders the profile), so the collector keeps
    /// its share of time under `max_duty`. The proc source reads memory from outside: false.
    pub fn costs_target(self) -> bool {
        self != SourceKind::Proc
    }
}

/// `kind == "envoy"`: the kind against its `run.json` name.
impl PartialEq<&str> for SourceKind {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reply as the target served it.
#[derive(Debug, Clone)]
pub struct Reply {
    pub bytes: Vec<u8>,
    /// The target's process id, when the source knows it (agent sockets name it).
    pub pid: Option<u32>,
    /// From a source that made the profile itself and gzipped it (proc): what it knew while
    /// making it. `None` from a source that relays what the target served.
    pub made: Option<Made>,
}

/// What a source that makes its profiles (proc) hands over beside the gzipped bytes.
#[derive(Debug, Clone)]
pub struct Made {
    /// The length of what the bytes gunzip to (the protobuf).
    pub len: u64,
    /// The protobuf's totals and content hash, as `decode::summarize` gives them: the
    /// collector neither gunzips nor sums the bytes again.
    pub summary: crate::decode::Summary,
    /// The protobuf itself, when the collector must decode it to index the capture (no
    /// `sites`); `None` otherwise, and the source keeps its buffer for the next one.
    pub raw: Option<Vec<u8>>,
    /// A heap capture's figures per site, named as [`Source::name_sites`] asked: the site
    /// index's entry, with no profile decoded again.
    pub sites: Option<MadeSites>,
    /// A heap capture's GC clock, read in the same consistent read as its profile.
    pub gc: Option<GcClock>,
}

/// One heap capture's figures per site (the site index's rows): every sample type summed over
/// the samples of each site, as `index::build::from_profile` sums them from the decoded
/// profile.
#[derive(Debug, Clone, PartialEq)]
pub struct MadeSites {
    /// The main module the sites were named for (`None`: the guess of package `main` and
    /// module paths): the entry stands for the capture only when that is its boot cycle's.
    pub module: Option<String>,
    pub sample_types: Vec<String>,
    /// The sample type pprof shows by default (an index into `sample_types`).
    pub default_type: usize,
    /// Per site, sorted by name: one value per sample type.
    pub sites: Vec<(String, Vec<i64>)>,
}

/// Names the site of a heap sample from its frames' function names, leaf first.
pub type HeapSiteNamer = Box<dyn FnMut(&[&str]) -> String + Send>;

/// Makes a [`HeapSiteNamer`] for the program whose main module is given: the site index's
/// rules (`index::site_naming`), handed down by the collector, so that a source never names
/// sites by rules of its own.
pub type SiteNaming = std::sync::Arc<dyn Fn(Option<&str>) -> HeapSiteNamer + Send + Sync>;

/// Why a fetch failed, in classes the collector acts on: the one failure type (`model::failure`).
pub use crate::model::failure::FailureKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchError {
    pub kind: FailureKind,
    pub message: String,
}

impl FetchError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> FetchError {
        FetchError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FetchError {}

/// Told the pieces of a reply's body in order as they arrive, so the collector can store and
/// check a profile while the rest is still on its way. A source tells only the body of a
/// good answer (an HTTP 200 within the size cap); a request that then fails may have told
/// part of one, and the collector drops it with the error.
pub trait BodyTap: Send {
    fn piece(&mut self, bytes: &[u8]);
}

/// A fetch in progress that never blocks its thread; dropping it cancels the request.
pub type Fetching<'a> = Pin<Box<dyn Future<Output = Result<Reply, FetchError>> + Send + 'a>>;

/// A build lookup in progress (see [`Source::build_info`]).
pub type AskingBuild<'a> = Pin<Box<dyn Future<Output = Option<BuildInfo>> + Send + 'a>>;

/// A live target. One request at a time: the collector never calls `fetch` concurrently.
pub trait Source: Send {
    /// The target as the user named it, for messages.
    fn target(&self) -> &str;
    fn kind(&self) -> SourceKind;
    fn supports(&self, want: Want) -> bool;
    /// Fetches, blocking the thread until the answer or the timeout.
    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError>;
    /// The same fetch as a future that never blocks its thread, for a source that has one
    /// (HTTP, Envoy, the agent), telling `tap`, if given, the body's pieces as they arrive (a
    /// source that cannot tell them leaves it untold, and the collector takes the body once it
    /// is whole). `None` for a source whose work blocks (proc reads the target's memory): the
    /// collector runs its `fetch` on tokio's blocking pool instead.
    fn fetch_async<'a>(
        &'a mut self,
        _want: Want,
        _timeout: Duration,
        _tap: Option<&'a mut dyn BodyTap>,
    ) -> Option<Fetching<'a>> {
        None
    }
    /// The build of the process the source talks to now, asked once per boot cycle after its
    /// first answer. `None` when the source cannot tell (plain HTTP pprof).
    fn build_info(&mut self, _timeout: Duration) -> Option<BuildInfo> {
        None
    }
    /// [`Source::build_info`] as a future, like [`Source::fetch_async`].
    fn build_info_async(&mut self, _timeout: Duration) -> Option<AskingBuild<'_>> {
        None
    }
    /// How to name heap sites, for a source that can give each heap capture's figures per
    /// site as it makes it ([`Made::sites`]); others ignore it.
    fn name_sites(&mut self, _naming: SiteNaming) {}
}
