//! Shrinks one decoded profile to what the growth analysis keeps of it: per-site figures
//! keyed by name, so builds with different addresses compare and the profile can be dropped.
//!
//! # Sites named by the target's own code (`SiteNamer`)
//!
//! A site (heap or goroutine) is named by the first frame of its stack in the target's own code,
//! with the leaf beside it when they differ: `main.(*client).queueOutbound (leaf main.init.func1)`
//! for a `sync.Pool` whose `New` func allocates, `main.(*client).readLoop (leaf net.(*netFD).Read)`
//! for a goroutine parked in the standard library. Own code is package `main` and the packages of
//! the main module, whose path the collector reads from the binary's build info (`mod` line) into
//! the cycle record (`build.module`); other modules are libraries, as the standard library is, so
//! a WAL replay through a protobuf decoder is named by the main module's frame that called it
//! (`OwnCode`). Without a recorded module (an HTTP target on another host, older runs) it is
//! guessed: package `main` or any module path (a first path element with a dot). The runtime and
//! `internal/…` are never own code. An own frame called by a library (a callback: a pool's `New`,
//! a sort's less) gives way to the own frame that called the library. The index uses the same
//! `SiteNamer` with each cycle's own code (`index::OwnCodes`, read from the cycle records by the
//! live indexer and by every rebuild alike, so an entry names its sites as a rebuild would: the
//! collector queues a cycle's first capture for indexing only after its cycle record), and its
//! header hashes reduce.rs, so older indexes are rebuilt.
//!
//! A user names their own code with `--own PREFIX,…` when recording (`collect`, `run`, `watch`:
//! kept in run.json) or on the commands that name sites (`growth`, `report`, `check`, `compare`,
//! `flame`, replacing the recorded ones; `top` names leaves as pprof does): those module
//! prefixes, package `main` and the main module are own code, and the guesses give way to them
//! (`OwnCode::named`: a sibling module of the organisation is then a library unless named, and
//! without a recorded main module every other module is). The index's entries name sites by the
//! recording's own code, its recorded prefixes included (its header is keyed by them), so an
//! analysis told other prefixes (`RunDir::own_named`) reads every capture's profile and keeps
//! nothing in the index (`index::SiteSource`): the same recording read twice with the same flags
//! says the same, and read with `--own` names its sites by it.
//!
//! In JSON (`growth`, `compare`, `summary.json`) a site is three fields, written by
//! `serialize_site` from the one name: `name`, the leaf function as pprof spells it (the contract
//! other tools read, as `go tool pprof -top` would name it); `own`, the own frame when it is not
//! the leaf; `site`, the two joined as the words print them.

use std::collections::HashMap;

use crate::decode::stackdump::StackDump;
use crate::model::{LocId, Profile};

/// The pseudo-site that collects what the profile writer itself allocates in the target.
pub const PROFILING_SITE: &str = "(profiling: runtime/pprof)";

/// One site's figures in one capture.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteFigures {
    pub name: String,
    /// In-use bytes (heap) or goroutine count.
    pub value: i64,
    /// Cumulative allocated bytes since process start (heap only).
    pub alloc: i64,
}

fn is_profiler(name: &str) -> bool {
    name.starts_with("runtime/pprof.") || name.starts_with("net/http/pprof.")
}

/// Leaves the profile writer's stacks out of folded stacks ("root;…;leaf"): any stack through
/// `runtime/pprof` or `net/http/pprof` (the `compress/flate` under them included) is the cost
/// of watching, not the target's growth. Returns what is kept and the amount left out.
pub fn without_profiler(stacks: Vec<(String, i64)>) -> (Vec<(String, i64)>, i64) {
    let mut left_out = 0;
    let kept = stacks
        .into_iter()
        .filter(|(stack, v)| {
            let profiler = stack.split(';').any(is_profiler);
            if profiler {
                left_out += v.max(&0);
            }
            !profiler
        })
        .collect();
    (kept, left_out)
}

