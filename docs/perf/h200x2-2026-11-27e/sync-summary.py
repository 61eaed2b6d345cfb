# Medians, minima and per-round differences of sync.txt: python3 sync-summary.py sync.txt
import re, statistics as st, sys
d = {}
for l in open(sys.argv[1]):
    m = re.match(r'round (\d+) (\w+) (.*) prog (\d): ([\d.]+) us', l)
    if not m:
        continue
    r, mode, args, p, v = m.groups()
    d.setdefault(mode + ' ' + args, {}).setdefault(int(p), {})[int(r)] = float(v)
names = {0: 'nccl-tests', 1: 'nccl-bench', 2: 'before'}
for k, v in d.items():
    print(k)
    for p in (0, 1, 2):
        print(f"  {names[p]:11s} median {st.median(v[p].values()):6.2f} min {min(v[p].values()):6.2f} :",
              " ".join(f"{v[p][r]:.2f}" for r in sorted(v[p])))
    for a, b in ((1, 0), (2, 0), (1, 2)):
        diffs = [v[a][r] - v[b][r] for r in sorted(v[b]) if r in v[a]]
        print(f"  {names[a]} - {names[b]} per round: mean {st.mean(diffs):+.2f} "
              f"(se {st.stdev(diffs) / len(diffs) ** .5:.2f}) median {st.median(diffs):+.2f}")
