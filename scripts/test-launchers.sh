#!/usr/bin/env bash
# Runs the launched examples on the fake libraries under the real launchers:
# Open MPI's mpirun (also across two hosts emulated here, where an MPI
# program checks that their ranks keep their shared memory apart), Slurm's srun (a
# two-node cluster of its own on this host, a slurmctld and a slurmd per node
# started here and stopped at every exit) and PyTorch's torchrun (static
# rendezvous, whose agent serves the c10d store, --rdzv_backend=c10d, and two
# agents as two nodes). Each rank of allreduce and dataparallel checks every
# element itself; the script counts one success line per rank. Nothing here
# sets a launcher's variables by hand; srun across the two nodes runs with
# nothing set at all. Last, a node dies mid-collective: under two torchrun
# agents (each its own NCCL_HOSTID), examples/nodeloss's node 1 is killed and
# node 0's ranks must report ErrRemote at once, as NCCL over sockets does,
# then go on through a new communicator (or say the library cannot).
#
#   scripts/test-launchers.sh
#
# Needs mpirun and mpicc (Debian: openmpi-bin, libopenmpi-dev), slurmctld, slurmd and srun (slurm-wlm)
# and torchrun (python3-torch); .ci/run installs them. Slurm's daemons run as
# root here (SlurmUser=root, no munge: AuthType=auth/none), so the srun part
# needs root; elsewhere set GONCCL_SKIP_SLURM=1 to leave it out, said in the
# summary. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
die() {
  echo "test-launchers: FAILED: $*" >&2
  exit 1
}
missing=()
for c in mpirun mpicc torchrun; do command -v $c >/dev/null || missing+=($c); done
if [ "${GONCCL_SKIP_SLURM:-}" != 1 ]; then
  for c in slurmctld slurmd srun sinfo; do command -v $c >/dev/null || missing+=($c); done
  [ "$(id -u)" = 0 ] || die "the srun part starts slurmd, which needs root (GONCCL_SKIP_SLURM=1 leaves it out)"
fi
[ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]} (apt-get install openmpi-bin libopenmpi-dev slurm-wlm python3-torch)"

