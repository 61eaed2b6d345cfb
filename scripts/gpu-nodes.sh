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
# and NET/. Last, examples/nodeloss under the static rendezvous loses node 1
# (its agent and ranks killed mid-loop): node 0's ranks must report a typed
# error by their step's deadline + 1 s, then revoke, shrink to node 0 and go
# on checking (NCCL 2.28.7 and later) or say it is not supported (older).
# CASES=nodeloss runs the last alone. TORCH_VENV (default /opt/torch/.venv) holds torchrun;
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
if [ "${CASES:-all}" = all ]; then
mpi allreduce-mpirun 'floats correct' $E/allreduce -timeout 60s
mpi dataparallel-mpirun 'weights identical on every rank' $E/dataparallel -timeout 60s
mpi nccl-bench-mpirun "" .gpu/bin/nccl-bench -op all_reduce -d uint8 -c 1 -b 8 -e 64M -f 8 -n 20 -w 5

for rdzv in static c10d; do
  two "allreduce-$rdzv" "$rdzv" 'floats correct' $E/allreduce -timeout 60s
  two "dataparallel-$rdzv" "$rdzv" 'weights identical on every rank' $E/dataparallel -timeout 60s
  two "nccl-bench-$rdzv" "$rdzv" "" .gpu/bin/nccl-bench -op all_reduce -d uint8 -c 1 -b 8 -e 64M -f 8 -n 20 -w 5
