#!/usr/bin/env bash
# One process, 4 GPUs, 8-byte all_reduce, cold (as published), both programs alternating; outputs in $LEASE_OUT/perf.
#  1. -g 4 -R 2 -G 10 -n 40, 8 rounds: the launching thread's counters over the timed graph launches (GLPERF,
#     glperf.c: CPU time, run-queue wait, context switches, migrations, page faults, hardware counters where the
#     VM has them, the other threads' CPU time).
#  2. -g 4 -R 2 -G 10 -n 400, 3 rounds: where that thread spends its time, sampled every 25 µs of its CPU time
#     (GLPERF_SAMPLE_US): samples per mapped file and the hottest blocks.
#  3. One thread per GPU (nccl-tests -t 4 -g 1 against nccl-bench -t 4 -g 1), plain, -G 10 and -R 2 -G 10, -n 40,
#     5 rounds.
# NT and NTGL name the folders of nccl-tests and of the instrumented nccl-tests (build-nccl-tests-gl.sh).
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/perf; mkdir -p $O
ldd $NTGL/all_reduce_perf > $O/ldd-tests.txt 2>&1
GP=/tmp/libglperf.so
t() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6 "/" $10; exit }' $1; }
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3 4 5 6 7 8; do
  for j in 0 1; do
    if [ $(( (i + j) % 2 )) = 0 ]; then m=tests; GLPERF=$GP timeout 120 $NTGL/all_reduce_perf -g 4 $A > $O/c$i-$m.txt 2>&1
    else m=bench; GLPERF=$GP timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $O/c$i-$m.txt 2>&1; fi
    echo "count r$i $m: $(t $O/c$i-$m.txt) us; $(grep -m1 '^GLP 0' $O/c$i-$m.txt | cut -c1-150)"
  done
done
A="-b 8 -e 8 -n 400 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3; do
  for j in 0 1; do
    if [ $(( (i + j) % 2 )) = 0 ]; then m=tests; GLPERF=$GP GLPERF_SAMPLE_US=25 timeout 120 $NTGL/all_reduce_perf -g 4 $A > $O/s$i-$m.txt 2>&1
    else m=bench; GLPERF=$GP GLPERF_SAMPLE_US=25 timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $O/s$i-$m.txt 2>&1; fi
    echo "sample r$i $m: $(t $O/s$i-$m.txt) us; $(grep -m1 '^GLS 0 samples' $O/s$i-$m.txt | cut -c1-200)"
  done
done
for i in 1 2 3 4 5; do
  for mode in "" "-G 10" "-R 2 -G 10"; do
    for j in 0 1; do
      f=$O/t$i-$(echo "x$mode" | tr -d ' -')
      if [ $(( (i + j) % 2 )) = 0 ]; then m=tests; timeout 120 $NT/all_reduce_perf -t 4 -g 1 -b 8 -e 8 -n 40 -w 10 -c 0 $mode > $f-$m.txt 2>&1
      else m=bench; timeout 120 .gpu/bin/nccl-bench -op all_reduce -t 4 -g 1 -b 8 -e 8 -n 40 -w 10 -c 0 $mode > $f-$m.txt 2>&1; fi
      echo "t4 r$i [$mode] $m: $(t $f-$m.txt) us"
    done
  done
done
tar czf $LEASE_OUT/perf.tgz -C $LEASE_OUT perf && rm -rf $O
echo "perf end $(date +%T)"
