#!/usr/bin/env bash
# Lease of 2026-11-27 (eighth, 2 GPUs): the guard's per-thread mark (branch guard-thread-cache) on GPUs.
#  1. gpu-check.sh with the branch's binaries: everything on the system NCCL; on the wheel, VCCL and 2.30.7 the
#     device-zero test and every example (the -np examples run ranks off GPU 0, where the guard works).
#  2. GPU 0's compute apps while nccl-bench -np 2 runs, main's binary and the branch's.
#  3. internal/cgobench on one pinned core, main's and the branch's test binaries alternating (Comm.AllReduce
#     against cgo on the box's CPU).
#  4. nccl-bench's synchronisation: nccl-tests, nccl-bench (rounds with sched_yield) and nccl-bench before
#     (70cecac: each stream to its end, no yield), 8 B, -g 2 -R 2 -G 10, -np 2 plain and -np 2 -R 2 -G 10.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; } > $O/card.txt
N=$(nproc)
(JOBS=$((N - 8)) taskset -c 8-$((N - 1)) bash .gpu/build-nccl.sh v2.30.7-1 > $O/build-nccl.txt 2>&1) & bn=$!
(taskset -c 8-$((N - 1)) bash .gpu/build-vccl.sh > $O/build-vccl.txt 2>&1) & bv=$!
echo "phase check-system $(date +%T)"
ONLY=system taskset -c 0-7 bash scripts/gpu-check.sh run $O/check-system >/dev/null 2>&1 || true
echo "phase builds $(date +%T)"
wait $bn $bv
NT=$(bash .gpu/build-nccl-tests.sh 2>&1 | tail -1)
TM=$(bash scripts/build-nccl-tests-mpi.sh 2>&1 | tail -1)
echo "phase check-others $(date +%T) $NT $TM"
TESTS='^TestGPUNoContextOnDeviceZero$' ONLY="wheel vccl src" VCCL_LIB=$(tail -1 $O/build-vccl.txt) \
  SRC_LIB=$(tail -1 $O/build-nccl.txt) bash scripts/gpu-check.sh run $O/check-others > /dev/null 2>&1 || true
echo "phase gpu0 $(date +%T)"
for v in main guard; do
  b=.gpu/bin/nccl-bench; [ $v = main ] && b=.gpu/bin/main/nccl-bench
  mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x NCCL_COMM_ID=127.0.0.1:$((29500 + RANDOM % 400)) \
    $b -op all_reduce -b 8 -e 8 -n 1500000 -w 10 -c 0 > $O/gpu0-$v-bench.txt 2>&1 &
  for q in 1 2 3 4; do
    sleep 3
    { echo "== $v query $q $(date +%T)"; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader
      nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; } >> $O/gpu0.txt
  done
  wait
done
echo "phase cgobench $(date +%T)"
for r in 1 2 3 4 5 6; do
  for v in main guard; do
    [ $((r % 2)) = 0 ] && v=$([ $v = main ] && echo guard || echo main)
    t=.gpu/bin/cgobench.test; [ $v = main ] && t=.gpu/bin/main/cgobench.test
    (cd /tmp && taskset -c 3 $OLDPWD/$t -test.run '^$' -test.bench 'AllReduce(Gonccl|GoncclDevice1|Cgo)$|Noop(Gonccl|Cgo|C)$' -test.benchmem) 2>&1 |
      grep '^Benchmark' | sed "s/^/$v round $r /"
  done
done > $O/cgobench.txt
echo "phase sync $(date +%T)"
MP="mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
one() { timeout 120 "$@" 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }'; }
for i in 1 2 3 4 5 6 7 8; do
  for mode in "g2 -g 2 -R 2 -G 10" "np2 -R 0" "np2 -R 2 -G 10"; do
    set -- $mode; m=$1; shift; A="-b 8 -e 8 -n 40 -w 10 -c 0 $*"
    for j in 0 1 2; do
      k=$(( (i + j) % 3 )); p=$((29500 + RANDOM % 400))
      case "$m:$k" in
      g2:0) r=$(one $NT/all_reduce_perf $A) ;;
      g2:1) r=$(one .gpu/bin/nccl-bench -op all_reduce $A) ;;
      g2:2) r=$(one .gpu/bin/before/nccl-bench -op all_reduce $A) ;;
      np2:0) r=$(one $MP $TM/all_reduce_perf -g 1 $A) ;;
      np2:1) r=$(one $MP -x NCCL_COMM_ID=127.0.0.1:$p .gpu/bin/nccl-bench -op all_reduce -g 1 $A) ;;
      np2:2) r=$(one $MP -x NCCL_COMM_ID=127.0.0.1:$p .gpu/bin/before/nccl-bench -op all_reduce -g 1 $A) ;;
      esac
      echo "round $i $m $* prog $k: $r us"
    done
  done
done | tee $O/sync.txt
echo "end $(date +%T)"
