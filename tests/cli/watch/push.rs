//! `heapwatch watch --push`: what a node's watch sends to Pyroscope (a real receiver of its
//! push API, tests/cli/push/receiver.rs), and with which labels.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use serde_json::Value;

use super::{MIB, STARTUP, ok_heap, records, start_watch, stop_watch, target_dir, wait_until};
use crate::kubenode::{KubeNode, Layout, Qos, Supervised};
use crate::push::receiver::Receiver;
use crate::util;

/// `watch --push`: every capture of every container reaches a real Pyroscope push receiver
/// once, labelled with its pod (namespace, pod, container, service_name namespace/container),
/// across a kubelet restart into a new cgroup (the container's second session pushes what the
/// first left, nothing twice); the labels are kept in each node's run.json for later pushes.
#[test]
fn watch_pushes_every_capture_with_its_pods_labels() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0"]) else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let api_pod = node.pod("shop", "cart-1", Qos::Burstable, Some(256 * MIB));
    let api = node.container(&api_pod, "api", Some(128 * MIB));
    let grower_pod = node.pod("jobs", "grower-4", Qos::Burstable, None);
    let grower = node.container(&grower_pod, "grow", Some(64 * MIB));
    node.start(&api, &fixtures.join("steady"), &["-working-set", "8MiB"]);
    node.wait_for_line(&api, "listening on ", STARTUP);
    let dir = util::tempdir();
    let out = dir.path().join("node-run");
    let log = dir.path().join("watch.err");
    let mut watch = start_watch(
        &node,
        &out,
        &log,
        &[
            "--baseline",
            "1s",
            "--push",
            &receiver.url,
            "--retry-max",
            "300ms",
        ],
    );
    let grows = node.supervise(
        grower.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "16MiB".into()],
            restarts: 1,
            delay: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            new_container: true,
        },
    );
    grows.wait_ended(2, Duration::from_secs(120));
    let api_dir = target_dir(&out, &api.full_name());
    wait_until("three captures of the api", Duration::from_secs(30), || {
        records(&api_dir).iter().filter(|r| ok_heap(r)).count() >= 3
    });
    std::thread::sleep(Duration::from_millis(500));
    stop_watch(&mut watch, &log);
    let said = fs::read_to_string(&log).unwrap_or_default();
    let lives = grows.lives();
    assert_ne!(lives[0].cgroup, lives[1].cgroup, "a new container");

    for (c, namespace, pod, container) in [
        (&api, "shop", "cart-1", "api"),
        (&grower, "jobs", "grower-4", "grow"),
    ] {
        let d = target_dir(&out, &c.full_name());
        // Every stored capture of the node delivered exactly once, whichever session sent it.
        let events = crate::push::assert_all_delivered_once_among(&d, &receiver);
        assert!(events.len() >= 3, "{}: {events:#?}\n{said}", c.full_name());
        let service = format!("{namespace}/{container}");
        for (seq, e) in &events {
            let labels = &e["labels"];
            for (name, want) in [
                ("namespace", namespace),
                ("pod", pod),
                ("container", container),
                ("service_name", service.as_str()),
            ] {
                assert_eq!(
                    labels[name],
                    want,
                    "seq {seq} of {}: {labels}",
                    c.full_name()
                );
            }
        }
        let cycles: BTreeSet<&str> = events
            .values()
            .filter_map(|e| e["labels"]["heapwatch_boot_cycle"].as_str())
            .collect();
        let want = if c.name == "grow" { 2 } else { 1 };
        assert_eq!(cycles.len(), want, "{}: {cycles:?}", c.full_name());
        let info: Value = serde_json::from_slice(&fs::read(d.join("run.json")).unwrap()).unwrap();
        assert_eq!(
            info["options"]["push"]["labels"]["pod"], pod,
            "kept for later pushes: {info:#}"
        );
    }
}
