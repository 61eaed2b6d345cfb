#!/usr/bin/env bash
# Two nodes as two network namespaces of this host, on the fake libraries,
# under the real torchrun and mpirun: each node has its own address (a veth
# pair, 10.231.7.1 and .2), its own host name (a UTS namespace: node-a,
# node-b) and an /etc/hosts that names both, as hosts of a cluster do. No
# NCCL_HOSTID is set: the nodes tell themselves apart by their names, and
# every id and store address must be one the other node can reach (a rank
# that advertises 127.0.0.1 fails here). Each rank checks every element and
# says how it got the id:
#
#   torchrun --nnodes 2, static rendezvous (the id through node-a's store)
#   torchrun --nnodes 2, c10d rendezvous at node-a
#   mpirun --host node-a:2,node-b:2 with NCCL_COMM_ID=node-a:PORT, node-b's
#     daemon started through scripts/emulated-host-rsh.sh, which enters its
#     namespace
#   srun -N 2 with nothing set, on a Slurm cluster of the two nodes
#     (scripts/slurm-cluster.sh; GONCCL_SKIP_SLURM=1 leaves it out)
#
#   scripts/test-netns-nodes.sh
#
# Needs root, ip (iproute2), unshare, torchrun, mpirun and Slurm; .ci/run installs
# them. Where network namespaces cannot be made (a container without
# CAP_NET_ADMIN) it says so and exits 0: scripts/test-launchers.sh runs the
# same launchers across nodes on the loopback. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test-netns-nodes: needs root (network namespaces)" >&2; exit 1; }
for c in ip nsenter unshare torchrun mpirun; do
  command -v $c >/dev/null || { echo "test-netns-nodes: FAILED: missing $c" >&2; exit 1; }
done

