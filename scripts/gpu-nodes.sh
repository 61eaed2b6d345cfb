#!/usr/bin/env bash
# Two nodes emulated on one GPU machine, under the real mpirun and torchrun:
# each node (a host of mpirun's --host, started through
# scripts/emulated-host-rsh.sh, or a torchrun agent) has its own half of the
# GPUs (CUDA_VISIBLE_DEVICES) and its own NCCL_HOSTID, so NCCL counts two nodes (nNodes 2) and connects them
# through its network transport (NET/Socket where the machine has no IB), as
# across real hosts; the agents meet on the loopback. Binaries come from
# `scripts/gpu-check.sh build`:
#
#   scripts/gpu-nodes.sh run [OUT]
#
# Under mpirun (NCCL_COMM_ID) and each torchrun rendezvous (static
# --master-addr, and c10d) it runs examples/allreduce
# and examples/dataparallel (every element checked by each rank) and nccl-bench
# -c 1 -d uint8 (every byte checked), and requires NCCL's log to say nNodes 2
# and NET/. TORCH_VENV (default /opt/torch/.venv) holds torchrun;
# GONCCL_NCCL_LIB picks the library. NCCL_NVLS_ENABLE=0 always.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
[ "${1:-}" = run ] || { echo "usage: scripts/gpu-nodes.sh run [OUT]" >&2; exit 2; }
OUT=${2:-/tmp/gonccl-nodes}
mkdir -p "$OUT/logs"
TR=${TORCH_VENV:-/opt/torch/.venv}/bin/torchrun
E=.gpu/bin/examples
GPUS=$(nvidia-smi -L | grep -c '^GPU')
PER=$((GPUS / 2))
[ "$PER" -ge 1 ] || { echo "gpu-nodes: $GPUS GPU(s); two nodes need at least 2" >&2; exit 1; }
summary=$OUT/summary.txt
: >"$summary"
{ date -u; nvidia-smi -L; echo "2 nodes × $PER GPU(s), $("$TR" --help >/dev/null 2>&1 && echo torchrun ok)"; } >>"$summary"
fails=0
port=$((29700 + RANDOM % 200))

# devs K: node K's GPUs.
devs() { seq -s, $(($1 * PER)) $(($1 * PER + PER - 1)); }

# two LABEL RDZV WANT CMD...: both agents, each a node of PER ranks; WANT is a
# line every rank prints (counted), or "" where the exit code decides.
two() {
  local label=$1 rdzv=$2 want=$3
  shift 3
  local pids=() k args
  port=$((port + 1))
  for k in 0 1; do
    if [ "$rdzv" = static ]; then
      args=(--nnodes 2 --node-rank "$k" --master-addr 127.0.0.1 --master-port "$port")
    else
      args=(--nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "gonccl-$port")
    fi
    CUDA_VISIBLE_DEVICES=$(devs "$k") NCCL_HOSTID="gonccl-node$k" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
      NCCL_DEBUG_FILE="$OUT/logs/$label-node$k.%p.nccl" \
      timeout 180 "$TR" "${args[@]}" --nproc-per-node "$PER" --no-python "$@" >"$OUT/logs/$label-node$k.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for k in 0 1; do wait "${pids[$k]}" || rc=$?; done
  # NCCL's own log goes to files: a process that exits through os.Exit may
  # leave its last stdout lines in C's buffer.
  local logs=("$OUT/logs/$label-node0.log" "$OUT/logs/$label-node1.log" "$OUT/logs/$label"-node*.nccl)
  local nodes net said=0
  nodes=$(cat "${logs[@]}" 2>/dev/null | grep -c 'nNodes 2')
  net=$(cat "${logs[@]}" 2>/dev/null | grep -o 'via NET/[A-Za-z]*' | sort -u | tr '\n' ' ')
  [ -n "$want" ] && said=$(cat "${logs[0]}" "${logs[1]}" | grep -c -E -- "$want")
  if [ "$rc" -eq 0 ] && [ "$nodes" -gt 0 ] && [ -n "$net" ] && { [ -z "$want" ] || [ "$said" -eq $((2 * PER)) ]; }; then
    echo "ok    $label: 2 nodes × $PER, nNodes 2, $net${want:+, $said ranks checked}" | tee -a "$summary"
  else
    echo "FAIL  $label: exit $rc, nNodes 2 seen $nodes times, '${net}', $said of $((2 * PER)) ranks said \"$want\"" | tee -a "$summary"
    fails=$((fails + 1))
  fi
}

