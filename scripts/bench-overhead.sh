#!/usr/bin/env bash
# Measures what gonccl's call path costs against cgo and against C itself, on
# the same C functions of the fake NCCL, in one run (internal/cgobench):
#   - a no-op (ncclGetErrorString): gonccl's call path, cgo, a loop in C;
#   - the public hot path: Comm.AllReduce of 0 elements, against the same call by cgo;
#   - one iteration of a one-thread two-GPU benchmark: Library.Group around two
#     Comm.AllReduce, against the same four calls made from C (one cgo call);
#   - Open: nccl.Open against a C program's dlopen + dlsym of the same symbols.
# Medians of COUNT runs (default 5). The last line is the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
out=$(CGO_ENABLED=1 go test -run '^$' -bench . -benchmem -count "$count" ./internal/cgobench/)
echo "$out" | grep '^Benchmark'
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
