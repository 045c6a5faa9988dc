//! `heapwatch ps` on a node laid out as a kubelet lays one out (tests/cli/kubenode.rs): the Go
//! containers listed by namespace/pod/container with their limits, never the non-Go process;
//! heap in use equal to what the process's own pprof endpoint says (go tool pprof as the
//! judge), the Go release equal to `go version`'s. Then the input a node throws at it: the
//! systemd layout, missing or garbage pod directories, an OOM kill and restart, a process in
//! another PID namespace, and heapwatch itself in one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::kubenode::{Container, KubeNode, Layout, Life, Qos, Supervised};
use crate::util;

const MIB: u64 = 1 << 20;
const STARTUP: Duration = Duration::from_secs(30);

/// `heapwatch ps --json` on the node; fails the test unless it exits 0.
pub fn ps_json(node: &KubeNode, extra: &[&str]) -> Value {
    ps_json_in(node, node.pods_dir(), extra)
}

/// As [`ps_json`], with another pods directory.
pub fn ps_json_in(node: &KubeNode, pods_dir: &Path, extra: &[&str]) -> Value {
    let out = util::heapwatch()
        .arg("ps")
        .arg("--json")
        .arg("--cgroup-root")
        .arg(node.cgroup_root())
        .arg("--pods-dir")
        .arg(pods_dir)
        .args(extra)
        .output()
        .expect("heapwatch ps runs");
    assert!(
        out.status.success(),
        "heapwatch ps failed ({}): {}",
        out.status,
        util::stderr(&out)
    );
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("ps --json is JSON ({e}): {}", util::stdout(&out)));
    assert_eq!(json["schema"], 1);
    json
}

/// The processes of a `ps --json`, by name.
pub fn by_name(json: &Value) -> BTreeMap<String, Value> {
    json["processes"]
        .as_array()
        .expect("a processes array")
        .iter()
        .map(|p| (p["name"].as_str().expect("a name").to_string(), p.clone()))
        .collect()
}

fn notes_of(json: &Value, kind: &str) -> Vec<String> {
    json["notes"]
        .as_array()
        .expect("a notes array")
        .iter()
        .filter(|n| n["kind"] == kind)
        .map(|n| n["message"].as_str().unwrap_or("").to_string())
        .collect()
}

/// What `go version FILE` says built it.
fn go_version_of(go: &Path, file: &Path) -> String {
    let out = Command::new(go)
        .arg("version")
        .arg(file)
        .output()
        .expect("go version");
    let text = util::stdout(&out);
    text.rsplit(": ")
        .next()
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("go version said {text:?}"))
}

