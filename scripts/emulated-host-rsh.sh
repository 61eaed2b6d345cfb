#!/usr/bin/env bash
# An rsh agent for Open MPI that runs a "remote" host's command on this
# machine, as that host: mpirun --host nodeA:2,nodeB:2 --mca plm_rsh_agent
# scripts/emulated-host-rsh.sh. The command (Open MPI's orted, and through it
# the ranks) gets NCCL_HOSTID=HOST, so that NCCL counts the emulated hosts as
# nodes, and CUDA_VISIBLE_DEVICES from DEVS_HOST where that is set (the host's
# GPUs). Where a network namespace gonccl-HOST exists
# (scripts/test-netns-nodes.sh makes them), the command runs in it under the
# host name HOST instead, with no NCCL_HOSTID: the host has an address and a
# name of its own. Used by scripts/gpu-nodes.sh, scripts/test-launchers.sh and
# scripts/test-netns-nodes.sh.
while [[ "${1:-}" == -* ]]; do shift; done # ssh's options, if any
host=$1
shift
devs=DEVS_$host
if [ -n "${!devs:-}" ]; then
  export CUDA_VISIBLE_DEVICES=${!devs}
fi
export NCCL_HOSTID=$host
# Open MPI names its session directory and its shared-memory (vader) segments
# after the host name and the local rank, so two emulated hosts of one machine
# would share them: ranks of one host would map the other's segments and crash
# in their first MPI collective (nccl-tests' MPI build does one). Each host
# keeps its own.
dir=${TMPDIR:-/tmp}/emulated-host-$host
mkdir -p "$dir"
export OMPI_MCA_orte_tmpdir_base=$dir OMPI_MCA_btl_vader_backing_directory=$dir
if [ -e "/run/netns/gonccl-$host" ]; then
  unset NCCL_HOSTID
  exec nsenter --net="/run/netns/gonccl-$host" unshare --uts --mount \
    bash -c 'mount --bind "/etc/netns/gonccl-$0/hosts" /etc/hosts && hostname "$0" && exec bash -c "$1"' "$host" "$*"
fi
exec bash -c "$*"
