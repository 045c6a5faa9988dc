//! `growth` and `compare` of a cluster run as text and JSON: one section per node, headed by
//! its name, holding exactly what the command prints for a single run.
//!
//! JSON shapes (each command on a cluster run: `pipeline::cluster`'s doc):
//! - growth: `{"schema": 1, "kind": "cluster", "nodes": {NAME: <growth JSON of the node's run>}}`;
//! - compare: `{"schema": 1, "kind": "cluster", "nodes": {NAME: <compare JSON of the pair>},
//!   "only_a": [NAME…], "only_b": [NAME…]}`.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::analyse::cluster::NodePairing;

/// One node's rendered part: its name and the single-run output (text, or a JSON document).
pub struct NodePart {
    pub name: String,
    pub body: String,
}

/// The line that heads a node's section.
pub fn heading(name: &str, dir: &str) -> String {
    format!("== node {name} ({dir}) ==\n")
}

/// Every node's section in turn, separated by a blank line.
pub fn text(nodes: &[NodePart]) -> String {
    let mut out = String::new();
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&n.body);
    }
    out
}

/// The nodes of two cluster runs that are not compared: those only on one side.
pub fn unpaired_text(pairing: &NodePairing) -> String {
    let mut out = String::new();
    if !pairing.only_a.is_empty() {
        let _ = writeln!(
            out,
            "only in A (not compared): {}",
            pairing.only_a.join(", ")
        );
    }
    if !pairing.only_b.is_empty() {
        let _ = writeln!(
            out,
            "only in B (not compared): {}",
            pairing.only_b.join(", ")
        );
    }
    out
}

/// One JSON document keyed by node, from each node's own JSON document; `extra` fields are
/// added beside `nodes`.
pub fn json(nodes: &[NodePart], extra: Vec<(&str, Value)>) -> Result<String, serde_json::Error> {
    let mut by_node = Map::new();
    for n in nodes {
        by_node.insert(n.name.clone(), serde_json::from_str(&n.body)?);
    }
    let mut doc = Map::new();
    doc.insert("schema".into(), Value::from(crate::model::SCHEMA));
    doc.insert("kind".into(), Value::from("cluster"));
    doc.insert("nodes".into(), Value::Object(by_node));
    for (k, v) in extra {
        doc.insert(k.into(), v);
    }
    let mut out = serde_json::to_string_pretty(&Value::Object(doc))?;
    out.push('\n');
    Ok(out)
}

/// `only_a` and `only_b` of a pairing, for [`json`].
pub fn unpaired_json(pairing: &NodePairing) -> Vec<(&'static str, Value)> {
    vec![
        ("only_a", Value::from(pairing.only_a.clone())),
        ("only_b", Value::from(pairing.only_b.clone())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keys_each_node_document_by_name() {
        let nodes = vec![
            NodePart {
                name: "b".into(),
                body: r#"{"cycles": [2]}"#.into(),
            },
            NodePart {
                name: "a".into(),
                body: r#"{"cycles": [1]}"#.into(),
            },
        ];
        let doc: Value = serde_json::from_str(&json(&nodes, vec![]).unwrap()).unwrap();
        assert_eq!(doc["kind"], "cluster");
        assert_eq!(doc["nodes"]["a"]["cycles"][0], 1);
        assert_eq!(doc["nodes"]["b"]["cycles"][0], 2);
        assert!(
            json(
                &[NodePart {
                    name: "x".into(),
                    body: "{".into()
                }],
                vec![]
            )
            .is_err()
        );
    }

    #[test]
    fn unpaired_nodes_are_listed_by_side() {
        let p = NodePairing {
            both: vec!["a".into()],
            only_a: vec!["old".into()],
            only_b: vec![],
        };
        assert_eq!(unpaired_text(&p), "only in A (not compared): old\n");
    }
}
