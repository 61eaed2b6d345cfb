#!/usr/bin/env python3
"""Summarises the graph-launch runs of this folder: python3 summary.py > summary.txt.

Each run's file holds nccl-tests' or nccl-bench's table and, from the patched programs, one
"GLT inplace k us" line per graph launch (its end on the host clock, from the timed region's
start) and "GLE inplace us" (the streams' end). Out-of-place rows only. Per configuration:
the time per operation (median, mean over the runs), the end of the first launch, of the
first round of launches (one per GPU), and the mean time per launch after that round.
Differences are per round (the runs of one round ran back to back), mean, standard error
and median."""
import os, re, statistics as st, tarfile

def parse(text, ngpu):  # the GLT columns are absent from par.tgz (no GL_TIMES)
    t, L = None, []
    for line in text.splitlines():
        p = line.split()
        if not p:
            continue
        if p[0] == "GLT" and p[1] == "false":
            L.append(float(p[3]))
        elif t is None and re.fullmatch(r"\d+", p[0]) and len(p) >= 8:
            t = float(p[5])
    if not L:
        return dict(us=t)
    return dict(us=t, first=L[0], round1=L[ngpu - 1], per=(L[-1] - L[ngpu - 1]) / (len(L) - ngpu))

def load(tgz, key):
    rows = {}
    with tarfile.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), tgz)) as tf:
        for m in tf.getmembers():
            if not m.name.endswith(".txt"):
                continue
            cfg, rnd, ngpu = key(os.path.basename(m.name)[:-4])
            rows.setdefault(cfg, {})[rnd] = parse(tf.extractfile(m).read().decode(), ngpu)
    return rows

def table(title, rows):
    print(f"\n== {title}")
    print("%-22s %3s | %7s %7s | %11s %11s | %10s | runs (us/op)" % ("config", "n", "med", "mean", "1st launch", "1st round", "per launch"))
    for c in sorted(rows):
        v = [rows[c][r] for r in sorted(rows[c])]
        print("%-22s %3d | %7.2f %7.2f | %11.0f %11.0f | %10.1f | %s" % (c, len(v), st.median(x["us"] for x in v),
              st.mean(x["us"] for x in v), st.median(x["first"] for x in v), st.median(x["round1"] for x in v),
              st.median(x["per"] for x in v), " ".join("%.2f" % x["us"] for x in v)))

def diff(rows, a, b):
    ks = sorted(set(rows[a]) & set(rows[b]))
    d = [rows[a][k]["us"] - rows[b][k]["us"] for k in ks]
    print(f"   {a} - {b}: mean {st.mean(d):+.2f} (se {st.stdev(d) / len(d) ** .5:.2f}), median {st.median(d):+.2f}, {len(d)} rounds")

def gl_key(n):  # g4-r3-bench-cold
    g, r, prog, mode = n.split("-")
    return f"{g} {prog} {mode}", int(r[1:]), int(g[1:])

rows = load("gl.tgz", gl_key)
table("machine 1 (gl.tgz): -g 4 and -g 2, cold and warm, unpinned", rows)
for a, b in [("g4 bench cold", "g4 tests cold"), ("g4 bench warm", "g4 tests warm"), ("g4 bench cold", "g4 bench warm"),
             ("g4 tests cold", "g4 tests warm"), ("g2 bench cold", "g2 tests cold")]:
    diff(rows, a, b)

rows = load("pin.tgz", lambda n: (n.split("-", 2)[2], int(n.split("-")[1][1:]), 4))
table("machine 2 (pin.tgz): -g 4 under taskset of GPU 0's cores (all 64 on this VM)", rows)
for a, b in [("bench-cold", "tests-cold"), ("bench-warm", "tests-warm"), ("preload-warm", "tests-warm"), ("preload-warm", "bench-warm")]:
    diff(rows, a, b)

rows = load("env.tgz", lambda n: (n.split("-")[1], int(n.split("-")[0][1:]), 4))
table("machine 3 (env.tgz): -g 4 warm; the launches in a C loop inside the Go process; a quiet Go runtime", rows)
for a, b in [("bench", "tests"), ("cloop", "tests"), ("cloop", "bench"), ("quiet", "tests")]:
    diff(rows, a, b)

rows = load("up.tgz", lambda n: (n.split("-")[0] + " " + n.split("-")[2], int(n.split("-")[1][1:]), int(n[1])))
table("machine 4 (up.tgz): nccl-bench cold, after Graph.Upload, warm", rows)
for g in ("g4", "g2"):
    for a, b in [("cold", "upload"), ("cold", "warm"), ("upload", "warm")]:
        diff(rows, f"{g} {a}", f"{g} {b}")

rows = load("par.tgz", lambda n: (n.split("-", 1)[1], int(n.split("-")[0][1:]), 4))
print("\n== machine 5 (par.tgz): one process, 4 GPUs, cold: one thread launching every graph, or one per GPU")
print("%-10s %3s | %7s %7s | runs (us/op)" % ("config", "n", "med", "mean"))
for c in sorted(rows):
    v = [rows[c][r]["us"] for r in sorted(rows[c])]
    print("%-10s %3d | %7.2f %7.2f | %s" % (c, len(v), st.median(v), st.mean(v), " ".join("%.2f" % x for x in v)))
for a, b in [("bench-g4", "tests-g4"), ("bench-par", "tests-t4"), ("tests-g4", "tests-t4"), ("bench-g4", "bench-par")]:
    diff(rows, a, b)
