//! Names as a user knows them, from the kubelet's own files on the node: the pod directories
//! `/var/log/pods/NAMESPACE_POD_UID/CONTAINER/N.log` and the symlinks
//! `/var/log/containers/POD_NAMESPACE_CONTAINER-CID.log`, which also carry the container id.
//! Each directory is listed again only when its modification time changes.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::kubepath::{self, PathFacts};
use super::{Note, NoteKind};

/// namespace/pod/container, as `kubectl` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeName {
    pub namespace: String,
    pub pod: String,
    /// `None` when the pod has several containers and the container id was not found in the
    /// containers directory.
    pub container: Option<String>,
}

/// One pod's directory.
#[derive(Debug, Clone)]
struct PodDir {
    namespace: String,
    pod: String,
    dir: PathBuf,
}

/// When a directory last changed: listing it again is needed only when this differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Stamp {
    /// A directory changed in the last two seconds may change again within the same tick of
    /// the file system's clock, unseen: such a stamp is not kept, so the next look lists again.
    fn settled(&self) -> bool {
        let now = crate::time::now_secs();
        now - self.mtime >= 2
    }
}

fn stamp(dir: &Path) -> Option<Stamp> {
    let m = fs::metadata(dir).ok()?;
    Some(Stamp {
        ino: m.ino(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}

/// The pods and containers directories, indexed by pod UID and by container id.
#[derive(Debug)]
pub struct PodsIndex {
    pods_dir: PathBuf,
    containers_dir: PathBuf,
    pods_stamp: Option<Stamp>,
    containers_stamp: Option<Stamp>,
    by_uid: HashMap<String, PodDir>,
    by_cid: HashMap<String, KubeName>,
}

impl PodsIndex {
    /// `pods_dir` is the kubelet's `/var/log/pods`; the containers directory is its sibling
    /// `containers`, as on every node.
    pub fn new(pods_dir: &Path) -> PodsIndex {
        let containers_dir = pods_dir
            .parent()
            .map_or_else(|| PathBuf::from("containers"), |p| p.join("containers"));
        PodsIndex {
            pods_dir: pods_dir.to_path_buf(),
            containers_dir,
            pods_stamp: None,
            containers_stamp: None,
            by_uid: HashMap::new(),
            by_cid: HashMap::new(),
        }
    }

    pub fn pods_dir(&self) -> &Path {
        &self.pods_dir
    }

    /// Lists again whichever directory changed since the last look; entries whose names do
    /// not follow the layout are reported once per listing. Returns whether anything changed.
    pub fn refresh(&mut self, notes: &mut Vec<Note>) -> bool {
        let mut changed = false;
        let now = stamp(&self.pods_dir);
        if now != self.pods_stamp || now.is_none() && !self.by_uid.is_empty() {
            self.pods_stamp = now.filter(Stamp::settled);
            self.by_uid = list_pods(&self.pods_dir, notes);
            changed = true;
        }
        let now = stamp(&self.containers_dir);
        if now != self.containers_stamp || now.is_none() && !self.by_cid.is_empty() {
            self.containers_stamp = now.filter(Stamp::settled);
            self.by_cid = list_containers(&self.containers_dir, notes);
            changed = true;
        }
        changed
    }

    /// The name of the container a cgroup path points at, when the node's files know it.
    pub fn name(&self, facts: &PathFacts) -> Option<KubeName> {
        // Only what is under kubepods is the kubelet's.
        if !facts.kubelet {
            return None;
        }
        if let Some(name) = facts.container_id.as_ref().and_then(|c| self.by_cid.get(c)) {
            return Some(name.clone());
        }
        let pod = self.by_uid.get(facts.pod_uid.as_ref()?)?;
        // Without the container id's symlink, the container is known only when there is one.
        let mut containers = fs::read_dir(&pod.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok());
        let only = match (containers.next(), containers.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        };
        Some(KubeName {
            namespace: pod.namespace.clone(),
            pod: pod.pod.clone(),
            container: only,
        })
    }
}

/// A name that belongs in a Kubernetes object name: lower-case letters, digits, '-' and '.'.
fn is_object_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// `NAMESPACE_POD_UID` → (namespace, pod, uid).
fn parse_pod_dir(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.split('_');
    let (ns, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = parts.next().is_none()
        && is_object_name(ns)
        && is_object_name(pod)
        && kubepath::is_uid(uid);
    ok.then_some((ns, pod, uid))
}

/// `POD_NAMESPACE_CONTAINER-CID.log` → (pod, namespace, container, cid).
fn parse_container_link(name: &str) -> Option<(&str, &str, &str, &str)> {
    let (rest, cid) = name.strip_suffix(".log")?.rsplit_once('-')?;
    let mut parts = rest.split('_');
    let (pod, ns, container) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = parts.next().is_none()
        && is_object_name(pod)
        && is_object_name(ns)
        && is_object_name(container)
        && kubepath::is_container_id(cid);
    ok.then_some((pod, ns, container, cid))
}

/// Garbage names noted one by one per directory and refresh; the rest are counted in one.
const MAX_GARBAGE_NOTES: usize = 16;

/// The notes about one directory's garbage names: the first [`MAX_GARBAGE_NOTES`] each, then
/// how many more.
struct Garbage<'a> {
    dir: &'a Path,
    seen: usize,
}

impl<'a> Garbage<'a> {
    fn new(dir: &'a Path) -> Garbage<'a> {
        Garbage { dir, seen: 0 }
    }

    fn note(&mut self, notes: &mut Vec<Note>, name: &str, expected: &str) {
        self.seen += 1;
        if self.seen <= MAX_GARBAGE_NOTES {
            notes.push(Note {
                kind: NoteKind::GarbageName,
                message: format!("{}: skipped {name:?}: not {expected}", self.dir.display()),
            });
        }
    }

    fn finish(self, notes: &mut Vec<Note>) {
        if self.seen > MAX_GARBAGE_NOTES {
            notes.push(Note {
                kind: NoteKind::GarbageName,
                message: format!(
                    "{}: skipped {} more entries that do not follow the kubelet's layout",
                    self.dir.display(),
                    self.seen - MAX_GARBAGE_NOTES
                ),
            });
        }
    }
}

fn list_pods(dir: &Path, notes: &mut Vec<Note>) -> HashMap<String, PodDir> {
    let mut pods = HashMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return pods;
    };
    let mut garbage = Garbage::new(dir);
    for entry in entries.flatten() {
        let raw = entry.file_name();
        let shown = raw.to_string_lossy();
        let Some((ns, pod, uid)) = raw.to_str().and_then(parse_pod_dir) else {
            garbage.note(notes, &shown, "NAMESPACE_POD_UID");
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            garbage.note(notes, &shown, "a directory");
            continue;
        }
        pods.insert(
            uid.to_string(),
            PodDir {
                namespace: ns.to_string(),
                pod: pod.to_string(),
                dir: entry.path(),
            },
        );
    }
    garbage.finish(notes);
    pods
}

fn list_containers(dir: &Path, notes: &mut Vec<Note>) -> HashMap<String, KubeName> {
    let mut containers = HashMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return containers;
    };
    let mut garbage = Garbage::new(dir);
    for entry in entries.flatten() {
        let raw = entry.file_name();
        let Some((pod, ns, container, cid)) = raw.to_str().and_then(parse_container_link) else {
            garbage.note(
                notes,
                &raw.to_string_lossy(),
                "POD_NAMESPACE_CONTAINER-CONTAINERID.log",
            );
            continue;
        };
        containers.insert(
            cid.to_string(),
            KubeName {
                namespace: ns.to_string(),
                pod: pod.to_string(),
                container: Some(container.to_string()),
            },
        );
    }
    garbage.finish(notes);
    containers
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt as _;

    const UID: &str = "8f3c2a10-4b5d-4e6f-9a7b-0c1d2e3f4a5b";
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_follow_the_kubelet_layout_and_nothing_else() {
        assert_eq!(
            parse_pod_dir(&format!("shop_cart-7d9f_{UID}")),
            Some(("shop", "cart-7d9f", UID))
        );
        for bad in [
            "shop_cart",
            "shop_cart_notauid",
            &format!("shop_cart_{UID}_x"),
            &format!("Shop_cart_{UID}"),
            &format!("_cart_{UID}"),
        ] {
            assert_eq!(parse_pod_dir(bad), None, "{bad}");
        }
        assert_eq!(
            parse_container_link(&format!("cart-7d9f_shop_api-server-{CID}.log")),
            Some(("cart-7d9f", "shop", "api-server", CID))
        );
        for bad in [
            format!("cart_shop_api-{CID}"),
            format!("cart_shop_api-{}.log", &CID[..12]),
            format!("cart_api-{CID}.log"),
            "x.log".to_string(),
        ] {
            assert_eq!(parse_container_link(&bad), None, "{bad}");
        }
    }

    #[test]
    fn the_index_names_by_container_id_then_by_pod_and_reports_garbage_once() {
        let root = tempfile::tempdir().unwrap();
        let pods = root.path().join("pods");
        let containers = root.path().join("containers");
        let pod_dir = pods.join(format!("shop_cart-1_{UID}"));
        fs::create_dir_all(pod_dir.join("api")).unwrap();
        fs::create_dir_all(&containers).unwrap();
        fs::write(pod_dir.join("api/0.log"), "").unwrap();
        fs::create_dir(pods.join("not-a-pod")).unwrap();
        fs::create_dir(pods.join(std::ffi::OsStr::from_bytes(b"bad\xffname"))).unwrap();
        fs::write(pods.join("README"), "").unwrap();
        // Changed long enough ago to be trusted unchanged until the next change.
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        for dir in [&pods, &containers] {
            fs::File::open(dir).unwrap().set_modified(past).unwrap();
        }

        let mut index = PodsIndex::new(&pods);
        let mut notes = Vec::new();
        assert!(index.refresh(&mut notes));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes.iter().all(|n| n.kind == NoteKind::GarbageName));
        assert!(
            notes.iter().any(|n| n.message.contains("\"not-a-pod\"")),
            "{notes:?}"
        );

        let facts = PathFacts {
            pod_uid: Some(UID.into()),
            container_id: Some(CID.into()),
            qos: None,
            kubelet: true,
        };
        let named = |c: Option<&str>| KubeName {
            namespace: "shop".into(),
            pod: "cart-1".into(),
            container: c.map(str::to_string),
        };
        // One container in the pod: known without its symlink.
        assert_eq!(index.name(&facts), Some(named(Some("api"))));
        fs::create_dir(pod_dir.join("sidecar")).unwrap();
        assert_eq!(index.name(&facts), Some(named(None)));

        // The symlink names it; nothing changed, nothing listed, no note again.
        let mut notes = Vec::new();
        assert!(!index.refresh(&mut notes));
        std::os::unix::fs::symlink(
            pod_dir.join("api/0.log"),
            containers.join(format!("cart-1_shop_api-{CID}.log")),
        )
        .unwrap();
        assert!(index.refresh(&mut notes));
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(index.name(&facts), Some(named(Some("api"))));
        assert_eq!(index.name(&PathFacts::default()), None);
        // The same container id outside kubepods is another runtime's container.
        let elsewhere = PathFacts {
            kubelet: false,
            pod_uid: None,
            ..facts
        };
        assert_eq!(index.name(&elsewhere), None);
    }

    #[test]
    fn garbage_names_past_a_few_are_counted_in_one_note() {
        let root = tempfile::tempdir().unwrap();
        let pods = root.path().join("pods");
        fs::create_dir_all(&pods).unwrap();
        fs::create_dir_all(root.path().join("containers")).unwrap();
        for i in 0..100 {
            fs::write(pods.join(format!("junk-{i}")), "").unwrap();
        }
        let mut index = PodsIndex::new(&pods);
        let mut notes = Vec::new();
        index.refresh(&mut notes);
        assert_eq!(notes.len(), MAX_GARBAGE_NOTES + 1, "{notes:?}");
        assert!(
            notes[MAX_GARBAGE_NOTES].message.ends_with(&format!(
                "skipped {} more entries that do not follow the kubelet's layout",
                100 - MAX_GARBAGE_NOTES
            )),
            "{notes:?}"
        );
    }

    #[test]
    fn a_missing_pods_directory_names_nothing() {
        let mut index = PodsIndex::new(Path::new("/nonexistent-hw/pods"));
        let mut notes = Vec::new();
        index.refresh(&mut notes);
        assert!(notes.is_empty());
        assert_eq!(
            index.name(&PathFacts {
                pod_uid: Some(UID.into()),
                kubelet: true,
                ..PathFacts::default()
            }),
            None
        );
    }
}
