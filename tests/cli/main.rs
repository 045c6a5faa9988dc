//! Integration tests of the `heapwatch` command, all in one test binary. Each test works in its
//! own temporary directory and runs the real binary.

mod kubenode;
#[path = "../support/prerequisite.rs"]
mod prerequisite;
mod util;

mod agent;
mod bad_input;
mod cgroup_v2;
mod cluster;
mod cluster_analysis;
mod collect_crash;
mod collect_faults;
mod collect_flags;
mod collect_index;
mod collect_oom;
mod collect_tls;
mod collect_truth;
mod deploy;
mod devtools;
mod diff;
mod discovery;
mod envoy;
mod episodes;
mod flame;
mod gc_clock;
mod growth;
mod index;
mod oracle;
mod proc;
mod proc_goroutines;
mod proc_memstats;
mod ps;
mod push;
mod replay;
mod report;
mod run;
mod run_files;
mod secrets;
mod triage;
mod watch;
mod zoo;
