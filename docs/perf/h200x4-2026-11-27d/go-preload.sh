#!/usr/bin/env bash
# scripts/nonblocking-go with libnccl and libcudart loaded at the process's start (LD_PRELOAD), as the C program
# links them, instead of dlopen'ed by gonccl: their thread-local storage is then static in every thread.
P="/usr/lib/x86_64-linux-gnu/libnccl.so.2:$(ls /usr/local/cuda/lib64/libcudart.so.[0-9]* | head -1)"
export LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$P"
exec "$(dirname "$0")/bin/nonblocking-go" "$@"
