#!/usr/bin/env bash
# Tenth lease, 2026-11-27, machine 3 (4 GPUs): -g 4 -R 2 -G 10 -n 400, 8-byte all_reduce, 3 rounds of both programs, every
# thread of the process sampled over the timed launches (GLPERF_SAMPLE_US=25 GLPERF_SAMPLE_ALL=1): who burns the
# CPU that the launching thread does not. Outputs in $LEASE_OUT/p3.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/p3; mkdir -p $O
D=docs/perf/h200x4-2026-11-27h
{ nvidia-smi -L; nproc; date -u; lscpu; } > $O/card.txt 2>&1
gcc -O2 -shared -fPIC -o /tmp/libglperf.so $D/glperf.c
NTGL=$(bash $D/build-nccl-tests-gl.sh)
echo "built $NTGL $(date +%T)"
export GLPERF=/tmp/libglperf.so GLPERF_SAMPLE_US=25 GLPERF_SAMPLE_ALL=1
A="-b 8 -e 8 -n 400 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3; do
  for j in 0 1; do
    if [ $(( (i + j) % 2 )) = 0 ]; then m=tests; timeout 120 $NTGL/all_reduce_perf -g 4 $A > $O/a$i-$m.txt 2>&1
    else m=bench; timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $O/a$i-$m.txt 2>&1; fi
    echo "a$i $m: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6 "/" $10; exit }' $O/a$i-$m.txt) us"
    grep '^GLS 0 .*samples=' $O/a$i-$m.txt | cut -c1-150
  done
done
tar czf $LEASE_OUT/p3.tgz -C $LEASE_OUT p3 && rm -rf $O
echo "end $(date +%T)"
