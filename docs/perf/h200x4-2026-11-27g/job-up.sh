#!/usr/bin/env bash
# Graph.Upload on GPUs: nccl-bench-gl -g 4 and -g 2, -R 2 -G 10 -n 40, 8 B: cold (first launches upload in the timed
# region), uploaded (GL_UPLOAD: Graph.Upload of each graph, streams synchronised, before it), warm (GL_WARM: each
# graph launched once before it). 6 rotating rounds; outputs in $LEASE_OUT/up/.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT/up; mkdir -p $O
{ nvidia-smi -L; nproc; date -u; } > $LEASE_OUT/card.txt 2>&1
A="-b 8 -e 8 -n 40 -w 10 -c 0 -R 2 -G 10"
for i in 1 2 3 4 5 6; do
  for g in 4 2; do
    for j in 0 1 2; do
      case $(( (i + j) % 3 )) in
      0) m=cold; e= ;;
      1) m=upload; e=GL_UPLOAD=1 ;;
      2) m=warm; e=GL_WARM=1 ;;
      esac
      f=$O/g$g-r$i-$m.txt
      env GL_TIMES=1 $e timeout 120 .gpu/nccl-bench-gl -op all_reduce -g $g $A > $f 2>&1
      echo "g$g r$i $m: $(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }' $f) us, first launch ends $(awk '$1 == "GLT" && $3 == 0 { print $4; exit }' $f) us"
    done
  done
done
tar czf $LEASE_OUT/up.tgz -C $LEASE_OUT up && rm -rf $O
echo "end $(date +%T)"
