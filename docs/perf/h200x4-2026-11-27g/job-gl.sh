#!/usr/bin/env bash
# The -g 4 graph-launch run: nccl-tests (patched, NTGL) and nccl-bench (.gpu/nccl-bench-gl, .gpu/gl-times.patch) at
# 8 B, -R 2 -G 10 -n 40, each graph launch's end on the host clock (GL_TIMES=1); cold (the graphs' first launches
# in the timed region, as both programs time) and warm (GL_WARM=1: each graph launched once before it). 10 rotating
# rounds of the four at -g 4, then 6 cold rounds of the two at -g 2. Each run's output in $LEASE_OUT/gl/.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/gl; mkdir -p $O
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
run() { # name g warm prog
  local f=$O/$1.txt
  if [ "$4" = t ]; then env GL_TIMES=1 ${3:+GL_WARM=1} timeout 120 $NTGL/all_reduce_perf -g $2 $A > $f 2>&1
  else env GL_TIMES=1 ${3:+GL_WARM=1} timeout 120 .gpu/nccl-bench-gl -op all_reduce -g $2 $A > $f 2>&1; fi
  echo "$1: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }' $f) us, end $(awk '$1 == "GLE" { print $3; exit }' $f) us"
}
for i in 1 2 3 4 5 6 7 8 9 10; do
  for j in 0 1 2 3; do
    case $(( (i + j) % 4 )) in
    0) run g4-r$i-tests-cold 4 "" t ;;
    1) run g4-r$i-bench-cold 4 "" b ;;
    2) run g4-r$i-tests-warm 4 1 t ;;
    3) run g4-r$i-bench-warm 4 1 b ;;
    esac
  done
done
for i in 1 2 3 4 5 6; do
  for j in 0 1; do
    case $(( (i + j) % 2 )) in
    0) run g2-r$i-tests-cold 2 "" t ;;
    1) run g2-r$i-bench-cold 2 "" b ;;
    esac
  done
done
tar czf $LEASE_OUT/gl.tgz -C $LEASE_OUT gl && rm -rf $O