/// Heap sites: in-use and allocated bytes by site, a site being the first frame of the stack in
/// the target's own code with the leaf function beside it ([`SiteNamer`]); samples under the
/// profile writer go to [`PROFILING_SITE`] so the cost of watching is never mistaken for the
/// culprit. The profiler test is worked out once per function and location.
pub fn heap_sites(profile: &Profile, own: &OwnCode) -> Vec<SiteFigures> {
    let Some(inuse) = profile
        .find_sample_type("inuse_space")
        .or_else(|| (!profile.sample_types.is_empty()).then(|| profile.default_sample_index()))
    else {
        return Vec::new();
    };
    let alloc = profile.find_sample_type("alloc_space");
    let function_profiler: Vec<bool> = profile
        .functions
        .iter()
        .map(|f| is_profiler(profile.str(f.name)))
        .collect();
    let location_profiler: Vec<bool> = (0..profile.locations.len())
        .map(|l| {
            profile.location_frames(LocId(l as u32)).iter().any(|f| {
                f.function
                    .is_some_and(|id| function_profiler[id.0 as usize])
            })
        })
        .collect();
    let mut namer = SiteNamer::new(profile, own);
    let mut sums = SiteSums::default();
    let types = profile.sample_types.len();
    for (i, sample) in profile.samples.iter().enumerate() {
        let values = &profile.values[i * types..(i + 1) * types];
        let (v_inuse, v_alloc) = (values[inuse], alloc.map_or(0, |a| values[a]));
        if v_inuse == 0 && v_alloc == 0 {
            continue;
        }
        let stack = profile.sample_stack(sample);
        if stack.is_empty() {
            continue;
        }
        let name = if stack.iter().any(|l| location_profiler[l.0 as usize]) {
            PROFILING_SITE
        } else {
            namer.name(stack, false).unwrap_or("(unsymbolized)")
        };
        sums.add(name, v_inuse, v_alloc);
    }
    sums.into_sites()
}

/// Goroutine stacks named like heap sites ([`SiteNamer`]): the first frame in the target's
/// own code, with the first frame outside the runtime beside it (a parked goroutine's leaf is
/// always `runtime.gopark`), with their counts.
pub fn goroutine_sites(profile: &Profile, own: &OwnCode) -> Vec<SiteFigures> {
    let types = profile.sample_types.len();
    let index = profile.default_sample_index();
    let mut namer = SiteNamer::new(profile, own);
    let mut sums = SiteSums::default();
    for (i, sample) in profile.samples.iter().enumerate() {
        let count = profile.values[i * types + index];
        let name = namer
            .name(profile.sample_stack(sample), true)
            .unwrap_or("runtime");
        sums.add(name, count, 0);
    }
    sums.into_sites()
}

/// The same per-site figures from a text stack dump (the agent's op 0x01): each stack named by
/// its first frame outside the runtime, so a run collected over the agent shows the same
/// goroutine growth as one collected over HTTP.
pub fn goroutine_dump_sites(dump: &StackDump, own: &OwnCode) -> Vec<SiteFigures> {
    let mut sums = SiteSums::default();
    for stack in &dump.stacks {
        let names: Vec<&str> = stack.frames.iter().map(String::as_str).collect();
        let name = name_frames(&names, true, own);
        sums.add(name.as_deref().unwrap_or("runtime"), stack.count, 0);
    }
    sums.into_sites()
}

/// Figures summed by site name, the one loop under every reduction above: a profile's samples
/// (heap or goroutine) or a dump's stacks, each named, then added to its site.
#[derive(Default)]
struct SiteSums(HashMap<String, (i64, i64)>);

impl SiteSums {
    fn add(&mut self, name: &str, value: i64, alloc: i64) {
        match self.0.get_mut(name) {
            Some(e) => {
                e.0 += value;
                e.1 += alloc;
            }
            None => {
                self.0.insert(name.to_string(), (value, alloc));
            }
        }
    }

