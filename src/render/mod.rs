//! Findings to output: text for people, JSON for other tools (every document carries a
//! `schema` version), later SVG and HTML.

pub mod cluster;
pub mod compare;
pub mod diff;
pub mod ends;
pub mod envoy;
pub mod envoy_words;
pub mod files;
pub mod flame;
pub mod flame_titles;
pub mod growth;
pub mod headline;
pub mod memory;
pub mod pprof;
pub mod report;
pub mod rules;
pub mod stuck;
pub mod top;
pub mod triage;
pub mod triage_words;
pub mod verdict;
pub mod worded;
