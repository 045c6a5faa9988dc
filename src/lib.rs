//! heapwatch: a flight recorder and analyser for the memory of Go services that die of OOM.
//!
//! The modules follow the data: a source pulls bytes, the store makes them durable, `decode`
//! turns bytes into the `model`, analysis turns models into findings and `render` turns
//! findings into text, JSON, SVG and HTML.

pub mod analyse;
pub mod collect;
pub mod decode;
pub mod index;
pub mod launch;
pub mod model;
pub mod node;
pub mod pipeline;
pub mod push;
pub mod render;
pub mod replay;
pub mod source;
pub mod store;
pub mod time;
pub mod units;

/// The layering rule: every import runs down the floors (the table is there).
#[cfg(test)]
mod layering;

/// What a test needs from the machine (Go, root, …) and what it says without it: the same
/// file the integration tests use.
#[cfg(test)]
#[path = "../tests/support/prerequisite.rs"]
pub(crate) mod prerequisite;
