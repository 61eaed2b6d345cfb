#!/usr/bin/env bash
# Lease of 2026-11-27 (seventh, second machine, 4 GPUs): (1) nbtrace at 4 ranks: C, gonccl, and gonccl with libnccl
# and libcudart preloaded (static TLS, as C links them); (2) -g 4 -R 2 -G 10 at 8 B, nccl-tests against nccl-bench,
# 24 alternating pairs, nothing else running.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > $O/card.txt; nproc >> $O/card.txt
echo "phase nbtrace4 $(date +%T) $(head -1 $O/card.txt)"
RUNS=6 NPS=4 NBTRACE=1 GO_ALT=.gpu/go-preload.sh GO_ALT_LABEL=Go-preload bash scripts/bench-nonblocking.sh > $O/nbtrace4.txt 2>&1
echo "phase build $(date +%T)"
NT=$(bash .gpu/build-nccl-tests.sh 2>&1 | tail -1)
echo "phase g4 $(date +%T) $NT"
A="-b 8 -e 8 -g 4 -R 2 -G 10 -n 40 -w 10 -c 0"
t() { timeout 120 $NT/all_reduce_perf $A 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
b() { timeout 120 .gpu/bin/nccl-bench -op all_reduce $A 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
for i in $(seq 24); do
  if [ $((i % 2)) = 1 ]; then x=$(t); y=$(b); else y=$(b); x=$(t); fi
  echo "pair $i: nccl-tests $x us nccl-bench $y us"
done | tee $O/g4-pairs.txt
echo "end $(date +%T)"
