#!/usr/bin/env bash
# Lease of 2026-11-27 (eighth, 4 GPUs, machine 1): the guard's mark at 4 ranks, then -g 4 -R 2 -G 10 at 8 B with nccl-bench's
# new synchronisation: nccl-tests, nccl-bench (fab7e80: rounds with sched_yield) and nccl-bench before (70cecac);
# then internal/cgobench of 37b14b0 (main) against the short-frame call path (t8), and GPU 0 under nccl-bench -np 4.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; } > $O/card.txt
NT=$(bash .gpu/build-nccl-tests.sh 2>&1 | tail -1)
echo "phase tests $(date +%T)"
for t in TestGPUNoContextOnDeviceZero TestGPUCollectivesMultiProcess; do
  timeout 120 .gpu/bin/nccl-gpu.test -test.v -test.run "^$t\$" -test.count=1 > $O/$t.txt 2>&1; echo "$t rc $?"
done | tee $O/tests.txt
E=.gpu/bin/examples
for ex in "allreduce -np 4" "captured -np 4" "captured -np 4 -nonblocking" "captured -np 4 -symmetric"; do
  timeout 120 $E/$ex -timeout 45s > $O/ex.txt 2>&1; echo "example $ex rc $? $(grep -h 'captured:\|checksum\|correct' $O/ex.txt | head -3 | tr '\n' ' ')"
done | tee -a $O/tests.txt
echo "phase g4 $(date +%T)"
A="-b 8 -e 8 -g 4 -R 2 -G 10 -n 40 -w 10 -c 0"
one() { timeout 120 "$@" $A 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
progs=("$NT/all_reduce_perf" ".gpu/bin/nccl-bench -op all_reduce" ".gpu/bin/before/nccl-bench -op all_reduce")
for i in $(seq 14); do
  for j in 0 1 2; do
    k=$(( (i + j) % 3 ))
    echo "round $i g4 -g 4 -R 2 -G 10 prog $k: $(one ${progs[$k]}) us"
  done
done | tee $O/sync.txt
echo "phase cgobench $(date +%T)"
for r in 1 2 3 4 5 6; do
  for v in main t8; do
    [ $((r % 2)) = 0 ] && v=$([ $v = main ] && echo t8 || echo main)
    t=.gpu/bin/cgobench.test; [ $v = t8 ] && t=.gpu/bin/cgobench-t8.test
    (cd /tmp && taskset -c 3 $OLDPWD/$t -test.run '^$' -test.bench 'AllReduce(Gonccl|GoncclDevice1|Cgo)$|Noop(Gonccl|Cgo|C)$' -test.benchmem) 2>&1 |
      grep '^Benchmark' | sed "s/^/$v round $r /"
  done
done > $O/cgobench.txt
echo "phase gpu0 $(date +%T)"
.gpu/bin/nccl-bench -np 4 -op all_reduce -b 8 -e 8 -n 1500000 -w 10 -c 0 > $O/gpu0-bench.txt 2>&1 &
for q in 1 2 3 4; do
  sleep 3
  { echo "== query $q $(date +%T)"; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; } >> $O/gpu0.txt
done
wait
echo "end $(date +%T)"
