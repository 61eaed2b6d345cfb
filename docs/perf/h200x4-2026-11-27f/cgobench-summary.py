# Medians, minima and per-run ratios of a cgobench-N.txt, by binary (the first word of each line):
#   python3 cgobench-summary.py cgobench-1.txt
import re, statistics as st, sys
d, labels = {}, []
for l in open(sys.argv[1]):
    f = l.split()
    v, r, name = f[0], int(f[2]), re.sub(r'-\d+$', '', f[3]).replace('Benchmark', '')
    if v not in labels:
        labels.append(v)
    d.setdefault((v, name), {})[r] = float(f[f.index('ns/op') - 1])
for v in labels:
    print(v)
    for n in ['NoopC', 'NoopCgo', 'NoopGonccl', 'AllReduceCgo', 'AllReduceGonccl', 'AllReduceGoncclDevice1']:
        x = d[(v, n)]
        print(f"  {n:24s} median {st.median(x.values()):7.2f} min {min(x.values()):7.2f}  runs "
              + " ".join(f"{x[k]:.1f}" for k in sorted(x)))
    for n in ['AllReduceGonccl', 'AllReduceGoncclDevice1']:
        rs = [d[(v, n)][k] / d[(v, 'AllReduceCgo')][k] for k in sorted(d[(v, n)])]
        print(f"  ratio {n}/cgo per run: " + " ".join(f"{r:.2f}" for r in rs)
              + f"  median {st.median(rs):.2f}; minima "
              + f"{min(d[(v, n)].values()) / min(d[(v, 'AllReduceCgo')].values()):.2f}")
