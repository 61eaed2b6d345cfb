#!/usr/bin/env bash
# Tenth lease, 2026-11-27, machine 4 again (4 GPUs): the header's library lines of nccl-bench (825c0ef) at 2 and 4 ranks,
# one process and one per GPU, on the system NCCL and the wheel, every result checked (.gpu/nccl-bench-new).
set -u
export NCCL_NVLS_ENABLE=0
W=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib | head -1)
for lib in system "$W"; do
  E=""; [ "$lib" != system ] && E="GONCCL_NCCL_LIB=$lib"
  for m in "-g 2" "-g 4" "-np 2" "-np 4"; do
    out=$(env $E timeout 120 .gpu/nccl-bench-new -op all_reduce $m -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 2>&1)
    echo "== $lib $m rc $?"; echo "$out" | head -2; echo "$out" | grep "Out of bounds"
  done
  env $E timeout 120 .gpu/nccl-bench-new -op all_reduce -np 2 -b 8 -e 8 -n 2 -w 1 -json 2>&1 | python3 -c 'import json,sys; d=json.load(sys.stdin); print("json", d["nccl"], d["nccl_path"], d["cudart"], d["cudart_path"])'
done
