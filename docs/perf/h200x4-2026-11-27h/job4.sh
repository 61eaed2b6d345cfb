#!/usr/bin/env bash
# Tenth lease, 2026-11-27, machine 4 (4 GPUs): the test binary's examples at 4 GPUs on the system NCCL (ExampleOpen now
# checks what holds on every machine), then -g 4 -R 2 -G 10 -n 40, 8-byte all_reduce, cold, both programs as
# published (no instrumentation), 8 rotating rounds. Outputs in $LEASE_OUT/p4.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/p4; mkdir -p $O
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; } > $O/card.txt 2>&1
NT=$(bash .gpu/build-nccl-tests.sh)
timeout 200 .gpu/bin/nccl-gpu.test -test.v -test.run '^Example' -test.count=1 > $O/examples4.txt 2>&1
echo "examples4 rc $?: $(grep -c -- '^--- PASS' $O/examples4.txt) passed, $(grep -c -- '--- FAIL' $O/examples4.txt) failed"
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3 4 5 6 7 8; do
  for j in 0 1; do
    if [ $(( (i + j) % 2 )) = 0 ]; then m=tests; timeout 120 $NT/all_reduce_perf -g 4 $A > $O/c$i-$m.txt 2>&1
    else m=bench; timeout 120 .gpu/bin/nccl-bench -op all_reduce -g 4 $A > $O/c$i-$m.txt 2>&1; fi
    echo "g4 r$i $m: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6 "/" $10; exit }' $O/c$i-$m.txt) us"
  done
done
tar czf $LEASE_OUT/p4.tgz -C $LEASE_OUT p4 && rm -rf $O
echo "end $(date +%T)"