/// testdata/go/procheap (a frozen, known heap) built by a Go toolchain, once per test process.
fn procheap(toolchain: &str) -> Option<PathBuf> {
    let go = util::go()?;
    static BUILT: OnceLock<Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(toolchain) {
        return Some(p.clone());
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("node-procheap");
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join(format!("procheap-{toolchain}"));
    let out = Command::new(&go)
        .args(["build", "-trimpath", "-o"])
        .arg(&out_path)
        .arg(".")
        .current_dir(util::repo().join("testdata/go/procheap"))
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", toolchain)
        .env("GOFLAGS", "-buildvcs=false")
        .output()
        .expect("go build runs");
    if !out.status.success() {
        // An older release is downloaded by the go command (GOTOOLCHAIN): without the
        // network or its module cache, the test cannot run here.
        crate::prerequisite::skip(
            crate::prerequisite::Need::Go,
            &format!(
                "building procheap with GOTOOLCHAIN={toolchain} failed: {}",
                util::stderr(&out).trim()
            ),
        );
        return None;
    }
    built.insert(toolchain.into(), out_path.clone());
    Some(out_path)
}

/// The total `inuse_space` of the heap profile a process serves, as `go tool pprof` adds it.
fn pprof_inuse(go: &Path, port: &str, dir: &Path) -> i64 {
    let body = ureq::get(&format!("http://{port}/debug/pprof/heap"))
        .call()
        .expect("the fixture serves its heap profile")
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .expect("the body reads");
    let file = util::write(dir, "served.pb.gz", &body);
    util::pprof_top(go, "inuse_space", &[file.into_os_string()]).total
}

fn start_listening(node: &KubeNode, c: &Container, program: &Path, args: &[&str]) -> (u32, String) {
    let pid = node.start(c, program, args);
    let addr = node.wait_for_line(c, "listening on ", STARTUP);
    (pid, addr)
}

#[test]
fn ps_lists_the_go_containers_by_pod_name_with_their_limits_and_never_the_other_process() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let (Some(go), Some(procheap)) = (util::go(), procheap("local")) else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let steady = fixtures.join("steady");
    let leak = fixtures.join("goroutineleak");

    let cart = node.pod("shop", "cart-7d9f8", Qos::Burstable, Some(256 * MIB));
    let api = node.container(&cart, "api", Some(128 * MIB));
    start_listening(
        &node,
        &api,
        &steady,
        &["-working-set", "4MiB", "-rate", "1MiB"],
    );
    let checkout = node.pod("shop", "checkout-0", Qos::Guaranteed, Some(96 * MIB));
    let server = node.container(&checkout, "server", Some(96 * MIB));
    start_listening(&node, &server, &leak, &["-rate", "5", "-churn", "256KiB"]);
    // BestEffort: no limit of its own nor its pod's; the node's allocatable applies.
    let report = node.pod("batch", "report-28f1", Qos::BestEffort, None);
    let worker = node.container(&report, "worker", None);
    let (heap_pid, heap_addr) = start_listening(&node, &worker, &procheap, &[]);
    let debug = node.pod("tools", "debug-shell", Qos::Burstable, Some(64 * MIB));
    let shell = node.container(&debug, "shell", Some(64 * MIB));
    let sleep_pid = node.start(&shell, Path::new("/bin/sleep"), &["600"]);

    let json = ps_json(&node, &[]);
    let found = by_name(&json);
    let names: Vec<&String> = found.keys().collect();
    assert_eq!(
        names,
        [
            "batch/report-28f1/worker",
            "shop/cart-7d9f8/api",
            "shop/checkout-0/server"
        ],
        "{json:#}"
    );
    assert!(
        !json.to_string().contains(&format!("\"pid\":{sleep_pid},")),
        "the non-Go process is never listed: {json:#}"
    );
    let root_limit = 4u64 << 30;
    for (c, binary, limit, limit_at) in [
        (&api, &steady, 128 * MIB, &api.cgroup),
        (&server, &leak, 96 * MIB, &server.cgroup),
        (
            &worker,
            &procheap,
            root_limit,
            &node.cgroup_root().to_path_buf(),
        ),
    ] {
        let p = &found[&c.full_name()];
        assert_eq!(p["namespace"], c.pod.namespace.as_str());
        assert_eq!(p["pod"], c.pod.name.as_str());
        assert_eq!(p["container"], c.name.as_str());
        assert_eq!(p["container_id"], c.id.as_str());
        assert_eq!(p["pod_uid"], c.pod.uid.as_str());
        assert_eq!(p["qos"], c.pod.qos.as_str());
        assert_eq!(p["exe"], binary.to_str().unwrap());
        assert_eq!(
            p["go_version"],
            go_version_of(&go, binary).as_str(),
            "{p:#}"
        );
        assert_eq!(p["memory"]["limit"], limit, "{p:#}");
        assert_eq!(p["memory"]["limit_cgroup"], limit_at.to_str().unwrap());
        let usage = p["memory"]["usage"].as_u64().expect("usage");
        assert!(usage > MIB && usage < limit, "{p:#}");
        assert_eq!(p["memory"]["oom_kills"], 0);
        assert!(p["heap_inuse"].as_u64().is_some_and(|h| h > 0), "{p:#}");
        assert_eq!(p["ns_pid"], Value::Null);
    }
    // The heap read out of memory is the heap the process itself serves.
    let worker_row = &found["batch/report-28f1/worker"];
    assert_eq!(worker_row["pid"], heap_pid);
    let dir = util::tempdir();
    assert_eq!(
        worker_row["heap_inuse"].as_i64(),
        Some(pprof_inuse(&go, &heap_addr, dir.path())),
        "ps's heap in use against go tool pprof's inuse_space total"
    );

    // The table says the same in words.
    let out = util::heapwatch()
        .args(["ps", "--cgroup-root"])
        .arg(node.cgroup_root())
        .arg("--pods-dir")
        .arg(node.pods_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
            .to_string()
    };
    assert!(line("shop/cart-7d9f8/api").contains("/ 128 MiB"), "{text}");
    assert!(
        line("shop/checkout-0/server").contains("/ 96.0 MiB"),
        "{text}"
    );
    assert!(
        line("batch/report-28f1/worker").contains("/ 4.00 GiB node"),
        "{text}"
    );
    assert!(
        !text.contains("debug-shell") && !text.contains("sleep"),
        "{text}"
    );
    assert!(text.starts_with("PID "), "{text}");
}