    /// The sites by name; a heap site whose figures summed to nothing at all is left out.
    fn into_sites(self) -> Vec<SiteFigures> {
        let mut out: Vec<SiteFigures> = self
            .0
            .into_iter()
            .filter(|&(_, (value, alloc))| value != 0 || alloc != 0)
            .map(|(name, (value, alloc))| SiteFigures { name, value, alloc })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

pub(crate) fn is_runtime(name: &str) -> bool {
    name.starts_with("runtime.") || name.contains(".runtime_") || name.starts_with("internal/")
}

/// Where a function's code lives, for naming a site by code its owner can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The Go runtime (and `internal/…`).
    Runtime,
    /// The standard library (a package path whose first element has no dot), or a frame
    /// without a name.
    Std,
    /// A third-party codec or compressor (protobuf, JSON, YAML, msgpack, snappy, …): the
    /// bytes it allocates belong to whoever asked it to decode or copy.
    Codec,
    /// Another third-party module.
    Library,
    /// The target's own code: package `main`, its main module, and the modules of the same
    /// organisation (`go.etcd.io/raft/v3` under `go.etcd.io/etcd/server/v3`).
    Own,
}

/// Which code is the target's own. With its main module's path (from the binary's build info,
/// recorded in the cycle's `build.module`): that module, package `main`, and the other modules
/// of the same organisation (a project's raft, storage or channel module is its own code,
/// wherever its goroutine started). Without it, a guess: package `main` and every module path
/// (a first path element with a dot). Codecs are never own code, whoever publishes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OwnCode {
    module: Option<String>,
    /// Module path prefixes the user named as their own (`--own`), sorted, without a
    /// trailing `/`; empty when none were named.
    named: Vec<String>,
}

impl OwnCode {
    /// The guess, for a run that recorded no main module.
    pub fn guess() -> OwnCode {
        OwnCode::default()
    }

    /// The code of the main module `path` (`github.com/nats-io/nats-server/v2`); the guess for
    /// an empty path or the placeholder `command-line-arguments` of `go run file.go`.
    pub fn module(path: &str) -> OwnCode {
        let known = !path.is_empty() && path != "command-line-arguments";
        OwnCode {
            module: known.then(|| path.to_string()),
            named: Vec::new(),
        }
    }

    /// The main module's path, when known.
    pub fn main_module(&self) -> Option<&str> {
        self.module.as_deref()
    }

    /// This code and the modules under `prefixes` (`go.etcd.io/`, `github.com/openziti`: whole
    /// path elements, a trailing `/` or not), which replace the guesses: with prefixes named,
    /// own code is package `main`, the main module and those prefixes, and every other module
    /// is a library, of the same organisation or not. The same prefixes in any order, or
    /// repeated, make the same `OwnCode`.
    pub fn named(mut self, prefixes: &[String]) -> OwnCode {
        let mut named: Vec<String> = prefixes
            .iter()
            .map(|p| p.trim().trim_end_matches('/').to_string())
            .filter(|p| !p.is_empty())
            .collect();
        named.sort();
        named.dedup();
        self.named = named;
        self
    }
}

/// The package path of a function named as pprof names it: up to the first dot after the
/// last slash (`github.com/a/b/v2/server.(*client).parse` → `github.com/a/b/v2/server`).
fn package_path(name: &str) -> &str {
    let dir = name.rfind('/').map_or(0, |i| i + 1);
    name[dir..].find('.').map_or(name, |dot| &name[..dir + dot])
}

