#!/usr/bin/env python3
"""Numbers for bench/collect-throughput.sh.

  collect-stats.py run RUN SECONDS [KEY=VALUE...]
      one JSON object for one collector run: heap captures (total, stored, duplicates,
      errors) per second, p50 / p99 of `latency_ms` (request start to last byte) and of
      `durable_ms` (last byte received to the file fsynced and renamed), from
      RUN/manifest.jsonl; KEY=VALUE pairs are added as they are (numbers when they parse).
  collect-stats.py table RESULTS.jsonl
      the results table: each figure's median and range over the repeats.
"""

import json
import statistics
import sys


def percentile(values, p):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    values = sorted(values)
    rank = max(1, -(-len(values) * p // 100))  # ceil(n * p / 100)
    return values[int(rank) - 1]


def number(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run(directory, seconds, extra):
    heap = []
    with open(directory + "/manifest.jsonl", "rb") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if record.get("kind") == "heap":
                heap.append(record)
    ok = [r for r in heap if r.get("error") is None]
    stored = [r for r in ok if r.get("dup_of") is None]
    latency = [r["latency_ms"] for r in ok]
    durable = [r["durable_ms"] for r in stored if r.get("durable_ms") is not None]
    sizes = [r["bytes"] for r in ok]
    result = {
        "attempts": len(heap),
        "captures": len(ok),
        "stored": len(stored),
        "errors": len(heap) - len(ok),
        "captures_per_s": round(len(ok) / seconds, 2),
        "stored_per_s": round(len(stored) / seconds, 2),
        "bytes_mean": round(sum(sizes) / len(sizes)) if sizes else None,
        "latency_p50_ms": percentile(latency, 50),
        "latency_p99_ms": percentile(latency, 99),
        "durable_p50_ms": percentile(durable, 50),
        "durable_p99_ms": percentile(durable, 99),
    }
    for pair in extra:
        key, _, value = pair.partition("=")
        result[key] = number(value)
    print(json.dumps(result))


# (case, key, label, goal); cases are written by collect-throughput.sh.
ROWS = [
    ("live-1ms", "captures_per_s", "live target, --interval 1ms: captures/s", ">= 20"),
    ("live-1ms", "stored_per_s", "  of which stored (not dup_of)/s", ""),
    ("live-1ms", "errors", "  failed attempts (timeouts)", ""),
    ("live-1ms", "latency_p50_ms", "  request latency_ms p50", ""),
    ("live-1ms", "latency_p99_ms", "  request latency_ms p99", ""),
    ("live-1ms", "durable_p50_ms", "  capture-to-durable durable_ms p50", ""),
    ("live-1ms", "durable_p99_ms", "  capture-to-durable durable_ms p99", "< 20"),
    ("live-1ms", "rss_mib", "  collector peak RSS (MiB)", "< 30"),
    ("live-1ms", "collector_cpu_ms_per_capture", "  collector CPU ms per capture", ""),
    ("live-1ms", "target_cpu_pct", "  target CPU, % of one core", ""),
    ("live-500ms", "captures_per_s", "live target, default 500ms: captures/s", ""),
    ("live-500ms", "durable_p99_ms", "  capture-to-durable durable_ms p99", "< 20"),
    ("live-500ms", "rss_mib", "  collector peak RSS (MiB)", "< 30"),
    ("target-alone", "target_cpu_pct", "target alone (churn only): CPU % of one core", ""),
    ("cpu-500ms", "target_cpu_pct", "target with collector at 500ms: CPU %", ""),
    ("cpu-500ms", "target_extra_pct", "  cost of being profiled at 500ms (% of a core)", ""),
    ("cpu-500ms", "target_cpu_ms_per_capture", "  target CPU ms per capture served", ""),
    ("cpu-100ms", "target_cpu_pct", "target with collector at 100ms: CPU %", ""),
    ("cpu-100ms", "target_extra_pct", "  cost of being profiled at 100ms (% of a core)", ""),
    ("cpu-100ms", "captures_per_s", "  captures/s reached at 100ms (10 asked)", ""),
    ("static-1ms", "captures_per_s", "free target (static files), 1ms: captures/s", ">= 20"),
    ("static-1ms", "latency_p99_ms", "  request latency_ms p99", ""),
    ("static-1ms", "durable_p50_ms", "  capture-to-durable durable_ms p50", ""),
    ("static-1ms", "durable_p99_ms", "  capture-to-durable durable_ms p99", "< 20"),
    ("static-1ms", "rss_mib", "  collector peak RSS (MiB)", "< 30"),
    ("static-1ms", "collector_cpu_ms_per_capture", "  collector CPU ms per capture", ""),
]


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, int) or abs(v) >= 100:
        return "%d" % round(v)
    return "%.1f" % v


def table(path):
    by_case = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                by_case.setdefault(r["case"], []).append(r)
    print("| measure | median | range (n) | goal |")
    print("|---|---:|---:|---|")
    for case, key, label, goal in ROWS:
        values = [r[key] for r in by_case.get(case, []) if r.get(key) is not None]
        if not values:
            continue
        rng = "%s – %s (%d)" % (fmt(min(values)), fmt(max(values)), len(values))
        if label.startswith("  "):
            label = "↳ " + label[2:]
        print("| %s | %s | %s | %s |" % (label, fmt(statistics.median(values)), rng, goal))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], float(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