#[test]
fn ps_reads_the_go_release_of_an_older_toolchain_from_the_binary() {
    let (Some(go), Some(old)) = (util::go(), procheap("go1.23.12")) else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let pod = node.pod("legacy", "billing-5", Qos::Guaranteed, Some(64 * MIB));
    let c = node.container(&pod, "billing", Some(64 * MIB));
    start_listening(&node, &c, &old, &[]);
    let json = ps_json(&node, &[]);
    let p = &by_name(&json)["legacy/billing-5/billing"];
    assert_eq!(p["go_version"], "go1.23.12");
    assert_eq!(go_version_of(&go, &old), "go1.23.12");
    assert!(p["heap_inuse"].as_u64().is_some_and(|h| h > 0), "{p:#}");
}

#[test]
fn the_systemd_layout_is_named_the_same_and_without_the_kubelets_files_by_the_cgroup_path() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Systemd) else {
        return;
    };
    let steady = fixtures.join("steady");
    let pod = node.pod("web", "front-6b7c", Qos::Burstable, Some(192 * MIB));
    let app = node.container(&pod, "app", Some(128 * MIB));
    start_listening(
        &node,
        &app,
        &steady,
        &["-working-set", "2MiB", "-rate", "1MiB"],
    );
    let gpod = node.pod("web", "cache-0", Qos::Guaranteed, Some(64 * MIB));
    let cache = node.container(&gpod, "cache", Some(64 * MIB));
    start_listening(
        &node,
        &cache,
        &steady,
        &["-working-set", "2MiB", "-rate", "1MiB"],
    );
    assert!(
        app.cgroup
            .ends_with(format!("cri-containerd-{}.scope", app.id)),
        "{}",
        app.cgroup.display()
    );

    let json = ps_json(&node, &["--no-heap"]);
    let found = by_name(&json);
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        ["web/cache-0/cache", "web/front-6b7c/app"]
    );
    assert_eq!(found["web/front-6b7c/app"]["qos"], "burstable");
    assert_eq!(found["web/cache-0/cache"]["qos"], "guaranteed");
    assert_eq!(found["web/front-6b7c/app"]["memory"]["limit"], 128 * MIB);
    assert_eq!(found["web/front-6b7c/app"]["heap_inuse"], Value::Null);

    // Without /var/log/containers: the pod directory alone names a pod of one container.
    std::fs::remove_dir_all(node.containers_dir()).unwrap();
    let found = by_name(&ps_json(&node, &["--no-heap"]));
    assert!(found.contains_key("web/front-6b7c/app"), "{found:#?}");
    // A second container in that pod's directory: which one is unknown, the id says.
    std::fs::create_dir(pod.log_dir.join("sidecar")).unwrap();
    let found = by_name(&ps_json(&node, &["--no-heap"]));
    let short = &app.id[..12];
    assert!(
        found.contains_key(&format!("web/front-6b7c/{short}")),
        "{found:#?}"
    );
    // No pods directory at all: the pod UID and container id of the cgroup path.
    let nowhere = util::tempdir();
    let found = by_name(&ps_json_in(
        &node,
        &nowhere.path().join("pods"),
        &["--no-heap"],
    ));
    assert!(
        found.contains_key(&format!("pod:{}/{short}", pod.uid)),
        "{found:#?}"
    );
}

