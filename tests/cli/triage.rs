//! `heapwatch triage` over the pod and event documents of testdata/k8s: one verdict per
//! termination class, a Burstable pod, the field report's staggered replica set, replicas that
//! die together, readiness-only events against liveness kills, and broken inputs (exit 2, one
//! line that names the file).

use std::path::PathBuf;

use serde_json::Value;

use crate::util;

/// The moment the fixtures describe.
const AT: &str = "2024-05-02T12:00:00Z";

fn k8s(name: &str) -> PathBuf {
    let path = util::repo().join("testdata/k8s").join(name);
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

fn triage_args(pod: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "triage".to_string(),
        k8s(pod).display().to_string(),
        "--at".into(),
        AT.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `heapwatch triage POD --json …`, which must succeed.
fn triage_json(pod: &str, extra: &[&str]) -> Value {
    let mut args = triage_args(pod, extra);
    args.push("--json".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = util::run(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "triage {pod}: {}",
        util::stderr(&out)
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("triage {pod} --json is not JSON: {e}"));
    assert_eq!(doc["schema"], 1);
    doc
}

fn triage_text(pod: &str, extra: &[&str]) -> String {
    let args = triage_args(pod, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = util::run(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "triage {pod}: {}",
        util::stderr(&out)
    );
    util::stdout(&out)
}

fn pods(doc: &Value) -> &Vec<Value> {
    doc["pods"].as_array().expect("pods[]")
}

/// The only container of the only pod.
fn container(doc: &Value) -> &Value {
    assert_eq!(pods(doc).len(), 1);
    &pods(doc)[0]["containers"][0]
}

fn verdict(c: &Value) -> &str {
    c["verdict"]["code"].as_str().expect("verdict.code")
}

#[test]
fn each_termination_class_gets_its_verdict() {
    for (file, class, code, restarts) in [
        ("pod-oomkilled.json", "oom-killed", "oom", 12),
        ("pod-137-error.json", "oom-unflagged", "oom", 9),
        ("pod-sigsegv.json", "segfault", "crash", 4),
        ("pod-sigterm.json", "sigterm", "sigterm", 1),
        ("pod-exit-2.json", "exit", "exit-code", 27),
    ] {
        let doc = triage_json(file, &[]);
        let c = container(&doc);
        assert_eq!(c["restarts"], restarts, "{file}");
        assert_eq!(c["termination"]["class"], class, "{file}");
        assert_eq!(verdict(c), code, "{file}: {}", c["verdict"]["summary"]);
    }
    let doc = triage_json("pod-no-restarts.json", &[]);
    let c = container(&doc);
    assert_eq!(verdict(c), "no-restarts");
    assert!(c["termination"].is_null());
}

#[test]
fn the_verdicts_say_what_each_exit_means() {
    let summary = |file: &str| -> String {
        let doc = triage_json(file, &[]);
        container(&doc)["verdict"]["summary"]
            .as_str()
            .expect("summary")
            .to_string()
    };
    assert!(summary("pod-oomkilled.json").starts_with("OOM-killed at its 512Mi memory limit"));
    let unflagged = summary("pod-137-error.json");
    assert!(
        unflagged.contains("treated as an OOM kill")
            && unflagged.contains("a liveness kill, which also ends in 137, is not ruled out"),
        "{unflagged}"
    );
    assert!(summary("pod-sigsegv.json").contains("SIGSEGV (exit 139): a bug, not memory"));
    assert!(summary("pod-sigterm.json").contains("a controlled stop, not a death"));
    let exit = triage_json("pod-exit-2.json", &[]);
    assert_eq!(container(&exit)["state"], "waiting: CrashLoopBackOff");
    let text = triage_text("pod-oomkilled.json", &[]);
    assert!(
        text.contains(
            "last death   137 OOMKilled at 2024-05-02T11:46:27Z after a run of 25m 23s: OOM kill"
        ),
        "{text}"
    );
    assert!(text.contains("verdict      oom: OOM-killed at its 512Mi memory limit"));
}

#[test]
fn a_burstable_pod_with_requests_an_eighth_of_its_limit() {
    let doc = triage_json("pod-burstable.json", &[]);
    let pod = &pods(&doc)[0];
    assert_eq!(pod["qos_class"], "Burstable");
    let c = container(&doc);
    let m = &c["memory"];
    assert_eq!(m["request"], "128Mi");
    assert_eq!(m["request_bytes"], 128u64 << 20);
    assert_eq!(m["limit"], "1Gi");
    assert_eq!(m["limit_bytes"], 1u64 << 30);
    assert_eq!(m["ratio"], 8.0);
    let meaning = m["meaning"].as_str().expect("meaning");
    assert!(
        meaning.starts_with("8x: the scheduler reserves 128Mi for a container allowed 1Gi")
            && meaning.contains("--usage CONTAINER=SIZE")
            && meaning.contains("QoS Burstable: scheduling is blind to the real use"),
        "{meaning}"
    );
    assert_eq!(verdict(c), "no-restarts");
    assert!(
        c["verdict"]["summary"]
            .as_str()
            .unwrap()
            .contains("requests 128Mi against limits 1Gi (8x)")
    );
    // The cpu side: 10m requested, 2 CPUs of limit, worker count unknown for an Envoy.
    assert_eq!(c["cpu"]["request_cores"], 0.01);
    assert_eq!(c["cpu"]["limit_cores"], 2.0);
    assert!(
        c["cpu"]["meaning"]
            .as_str()
            .unwrap()
            .starts_with("worker count unknown")
    );

    // With the usage and the worker count known.
    let doc = triage_json(
        "pod-burstable.json",
        &["--usage", "istio-proxy=700Mi", "--concurrency", "16"],
    );
    let c = container(&doc);
    let meaning = c["memory"]["meaning"].as_str().unwrap();
    assert!(
        meaning.starts_with(
            "8x: the scheduler reserves 128Mi for a container that uses 700Mi (68 % of its 1Gi limit)"
        ),
        "{meaning}"
    );
    assert_eq!(c["memory"]["usage_bytes"], 700u64 << 20);
    assert_eq!(c["cpu"]["workers"], 16);
    assert_eq!(c["cpu"]["workers_source"], "--concurrency");
    assert_eq!(c["cpu"]["workers_per_cpu"], 8.0);
    assert_eq!(c["cpu"]["multiplied"], true);
    assert!(
        c["verdict"]["summary"]
            .as_str()
            .unwrap()
            .contains("16 workers on a 2 CPU limit multiply its per-worker memory")
    );
}

#[test]
fn the_field_reports_replicas_restart_staggered_and_readiness_is_the_aftermath() {
    let doc = triage_json(
        "gateway-replicas.json",
        &[
            "--events",
            k8s("events-readiness-only.json").to_str().unwrap(),
            "--concurrency",
            "16",
        ],
    );
    let pods = pods(&doc);
    assert_eq!(pods.len(), 3);
    let restarts: Vec<u64> = pods
        .iter()
        .map(|p| p["containers"][0]["restarts"].as_u64().unwrap())
        .collect();
    assert_eq!(restarts, [49, 47, 51]);
    for pod in pods {
        let c = &pod["containers"][0];
        let name = pod["name"].as_str().unwrap();
        assert_eq!(verdict(c), "oom", "{name}: {}", c["verdict"]["summary"]);
        let r = &c["replicas"];
        assert_eq!(r["pattern"], "staggered", "{name}");
        assert_eq!(r["replicas"], 3);
        assert_eq!(r["restarted"], 3);
        assert_eq!(r["nodes"], 3);
        // Last deaths at 11:29:51, 11:40:44 and 11:49:58.
        assert_eq!(r["spread_s"], 1207.0);
        let p = &c["probes"];
        assert_eq!(p["pattern"], "readiness-only", "{name}");
        assert_eq!(p["readiness_failures"], 14);
        assert_eq!(p["liveness_failures"], 0);
        assert_eq!(p["killing"], 0);
        assert_eq!(p["cover_last_death"], true);
        assert_eq!(c["memory"]["ratio"], 8.0);
        assert_eq!(c["cpu"]["multiplied"], true);
        let summary = c["verdict"]["summary"].as_str().unwrap();
        assert!(
            summary
                .contains("3 of 3 replicas die on their own, staggered: internal, not a rollout")
                && summary.contains("readiness failures are the aftermath, not the cause"),
            "{summary}"
        );
    }
    // The one 137/Error among OOMKilled siblings is the same OOM.
    let unflagged = &pods[1]["containers"][0];
    assert_eq!(unflagged["termination"]["class"], "oom-unflagged");
    assert!(
        unflagged["verdict"]["summary"]
            .as_str()
            .unwrap()
            .contains("while 2 sibling replicas were OOMKilled: the same OOM"),
        "{}",
        unflagged["verdict"]["summary"]
    );

    let text = triage_text(
        "gateway-replicas.json",
        &[
            "--events",
            k8s("events-readiness-only.json").to_str().unwrap(),
        ],
    );
    assert!(
        text.contains(
            "replicas     3 of 3 replicas of ReplicaSet istio-ingressgateway-759b886f64 restart, \
             their last deaths spread over 20m 7s on 3 nodes: each dies on its own"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "probes       only readiness failures (14), no Liveness probe failed, no Killing"
        ),
        "{text}"
    );
}

#[test]
fn usage_of_replicas_of_different_ages_gives_the_growth_rate() {
    // As the field report reads `kubectl top` against the pods' ages: 737Mi on the replica
    // that restarted 30 min ago, 424Mi on the one that restarted 19 min ago.
    let doc = triage_json(
        "gateway-replicas.json",
        &[
            "--usage",
            "istio-ingressgateway-759b886f64-2pnzt/istio-proxy=737Mi",
            "--usage",
            "istio-ingressgateway-759b886f64-5c4nf/istio-proxy=424Mi",
        ],
    );
    let m = &pods(&doc)[1]["containers"][0]["memory"];
    assert_eq!(m["growth_basis"], "replicas");
    let per_min = m["growth_bytes_per_min"].as_f64().unwrap() / (1u64 << 20) as f64;
    // (737 − 424) MiB over the 652 s between their starts (11:29:55 and 11:40:47).
    assert!((per_min - 313.0 / (652.0 / 60.0)).abs() < 0.01, "{per_min}");
    assert!(m["limit_in_s"].as_f64().unwrap() > 0.0);
    // The pod without a usage figure has no estimate.
    assert!(pods(&doc)[0]["containers"][0]["memory"]["growth_bytes_per_min"].is_null());
}

#[test]
fn replicas_that_die_together_point_at_a_shared_trigger() {
    let doc = triage_json("egress-together.json", &[]);
    for pod in pods(&doc) {
        let c = &pod["containers"][0];
        assert_eq!(c["replicas"]["pattern"], "together");
        assert_eq!(c["replicas"]["spread_s"], 40.0);
        assert_eq!(c["replicas"]["nodes"], 1);
        assert_eq!(verdict(c), "oom");
        assert!(
            c["replicas"]["meaning"]
                .as_str()
                .unwrap()
                .contains("all on node worker-5.ocp.example: a shared trigger"),
        );
    }
}

#[test]
fn liveness_failures_with_killing_are_kubelet_restarts_not_oom() {
    // Alone, 137 with reason Error reads as an OOM kill.
    let alone = triage_json("pod-liveness.json", &[]);
    assert_eq!(verdict(container(&alone)), "oom");

    let doc = triage_json(
        "pod-liveness.json",
        &[
            "--events",
            k8s("events-liveness-killing.json").to_str().unwrap(),
        ],
    );
    let c = container(&doc);
    assert_eq!(verdict(c), "liveness-kill", "{}", c["verdict"]["summary"]);
    let p = &c["probes"];
    assert_eq!(p["pattern"], "liveness-kills");
    assert_eq!(p["liveness_failures"], 18);
    assert_eq!(p["killing"], 6);
    assert_eq!(p["readiness_failures"], 21);
    assert!(
        c["termination"]["meaning"]
            .as_str()
            .unwrap()
            .contains("the kubelet's SIGKILL once the grace period ran out, not an OOM kill")
    );

    // The same events say nothing about a pod they do not name.
    let other = triage_json(
        "pod-oomkilled.json",
        &[
            "--events",
            k8s("events-liveness-killing.json").to_str().unwrap(),
        ],
    );
    assert_eq!(container(&other)["probes"]["pattern"], "none");
    assert_eq!(verdict(container(&other)), "oom");
}

/// Exit 2 and one line on stderr that names the file and what is wrong.
fn refused(args: &[&str], file: &str, what: &str) {
    let out = util::run(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}",
        util::stderr(&out)
    );
    let err = util::stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(file) && err.contains(what), "{err}");
    assert!(util::stdout(&out).is_empty());
}

#[test]
fn broken_documents_exit_2_naming_the_file() {
    let malformed = k8s("malformed.json");
    refused(
        &["triage", malformed.to_str().unwrap()],
        "malformed.json",
        "not JSON",
    );
    let deployment = k8s("not-a-pod.json");
    refused(
        &["triage", deployment.to_str().unwrap()],
        "not-a-pod.json",
        "a Deployment, not a Pod or a List of pods",
    );
    // Events where the pods belong, and a pod where the events belong.
    let events = k8s("events-readiness-only.json");
    refused(
        &["triage", events.to_str().unwrap()],
        "events-readiness-only.json",
        "item 0 of the List is an Event, not a Pod",
    );
    let pod = k8s("pod-burstable.json");
    refused(
        &[
            "triage",
            pod.to_str().unwrap(),
            "--events",
            pod.to_str().unwrap(),
        ],
        "pod-burstable.json",
        "not a List of Events",
    );
    let dir = util::tempdir();
    let empty = util::write(
        dir.path(),
        "empty.json",
        br#"{"apiVersion":"v1","items":[],"kind":"List"}"#,
    );
    refused(
        &["triage", empty.to_str().unwrap()],
        "empty.json",
        "no pods",
    );
    let yaml = util::write(dir.path(), "pod.yaml", b"apiVersion: v1\nkind: Pod\n");
    refused(&["triage", yaml.to_str().unwrap()], "pod.yaml", "not JSON");
    let bad = util::write(
        dir.path(),
        "bad-quantity.json",
        br#"{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"app",
            "resources":{"limits":{"memory":"12furlongs"}}}]}}"#,
    );
    refused(
        &["triage", bad.to_str().unwrap()],
        "bad-quantity.json",
        "resources.limits.memory \"12furlongs\" is not a Kubernetes quantity",
    );
    let missing = dir.path().join("missing.json");
    refused(
        &["triage", missing.to_str().unwrap()],
        "missing.json",
        "No such file",
    );
}
