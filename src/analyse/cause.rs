//! One cause rather than many sites: when the heap's rise is spread over several leaf sites
//! that one caller reached (head-series creation allocating labels, chunks and strings), the
//! frame a user acts on is that caller, the widest tower of the growth flamegraph. Found from
//! the stacks that grew between the rise's two captures; pure, no I/O.

use std::collections::HashMap;

use serde::Serialize;

use super::reduce::{Origin, OwnCode, origin};

/// A caller holding most of a rise that several sites share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cause {
    /// The frame, as pprof names its function.
    pub name: String,
    /// Its share of the rise, 0..1.
    pub share: f64,
    /// How many distinct leaf functions under it grew.
    pub sites: usize,
}

/// A caller is the cause when the stacks under it hold at least this share of the rise.
pub const CAUSE_SHARE: f64 = 0.6;

/// The deepest frame of the target's own code under which at least [`CAUSE_SHARE`] of what the
/// stacks added lies, spread over two or more leaf functions; `None` when no such frame exists
/// or one leaf holds it alone (the site then says it). `added` is folded stacks, root first,
/// `;`-separated, each with what it gained.
pub fn common_caller(added: &[(String, i64)], own: &OwnCode) -> Option<Cause> {
    let total: i64 = added.iter().map(|(_, v)| (*v).max(0)).sum();
    if total <= 0 {
        return None;
    }
    // What lies under each path prefix (a frame at its depth on its stack), and its leaves.
    let mut under: HashMap<&str, (i64, Vec<&str>)> = HashMap::new();
    for (stack, v) in added.iter().filter(|(_, v)| *v > 0) {
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        let mut end = 0;
        for frame in stack.split(';') {
            end += frame.len();
            let entry = under.entry(&stack[..end]).or_default();
            entry.0 += v;
            if !entry.1.contains(&leaf) {
                entry.1.push(leaf);
            }
            end += 1;
        }
    }
    // From the root down, always into the widest child while it holds the share.
    let bar = (CAUSE_SHARE * total as f64).ceil() as i64;
    let mut path: Option<&str> = None;
    let mut found: Option<Cause> = None;
    loop {
        let widest = under
            .iter()
            .filter(|(prefix, _)| match path {
                None => !prefix.contains(';'),
                Some(p) => prefix
                    .strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix(';'))
                    .is_some_and(|rest| !rest.contains(';')),
            })
            .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.0.cmp(a.0)));
        let Some((prefix, (value, leaves))) = widest.filter(|(_, (v, _))| *v >= bar) else {
            break;
        };
        let frame = prefix.rsplit(';').next().unwrap_or(prefix);
        if leaves.len() < 2 {
            break;
        }
        // A stack's root (a goroutine's start, `main.main`) holds everything: no cause.
        let root = !prefix.contains(';') || frame == "main.main";
        if !root && origin(frame, own) == Origin::Own {
            found = Some(Cause {
                name: frame.to_string(),
                share: *value as f64 / total as f64,
                sites: leaves.len(),
            });
        }
        path = Some(prefix);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
        rows.iter().map(|(s, v)| (s.to_string(), *v)).collect()
    }

    /// Prometheus under cardinality churn (issue 33, item 7): the rise spread over six leaves,
    /// all of them head-series creation. One cause, with its share.
    #[test]
    fn a_rise_over_many_leaves_under_one_caller_is_named_by_that_caller() {
        let own = OwnCode::module("github.com/prometheus/prometheus");
        let head = "main.main;github.com/prometheus/prometheus/tsdb.(*Head).Appender;\
                    github.com/prometheus/prometheus/tsdb.(*headAppender).Append;\
                    github.com/prometheus/prometheus/tsdb.(*Head).getOrCreate";
        let added = stacks(&[
            (
                &format!("{head};github.com/prometheus/prometheus/tsdb.newMemSeries"),
                16,
            ),
            (
                &format!("{head};github.com/prometheus/prometheus/model/labels.(*Builder).Labels"),
                11,
            ),
            (
                &format!("{head};github.com/prometheus/prometheus/tsdb/chunkenc.NewXORChunk"),
                11,
            ),
            (
                &format!(
                    "{head};github.com/prometheus/prometheus/tsdb/encoding.(*Encbuf).PutString"
                ),
                9,
            ),
            (
                &format!("{head};github.com/prometheus/prometheus/tsdb.(*stripeSeries).set"),
                30,
            ),
            (
                "main.main;github.com/prometheus/prometheus/scrape.(*scrapeLoop).run;bytes.growSlice",
                23,
            ),
        ]);
        let cause = common_caller(&added, &own).expect("one caller holds most of it");
        assert_eq!(
            cause.name,
            "github.com/prometheus/prometheus/tsdb.(*Head).getOrCreate"
        );
        assert_eq!(cause.sites, 5);
        assert!((cause.share - 0.77).abs() < 0.01, "{cause:?}");
    }

    #[test]
    fn one_leaf_holding_the_rise_needs_no_cause() {
        let own = OwnCode::module("heapwatch.test/fixtures");
        let added = stacks(&[
            ("main.main;main.(*store).put;main.grow", 90),
            ("main.main;main.other", 10),
        ]);
        assert_eq!(common_caller(&added, &own), None);
        // Spread evenly with no caller holding the share: no cause either.
        let spread = stacks(&[
            ("main.a;main.x", 30),
            ("main.b;main.y", 30),
            ("main.c;main.z", 40),
        ]);
        assert_eq!(common_caller(&spread, &own), None);
        // Under main.main alone (two goroutines' work split evenly): the root is no cause.
        let rooted = stacks(&[
            ("runtime.goexit;main.main;main.a;main.x", 50),
            ("runtime.goexit;main.main;main.b;main.y", 50),
        ]);
        assert_eq!(common_caller(&rooted, &own), None);
    }
}