#[test]
fn garbage_in_the_pods_directories_is_reported_and_the_good_names_stay() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let pod = node.pod("shop", "cart-1", Qos::Burstable, Some(128 * MIB));
    let c = node.container(&pod, "api", Some(128 * MIB));
    start_listening(
        &node,
        &c,
        &fixtures.join("steady"),
        &["-working-set", "2MiB"],
    );
    let pods = node.pods_dir();
    let containers = node.containers_dir();
    std::fs::create_dir(pods.join("not-a-pod")).unwrap();
    std::fs::create_dir(pods.join("shop_cart-1_not-a-uid")).unwrap();
    std::fs::create_dir(pods.join(format!("a_b_{}_extra", pod.uid))).unwrap();
    std::fs::create_dir(pods.join("UPPER_Case_x")).unwrap();
    std::fs::write(pods.join(format!("shop_file-1_{}", pod.uid)), "a file").unwrap();
    {
        use std::os::unix::ffi::OsStrExt as _;
        std::fs::create_dir(pods.join(std::ffi::OsStr::from_bytes(b"bad\xff\xfename"))).unwrap();
    }
    std::os::unix::fs::symlink("/nonexistent", containers.join("dangling.log")).unwrap();
    std::fs::write(
        containers.join(format!("cart-1_shop_api-{}.log", &c.id[..12])),
        "",
    )
    .unwrap();

    let json = ps_json(&node, &["--no-heap"]);
    assert!(by_name(&json).contains_key("shop/cart-1/api"), "{json:#}");
    let garbage = notes_of(&json, "garbage-name");
    for name in [
        "not-a-pod",
        "shop_cart-1_not-a-uid",
        "_extra",
        "UPPER_Case_x",
        "shop_file-1_",
        "bad\u{fffd}\u{fffd}name",
        "dangling.log",
        &c.id[..12],
    ] {
        assert!(
            garbage.iter().any(|n| n.contains(name)),
            "no note names {name:?}: {garbage:#?}"
        );
    }
    assert_eq!(garbage.len(), 8, "{garbage:#?}");
    // The table run prints them as notes on stderr, and still exits 0.
    let out = util::heapwatch()
        .args(["ps", "--no-heap", "--cgroup-root"])
        .arg(node.cgroup_root())
        .arg("--pods-dir")
        .arg(pods)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        util::stderr(&out).contains("note: "),
        "{}",
        util::stderr(&out)
    );
    assert!(util::stdout(&out).contains("shop/cart-1/api"));
}

#[test]
fn an_oom_killed_container_shows_its_kill_and_its_restarted_process() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let pod = node.pod("jobs", "grower-1", Qos::Guaranteed, Some(64 * MIB));
    let c = node.container(&pod, "grow", Some(64 * MIB));
    let sup = node.supervise(
        c.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "32MiB".into()],
            restarts: 1,
            delay: Duration::ZERO,
            backoff: Duration::from_millis(200),
            new_container: false,
        },
    );
    // The kernel may freeze a task at its limit for tens of seconds before the kill.
    let first: Life = sup.wait_ended(1, Duration::from_secs(180));
    let (_, status) = first.ended.expect("ended");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "killed by the kernel: {status:?}");
    assert_eq!(first.oom_kills_after, Some(1));
    let second = sup.wait_started(2, Duration::from_secs(30));
    node.wait_for_line(&sup.container(), "listening on ", STARTUP);
    let json = ps_json(&node, &["--no-heap"]);
    let p = &by_name(&json)["jobs/grower-1/grow"];
    assert_eq!(p["pid"], second.pid, "{p:#}");
    assert_eq!(p["memory"]["oom_kills"], 1, "{p:#}");
    assert_eq!(p["memory"]["limit"], 64 * MIB);
}

