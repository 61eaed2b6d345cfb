"""The Python side of examples/withpython: one NCCL rank in a Python process.

It meets the Go rank through a PyTorch TCPStore (torch.distributed.TCPStore,
the store torchrun runs), takes or publishes NCCL's unique id as its 128 raw
bytes, forms the communicator with CuPy's NCCL binding, all-reduces
(rank+1)*(i%100) and checks every element.

    python3 peer.py --master --rank 1 --dev 1 &   # hosts the store
    ./withpython -rank 0 -dev 0
"""
import argparse
import datetime
import sys

import cupy as cp
import numpy as np
import torch.distributed as dist
from cupy.cuda import nccl


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--store", default="127.0.0.1:29555")
    p.add_argument("--key", default="gonccl/withpython/unique_id")
    p.add_argument("--master", action="store_true", help="host the TCPStore")
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--size", type=int, default=2)
    p.add_argument("--dev", type=int, default=1)
    p.add_argument("--n", type=int, default=1 << 20)
    p.add_argument("--timeout", type=float, default=60)
    a = p.parse_args()
    host, port = a.store.rsplit(":", 1)
    timeout = datetime.timedelta(seconds=a.timeout)
    store = dist.TCPStore(host, int(port), is_master=a.master, timeout=timeout)
    cp.cuda.Device(a.dev).use()
    if a.rank == 0:
        uid = nccl.get_unique_id()
        raw = bytes(b & 0xFF for b in uid) if isinstance(uid, tuple) else bytes(uid)
        store.set(a.key, raw)
    else:
        raw = store.get(a.key)
    if len(raw) != 128:
        sys.exit(f"peer: the id under {a.key!r} is {len(raw)} bytes, want 128")
    try:
        comm = nccl.NcclCommunicator(a.size, bytes(raw), a.rank)
    except TypeError:  # CuPy before 14: a tuple of signed chars
        comm = nccl.NcclCommunicator(a.size, tuple(b - 256 if b > 127 else b for b in raw), a.rank)
    x = cp.asarray(((a.rank + 1) * (np.arange(a.n) % 100)).astype(np.float32))
    stream = cp.cuda.Stream(non_blocking=True)
    comm.allReduce(x.data.ptr, x.data.ptr, a.n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    want = (a.size * (a.size + 1) // 2) * (np.arange(a.n) % 100).astype(np.float32)
    got = cp.asnumpy(x)
    bad = np.nonzero(got != want)[0]
    if bad.size:
        i = int(bad[0])
        sys.exit(f"peer: element {i} = {got[i]}, want {want[i]} ({bad.size} wrong)")
    print(f"withpython: Python rank {a.rank} of {a.size} on GPU {a.dev}, NCCL {nccl.get_version()}, "
          f"store {a.store}: {a.n} floats correct")


if __name__ == "__main__":
    main()
