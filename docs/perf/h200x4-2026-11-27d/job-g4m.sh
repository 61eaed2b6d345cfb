#!/usr/bin/env bash
# Lease of 2026-11-27 (seventh, third machine, 4 GPUs): where -g 4 -R 2 -G's +0.4 us per all-reduce goes. The same
# 400 all-reduces per GPU split as 40 x 10 graph launches (the usual), 400 x 1 and 4 x 100: a gap per all-reduce that
# stays the same is the GPU's (the graph's nodes); one that grows with the launches is the launches'.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > $O/card.txt; nproc >> $O/card.txt
NT=$(bash .gpu/build-nccl-tests.sh 2>&1 | tail -1)
echo "phase g4m $(date +%T) $NT"
t() { timeout 120 $NT/all_reduce_perf $1 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
b() { timeout 120 .gpu/bin/nccl-bench -op all_reduce $1 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
for i in $(seq 8); do
  for nG in "40 10" "400 1" "4 100"; do
    set -- $nG
    A="-b 8 -e 8 -g 4 -R 2 -G $2 -n $1 -w 10 -c 0"
    if [ $((i % 2)) = 1 ]; then x=$(t "$A"); y=$(b "$A"); else y=$(b "$A"); x=$(t "$A"); fi
    echo "n $1 G $2 pair $i: nccl-tests $x us nccl-bench $y us"
  done
done | tee $O/g4-matrix.txt
echo "end $(date +%T)"
