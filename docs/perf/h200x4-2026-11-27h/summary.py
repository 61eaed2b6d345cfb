#!/usr/bin/env python3
"""Prints summary.txt from the raw runs of this folder: lease1.tgz and lease1-more.tgz (machine 1, job.sh and
twelve more counted rounds), lease2.tgz (machine 2, job2.sh), lease3.tgz (machine 3, job3.sh), lease4.tgz
(machine 4, job4.sh)."""
import glob, io, os, re, statistics as st, tarfile

here = os.path.dirname(os.path.abspath(__file__))


def members(path):
    """Yields (name, text) of every .txt in the tar, and of the tars inside it."""
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if not m.isfile():
                continue
            data = t.extractfile(m).read()
            if m.name.endswith('.tgz'):
                with tarfile.open(fileobj=io.BytesIO(data)) as inner:
                    for im in inner.getmembers():
                        if im.isfile() and im.name.endswith('.txt'):
                            yield im.name, inner.extractfile(im).read().decode(errors='replace')
            elif m.name.endswith('.txt'):
                yield m.name, data.decode(errors='replace')


def times(text):
    """The first result row's out-of-place and in-place µs."""
    for line in text.splitlines():
        p = line.split()
        if len(p) >= 10 and p[0].isdigit():
            return float(p[5]), float(p[9])
    return None


def fields(text, kind):
    """The key=value fields of every 'kind tag ...' line, by tag."""
    out = {}
    for line in text.splitlines():
        p = line.split()
        if p and p[0] == kind and len(p) > 2 and '=' in p[2]:
            out[p[1]] = dict(x.split('=', 1) for x in p[2:] if '=' in x)
    return out


def paired(a, b):
    d = [x - y for x, y in zip(a, b)]
    se = st.stdev(d) / len(d) ** .5 if len(d) > 1 else float('nan')
    return st.mean(d), se, len(d)


runs = {}
for name in ['lease1.tgz', 'lease1-more.tgz', 'lease2.tgz', 'lease3.tgz', 'lease4.tgz']:
    path = os.path.join(here, name)
    if os.path.exists(path):
        for n, text in members(path):
            runs[(name, os.path.basename(n))] = text

print('# nccl-bench against nccl-tests 2.19.6, NCCL 2.28.3, 4 x H200 (machines of 64 cores, one NUMA node)')
print('# 8-byte all_reduce, cold; µs per operation, mean of the out-of-place and in-place columns\n')

# 1. -g 4 -R 2 -G 10 -n 40 with GLPERF in both programs.
print('## machine 1: -g 4 -R 2 -G 10 -n 40, both programs under GLPERF (nccl-bench launching from a locked thread)')
print('   (glperf_stop then also closed the counters, inside the timed region: about 1.7 ms per run in both programs,')
print('   11 µs per operation at -n 40 against 6.4 to 8.8 at -n 400 on this machine; glperf_report now does it after)')
by = {}
for (lease, n), text in runs.items():
    m = re.match(r'c(\d+)-(tests|bench|locked)\.txt$', n)
    if not m or lease not in ('lease1.tgz', 'lease1-more.tgz'):
        continue
    by.setdefault(m.group(2), {})[int(m.group(1))] = text
rounds = sorted(set(by.get('tests', {})) & set(by.get('bench', {})))
if rounds:
    T = [st.mean(times(by['tests'][i])) for i in rounds]
    B = [st.mean(times(by['bench'][i])) for i in rounds]
    mean, se, n = paired(B, T)
    print(f'rounds {n}: nccl-tests median {st.median(T):.2f}, nccl-bench median {st.median(B):.2f}; '
          f'nccl-bench - nccl-tests {mean:+.2f} (se {se:.2f})')
    for prog in ('tests', 'bench'):
        g = [fields(by[prog][i], 'GLP') for i in rounds]
        vals = lambda k: [float(x[t][k]) for x in g for t in x]
        print(f'  {prog:5}: launching thread CPU/wall {st.median(vals("thr_cpu_us")):.0f}/{st.median(vals("wall_us")):.0f} µs, '
              f'run-queue wait {st.mean(vals("rq_us")):.1f} µs, context switches {st.mean(vals("cs")):.1f}, '
              f'migrations {st.mean(vals("mig")):.1f}, page faults {st.mean(vals("pf")):.1f}, '
              f'other threads CPU {st.median(vals("other_cpu_us")):.0f} µs (medians over launch regions; '
              f'hardware counters: {"none" if vals("ins")[0] < 0 else "yes"})')

