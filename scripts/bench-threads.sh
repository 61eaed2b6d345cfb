#!/usr/bin/env bash
# On a GPU machine: one goroutine driving every GPU through nccl.Threads
# (nccl-bench -g N -threads) against nccl-tests with a thread per GPU (-t N
# -g 1) and with one thread for all (-g N), beside nccl-bench's own
# one-thread path (-g N). Each round runs the four once, in an order that
# rotates from round to round; each run sweeps SIZES out of place. Per round
# and program the mean time over the sizes; then each program's mean
# per-round difference to nccl-tests -t N -g 1, with its standard error over
# the rounds. A checked run of -threads (every byte, -d uint8) comes first.
# Binaries from `scripts/gpu-check.sh build`; nccl-tests' sources from
# ../shared/gpu/prepare.sh (built here by .gpu/build-nccl-tests.sh).
#
#   N=4 ROUNDS=5 MODE="-R 2 -G 20" scripts/bench-threads.sh [OUT]
#   MODE="" SIZES="-b 8 -e 1M -f 4" scripts/bench-threads.sh    # plain launches
#
# OUT/runs keeps every run's table, for `go run ./cmd/nccl-results import`
# (docs/results/README.md; nccl-bench's header says -threads); OUT/threads.md
# the summary, from the same runs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-/tmp/gonccl-threads}
mkdir -p "$OUT/runs"
N=${N:-$(nvidia-smi -L | grep -c '^GPU')}
ROUNDS=${ROUNDS:-5}
MODE=${MODE-"-R 2 -G 20"}
SIZES=${SIZES:-"-b 8 -e 4K -f 2"}
ITERS=${ITERS:-"-n 100 -w 20"}
T=${T:-$(bash .gpu/build-nccl-tests.sh)} || { echo "nccl-tests did not build"; exit 1; }
B=${B:-.gpu/bin/nccl-bench}
names=(tests-t tests-g bench-threads bench-g)
# shellcheck disable=SC2086
cmd() {
  case $1 in
  tests-t) echo "$T/all_reduce_perf -t $N -g 1" ;;
  tests-g) echo "$T/all_reduce_perf -g $N" ;;
  bench-threads) echo "$B -g $N -threads" ;;
  bench-g) echo "$B -g $N" ;;
  esac
}
# shellcheck disable=SC2086
timeout 300 $B -g "$N" -threads -b 8 -e 64M -f 8 -c 1 -d uint8 $MODE >"$OUT/runs/checked-threads.txt" 2>&1 ||
  { echo "bench-threads: the checked run failed"; tail -20 "$OUT/runs/checked-threads.txt"; exit 1; }
grep -q 'Out of bounds values : 0 OK' "$OUT/runs/checked-threads.txt" || { echo "bench-threads: wrong bytes"; exit 1; }
for round in $(seq "$ROUNDS"); do
  for k in 0 1 2 3; do
    name=${names[$(((k + round - 1) % 4))]}
    # shellcheck disable=SC2086
    timeout 300 $(cmd "$name") $SIZES $ITERS -c 0 $MODE >"$OUT/runs/$name-$round.txt" 2>&1 || echo "bench-threads: $name round $round failed"
  done
done
{
  echo "## all_reduce, $N GPUs, ${MODE:-plain}, $SIZES, $ROUNDS rotating rounds: mean out-of-place time over the sizes (µs)"
  echo
  echo "| program | per round | mean | difference to nccl-tests -t $N -g 1 (se) |"
  echo "|---|---|---:|---:|"
  for name in "${names[@]}"; do
    for round in $(seq "$ROUNDS"); do
      awk -v r="$round" '$1 ~ /^[0-9]+$/ && NF >= 8 { s += $6; n++ } END { if (n) printf "%s %.3f\n", r, s / n }' "$OUT/runs/$name-$round.txt"
    done >"$OUT/$name.means"
  done
  for name in "${names[@]}"; do
    join "$OUT/$name.means" "$OUT/tests-t.means" | awk -v label="$(cmd "$name" | sed "s|$T/||; s|$B|nccl-bench|")" '
      { per = per sprintf(" %.2f", $2); s += $2; d = $2 - $3; sd += d; sdd += d * d; n++ }
      END { m = sd / n; se = n > 1 ? sqrt((sdd - n * m * m) / (n - 1) / n) : 0
            printf "| %s |%s | %.2f | %+.2f (%.2f) |\n", label, per, s / n, m, se }'
  done
} | tee "$OUT/threads.md"