/// Whether package path `path` lies in module or prefix `prefix` (whole path elements).
fn within(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Code hosts whose second path element is an owner: `github.com/openziti/…`.
const HOSTS: [&str; 6] = [
    "github.com",
    "gitlab.com",
    "bitbucket.org",
    "codeberg.org",
    "gitee.com",
    "gopkg.in",
];

/// The organisation a module path belongs to: its owner on a code host
/// (`github.com/openziti`), else its domain (`go.etcd.io`, `k8s.io`).
fn organisation(module: &str) -> &str {
    let mut parts = module.splitn(3, '/');
    let host = parts.next().unwrap_or(module);
    match parts.next() {
        Some(owner) if HOSTS.contains(&host) => &module[..host.len() + 1 + owner.len()],
        _ => host,
    }
}

/// Third-party codecs and compressors, by module or package path.
const CODECS: [&str; 22] = [
    "google.golang.org/protobuf",
    "github.com/golang/protobuf",
    "github.com/gogo/protobuf",
    "github.com/planetscale/vtprotobuf",
    "github.com/json-iterator/go",
    "github.com/goccy/go-json",
    "github.com/bytedance/sonic",
    "github.com/mailru/easyjson",
    "github.com/tidwall/gjson",
    "github.com/vmihailenco/msgpack",
    "github.com/tinylib/msgp",
    "github.com/ugorji/go/codec",
    "github.com/fxamacker/cbor",
    "gopkg.in/yaml.v2",
    "gopkg.in/yaml.v3",
    "go.yaml.in/yaml",
    "sigs.k8s.io/yaml",
    "github.com/BurntSushi/toml",
    "github.com/pelletier/go-toml",
    "github.com/klauspost/compress",
    "github.com/golang/snappy",
    "github.com/pierrec/lz4",
];

/// The origin of a function named as pprof names it (`net/http.(*conn).serve`,
/// `github.com/nats-io/nats-server/v2/server.(*client).parse`, `main.init.func1`).
pub fn origin(name: &str, own: &OwnCode) -> Origin {
    if is_runtime(name) {
        return Origin::Runtime;
    }
    let first = name.split('/').next().unwrap_or(name);
    let package = if name.contains('/') {
        first
    } else {
        first.split('.').next().unwrap_or(first)
    };
    if package.is_empty() || package == "vendor" || name.starts_with('(') {
        return Origin::Std;
    }
    if package == "main" {
        return Origin::Own;
    }
    let path = package_path(name);
    // The user's word first: a prefix they named is theirs, a dotless module path included.
    if own.named.iter().any(|p| within(path, p)) {
        return Origin::Own;
    }
    if !(name.contains('/') && package.contains('.')) {
        return Origin::Std;
    }
    if own.main_module().is_some_and(|m| within(path, m)) {
        return Origin::Own;
    }
    if CODECS.iter().any(|c| within(path, c)) {
        return Origin::Codec;
    }
    if !own.named.is_empty() {
        return Origin::Library;
    }
    match own.main_module() {
        Some(module) if organisation(path) == organisation(module) => Origin::Own,
        Some(_) => Origin::Library,
        None => Origin::Own,
    }
}

/// Which frame names a stack (frames leaf first): its first frame in the target's own code
/// that is not a callback the standard library makes (a `sync.Pool`'s `New`, a sort's less
/// function: the code that called the library is the cause), else that first own frame; with
/// no own code, the first frame of a third-party module that is not a codec; `None` when
/// neither is there.
fn own_frame(origins: &[Origin], from: usize) -> Option<usize> {
    // The first own frame that own code called, else the last own frame (the only one with
    // no own frame above it): one pass, no allocation, as it runs once a sample.
    let mut last = None;
    let mut library = None;
    for i in from..origins.len() {
        match origins[i] {
            Origin::Own => {
                if origins.get(i + 1) == Some(&Origin::Own) {
                    return Some(i);
                }
                last = Some(i);
            }
            Origin::Library if library.is_none() => library = Some(i),
            _ => {}
        }
    }
    last.or(library)
}

/// The site's name: the own frame with the leaf beside it ("main.(*client).queueOutbound
/// (leaf main.init.func1)"), or the leaf alone when it is the own frame or there is none.
fn site_name(own: Option<&str>, leaf: &str) -> String {
    match own {
        Some(own) if own != leaf => format!("{own} (leaf {leaf})"),
        _ => leaf.to_string(),
    }
}

/// The two names a site's name joins: the first frame in the target's own code, when it is not
/// the leaf, and the leaf function as pprof spells it.
pub fn split_site(site: &str) -> (Option<&str>, &str) {
    match site.strip_suffix(')').and_then(|s| s.split_once(" (leaf ")) {
        Some((own, leaf)) => (Some(own), leaf),
        None => (None, site),
    }
}

/// A site's name in JSON, as three fields beside the others (`#[serde(flatten, serialize_with =
/// "…")]` on the field holding it): `name`, the leaf function as pprof spells it (the name other
/// tools read, as in `go tool pprof -top`); `own`, the first frame in the target's own code when
/// that is not the leaf; `site`, the two as heapwatch's words print them.
pub fn serialize_site<S: serde::Serializer>(site: &str, s: S) -> Result<S::Ok, S::Error> {
    #[derive(serde::Serialize)]
    struct Fields<'a> {
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        own: Option<&'a str>,
        site: &'a str,
    }
    let (own, name) = split_site(site);
    serde::Serialize::serialize(&Fields { name, own, site }, s)
}

