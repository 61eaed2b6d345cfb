#!/usr/bin/env bash
# Lease of 2026-11-27 (ninth, 4 GPUs): the Group launch without runtime defers and Graph.Upload on GPUs, then the -g 4
# graph-launch run.
#  1. The GPU suite at 4 ranks on the system NCCL (but the two long fault tests), while VCCL, 2.30.7 and the patched
#     nccl-tests build on cores 32+.
#  2. gpu-check.sh at 2 ranks: system (every test, every example) then the wheel on GPUs 0,1; VCCL then 2.30.7 on
#     GPUs 2,3 at the same time (group, captured and collective tests, every example).
#  3. .gpu/job-gl.sh alone on the machine.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; } > $O/card.txt
N=$(nproc)
(JOBS=$((N / 2 - 4)) taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-nccl.sh v2.30.7-1 > $O/build-nccl.txt 2>&1) & bn=$!
(taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-vccl.sh > $O/build-vccl.txt 2>&1) & bv=$!
(taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-nccl-tests.sh > $O/build-nt.txt 2>&1;
 taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-nccl-tests-gl.sh > $O/build-ntgl.txt 2>&1) & bt=$!
echo "phase tests4 $(date +%T)"
for one in $(.gpu/bin/nccl-gpu.test -test.list TestGPU | grep -v 'TestGPUFaultPeerDies\|TestGPUFaultAbortWatchdog\|TestGPUFaultChild'); do
  taskset -c 0-$((N / 2 - 1)) timeout 150 .gpu/bin/nccl-gpu.test -test.v -test.run "^$one\$" -test.count=1 -test.timeout=140s >> $O/tests4.txt 2>&1 ||
    { grep -q -- "--- FAIL: $one" $O/tests4.txt || echo "--- FAIL: $one (no verdict)" >> $O/tests4.txt; }
done
echo "tests4: $(grep -c -- '^--- PASS' $O/tests4.txt) passed, $(grep -c -- '--- FAIL' $O/tests4.txt) failed, $(grep -c -- '^--- SKIP' $O/tests4.txt) skipped"
E=.gpu/bin/examples
for ex in "allreduce -np 4" "captured -np 4" "captured -np 4 -symmetric" "captured -np 4 -nonblocking" "multigpu" "sendrecv"; do
  timeout 90 $E/$ex -timeout 45s > $O/ex.txt 2>&1; echo "example4 $ex rc $? $(grep -h 'captured:\|correct\|checksum' $O/ex.txt | head -1)"
done
for mode in "-G 5" "-R 2 -G 5"; do
  timeout 120 .gpu/bin/nccl-bench -op all_reduce -d uint8 -g 4 $mode -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 > $O/bench4.txt 2>&1
  echo "bench4 -g 4 $mode rc $? wrong-columns: $(awk '/^ +[0-9]/ { print $9 "/" $13 }' $O/bench4.txt | tr '\n' ' ')"
done
echo "phase builds $(date +%T)"
wait $bn $bv $bt
echo "built: $(tail -1 $O/build-nccl.txt) $(tail -1 $O/build-vccl.txt) $(tail -1 $O/build-nt.txt) $(tail -1 $O/build-ntgl.txt)"
echo "phase check2 $(date +%T)"
T2='TestGPUGroup|TestGPUAbortRacingGroups|TestGPUInitRankInsideGroup|TestGPUCaptured|TestGPUCollectives$|TestGPUCollectivesNonBlocking|TestGPUNoContextOnDeviceZero'
( CUDA_VISIBLE_DEVICES=0,1 ONLY=system bash scripts/gpu-check.sh run $O/check-system > /dev/null 2>&1
  CUDA_VISIBLE_DEVICES=0,1 TESTS="$T2" ONLY=wheel bash scripts/gpu-check.sh run $O/check-wheel > /dev/null 2>&1 ) & c1=$!
( CUDA_VISIBLE_DEVICES=2,3 TESTS="$T2" ONLY=vccl VCCL_LIB=$(tail -1 $O/build-vccl.txt) bash scripts/gpu-check.sh run $O/check-vccl > /dev/null 2>&1
  CUDA_VISIBLE_DEVICES=2,3 TESTS="$T2" ONLY=src SRC_LIB=$(tail -1 $O/build-nccl.txt) bash scripts/gpu-check.sh run $O/check-src > /dev/null 2>&1 ) & c2=$!
wait $c1 $c2
for l in system wheel vccl src; do grep -E 'tests:|FAIL' $O/check-$l/summary.txt | sed "s/^/$l: /"; echo "$l examples ok: $(grep -c 'example ok' $O/check-$l/summary.txt)"; done
echo "phase gl $(date +%T)"
NT=$(tail -1 $O/build-nt.txt) NTGL=$(tail -1 $O/build-ntgl.txt) bash .gpu/job-gl.sh
echo "end $(date +%T)"