# 2. Samples.
print('\n## machines 1 and 3: -g 4 -R 2 -G 10 -n 400, where the launching thread is, sampled every 25 µs of its CPU time')
for prog in ('tests', 'bench'):
    tot = {}
    blocks = {}
    for (lease, n), text in runs.items():
        if not re.match(rf'[sa]\d+-{prog}\.txt$', n):
            continue
        for line in text.splitlines():
            p = line.split()
            if p[:1] != ['GLS']:
                continue
            if len(p) > 3 and p[2] == 'self':  # machine 3: "GLS tag self ..."
                p = p[:2] + p[3:]
            if len(p) > 3 and p[2].startswith('samples='):
                for kv in p[4:]:
                    k, v = kv.rsplit('=', 1)
                    tot[k] = tot.get(k, 0) + int(v)
            elif len(p) >= 5 and p[2] == 'blk':
                blocks[p[3]] = blocks.get(p[3], 0) + int(p[4])
    if not tot:
        continue
    all_ = sum(tot.values())
    share = ', '.join(f'{k} {100 * v / all_:.1f} %' for k, v in sorted(tot.items(), key=lambda x: -x[1]))
    top = ', '.join(f'{k} {100 * v / all_:.1f} %' for k, v in sorted(blocks.items(), key=lambda x: -x[1])[:4])
    print(f'  {prog:5}: {all_} samples: {share}\n         hottest 256-byte blocks: {top}')

# 3. Thread per GPU.
print('\n## machine 1: one thread per GPU, nccl-tests -t 4 -g 1 against nccl-bench -t 4 -g 1, -n 40, both as published')
res = {}
for (lease, n), text in runs.items():
    m = re.match(r't(\d+)-x(\w*)-(tests|bench)\.txt$', n)
    if m and times(text):
        res[(m.group(2), m.group(3), int(m.group(1)))] = st.mean(times(text))
for mode, label in (('', 'plain'), ('G10', '-G 10'), ('R2G10', '-R 2 -G 10')):
    rs = sorted(i for (md, p, i) in res if md == mode and p == 'tests' and (md, 'bench', i) in res)
    if not rs:
        continue
    T = [res[(mode, 'tests', i)] for i in rs]
    B = [res[(mode, 'bench', i)] for i in rs]
    mean, se, n = paired(B, T)
    print(f'  {label:11} rounds {n}: nccl-tests median {st.median(T):.2f} (range {min(T):.2f}-{max(T):.2f}), '
          f'nccl-bench median {st.median(B):.2f} (range {min(B):.2f}-{max(B):.2f}); difference {mean:+.2f} (se {se:.2f}), '
          f'median {st.median([b - t for b, t in zip(B, T)]):+.2f}')

# 3b. Machine 3: the other threads.
print('\n## machine 3: the other threads over the same launches (GLPERF_SAMPLE_ALL), samples of 25 µs per region')
for prog in ('tests', 'bench'):
    per = {}
    top = {}
    regions = 0
    for (lease, n), text in runs.items():
        if lease != 'lease3.tgz' or not re.match(rf'a\d+-{prog}\.txt$', n):
            continue
        for line in text.splitlines():
            p = line.split()
            if len(p) > 3 and p[0] == 'GLS' and p[2] == 'self' and p[3].startswith('samples='):
                regions += 1
            if len(p) > 3 and p[0] == 'GLS' and p[2] != 'self' and p[3].startswith('samples='):
                name = p[2].split(':', 1)[1]
                per[name] = per.get(name, 0) + int(p[3].split('=')[1])
            if len(p) > 5 and p[0] == 'GLS' and p[2] != 'self' and p[3] == 'blk':
                key = p[4] + (' ' + p[6] if len(p) > 6 else '')
                top[key] = top.get(key, 0) + int(p[5])
    if regions:
        print(f'  {prog:5}: {regions} regions; samples per region by thread name: ' +
              ', '.join(f'{k} {v / regions:.1f}' for k, v in sorted(per.items(), key=lambda x: -x[1])))
        print('         their hottest blocks: ' + ', '.join(f'{k} {v}' for k, v in sorted(top.items(), key=lambda x: -x[1])[:8]))

