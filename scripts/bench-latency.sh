#!/usr/bin/env bash
# On a GPU machine: small-message times of nccl-bench and nccl-tests, the two
# programs alternating REPS times with the same CPUs (taskset to CPUS, by
# default the first four CPUs local to GPU 0), one process driving -g 2 GPUs.
# Small operations are bound by the host and the scheduler, and single runs
# of either program move by several µs (bimodally) from one run to the next:
# medians of alternating runs on pinned CPUs are what can be compared.
#
#   - lat: 8 bytes, 2000 iterations after WARM (1000) warm-up ones: all_reduce,
#     sendrecv, broadcast;
#   - small: every operation from 8 B to 1 MiB (-f 4), 200 iterations;
#   - mp: the 8-byte runs with one process per GPU under mpirun, nccl-tests'
#     MPI build (scripts/build-nccl-tests-mpi.sh) against nccl-bench.
#
# Binaries come from `scripts/gpu-check.sh build`; nccl-tests' sources from
# ../shared/gpu/prepare.sh.   REPS=7 CPUS=0-3 WHAT="lat small" scripts/bench-latency.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-${OUT:-/tmp/gonccl-latency}}
mkdir -p "$OUT"
REPS=${REPS:-7}
WHAT=${WHAT:-"lat small mp"} # which of the parts below
WARM=${WARM:-1000}
SMALL_REPS=${SMALL_REPS:-$REPS}
OPS=${OPS:-"all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv alltoallv"}
T=$(bash .gpu/build-nccl-tests.sh) || { echo "nccl-tests did not build"; exit 1; }
B=.gpu/bin/nccl-bench
if [ -z "${CPUS:-}" ]; then
  bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | tr 'A-F' 'a-f')
  list=$(cat "/sys/bus/pci/devices/${bus: -12}/local_cpulist" 2>/dev/null || echo 0-3)
  first=${list%%[-,]*}
  CPUS=$first-$((first + 3))
fi
echo "CPUs: $CPUS (GPU 0 local: ${list:-given})" | tee "$OUT/latency.txt"
PIN=(taskset -c "$CPUS")

# med FILE SIZE: median (min-max) of the out-of-place time of SIZE in FILE.
med() { awk -v s="$2" '$1 == s {print $6}' "$1" | sort -g |
  awk '{ v[NR] = $1 } END { if (NR) printf "%.2f %.2f %.2f %d", v[int((NR + 1) / 2)], v[1], v[NR], NR }'; }

LAT_OPS="all_reduce sendrecv broadcast"
SMALL_OPS=$OPS
case " $WHAT " in *" lat "*) ;; *) LAT_OPS= ;; esac
case " $WHAT " in *" small "*) ;; *) SMALL_OPS= ;; esac
MP_OPS="all_reduce sendrecv broadcast"
case " $WHAT " in *" mp "*) ;; *) MP_OPS= ;; esac
if [ -n "$MP_OPS" ]; then
  TM=$(bash scripts/build-nccl-tests-mpi.sh) || MP_OPS=
fi
for op in $LAT_OPS; do
  : >"$OUT/lat-tests-$op.txt"
  : >"$OUT/lat-bench-$op.txt"
  for _ in $(seq "$REPS"); do
    timeout 60 "${PIN[@]}" "$T/${op}_perf" -b 8 -e 8 -g 2 -n 2000 -w "$WARM" -c 0 >>"$OUT/lat-tests-$op.txt" 2>&1
    timeout 60 "${PIN[@]}" $B -op "$op" -b 8 -e 8 -g 2 -n 2000 -w "$WARM" -c 0 >>"$OUT/lat-bench-$op.txt" 2>&1
  done
done
for op in $SMALL_OPS; do
  : >"$OUT/small-tests-$op.txt"
  : >"$OUT/small-bench-$op.txt"
  for _ in $(seq "$SMALL_REPS"); do
    timeout 60 "${PIN[@]}" "$T/${op}_perf" -b 8 -e 1M -f 4 -g 2 -n 200 -w 5 -c 0 >>"$OUT/small-tests-$op.txt" 2>&1
    timeout 60 "${PIN[@]}" $B -op "$op" -b 8 -e 1M -f 4 -g 2 -n 200 -w 5 -c 0 >>"$OUT/small-bench-$op.txt" 2>&1
  done
done
port=$((29500 + RANDOM % 400))
for op in $MP_OPS; do
  : >"$OUT/mp-tests-$op.txt"
  : >"$OUT/mp-bench-$op.txt"
  for _ in $(seq "$REPS"); do
    timeout 60 mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
      "$TM/${op}_perf" -b 8 -e 8 -g 1 -n 2000 -w "$WARM" -c 0 >>"$OUT/mp-tests-$op.txt" 2>&1
    port=$((port + 1))
    timeout 60 mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x NCCL_COMM_ID=127.0.0.1:$port \
      $B -op "$op" -b 8 -e 8 -g 1 -n 2000 -w "$WARM" -c 0 >>"$OUT/mp-bench-$op.txt" 2>&1
  done
done
# row LABEL TESTS BENCH: one line of medians for the 8-byte runs.
row() {
  read -r tm tl th tn <<<"$(med "$2" 8)"
  read -r bm bl bh bn <<<"$(med "$3" 8)"
  printf "  %-11s nccl-tests %6s (%s-%s, %s runs)  nccl-bench %6s (%s-%s, %s runs)  diff %+.2f, of minima %+.2f\n" \
    "$1" "$tm" "$tl" "$th" "$tn" "$bm" "$bl" "$bh" "$bn" "$(awk -v a="$bm" -v b="$tm" 'BEGIN { print a - b }')" \
    "$(awk -v a="$bl" -v b="$tl" 'BEGIN { print a - b }')"
}
{
  [ -n "$MP_OPS" ] && echo "8-byte latency, one process per GPU under mpirun, $REPS alternating runs of 2000 iterations, µs: median (min-max)"
  for op in $MP_OPS; do row "$op" "$OUT/mp-tests-$op.txt" "$OUT/mp-bench-$op.txt"; done
  [ -n "$LAT_OPS" ] && echo "8-byte latency, one process driving 2 GPUs, $REPS alternating runs of 2000 iterations, µs: median (min-max)"
  for op in $LAT_OPS; do row "$op" "$OUT/lat-tests-$op.txt" "$OUT/lat-bench-$op.txt"; done
  echo
  [ -n "$SMALL_OPS" ] && echo "8 B to 1 MiB, $SMALL_REPS alternating runs of 200 iterations, median out-of-place µs per size"
  [ -n "$SMALL_OPS" ] && printf "  %-15s %10s %10s %10s %8s\n" op size "tests us" "bench us" "diff us"
  for op in $SMALL_OPS; do
    for s in $(awk '$1 ~ /^[0-9]+$/ {print $1}' "$OUT/small-tests-$op.txt" | sort -nu); do
      read -r tm _ <<<"$(med "$OUT/small-tests-$op.txt" "$s")"
      read -r bm _ <<<"$(med "$OUT/small-bench-$op.txt" "$s")"
      [ -n "$tm" ] && [ -n "$bm" ] && printf "  %-15s %10d %10s %10s %+8.2f\n" "$op" "$s" "$tm" "$bm" "$(awk -v a="$bm" -v b="$tm" 'BEGIN { print a - b }')"
    done
  done
} | tee -a "$OUT/latency.txt"