# mpirun across two hosts emulated here (scripts/emulated-host-rsh.sh): each
# host's ranks get its GPUs and its NCCL_HOSTID. "--mca plm rsh": machines may set
# OMPI_MCA_plm=isolated, which starts nothing on other hosts; "--mca rtc ^hwloc": two
# daemons of one machine can crash writing hwloc's shared topology.
mpi() {
  local label=$1 want=$2
  shift 2
  port=$((port + 1))
  local logs=("$OUT/logs/$label.log") rc=0 nodes net said=0
  rm -f "$OUT/logs/$label".*.nccl
  DEVS_nodeA=$(devs 0) DEVS_nodeB=$(devs 1) timeout 180 mpirun --allow-run-as-root --oversubscribe \
    --host "nodeA:$PER,nodeB:$PER" --mca plm rsh --mca rtc ^hwloc --mca plm_rsh_agent "$PWD/scripts/emulated-host-rsh.sh" -np $((2 * PER)) \
    -x NCCL_NVLS_ENABLE -x GONCCL_NCCL_LIB -x NCCL_COMM_ID="127.0.0.1:$port" -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET \
    -x NCCL_DEBUG_FILE="$OUT/logs/$label.%p.nccl" "$@" >"${logs[0]}" 2>&1 || rc=$?
  nodes=$(cat "${logs[0]}" "$OUT/logs/$label".*.nccl 2>/dev/null | grep -c 'nNodes 2')
  net=$(cat "${logs[0]}" "$OUT/logs/$label".*.nccl 2>/dev/null | grep -o 'via NET/[A-Za-z]*' | sort -u | tr '\n' ' ')
  [ -n "$want" ] && said=$(grep -c -E -- "$want" "${logs[0]}")
  if [ "$rc" -eq 0 ] && [ "$nodes" -gt 0 ] && [ -n "$net" ] && { [ -z "$want" ] || [ "$said" -eq $((2 * PER)) ]; }; then
    echo "ok    $label: 2 hosts × $PER, nNodes 2, $net${want:+, $said ranks checked}" | tee -a "$summary"
  else
    echo "FAIL  $label: exit $rc, nNodes 2 seen $nodes times, '${net}', $said of $((2 * PER)) ranks said \"$want\"" | tee -a "$summary"
    fails=$((fails + 1))
  fi
}
export GONCCL_NCCL_LIB=${GONCCL_NCCL_LIB:-}
mpi allreduce-mpirun 'floats correct' $E/allreduce -timeout 60s
mpi dataparallel-mpirun 'weights identical on every rank' $E/dataparallel -timeout 60s
mpi nccl-bench-mpirun "" .gpu/bin/nccl-bench -op all_reduce -d uint8 -c 1 -b 8 -e 64M -f 8 -n 20 -w 5

for rdzv in static c10d; do
  two "allreduce-$rdzv" "$rdzv" 'floats correct' $E/allreduce -timeout 60s
  two "dataparallel-$rdzv" "$rdzv" 'weights identical on every rank' $E/dataparallel -timeout 60s
  two "nccl-bench-$rdzv" "$rdzv" "" .gpu/bin/nccl-bench -op all_reduce -d uint8 -c 1 -b 8 -e 64M -f 8 -n 20 -w 5
done
grep -E '^ +[0-9]+ +[0-9]+ +uint8 ' "$OUT/logs/nccl-bench-static-node0.log" >>"$summary"
echo "gpu-nodes: $fails failed" | tee -a "$summary"
[ "$fails" -eq 0 ]
