#!/usr/bin/env bash
# Measures what gonccl's call path costs against cgo and against C itself, on
# the same C functions of the fake NCCL, in one run (internal/cgobench):
#   - a no-op (ncclGetErrorString): gonccl's call path, cgo, a loop in C;
#   - the public hot path: Comm.AllReduce of 0 elements, against the same call by cgo;
#   - one iteration of a one-thread two-GPU benchmark: Library.Group around two
#     Comm.AllReduce, against the same four calls made from C (one cgo call);
#   - Open: nccl.Open against a C program's dlopen + dlsym of the same symbols.
# Medians of COUNT runs (default 5). The last line is the summary.
# ROUNDS=N runs the whole set N times in turn (each benchmark COUNT times per
# round), so that a ratio's two sides ran close together. RAW=FILE keeps every
# result in Go's benchmark format, after the lines "machine: $MACHINE",
# "measured: <date>" and "commit: <HEAD>"; docs/results/cpu-callcost.txt is
# one, from which go run ./cmd/nccl-results renders docs/call-cost.md's tables:
#   ROUNDS=8 COUNT=1 MACHINE="2-vCPU VM" RAW=docs/results/cpu-callcost.txt scripts/bench-overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
rounds=${ROUNDS:-1}
bin=$(mktemp -d)/cgobench.test
CGO_ENABLED=1 go test -c -o "$bin" ./internal/cgobench/
out=$(cd internal/cgobench && for _ in $(seq "$rounds"); do "$bin" -test.run '^$' -test.bench . -test.benchmem -test.count "$count"; done)
rm -rf "$(dirname "$bin")"
echo "$out" | grep '^Benchmark'
if [ -n "${RAW:-}" ]; then
  { echo "machine: ${MACHINE:-$(hostname)}"; echo "measured: $(date -u +%F)"; echo "commit: $(git rev-parse --short HEAD)"
    echo "$out" | grep -E '^(goos|goarch|pkg|cpu):' | awk '!seen[$0]++'; echo "$out" | grep '^Benchmark'; } >"$RAW"
fi
median() { # benchmark name, column after which the value stands ("ns/op" or "allocs/op")
  echo "$out" | awk -v b="^Benchmark$1-" -v unit="$2" '$1 ~ b { for (i = 2; i <= NF; i++) if ($(i) == unit) print $(i-1) }' |
    sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
g=$(median NoopGonccl ns/op); ga=$(median NoopGonccl allocs/op); c=$(median NoopCgo ns/op); cl=$(median NoopC ns/op)
gi=$(median GroupIterationGonccl ns/op); gia=$(median GroupIterationGonccl allocs/op); ci=$(median GroupIterationCgo ns/op)
ag=$(median AllReduceGonccl ns/op); aga=$(median AllReduceGonccl allocs/op); ac=$(median AllReduceCgo ns/op)
og=$(median OpenGonccl ns/op); oc=$(median OpenC ns/op)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "no-op from C itself: $cl ns/op"
echo "AllReduce(0 elements) public API: gonccl $ag ns/op $aga allocs/op, cgo $ac ns/op, ratio $(ratio "$ag" "$ac")"
echo "one group of two AllReduce calls (nccl-tests -g 2 iteration): gonccl $gi ns/op $gia allocs/op, C $ci ns/op, ratio $(ratio "$gi" "$ci")"
echo "Open: gonccl $og ns/op, C dlopen+dlsym $oc ns/op, ratio $(ratio "$og" "$oc")"
echo "overhead: gonccl $g ns/op $ga allocs/op, cgo $c ns/op, ratio $(ratio "$g" "$c")"