NAMES=(node-a node-b)
ADDRS=(10.231.7.1 10.231.7.2)
NS=(gonccl-node-a gonccl-node-b)
work=$(mktemp -d)
cleanup() {
  local rc=$?
  for k in 0 1; do
    ip netns pids "${NS[$k]}" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "${NS[$k]}" 2>/dev/null || true
    rm -rf "/etc/netns/${NS[$k]}"
  done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

for k in 0 1; do ip netns del "${NS[$k]}" 2>/dev/null || true; done
if ! ip netns add "${NS[0]}" 2>/dev/null; then
  echo "test-netns-nodes: skipped: network namespaces cannot be made here (ip netns add failed)"
  exit 0
fi
ip netns add "${NS[1]}"
ip link add gonccl-va type veth peer name gonccl-vb
ip link set gonccl-va netns "${NS[0]}"
ip link set gonccl-vb netns "${NS[1]}"
for k in 0 1; do
  dev=gonccl-v$([ $k = 0 ] && echo a || echo b)
  ip -n "${NS[$k]}" addr add "${ADDRS[$k]}/24" dev "$dev"
  ip -n "${NS[$k]}" link set "$dev" up
  ip -n "${NS[$k]}" link set lo up
  # the node's /etc/hosts (`on` mounts it there, as ip netns exec would).
  mkdir -p "/etc/netns/${NS[$k]}"
  printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "${ADDRS[0]}" "${NAMES[0]}" "${ADDRS[1]}" "${NAMES[1]}" >"/etc/netns/${NS[$k]}/hosts"
done

go run ./cmd/nccl-fakes -o "$work/fakes" >/dev/null
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -o "$work/bin/" ./examples/allreduce ./examples/dataparallel
E=$work/bin
root=$PWD
export GONCCL_CUDART_LIB=$work/fakes/cudart GONCCL_NCCL_LIB=$work/fakes/default FAKECUDA_DEVICES=2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset NCCL_COMM_ID NCCL_HOSTID MASTER_ADDR MASTER_PORT

# on K CMD...: CMD on node K: in its network namespace, under its host name,
# with its hosts file. Not `ip netns exec`, which also mounts a sysfs of the
# namespace's own, without the cgroup file system slurmd needs.
on() {
  local k=$1
  shift
  nsenter --net="/run/netns/${NS[$k]}" unshare --uts --mount \
    bash -c 'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$0" && shift && exec "$@"' "${NAMES[$k]}" "${NS[$k]}" "$@"
}
port=$((20000 + RANDOM % 20000))
fails=0
# check NAME WANT N LOG...: N lines matching WANT in the logs, and exit codes 0.
check() {
  local name=$1 want=$2 n=$3 rc=$4
  shift 4
  local got
  got=$(cat "$@" | grep -cE -- "$want" || true)
  if [ "$rc" -eq 0 ] && [ "$got" -eq "$n" ]; then
    echo "ok    $name: $n ranks said \"$want\""
  else
    echo "FAIL  $name: exit $rc, $got of $n ranks said \"$want\"; the ranks' other lines:"
    cat "$@" | grep -E 'rank [0-9]+' | grep -vE -- "$want" | head -20 | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
# agents NAME WANT RDZV...: two torchrun agents, one a node, 2 ranks each.
agents() {
  local name=$1 want=$2
  shift 2
  local k pids=() rc=0
  for k in 0 1; do
    (cd "$work" && on $k timeout 90 torchrun -r 1 -t 1 --log_dir "$work/logs-$port-$k" --no_python \
      --nnodes=2 --nproc_per_node=2 "${@//NODE_RANK/$k}" $E/allreduce -n 65536 -timeout 30s >"$work/$port-$k.log" 2>&1) &
    pids+=($!)
  done
  for k in 0 1; do wait "${pids[$k]}" || rc=$?; done
  # the ranks' standard output is in the logs (-t 1); their errors in the log folders.
  check "$name" "$want" 4 $rc "$work/$port-0.log" "$work/$port-1.log" $(find "$work/logs-$port-0" "$work/logs-$port-1" -name stderr.log)
  port=$((port + 1))
}

echo "== two nodes in network namespaces: ${NAMES[0]} ${ADDRS[0]}, ${NAMES[1]} ${ADDRS[1]}"
agents "torchrun --nnodes=2 (static: node-a's store)" '\(torchrun, id via store\) .*floats correct' \
  --node_rank=NODE_RANK --master_addr=node-a --master_port=$port
agents "torchrun --nnodes=2 --rdzv_backend=c10d at node-a" '\(torchrun, id via commid\) .*floats correct' \
  --rdzv_backend=c10d --rdzv_endpoint=node-a:$port --rdzv_id=gonccl-$port

rc=0
(cd "$work" && on 0 timeout 90 mpirun --oversubscribe --host node-a:2,node-b:2 --mca plm rsh --mca rtc ^hwloc \
  --mca plm_rsh_agent "$root/scripts/emulated-host-rsh.sh" -np 4 \
  -x GONCCL_NCCL_LIB -x GONCCL_CUDART_LIB -x FAKECUDA_DEVICES -x NCCL_COMM_ID=node-a:$port \
  $E/allreduce -n 65536 -timeout 30s >"$work/mpirun.log" 2>&1) || rc=$?
check "mpirun --host node-a:2,node-b:2, NCCL_COMM_ID=node-a:PORT" '\(openmpi, id via commid\) .*floats correct' 4 $rc "$work/mpirun.log"

# Slurm: slurmctld and node-a's slurmd in node-a, node-b's slurmd in node-b,
# each at its own address. With nothing set the ranks meet at the step's
# first node, node-a, by its name, on launch.SlurmPort.
if [ "${GONCCL_SKIP_SLURM:-}" != 1 ]; then
  slurm_pids=()
  on_a() { on 0 "$@"; }
  on_b() { on 1 "$@"; }
  # shellcheck source=scripts/slurm-cluster.sh
  . scripts/slurm-cluster.sh
  if slurm_cluster "$work/slurm" node-a "${ADDRS[0]}" node-b "${ADDRS[1]}" on_a on_b; then
    want=$(printf 'task %s on %s\n' 0 node-a 1 node-a 2 node-b 3 node-b)
    got=$(cd "$work" && on 0 timeout 60 srun -N 2 --ntasks-per-node=2 sh -c 'echo "task $SLURM_PROCID on $(hostname)"' 2>&1 | sort) || true
    if [ "$got" = "$want" ]; then
      echo "ok    srun -N 2 --ntasks-per-node=2: tasks 0 and 1 on node-a, 2 and 3 on node-b (their host names)"
    else
      echo "FAIL  srun -N 2 --ntasks-per-node=2, where the tasks run: got"
      echo "$got" | sed 's/^/      /'
      fails=$((fails + 1))
    fi
    for ex in "allreduce -n 65536" "dataparallel -samples 512"; do
      rc=0
      (cd "$work" && on 0 timeout 90 srun -N 2 --ntasks-per-node=2 $E/$ex -timeout 30s >"$work/srun-${ex%% *}.log" 2>&1) || rc=$?
      what='floats correct'
      [ "${ex%% *}" = dataparallel ] && what='weights identical on every rank'
      check "srun -N 2 --ntasks-per-node=2 ${ex%% *}, nothing set" "\\(srun, id via commid\\) .*$what" 4 $rc "$work/srun-${ex%% *}.log"
    done
  else
    echo "FAIL  the two-node Slurm cluster did not come up"
    fails=$((fails + 1))
  fi
fi

if [ $fails -gt 0 ]; then
  echo "test-netns-nodes: $fails failed" >&2
  exit 1
fi
echo "test-netns-nodes: every launch across the two namespaces passed"
