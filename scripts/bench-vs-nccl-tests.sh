#!/usr/bin/env bash
# On a GPU machine: builds nccl-tests (.gpu/build-nccl-tests.sh, sources from
# ../shared/gpu/prepare.sh), then runs nccl-tests and nccl-bench with identical
# parameters, one after the other for every operation, and prints a ratio
# table: busbw of nccl-bench / nccl-tests per size (out of place) and the time
# difference. Binaries of this repository come from `scripts/gpu-check.sh build`
# (.gpu/bin/nccl-bench). Logs go to OUT (default /tmp/gonccl-bench).
#   ARGS="-b 8 -e 1G -f 4 -g 2 -n 100 -w 5 -c 0" REPS=5 scripts/bench-vs-nccl-tests.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-${OUT:-/tmp/gonccl-bench}}
mkdir -p "$OUT"
ARGS=${ARGS:-"-b 8 -e 1G -f 4 -g 2 -n 100 -w 5 -c 0"}
T=$(bash .gpu/build-nccl-tests.sh) || { echo "nccl-tests did not build"; exit 1; }
OPS=${OPS:-"all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv alltoallv"}
for op in $OPS; do
  # shellcheck disable=SC2086
  timeout 120 "$T/${op}_perf" $ARGS >"$OUT/nccl-tests-$op.txt" 2>&1
  # shellcheck disable=SC2086
  timeout 120 .gpu/bin/nccl-bench -op "$op" $ARGS -plot "$OUT/$op.svg" -overlay "$OUT/nccl-tests-$op.txt" >"$OUT/nccl-bench-$op.txt" 2>&1
done
# Latency: 8 bytes, many iterations, the two programs alternating REPS times
# (the median is reported, with the spread).
REPS=${REPS:-5}
for op in all_reduce sendrecv broadcast; do
  : >"$OUT/latency-nccl-tests-$op.txt"
  : >"$OUT/latency-nccl-bench-$op.txt"
  for _ in $(seq "$REPS"); do
    timeout 60 "$T/${op}_perf" -b 8 -e 8 -g 2 -n 2000 -w 100 -c 0 >>"$OUT/latency-nccl-tests-$op.txt" 2>&1
    timeout 60 .gpu/bin/nccl-bench -op "$op" -b 8 -e 8 -g 2 -n 2000 -w 100 -c 0 >>"$OUT/latency-nccl-bench-$op.txt" 2>&1
  done
done
# VCCL's native ncclAlltoAllv beside the grouped form, when a VCCL build is given.
if [ -n "${VCCL_LIB:-}" ]; then
  # shellcheck disable=SC2086
  GONCCL_NCCL_LIB=$VCCL_LIB timeout 120 .gpu/bin/nccl-bench -op alltoallv $ARGS >"$OUT/vccl-native-alltoallv.txt" 2>&1
  # shellcheck disable=SC2086
  GONCCL_NCCL_LIB=$VCCL_LIB timeout 120 .gpu/bin/nccl-bench -op alltoallv -grouped $ARGS >"$OUT/vccl-grouped-alltoallv.txt" 2>&1
fi
# shellcheck disable=SC2086
scripts/ratio-table.sh "$OUT/nccl-tests-%s.txt" "$OUT/nccl-bench-%s.txt" $OPS | tee "$OUT/ratios.txt"
# median (min–max) of the out-of-place 8-byte times in a file
lat() { awk '$1 == 8 {print $6}' "$1" | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.2f (%.2f-%.2f, %d runs)", v[int((NR + 1) / 2)], v[1], v[NR], NR }'; }
for op in all_reduce sendrecv broadcast; do
  printf "%-15s 8 B latency, us, median (min-max): nccl-tests %s, nccl-bench %s\n" "$op" \
    "$(lat "$OUT/latency-nccl-tests-$op.txt")" "$(lat "$OUT/latency-nccl-bench-$op.txt")"
done | tee -a "$OUT/ratios.txt"
for f in "$OUT"/vccl-*-alltoallv.txt; do
  [ -e "$f" ] && printf "%-30s avg busbw %s\n" "$(basename "$f" .txt)" "$(awk -F: '/Avg bus bandwidth/ {gsub(/ /, "", $2); print $2}' "$f")"
done | tee -a "$OUT/ratios.txt"
for op in $OPS; do
  printf "%-15s avg busbw: nccl-tests %s, nccl-bench %s\n" "$op" \
    "$(awk -F: '/Avg bus bandwidth/ {gsub(/ /, "", $2); print $2}' "$OUT/nccl-tests-$op.txt")" \
    "$(awk -F: '/Avg bus bandwidth/ {gsub(/ /, "", $2); print $2}' "$OUT/nccl-bench-$op.txt")"
done | tee -a "$OUT/ratios.txt"
