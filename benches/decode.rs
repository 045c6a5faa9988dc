//! Decoding throughput, stage by stage, over committed fixtures and (when present) the large
//! generated profile of bench/top-vs-pprof.sh. Throughput is in bytes of decompressed
//! protobuf, so the stages compare with each other and with gunzip.
//!
//! `cargo bench --bench decode`; HEAPWATCH_BENCH_PROFILE names the large profile (default
//! /tmp/big.pb.gz; skipped when missing).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use heapwatch::decode::{self, DecodeLimits};
use heapwatch::model::aggregate::{self, Granularity};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/profiles")
        .join(name)
}

fn large_profile() -> PathBuf {
    std::env::var_os("HEAPWATCH_BENCH_PROFILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/big.pb.gz"))
}

fn bench_profile(c: &mut Criterion, label: &str, path: &Path, large: bool) {
    let Ok(gz) = std::fs::read(path) else {
        eprintln!(
            "skipping {label}: cannot read {} (make it with bench/top-vs-pprof.sh)",
            path.display()
        );
        return;
    };
    let limits = DecodeLimits::default();
    let raw = decode::gunzip(&gz, limits.max_decompressed).expect("the profile gunzips");
    let profile = decode::decode_protobuf(&raw).expect("the profile decodes");
    let index = profile.default_sample_index();

    let mut group = c.benchmark_group(format!("decode/{label}"));
    group.throughput(Throughput::Bytes(raw.len() as u64));
    if large {
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(10));
    }
    group.bench_function("gunzip", |b| {
        b.iter(|| decode::gunzip(black_box(&gz), limits.max_decompressed))
    });
    group.bench_function("protobuf+validate", |b| {
        b.iter(|| decode::decode_protobuf(black_box(&raw)))
    });
    // gunzip streamed into the decoder on the same thread.
    group.bench_function("gunzip+protobuf+validate (streamed, one thread)", |b| {
        b.iter(|| decode::decode_on_one_thread(black_box(&gz), &limits))
    });
    // What `decode` does with a gzipped profile: a large one is gunzipped on its own thread.
    group.bench_function("gunzip+protobuf+validate (streamed)", |b| {
        b.iter(|| decode::decode(black_box(&gz), &limits))
    });
    // What `top` does: the stacks folded into sites as they are decoded.
    group.bench_function("top (decode_sites, folded)", |b| {
        b.iter(|| {
            let d = decode::decode_sites(black_box(&gz), &limits, Granularity::Function)
                .expect("decodes");
            d.sites(d.profile.default_sample_index())
        })
    });
    group.bench_function("sites", |b| {
        b.iter(|| aggregate::sites(black_box(&profile), index, Granularity::Function))
    });
    group.bench_function("top (gunzip..sites, whole model)", |b| {
        b.iter(|| {
            let p = decode::decode(black_box(&gz), &limits).expect("decodes");
            aggregate::sites(&p, p.default_sample_index(), Granularity::Function)
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    bench_profile(
        c,
        "hiddenleak-heap-rate4k",
        &fixture("hiddenleak-heap-rate4k.pb.gz"),
        false,
    );
    bench_profile(c, "big", &large_profile(), true);
}

criterion_group!(decode_benches, benches);
criterion_main!(decode_benches);
