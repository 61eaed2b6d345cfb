#!/usr/bin/env bash
# On a GPU machine: nccl-bench against nccl-tests in nccl-tests' four launch
# modes, plain, -G (operations launched from a CUDA graph), -R 2 (symmetric
# windows, NCCL's symmetric kernels) and -R 2 -G, judged by alternating runs.
# MODES may add cpu: plain with -C 1 in both programs, so that the tables
# compare the host's time of the launches (nccl-tests' cputime), which tells
# whether a plain loop is bound by the host.
#
# For each mode and operation the two programs run REPS times each, in turn,
# the one that goes first swapping every round (so that neither always runs on
# a machine the other just warmed). Each run sweeps SIZES. The summary gives,
# per size: each program's minimum and median out-of-place time over the runs,
# the difference of the medians and of the minima, the ratio of median busbw,
# and the spread of each program's runs (max - min), from which one can tell
# whether a 0.5 us difference is resolved: the medians of REPS runs differ by
# noise of about spread/sqrt(REPS). Under each table, every run's time at the
# first size in run order: the runs of a plain loop driving several GPUs fall
# on one of two host floors, decided per process, which medians mix.
#
# Binaries come from `scripts/gpu-check.sh build`; nccl-tests' sources from
# ../shared/gpu/prepare.sh (built here by .gpu/build-nccl-tests.sh).
#
#   REPS=5 OPS="all_reduce sendrecv" CPUS=0-3 scripts/bench-modes.sh [OUT]
#   MODES="plain graph" SIZES="-b 8 -e 8" ITERS="-n 2000 -w 1000" scripts/bench-modes.sh
#   NP=4 OPS=all_reduce scripts/bench-modes.sh    # one process per GPU: both under mpirun
#   GPUS="-t 4 -g 1" OPS=all_reduce scripts/bench-modes.sh   # one process, a thread per GPU (both programs' -t)
#   SUMMARY=only REPS=2 OPS=... MODES=... scripts/bench-modes.sh OUT   # the tables again from OUT/runs
#
# Rows pair by element count: alltoallv's sizes differ in the two programs'
# tables (nccl-tests prints the bytes its uneven split moves), and the size
# shown is nccl-bench's.
#
# With NP, each program runs as NP processes of one GPU each under the same
# mpirun: nccl-tests' MPI build (scripts/build-nccl-tests-mpi.sh), nccl-bench
# sharing NCCL's id through NCCL_COMM_ID; GPUS is then ignored.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-${OUT:-/tmp/gonccl-modes}}
mkdir -p "$OUT/runs"
REPS=${REPS:-5}
OPS=${OPS:-"all_reduce sendrecv"}
MODES=${MODES:-"plain graph sym symgraph"}
SIZES=${SIZES:-"-b 8 -e 1G -f 4"}
ITERS=${ITERS:-"-n 40 -w 10"}
GRAPH=${GRAPH:-10} # graph launches per size with -G
GPUS=${GPUS:-"-g 2"}
SUMMARY=${SUMMARY:-}
if [ "$SUMMARY" != only ]; then
  T=${T:-$(bash .gpu/build-nccl-tests.sh)} || { echo "nccl-tests did not build"; exit 1; }
fi
B=.gpu/bin/nccl-bench
PIN=()
[ -n "${CPUS:-}" ] && PIN=(taskset -c "$CPUS")
TESTS=() BENCH=()
if [ -n "${NP:-}" ] && [ "$SUMMARY" != only ]; then
  TM=${TM:-$(bash scripts/build-nccl-tests-mpi.sh)} || { echo "nccl-tests with MPI did not build"; exit 1; }
  T=$TM GPUS="-g 1"
  MPIRUN=(mpirun --allow-run-as-root -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH)
  TESTS=("${MPIRUN[@]}")
fi
# bench_launcher: the mpirun of one nccl-bench job, its id at a fresh port.
bench_launcher() {
  [ -n "${NP:-}" ] && BENCH=("${MPIRUN[@]}" -x NCCL_COMM_ID=127.0.0.1:$((29500 + RANDOM % 400)))
}