done
fi
# A node dies mid-collective (examples/nodeloss -lost-node 1): two torchrun
# agents of a static rendezvous, each a node of PER ranks with its GPUs and
# NCCL_HOSTID as above. Once every rank loops, node 1's agent and ranks are
# killed with SIGKILL, as a crashed node's would be. Every rank of node 0 must
# report a typed error by its step's deadline + 1 s (over NCCL's socket
# transport a closed connection is ErrRemote at once), then, where the library
# has ncclCommRevoke (2.28.7 and later), revoke, shrink to node 0 and run 10
# checked steps; before 2.28.7 each must say that it is not supported.
#
# torchrun, not mpirun: mpirun ends the whole job when one of its ranks dies
# of a signal. A static rendezvous's agents do not watch each other, so node
# 0's agent goes on when node 1's dies. It would stop its own workers once one
# of them exits with an error, before the others have said theirs:
# --monitor-interval 60 keeps it from looking. When its workers are done it
# waits up to 300 s for node 1's agent at its exit barrier, so it is stopped
# here (TERM, then KILL: it takes TERM only between its store calls).
stop_agent() {
  kill "$1" 2>/dev/null
  for _ in $(seq 25); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.2
  done
  # shellcheck disable=SC2046 # the children's pids, one word each
  kill -9 $(ps -o pid= --ppid "$1") "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
# version_ge A B: version A is B or later.
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }
nodeloss() {
  local label=nodeloss-static st=5 k p agents=() victims killed lags="" bad="" failed=0 final=0 ms lag
  local log=("$OUT/logs/$label-node0.log" "$OUT/logs/$label-node1.log")
  port=$((port + 1))
  p=$port
  rm -f "$OUT/logs/$label"-node*.nccl
  if [ ! -x "$E/nodeloss" ]; then
    echo "FAIL  $label: no $E/nodeloss (scripts/gpu-check.sh build makes it)" | tee -a "$summary"
    fails=$((fails + 1))
    return
  fi
  for k in 0 1; do
    CUDA_VISIBLE_DEVICES=$(devs "$k") NCCL_HOSTID="gonccl-node$k" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
      NCCL_DEBUG_FILE="$OUT/logs/$label-node$k.%p.nccl" \
      "$TR" --nnodes 2 --node-rank "$k" --master-addr 127.0.0.1 --master-port "$p" --nproc-per-node "$PER" \
      --monitor-interval 60 --no-python "$E/nodeloss" -for 120s -step-timeout ${st}s -timeout 60s -lost-node 1 \
      >"${log[$k]}" 2>&1 &
    agents+=($!)
  done
  for _ in $(seq 600); do # 120 s
    [ "$(cat "${log[@]}" | grep -c 'looping for')" -ge $((2 * PER)) ] && break
    sleep 0.2
  done
  victims=$(sed -n 's/.*nodeloss: rank [0-9]*\/[0-9]* on node 1 (pid \([0-9]*\)).*/\1/p' "${log[@]}" | sort -u | tr '\n' ' ')
  if [ "$(echo "$victims" | wc -w)" -ne "$PER" ]; then
    echo "FAIL  $label: $(cat "${log[@]}" | grep -c 'looping for') of $((2 * PER)) ranks looping after 120 s" | tee -a "$summary"
    stop_agent "${agents[0]}"
    stop_agent "${agents[1]}"
    fails=$((fails + 1))
    return
  fi
  sleep 2 # well into the loop
  killed=$(date +%s%3N)
  # shellcheck disable=SC2086 # one pid a word
  kill -9 "${agents[1]}" $victims
  wait "${agents[1]}" 2>/dev/null
  for _ in $(seq $(((st + 90) * 5))); do
    failed=$(grep -c 'on node 0: step [0-9]* failed' "${log[0]}")
    final=$(grep -cE 'went on without node 1|nodeloss: rank [0-9]+: ' "${log[0]}")
    [ "$failed" -ge "$PER" ] && [ "$final" -ge "$PER" ] && break
    sleep 0.2
  done
  stop_agent "${agents[0]}"
  local nccl version nodes net kinds went notsup want
  nccl=("${log[@]}" "$OUT/logs/$label"-node*.nccl)
  nodes=$(cat "${nccl[@]}" 2>/dev/null | grep -c 'nNodes 2')
  net=$(cat "${nccl[@]}" 2>/dev/null | grep -o 'via NET/[A-Za-z]*' | sort -u | tr '\n' ' ' | sed 's/ $//')
  version=$(grep -m1 'looping for' "${log[0]}" | grep -o 'NCCL [0-9.]*[0-9]' | cut -d' ' -f2)
  for ms in $(sed -n 's/.*on node 0: step [0-9]* failed .*(unix ms \([0-9]*\)).*/\1/p' "${log[0]}"); do
    lag=$((ms - killed))
    lags+="${lags:+, }$(printf '%d.%03d s' $((lag / 1000)) $((lag % 1000)))"
    [ "$lag" -le $((st * 1000 + 1000)) ] || bad+="a step failed ${lag} ms after the kill; "
  done
  kinds=$(grep 'on node 0: step [0-9]* failed' "${log[0]}" | grep -oE '\((ErrRemote|ErrSystem|context\.DeadlineExceeded|ErrRevoked)\)' | sort -u | tr -d '()' | tr '\n' ' ' | sed 's/ $//')
  [ "$failed" -eq "$PER" ] || bad+="$failed of $PER ranks of node 0 said their step failed; "
  [ "$(grep 'on node 0: step [0-9]* failed' "${log[0]}" | grep -cE '\((ErrRemote|ErrSystem|context\.DeadlineExceeded|ErrRevoked)\)')" -eq "$PER" ] ||
    bad+="not every failure named a typed error; "
  [ "$nodes" -gt 0 ] && [ -n "$net" ] || bad+="nNodes 2 seen $nodes times, '$net'; "
  went=$(grep -c "went on without node 1: 10 steps of [0-9]* floats, every element correct" "${log[0]}")
  notsup=$(grep -E 'nodeloss: rank [0-9]+: ' "${log[0]}" | grep -c 'not supported')
  if [ -n "$version" ] && version_ge "$version" 2.28.7; then
    want="went on: $(grep -q 'refused the revoke\|refused the shrink' "${log[0]}" && echo "NCCL refused the revoke or shrink (ErrRemote): a new communicator of" || echo "revoked, shrank to") $PER rank(s), 10 checked steps"
    [ "$went" -eq "$PER" ] || bad+="$went of $PER ranks of node 0 went on (NCCL $version has ncclCommRevoke); "
  else
    want="revoke and shrink not supported"
    [ "$notsup" -eq "$PER" ] || bad+="$notsup of $PER ranks of node 0 said not supported (NCCL ${version:-?}); "
  fi
  if [ -z "$bad" ]; then
    echo "ok    $label: 2 nodes × $PER, nNodes 2, $net, NCCL $version; node 1 killed: node 0's ranks returned $lags after it (step deadline $st s) with $kinds; $want" | tee -a "$summary"
  else
    echo "FAIL  $label: NCCL ${version:-?}: $bad" | tee -a "$summary"
    grep -h 'nodeloss' "${log[@]}" | sed 's/^/      /' | tee -a "$summary"
    fails=$((fails + 1))
  fi
}
nodeloss
[ "${CASES:-all}" = all ] && grep -E '^ +[0-9]+ +[0-9]+ +uint8 ' "$OUT/logs/nccl-bench-static-node0.log" >>"$summary"
echo "gpu-nodes: $fails failed" | tee -a "$summary"
[ "$fails" -eq 0 ]
