#!/usr/bin/env bash
# An rsh agent for Open MPI that runs a "remote" host's command on this
# machine, as that host: mpirun --host nodeA:2,nodeB:2 --mca plm_rsh_agent
# scripts/emulated-host-rsh.sh. The command (Open MPI's orted, and through it
# the ranks) gets NCCL_HOSTID=HOST, so that NCCL counts the emulated hosts as
# nodes, and CUDA_VISIBLE_DEVICES from DEVS_HOST where that is set (the host's
# GPUs). Used by scripts/gpu-nodes.sh and scripts/test-launchers.sh.
while [[ "${1:-}" == -* ]]; do shift; done # ssh's options, if any
host=$1
shift
devs=DEVS_$host
if [ -n "${!devs:-}" ]; then
  export CUDA_VISIBLE_DEVICES=${!devs}
fi
export NCCL_HOSTID=$host
exec bash -c "$*"
