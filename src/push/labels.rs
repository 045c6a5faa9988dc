//! The labels a capture is pushed with, and its stable id. Pyroscope keys a series by its
//! label set, so these are chosen to stay few per run and the same from run to run: the
//! profile name, a stable service name and its build, the boot cycle, the target, the cluster
//! node, and the user's own labels (`--push-label`). Everything here is plain data, no I/O.
//!
//! # Labels kept with the run
//!
//! `--service` and `--push-label` are written to run.json's `options.push` (`PushSettings` in
//! `model/run_options.rs`) by `settings::resolve` whenever a command's flags change them, and
//! every push reads them back: labels chosen at collect time survive a drain cut and a later
//! `heapwatch push`. `service_name` defaults to something stable across runs and builds — the
//! app id, the executable from the profile's main mapping, `heapwatch run`'s command, the run
//! directory — never the target (a pprof port, a cgroup path); `heapwatch_target` is made from
//! a redacted form (no user, password, query or fragment), and so are the ids, so no hash of a
//! credential is kept. A cluster node's name comes from the cluster's run.json by its directory.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_128;

use super::wire::LabelPair;
use crate::model::build::BuildInfo;
use crate::store::{CaptureRecord, RecordKind, RunInfo};

/// The label settings in force: the run's own (run.json) with the command line's over them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelOptions {
    /// `--service`: the `service_name` for every capture, over every default.
    pub service: Option<String>,
    /// `service` was given on this command line (`--service`, `--push-label service_name=…`),
    /// not only kept in the run from an earlier push or set by `watch` from the pod.
    pub service_given: bool,
    /// `--push-label K=V`: added to every capture, as Alloy's external labels.
    pub extra: BTreeMap<String, String>,
    /// The node's name in a cluster run (`--name`), sent as `heapwatch_node`.
    pub node: Option<String>,
}

/// Where a capture's `service_name` came from: said in the push's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServiceSource {
    /// `--service` or `--push-label service_name=…`, on this command line.
    Given,
    /// Kept in the run's run.json: an earlier push's `--service`, or `watch`'s
    /// namespace/container.
    Kept,
    /// The app id the target's agent reported.
    AppId,
    /// The file name of the executable the profile names (its main mapping).
    Executable,
    /// The command `heapwatch run` started.
    Command,
    /// Nothing better was known: the run directory's name.
    RunDirectory,
}

impl ServiceSource {
    pub fn words(self) -> &'static str {
        match self {
            ServiceSource::Given => "as given with --service",
            ServiceSource::Kept => {
                "as kept in the run's run.json: an earlier --service, or watch's namespace/container"
            }
            ServiceSource::AppId => "the app id the agent reported",
            ServiceSource::Executable => "the executable's name, from the profile",
            ServiceSource::Command => "the command `heapwatch run` started",
            ServiceSource::RunDirectory => {
                "the run directory's name: nothing else named the service"
            }
        }
    }
}

/// What kind of profile a capture is, as Pyroscope names it (`__name__`): Go heap profiles
/// are `memory`, goroutine profiles `goroutine`, as Pyroscope's own Go scrapers name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileName {
    Memory,
    Goroutine,
}

impl ProfileName {
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileName::Memory => "memory",
            ProfileName::Goroutine => "goroutine",
        }
    }

    /// The name for a manifest record that stored a pprof file, or `None` for anything that
    /// is not one (MemStats, stack-dump text, events, failed attempts).
    pub fn of(record: &CaptureRecord) -> Option<ProfileName> {
        let file = record.file.as_deref()?;
        if !file.ends_with(".pb.gz") || !record.is_ok() {
            return None;
        }
        match record.kind {
            RecordKind::Heap => Some(ProfileName::Memory),
            RecordKind::Goroutine => Some(ProfileName::Goroutine),
            // A file a killed collector left unrecorded: its name says what it is.
            RecordKind::Recovered if file.ends_with("-heap.pb.gz") => Some(ProfileName::Memory),
            RecordKind::Recovered if file.ends_with("-goroutine.pb.gz") => {
                Some(ProfileName::Goroutine)
            }
            _ => None,
        }
    }
}

