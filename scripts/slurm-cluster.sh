# A two-node Slurm cluster on this host, for scripts/test-launchers.sh (both
# nodes on the loopback) and scripts/test-netns-nodes.sh (each node in a
# network namespace of its own). Source it, then:
#
#   slurm_cluster DIR NODE_A ADDR_A NODE_B ADDR_B [RUN_A RUN_B]
#
# writes DIR/slurm.conf, starts slurmctld on node A and a slurmd per node
# (slurmd -N NAME: each node its own port, spool, pid and log files), each
# through its RUN command (a function or command that runs its arguments on
# that node; none: here), exports SLURM_CONF, adds the daemons' pids to the
# caller's slurm_pids array, and returns once sinfo shows both nodes idle, or
# 1 after 30 s, with the daemons' logs. With SLURM_HOSTID_PROLOG=1 a task
# prolog sets each task's NCCL_HOSTID to its node's name (two nodes of one
# host name must tell themselves apart). Slurm runs as root here
# (SlurmUser=root, no munge: AuthType=auth/none).

# slurm_port: a free TCP port (of this namespace: a fresh one has all free).
slurm_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_cluster() {
  local dir=$1 a=$2 addr_a=$3 b=$4 addr_b=$5 run_a=${6:-} run_b=${7:-}
  mkdir -p "$dir/state" "$dir/spool-$a" "$dir/spool-$b"
  local prolog=""
  if [ "${SLURM_HOSTID_PROLOG:-}" = 1 ]; then
    printf '#!/bin/sh\necho "export NCCL_HOSTID=$SLURMD_NODENAME"\n' >"$dir/task-prolog.sh"
    chmod +x "$dir/task-prolog.sh"
    prolog="TaskProlog=$dir/task-prolog.sh"
  fi
  cat >"$dir/slurm.conf" <<CONF
ClusterName=gonccl-ci
SlurmctldHost=$a($addr_a)
SlurmctldPort=$(slurm_port)
SlurmUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$prolog
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
NodeName=$a NodeAddr=$addr_a Port=$(slurm_port) CPUs=8 State=UNKNOWN
NodeName=$b NodeAddr=$addr_b Port=$(slurm_port) CPUs=8 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$dir/slurm.conf
  $run_a slurmctld -D -c -f "$SLURM_CONF" >"$dir/ctld.out" 2>&1 &
  slurm_pids+=($!)
  $run_a slurmd -D -N "$a" -f "$SLURM_CONF" >"$dir/d-$a.out" 2>&1 &
  slurm_pids+=($!)
  $run_b slurmd -D -N "$b" -f "$SLURM_CONF" >"$dir/d-$b.out" 2>&1 &
  slurm_pids+=($!)
  local _
  for _ in $(seq 60); do
    [ "$($run_a sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ')" = "$a idle $b idle " ] && return 0
    sleep 0.5
  done
  $run_a sinfo -N || true
  tail -n 20 "$dir"/*.log "$dir"/*.out || true
  return 1
}
