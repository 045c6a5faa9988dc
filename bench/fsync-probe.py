#!/usr/bin/env python3
"""What the disk alone costs a capture: 100 times a 1 MiB write + fsync under a temporary
name, then a rename + folder fsync, 50 ms apart; prints p50/p90/p99/max of each step.

usage: fsync-probe.py DIR   (DIR is made, and removed again afterwards)
"""
import os, time, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
data = os.urandom(1 << 20); w = []; r = []
for i in range(100):
    p = f"{d}/f{i}"; t = time.perf_counter()
    fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.write(fd, data); os.fsync(fd); os.close(fd)
    t1 = time.perf_counter(); os.rename(p + ".tmp", p)
    dfd = os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd); t2 = time.perf_counter()
    w.append((t1 - t) * 1e3); r.append((t2 - t1) * 1e3)
    time.sleep(0.05)
for n, v in (("1 MiB write+fsync", w), ("rename+folder fsync", r)):
    v = sorted(v); print(n, "p50 %.2f p90 %.2f p99 %.2f max %.2f ms" % (v[49], v[89], v[98], v[-1]))
import shutil; shutil.rmtree(d)