/// The site of a stack given by its frames' names, leaf first: for a heap sample the leaf is
/// the first frame, for a goroutine the first outside the runtime (a parked goroutine's leaf
/// is always `runtime.gopark`).
pub fn name_frames(names: &[&str], goroutine: bool, own: &OwnCode) -> Option<String> {
    let origins: Vec<Origin> = names.iter().map(|n| origin(n, own)).collect();
    let leaf = if goroutine {
        origins.iter().position(|o| *o != Origin::Runtime)?
    } else {
        0
    };
    let own = own_frame(&origins, leaf).map(|i| names[i]);
    Some(site_name(own, names.get(leaf)?))
}

/// Names the sites of one profile's stacks, working out each function's origin once.
pub struct SiteNamer<'p> {
    profile: &'p Profile,
    origins: Vec<Origin>,
    names: HashMap<(u32, u32), String>,
    frames: Vec<Option<crate::model::FuncId>>,
    frame_origins: Vec<Origin>,
}

impl<'p> SiteNamer<'p> {
    pub fn new(profile: &'p Profile, own: &OwnCode) -> SiteNamer<'p> {
        SiteNamer {
            profile,
            origins: profile
                .functions
                .iter()
                .map(|f| origin(profile.str(f.name), own))
                .collect(),
            names: HashMap::new(),
            frames: Vec::new(),
            frame_origins: Vec::new(),
        }
    }

    /// The site of a stack; `None` when a goroutine's stack is all runtime, and
    /// "(unsymbolized)" for a heap sample whose leaf has no function.
    pub fn name(&mut self, stack: &[LocId], goroutine: bool) -> Option<&str> {
        self.frames.clear();
        self.frame_origins.clear();
        for &loc in stack {
            for f in self.profile.location_frames(loc) {
                self.frames.push(f.function);
                self.frame_origins.push(
                    f.function
                        .map_or(Origin::Std, |id| self.origins[id.0 as usize]),
                );
            }
        }
        let leaf = if goroutine {
            self.frame_origins
                .iter()
                .position(|o| *o != Origin::Runtime)?
        } else {
            0
        };
        let leaf_fn = self.frames.get(leaf).copied().flatten();
        let own_fn = own_frame(&self.frame_origins, leaf).and_then(|i| self.frames[i]);
        let key = (
            leaf_fn.map_or(u32::MAX, |f| f.0),
            own_fn.map_or(u32::MAX, |f| f.0),
        );
        let profile = self.profile;
        let name =
            |f: Option<crate::model::FuncId>| f.map(|id| profile.str(profile.function(id).name));
        Some(
            self.names.entry(key).or_insert_with(|| {
                site_name(name(own_fn), name(leaf_fn).unwrap_or("(unsymbolized)"))
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::testdata_profile as fixture;

    #[test]
    fn leaked_goroutines_are_named_by_their_first_frame_outside_the_runtime() {
        let sites = goroutine_sites(&fixture("goroutineleak-goroutine.pb.gz"), &OwnCode::guess());
        let top = sites.iter().max_by_key(|s| s.value).unwrap();
        assert_eq!(top.name, "main.watchSubscription");
        assert!(top.value > 100, "{sites:?}");
        assert!(sites.iter().all(|s| !s.name.starts_with("runtime.gopark")));
    }

    #[test]
    fn a_site_is_named_by_its_own_code_with_the_leaf_beside_it() {
        // A sync.Pool's New func allocates; the cause called the pool.
        let pool = [
            "github.com/nats-io/nats-server/v2/server.init.func3",
            "sync.(*Pool).Get",
            "github.com/nats-io/nats-server/v2/server.(*client).queueOutbound",
            "github.com/nats-io/nats-server/v2/server.(*client).deliverMsg",
            "runtime.goexit",
        ];
        assert_eq!(
            name_frames(&pool, false, &OwnCode::guess()).unwrap(),
            "github.com/nats-io/nats-server/v2/server.(*client).queueOutbound \
             (leaf github.com/nats-io/nats-server/v2/server.init.func3)"
        );
        // A connection's goroutines park in the standard library.
        let read = [
            "runtime.gopark",
            "internal/poll.runtime_pollWait",
            "internal/poll.(*FD).Read",
            "net.(*netFD).Read",
            "net.(*conn).Read",
            "main.(*client).readLoop",
            "runtime.goexit",
        ];
        assert_eq!(
            name_frames(&read, true, &OwnCode::guess()).unwrap(),
            "main.(*client).readLoop (leaf net.(*netFD).Read)"
        );
        let write = [
            "runtime.gopark",
            "sync.runtime_notifyListWait",
            "sync.(*Cond).Wait",
            "main.(*client).writeLoop",
        ];
        assert_eq!(
            name_frames(&write, true, &OwnCode::guess()).unwrap(),
            "main.(*client).writeLoop (leaf sync.(*Cond).Wait)"
        );
        // Own code at the leaf keeps its name; no own code keeps the leaf.
        assert_eq!(
            name_frames(&["main.grow", "main.main"], false, &OwnCode::guess()).unwrap(),
            "main.grow"
        );
        assert_eq!(
            name_frames(
                &["os/signal.signal_recv", "os/signal.loop"],
                true,
                &OwnCode::guess()
            )
            .unwrap(),
            "os/signal.signal_recv"
        );
        assert_eq!(
            name_frames(&["runtime.gopark"], true, &OwnCode::guess()),
            None
        );
        let guess = OwnCode::guess();
        assert_eq!(
            origin("encoding/json.(*Decoder).refill", &guess),
            Origin::Std
        );
        assert_eq!(
            origin("go.etcd.io/raft/v3.(*raft).appendEntry", &guess),
            Origin::Own
        );
        assert_eq!(origin("main.init.func1", &guess), Origin::Own);
    }

    #[test]
    fn with_the_main_module_known_other_modules_are_libraries() {
        let etcd = OwnCode::module("go.etcd.io/etcd/server/v3");
        for (name, origin_is) in [
            (
                "go.etcd.io/etcd/server/v3/etcdserver.(*raftNode).start.func1",
                Origin::Own,
            ),
            ("go.etcd.io/etcd/server/v3.Main", Origin::Own),
            ("main.main", Origin::Own),
            // Another module of the same organisation is the project's own code; a codec is
            // never, whoever publishes it; another organisation's module is a library.
            ("go.etcd.io/raft/v3.(*raft).appendEntry", Origin::Own),
            ("go.etcd.io/etcd/server/v3x/wal.Open", Origin::Own),
            (
                "google.golang.org/protobuf/internal/impl.consumeBytes",
                Origin::Codec,
            ),
            (
                "github.com/prometheus/client_golang/prometheus.(*Registry).Gather",
                Origin::Library,
            ),
            (
                "golang.org/x/net/http2.(*Framer).ReadFrame",
                Origin::Library,
            ),
            ("runtime.mallocgc", Origin::Runtime),
        ] {
            assert_eq!(origin(name, &etcd), origin_is, "{name}");
        }
        // A WAL replay decoding protobuf: named by the main module's frame that called the
        // decoder, not by the decoder (the guess takes the decoder's module for own code).
        let stack = [
            "google.golang.org/protobuf/internal/impl.consumeBytes",
            "google.golang.org/protobuf/proto.UnmarshalOptions.unmarshal",
            "go.etcd.io/etcd/server/v3/storage/wal.(*decoder).decodeRecord",
            "go.etcd.io/etcd/server/v3/storage/wal.(*WAL).ReadAll",
            "main.main",
        ];
        assert_eq!(
            name_frames(&stack, false, &etcd).unwrap(),
            "go.etcd.io/etcd/server/v3/storage/wal.(*decoder).decodeRecord \
             (leaf google.golang.org/protobuf/internal/impl.consumeBytes)"
        );
        // The guess knows codecs too.
        assert_eq!(
            name_frames(&stack, false, &OwnCode::guess()).unwrap(),
            "go.etcd.io/etcd/server/v3/storage/wal.(*decoder).decodeRecord \
             (leaf google.golang.org/protobuf/internal/impl.consumeBytes)"
        );
        assert_eq!(OwnCode::module("command-line-arguments"), OwnCode::guess());
    }

    /// etcd's raft leader cloning entries (issue 33, item 6): the only stack of 80 % of the rise
    /// is `proto.Clone` under the raft module's `appendEntry`, on a goroutine raft started. The
    /// site to act on is raft's frame, the project's own organisation, not protobuf's leaf.
    #[test]
    fn a_sibling_module_of_the_same_organisation_names_a_site_behind_a_codec() {
        let stack = [
            "google.golang.org/protobuf/internal/impl.mergeBytes",
            "google.golang.org/protobuf/internal/impl.(*MessageInfo).merge",
            "google.golang.org/protobuf/proto.Clone",
            "go.etcd.io/raft/v3.(*raft).appendEntry",
            "go.etcd.io/raft/v3.stepLeader",
            "go.etcd.io/raft/v3.(*raft).Step",
            "go.etcd.io/raft/v3.(*node).run",
            "runtime.goexit",
        ];
        let etcd = OwnCode::module("go.etcd.io/etcd/server/v3");
        assert_eq!(
            name_frames(&stack, false, &etcd).unwrap(),
            "go.etcd.io/raft/v3.(*raft).appendEntry \
             (leaf google.golang.org/protobuf/internal/impl.mergeBytes)"
        );
        // OpenZiti's controller: its channel module is its own code too.
        let ziti = OwnCode::module("github.com/openziti/ziti");
        assert_eq!(
            origin("github.com/openziti/channel/v4.(*channelImpl).rxer", &ziti),
            Origin::Own
        );
        assert_eq!(
            origin("github.com/sirupsen/logrus.(*Entry).log", &ziti),
            Origin::Library
        );
        // With no own frame at all, the first library frame outside the codec names it.
        let library = [
            "google.golang.org/protobuf/proto.Clone",
            "github.com/hashicorp/raft.(*Raft).appendEntries",
            "github.com/hashicorp/raft.(*Raft).run",
            "runtime.goexit",
        ];
        assert_eq!(
            name_frames(&library, false, &ziti).unwrap(),
            "github.com/hashicorp/raft.(*Raft).appendEntries \
             (leaf google.golang.org/protobuf/proto.Clone)"
        );
    }

    /// A user names their own modules (issue 33, item 6): their store module lies in another
    /// organisation than the main module, under a third-party database that decompresses what it
    /// keeps. Guessed, the database's frame names the site; named, the user's frame does.
    #[test]
    fn prefixes_a_user_names_move_a_site_from_a_library_to_their_own_frame() {
        let stack = [
            "github.com/klauspost/compress/zstd.(*Decoder).DecodeAll",
            "github.com/dgraph-io/badger/v4.(*DB).get",
            "gitlab.example.org/team/cache.(*Store).load",
            "gitlab.example.org/team/cache.(*Store).warm",
            "github.com/acme/server/cmd.Run",
            "main.main",
        ];
        let acme = OwnCode::module("github.com/acme/server");
        assert_eq!(
            name_frames(&stack[..4], false, &acme).unwrap(),
            "github.com/dgraph-io/badger/v4.(*DB).get \
             (leaf github.com/klauspost/compress/zstd.(*Decoder).DecodeAll)"
        );
        let named = acme
            .clone()
            .named(&["gitlab.example.org/team/".to_string()]);
        assert_eq!(
            name_frames(&stack[..4], false, &named).unwrap(),
            "gitlab.example.org/team/cache.(*Store).load \
             (leaf github.com/klauspost/compress/zstd.(*Decoder).DecodeAll)"
        );
        // The main module stays own code: with the whole stack, its caller below the store is
        // not taken over the store's frame, the first own frame own code called.
        assert_eq!(
            name_frames(&stack, false, &named).unwrap(),
            "gitlab.example.org/team/cache.(*Store).load \
             (leaf github.com/klauspost/compress/zstd.(*Decoder).DecodeAll)"
        );
        assert_eq!(
            origin("github.com/acme/server/cmd.Run", &named),
            Origin::Own
        );
        // Named prefixes replace the guesses: a sibling of the organisation is a library unless
        // named, and so is every module of the guess.
        let etcd = OwnCode::module("go.etcd.io/etcd/server/v3");
        let server_only = etcd.clone().named(&["go.etcd.io/etcd/".to_string()]);
        assert_eq!(
            origin("go.etcd.io/raft/v3.(*raft).appendEntry", &etcd),
            Origin::Own
        );
        assert_eq!(
            origin("go.etcd.io/raft/v3.(*raft).appendEntry", &server_only),
            Origin::Library
        );
        assert_eq!(
            origin("go.etcd.io/etcd/pkg/v3/wait.(*list).Register", &server_only),
            Origin::Own
        );
        let guessed_named = OwnCode::guess().named(&["example.com/app".to_string()]);
        assert_eq!(
            origin("github.com/other/lib.F", &OwnCode::guess()),
            Origin::Own
        );
        assert_eq!(
            origin("github.com/other/lib.F", &guessed_named),
            Origin::Library
        );
        assert_eq!(origin("example.com/app/x.F", &guessed_named), Origin::Own);
        // Whole path elements, whatever the order, repeats or trailing slashes.
        assert_eq!(
            origin("example.com/application.F", &guessed_named),
            Origin::Library
        );
        let given = |p: &[&str]| {
            let p: Vec<String> = p.iter().map(|s| s.to_string()).collect();
            OwnCode::guess().named(&p)
        };
        assert_eq!(
            given(&["b.io/x/", "a.io", "b.io/x"]),
            given(&["a.io/", "b.io/x"])
        );
        assert_eq!(given(&["", " "]), OwnCode::guess());
    }

    #[test]
    fn heap_sites_sum_to_the_profile_totals() {
        let p = fixture("hiddenleak-heap-late.pb.gz");
        let sites = heap_sites(&p, &OwnCode::guess());
        let inuse: i64 = sites.iter().map(|s| s.value).sum();
        assert_eq!(inuse, p.total(p.find_sample_type("inuse_space").unwrap()));
        let catalog = sites.iter().find(|s| s.name == "main.loadCatalog").unwrap();
        assert!(catalog.value > 64 << 20);
    }

    #[test]
    fn a_text_dump_names_sites_like_a_goroutine_profile() {
        let text = include_bytes!("../../testdata/agent/goroutine-stack.txt");
        let dump = crate::decode::stackdump::parse(text).unwrap();
        let sites = goroutine_dump_sites(&dump, &OwnCode::guess());
        assert_eq!(
            sites.iter().map(|s| s.value).sum::<i64>(),
            dump.goroutines()
        );
        let top = sites.iter().max_by_key(|s| s.value).unwrap();
        assert_eq!(top.name, "main.watchPeer");
        // os/signal.signal_recv is the runtime's, linknamed: pprof names it the same way.
        assert!(
            sites.iter().any(|s| s.name == "os/signal.signal_recv"),
            "{sites:?}"
        );
        assert!(sites.iter().all(|s| !s.name.starts_with("runtime.")));
    }
}
