#!/usr/bin/env bash
# -g 4 -R 2 -G 10, 8 B: both programs pinned to the cores of GPU 0's NUMA node, to split placement from program.
# Configs: nccl-tests cold/warm, nccl-bench cold/warm, nccl-bench warm with libcudart and libnccl in LD_PRELOAD
# (loaded at start, as nccl-tests links them: static TLS). 8 rotating rounds. Each run's output in $LEASE_OUT/pin/.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/pin; mkdir -p $O
{ nvidia-smi -L; nproc; date -u; nvidia-smi topo -m; lscpu | grep -i 'numa\|model name\|mhz'; } > $LEASE_OUT/card.txt 2>&1
NTGL=$(bash .gpu/build-nccl-tests-gl.sh)
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | tr 'A-F' 'a-f' | sed 's/^0000//')
CPUS=$(cat /sys/bus/pci/devices/$bus/local_cpulist 2>/dev/null); CPUS=${CPUS:-0-15}
echo "GPU 0 at $bus, cores $CPUS" | tee -a $LEASE_OUT/card.txt
PRE="$(ls /usr/local/cuda/lib64/libcudart.so.13 | head -1):/usr/lib/x86_64-linux-gnu/libnccl.so.2"
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
run() { # name warm prog
  local f=$O/$1.txt
  case $3 in
  t) env GL_TIMES=1 ${2:+GL_WARM=1} timeout 120 taskset -c $CPUS $NTGL/all_reduce_perf -g 4 $A > $f 2>&1 ;;
  b) env GL_TIMES=1 ${2:+GL_WARM=1} timeout 120 taskset -c $CPUS .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $f 2>&1 ;;
  p) env LD_PRELOAD=$PRE GL_TIMES=1 ${2:+GL_WARM=1} timeout 120 taskset -c $CPUS .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $f 2>&1 ;;
  esac
  echo "$1: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }' $f) us, end $(awk '$1 == "GLE" { print $3; exit }' $f) us"
}
for i in 1 2 3 4 5 6 7 8; do
  for j in 0 1 2 3 4; do
    case $(( (i + j) % 5 )) in
    0) run g4-r$i-tests-cold "" t ;;
    1) run g4-r$i-bench-cold "" b ;;
    2) run g4-r$i-tests-warm 1 t ;;
    3) run g4-r$i-bench-warm 1 b ;;
    4) run g4-r$i-preload-warm 1 p ;;
    esac
  done
done
tar czf $LEASE_OUT/pin.tgz -C $LEASE_OUT pin && rm -rf $O
echo "end $(date +%T)"