#[test]
fn a_go_process_in_its_own_pid_namespace_is_listed_with_its_pid_there() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let pod = node.pod("iso", "ns-1", Qos::Burstable, Some(128 * MIB));
    let c = node.container(&pod, "app", Some(128 * MIB));
    // As a container runtime does: the program is pid 1 of a fresh PID namespace.
    node.start_wrapped(
        &c,
        &["unshare", "--pid", "--fork", "--kill-child"],
        &fixtures.join("steady"),
        &["-working-set", "2MiB"],
    );
    node.wait_for_line(&c, "listening on ", STARTUP);
    let json = ps_json(&node, &[]);
    let found = by_name(&json);
    assert_eq!(found.len(), 1, "unshare itself is not Go: {json:#}");
    let p = &found["iso/ns-1/app"];
    assert_eq!(p["ns_pid"], 1, "{p:#}");
    assert!(p["heap_inuse"].as_u64().is_some_and(|h| h > 0), "{p:#}");

    // heapwatch itself in a PID namespace of its own (a pod without hostPID) sees none of
    // them, and says why.
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_heapwatch"))
        .args(["ps", "--json", "--cgroup-root"])
        .arg(node.cgroup_root())
        .arg("--pods-dir")
        .arg(node.pods_dir())
        .output()
        .expect("unshare runs");
    assert!(out.status.success(), "{}", util::stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        json["processes"].as_array().map(Vec::len),
        Some(0),
        "{json:#}"
    );
    let ns = notes_of(&json, "pid-namespace");
    assert!(
        ns.iter().any(|n| n.contains("hostPID")),
        "a note says heapwatch sees only its own namespace: {json:#}"
    );
}

#[test]
fn a_container_restarted_as_a_kubelet_does_keeps_its_name_under_a_new_id() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Systemd) else {
        return;
    };
    let pod = node.pod("jobs", "grower-2", Qos::Burstable, Some(96 * MIB));
    let c = node.container(&pod, "grow", Some(64 * MIB));
    let sup = node.supervise(
        c.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "32MiB".into()],
            restarts: 1,
            delay: Duration::ZERO,
            backoff: Duration::from_millis(200),
            new_container: true,
        },
    );
    let first = sup.wait_ended(1, Duration::from_secs(180));
    assert_eq!(first.oom_kills_after, Some(1), "{first:?}");
    // cgroup v1 counts the kill in the container's cgroup only, not its pod's: once the
    // runtime removes the dead container's cgroup, the count is gone with it.
    let pod_kills = std::fs::read_to_string(pod.cgroup.join("memory.oom_control")).unwrap();
    assert!(pod_kills.contains("oom_kill 0"), "{pod_kills}");
    sup.wait_started(2, Duration::from_secs(30));
    let now = sup.container();
    node.wait_for_line(&now, "listening on ", STARTUP);
    assert_ne!(now.id, c.id);
    assert!(!c.cgroup.exists(), "the dead container's cgroup is gone");
    let json = ps_json(&node, &["--no-heap"]);
    let found = by_name(&json);
    assert_eq!(found.len(), 1, "{json:#}");
    let p = &found["jobs/grower-2/grow"];
    assert_eq!(p["container_id"], now.id.as_str());
    assert_eq!(p["memory"]["oom_kills"], 0);
    assert_eq!(sup.lives().len(), 2);
}

