//! What a cgroup's path says about the container in it, as kubelets and container runtimes lay
//! them out: the pod UID, the container id and the QoS class, in the cgroupfs layout
//! (`kubepods/burstable/pod<UID>/<CID>`) and the systemd one
//! (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID_>.slice/cri-containerd-<CID>.scope`).

use serde::Serialize;

/// A pod's quality-of-service class, which decides its place in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "guaranteed",
            QosClass::Burstable => "burstable",
            QosClass::BestEffort => "besteffort",
        }
    }
}

/// What the path tells; every part optional (a path outside Kubernetes may still name a
/// container, `system.slice/docker-<CID>.scope`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathFacts {
    /// Only inside the kubepods tree.
    pub pod_uid: Option<String>,
    /// Inside the kubepods tree the kubelet's container; outside it another runtime's (a
    /// node's own container, as kind runs one, is above kubepods and never taken for it).
    pub container_id: Option<String>,
    pub qos: Option<QosClass>,
    /// The path runs through `kubepods` (or `kubepods.slice`): what it names is the kubelet's.
    pub kubelet: bool,
}

/// Reads a cgroup path (relative to the hierarchy's mount, or absolute: only the components
/// matter).
pub fn parse(path: &str) -> PathFacts {
    let mut facts = PathFacts::default();
    let mut in_kubepods = false;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "kubepods" || part == "kubepods.slice" {
            in_kubepods = true;
            // A container id above is the node's own container, not one of the kubelet's.
            facts.container_id = None;
            facts.kubelet = true;
            continue;
        }
        if in_kubepods && facts.pod_uid.is_none() {
            if let Some(qos) = qos_of(part) {
                facts.qos = Some(qos);
                continue;
            }
        }
        if let Some(uid) = pod_uid_of(part).filter(|_| in_kubepods) {
            facts.pod_uid = Some(uid);
            if in_kubepods && facts.qos.is_none() {
                // A pod directly under kubepods has no QoS level: it is Guaranteed.
                facts.qos = Some(QosClass::Guaranteed);
            }
            continue;
        }
        if let Some(cid) = container_id_of(part) {
            facts.container_id = Some(cid);
        }
    }
    facts
}

/// Where a cgroup directory (its name) sits in the kubelet's tree, for saying whose a limit
/// is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `kubepods` and its QoS slices: the node's allocatable, not a container's.
    Node,
    /// A pod's cgroup.
    Pod,
}

/// The level of a cgroup directory by its name; `None` for a container's or anything else.
pub fn level(name: &str) -> Option<Level> {
    if name == "kubepods" || name == "kubepods.slice" || qos_of(name).is_some() {
        Some(Level::Node)
    } else if pod_uid_of(name).is_some() {
        Some(Level::Pod)
    } else {
        None
    }
}

/// `burstable`, `besteffort`, or the systemd slices `kubepods-burstable.slice`, ….
fn qos_of(part: &str) -> Option<QosClass> {
    match part {
        "burstable" | "kubepods-burstable.slice" => Some(QosClass::Burstable),
        "besteffort" | "kubepods-besteffort.slice" => Some(QosClass::BestEffort),
        _ => None,
    }
}

/// `pod<UID>` (cgroupfs) or `kubepods[-QOS]-pod<UID with _ for ->.slice` (systemd).
fn pod_uid_of(part: &str) -> Option<String> {
    let uid = if let Some(slice) = part.strip_suffix(".slice") {
        let (_, uid) = slice.rsplit_once("-pod")?;
        uid.replace('_', "-")
    } else {
        part.strip_prefix("pod")?.to_string()
    };
    is_uid(&uid).then_some(uid)
}

/// A pod UID: a UUID, or the 32 hex digits of a static pod's config hash.
pub fn is_uid(text: &str) -> bool {
    (32..=36).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        && text.bytes().filter(|b| b.is_ascii_hexdigit()).count() == 32
}

/// `<CID>` (cgroupfs), `cri-containerd-<CID>.scope`, `docker-<CID>.scope`, `crio-<CID>.scope`:
/// the runtime's 64 hex digit id.
fn container_id_of(part: &str) -> Option<String> {
    let bare = part.strip_suffix(".scope").unwrap_or(part);
    let id = bare.rsplit_once('-').map_or(bare, |(_, id)| id);
    is_container_id(id).then(|| id.to_string())
}

