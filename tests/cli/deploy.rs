//! deploy/: the DaemonSet manifest is valid YAML that names the image deploy/build-image.sh
//! builds, grants exactly the one capability heapwatch needs, and mounts the node's paths that
//! discovery reads by default (the ones the node tests lay out); the Dockerfile holds the
//! binary and nothing else.

use yaml_rust2::{Yaml, YamlLoader};

use crate::util;

fn manifest() -> Vec<Yaml> {
    let path = util::repo().join("deploy/daemonset.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/daemonset.yaml");
    YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

fn strings(y: &Yaml) -> Vec<&str> {
    y.as_vec()
        .map(|v| v.iter().filter_map(Yaml::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_daemonset_names_the_image_one_capability_and_the_mounts_discovery_reads() {
    let docs = manifest();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["Namespace", "DaemonSet"]);
    let ns = &docs[0];
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str(),
        Some("privileged"),
        "hostPID and hostPath need a namespace that admits them"
    );
    let ds = &docs[1];
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    assert_eq!(ds["metadata"]["namespace"].as_str(), Some("heapwatch"));
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (key, value) in ds["spec"]["selector"]["matchLabels"]
        .as_hash()
        .expect("a selector")
    {
        assert_eq!(
            &labels[key.as_str().unwrap()],
            value,
            "the selector matches the pods"
        );
    }
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    for shared in ["hostNetwork", "hostIPC"] {
        assert!(pod[shared].is_badvalue(), "{shared} is not needed");
    }
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));

    let containers = pod["containers"].as_vec().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(
        c["image"].as_str(),
        Some(format!("heapwatch:{}", env!("CARGO_PKG_VERSION")).as_str()),
        "the image deploy/build-image.sh tags"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(strings(&sc["capabilities"]["add"]), ["SYS_PTRACE"]);

    // Each mount is the node's own path at the same place, read only except the runs.
    let volumes = pod["volumes"].as_vec().expect("volumes");
    let host_path = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .and_then(|v| v["hostPath"]["path"].as_str())
            .unwrap_or_else(|| panic!("no hostPath volume {name}"))
    };
    let mut mounts = Vec::new();
    for m in c["volumeMounts"].as_vec().expect("volumeMounts") {
        let path = m["mountPath"].as_str().expect("mountPath");
        let name = m["name"].as_str().expect("name");
        let read_only = m["readOnly"].as_bool().unwrap_or(false);
        assert_eq!(
            host_path(name),
            path,
            "{name} is the node's path at the same place"
        );
        mounts.push((path, read_only));
    }
    assert_eq!(
        mounts,
        [
            ("/sys/fs/cgroup", true),
            (heapwatch::node::DEFAULT_PODS_DIR, true),
            ("/var/log/containers", true),
            ("/var/lib/heapwatch", false),
        ]
    );
    // Discovery's defaults are those paths: the memory hierarchy under /sys/fs/cgroup, the
    // containers directory beside the pods directory.
    assert_eq!(heapwatch::node::DEFAULT_PODS_DIR, "/var/log/pods");
    let cgroup_root = heapwatch::source::cgroup::CgroupRoots::default();
    assert!(
        cgroup_root.v1.starts_with("/sys/fs/cgroup")
            && cgroup_root.v2.starts_with("/sys/fs/cgroup")
    );

    let args = strings(&c["args"]);
    let flag = |name: &str| {
        let at = args
            .iter()
            .position(|a| *a == name)
            .unwrap_or_else(|| panic!("no {name} in {args:?}"));
        args[at + 1]
    };
    assert_eq!(args[0], "watch");
    assert_eq!(flag("--pods-dir"), "/var/log/pods");
    assert_eq!(flag("--cgroup-root"), "kubepods");
    assert!(
        flag("--out").starts_with("/var/lib/heapwatch/"),
        "runs land on the writable mount"
    );
    assert_eq!(flag("--disk-budget"), "2GiB");
    // The arguments are the real command's: here they parse, and `watch` stops at the first
    // thing this machine lacks (a cgroup root named kubepods, or the run directory), never at
    // a flag.
    let dir = util::tempdir();
    let not_a_dir = util::write(dir.path(), "file", b"x");
    let mut given: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let at = given.iter().position(|a| a == "--out").unwrap();
    given[at + 1] = not_a_dir.display().to_string();
    let at = given.iter().position(|a| a == "--cgroup-root").unwrap();
    given[at + 1] = "heapwatch-no-such-root".into();
    let out = util::heapwatch().args(&given).output().unwrap();
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("heapwatch-no-such-root"), "{err}");
}

#[test]
fn the_image_holds_the_static_binary_only() {
    let text = std::fs::read_to_string(util::repo().join("deploy/Dockerfile")).expect("Dockerfile");
    let steps: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        steps,
        [
            "FROM scratch",
            "COPY heapwatch /heapwatch",
            "WORKDIR /var/lib/heapwatch",
            "ENTRYPOINT [\"/heapwatch\"]",
            "CMD [\"--help\"]",
        ]
    );
    let script =
        std::fs::read_to_string(util::repo().join("deploy/build-image.sh")).expect("script");
    assert!(
        script.contains("+crt-static"),
        "the binary is linked statically"
    );
    assert!(
        script.contains("heapwatch:$VERSION"),
        "the script tags the image the manifest names"
    );
}