work=$(mktemp -d)
slurm_pids=()
agent_pids=() # torchrun agents left running by the node-loss drill
cleanup() {
  local rc=$?
  # shellcheck disable=SC2046 # the children's pids, one word each
  for p in "${agent_pids[@]}"; do kill -9 $(ps -o pid= --ppid "$p") "$p" 2>/dev/null || true; done
  for p in "${slurm_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${slurm_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # slurmd's step daemons may still be writing to the spool as they go.
  rm -rf "$work" 2>/dev/null || { sleep 1; rm -rf "$work" 2>/dev/null || true; }
  exit $rc
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

go run ./cmd/nccl-fakes -o "$work/fakes" >/dev/null || die "building the fakes"
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -o "$work/bin/" ./examples/allreduce ./examples/dataparallel ./examples/nodeloss || die "building the examples"
mpicc -O2 -o "$work/bin/mpi-allgather" scripts/mpi-allgather.c || die "building scripts/mpi-allgather.c"
E=$work/bin
export GONCCL_CUDART_LIB=$work/fakes/cudart GONCCL_NCCL_LIB=$work/fakes/default FAKECUDA_DEVICES=4 NCCL_COMM_ID=
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
port() { # a free loopback TCP port
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fails=0
# ranks N WANT NAME CMD...: the command must succeed within 90 s and print a
# line matching the regular expression WANT once per rank (each rank checks
# its own result and says which launcher it saw and how the id came).
ranks() {
  local n=$1 want=$2 name=$3
  shift 3
  local out got rc=0
  out=$(cd "$work" && timeout 90 "$@" 2>&1) || rc=$?
  got=$(echo "$out" | grep -cE -- "$want" || true)
  if [ $rc -eq 0 ] && [ "$got" -eq "$n" ]; then
    echo "ok    $name: $n ranks said \"$want\""
  else
    echo "FAIL  $name: exit $rc, $got of $n ranks said \"$want\":"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
# refused NAME TEXT CMD...: the command must fail within 90 s, saying TEXT.
refused() {
  local name=$1 want=$2
  shift 2
  local out rc=0
  out=$(cd "$work" && timeout 90 "$@" 2>&1) || rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -qF -- "$want"; then
    echo "ok    $name: refused: $(echo "$out" | grep -F -- "$want" | head -1 | sed 's/^ *//')"
  else
    echo "FAIL  $name: exit $rc, want a failure saying \"$want\":"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}

ok() { # ok EXAMPLE LAUNCHER VIA: the line each rank prints
  case $1 in
  allreduce) echo "\\($2, id via $3\\) .*floats correct" ;;
  dataparallel) echo "\\($2, id via $3\\) .*weights identical on every rank" ;;
  esac
}

echo "== mpirun ($(mpirun --version 2>&1 | head -1))"
MPI=(mpirun --oversubscribe -x GONCCL_NCCL_LIB -x GONCCL_CUDART_LIB -x FAKECUDA_DEVICES)
ranks 3 "$(ok allreduce openmpi commid)" "mpirun -np 3 allreduce, NCCL_COMM_ID" \
  "${MPI[@]}" -np 3 -x NCCL_COMM_ID=127.0.0.1:$(port) $E/allreduce -n 65536 -timeout 30s
ranks 3 "$(ok allreduce openmpi file)" "mpirun -np 3 allreduce, -idfile" \
  "${MPI[@]}" -np 3 $E/allreduce -n 65536 -timeout 30s -idfile "$work/id-mpi"
ranks 2 "$(ok allreduce openmpi commid)" "mpirun -np 2 allreduce, NCCL_COMM_ID" \
  "${MPI[@]}" -np 2 -x NCCL_COMM_ID=127.0.0.1:$(port) $E/allreduce -n 65536 -timeout 30s
ranks 3 "$(ok dataparallel openmpi commid)" "mpirun -np 3 dataparallel, NCCL_COMM_ID" \
  "${MPI[@]}" -np 3 -x NCCL_COMM_ID=127.0.0.1:$(port) $E/dataparallel -samples 512 -timeout 30s
# Two hosts emulated here: Open MPI starts each host's daemon through an rsh
# agent that runs it on this machine as that host (scripts/gpu-nodes.sh does
# the same on GPUs).
ranks 3 "$(ok allreduce openmpi commid)" "mpirun --host nodeA:1,nodeB:2 (two hosts emulated here) allreduce, NCCL_COMM_ID" \
  "${MPI[@]}" --host nodeA:1,nodeB:2 --mca plm rsh --mca rtc ^hwloc --mca plm_rsh_agent "$PWD/scripts/emulated-host-rsh.sh" -np 3 \
  -x NCCL_COMM_ID=127.0.0.1:$(port) $E/allreduce -n 65536 -timeout 30s
# Two ranks per emulated host talk through Open MPI's shared memory, as
# nccl-tests' MPI build does under scripts/bench-nodes.sh: each host's must be
# its own.
ranks 4 "mpi-allgather: rank [0-3] of 4: 50 rounds checked" "mpirun --host nodeA:2,nodeB:2 (two hosts emulated here) MPI_Allgather" \
  "${MPI[@]}" --host nodeA:2,nodeB:2 --mca plm rsh --mca rtc ^hwloc --mca plm_rsh_agent "$PWD/scripts/emulated-host-rsh.sh" -np 4 \
  $E/mpi-allgather
refused "mpirun -np 2 allreduce without a way to share the id" "NCCL_COMM_ID" \
  "${MPI[@]}" -np 2 $E/allreduce -n 1024 -timeout 10s

if [ "${GONCCL_SKIP_SLURM:-}" != 1 ]; then
  # Two nodes of one cluster on this host: a slurmctld and a slurmd per node
  # (slurmd -N NAME), each node its own port, spool, pid and log files (%n).
  # With nothing set the ranks meet at the step's first node, by its name, on
  # launch.SlurmPort: the first node is named after this host, a name that
  # resolves here as a cluster's node names do in its DNS. The second's name
  # (the same with "-b") needs no resolving (Slurm reaches both slurmd at
  # NodeAddr, and only rank 0's node is dialled); it sorts after the first,
  # so task 0's node heads the step's node list whichever order Slurm lists
  # them in. The task prolog sets each task's NCCL_HOSTID to its node's name,
  # as scripts/gpu-nodes.sh sets one per emulated node (the fake NCCL has no
  # topology and ignores it; real NCCL would count two nodes).
  nodeA=$(hostname -s)
  nodeB=$nodeA-b
  echo "== srun, a two-node cluster started here ($nodeA, $nodeB)"
  # shellcheck source=scripts/slurm-cluster.sh
  . scripts/slurm-cluster.sh
  SLURM_HOSTID_PROLOG=1 slurm_cluster "$work/slurm" "$nodeA" 127.0.0.1 "$nodeB" 127.0.0.1 ||
    die "the two-node Slurm cluster did not come up"
  echo "   $(srun --version)"
  # Where a step over both nodes puts its tasks, and what the prolog gives them.
  want=$(printf 'task %s on %s, NCCL_HOSTID=%s\n' 0 "$nodeA" "$nodeA" 1 "$nodeA" "$nodeA" 2 "$nodeB" "$nodeB" 3 "$nodeB" "$nodeB")
  got=$(cd "$work" && timeout 60 srun -N 2 --ntasks-per-node=2 sh -c 'echo "task $SLURM_PROCID on $SLURMD_NODENAME, NCCL_HOSTID=$NCCL_HOSTID"' 2>&1 | sort) || true
  if [ "$got" = "$want" ]; then
    echo "ok    srun -N 2 --ntasks-per-node=2: tasks 0 and 1 on $nodeA, 2 and 3 on $nodeB, each NCCL_HOSTID its node's name"
  else
    echo "FAIL  srun -N 2 --ntasks-per-node=2, where the tasks run: want"
    echo "$want" | sed 's/^/      /'
    echo "    got"
    echo "$got" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
  ranks 3 "$(ok allreduce srun commid)" "srun -n 3 allreduce, NCCL_COMM_ID" \
    env NCCL_COMM_ID=127.0.0.1:$(port) srun -n 3 $E/allreduce -n 65536 -timeout 30s
  ranks 3 "$(ok allreduce srun file)" "srun -n 3 allreduce, -idfile" \
    srun -n 3 $E/allreduce -n 65536 -timeout 30s -idfile "$work/id-srun"
  ranks 2 "$(ok allreduce srun file)" "srun -N 1 --ntasks-per-node=2 allreduce, -idfile" \
    srun -N 1 --ntasks-per-node=2 $E/allreduce -n 65536 -timeout 30s -idfile "$work/id-srun2"
  ranks 3 "$(ok dataparallel srun file)" "srun -n 3 dataparallel, -idfile" \
    srun -n 3 $E/dataparallel -samples 512 -timeout 30s -idfile "$work/id-srun-dp"
  ranks 3 "$(ok allreduce srun commid)" "srun -n 3 allreduce, nothing set (the step's node and launch.SlurmPort)" \
    srun -n 3 $E/allreduce -n 65536 -timeout 30s
  # Across the two nodes with nothing set: the ranks meet at the step's first
  # node on launch.SlurmPort.
  ranks 2 "$(ok allreduce srun commid)" "srun -N 2 --ntasks-per-node=1 allreduce, nothing set" \
    srun -N 2 --ntasks-per-node=1 $E/allreduce -n 65536 -timeout 30s
  ranks 4 "$(ok allreduce srun commid)" "srun -N 2 --ntasks-per-node=2 allreduce, nothing set" \
    srun -N 2 --ntasks-per-node=2 $E/allreduce -n 65536 -timeout 30s
  ranks 4 "$(ok dataparallel srun commid)" "srun -N 2 --ntasks-per-node=2 dataparallel, nothing set" \
    srun -N 2 --ntasks-per-node=2 $E/dataparallel -samples 512 -timeout 30s
fi

py=$(head -1 "$(command -v torchrun)" | sed 's/^#! *//')
echo "== torchrun (PyTorch $($py -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?'))"
# -r 1 -t 1: PyTorch 1.13's torchrun (Debian's python3-torch) on Python 3.11
# fails to parse its default redirects; sending stdout to its log and teeing it
# back works on every version.
TR=(torchrun -r 1 -t 1 --log_dir "$work/torchrun-logs" --no_python)
ranks 3 "$(ok allreduce torchrun store)" "torchrun --nproc_per_node=3 allreduce (static: the agent's store)" \
  "${TR[@]}" --nproc_per_node=3 --master_port=$(port) $E/allreduce -n 65536 -timeout 30s
ranks 3 "$(ok allreduce torchrun commid)" "torchrun --nproc_per_node=3 --rdzv_backend=c10d allreduce" \
  "${TR[@]}" --nproc_per_node=3 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$(port) $E/allreduce -n 65536 -timeout 30s
ranks 2 "$(ok dataparallel torchrun store)" "torchrun --nproc_per_node=2 dataparallel" \
  "${TR[@]}" --nproc_per_node=2 --master_port=$(port) $E/dataparallel -samples 512 -timeout 30s
# Two nodes on one host: two agents of one static rendezvous, each a node of
# two ranks (scripts/gpu-nodes.sh does the same on GPUs, with a NCCL_HOSTID
# per node). Node 1 runs beside; the ranks of both must say their line.
p=$(port)
(cd "$work" && timeout 90 "${TR[@]}" --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=$p \
  $E/allreduce -n 65536 -timeout 30s >"$work/node1.log" 2>&1) &
node1=$!
ranks 2 "$(ok allreduce torchrun store)" "torchrun --nnodes=2, node 0 (node 1 beside it) allreduce" \
  "${TR[@]}" --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=$p $E/allreduce -n 65536 -timeout 30s
if wait $node1 && [ "$(grep -cE -- "$(ok allreduce torchrun store)" "$work/node1.log")" -eq 2 ]; then
  echo "ok    torchrun --nnodes=2, node 1: 2 ranks said \"$(ok allreduce torchrun store)\""
else
  echo "FAIL  torchrun --nnodes=2, node 1:"; sed 's/^/      /' "$work/node1.log" | tail -20
  fails=$((fails + 1))
fi

# A node dies mid-collective: examples/nodeloss -lost-node 1 under two agents
# of one static rendezvous, each a node of PER ranks with its own NCCL_HOSTID
# (as scripts/gpu-nodes.sh runs it on GPUs). Once every rank loops, node 1's
# agent and ranks are killed with SIGKILL, as a crashed node's would be. Every
# rank of node 0 must then say, within half a second of the kill (its step's
# deadline is 2 s), that its step got ErrRemote: the fakes, as NCCL over
# sockets (2.28.3 to 2.30.7, within 3 to 8 ms), see the other node's closed
# connections and keep the error. Then either NCCL refuses the revoke with
# that error and the ranks go on through a new communicator of node 0 (v230,
# as 2.28.9 and 2.30.7), or they say that the library cannot (default, 2.28.3:
# no ncclCommRevoke); with -rebuild they go on through a new communicator on
# any NCCL. "Not supported" runs one rank a node: its rank exits at once, and
# where that process hosts the fake's rendezvous, a rank of its node that had
# not yet asked the hub about its next step learns nothing more (the fakes'
# ranks hear of other nodes through their hub, NCCL's through their own
# sockets) and waits for its deadline; the other rows keep the hub running.
#
# Node 0's agent must not react to node 1's death, and it does not: a static
# rendezvous does not watch the other nodes. It still stops its own workers
# once one of them exits with an error, before the others have said theirs:
# --monitor_interval 60 keeps it from looking. When its workers are done it
# waits for node 1's agent at its exit barrier (300 s), so it is stopped here,
# TERM then KILL (it takes TERM only between its store calls).
stop_agent() {
  kill "$1" 2>/dev/null || true
  for _ in $(seq 15); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.2
  done
  # shellcheck disable=SC2046 # the children's pids, one word each
  kill -9 $(ps -o pid= --ppid "$1") "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
# drill VARIANT PER WANT [FLAG]: WANT is "refused" (the revoke refused with
# ErrRemote, then a new communicator), "went on" or "not supported"; FLAG is
# -rebuild: the ranks left make a new communicator without trying to revoke.
drill() {
  local variant=$1 per=$2 want=$3 flag=${4:-} st=2 limit=500
  local name="torchrun --nnodes=2 × $per, node 1 killed mid-loop, fake NCCL $variant${flag:+, $flag}"
  local log=("$work/drill-$variant-$per-node0.log" "$work/drill-$variant-$per-node1.log")
  local p k agents=() victims killed lags="" bad="" failed final ms lag went notsup refused anew
  p=$(port)
  for k in 0 1; do
    (cd "$work" && GONCCL_NCCL_LIB=$work/fakes/$variant NCCL_HOSTID=gonccl-node$k exec "${TR[@]}" --monitor_interval 60 --nnodes=2 --node_rank=$k \
      --nproc_per_node=$per --master_addr=127.0.0.1 --master_port=$p \
      $E/nodeloss -n 65536 -for 60s -step-timeout ${st}s -timeout 30s -lost-node 1 $flag >"${log[$k]}" 2>&1) &
    agents+=($!)
    agent_pids+=($!)
  done
  for _ in $(seq 300); do
    [ "$(cat "${log[@]}" | grep -c 'looping for')" -ge $((2 * per)) ] && break
    sleep 0.2
  done
  victims=$(sed -n 's/.*nodeloss: rank [0-9]*\/[0-9]* on node 1 (pid \([0-9]*\)).*/\1/p' "${log[@]}" | sort -u | tr '\n' ' ')
  if [ "$(echo $victims | wc -w)" -ne "$per" ]; then
    echo "FAIL  $name: $(cat "${log[@]}" | grep -c 'looping for') of $((2 * per)) ranks looping after 60 s"
    stop_agent "${agents[0]}"
    stop_agent "${agents[1]}"
    tail -20 "${log[@]}" | sed 's/^/      /'
    fails=$((fails + 1))
    return
  fi
  sleep 1 # well into the loop
  killed=$(date +%s%3N)
  kill -9 "${agents[1]}" $victims
  wait "${agents[1]}" 2>/dev/null || true
  for _ in $(seq $(((st + 40) * 5))); do
    failed=$(grep -c 'on node 0: step [0-9]* failed' "${log[0]}" || true)
    final=$(grep -cE 'went on without node 1|nodeloss: rank [0-9]+: ' "${log[0]}" || true)
    [ "$failed" -ge "$per" ] && [ "$final" -ge "$per" ] && break
    sleep 0.2
  done
  stop_agent "${agents[0]}"
  for ms in $(sed -n 's/.*on node 0: step [0-9]* failed .*(unix ms \([0-9]*\)).*/\1/p' "${log[0]}"); do
    lag=$((ms - killed))
    lags+="${lags:+, }$(printf '%d.%03d s' $((lag / 1000)) $((lag % 1000)))"
    [ "$lag" -le $limit ] || bad+="a step failed ${lag} ms after the kill (over ${limit} ms); "
  done
  [ "$failed" -eq "$per" ] || bad+="$failed of $per survivors said their step failed; "
  [ "$(grep 'on node 0: step [0-9]* failed' "${log[0]}" | grep -c '(ErrRemote)')" -eq "$per" ] ||
    bad+="not every failure was ErrRemote; "
  went=$(grep -c "went on without node 1: 10 steps of 65536 floats, every element correct" "${log[0]}" || true)
  notsup=$(grep -E 'nodeloss: rank [0-9]+: ' "${log[0]}" | grep -c 'not supported' || true)
  refused=$(grep -c 'NCCL refused the revoke (.*): a new communicator instead' "${log[0]}" || true)
  anew=$(grep -c 'without node 1: a new communicator in' "${log[0]}" || true)
  case $want in
  "refused")
    [ "$refused" -eq "$per" ] || bad+="$refused of $per survivors saw the revoke refused with ErrRemote; "
    [ "$anew" -eq "$per" ] || bad+="$anew of $per survivors made a new communicator; "
    [ "$went" -eq "$per" ] || bad+="$went of $per survivors went on; " ;;
  "went on")
    [ "$refused" -eq 0 ] || bad+="$refused survivors tried to revoke under $flag; "
    [ "$anew" -eq "$per" ] || bad+="$anew of $per survivors made a new communicator; "
    [ "$went" -eq "$per" ] || bad+="$went of $per survivors went on; " ;;
  "not supported") [ "$notsup" -eq "$per" ] || bad+="$notsup of $per survivors said not supported; " ;;
  esac
  if [ -z "$bad" ]; then
    local how
    case $want in
    refused) how="NCCL refused the revoke or shrink (ErrRemote): a new communicator of $per rank(s), 10 checked steps" ;;
    "went on") how="a new communicator of $per rank(s), 10 checked steps" ;;
    *) how="revoke and shrink not supported" ;;
    esac
    echo "ok    $name: node 0's $per rank(s) returned ${lags} after the kill (step deadline ${st} s) with ErrRemote; $how (NCCL $(grep -m1 'looping for' "${log[0]}" | grep -o 'NCCL [0-9.]*[0-9]' | cut -d' ' -f2))"
  else
    echo "FAIL  $name: $bad"
    grep -h 'nodeloss:' "${log[0]}" | sed 's/^/      node 0: /'
    cat "${log[@]}" | grep -v '^\[W' | tail -30 | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
echo "== a node dies mid-collective (torchrun, two nodes here)"
drill v230 1 refused
drill v230 2 refused
drill default 1 "not supported"
drill default 2 "went on" -rebuild
drill v230 1 "went on" -rebuild

[ $fails -eq 0 ] || die "$fails run(s)"
if [ "${GONCCL_SKIP_SLURM:-}" = 1 ]; then
  echo "test-launchers: every launched example passed under mpirun and torchrun (srun left out: GONCCL_SKIP_SLURM=1)"
else
  echo "test-launchers: every launched example passed under mpirun, srun (one and two nodes) and torchrun"
fi
