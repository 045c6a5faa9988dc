//! heapwatch: a flight recorder and analyser for the memory of Go services that die of OOM.
//!
//! # The order data passes through
//!
//! 1. [`source`]: a target (HTTP pprof, the OpenZiti agent, Envoy's admin port, a process read
//!    from outside) gives bytes as served; beside it, the machine's own memory figures and
//!    memory cgroups.
//! 2. [`collect`]: paces the sources, validates each reply, spots boot cycles, and hands every
//!    capture to the store; samples memory beside it. [`launch`] (`heapwatch run`) starts a
//!    command under a limit and records it through the collector; [`node`] finds the Go
//!    processes of a node for `ps` and `watch`.
//! 3. [`store`]: the run directory. A capture is fsynced before it is named, its manifest line
//!    after; `run.json` says what was asked.
//! 4. [`decode`]: gzipped pprof bytes to the [`model`], the types every later stage shares.
//! 5. [`index`]: each stored capture's per-site figures (`sites.idx`), so an analysis reads
//!    kilobytes instead of decoding megabytes.
//! 6. [`analyse`]: figures to findings: growth per boot cycle, comparisons, rules, triage. No
//!    I/O.
//! 7. [`pipeline`]: a run on disk (and its baseline) to an analysis, the library call every
//!    command makes.
//! 8. [`render`]: findings to words, tables, flamegraphs and the report (text, JSON, SVG,
//!    HTML).
//!
//! The binary's `cli` turns flags into the plain configurations these take and errors into an
//! exit code. Off the main path: [`push`] copies a run's captures to Grafana Pyroscope,
//! [`replay`] serves a recorded run as a live target; [`units`] (sizes and durations as
//! people write them) and [`time`] (wall-clock time, RFC 3339) serve every stage.
//!
//! # Layering
//!
//! Which module may import which is an order of its own, not the flow's (the collector imports
//! the store it writes to, the pipeline the render types it fills): each module stands on a
//! floor and imports only from floors below it (`units`, `time` < `model` < `decode` <
//! `analyse`, `source` < `store`, `node` < `index`, `replay`, `push`, `render` < `collect`,
//! `pipeline` < `launch`; the binary above all). A test (`src/layering.rs`) holds the code to
//! it; docs/architecture.md explains it.
//!
//! # Where the decisions are
//!
//! Each module's own doc says what it does and why: the choices made there, their figures and
//! what was measured or tried (`cargo doc --document-private-items` shows the private modules'
//! too). docs/architecture.md is the map of the stages and an index of where each decision
//! lives.

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
