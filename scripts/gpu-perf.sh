#!/usr/bin/env bash
# The performance measurements of one machine of N GPUs (every GPU
# nvidia-smi lists, or N; 4 or 8), phase by phase, each phase's summary
# written to OUT as soon as it ends (a job cut short still brings back the
# phases done):
#
#   modes-g      all_reduce, one process driving N GPUs: plain, -G, -R 2, -R 2 -G and
#                cpu (plain with -C 1: the host's time of the launches), nccl-bench
#                against nccl-tests in alternating runs (scripts/bench-modes.sh)
#   modes-np     the same, one process per GPU under mpirun (nccl-tests' MPI build)
#   ops-g        every other operation, plain and -G (OPS_MODES), N GPUs in one process
#   ops-np       the same, one process per GPU (not in the default phases)
#   floors       where the 8-byte floors come from, N GPUs (scripts/bench-floors.sh)
#   nonblocking  examples/captured -np N, blocking (the default), -nonblocking and
#                -symmetric (the documented fast path: a graph over symmetric
#                buffers): µs per plainly launched and per graph-launched all-reduce
#   vccl         VCCL's native ncclAlltoAllv against grouped send/recv, -g N and -np N,
#                busbw, then every byte checked
#   modes-g2     all_reduce modes on GPUs 0,1, one process
#   modes-np2    the same, one process per GPU
#
#   scripts/gpu-perf.sh OUT                          # every phase, in that order
#   PHASES="modes-g floors" REPS=3 N=4 scripts/gpu-perf.sh OUT
#
# T and TM name nccl-tests' folders of binaries (plain and MPI) already built;
# SIZES (the modes phases) and OPS_SIZES (ops-g) replace the size sweeps;
# MODES replaces the modes phases' modes (plain graph sym symgraph cpu).
#
# Binaries from `scripts/gpu-check.sh build`; nccl-tests from .gpu/nccl-tests
# and VCCL from .gpu/vccl, built here by .gpu/build-nccl-tests.sh,
# scripts/build-nccl-tests-mpi.sh and .gpu/build-vccl.sh (VCCL in the
# background: the vccl phase waits for it). NCCL_NVLS_ENABLE=0 always.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:?usage: $0 OUT}
mkdir -p "$OUT"
PHASES=${PHASES:-"modes-g modes-np ops-g floors nonblocking vccl modes-g2 modes-np2"}
N=${N:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
REPS=${REPS:-3}
progress="$OUT/progress.txt"
say() { echo "$(date -u +%T) $*" | tee -a "$progress"; }
{ date -u; nvidia-smi -L; } >"$OUT/machine.txt" 2>&1

vccl_build="$OUT/build-vccl.txt"
if [[ " $PHASES " == *" vccl "* ]]; then
  (bash .gpu/build-vccl.sh >"$vccl_build" 2>&1) &
fi
T=${T:-$(bash .gpu/build-nccl-tests.sh 2>"$OUT/build-nccl-tests.txt")} || { T=; say "nccl-tests did not build: the phases against it will say so"; }
TM=${TM:-}
if [[ " $PHASES " == *"-np"* && -z "$TM" ]]; then
  TM=$(bash scripts/build-nccl-tests-mpi.sh 2>"$OUT/build-nccl-tests-mpi.txt") || { TM=; say "nccl-tests with MPI did not build"; }
fi
export T TM
say "nccl-tests $T, with MPI ${TM:-none}"

# modes NAME ENV...: bench-modes.sh's all_reduce tables in OUT/NAME.md.
modes() {
  local name=$1
  shift
  env "$@" REPS="$REPS" OPS=all_reduce MODES="${MODES:-plain graph sym symgraph cpu}" bash scripts/bench-modes.sh "$OUT/$name" >"$OUT/$name.log" 2>&1
  cp "$OUT/$name/modes.md" "$OUT/$name.md" 2>/dev/null
}

for phase in $PHASES; do
  say "phase $phase"
  case $phase in
  modes-g) modes "modes-g$N" GPUS="-g $N" ;;
  modes-np) if [ -n "$TM" ]; then modes "modes-np$N" NP="$N"; else say "skipped: no nccl-tests with MPI"; fi ;;
  modes-g2) modes modes-g2 CUDA_VISIBLE_DEVICES=0,1 GPUS="-g 2" ;;
  modes-np2) if [ -n "$TM" ]; then modes modes-np2 CUDA_VISIBLE_DEVICES=0,1 NP=2; else say "skipped: no nccl-tests with MPI"; fi ;;
  ops-g | ops-np)
    if [ $phase = ops-np ] && [ -z "$TM" ]; then
      say "skipped: no nccl-tests with MPI"
      continue
    fi
    name=ops-g$N layout=(GPUS="-g $N")
    [ $phase = ops-np ] && name=ops-np$N layout=(NP="$N")
    env "${layout[@]}" REPS=2 MODES="${OPS_MODES:-plain graph}" SIZES="${OPS_SIZES:--b 8 -e 1G -f 8}" \
      OPS="all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv alltoallv" \
      bash scripts/bench-modes.sh "$OUT/$name" >"$OUT/$name.log" 2>&1
    cp "$OUT/$name/modes.md" "$OUT/$name.md" 2>/dev/null
    ;;
  floors)
    RUNS=5 ARGS="-b 8 -e 8 -g $N -n 2000 -w 1000 -c 0" bash scripts/bench-floors.sh "$OUT/floors" >"$OUT/floors.log" 2>&1
    cp "$OUT/floors/floors.txt" "$OUT/floors.txt" 2>/dev/null
    ;;
  nonblocking)
    for mode in "" "-nonblocking" "-symmetric"; do
      for rep in 1 2 3; do
        timeout 120 .gpu/bin/examples/captured -np "$N" $mode -timeout 60s 2>&1 | grep -m1 "rank 0/" |
          sed "s/^/captured -np $N ${mode:-(blocking)} run $rep: /" >>"$OUT/nonblocking.txt"
      done
    done
    ;;
  vccl)
    wait
    VC=$(tail -1 "$vccl_build")
    if [ ! -f "$VC/libnccl.so.2" ]; then
      say "VCCL did not build: $(tail -3 "$vccl_build" | tr '\n' ' ')"
      continue
    fi
    for layout in "-g $N" "-np $N"; do
      for form in "" "-grouped"; do
        f="$OUT/vccl/${layout// /}${form}.txt"
        mkdir -p "$OUT/vccl"
        # VCCL prints "RMA Work Batch" dumps, at times into the middle of a line of
        # the table: the table's rows are taken from wherever they start.
        GONCCL_NCCL_LIB=$VC timeout 300 .gpu/bin/nccl-bench -op alltoallv $layout $form -b 1K -e 1G -f 4 -n 40 -w 5 -c 0 2>&1 |
          grep -oE '^#.*|[0-9]+ +[0-9]+ +float +none +-?[0-9]+ .*' >"$f"
        GONCCL_NCCL_LIB=$VC timeout 300 .gpu/bin/nccl-bench -op alltoallv $layout $form -d uint8 -c 1 -b 8 -e 16M -f 32 -n 5 -w 1 >/tmp/gpu-perf-check.txt 2>&1
        echo "check ($layout $form, bytes): exit $? $(awk -f scripts/bench-wrong.awk /tmp/gpu-perf-check.txt)" >>"$f"
      done
    done
    ;;
  *) say "unknown phase $phase" ;;
  esac
done
say "end"
