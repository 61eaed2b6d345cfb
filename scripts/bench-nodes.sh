#!/usr/bin/env bash
# On a GPU machine: bandwidth across two nodes emulated on it, nccl-bench
# against nccl-tests' MPI build under the same mpirun. Each emulated host
# (scripts/emulated-host-rsh.sh) has half the GPUs and its own NCCL_HOSTID,
# so NCCL counts two nodes and joins them through its network transport:
# NET/Socket on a machine without InfiniBand, the loopback's speed, not a
# fabric's. ROUNDS rounds, the two programs in turn, the first swapping each
# round; per size the median busbw of each and their ratio. Binaries from
# `scripts/gpu-check.sh build`; nccl-tests' sources from ../shared/gpu/prepare.sh
# (built by scripts/build-nccl-tests-mpi.sh).
#
#   ROUNDS=3 OPS="all_reduce sendrecv" scripts/bench-nodes.sh [OUT]
#
# OUT/runs keeps every run's output (for `go run ./cmd/nccl-results import`),
# OUT/nodes.md the summary. The runs must show nNodes 2 and NET/ in NCCL's log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-/tmp/gonccl-bench-nodes}
mkdir -p "$OUT/runs" "$OUT/logs"
ROUNDS=${ROUNDS:-3}
OPS=${OPS:-"all_reduce"}
SIZES=${SIZES:-"-b 1M -e 256M -f 4"}
ITERS=${ITERS:-"-n 20 -w 5"}
B=${B:-.gpu/bin/nccl-bench}
TM=${TM:-$(bash scripts/build-nccl-tests-mpi.sh)} || { echo "nccl-tests with MPI did not build"; exit 1; }
GPUS=$(nvidia-smi -L | grep -c '^GPU')
PER=$((GPUS / 2))
[ "$PER" -ge 1 ] || { echo "bench-nodes: $GPUS GPU(s); two nodes need at least 2" >&2; exit 1; }
devs() { seq -s, $(($1 * PER)) $(($1 * PER + PER - 1)); }
port=$((29900 + RANDOM % 90))
# across LOG CMD...: CMD as 2 × PER ranks over the two emulated hosts, each
# host's ranks on its GPUs; with ALLGPUS=1 every rank sees every GPU:
# nccl-tests picks its GPU by its rank among the processes of its hostname,
# which both emulated hosts share, so node B's ranks take GPUs PER and up.
across() {
  local log=$1 name
  name=$(basename "$log" .txt)
  shift
  port=$((port + 1))
  local da db
  [ "${ALLGPUS:-0}" = 1 ] || { da=$(devs 0) db=$(devs 1); }
  DEVS_nodeA=${da:-} DEVS_nodeB=${db:-} timeout 600 mpirun --allow-run-as-root --oversubscribe \
    --host "nodeA:$PER,nodeB:$PER" --mca plm rsh --mca rtc ^hwloc --mca plm_rsh_agent "$PWD/scripts/emulated-host-rsh.sh" \
    -np $((2 * PER)) -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x NCCL_COMM_ID="127.0.0.1:$port" \
    -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET -x NCCL_DEBUG_FILE="$OUT/logs/$name.%p.nccl" \
    "$@" >"$log" 2>&1 || echo "bench-nodes: $name failed"
}
for op in $OPS; do
  for round in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    run_tests() { ALLGPUS=1 across "$OUT/runs/$op-tests-$round.txt" "$TM/${op}_perf" $SIZES $ITERS -c 1; }
    # shellcheck disable=SC2086
    run_bench() { across "$OUT/runs/$op-bench-$round.txt" "$B" -op "$op" $SIZES $ITERS -c 1; }
    if [ $((round % 2)) -eq 1 ]; then run_tests; run_bench; else run_bench; run_tests; fi
  done
done
nodes=$(cat "$OUT"/logs/*.nccl 2>/dev/null | grep -c 'nNodes 2')
net=$(cat "$OUT"/logs/*.nccl 2>/dev/null | grep -o 'via NET/[A-Za-z]*' | sort -u | tr '\n' ' ')
{
  echo "## busbw across two emulated nodes ($PER GPU(s) each, ${net:-no NET transport seen}; nNodes 2 in $nodes logs), $ROUNDS rounds"
  for op in $OPS; do
    echo
    echo "| $op size (B) | nccl-tests busbw (GB/s, median) | nccl-bench | ratio | wrong (tests / bench) |"
    echo "|---:|---:|---:|---:|---:|"
    for f in "$OUT/runs/$op"-tests-*.txt; do awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print "T", $1, $8, $9 }' "$f"; done >"$OUT/t.tmp"
    for f in "$OUT/runs/$op"-bench-*.txt; do awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print "B", $1, $8, $9 }' "$f"; done >>"$OUT/t.tmp"
    sort -k2,2n -k1,1 -k3,3g "$OUT/t.tmp" | awk '
      function med(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
      function flush() {
        if (cur != "" && nt && nb) printf "| %s | %.2f | %.2f | %.3f | %d / %d |\n", cur, med(tt, nt), med(bt, nb), med(bt, nb) / med(tt, nt), wt, wb
        split("", tt); split("", bt); nt = nb = wt = wb = 0
      }
      { if ($2 != cur) { flush(); cur = $2 }
        if ($1 == "T") { tt[++nt] = $3; wt += ($4 == "N/A" ? 0 : $4) } else { bt[++nb] = $3; wb += ($4 == "N/A" ? 0 : $4) } }
      END { flush() }'
    rm -f "$OUT/t.tmp"
  done
} | tee "$OUT/nodes.md"
