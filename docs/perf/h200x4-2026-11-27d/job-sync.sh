#!/usr/bin/env bash
# Lease of 2026-11-27 (seventh, fifth machine, 4 GPUs): -g 4 -R 2 -G 10 at 8 B, nccl-tests against nccl-bench with
# nccl-tests' synchronisation (rounds over the streams, sched_yield after an idle round) and nccl-bench as before
# (each stream polled to its end in turn, no yield), 12 rounds, the three programs in rotating order.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > $O/card.txt
NT=$(bash .gpu/build-nccl-tests.sh 2>&1 | tail -1)
echo "phase sync $(date +%T) $NT"
A="-b 8 -e 8 -g 4 -R 2 -G 10 -n 40 -w 10 -c 0"
one() { timeout 120 "$@" $A 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
progs=("$NT/all_reduce_perf" ".gpu/bin/nccl-bench -op all_reduce" ".gpu/bin/before/nccl-bench -op all_reduce")
names=(nccl-tests nccl-bench nccl-bench-before)
for i in $(seq 12); do
  for j in 0 1 2; do
    k=$(( (i + j) % 3 ))
    echo "round $i ${names[$k]}: $(one ${progs[$k]}) us"
  done
done | tee $O/sync.txt
echo "end $(date +%T)"
