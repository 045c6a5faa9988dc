//! Findings from profiles: what changed between two (`diff`), which sites grow over a run and
//! how fast (`growth`), and what one build does worse than another (`compare`). No I/O.

pub mod boundaries;
pub mod breakdown;
pub mod cause;
pub mod cluster;
pub mod compare;
pub mod crash_loop;
pub mod diff;
pub mod ends;
pub mod envoy;
pub mod files;
pub mod growth;
pub mod reading;
pub mod reduce;
pub mod rules;
mod runtime;
pub mod select;
pub mod series;
pub mod spikes;
mod storms;
pub mod stuck;
pub mod triage;