pub fn is_container_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8f3c2a10-4b5d-4e6f-9a7b-0c1d2e3f4a5b";
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// Facts of a path inside kubepods.
    fn facts(uid: Option<&str>, cid: Option<&str>, qos: Option<QosClass>) -> PathFacts {
        PathFacts {
            pod_uid: uid.map(str::to_string),
            container_id: cid.map(str::to_string),
            qos,
            kubelet: true,
        }
    }

    #[test]
    fn the_cgroupfs_layout_gives_uid_container_and_qos() {
        assert_eq!(
            parse(&format!("/kubepods/burstable/pod{UID}/{CID}")),
            facts(Some(UID), Some(CID), Some(QosClass::Burstable))
        );
        assert_eq!(
            parse(&format!("kubepods/besteffort/pod{UID}/{CID}")),
            facts(Some(UID), Some(CID), Some(QosClass::BestEffort))
        );
        assert_eq!(
            parse(&format!("/kubepods/pod{UID}/{CID}")),
            facts(Some(UID), Some(CID), Some(QosClass::Guaranteed))
        );
        // Nested under a node's own container (kind, docker-in-docker), the pod level alone:
        // the node's container id is not the kubelet's.
        assert_eq!(
            parse(&format!("/docker/{CID}/kubepods/burstable/pod{UID}")),
            facts(Some(UID), None, Some(QosClass::Burstable)),
        );
        let other = CID.replace('0', "f");
        assert_eq!(
            parse(&format!(
                "/docker/{CID}/kubepods/burstable/pod{UID}/{other}"
            )),
            facts(Some(UID), Some(&other), Some(QosClass::Burstable)),
        );
    }

    #[test]
    fn the_systemd_layout_of_each_runtime_gives_the_same() {
        let uid_ = UID.replace('-', "_");
        for runtime in ["cri-containerd", "docker", "crio"] {
            assert_eq!(
                parse(&format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/{runtime}-{CID}.scope"
                )),
                facts(Some(UID), Some(CID), Some(QosClass::Burstable)),
                "{runtime}"
            );
        }
        assert_eq!(
            parse(&format!(
                "kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{CID}.scope"
            )),
            facts(Some(UID), Some(CID), Some(QosClass::Guaranteed))
        );
    }

    #[test]
    fn outside_kubernetes_only_a_container_id_or_nothing() {
        let outside = |cid: Option<&str>| PathFacts {
            container_id: cid.map(str::to_string),
            ..PathFacts::default()
        };
        assert_eq!(
            parse(&format!("/system.slice/docker-{CID}.scope")),
            outside(Some(CID))
        );
        // A pod-like directory outside kubepods is no pod.
        assert_eq!(
            parse(&format!("/machine.slice/pod{UID}/{CID}")),
            outside(Some(CID))
        );
        assert_eq!(parse("/system.slice/sshd.service"), PathFacts::default());
        assert_eq!(parse("/"), PathFacts::default());
        // Look-alikes: a short id, a pod dir with a bad uid, a slice named -pod but no uid.
        assert_eq!(
            parse("/kubepods/burstable/podnot-a-uid/abc123"),
            facts(None, None, Some(QosClass::Burstable))
        );
        assert_eq!(parse("/user.slice/user-pod.slice"), PathFacts::default());
    }

    #[test]
    fn kubepods_and_its_qos_slices_are_the_node_level_a_pod_the_pod_level() {
        let uid_ = UID.replace('-', "_");
        for node in [
            "kubepods",
            "kubepods.slice",
            "burstable",
            "besteffort",
            "kubepods-burstable.slice",
            "kubepods-besteffort.slice",
        ] {
            assert_eq!(level(node), Some(Level::Node), "{node}");
        }
        assert_eq!(level(&format!("pod{UID}")), Some(Level::Pod));
        assert_eq!(
            level(&format!("kubepods-burstable-pod{uid_}.slice")),
            Some(Level::Pod)
        );
        assert_eq!(level(CID), None);
        assert_eq!(level("system.slice"), None);
    }

    #[test]
    fn static_pod_uids_are_config_hashes() {
        assert!(is_uid("2c0e5d5c7f6b4a1e9d8c7b6a5f4e3d2c"));
        assert!(is_uid(UID));
        assert!(!is_uid("2c0e5d5c7f6b4a1e9d8c7b6a5f4e3d2"));
        assert!(!is_uid("zzzzzzzz-4b5d-4e6f-9a7b-0c1d2e3f4a5b"));
    }
}
