//! Findings across sibling replicas (pods of one owner): whether they die together or each
//! on its own, and a growth rate fitted over their usage against their uptime.

use std::collections::BTreeMap;

use super::kube::Pod;
use super::{
    PodTriage, ReplicaFinding, ReplicaPattern, TOGETHER_WITHIN_S, TerminationClass, seconds,
};
use crate::analyse::series::theil_sen;

/// Groups containers by owner and name and says how the replicas die.
pub(super) fn replicas(raw: &[Pod], pods: &mut [PodTriage]) {
    type Key = (Option<String>, String, String, String);
    let mut groups: BTreeMap<Key, Vec<(usize, usize)>> = BTreeMap::new();
    for (pi, (pod, triage)) in raw.iter().zip(pods.iter()).enumerate() {
        let Some(owner) = pod.owner() else { continue };
        for (ci, c) in triage.containers.iter().enumerate() {
            let key = (
                pod.metadata.namespace.clone(),
                owner.kind.clone(),
                owner.name.clone(),
                c.name.clone(),
            );
            groups.entry(key).or_default().push((pi, ci));
        }
    }
    for ((_, kind, name, _), members) in groups {
        if members.len() < 2 {
            continue;
        }
        let at = |&(p, c): &(usize, usize)| &pods[p].containers[c];
        let restarted: Vec<&(usize, usize)> =
            members.iter().filter(|m| at(m).restarts > 0).collect();
        let deaths: Vec<i64> = restarted
            .iter()
            .filter_map(|m| at(m).termination.as_ref().and_then(|t| t.finished_ms))
            .collect();
        let spread_s = match (deaths.iter().min(), deaths.iter().max()) {
            (Some(a), Some(b)) if deaths.len() >= 2 => Some(seconds(b - a)),
            _ => None,
        };
        let mut nodes: Vec<&str> = restarted
            .iter()
            .filter_map(|&&(p, _)| pods[p].node.as_deref())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let owner = format!("{kind} {name}");
        let (n, r) = (members.len(), restarted.len());
        let pattern = match (r, spread_s) {
            (0, _) => ReplicaPattern::None,
            (1, _) => ReplicaPattern::OnlyOne,
            (_, Some(s)) if s <= TOGETHER_WITHIN_S => ReplicaPattern::Together,
            (_, Some(_)) => ReplicaPattern::Staggered,
            (_, None) => ReplicaPattern::Several,
        };
        let finding = ReplicaFinding {
            pattern,
            owner,
            replicas: n,
            restarted: r,
            restarts: members.iter().map(|m| at(m).restarts).collect(),
            oom_killed: members
                .iter()
                .filter(|m| {
                    at(m)
                        .termination
                        .as_ref()
                        .is_some_and(|t| t.class == TerminationClass::OomKilled)
                })
                .count(),
            spread_s,
            nodes: nodes.len(),
            only_node: (nodes.len() == 1).then(|| nodes[0].to_string()),
        };
        for &(p, c) in &members {
            pods[p].containers[c].replicas = Some(finding.clone());
        }
    }
}

/// Growth from usage against time since start: fitted over sibling replicas of different
/// ages when there are several (as the field report does with `kubectl top` and the pods'
/// ages), else the average since this container's start.
pub(super) fn usage_growth(pods: &mut [PodTriage]) {
    let mut groups: BTreeMap<(String, String), Vec<(usize, usize)>> = BTreeMap::new();
    for (p, pod) in pods.iter().enumerate() {
        let owner = pod
            .owner
            .as_ref()
            .map_or_else(|| format!("pod {}", pod.name), |o| o.name.clone());
        for (c, container) in pod.containers.iter().enumerate() {
            if container.memory.usage_bytes.is_some() && container.running_for_s.is_some() {
                groups
                    .entry((owner.clone(), container.name.clone()))
                    .or_default()
                    .push((p, c));
            }
        }
    }
    for members in groups.values() {
        let points: Vec<(f64, f64)> = members
            .iter()
            .map(|&(p, c)| {
                let m = &pods[p].containers[c];
                (
                    m.running_for_s.unwrap_or(0.0),
                    m.memory.usage_bytes.unwrap_or(0) as f64,
                )
            })
            .collect();
        let fitted = if points.len() >= 2 {
            // Theil–Sen takes its points in time order.
            let mut sorted = points.clone();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (t, v): (Vec<f64>, Vec<f64>) = sorted.into_iter().unzip();
            theil_sen(&t, &v).filter(|f| f.slope > 0.0).map(|f| f.slope)
        } else {
            None
        };
        for (&(p, c), &(age, used)) in members.iter().zip(&points) {
            let (rate, basis) = match fitted {
                Some(rate) => (Some(rate), "replicas"),
                None if age >= 60.0 => (Some(used / age), "since-start"),
                None => (None, "since-start"),
            };
            let m = &mut pods[p].containers[c].memory;
            let Some(rate) = rate.filter(|r| *r > 0.0) else {
                continue;
            };
            m.growth_bytes_per_min = Some(rate * 60.0);
            m.growth_basis = Some(basis);
            m.limit_in_s = m.limit_bytes.map(|l| ((l as f64 - used) / rate).max(0.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::UsageFigure;
    use super::super::tests::{pod, run};

    #[test]
    fn usage_of_replicas_of_different_ages_gives_a_growth_rate() {
        // The field report: 737Mi 32 min after a restart, 424Mi 7 min after.
        let make = |name: &str, started: &str| {
            pod(&format!(
                r#"{{"kind":"Pod","metadata":{{"name":"{name}","ownerReferences":[
                  {{"kind":"ReplicaSet","name":"gw","controller":true}}]}},
                "spec":{{"containers":[{{"name":"istio-proxy","resources":{{
                  "requests":{{"memory":"128Mi"}},"limits":{{"memory":"1Gi"}}}}}}]}},
                "status":{{"containerStatuses":[{{"name":"istio-proxy","restartCount":1,
                  "state":{{"running":{{"startedAt":"{started}"}}}}}}]}}}}"#
            ))
        };
        let pods = [
            make("a", "2024-05-02T11:28:00Z"),
            make("b", "2024-05-02T11:53:00Z"),
        ];
        let usage = [
            UsageFigure {
                pod: Some("a".into()),
                container: "istio-proxy".into(),
                text: "737Mi".into(),
                bytes: 737 << 20,
            },
            UsageFigure {
                pod: Some("b".into()),
                container: "istio-proxy".into(),
                text: "424Mi".into(),
                bytes: 424 << 20,
            },
        ];
        let report = run(&pods, None, &usage);
        let m = &report.pods[0].containers[0].memory;
        let per_min = m.growth_bytes_per_min.unwrap() / (1 << 20) as f64;
        assert!((per_min - 12.52).abs() < 0.01, "{per_min}");
        assert_eq!(m.growth_basis, Some("replicas"));
    }
}
