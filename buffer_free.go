package nccl

// Buffer.Free gives memory back to whichever allocator made it: cudaMalloc
// (buffer.go), cudaMallocAsync (cuda_memory.go), ncclMemAlloc and symmetric
// windows (register.go).

// Free frees the memory of an allocation made by gonccl: cudaFree on its
// device, ncclMemFree, or for a symmetric buffer the window's deregistration
// (collective: every rank frees together) and ncclMemFree; memory from
// MallocAsync is freed in stream order on its allocation stream (cudaFreeAsync,
// without waiting; FreeAsync picks another stream). Pass the buffer the
// allocation returned, not a slice of it. Memory from Wrap is refused.
func (b Buffer) Free() error {
	const op = "Free"
	m := b.mem
	switch {
	case m == nil:
		return argError(op, zeroBuffer)
	case m.kind == allocForeign:
		return argError(op, "memory from Wrap belongs to whoever allocated it")
	case b.ptr != m.base || b.n != m.n:
		return argError(op, "a slice of an allocation (elements %d to %d of %d): free the buffer Alloc returned", int(b.ptr-m.base)/b.dt.Size(), int(b.ptr-m.base)/b.dt.Size()+b.n, m.n)
	}
	if m.kind == allocCUDA { // cudaFree waits for the device
		if err := m.cu.refuseDevice("cudaFree", m.dev); err != nil {
			return err
		}
	}
	if m.kind == allocStream {
		return b.FreeAsync(Stream{cu: m.cu, h: m.stream, dev: m.dev})
	}
	if !m.freed.CompareAndSwap(false, true) {
		return argError(op, "buffer at %#x already freed", uintptr(b.ptr))
	}
	switch m.kind {
	case allocCUDA:
		return m.cu.OnDevice(m.dev, func() error { return m.cu.rt.Free(uintptr(m.base)) })
	case allocSymmetric:
		err := m.comm.DeregisterWindow(Window{h: m.win, comm: m.comm})
		if ferr := m.lib.memFree(m.dev, m.base); err == nil {
			err = ferr
		}
		return err
	}
	return m.lib.memFree(m.dev, m.base)
}