#[test]
fn a_cgroup_root_that_is_not_one_is_refused_naming_where_it_looked() {
    let out = util::heapwatch()
        .args(["ps", "--cgroup-root", "no-such-kubepods-hw"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
    let err = util::stderr(&out);
    assert!(err.starts_with("heapwatch: "), "{err}");
    assert!(err.contains("no-such-kubepods-hw"), "{err}");
    let dir = util::tempdir();
    let out = util::heapwatch()
        .args(["ps", "--cgroup-root"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
    assert!(util::stderr(&out).contains(&dir.path().display().to_string()));
}

/// The node `watch`'s tests will run on (issue 26): five containers, one OOM-killed and
/// restarted in its cgroup three times by a supervisor, one steady, one goroutine leak, one
/// not Go, one appearing 10 s late. `ps` lists the four Go containers by pod name with their
/// limits, never the other, and sees each kill in the grower's cgroup.
#[test]
fn ps_on_the_five_container_node_lists_the_four_go_containers() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let grower_pod = node.pod("jobs", "grower-0", Qos::Guaranteed, Some(64 * MIB));
    let grower = node.container(&grower_pod, "grow", Some(64 * MIB));
    let api_pod = node.pod("shop", "cart-1", Qos::Burstable, Some(256 * MIB));
    let api = node.container(&api_pod, "api", Some(128 * MIB));
    let leak_pod = node.pod("shop", "notify-2", Qos::Burstable, None);
    let leak = node.container(&leak_pod, "worker", Some(96 * MIB));
    let shell_pod = node.pod("tools", "debug-0", Qos::BestEffort, None);
    let shell = node.container(&shell_pod, "shell", None);
    let late_pod = node.pod("web", "late-3", Qos::Burstable, Some(128 * MIB));
    let late = node.container(&late_pod, "app", Some(96 * MIB));

    let grows = node.supervise(
        grower.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "16MiB".into()],
            restarts: 3,
            delay: Duration::ZERO,
            backoff: Duration::from_millis(500),
            new_container: false,
        },
    );
    start_listening(
        &node,
        &api,
        &fixtures.join("steady"),
        &["-working-set", "8MiB"],
    );
    start_listening(&node, &leak, &fixtures.join("goroutineleak"), &[]);
    let shell_pid = node.start(&shell, Path::new("/bin/sleep"), &["600"]);
    let arrives = node.supervise(
        late.clone(),
        Supervised {
            program: fixtures.join("steady"),
            args: vec!["-working-set".into(), "4MiB".into()],
            restarts: 0,
            delay: Duration::from_secs(10),
            backoff: Duration::ZERO,
            new_container: false,
        },
    );
    let early = by_name(&ps_json(&node, &["--no-heap"]));
    assert!(
        !early.contains_key(&late.full_name()),
        "not there yet: {early:#?}"
    );

    // After the first kill, ps counts it in the grower's cgroup while a later life runs (one
    // lives a few seconds: asked until one is seen, within a bound).
    grows.wait_started(2, Duration::from_secs(120));
    let started = std::time::Instant::now();
    let (kills, json) = loop {
        let json = ps_json(&node, &["--no-heap"]);
        let kills = by_name(&json)
            .get(&grower.full_name())
            .and_then(|p| p["memory"]["oom_kills"].as_u64());
        if let Some(kills) = kills {
            break (kills, json);
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the grower was never listed again: {json:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        (1..=3).contains(&kills),
        "the grower's kills so far: {json:#}"
    );
    let found = by_name(&json);
    for c in [&api, &leak] {
        assert_eq!(found[&c.full_name()]["memory"]["oom_kills"], 0, "{json:#}");
    }

    arrives.wait_started(1, Duration::from_secs(30));
    node.wait_for_line(&late, "listening on ", STARTUP);
    let json = ps_json(&node, &["--no-heap"]);
    let found = by_name(&json);
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "jobs/grower-0/grow",
            "shop/cart-1/api",
            "shop/notify-2/worker",
            "web/late-3/app"
        ],
        "{json:#}"
    );
    for c in [&grower, &api, &leak, &late] {
        assert_eq!(
            found[&c.full_name()]["memory"]["limit"],
            c.limit.unwrap(),
            "{}",
            c.name
        );
    }
    assert!(!json.to_string().contains(&format!("\"pid\":{shell_pid},")));

    // Every kill is the kernel's, counted in the grower's own cgroup.
    let last = grows.wait_ended(4, Duration::from_secs(300));
    use std::os::unix::process::ExitStatusExt as _;
    let lives = grows.lives();
    assert_eq!(lives.len(), 4);
    for (n, life) in lives.iter().enumerate() {
        let (_, status) = life.ended.expect("ended");
        assert_eq!(status.signal(), Some(9), "life {n}: {status:?}");
        assert_eq!(life.oom_kills_after, Some(n as u64 + 1), "life {n}");
    }
    assert_eq!(last.cgroup, grower.cgroup, "restarted in its own cgroup");
    let after = by_name(&ps_json(&node, &["--no-heap"]));
    assert!(!after.contains_key("jobs/grower-0/grow"), "{after:#?}");
    assert_eq!(after.len(), 3);
}
