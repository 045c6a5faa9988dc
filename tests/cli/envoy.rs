//! The Envoy source and analysis against an admin double on 127.0.0.1: a thread that answers
//! `/memory`, `/stats` and `/heap_dump` the way Envoy's admin port does (bodies from
//! testdata/envoy), with the two published cases, a gateway's counters, a growing series, and
//! a build without tcmalloc whose `/heap_dump` answers 501.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use heapwatch::analyse::envoy::{self, EnvoyLimits, EnvoyReport};
use heapwatch::render::envoy as render;
use heapwatch::source::envoy::{
    EnvoySnapshot, EnvoySource, HeapDump, HeapDumpState, totals_from_reply,
};
use heapwatch::source::http::HttpOptions;
use heapwatch::source::{FailureKind, Source, Want};

use crate::util;

const TIMEOUT: Duration = Duration::from_secs(5);

/// The analysis, as the report and `growth` word it.
fn analysed(
    snapshots: &[EnvoySnapshot],
    limits: &EnvoyLimits,
    heap_dump: HeapDumpState,
) -> EnvoyReport {
    envoy::analyse(snapshots, limits, heap_dump)
}

/// The verdict's sentence.
fn verdict(report: &EnvoyReport) -> String {
    heapwatch::render::envoy_words::verdict_words(report)
}
const NOT_IMPLEMENTED: &str = "Heap profile is not implemented in current build";

