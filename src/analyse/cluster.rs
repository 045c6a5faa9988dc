//! Findings across the nodes of a cluster run: which nodes two cluster runs share by name, and
//! which node crossed a `--fail-on` bar. Each node's own findings come from the ordinary
//! analysis of its run.

use serde::Serialize;

use super::rules::{Outcome, Status};

/// Two cluster runs' nodes, matched by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodePairing {
    /// Nodes in both, in B's order.
    pub both: Vec<String>,
    /// Nodes only in A (the baseline), in A's order.
    pub only_a: Vec<String>,
    /// Nodes only in B, in B's order.
    pub only_b: Vec<String>,
}

/// Matches A's nodes with B's by name.
pub fn pair_nodes(a: &[&str], b: &[&str]) -> NodePairing {
    NodePairing {
        both: b
            .iter()
            .filter(|n| a.contains(n))
            .map(|n| n.to_string())
            .collect(),
        only_a: a
            .iter()
            .filter(|n| !b.contains(n))
            .map(|n| n.to_string())
            .collect(),
        only_b: b
            .iter()
            .filter(|n| !a.contains(n))
            .map(|n| n.to_string())
            .collect(),
    }
}

/// The rules' outcomes on one node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeOutcomes {
    pub node: String,
    pub outcomes: Vec<Outcome>,
}

/// The one line CI prints when rules trip on any node, each failure led by the node that
/// crossed the bar (`ctrl2: growth>1MiB/s tripped …`); `None` when none did.
pub fn failure_line(nodes: &[NodeOutcomes]) -> Option<String> {
    let failed: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            n.outcomes
                .iter()
                .filter(|o| o.status == Status::Fail)
                .map(move |o| format!("{}: {} tripped ({}): {}", n.node, o.rule, o.shown, o.reason))
        })
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// The first rule that could not be checked on some node, with that node.
pub fn first_unknown(nodes: &[NodeOutcomes]) -> Option<(&str, &Outcome)> {
    nodes.iter().find_map(|n| {
        n.outcomes
            .iter()
            .find(|o| o.status == Status::Unknown)
            .map(|o| (n.node.as_str(), o))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(rule: &str, status: Status) -> Outcome {
        Outcome {
            rule: rule.into(),
            status,
            value: Some(1.0),
            shown: "1".into(),
            reason: "why".into(),
        }
    }

    #[test]
    fn nodes_pair_by_name_and_the_rest_are_listed_by_side() {
        let p = pair_nodes(&["a", "b", "c"], &["c", "d", "a"]);
        assert_eq!(p.both, ["c", "a"]);
        assert_eq!(p.only_a, ["b"]);
        assert_eq!(p.only_b, ["d"]);
    }

    #[test]
    fn the_failure_line_names_each_node_that_crossed_a_bar() {
        let nodes = vec![
            NodeOutcomes {
                node: "ctrl1".into(),
                outcomes: vec![outcome("kills>0", Status::Pass)],
            },
            NodeOutcomes {
                node: "ctrl2".into(),
                outcomes: vec![
                    outcome("kills>0", Status::Fail),
                    outcome("heap>1", Status::Unknown),
                ],
            },
        ];
        assert_eq!(
            failure_line(&nodes).as_deref(),
            Some("ctrl2: kills>0 tripped (1): why")
        );
        assert_eq!(first_unknown(&nodes).map(|(n, _)| n), Some("ctrl2"));
        assert_eq!(failure_line(&nodes[..1]), None);
    }
}
