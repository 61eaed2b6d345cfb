#!/usr/bin/env bash
# Lease of 2026-11-27 (sixth): (1) non-blocking 8-B all-reduces, quiet machine: C (scripts/nonblocking-ref.c), the
# same program in Go (scripts/nonblocking-go) and nccl-bench, alternating rounds; (2) the wait's GPU tests with the
# final wait form on all four libraries (4 ranks; 2 ranks on GPUs 2,3) while NCCL 2.30.7, VCCL and nccl-tests build
# on cores 8+; (3) -g 4 -R 2 -G at 8 B with NCCL's INIT/TUNING lines per run, nothing else running.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT  # set by .gpu/lease.sh start
tar xzf .gpu/bin.tgz -C .gpu
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > $O/card.txt
echo "phase nonblocking $(date +%T) $(cat $O/card.txt)"
M=/usr/lib/x86_64-linux-gnu/openmpi; CUDA=/usr/local/cuda
gcc -O2 -o /tmp/nonblocking-ref scripts/nonblocking-ref.c -I$M/include -I$CUDA/include -L$M/lib -lmpi -L$CUDA/lib64 -lcudart -lnccl
mp() { timeout 90 mpirun --allow-run-as-root -np $1 --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
  -x NCCL_COMM_ID=127.0.0.1:$((29500 + RANDOM % 400)) "${@:2}"; }
run_c() { mp $1 /tmp/nonblocking-ref 2400 2>&1 | grep "^C np" | grep "n 2 \|n 16384 -non"; }
run_go() { mp $1 .gpu/diag/nonblocking-go -n 2400 2>&1 | grep "^Go np" | grep "n 2 \|n 16384 -non" |
  awk '{k=$1" "$2" "$3" "$4" "$5" "$6; s[k]+=$9; n[k]++} END {for (k in s) printf "%s %.1f us (mean of %d ranks)\n", k, s[k]/n[k], n[k]}' | sort; }
run_bench() { echo "bench np $1 n 2 -nonblocking: $(mp $1 -x NCCL_COMM_BLOCKING=0 .gpu/diag/nccl-bench-head -op all_reduce -b 8 -e 8 -n 2400 -w 20 -c 0 2>&1 |
  awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }') us"; }
for rep in 1 2 3 4 5; do
  for np in 4 2; do
    echo "round $rep np $np"
    if [ $((rep % 2)) = 1 ]; then run_c $np; run_go $np; run_bench $np; else run_bench $np; run_go $np; run_c $np; fi
  done
done 2>&1 | tee $O/nonblocking.txt
echo "phase tests $(date +%T)"
NC=$(nproc)
( JOBS=$((NC-8)) taskset -c 8-$((NC-1)) bash .gpu/build-nccl.sh v2.30.7-1 > $O/build-src.txt 2>&1 ) &
bs=$!
( taskset -c 8-$((NC-1)) bash .gpu/build-vccl.sh > $O/build-vccl.txt 2>&1 ) &
bv=$!
( taskset -c 8-$((NC-1)) bash .gpu/build-nccl-tests.sh > $O/build-nt.txt 2>&1 ) &
bt=$!
WHEEL=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib | head -1)
export GONCCL_GPU_ABORT_ROUNDS=10
mkdir -p $O/tests
T4='TestGPUGroupFailures TestGPUAbortRacingGroups TestGPUCollectivesNonBlocking TestGPUNoContextOnDeviceZero TestGPURevokeShrinkGrow'
T2='TestGPUGroupFailures TestGPUAbortRacingGroups TestGPUCollectivesNonBlocking TestGPUNoContextOnDeviceZero'
tests() {
  local label=$1 bin=$2; shift 2
  local log=$O/tests/$label.log
  for t in $T4; do
    s=$(date +%s)
    env "$@" taskset -c 0-7 $bin -test.v -test.run "^$t\$" -test.count=1 -test.timeout=150s > $O/tests/$label-4-$t.txt 2>&1
    echo "$label 4 ranks $t: rc $? $(( $(date +%s) - s ))s $(grep -c -- '--- FAIL' $O/tests/$label-4-$t.txt) FAIL lines" | tee -a $log
  done
  for t in $T2; do
    s=$(date +%s)
    env "$@" CUDA_VISIBLE_DEVICES=2,3 taskset -c 0-7 $bin -test.v -test.run "^$t\$" -test.count=1 -test.timeout=150s > $O/tests/$label-2-$t.txt 2>&1
    echo "$label 2 ranks $t: rc $? $(( $(date +%s) - s ))s $(grep -c -- '--- FAIL' $O/tests/$label-2-$t.txt) FAIL lines" | tee -a $log
  done
}
tests system .gpu/bin/nccl-gpu.test
tests wheel .gpu/bin/nccl-gpu.test GONCCL_NCCL_LIB=$WHEEL
wait $bs $bv $bt
NT=$(tail -1 $O/build-nt.txt)
SRC=$(tail -1 $O/build-src.txt); VC=$(tail -1 $O/build-vccl.txt)
echo "builds $(date +%T): src $SRC vccl $VC nt $NT"
tar xzf .gpu/bin.tgz -C .gpu
tests vccl .gpu/bin/nccl-gpu.test GONCCL_NCCL_LIB=$VC
tests src .gpu/bin/nccl-gpu.test GONCCL_NCCL_LIB=$SRC
tar czf $O/tests.tgz -C $O tests && rm -rf $O/tests
echo "phase g4 $(date +%T)"
mkdir -p $O/g4dbg
A="-b 8 -e 8 -g 4 -R 2 -G 10 -n 40 -w 10 -c 0"
for i in $(seq 12); do
  for p in tests bench; do
    if [ $p = tests ]; then cmd="$NT/all_reduce_perf $A"; else cmd=".gpu/bin/nccl-bench -op all_reduce $A"; fi
    t=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING NCCL_DEBUG_FILE=$O/g4dbg/$p-$i.%p.txt timeout 120 $cmd 2>&1 |
      awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }')
    echo "$p run $i: $t us"
  done
done | tee $O/g4-runs.txt
tar czf $O/g4dbg.tgz -C $O g4dbg && rm -rf $O/g4dbg
echo "end $(date +%T)"