fn fixture(name: &str) -> String {
    let path = util::repo().join("testdata/envoy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The gateway's counters without tcmalloc's gauges, so that they cannot disagree with the
/// `/memory` reply a case serves.
fn gateway_counters() -> String {
    fixture("stats-gateway.txt")
        .lines()
        .filter(|l| !l.starts_with("server.memory_"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[derive(Default)]
struct Served {
    /// `/memory` bodies in turn; the last one repeats.
    memory: Vec<String>,
    /// `/stats` bodies in turn; the last one repeats.
    stats: Vec<String>,
    memory_hits: usize,
    stats_hits: usize,
    heap_dump_hits: usize,
    paths: Vec<String>,
}

/// Envoy's admin port, as far as heapwatch talks to it.
struct AdminDouble {
    addr: String,
    served: Arc<Mutex<Served>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AdminDouble {
    fn start(memory: Vec<String>, stats: Vec<String>) -> AdminDouble {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr").to_string();
        let served = Arc::new(Mutex::new(Served {
            memory,
            stats,
            ..Served::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let served = Arc::clone(&served);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(conn) = conn {
                        answer(conn, &served);
                    }
                }
            })
        };
        AdminDouble {
            addr,
            served,
            stop,
            thread: Some(thread),
        }
    }

    fn target(&self) -> String {
        format!("envoy:http://{}", self.addr)
    }

    fn source(&self) -> EnvoySource {
        EnvoySource::new(&self.target(), &HttpOptions::default()).expect("envoy target")
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().expect("double state")
    }
}

impl Drop for AdminDouble {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(mut conn: TcpStream, served: &Mutex<Served>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let Some(path) = util::read_request_path(&mut conn) else {
        return;
    };
    let (status, content_type, body) = {
        let mut s = served.lock().expect("double state");
        s.paths.push(path.clone());
        let route = path.split('?').next().unwrap_or("");
        match route {
            "/memory" => {
                let i = s.memory_hits.min(s.memory.len().saturating_sub(1));
                s.memory_hits += 1;
                match s.memory.get(i) {
                    Some(body) => ("200 OK", "application/json", body.clone()),
                    None => ("404 Not Found", "text/plain", "invalid path".to_string()),
                }
            }
            "/stats" => {
                let i = s.stats_hits.min(s.stats.len().saturating_sub(1));
                s.stats_hits += 1;
                let body = s.stats.get(i).cloned().unwrap_or_default();
                ("200 OK", "text/plain; charset=UTF-8", body)
            }
            "/heap_dump" => {
                s.heap_dump_hits += 1;
                (
                    "501 Not Implemented",
                    "text/plain; charset=UTF-8",
                    NOT_IMPLEMENTED.to_string(),
                )
            }
            _ => (
                "404 Not Found",
                "text/plain; charset=UTF-8",
                "invalid path. admin commands are:\n  /memory\n  /stats\n".to_string(),
            ),
        }
    };
    util::respond(&mut conn, status, content_type, body.as_bytes());
}

/// One snapshot of a double serving one `/memory` body with the gateway's counters.
fn one_case(memory_file: &str, limits: EnvoyLimits) -> (EnvoyReport, String) {
    let double = AdminDouble::start(vec![fixture(memory_file)], vec![gateway_counters()]);
    let source = double.source();
    let snapshot = source
        .snapshot(1_714_651_200_000, TIMEOUT)
        .expect("snapshot");
    let report = analysed(&[snapshot], &limits, HeapDumpState::NotAsked);
    let text = render::text(&double.target(), &report);
    (report, text)
}

fn gateway_limits() -> EnvoyLimits {
    EnvoyLimits {
        memory_bytes: Some(4 << 30),
        cpu_cores: Some(2.0),
    }
}

#[test]
fn the_first_published_case_is_mostly_live_data() {
    let (report, text) = one_case("memory-live-data.json", gateway_limits());
    let heap = report.heap.as_ref().expect("heap figures");
    assert_eq!(heap.source, "/memory");
    assert_eq!(heap.allocated, 2_793_932_032);
    assert!(
        (heap.naive_share - 0.67).abs() < 0.005,
        "{}",
        heap.naive_share
    );
    let live = heap.live_share.expect("live share");
    assert!((live - 0.915).abs() < 0.001, "{live}");
    assert_eq!(heap.held_not_returned, Some(4_145_152 + 22_500_080));
    let explanation = heapwatch::render::envoy_words::heap_explanation(heap);
    assert!(
        explanation.contains("pageheap_unmapped") && explanation.contains("91.5 %"),
        "{explanation}"
    );
    assert_eq!(report.verdict.code, "live-data", "{}", verdict(&report));
    assert!(verdict(&report).contains("mostly live data"));
    assert!(
        text.contains("naive 67.1 %") && text.contains("live share 91.5 %"),
        "{text}"
    );
    assert!(
        text.contains("verdict      live-data: mostly live data"),
        "{text}"
    );
}

#[test]
fn the_second_published_case_is_memory_held_not_returned() {
    let (report, text) = one_case("memory-held.json", gateway_limits());
    let heap = report.heap.as_ref().expect("heap figures");
    let live = heap.live_share.expect("live share");
    assert!((live - 0.006).abs() < 0.0005, "{live}");
    assert_eq!(heap.held_not_returned, Some(11_155_046_400 + 24_026_688));
    assert_eq!(
        report.verdict.code,
        "held-not-returned",
        "{}",
        verdict(&report)
    );
    assert!(
        verdict(&report).contains("memory held, not returned: only 0.6 %"),
        "{}",
        verdict(&report)
    );
    assert!(text.contains("10.4 GiB not returned to the OS"), "{text}");
}

#[test]
fn a_gateway_with_sixteen_workers_on_two_cpus_carries_the_whole_mesh() {
    let (report, text) = one_case("memory-live-data.json", gateway_limits());
    let workers = report.workers.as_ref().expect("server.concurrency");
    assert_eq!(workers.concurrency, 16);
    assert_eq!(workers.multiplier, Some(8.0));
    assert!(workers.multiplied);
    let config = report.config.as_ref().expect("active clusters");
    assert_eq!(config.active_clusters, 1564);
    assert_eq!(config.listeners_active, Some(4));
    assert_eq!(config.clusters_per_listener, Some(391.0));
    assert!(config.whole_mesh);
    assert_eq!(report.connections, Some(512));
    assert!(
        verdict(&report).contains("16 workers on 2 CPUs and 1564 clusters for 4 listeners"),
        "{}",
        verdict(&report)
    );
    assert!(text.contains("16 workers on a 2 CPU limit (8x)"), "{text}");
    let doc: serde_json::Value =
        serde_json::from_str(&render::json("gw", &report)).expect("envoy JSON");
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["verdict"]["code"], "live-data");
    assert_eq!(doc["workers"]["multiplier"], 8.0);
    assert_eq!(doc["config"]["whole_mesh"], true);
}

#[test]
fn the_stats_alone_give_the_field_reports_ratio() {
    // A build without tcmalloc's /memory figures: the gauges of /stats still tell 93 %.
    let double = AdminDouble::start(
        vec![fixture("memory-no-tcmalloc.json")],
        vec![fixture("stats-gateway.txt")],
    );
    let snapshot = double.source().snapshot(0, TIMEOUT).expect("snapshot");
    assert!(
        !snapshot
            .memory
            .as_ref()
            .expect("a /memory reply")
            .has_data()
    );
    let report = analysed(&[snapshot], &gateway_limits(), HeapDumpState::NotAsked);
    let heap = report.heap.expect("stats figures");
    assert_eq!(heap.source, "stats");
    assert!(
        (heap.naive_share - 0.935).abs() < 0.001,
        "{}",
        heap.naive_share
    );
    assert_eq!(heap.live_share, None);
    assert_eq!(report.verdict.code, "live-data");
}

#[test]
fn no_figures_at_all_is_no_data() {
    let double = AdminDouble::start(
        vec![fixture("memory-no-tcmalloc.json")],
        vec![gateway_counters()],
    );
    let snapshot = double.source().snapshot(0, TIMEOUT).expect("snapshot");
    let report = analysed(&[snapshot], &gateway_limits(), HeapDumpState::NotAsked);
    assert!(report.heap.is_none());
    assert_eq!(report.verdict.code, "no-data", "{}", verdict(&report));
}

#[test]
fn a_growing_series_gives_a_rate_and_the_time_to_the_limit() {
    // Twelve snapshots ten seconds apart: physical memory grows 10 MiB per snapshot
    // (60 MiB/min) from 700 MiB towards a 1 GiB limit, live data with it.
    const MIB: u64 = 1 << 20;
    let memory: Vec<String> = (0..12u64)
        .map(|i| {
            let physical = 700 * MIB + i * 10 * MIB;
            let allocated = physical - 60 * MIB;
            format!(
                "{{\n \"allocated\": \"{allocated}\",\n \"heap_size\": \"{}\",\n \
                 \"pageheap_unmapped\": \"{}\",\n \"pageheap_free\": \"4145152\",\n \
                 \"total_thread_cache\": \"22500080\",\n \"total_physical_bytes\": \"{physical}\"\n}}\n",
                physical + 200 * MIB,
                180 * MIB
            )
        })
        .collect();
    let stats: Vec<String> = (0..12u64)
        .map(|i| {
            gateway_counters().replace(
                "server.uptime: 1917",
                &format!("server.uptime: {}", 600 + i * 10),
            )
        })
        .collect();
    let double = AdminDouble::start(memory, stats);
    let source = double.source();
    let snapshots: Vec<EnvoySnapshot> = (0..12i64)
        .map(|i| {
            source
                .snapshot(1_714_651_200_000 + i * 10_000, TIMEOUT)
                .expect("snapshot")
        })
        .collect();
    let limits = EnvoyLimits {
        memory_bytes: Some(1 << 30),
        cpu_cores: Some(2.0),
    };
    let report = analysed(&snapshots, &limits, HeapDumpState::NotAsked);
    assert_eq!(report.snapshots, 12);
    assert_eq!(report.restarts, 0);
    let growth = report.growth.as_ref().expect("a fit");
    assert_eq!(growth.series, "total_physical_bytes");
    assert!(growth.growing);
    let per_min = growth.bytes_per_sec * 60.0 / MIB as f64;
    assert!((per_min - 60.0).abs() < 0.01, "{per_min}");
    assert!(growth.fit_r2 > 0.99);
    // Last snapshot at 810 MiB: 214 MiB left at 1 MiB/s.
    let left = growth.limit_in_s.expect("time to limit");
    assert!((left - 214.0).abs() < 0.5, "{left}");
    assert!(report.verdict.growing);
    assert!(
        verdict(&report).contains("growing 60.0 MiB/min")
            && verdict(&report).contains("the 1.00 GiB limit in about 3m 34s"),
        "{}",
        verdict(&report)
    );
    // Each snapshot asked /stats for only the counters heapwatch reads.
    let served = double.served();
    assert_eq!(served.memory_hits, 12);
    assert!(
        served
            .paths
            .iter()
            .filter(|p| p.starts_with("/stats"))
            .all(|p| p.starts_with("/stats?filter=")),
        "{:?}",
        served.paths
    );
}

#[test]
fn a_restart_in_the_series_starts_the_fit_again() {
    let memory: Vec<String> = [900u64, 950, 1000, 100, 110, 120, 130]
        .iter()
        .map(|m| {
            let b = m << 20;
            format!(
                r#"{{"allocated":"{b}","heap_size":"{}","total_physical_bytes":"{b}"}}"#,
                b * 2
            )
        })
        .collect();
    let stats: Vec<String> = [500u64, 510, 520, 2, 12, 22, 32]
        .iter()
        .map(|u| format!("server.concurrency: 2\nserver.uptime: {u}\n"))
        .collect();
    let double = AdminDouble::start(memory, stats);
    let source = double.source();
    let snapshots: Vec<EnvoySnapshot> = (0..7i64)
        .map(|i| source.snapshot(i * 10_000, TIMEOUT).expect("snapshot"))
        .collect();
    let report = analysed(&snapshots, &EnvoyLimits::default(), HeapDumpState::NotAsked);
    assert_eq!(report.restarts, 1);
    let growth = report.growth.expect("fit over the last boot cycle");
    assert_eq!(growth.first, 100 << 20);
    assert!((growth.bytes_per_sec - (1 << 20) as f64).abs() < 1.0);
}

#[test]
fn heap_dump_answering_501_is_not_available_and_not_asked_again() {
    let double = AdminDouble::start(
        vec![fixture("memory-no-tcmalloc.json")],
        vec![gateway_counters()],
    );
    let mut source = double.source();
    assert!(source.supports(Want::Heap));
    match source.heap_dump(TIMEOUT).expect("an answer") {
        HeapDump::NotAvailable(why) => {
            assert!(
                why.contains("HTTP 501") && why.contains(NOT_IMPLEMENTED),
                "{why}"
            )
        }
        HeapDump::Profile(_) => panic!("the double serves no profile"),
    }
    assert!(matches!(
        source.heap_dump_state(),
        HeapDumpState::NotAvailable(_)
    ));
    assert!(!source.supports(Want::Heap));
    // Neither the direct call nor the collector's path asks again.
    assert!(matches!(
        source.heap_dump(TIMEOUT),
        Ok(HeapDump::NotAvailable(_))
    ));
    let err = source.fetch(Want::Heap, TIMEOUT).expect_err("no heap dump");
    assert!(err.message.contains("not asked again"), "{}", err.message);
    assert_eq!(double.served().heap_dump_hits, 1);
    // The rest of the source keeps working.
    assert!(source.snapshot(0, TIMEOUT).is_ok());
    let report = analysed(
        &[],
        &EnvoyLimits::default(),
        source.heap_dump_state().clone(),
    );
    let text = render::text("gw", &report);
    assert!(
        text.contains("heap dump    not available (HTTP 501"),
        "{text}"
    );
}

#[test]
fn the_collector_reply_round_trips_into_manifest_totals() {
    let double = AdminDouble::start(
        vec![fixture("memory-live-data.json")],
        vec![gateway_counters()],
    );
    let mut source = double.source();
    assert_eq!(source.kind(), "envoy");
    assert!(source.supports(Want::MemStats));
    assert!(!source.supports(Want::Goroutine));
    let reply = source.fetch(Want::MemStats, TIMEOUT).expect("memstats");
    let totals = totals_from_reply(&reply.bytes).expect("envoy totals");
    assert_eq!(totals["memory.allocated"], 2_793_932_032);
    assert_eq!(totals["memory.pageheap_unmapped"], 1_109_401_600);
    assert_eq!(totals["server.concurrency"], 16);
    assert_eq!(totals["cluster_manager.active_clusters"], 1564);
    assert_eq!(totals["listener_manager.total_listeners_active"], 4);
    assert_eq!(totals["server.uptime"], 1917);
    let direct = source.snapshot(42, TIMEOUT).expect("snapshot");
    assert_eq!(EnvoySnapshot::from_totals(42, &totals), direct);
}

#[test]
fn failures_are_classified() {
    let port = util::free_port();
    let source = EnvoySource::new(
        &format!("envoy:http://127.0.0.1:{port}"),
        &HttpOptions::default(),
    )
    .expect("target");
    let err = source.snapshot(0, TIMEOUT).expect_err("nothing listens");
    assert_eq!(err.kind, FailureKind::Refused, "{}", err.message);

    let double = AdminDouble::start(vec!["<html>upstream connect error</html>".into()], vec![]);
    let err = double.source().memory(TIMEOUT).expect_err("not JSON");
    assert!(
        err.message.contains("not Envoy's /memory"),
        "{}",
        err.message
    );

    // An Envoy without /memory still gives its counters.
    let double = AdminDouble::start(vec![], vec![gateway_counters()]);
    let snapshot = double.source().snapshot(0, TIMEOUT).expect("counters only");
    assert_eq!(snapshot.memory, None);
    assert_eq!(snapshot.stats.concurrency(), Some(16));
}

#[test]
fn collect_watches_an_envoy_admin_port_and_asks_for_heap_dumps_once() {
    const MIB: u64 = 1 << 20;
    let memory: Vec<String> = (0..40u64)
        .map(|i| {
            let physical = 700 * MIB + i * 4 * MIB;
            format!(
                "{{\"allocated\": \"{}\", \"heap_size\": \"{}\", \"pageheap_unmapped\": \"0\", \
                 \"pageheap_free\": \"4145152\", \"total_thread_cache\": \"22500080\", \
                 \"total_physical_bytes\": \"{physical}\"}}\n",
                physical - 60 * MIB,
                physical + 100 * MIB
            )
        })
        .collect();
    let double = AdminDouble::start(memory, vec![gateway_counters()]);
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &double.target(),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "100ms",
        "--duration",
        "2s",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let text = std::fs::read_to_string(run.join("manifest.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let envoy: Vec<&serde_json::Value> = records.iter().filter(|r| r["kind"] == "envoy").collect();
    assert!(
        envoy.len() >= 10,
        "{} envoy records in 2 s at 100 ms",
        envoy.len()
    );
    assert!(
        envoy
            .iter()
            .all(|r| r["error"].is_null() && r["file"].is_null())
    );
    let first = &envoy[0]["totals"];
    assert_eq!(first["server.concurrency"], 16, "{first}");
    assert_eq!(first["cluster_manager.active_clusters"], 1564, "{first}");
    assert!(first["memory.total_physical_bytes"].as_i64().unwrap() >= (700 * MIB) as i64);
    // The heap dump answered 501: asked once, recorded once, never again.
    let dumps: Vec<&serde_json::Value> = records.iter().filter(|r| r["kind"] == "heap").collect();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    assert_eq!(dumps[0]["error_kind"], "status");
    assert_eq!(double.served().heap_dump_hits, 1);
    // The admin port stayed "there" the whole time: one boot cycle.
    assert!(records.iter().all(|r| r["incarnation"] == 1));
}
