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
#[derive(Debug, Clone)]
pub struct NodeOutcomes {
    pub node: String,
    pub outcomes: Vec<Outcome>,
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
    use crate::analyse::rules::{Evidence, Metric};

    pub(crate) fn outcome(rule: &str, status: Status) -> Outcome {
        Outcome {
            rule: rule.into(),
            metric: Metric::Kills,
            status,
            measured: Some(1.0),
            cycle: Some(1),
            evidence: Evidence::Kills {
                n: 1,
                cycles: Vec::new(),
            },
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
    fn the_first_rule_that_could_not_be_checked_names_its_node() {
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
            first_unknown(&nodes).map(|(n, o)| (n, o.rule.as_str())),
            Some(("ctrl2", "heap>1"))
        );
        assert_eq!(first_unknown(&nodes[..1]).map(|(n, _)| n), None);
    }
}
