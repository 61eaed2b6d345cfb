#!/usr/bin/env bash
# -g 4 -R 2 -G 10, 8 B, warm graphs (GL_WARM): where the Go process's slower cudaGraphLaunch comes from.
# Configs: nccl-tests; nccl-bench; nccl-bench with the timed launches in a C loop inside the Go process (GL_CLOOP,
# .gpu/gl/glloop.c); nccl-bench with a quiet runtime (GOMAXPROCS=4 GOGC=off GODEBUG=asyncpreemptoff=1).
# 8 rotating rounds; each run's output in $LEASE_OUT/env/.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/env; mkdir -p $O
{ nvidia-smi -L; nproc; date -u; } > $LEASE_OUT/card.txt 2>&1
NTGL=$(bash .gpu/build-nccl-tests-gl.sh)
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
run() { # name prog
  local f=$O/$1.txt
  case $2 in
  t) env GL_TIMES=1 GL_WARM=1 timeout 120 $NTGL/all_reduce_perf -g 4 $A > $f 2>&1 ;;
  b) env GL_TIMES=1 GL_WARM=1 timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $f 2>&1 ;;
  c) env GL_CLOOP=$PWD/.gpu/gl/libglloop.so GL_TIMES=1 GL_WARM=1 timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $f 2>&1 ;;
  q) env GOMAXPROCS=4 GOGC=off GODEBUG=asyncpreemptoff=1 GL_TIMES=1 GL_WARM=1 timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $f 2>&1 ;;
  esac
  echo "$1: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }' $f) us, end $(awk '$1 == "GLE" { print $3; exit }' $f) us"
}
for i in 1 2 3 4 5 6 7 8; do
  for j in 0 1 2 3; do
    case $(( (i + j) % 4 )) in
    0) run r$i-tests t ;;
    1) run r$i-bench b ;;
    2) run r$i-cloop c ;;
    3) run r$i-quiet q ;;
    esac
  done
done
tar czf $LEASE_OUT/env.tgz -C $LEASE_OUT env && rm -rf $O
echo "end $(date +%T)"
