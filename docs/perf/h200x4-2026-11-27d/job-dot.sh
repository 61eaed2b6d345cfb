#!/usr/bin/env bash
# Lease of 2026-11-27 (seventh, fourth machine, 4 GPUs): the CUDA graphs of -g 4 -R 2 -G 10, as nccl-tests and
# nccl-bench capture them, written as DOT (cudaGraphDebugDotPrint, verbose): nccl-tests patched to write each GPU's
# graph after cudaStreamEndCapture, nccl-bench with -graph-dot.
set -u
export NCCL_NVLS_ENABLE=0
O=$LEASE_OUT
tar xzf .gpu/bin.tgz -C .gpu
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > $O/card.txt
rm -rf /tmp/nccl-tests && cp -a .gpu/nccl-tests /tmp/nccl-tests
L=$(grep -n 'CUDACHECK(cudaStreamEndCapture(args->streams\[i\], graphs.data()+i));' /tmp/nccl-tests/src/common.cu | head -1 | cut -d: -f1)
sed -i "${L}a\\      { const char* d_ = getenv(\"NT_GRAPH_DOT\"); if (d_) { char p_[512]; snprintf(p_, sizeof p_, \"%s/all_reduce-count%zu-%s-rank%d.dot\", d_, count, in_place ? \"in-place\" : \"out-of-place\", args->proc*args->nThreads*args->nGpus + args->thread*args->nGpus + i); CUDACHECK(cudaGraphDebugDotPrint(graphs[i], p_, cudaGraphDebugDotFlagsVerbose)); } }" /tmp/nccl-tests/src/common.cu
sed -n "$((L-1)),$((L+2))p" /tmp/nccl-tests/src/common.cu > $O/patch-lines.txt
NT=$(bash .gpu/build-nccl-tests.sh 2>&1 | tail -1)
echo "built $(date +%T) $NT"
mkdir -p $O/dot-nt $O/dot-gb
A="-b 8 -e 8 -g 4 -R 2 -G 10 -n 40 -w 10 -c 0"
NT_GRAPH_DOT=$O/dot-nt timeout 120 $NT/all_reduce_perf $A > $O/nt.txt 2>&1; echo "nccl-tests rc $?"
timeout 120 .gpu/bin/nccl-bench -op all_reduce $A -graph-dot $O/dot-gb > $O/gb.txt 2>&1; echo "nccl-bench rc $?"
ls -la $O/dot-nt $O/dot-gb
(cd $O && tar czf dots.tgz dot-nt dot-gb && rm -rf dot-nt dot-gb)
echo "end $(date +%T)"