/// Chooses labels from what the run says about itself: `run.json`, the `cycle` records and
/// the executable each profile names.
#[derive(Debug, Clone)]
pub struct Labeler {
    options: LabelOptions,
    /// `heapwatch_target`: the target as given, credentials and query taken out.
    target: String,
    run_label: Option<String>,
    /// The file name of the command `heapwatch run` started.
    command: Option<String>,
    run_directory: String,
    /// The identity of the run the ids are derived from.
    run_key: String,
    /// Per boot cycle, the build its `cycle` record named.
    builds: BTreeMap<u32, BuildInfo>,
    /// Per boot cycle, the executable its profiles named.
    executables: BTreeMap<u32, String>,
}

impl Labeler {
    /// `run_directory` names the run when nothing else does (and the target when there is no
    /// `run.json`).
    pub fn new(info: Option<&RunInfo>, run_directory: &str, options: &LabelOptions) -> Labeler {
        let target = info.map_or(run_directory, |i| i.target.as_str());
        let started = info.map_or(0, |i| i.started_ms);
        let command = info
            .and_then(|i| i.options.command.as_ref())
            .and_then(|c| c.first())
            .and_then(|program| file_name(program));
        let mut options = options.clone();
        options.service = options.service.filter(|s| !s.is_empty());
        options.node = options.node.filter(|s| !s.is_empty());
        // The ids are made from the redacted target too: a hash of a password is not kept.
        let target = redacted_target(target);
        Labeler {
            options,
            run_key: format!("{target}\n{started}"),
            target,
            run_label: info.and_then(|i| i.label.clone()).filter(|l| !l.is_empty()),
            command,
            run_directory: run_directory.to_string(),
            builds: BTreeMap::new(),
            executables: BTreeMap::new(),
        }
    }

    /// Takes note of a `cycle` record's build; other records are ignored. A cycle record
    /// without a build (plain HTTP pprof) still says the cycle's labels are all there are,
    /// so its captures need not wait for one.
    pub fn observe(&mut self, record: &CaptureRecord) {
        if record.kind == RecordKind::Cycle {
            self.builds
                .insert(record.cycle, record.build.clone().unwrap_or_default());
        }
    }

    /// Takes note of the executable a profile of `cycle` names (its main mapping's file).
    pub fn observe_executable(&mut self, cycle: u32, path: &str) {
        if let Some(name) = file_name(path) {
            self.executables.entry(cycle).or_insert(name);
        }
    }

    /// Whether the boot cycle's `cycle` record has been seen.
    pub fn knows_cycle(&self, cycle: u32) -> bool {
        self.builds.contains_key(&cycle)
    }

    /// `service_name` and where it came from: `--service`, else the app id (this cycle's,
    /// else any cycle's), else the executable's name (this cycle's, else any's), else the
    /// command `heapwatch run` started, else the run directory's name. Never the target: a
    /// pprof URL's port and `heapwatch run`'s cgroup change from run to run, and one service
    /// must stay one series across runs and builds.
    pub fn service_name(&self, cycle: u32) -> (String, ServiceSource) {
        if let Some(service) = &self.options.service {
            let from = if self.options.service_given {
                ServiceSource::Given
            } else {
                ServiceSource::Kept
            };
            return (service.clone(), from);
        }
        let app_id = |b: &BuildInfo| b.app_id.clone().filter(|a| !a.is_empty());
        if let Some(id) = self
            .builds
            .get(&cycle)
            .and_then(app_id)
            .or_else(|| self.builds.values().find_map(app_id))
        {
            return (id, ServiceSource::AppId);
        }
        if let Some(exe) = self
            .executables
            .get(&cycle)
            .or_else(|| self.executables.values().next())
        {
            return (exe.clone(), ServiceSource::Executable);
        }
        if let Some(command) = &self.command {
            return (command.clone(), ServiceSource::Command);
        }
        (self.run_directory.clone(), ServiceSource::RunDirectory)
    }

