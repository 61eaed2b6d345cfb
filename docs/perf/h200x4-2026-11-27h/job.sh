#!/usr/bin/env bash
# Tenth lease, 2026-11-27, machine 1 (4 GPUs), run from the project's root by .gpu/lease.sh:
#  1. While VCCL, NCCL 2.30.7 and nccl-tests build on the upper half of the cores: on the system NCCL at 4 GPUs,
#     the test binary's examples (ExampleGraph_Launch among them), examples/captured -np 4 (which now uploads its
#     graph) and nccl-bench -t 4 -g 1 / -np 2 -t 2 -g 1, every checked result.
#  2. Alone on the machine: perf.sh (the -g 4 -R 2 -G graph launches counted and sampled in both programs, and the
#     thread-per-GPU layout against nccl-tests -t 4).
#  3. gpu-check.sh at 2 ranks on the four libraries (system and wheel on GPUs 0,1; VCCL and 2.30.7 on GPUs 2,3),
#     then ExampleGraph_Launch and ExampleGraph_Upload on the three others at 4 GPUs.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
D=docs/perf/h200x4-2026-11-27h
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; cat /proc/sys/kernel/perf_event_paranoid; ls /sys/bus/event_source/devices/;
  which perf gdb bpftrace; } > $O/card.txt 2>&1
N=$(nproc)
(JOBS=$((N / 2 - 4)) taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-nccl.sh v2.30.7-1 > $O/build-nccl.txt 2>&1) & bn=$!
(taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-vccl.sh > $O/build-vccl.txt 2>&1) & bv=$!
(taskset -c $((N / 2))-$((N - 1)) bash .gpu/build-nccl-tests.sh > $O/build-nt.txt 2>&1;
 taskset -c $((N / 2))-$((N - 1)) bash $D/build-nccl-tests-gl.sh > $O/build-ntgl.txt 2>&1) & bt=$!
gcc -O2 -shared -fPIC -Wall -o /tmp/libglperf.so $D/glperf.c > $O/build-glperf.txt 2>&1 && echo "glperf built"

echo "phase four $(date +%T)"
C="taskset -c 0-$((N / 2 - 1))"
$C timeout 400 .gpu/bin/nccl-gpu.test -test.v -test.run '^Example' -test.count=1 -test.timeout=380s > $O/examples4.txt 2>&1
echo "examples4 rc $?: $(grep -c -- '^--- PASS' $O/examples4.txt) passed, $(grep -c -- '--- FAIL' $O/examples4.txt) failed"
grep -- '--- FAIL' $O/examples4.txt
E=.gpu/bin/examples
for ex in "captured -np 4" "captured -np 4 -symmetric" "captured -np 4 -nonblocking"; do
  $C timeout 90 $E/$ex -timeout 45s > $O/ex.txt 2>&1; echo "example4 $ex rc $? $(grep -h 'captured:\|correct\|checksum' $O/ex.txt | head -1)"
  cat $O/ex.txt >> $O/examples4-bin.txt
done
for mode in "-t 4 -g 1" "-t 4 -g 1 -G 5" "-t 4 -g 1 -R 2 -G 5" "-np 2 -t 2 -g 1 -R 2 -G 5" "-t 2 -g 2 -G 5"; do
  $C timeout 120 .gpu/bin/nccl-bench -op all_reduce -d uint8 $mode -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 > $O/b.txt 2>&1
  echo "bench4 $mode rc $? header: $(grep -o 'nranks.*launcher [a-z]*' $O/b.txt) wrong: $(awk '/^ +[0-9]/ { print $9 "/" $13 }' $O/b.txt | tr '\n' ' ')"
  cat $O/b.txt >> $O/bench4.txt
done
echo "phase builds $(date +%T)"
wait $bn $bv $bt
echo "built: $(tail -1 $O/build-nccl.txt) $(tail -1 $O/build-vccl.txt) $(tail -1 $O/build-nt.txt) $(tail -1 $O/build-ntgl.txt)"

echo "phase perf $(date +%T)"
NT=$(tail -1 $O/build-nt.txt) NTGL=$(tail -1 $O/build-ntgl.txt) bash $D/perf.sh

echo "phase check2 $(date +%T)"
T2='TestGPUGroup|TestGPUAbortRacingGroups|TestGPUCaptured|TestGPUCollectives$|TestGPUNoContextOnDeviceZero'
VL=$(tail -1 $O/build-vccl.txt) SL=$(tail -1 $O/build-nccl.txt)
( CUDA_VISIBLE_DEVICES=0,1 ONLY=system timeout 420 bash scripts/gpu-check.sh run $O/check-system > /dev/null 2>&1
  CUDA_VISIBLE_DEVICES=0,1 TESTS="$T2" ONLY=wheel timeout 300 bash scripts/gpu-check.sh run $O/check-wheel > /dev/null 2>&1 ) & c1=$!
( CUDA_VISIBLE_DEVICES=2,3 TESTS="$T2" ONLY=vccl VCCL_LIB=$VL timeout 300 bash scripts/gpu-check.sh run $O/check-vccl > /dev/null 2>&1
  CUDA_VISIBLE_DEVICES=2,3 TESTS="$T2" ONLY=src SRC_LIB=$SL timeout 300 bash scripts/gpu-check.sh run $O/check-src > /dev/null 2>&1 ) & c2=$!
wait $c1 $c2
for l in system wheel vccl src; do
  grep -E 'tests:|FAIL' $O/check-$l/summary.txt | sed "s/^/$l: /"
  echo "$l examples ok: $(grep -c 'example ok' $O/check-$l/summary.txt), refused/skipped: $(grep -c 'refused\|skip' $O/check-$l/summary.txt)"
done
W=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib | head -1)
for l in "wheel $W" "vccl $VL" "src $SL"; do
  set -- $l
  GONCCL_NCCL_LIB=$2 timeout 120 .gpu/bin/nccl-gpu.test -test.v -test.run '^ExampleGraph_(Launch|Upload)$' -test.count=1 > $O/ex-$1.txt 2>&1
  echo "examples $1 rc $?: $(grep -c -- '^--- PASS' $O/ex-$1.txt) passed, $(grep -c -- '--- FAIL' $O/ex-$1.txt) failed"
done
echo "end $(date +%T)"
