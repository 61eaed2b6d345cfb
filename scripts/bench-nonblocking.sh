#!/usr/bin/env bash
# On a GPU machine: what a plainly launched all-reduce costs on a non-blocking
# communicator against a blocking one, from C and from Go, in one run. The C
# reference (scripts/nonblocking-ref.c, built here against the system NCCL and
# MPI) runs under mpirun; then examples/captured (from `scripts/gpu-check.sh
# build`) for the same sizes, rank 0's time; then nccl-bench under the same
# mpirun with NCCL_COMM_BLOCKING=1 and =0, which, as the C reference, averages
# the ranks' times (nccl-tests has no non-blocking mode). NCCL runs each
# non-blocking group on a thread it starts (group.cc), which all pay.
#
#   RUNS=2 NPS="4 2" scripts/bench-nonblocking.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0
RUNS=${RUNS:-2}
NPS=${NPS:-"4 2"}
M=
for h in "${MPI_HOME:-}" /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/aarch64-linux-gnu/openmpi /usr/lib/openmpi /opt/hpcx/ompi /usr/local/mpi; do
  if [ -n "$h" ] && [ -e "$h/include/mpi.h" ]; then M=$h; break; fi
done
[ -n "$M" ] || { echo "no mpi.h found" >&2; exit 1; }
CUDA=${CUDA_HOME:-/usr/local/cuda}
gcc -O2 -o /tmp/nonblocking-ref scripts/nonblocking-ref.c -I"$M/include" -I"$CUDA/include" -L"$M/lib" -lmpi \
  -L"$CUDA/lib64" -lcudart -lnccl || exit 1
for np in $NPS; do
  for rep in $(seq "$RUNS"); do
    timeout 120 mpirun --allow-run-as-root -np "$np" --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
      /tmp/nonblocking-ref 2400 2>&1 | grep "^C np" | sed "s/$/, run $rep/"
  done
done
for np in $NPS; do
  for n in 2 16384 2097152; do
    for mode in "" -nonblocking; do
      CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((np - 1))) timeout 120 .gpu/bin/examples/captured -np "$np" -n "$n" $mode \
        -replays 300 -timeout 60s 2>&1 | grep -m1 "rank 0/" | sed "s/^/Go np $np n $n ${mode:-blocking}: /; s/results checked; //"
    done
  done
done
for np in $NPS; do
  for size in 8 65536 8388608; do
    for blk in 1 0; do
      t=$(timeout 120 mpirun --allow-run-as-root -np "$np" --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
        -x NCCL_COMM_BLOCKING=$blk -x NCCL_COMM_ID=127.0.0.1:$((29500 + RANDOM % 400)) .gpu/bin/nccl-bench -op all_reduce \
        -b "$size" -e "$size" -n 2400 -w 20 -c 0 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }')
      echo "nccl-bench np $np $size B NCCL_COMM_BLOCKING=$blk: ${t:-X} us per all-reduce (mean of ranks, out of place)"
    done
  done
done
