#!/usr/bin/env bash
# On a GPU machine: builds nccl-tests with MPI (one process per GPU under
# mpirun) from .gpu/nccl-tests into /tmp/nccl-tests-mpi and prints the folder
# of its binaries. MPI_HOME, or the first of the usual Open MPI homes that has
# mpi.h. Exits 1, saying why, where it cannot.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
dir=
for h in "${MPI_HOME:-}" /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/aarch64-linux-gnu/openmpi /usr/lib/openmpi /opt/hpcx/ompi /usr/local/mpi; do
  if [ -n "$h" ] && [ -e "$h/include/mpi.h" ]; then dir=$h; break; fi
done
[ -n "$dir" ] || { echo "no mpi.h found: nccl-tests cannot be built with MPI here" >&2; exit 1; }
[ -d /tmp/nccl-tests-mpi ] || cp -a .gpu/nccl-tests /tmp/nccl-tests-mpi
make -s -C /tmp/nccl-tests-mpi -j"$(nproc)" MPI=1 MPI_HOME="$dir" NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/tmp/nccl-tests-mpi-build.log 2>&1 ||
  { tail -20 /tmp/nccl-tests-mpi-build.log >&2; exit 1; }
echo /tmp/nccl-tests-mpi/build
