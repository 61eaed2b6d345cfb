#!/usr/bin/env bash
# One process, 4 GPUs, -R 2 -G 10 -n 40, 8 B, cold (as published): the graphs launched from one thread (nccl-tests
# -g 4, nccl-bench -g 4) against one thread per GPU (nccl-tests -t 4 -g 1; nccl-bench -g 4 with GL_PAR: each GPU's
# launches from a goroutine locked to its own thread). 6 rotating rounds; outputs in $LEASE_OUT/par/.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/par; mkdir -p $O
{ nvidia-smi -L; nproc; date -u; } > $LEASE_OUT/card.txt 2>&1
NT=$(bash .gpu/build-nccl-tests.sh)
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3 4 5 6; do
  for j in 0 1 2 3; do
    case $(( (i + j) % 4 )) in
    0) m=tests-g4; timeout 120 $NT/all_reduce_perf -g 4 $A > $O/r$i-$m.txt 2>&1 ;;
    1) m=tests-t4; timeout 120 $NT/all_reduce_perf -t 4 -g 1 $A > $O/r$i-$m.txt 2>&1 ;;
    2) m=bench-g4; timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $O/r$i-$m.txt 2>&1 ;;
    3) m=bench-par; GL_PAR=1 timeout 120 .gpu/nccl-bench-gl -op all_reduce -g 4 $A > $O/r$i-$m.txt 2>&1 ;;
    esac
    echo "r$i $m: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }' $O/r$i-$m.txt) us"
  done
done
tar czf $LEASE_OUT/par.tgz -C $LEASE_OUT par
echo "end $(date +%T)"
