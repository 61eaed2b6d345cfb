#!/usr/bin/env bash
# Tenth lease, 2026-11-27, machine 2 (4 GPUs), 8-byte all_reduce, cold, rotating; outputs in $LEASE_OUT/p2.
#  1. -g 4 -R 2 -G 10 -n 40, 8 rounds of three: nccl-tests and nccl-bench-gl with GLPERF (nccl-bench's launching
#     goroutine locked to its thread; every thread's CPU time over the launches), and nccl-bench as published (its
#     one goroutine not locked).
#  2. A thread per GPU, plain launches (-t 4 -g 1), nccl-tests against nccl-bench at -n 40 and -n 400, 6 rounds.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/p2; mkdir -p $O
D=docs/perf/h200x4-2026-11-27h
tar xzf .gpu/bin.tgz -C .gpu
{ nvidia-smi -L; nproc; date -u; } > $LEASE_OUT/card.txt 2>&1
gcc -O2 -shared -fPIC -o /tmp/libglperf.so $D/glperf.c
NT=$(bash .gpu/build-nccl-tests.sh); NTGL=$(bash $D/build-nccl-tests-gl.sh)
echo "built $NT $NTGL $(date +%T)"
GP=/tmp/libglperf.so
t() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6 "/" $10; exit }' $1; }
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3 4 5 6 7 8; do
  for j in 0 1 2; do
    case $(( (i + j) % 3 )) in
    0) m=tests; GLPERF=$GP timeout 120 $NTGL/all_reduce_perf -g 4 $A > $O/c$i-$m.txt 2>&1 ;;
    1) m=locked; GLPERF=$GP timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $O/c$i-$m.txt 2>&1 ;;
    2) m=bench; timeout 120 .gpu/bin/nccl-bench -op all_reduce -g 4 $A > $O/c$i-$m.txt 2>&1 ;;
    esac
    echo "g4 r$i $m: $(t $O/c$i-$m.txt) us $(grep -m1 '^GLH 0' $O/c$i-$m.txt | cut -c1-160)"
  done
done
for i in 1 2 3 4 5 6; do
  for n in 40 400; do
    for j in 0 1; do
      f=$O/t$i-n$n
      if [ $(( (i + j) % 2 )) = 0 ]; then m=tests; timeout 120 $NT/all_reduce_perf -t 4 -g 1 -b 8 -e 8 -n $n -w 10 -c 0 > $f-$m.txt 2>&1
      else m=bench; timeout 120 .gpu/bin/nccl-bench -op all_reduce -t 4 -g 1 -b 8 -e 8 -n $n -w 10 -c 0 > $f-$m.txt 2>&1; fi
      echo "t4 r$i n$n $m: $(t $f-$m.txt) us"
    done
  done
done
tar czf $LEASE_OUT/p2.tgz -C $LEASE_OUT p2 && rm -rf $O
echo "end $(date +%T)"
