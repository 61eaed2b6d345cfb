#!/usr/bin/env bash
# Lease of 2026-11-27 (seventh, 2 GPUs): the wait's polls inside one C call (ccall.Poll, bursts of 64) against the
# build before (ea7a4af, one C call per poll) and C, with nbtrace and without, at 2 ranks, on the system NCCL; then
# the wait's GPU tests at 2 ranks on every library while NCCL 2.30.7 and VCCL build on cores 8+; then the same
# rounds on the wheel, VCCL and 2.30.7.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > $O/card.txt
nproc >> $O/card.txt
B=.gpu/bin/before/nonblocking-go
WHEEL=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib | head -1)
echo "phase nbtrace $(date +%T) $(head -1 $O/card.txt)"
RUNS=6 NPS=2 NBTRACE=1 GO_BEFORE=$B bash scripts/bench-nonblocking.sh > $O/nbtrace.txt 2>&1
echo "phase plain $(date +%T)"
RUNS=6 NPS=2 GO_BEFORE=$B bash scripts/bench-nonblocking.sh > $O/plain.txt 2>&1
echo "phase wheel $(date +%T)"
RUNS=4 NPS=2 GO_BEFORE=$B NCCL_LIB=$WHEEL/libnccl.so.2 bash scripts/bench-nonblocking.sh > $O/wheel.txt 2>&1
echo "phase tests $(date +%T)"
NC=$(nproc)
( JOBS=$((NC-8)) taskset -c 8-$((NC-1)) bash .gpu/build-nccl.sh v2.30.7-1 > $O/build-src.txt 2>&1 ) &
bs=$!
( taskset -c 8-$((NC-1)) bash .gpu/build-vccl.sh > $O/build-vccl.txt 2>&1 ) &
bv=$!
export GONCCL_GPU_ABORT_ROUNDS=10
mkdir -p $O/tests
T2='TestGPUGroupFailures TestGPUAbortRacingGroups TestGPUCollectivesNonBlocking TestGPUNoContextOnDeviceZero TestGPURevokeShrinkGrow'
tests() {
  local label=$1 bin=$2; shift 2
  for t in $T2; do
    s=$(date +%s)
    env "$@" taskset -c 0-7 $bin -test.v -test.run "^$t\$" -test.count=1 -test.timeout=150s > $O/tests/$label-2-$t.txt 2>&1
    echo "$label 2 ranks $t: rc $? $(( $(date +%s) - s ))s $(grep -c -- '--- FAIL' $O/tests/$label-2-$t.txt) FAIL lines $(grep -c -- '--- SKIP' $O/tests/$label-2-$t.txt) SKIP lines" | tee -a $O/tests.txt
  done
}
tests system .gpu/bin/nccl-gpu.test
tests wheel .gpu/bin/nccl-gpu.test GONCCL_NCCL_LIB=$WHEEL/libnccl.so.2
wait $bs $bv
SRC=$(tail -1 $O/build-src.txt); VC=$(tail -1 $O/build-vccl.txt)
echo "builds $(date +%T): src $SRC vccl $VC"
tests vccl .gpu/bin/nccl-gpu.test GONCCL_NCCL_LIB=$VC/libnccl.so.2
tests src .gpu/bin/nccl-gpu.test GONCCL_NCCL_LIB=$SRC/libnccl.so.2
tar czf $O/tests.tgz -C $O tests && rm -rf $O/tests
echo "phase vccl $(date +%T)"
RUNS=4 NPS=2 GO_BEFORE=$B NCCL_LIB=$VC/libnccl.so.2 bash scripts/bench-nonblocking.sh > $O/vccl.txt 2>&1
echo "phase src $(date +%T)"
RUNS=4 NPS=2 GO_BEFORE=$B NCCL_LIB=$SRC/libnccl.so.2 bash scripts/bench-nonblocking.sh > $O/src.txt 2>&1
echo "end $(date +%T)"