# 4. Machine 2.
def by_round(lease, pat):
    out = {}
    for (l, n), text in runs.items():
        m = re.match(pat, n)
        if l == lease and m and times(text):
            out[m.groups()] = st.mean(times(text))
    return out

r2 = by_round('lease2.tgz', r'c(\d+)-(tests|locked|bench)\.txt$')
if r2:
    print('\n## machine 2: -g 4 -R 2 -G 10 -n 40, 8 rounds: nccl-tests (GLPERF), nccl-bench launching from a locked thread '
          '(GLPERF) and as published')
    rs = sorted({int(i) for i, _ in r2})
    for a, b in (('locked', 'tests'), ('bench', 'tests'), ('locked', 'bench')):
        A = [r2[(str(i), a)] for i in rs]
        B = [r2[(str(i), b)] for i in rs]
        mean, se, n = paired(A, B)
        print(f'  {a} - {b}: {mean:+.2f} (se {se:.2f}), median {st.median([x - y for x, y in zip(A, B)]):+.2f}, '
              f'{n} rounds; medians {st.median(A):.2f} and {st.median(B):.2f}')
    t2 = by_round('lease2.tgz', r't(\d+)-n(\d+)-(tests|bench)\.txt$')
    print('  one thread per GPU, plain launches (-t 4 -g 1), 6 rounds:')
    for n_ in ('40', '400'):
        rs = sorted({int(i) for i, nn, _ in t2 if nn == n_})
        T = [t2[(str(i), n_, 'tests')] for i in rs]
        B = [t2[(str(i), n_, 'bench')] for i in rs]
        mean, se, n = paired(B, T)
        print(f'    -n {n_:3}: nccl-tests median {st.median(T):.2f}, nccl-bench median {st.median(B):.2f} '
              f'(range {min(B):.2f}-{max(B):.2f}); nccl-bench - nccl-tests {mean:+.2f} (se {se:.2f}), '
              f'median {st.median([b - t for b, t in zip(B, T)]):+.2f}')

# 5. Machine 4 and every machine.
r4 = by_round('lease4.tgz', r'c(\d+)-(tests|bench)\.txt$')
machines = []
if r4:
    rs = sorted({int(i) for i, _ in r4})
    B = [r4[(str(i), 'bench')] for i in rs]
    T = [r4[(str(i), 'tests')] for i in rs]
    mean, se, n = paired(B, T)
    print(f'\n## machine 4: -g 4 -R 2 -G 10 -n 40, both programs as published, {n} rounds: nccl-bench - nccl-tests '
          f'{mean:+.2f} (se {se:.2f}), median {st.median([b - t for b, t in zip(B, T)]):+.2f}; medians '
          f'{st.median(B):.2f} and {st.median(T):.2f}')
    for (label, (m_, s_)) in (('ninth lease, machine 1', (0.49, 0.38)), ('ninth lease, machine 2', (1.54, 0.52)),
                              ('ninth lease, machine 5', (0.97, 0.40))):
        machines.append((label, m_, s_))
    A1 = [st.mean(times(by['bench'][i])) for i in rounds]
    T1 = [st.mean(times(by['tests'][i])) for i in rounds]
    machines.append(('tenth lease, machine 1',) + paired(A1, T1)[:2])
    A2 = [r2[(str(i), 'bench')] for i in sorted({int(i) for i, _ in r2})]
    T2 = [r2[(str(i), 'tests')] for i in sorted({int(i) for i, _ in r2})]
    machines.append(('tenth lease, machine 2',) + paired(A2, T2)[:2])
    machines.append(('tenth lease, machine 4', mean, se))
    w = [1 / s_ ** 2 for _, _, s_ in machines]
    pooled = sum(m_ * wi for (_, m_, _), wi in zip(machines, w)) / sum(w)
    print('\n## -g 4 -R 2 -G 10, cold, nccl-bench - nccl-tests per machine (the ninth lease\'s from '
          '../h200x4-2026-11-27g/summary.txt)')
    for label, m_, s_ in machines:
        print(f'  {label:23} {m_:+.2f} (se {s_:.2f})')
    print(f'  weighted by 1/se^2: {pooled:+.2f} (se {sum(w) ** -0.5:.2f}); median of the machines '
          f'{st.median([m_ for _, m_, _ in machines]):+.2f}')