flags() {
  case $1 in
  plain) echo "" ;;
  graph) echo "-G $GRAPH" ;;
  sym) echo "-R 2" ;;
  symgraph) echo "-R 2 -G $GRAPH" ;;
  cpu) echo "-C 1" ;; # plain, the time columns the host's time of the launches (cputime)
  *) echo "unknown mode $1" >&2; return 1 ;;
  esac
}

for mode in $MODES; do
  [ "$SUMMARY" = only ] && break
  mf=$(flags "$mode") || exit 2
  for op in $OPS; do
    for rep in $(seq "$REPS"); do
      # shellcheck disable=SC2086
      run_tests() { timeout 300 "${PIN[@]}" "${TESTS[@]}" "$T/${op}_perf" $SIZES $ITERS $GPUS -c 0 $mf >"$OUT/runs/$mode-$op-tests-$rep.txt" 2>&1; }
      # shellcheck disable=SC2086
      run_bench() { bench_launcher; timeout 300 "${PIN[@]}" "${BENCH[@]}" $B -op "$op" $SIZES $ITERS $GPUS -c 0 $mf >"$OUT/runs/$mode-$op-bench-$rep.txt" 2>&1; }
      if [ $((rep % 2)) -eq 1 ]; then run_tests; run_bench; else run_bench; run_tests; fi
    done
  done
done

# summary: one table per mode and operation
LAYOUT=$GPUS
[ -n "${NP:-}" ] && LAYOUT="$NP processes under mpirun"
for mode in $MODES; do
  for op in $OPS; do
    echo "## $mode ($(flags "$mode")) $op, $LAYOUT, $REPS alternating runs each, out of place"
    [ "$mode" = cpu ] && echo "Times are cputime (the host's time of the launches per operation); the ratio column is nccl-tests' cputime over nccl-bench's."
    echo "| size (B) | nccl-tests min / median us | nccl-bench min / median us | diff of medians | diff of minima | busbw ratio (medians) | spread tests / bench |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    for f in "$OUT/runs/$mode-$op"-tests-*.txt; do awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print "T", $2, $6 }' "$f"; done >"$OUT/t.tmp"
    for f in "$OUT/runs/$mode-$op"-bench-*.txt; do awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print "B", $2, $6, $1 }' "$f"; done >>"$OUT/t.tmp"
    # busbw is size/time times a constant of the operation: the ratio of the
    # median busbw is the inverse ratio of the median times.
    sort -k2,2n -k1,1 -k3,3g "$OUT/t.tmp" | awk '
      function med(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
      function flush() {
        if (cur != "" && nt && nb)
          printf "| %s | %.2f / %.2f | %.2f / %.2f | %+.2f | %+.2f | %.3f | %.2f / %.2f |\n", size, tt[1], med(tt, nt), bt[1], med(bt, nb),
            med(bt, nb) - med(tt, nt), bt[1] - tt[1], med(tt, nt) / med(bt, nb), tt[nt] - tt[1], bt[nb] - bt[1]
        split("", tt); split("", bt); nt = nb = 0
      }
      { if ($2 != cur) { flush(); cur = $2 }
        if ($1 == "T") tt[++nt] = $3; else { bt[++nb] = $3; size = $4 } }
      END { flush() }'
    rm -f "$OUT/t.tmp"
    # Each run's time at the first size, in run order: a plain loop's runs fall
    # on one of two host floors (docs/performance.md), which the median hides.
    for prog in tests bench; do
      line=""
      for rep in $(seq "$REPS"); do
        t=$(awk '$1 ~ /^[0-9]+$/ && $1 > 0 && NF >= 8 { print $6; exit }' "$OUT/runs/$mode-$op-$prog-$rep.txt" 2>/dev/null)
        line="$line ${t:-X}"
      done
      printf '%s' "$([ $prog = tests ] && echo "Each run at the first size, in run order: nccl-tests$line;" || echo " nccl-bench$line")"
    done
    echo
    echo
  done
done | tee "$OUT/modes.md"
