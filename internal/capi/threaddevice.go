package capi

import (
	"sync/atomic"

	"github.com/gonccl/nccl/internal/ccall"
)

// The calling thread's CUDA device.
//
// The CUDA runtime keeps a current device per OS thread. A thread that never
// chose one reads as device 0 (cudaGetDevice), and the first runtime call on
// it that needs a context creates device 0's primary context (hundreds of
// MiB): cudaStreamQuery does, and so does NCCL, which saves the caller's
// device around a blocking launch or a destroy and sets it back with
// cudaSetDevice (group.cc, init.cc). A Go program's goroutines run on
// whatever threads the scheduler gives them, so in a process driving GPU 3
// alone every fresh thread would leave a context on GPU 0.
//
// So, until the process has made device 0 current itself, every call into the
// runtime or into NCCL goes through ccall.CallOn: where the thread has no
// device of its own it first makes one current, the communicator's for an
// operation (then NCCL's save and restore switch nothing) and the first device
// the process used for the rest. A thread on a device stays there. Once device
// 0 is in use its context exists and the guard stands down: calls go
// unguarded, as in a process on GPU 0.
//
// A guarded call costs one cudaGetDevice more inside the same C call, so the
// guard marks a thread it has found on a device, or put on one (a pthread key
// of its own, ccall.Guard.CacheThreads), and later calls on it read the mark
// instead. TestGPUNoContextOnDeviceZero proves the guard on GPUs;
// BenchmarkAllReduceCall against internal/cgobench measures its cost.
// Without a CUDA runtime (WithoutCUDARuntime) there is no guard: NCCL's
// restore then creates device 0's context on threads that have no device.

// ThreadDevice is the guard's state in a CUDA runtime. A nil *ThreadDevice
// guards nothing.
type ThreadDevice struct {
	guard ccall.Guard  // cudaGetDevice, cudaSetDevice
	home  atomic.Int32 // the first device other than 0 this process made current; -1 before
	used0 atomic.Bool  // device 0 was made current: its context exists
}

// Init arms the guard with the runtime's cudaGetDevice and cudaSetDevice.
func (td *ThreadDevice) Init(get, set uintptr) {
	td.guard = ccall.Guard{Get: get, Set: set}
	td.guard.CacheThreads()
	td.home.Store(-1)
}

// Used notes that dev was made current on some thread.
func (td *ThreadDevice) Used(dev int) {
	if dev == 0 {
		td.used0.Store(true)
		return
	}
	td.home.CompareAndSwap(-1, int32(dev))
}

// UsedZero reports whether device 0 was made current.
func (td *ThreadDevice) UsedZero() bool { return td.used0.Load() }

// Target is the device to give a thread without one before a call that
// concerns dev (-1: any), or -1 when no guard is needed.
func (td *ThreadDevice) Target(dev int) int {
	if td == nil || td.used0.Load() {
		return -1
	}
	h := int(td.home.Load())
	if h < 0 {
		return -1
	}
	if dev > 0 {
		return dev
	}
	return h
}

// Call is ccall.Call on a thread with a current device (see Target), dev the
// device the call concerns or -1. guardErr is the cudaError_t of the guard's
// own call where that failed, 0 otherwise.
func (td *ThreadDevice) Call(dev int, fn uintptr, args ...uintptr) (r uintptr, guardErr int32) {
	d := td.Target(dev)
	if d < 0 {
		return ccall.Call(fn, args...), 0
	}
	return ccall.CallOn(&td.guard, d, fn, args...)
}

// SetForGroup makes dev current on the calling thread, which the caller has
// locked, before a group's end: NCCL saves and restores the caller's device
// around the launch. Best effort: where it fails, NCCL's own cudaSetDevice
// fails too and the group's end says so.
func (td *ThreadDevice) SetForGroup(dev int) {
	ccall.Call(td.guard.Set, uintptr(int32(dev)))
}
