#!/usr/bin/env bash
# On a GPU machine: nccl-bench with one process per GPU, in each way a job is
# started, and against nccl-tests built with MPI under the same mpirun.
#
#   1. correctness of every operation in every launch form, bytes checked
#      (-d uint8 -c 1): self-launched (-np), under mpirun (NCCL_COMM_ID, and
#      the id through a file), and with torchrun's variables (RANK, WORLD_SIZE,
#      LOCAL_RANK, MASTER_ADDR, MASTER_PORT) set by hand;
#   2. busbw of nccl-bench under mpirun against nccl-tests' MPI build under the
#      same mpirun, same arguments, one after the other, with a ratio table;
#   3. with VCCL_LIB (a folder with a VCCL build): VCCL's native ncclAlltoAllv,
#      one process per GPU, beside the grouped form.
#
# Binaries come from `scripts/gpu-check.sh build` (.gpu/bin/nccl-bench);
# nccl-tests' sources from ../shared/gpu/prepare.sh (.gpu/nccl-tests).
#   NP=2 ARGS="-b 8 -e 1G -f 4 -n 100 -w 5 -c 0" scripts/bench-multiprocess.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-${OUT:-/tmp/gonccl-mp}}
mkdir -p "$OUT"
NP=${NP:-2}
ARGS=${ARGS:-"-b 8 -e 1G -f 4 -n 100 -w 5 -c 0"}
OPS=${OPS:-"all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv alltoallv"}
B=${B:-.gpu/bin/nccl-bench}
MPIRUN=(mpirun --allow-run-as-root -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH)
port=$((29500 + RANDOM % 400))
summary="$OUT/summary.txt"
: >"$summary"

# wrong LOG: the #wrong columns of every row, summed; fails where no row was
# checked or one was wrong.
wrong() { awk -f scripts/bench-wrong.awk "$1"; }
# form LABEL LOG CMD...: run one correctness check and summarise it.
form() {
  local label=$1 log=$2; shift 2
  echo "\$ $*" >"$log"
  if timeout 120 "$@" >>"$log" 2>&1 && r=$(wrong "$log"); then
    printf "  %-10s %-15s ok    %s\n" "$label" "$op" "$r" | tee -a "$summary"
  else
    printf "  %-10s %-15s FAIL  (see %s)\n" "$label" "$op" "$(basename "$log")" | tee -a "$summary"
  fi
}

echo "== launch forms, $NP processes, one GPU each, -d uint8 -c 1" | tee -a "$summary"
CHECK="-d uint8 -c 1 -b 8 -e 16M -f 32 -n 5"
for op in $OPS; do
  # shellcheck disable=SC2086
  form self "$OUT/check-self-$op.txt" $B -np "$NP" -op "$op" $CHECK
  port=$((port + 1))
  # shellcheck disable=SC2086
  form mpirun "$OUT/check-mpirun-$op.txt" "${MPIRUN[@]}" -x NCCL_COMM_ID=127.0.0.1:$port $B -op "$op" $CHECK
done
op=all_reduce
rm -f "/tmp/gonccl-mp-id.$$"
# shellcheck disable=SC2086
form idfile "$OUT/check-idfile-$op.txt" "${MPIRUN[@]}" $B -op "$op" $CHECK -idfile "/tmp/gonccl-mp-id.$$"
port=$((port + 1))
# torchrun's variables, set by hand: ranks 1… in the background, rank 0 in front.
env="MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$NP"
torch="for r in \$(seq 1 $((NP - 1))); do $env RANK=\$r LOCAL_RANK=\$r $B -op $op $CHECK >/dev/null 2>&1 & done
$env RANK=0 LOCAL_RANK=0 $B -op $op $CHECK; rc=\$?
for p in \$(jobs -p); do wait \$p || rc=1; done; exit \$rc"
form torchrun "$OUT/check-torchrun-$op.txt" bash -c "$torch"

echo "== nccl-bench under mpirun against nccl-tests (MPI build) under mpirun: $ARGS" | tee -a "$summary"
TM=$(bash scripts/build-nccl-tests-mpi.sh 2>"$OUT/nccl-tests-mpi-build.log") ||
  { TM=; echo "  nccl-tests with MPI not built: $(tail -1 "$OUT/nccl-tests-mpi-build.log")" | tee -a "$summary"; }
for op in $OPS; do
  if [ -n "$TM" ]; then
    # shellcheck disable=SC2086
    timeout 180 "${MPIRUN[@]}" "$TM/${op}_perf" $ARGS -g 1 >"$OUT/mp-nccl-tests-$op.txt" 2>&1
  fi
  port=$((port + 1))
  # shellcheck disable=SC2086
  timeout 180 "${MPIRUN[@]}" -x NCCL_COMM_ID=127.0.0.1:$port $B -op "$op" $ARGS -g 1 >"$OUT/mp-nccl-bench-$op.txt" 2>&1
done
# shellcheck disable=SC2086
scripts/ratio-table.sh "$OUT/mp-nccl-tests-%s.txt" "$OUT/mp-nccl-bench-%s.txt" $OPS | tee "$OUT/mp-ratios.txt"
avg() { awk -F: '/Avg bus bandwidth/ {gsub(/ /, "", $2); print $2}' "$1" 2>/dev/null; }
for op in $OPS; do
  printf "  %-15s avg busbw: nccl-tests %s, nccl-bench %s\n" "$op" "$(avg "$OUT/mp-nccl-tests-$op.txt")" "$(avg "$OUT/mp-nccl-bench-$op.txt")"
done | tee -a "$summary"

if [ -n "${VCCL_LIB:-}" ]; then
  echo "== VCCL ($VCCL_LIB): alltoallv, one process per GPU, native and grouped: $ARGS" | tee -a "$summary"
  for form in native grouped; do
    flag=; [ $form = grouped ] && flag=-grouped
    port=$((port + 1))
    # shellcheck disable=SC2086
    timeout 180 "${MPIRUN[@]}" -x NCCL_COMM_ID=127.0.0.1:$port -x GONCCL_NCCL_LIB="$VCCL_LIB" $B -op alltoallv $flag $ARGS -g 1 \
      >"$OUT/mp-vccl-$form-alltoallv.txt" 2>&1
    printf "  %-8s exit %s, avg busbw %s\n" "$form" "$?" "$(avg "$OUT/mp-vccl-$form-alltoallv.txt")" | tee -a "$summary"
  done
  port=$((port + 1))
  op=alltoallv
  # shellcheck disable=SC2086
  form vccl "$OUT/check-vccl-native.txt" "${MPIRUN[@]}" -x NCCL_COMM_ID=127.0.0.1:$port -x GONCCL_NCCL_LIB="$VCCL_LIB" $B -op alltoallv $CHECK
fi
cat "$summary"
