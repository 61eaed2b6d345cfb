#!/usr/bin/env bash
# On a GPU machine: where the two floors of small-operation times come from.
#
# With one process driving two GPUs, a plainly launched 8-byte all_reduce lands
# on a faster floor in some runs and a slower one in others, in nccl-tests and
# in nccl-bench alike (docs/performance.md). This runs nccl-tests' all_reduce
# at 8 bytes RUNS times in each of several settings and prints each run's time,
# so that the settings that make the floor move can be seen:
#
#   - CPU placement: no taskset; four CPUs; two CPUs that are SMT siblings of
#     one core; two CPUs on different cores (the pairs from lscpu);
#   - launches from a CUDA graph (-G): no host work per operation;
#   - a blocking sync between iterations is not available in nccl-tests, so
#     the enqueue rate is measured apart: nccl-bench's -I 1 per-iteration
#     timing gives the GPU time of each iteration, to set beside the wall time,
#     and both programs' -C 1 the host's time of the launches.
#
#   RUNS=8 scripts/bench-floors.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
OUT=${1:-${OUT:-/tmp/gonccl-floors}}
mkdir -p "$OUT"
RUNS=${RUNS:-8}
T=${T:-$(bash .gpu/build-nccl-tests.sh)} || { echo "nccl-tests did not build"; exit 1; }
ARGS=${ARGS:-"-b 8 -e 8 -g 2 -n 2000 -w 1000 -c 0"}
{
  lscpu | grep -E "Model name|Socket|Core|Thread|NUMA node[0-9]"
  nvidia-smi topo -m 2>/dev/null | head -4
} >"$OUT/topology.txt"
# The first GPU's local CPUs, and from them two siblings and two separate cores.
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | tr 'A-F' 'a-f' | sed 's/^0000//')
local_cpus=$(cat "/sys/bus/pci/devices/0000${bus#0000}/local_cpulist" 2>/dev/null || echo 0-3)
first=$(echo "$local_cpus" | cut -d, -f1 | cut -d- -f1)
sib=$(cut -d, -f2 "/sys/devices/system/cpu/cpu$first/topology/thread_siblings_list" 2>/dev/null | cut -d- -f2)
other=$((first + 1))
[ "$other" = "$sib" ] && other=$((first + 2))
echo "GPU 0 local CPUs $local_cpus; cpu$first's sibling: ${sib:-none}; another core: cpu$other" >>"$OUT/topology.txt"

time8() { awk '$1 == 8 { print $6; exit }' "$1"; }
setting() { # setting NAME CMD...: RUNS runs, their 8-byte times on one line
  local name=$1 t line=""
  shift
  for i in $(seq "$RUNS"); do
    # shellcheck disable=SC2086
    timeout 60 "$@" $ARGS >"$OUT/$name-$i.txt" 2>&1
    t=$(time8 "$OUT/$name-$i.txt")
    line="$line ${t:-X}"
  done
  printf "%-28s %s\n" "$name" "$line" | tee -a "$OUT/floors.txt"
}
: >"$OUT/floors.txt"
setting "unpinned" "$T/all_reduce_perf"
setting "cpus-$local_cpus" taskset -c "$local_cpus" "$T/all_reduce_perf"
setting "4-cpus-$first-$((first + 3))" taskset -c "$first-$((first + 3))" "$T/all_reduce_perf"
[ -n "${sib:-}" ] && setting "siblings-$first,$sib" taskset -c "$first,$sib" "$T/all_reduce_perf"
setting "two-cores-$first,$other" taskset -c "$first,$other" "$T/all_reduce_perf"
setting "graph-G20-unpinned" "$T/all_reduce_perf" -G 20
setting "nccl-bench-unpinned" .gpu/bin/nccl-bench -op all_reduce
setting "nccl-bench-I1-unpinned" .gpu/bin/nccl-bench -op all_reduce -I 1
# -C 1: the host's time of the launches per operation (cputime) in place of
# the time; near the time, the host's launches set the floor.
setting "cputime-unpinned" "$T/all_reduce_perf" -C 1
setting "nccl-bench-cputime-unpinned" .gpu/bin/nccl-bench -op all_reduce -C 1
cat "$OUT/topology.txt"