    /// `service_version`: `--push-label service_version=…`, else the cycle's build version,
    /// else the run's `--label`.
    pub fn service_version(&self, cycle: u32) -> Option<String> {
        if let Some(v) = self.options.extra.get("service_version") {
            return Some(v.clone());
        }
        self.builds
            .get(&cycle)
            .and_then(|b| b.version.clone())
            .filter(|v| !v.is_empty())
            .or_else(|| self.run_label.clone())
    }

    /// The labels of one capture, sorted by name. `captured_at` (unix ns) is the capture's
    /// own time when it is sent restamped.
    pub fn labels(
        &self,
        name: ProfileName,
        cycle: u32,
        captured_at: Option<i64>,
    ) -> Vec<LabelPair> {
        let mut labels: BTreeMap<&str, String> = BTreeMap::new();
        // The user's labels first: heapwatch's own, set after, cannot be overwritten by them.
        for (k, v) in &self.options.extra {
            labels.insert(k, v.clone());
        }
        labels.insert("__name__", name.as_str().to_string());
        if name == ProfileName::Memory {
            // The allocation figures are deltas already: Pyroscope v1 would otherwise make
            // deltas of them again (v2 stores every profile as sent, and drops the label).
            labels.insert("__delta__", "false".to_string());
        }
        labels.insert("service_name", self.service_name(cycle).0);
        if let Some(version) = self.service_version(cycle) {
            labels.insert("service_version", version);
        }
        labels.insert("heapwatch_boot_cycle", cycle.to_string());
        labels.insert("heapwatch_target", self.target.clone());
        if let Some(node) = &self.options.node {
            labels.insert("heapwatch_node", node.clone());
        }
        if let Some(ns) = captured_at {
            labels.insert(
                "heapwatch_captured_at",
                crate::time::rfc3339_ms(ns.div_euclid(1_000_000)),
            );
        }
        labels
            .into_iter()
            .map(|(name, value)| LabelPair {
                name: name.to_string(),
                value,
            })
            .collect()
    }

    /// A UUID for a capture, the same on every attempt and every later push of the run (so a
    /// store can tell a repeat), different across runs: xxh3-128 of the run's target, its start
    /// and the capture's seq and file, shaped as a version 8 (custom) UUID.
    pub fn capture_id(&self, seq: u64, file: &str) -> String {
        let hash = xxh3_128(format!("{}\n{seq}\n{file}", self.run_key).as_bytes());
        let mut b = hash.to_be_bytes();
        b[6] = (b[6] & 0x0f) | 0x80;
        b[8] = (b[8] & 0x3f) | 0x80;
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }
}

/// The last part of a path (`/usr/local/bin/ziti` → `ziti`), if it has one.
fn file_name(path: &str) -> Option<String> {
    let name = path.rsplit('/').next()?.trim();
    (!name.is_empty() && !name.starts_with('[')).then(|| name.to_string())
}

