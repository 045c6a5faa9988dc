//! The parts of Kubernetes documents that triage reads: pods (a Pod, or a List of them, as
//! `kubectl get pod -o json` prints them), events, resource quantities and timestamps. Parsing
//! only. Every field is optional, because kubectl leaves empty ones out.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

pub use crate::units::parse_quantity;

/// Why a document cannot be triaged. The caller adds the file name.
#[derive(Debug, Error, PartialEq)]
pub enum KubeError {
    #[error("not JSON ({0}); triage reads the output of `kubectl get … -o json`")]
    NotJson(String),
    #[error("{found}, not a Pod or a List of pods (use `kubectl get pod NAME -o json`)")]
    NotPods { found: String },
    #[error("item {index} of the List is {found}, not a Pod")]
    ItemNotPod { index: usize, found: String },
    #[error("the List holds no pods (did the label selector match nothing?)")]
    NoPods,
    #[error("{found}, not a List of Events (use `kubectl get events -o json`)")]
    NotEvents { found: String },
    #[error("{what} does not read as Kubernetes wrote it: {detail}")]
    Shape { what: String, detail: String },
    #[error("pod {pod}, container {container}: {field} {value:?} is not a Kubernetes quantity")]
    BadQuantity {
        pod: String,
        container: String,
        field: String,
        value: String,
    },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: Option<String>,
    pub creation_timestamp: Option<String>,
    pub owner_references: Vec<OwnerReference>,
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OwnerReference {
    pub kind: String,
    pub name: String,
    pub controller: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    pub containers: Vec<Container>,
    pub node_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: Option<String>,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub resources: Resources,
    pub liveness_probe: Option<Value>,
    pub readiness_probe: Option<Value>,
    pub startup_probe: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
}

/// Quantities stay as written (`128Mi`): strings in kubectl's output, numbers by hand.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Resources {
    pub requests: BTreeMap<String, Value>,
    pub limits: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    pub phase: Option<String>,
    pub reason: Option<String>,
    pub qos_class: Option<String>,
    pub container_statuses: Vec<ContainerStatus>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    pub restart_count: u32,
    pub ready: bool,
    pub state: ContainerState,
    pub last_state: ContainerState,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ContainerState {
    pub running: Option<Running>,
    pub waiting: Option<Waiting>,
    pub terminated: Option<Terminated>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Running {
    pub started_at: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Waiting {
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Terminated {
    pub exit_code: i32,
    pub reason: Option<String>,
    pub signal: Option<i32>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

impl Pod {
    /// The controller that owns this pod (a ReplicaSet, a StatefulSet …), if any.
    pub fn owner(&self) -> Option<&OwnerReference> {
        let owners = &self.metadata.owner_references;
        owners
            .iter()
            .find(|o| o.controller == Some(true))
            .or(owners.first())
    }

    pub fn status_of(&self, container: &str) -> Option<&ContainerStatus> {
        self.status
            .container_statuses
            .iter()
            .find(|s| s.name == container)
    }
}

/// Reads `kubectl get pod -o json` output: one Pod, or a List (or PodList) of pods.
pub fn parse_pods(bytes: &[u8]) -> Result<Vec<Pod>, KubeError> {
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| KubeError::NotJson(e.to_string()))?;
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let items = match kind.as_str() {
        "Pod" => return Ok(vec![pod_from(doc, "the Pod")?]),
        "List" | "PodList" => doc
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        "" if doc.get("spec").and_then(|s| s.get("containers")).is_some() => {
            return Ok(vec![pod_from(doc, "the Pod")?]);
        }
        _ => {
            return Err(KubeError::NotPods {
                found: describe(&doc),
            });
        }
    };
    let mut pods = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let item_kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
        // A PodList from the API leaves `kind` out of its items.
        let is_pod = item_kind == "Pod" || (item_kind.is_empty() && kind == "PodList");
        if !is_pod {
            return Err(KubeError::ItemNotPod {
                index,
                found: describe(&item),
            });
        }
        pods.push(pod_from(item, &format!("item {index} of the List"))?);
    }
    if pods.is_empty() {
        return Err(KubeError::NoPods);
    }
    Ok(pods)
}

fn pod_from(doc: Value, what: &str) -> Result<Pod, KubeError> {
    serde_json::from_value(doc).map_err(|e| KubeError::Shape {
        what: what.to_string(),
        detail: e.to_string(),
    })
}

/// "a Deployment", "a JSON array", "a document without a kind".
fn describe(doc: &Value) -> String {
    match doc {
        Value::Object(map) => match map.get("kind").and_then(Value::as_str) {
            Some(k) if !k.is_empty() => {
                let article = if k.starts_with(['A', 'E', 'I', 'O', 'U']) {
                    "an"
                } else {
                    "a"
                };
                format!("{article} {k}")
            }
            _ => "a document without a \"kind\"".to_string(),
        },
        Value::Array(_) => "a JSON array".to_string(),
        Value::String(_) => "a JSON string".to_string(),
        Value::Number(_) => "a JSON number".to_string(),
        Value::Bool(_) => "a JSON boolean".to_string(),
        Value::Null => "JSON null".to_string(),
    }
}

/// An event as triage needs it, from core/v1 or events.k8s.io/v1 (`regarding`, `note`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Kind of the object the event is about (`Pod`, `Node`).
    pub object_kind: String,
    pub object_name: String,
    pub namespace: Option<String>,
    /// The container named by `fieldPath` (`spec.containers{istio-proxy}`).
    pub container: Option<String>,
    pub reason: String,
    pub message: String,
    /// How many times it happened (kubelet aggregates repeats into one event).
    pub count: u32,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawEvent {
    involved_object: Option<RawRef>,
    regarding: Option<RawRef>,
    reason: Option<String>,
    message: Option<String>,
    note: Option<String>,
    count: Option<u32>,
    deprecated_count: Option<u32>,
    series: Option<RawSeries>,
    first_timestamp: Option<String>,
    last_timestamp: Option<String>,
    deprecated_first_timestamp: Option<String>,
    deprecated_last_timestamp: Option<String>,
    event_time: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawRef {
    kind: String,
    name: String,
    namespace: Option<String>,
    field_path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawSeries {
    count: Option<u32>,
    last_observed_time: Option<String>,
}

/// Reads `kubectl get events -o json` output: a List (or EventList) of Events, or one Event.
pub fn parse_events(bytes: &[u8]) -> Result<Vec<Event>, KubeError> {
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| KubeError::NotJson(e.to_string()))?;
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let items = match kind.as_str() {
        "Event" => vec![doc],
        "List" | "EventList" => doc
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => {
            return Err(KubeError::NotEvents {
                found: describe(&doc),
            });
        }
    };
    let mut events = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let item_kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
        if !(item_kind == "Event" || (item_kind.is_empty() && kind != "List")) {
            return Err(KubeError::NotEvents {
                found: format!("item {index} of the List is {}", describe(&item)),
            });
        }
        let raw: RawEvent = serde_json::from_value(item).map_err(|e| KubeError::Shape {
            what: format!("event {index}"),
            detail: e.to_string(),
        })?;
        events.push(normalise(raw));
    }
    Ok(events)
}

fn normalise(raw: RawEvent) -> Event {
    let object = raw.involved_object.or(raw.regarding).unwrap_or_default();
    let container = object.field_path.as_deref().and_then(|p| {
        let inner = p.strip_prefix("spec.containers{")?.strip_suffix('}')?;
        Some(inner.to_string())
    });
    let series = raw.series.unwrap_or_default();
    let first = raw
        .first_timestamp
        .or(raw.deprecated_first_timestamp)
        .or(raw.event_time.clone());
    let last = raw
        .last_timestamp
        .or(raw.deprecated_last_timestamp)
        .or(series.last_observed_time)
        .or(raw.event_time);
    Event {
        object_kind: object.kind,
        object_name: object.name,
        namespace: object.namespace,
        container,
        reason: raw.reason.unwrap_or_default(),
        message: raw.message.or(raw.note).unwrap_or_default(),
        count: raw
            .count
            .or(raw.deprecated_count)
            .or(series.count)
            .unwrap_or(1)
            .max(1),
        first_ms: first.as_deref().and_then(crate::time::parse_rfc3339),
        last_ms: last.as_deref().and_then(crate::time::parse_rfc3339),
    }
}

/// A quantity as JSON holds it: a string, or (in hand-written documents) a number.
pub fn quantity_value(value: &Value) -> Result<(String, f64), String> {
    match value {
        Value::String(s) => Ok((s.clone(), parse_quantity(s)?)),
        Value::Number(n) => {
            let f = n.as_f64().ok_or_else(|| format!("{n} is out of range"))?;
            Ok((n.to_string(), f))
        }
        other => Err(format!("{other} is not a quantity")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(parse_quantity("128Mi").unwrap(), 134_217_728.0);
        assert_eq!(parse_quantity("1Gi").unwrap(), 1_073_741_824.0);
        assert_eq!(parse_quantity("500m").unwrap(), 0.5);
        assert_eq!(parse_quantity("2").unwrap(), 2.0);
        assert_eq!(parse_quantity("1e3").unwrap(), 1000.0);
        assert_eq!(parse_quantity("12E6").unwrap(), 12e6);
        assert_eq!(parse_quantity("1E").unwrap(), 1e18);
        assert_eq!(parse_quantity("1.5G").unwrap(), 1.5e9);
        assert_eq!(parse_quantity("100k").unwrap(), 100_000.0);
        assert_eq!(parse_quantity("0.5").unwrap(), 0.5);
        assert!(parse_quantity("12furlongs").is_err());
        assert!(parse_quantity("Mi").is_err());
        assert!(parse_quantity("1MiB").is_err());
        assert!(parse_quantity("").is_err());
    }

    #[test]
    fn a_deployment_is_not_a_pod() {
        let err = parse_pods(br#"{"kind":"Deployment","spec":{}}"#).unwrap_err();
        assert_eq!(
            err,
            KubeError::NotPods {
                found: "a Deployment".into()
            }
        );
        let err = parse_pods(br#"{"kind":"List","items":[{"kind":"Event"}]}"#).unwrap_err();
        assert!(matches!(err, KubeError::ItemNotPod { index: 0, .. }));
        assert_eq!(
            parse_pods(br#"{"kind":"List","items":[]}"#).unwrap_err(),
            KubeError::NoPods
        );
        assert!(matches!(
            parse_pods(b"apiVersion: v1\nkind: Pod\n").unwrap_err(),
            KubeError::NotJson(_)
        ));
    }

    #[test]
    fn events_name_their_container() {
        let doc = br#"{"kind":"List","items":[{"kind":"Event","count":3,
            "involvedObject":{"kind":"Pod","name":"gw-1","fieldPath":"spec.containers{istio-proxy}"},
            "reason":"Unhealthy","message":"Readiness probe failed: connection refused",
            "firstTimestamp":"2024-05-02T10:00:00Z","lastTimestamp":"2024-05-02T10:01:00Z"}]}"#;
        let events = parse_events(doc).unwrap();
        assert_eq!(events[0].container.as_deref(), Some("istio-proxy"));
        assert_eq!(events[0].count, 3);
        assert_eq!(
            events[0].last_ms.unwrap() - events[0].first_ms.unwrap(),
            60_000
        );
        assert!(matches!(
            parse_events(br#"{"kind":"Pod"}"#).unwrap_err(),
            KubeError::NotEvents { .. }
        ));
    }
}
