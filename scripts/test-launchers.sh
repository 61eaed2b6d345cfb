#!/usr/bin/env bash
# Runs the launched examples on the fake libraries under the real launchers:
# Open MPI's mpirun, Slurm's srun (a one-node cluster of its own, slurmctld
# and slurmd started here and stopped at the end) and PyTorch's torchrun
# (static rendezvous, whose agent serves the c10d store, and --rdzv_backend=c10d).
# Each rank of allreduce and dataparallel checks every element itself; the
# script counts one success line per rank. Nothing here sets a launcher's
# variables by hand.
#
#   scripts/test-launchers.sh
#
# Needs mpirun (Debian: openmpi-bin), slurmctld, slurmd and srun (slurm-wlm)
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
for c in mpirun torchrun; do command -v $c >/dev/null || missing+=($c); done
if [ "${GONCCL_SKIP_SLURM:-}" != 1 ]; then
  for c in slurmctld slurmd srun sinfo; do command -v $c >/dev/null || missing+=($c); done
  [ "$(id -u)" = 0 ] || die "the srun part starts slurmd, which needs root (GONCCL_SKIP_SLURM=1 leaves it out)"
fi
[ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]} (apt-get install openmpi-bin slurm-wlm python3-torch)"

work=$(mktemp -d)
slurm_pids=()
cleanup() {
  local rc=$?
  for p in "${slurm_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${slurm_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # slurmd's step daemons may still be writing to the spool as they go.
  rm -rf "$work" 2>/dev/null || { sleep 1; rm -rf "$work" 2>/dev/null || true; }
  exit $rc
}
trap cleanup EXIT

go run ./cmd/nccl-fakes -o "$work/fakes" >/dev/null || die "building the fakes"
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -o "$work/bin/" ./examples/allreduce ./examples/dataparallel || die "building the examples"
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
refused "mpirun -np 2 allreduce without a way to share the id" "NCCL_COMM_ID" \
  "${MPI[@]}" -np 2 $E/allreduce -n 1024 -timeout 10s

if [ "${GONCCL_SKIP_SLURM:-}" != 1 ]; then
  echo "== srun, a one-node cluster started here"
  node=$(hostname -s)
  mkdir -p "$work/slurm/state" "$work/slurm/spool"
  cat >"$work/slurm/slurm.conf" <<EOF
ClusterName=gonccl-ci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(port)
SlurmdPort=$(port)
SlurmUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$work/slurm/state
SlurmdSpoolDir=$work/slurm/spool
SlurmctldPidFile=$work/slurm/slurmctld.pid
SlurmdPidFile=$work/slurm/slurmd.pid
SlurmctldLogFile=$work/slurm/slurmctld.log
SlurmdLogFile=$work/slurm/slurmd.log
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF=$work/slurm/slurm.conf
  slurmctld -D -c -f "$SLURM_CONF" >"$work/slurm/ctld.out" 2>&1 &
  slurm_pids+=($!)
  slurmd -D -f "$SLURM_CONF" >"$work/slurm/d.out" 2>&1 &
  slurm_pids+=($!)
  for _ in $(seq 60); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && break
    sleep 0.5
  done
  if [ "$(sinfo -h -o %t 2>/dev/null)" != idle ]; then
    sinfo || true
    tail -20 "$work"/slurm/*.log "$work"/slurm/*.out || true
    die "the one-node Slurm cluster did not come up"
  fi
  echo "   $(srun --version)"
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

[ $fails -eq 0 ] || die "$fails run(s)"
if [ "${GONCCL_SKIP_SLURM:-}" = 1 ]; then
  echo "test-launchers: every launched example passed under mpirun and torchrun (srun left out: GONCCL_SKIP_SLURM=1)"
else
  echo "test-launchers: every launched example passed under mpirun, srun and torchrun"
fi