/// A target as the label shows it: any URL in it without user, password, query or fragment,
/// so no credential given with the target reaches the store.
pub fn redacted_target(target: &str) -> String {
    // First as everything shows a target (a password with '#' or '/' in it is the password).
    let target = crate::source::target::redact(target);
    let target = if target.contains("://") {
        target.split(['?', '#']).next().unwrap_or_default()
    } else {
        &target
    };
    let mut shown = String::with_capacity(target.len());
    let mut rest = target;
    // Each URL in it (`envoy:http://…` holds one after a prefix).
    while let Some(at) = rest.find("://") {
        shown.push_str(&rest[..at + 3]);
        let tail = &rest[at + 3..];
        let end = tail.find('/').unwrap_or(tail.len());
        let authority = &tail[..end];
        shown.push_str(
            authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host),
        );
        rest = &tail[end..];
    }
    shown.push_str(rest);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(label: Option<&str>) -> RunInfo {
        RunInfo {
            schema: 1,
            tool: "heapwatch".into(),
            target: "agent:auto:ctrl".into(),
            source: "agent".into(),
            started_ms: 1_700_000_000_000,
            resumed_ms: vec![],
            options: Default::default(),
            limit_bytes: None,
            label: label.map(str::to_string),
        }
    }

    fn cycle(cycle: u32, app_id: Option<&str>, version: Option<&str>) -> CaptureRecord {
        let mut r = CaptureRecord::new(cycle as u64 * 10, RecordKind::Cycle, cycle, 0);
        r.build = Some(BuildInfo {
            version: version.map(str::to_string),
            app_id: app_id.map(str::to_string),
            ..BuildInfo::default()
        });
        r
    }

    fn get(labels: &[LabelPair], name: &str) -> Option<String> {
        labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.clone())
    }

    #[test]
    fn service_name_is_the_flag_else_the_app_id_else_the_executable_never_the_target() {
        let run = info(Some("2.1.0"));
        let mut plain = Labeler::new(Some(&run), "run-2.1.0", &LabelOptions::default());
        assert_eq!(
            plain.service_name(1),
            ("run-2.1.0".to_string(), ServiceSource::RunDirectory)
        );
        plain.observe_executable(1, "/tmp/heapwatch-capture.AxBIR8/bin/steady");
        assert_eq!(
            plain.service_name(1),
            ("steady".to_string(), ServiceSource::Executable)
        );
        plain.observe(&cycle(2, Some("ctrl1"), Some("v2.0.2")));
        assert_eq!(plain.service_name(2).0, "ctrl1");
        // A cycle whose source told no app id takes the run's.
        plain.observe(&cycle(3, None, None));
        assert_eq!(
            plain.service_name(3),
            ("ctrl1".to_string(), ServiceSource::AppId)
        );
        let flagged = Labeler::new(
            Some(&run),
            "x",
            &LabelOptions {
                service: Some("ziti-controller".into()),
                service_given: true,
                ..LabelOptions::default()
            },
        );
        assert_eq!(
            flagged.service_name(2),
            ("ziti-controller".to_string(), ServiceSource::Given)
        );
        // Resumed, pushed again, or under watch: nobody gave --service this time.
        let kept = Labeler::new(
            Some(&run),
            "x",
            &LabelOptions {
                service: Some("shop/api".into()),
                ..LabelOptions::default()
            },
        );
        let (name, from) = kept.service_name(2);
        assert_eq!((name.as_str(), from), ("shop/api", ServiceSource::Kept));
        assert!(!from.words().contains("with --service"), "{}", from.words());
    }

    #[test]
    fn heapwatch_run_is_named_by_its_command_not_its_cgroup() {
        let mut run = info(None);
        run.target = "proc:cgroup:/sys/fs/cgroup/memory/heapwatch-run-4242".into();
        run.options.command = Some(vec!["./bin/oomgrow".into(), "-rate".into(), "1MiB".into()]);
        let l = Labeler::new(Some(&run), "run", &LabelOptions::default());
        assert_eq!(
            l.service_name(1),
            ("oomgrow".to_string(), ServiceSource::Command)
        );
    }

    #[test]
    fn the_users_labels_and_the_node_go_with_every_capture_and_cannot_replace_heapwatchs() {
        let options = LabelOptions {
            service: None,
            service_given: false,
            extra: [
                ("cluster", "eu-1"),
                ("heapwatch_target", "forged"),
                ("__name__", "cpu"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            node: Some("ctrl2".into()),
        };
        let l = Labeler::new(Some(&info(None)), "x", &options);
        let labels = l.labels(ProfileName::Memory, 1, None);
        assert_eq!(get(&labels, "cluster").as_deref(), Some("eu-1"));
        assert_eq!(get(&labels, "heapwatch_node").as_deref(), Some("ctrl2"));
        assert_eq!(
            get(&labels, "heapwatch_target").as_deref(),
            Some("agent:auto:ctrl")
        );
        assert_eq!(get(&labels, "__name__").as_deref(), Some("memory"));
        assert_eq!(get(&labels, "__delta__").as_deref(), Some("false"));
        let goroutines = l.labels(ProfileName::Goroutine, 1, None);
        assert_eq!(
            get(&goroutines, "__delta__"),
            None,
            "a gauge: nothing to say"
        );
    }

    #[test]
    fn the_target_label_carries_no_credentials() {
        for (given, shown) in [
            ("http://10.0.0.5:6060", "http://10.0.0.5:6060"),
            (
                "https://user:s3cret@10.0.0.5:6060/debug/pprof?token=abc",
                "https://10.0.0.5:6060/debug/pprof",
            ),
            (
                "envoy:http://admin:pw@127.0.0.1:9901",
                "envoy:http://127.0.0.1:9901",
            ),
            ("agent:auto:ctrl", "agent:auto:ctrl"),
            // A password pasted with URL delimiters in it.
            (
                "http://u:p/a#ss?w@10.0.0.5:6060/x",
                "http://10.0.0.5:6060/x",
            ),
        ] {
            assert_eq!(redacted_target(given), shown);
        }
        let mut run = info(None);
        run.target = "https://user:s3cret@10.0.0.5:6060".into();
        let l = Labeler::new(Some(&run), "x", &LabelOptions::default());
        let labels = l.labels(ProfileName::Memory, 1, None);
        assert!(
            labels.iter().all(|l| !l.value.contains("s3cret")),
            "{labels:?}"
        );
    }

    #[test]
    fn a_cycle_record_without_a_build_makes_its_cycle_known() {
        let mut l = Labeler::new(Some(&info(Some("2.1.0"))), "x", &LabelOptions::default());
        assert!(!l.knows_cycle(1));
        l.observe(&CaptureRecord::new(5, RecordKind::Cycle, 1, 0));
        assert!(
            l.knows_cycle(1),
            "plain HTTP cycles have no build to wait for"
        );
        assert_eq!(l.service_version(1).as_deref(), Some("2.1.0"));
    }

    #[test]
    fn service_version_is_the_cycle_build_else_the_run_label() {
        let mut l = Labeler::new(Some(&info(Some("2.1.0"))), "x", &LabelOptions::default());
        l.observe(&cycle(1, Some("ctrl1"), Some("v2.0.2")));
        assert_eq!(l.service_version(1).as_deref(), Some("v2.0.2"));
        assert_eq!(l.service_version(2).as_deref(), Some("2.1.0"));
        let bare = Labeler::new(Some(&info(None)), "x", &LabelOptions::default());
        assert_eq!(bare.service_version(1), None);
        let labels = bare.labels(ProfileName::Memory, 4, None);
        assert_eq!(get(&labels, "service_version"), None, "no empty label");
        assert_eq!(get(&labels, "heapwatch_boot_cycle").as_deref(), Some("4"));
        assert_eq!(get(&labels, "__name__").as_deref(), Some("memory"));
        let names: Vec<_> = labels.iter().map(|l| l.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn ids_are_stable_per_capture_and_shaped_as_uuids() {
        let l = Labeler::new(Some(&info(None)), "x", &LabelOptions::default());
        let a = l.capture_id(7, "profiles/000007-heap.pb.gz");
        assert_eq!(a, l.capture_id(7, "profiles/000007-heap.pb.gz"));
        assert_ne!(a, l.capture_id(8, "profiles/000008-heap.pb.gz"));
        let mut other = info(None);
        other.started_ms += 1;
        let m = Labeler::new(Some(&other), "x", &LabelOptions::default());
        assert_ne!(a, m.capture_id(7, "profiles/000007-heap.pb.gz"));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8", "version nibble: {a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "variant: {a}");
    }

    #[test]
    fn only_stored_pprof_files_are_pushable() {
        let mut heap = CaptureRecord::new(1, RecordKind::Heap, 1, 0);
        heap.file = Some("profiles/000001-heap.pb.gz".into());
        assert_eq!(ProfileName::of(&heap), Some(ProfileName::Memory));
        let mut dump = CaptureRecord::new(2, RecordKind::Goroutine, 1, 0);
        dump.file = Some("profiles/000002-goroutine.txt".into());
        assert_eq!(ProfileName::of(&dump), None);
        let mut recovered = CaptureRecord::new(3, RecordKind::Recovered, 1, 0);
        recovered.file = Some("profiles/000003-goroutine.pb.gz".into());
        assert_eq!(ProfileName::of(&recovered), Some(ProfileName::Goroutine));
        let mut failed = heap.clone();
        failed.error = Some("timeout".into());
        assert_eq!(ProfileName::of(&failed), None);
    }
}
