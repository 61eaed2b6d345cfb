#!/usr/bin/env bash
# On a GPU machine: what a plainly launched all-reduce costs on a non-blocking
# communicator against a blocking one, from C and from Go, in one run. In each
# run, one after the other under the same mpirun: the C reference
# (scripts/nonblocking-ref.c, built here against the system NCCL and MPI) and
# the same program written with gonccl (scripts/nonblocking-go, from
# `scripts/gpu-check.sh build`), each the mean of the ranks' times at 8 B,
# 64 KiB and 8 MiB; the two alternate which goes first. Then nccl-bench under
# the same mpirun with NCCL_COMM_BLOCKING=1 and =0, which, as the C reference,
# averages the ranks' times (nccl-tests has no non-blocking mode): the
# difference from scripts/nonblocking-go is the harness's (buffers at shifting
# offsets). NCCL runs each non-blocking group on a thread it starts (group.cc),
# which all pay.
#
# NCCL_LIB=PATH runs both programs and nccl-bench on another libnccl.so.2 (a
# wheel's, a build of VCCL or of an NCCL release): the C program through
# LD_LIBRARY_PATH, gonccl through GONCCL_NCCL_LIB.
#
# GO_ALT=PATH adds another program to the rounds, named GO_ALT_LABEL (default
# Go-alt) in its lines: another build of scripts/nonblocking-go (a change's
# before and after, beside C, in one run), or a script that runs it another
# way (exec with another environment).
#
# NBTRACE=1 preloads scripts/nbtrace.c into both programs: each process then
# prints how long NCCL's launch threads took to start, run and be joined
# (lines "C nbtrace ..." and "Go nbtrace ...").
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
TRACE=
if [ "${NBTRACE:-0}" = 1 ]; then
  gcc -O2 -shared -fPIC -o /tmp/nbtrace.so scripts/nbtrace.c -ldl -lpthread || exit 1
  TRACE=/tmp/nbtrace.so
fi
if [ -n "${NCCL_LIB:-}" ]; then # another libnccl.so.2: C finds it first, Go is told
  [ -f "$NCCL_LIB" ] || { echo "NCCL_LIB=$NCCL_LIB: no such file" >&2; exit 1; }
  export LD_LIBRARY_PATH=$(dirname "$NCCL_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} GONCCL_NCCL_LIB=$NCCL_LIB
fi
mp() {
  timeout 120 mpirun --allow-run-as-root -np "$1" --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
    ${GONCCL_NCCL_LIB:+-x GONCCL_NCCL_LIB} -x LD_PRELOAD=$TRACE -x NCCL_COMM_ID=127.0.0.1:$((29500 + RANDOM % 400)) "${@:2}"
}
traced() { # the nbtrace lines of a run's output, named for its program
  grep "^nbtrace" | sed "s/^/$1 /; s/$/, run $2/"
}
c_ref() {
  local out
  out=$(mp "$1" /tmp/nonblocking-ref 2400 2>&1)
  echo "$out" | grep "^C nccl version" | sed "s/$/, run $2/"
  echo "$out" | grep "^C np" | sed "s/$/, run $2/"
  echo "$out" | traced C "$2"
}
go_prog() { # LABEL BIN NP RUN: the ranks' lines, averaged as the C program does
  local out
  out=$(mp "$3" "$2" -n 2400 2>&1)
  echo "$out" | grep "^Go nccl version" | sed "s/^Go /$1 /; s/$/, run $4/"
  echo "$out" | grep "^Go np" | sed "s/^Go /$1 /" |
    awk -v run="$4" '{ k = $1 " " $2 " " $3 " " $4 " " $5 " " $6; s[k] += $9; n[k]++ }
      END { for (k in s) printf "%s %.1f us per all-reduce launched plainly (mean of %d ranks), run %s\n", k, s[k] / n[k], n[k], run }' | sort -k5,5n -k6,6r
  echo "$out" | traced "$1" "$4"
}
go_ref() { go_prog Go .gpu/bin/nonblocking-go "$@"; }
go_alt() { go_prog "${GO_ALT_LABEL:-Go-alt}" "$GO_ALT" "$@"; }
progs=(c_ref go_ref)
[ -n "${GO_ALT:-}" ] && progs+=(go_alt)
for np in $NPS; do
  for rep in $(seq "$RUNS"); do # each round starts with the next program
    for j in $(seq 0 $((${#progs[@]} - 1))); do
      "${progs[$(((j + rep - 1) % ${#progs[@]}))]}" "$np" "$rep"
    done
  done
done
for np in $NPS; do
  for size in 8 65536 8388608; do
    for blk in 1 0; do
      t=$(timeout 120 mpirun --allow-run-as-root -np "$np" --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
        ${GONCCL_NCCL_LIB:+-x GONCCL_NCCL_LIB} -x NCCL_COMM_BLOCKING=$blk -x NCCL_COMM_ID=127.0.0.1:$((29500 + RANDOM % 400)) .gpu/bin/nccl-bench -op all_reduce \
        -b "$size" -e "$size" -n 2400 -w 20 -c 0 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }')
      echo "nccl-bench np $np $size B NCCL_COMM_BLOCKING=$blk: ${t:-X} us per all-reduce (mean of ranks, out of place)"
    done
  done
done
