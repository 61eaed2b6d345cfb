#!/usr/bin/env bash
# Lease of 2026-11-27 (eighth, 4 GPUs, second job): the short-frame call path (trampoline8) on real NCCL 2.28.3 at 4
# ranks (the GPU tests but the three long fault tests, -np 4 examples), then internal/cgobench of 37b14b0 (main)
# against it, 6 more alternating rounds on one pinned core.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; } > $O/card.txt
echo "phase tests $(date +%T)"
timeout 200 .gpu/bin/nccl-gpu.test -test.v -test.run TestGPU -test.skip 'TestGPUFaultPeerDies|TestGPUAbortRacingGroups|TestGPUFaultAbortWatchdog' \
  -test.count=1 -test.timeout=190s > $O/tests-4.txt 2>&1; echo "tests rc $?"
E=.gpu/bin/examples
for ex in "allreduce -np 4" "captured -np 4 -symmetric"; do
  timeout 60 $E/$ex -timeout 45s > $O/ex.txt 2>&1; echo "example $ex rc $? $(grep -h 'captured:\|correct' $O/ex.txt | head -1)"
done
echo "phase cgobench $(date +%T)"
for r in 7 8 9 10 11 12; do
  for v in main t8; do
    [ $((r % 2)) = 0 ] && v=$([ $v = main ] && echo t8 || echo main)
    t=.gpu/bin/cgobench.test; [ $v = t8 ] && t=.gpu/bin/cgobench-t8.test
    (cd /tmp && taskset -c 3 $OLDPWD/$t -test.run '^$' -test.bench 'AllReduce(Gonccl|GoncclDevice1|Cgo)$|Noop(Gonccl|Cgo|C)$' -test.benchmem) 2>&1 |
      grep '^Benchmark' | sed "s/^/$v round $r /"
  done
done > $O/cgobench.txt
echo "end $(date +%T)"
