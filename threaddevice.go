package nccl

import (
	"sync/atomic"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// The calling thread's CUDA device.
//
// The CUDA runtime keeps a current device per OS thread. A thread that never
// chose one reads as device 0 (cudaGetDevice), and the first runtime call on
// it that needs a context creates device 0's primary context (about 500 MiB
// there): cudaStreamQuery does, and so does NCCL, which saves the caller's
// device around a blocking launch or a destroy and sets it back with
// cudaSetDevice (group.cc, init.cc). A Go program's goroutines run on
// whatever threads the scheduler gives them, so in a process driving GPU 3
// alone every fresh thread would leave a context on GPU 0. Measured before this
// guard on 4 × H200: nccl-bench -np 4 held 2974 MiB on GPU 0 against 1397 on
// each of the others (docs/perf/h200x4-2026-11-27/context-on-gpu0-before.txt).
//
// So, until the process has made device 0 current itself, every call into the
// runtime or into NCCL goes through ccall.CallOn: where the thread has no
// device of its own it first makes one current, the communicator's for an
// operation (then NCCL's save and restore switch nothing) and the first device
// the process used for the rest. A thread on a device stays there. Once device
// 0 is in use its context exists and the guard stands down: calls go
// unguarded, as in a process on GPU 0.
//
// With the guard, on the same machine, GPU 0 stayed at 4 MiB through every
// step of a process on GPU 1, and nccl-bench -np 4 held 1397 MiB on each GPU
// (docs/perf/h200x4-2026-11-27/context-on-gpu0-after.txt). A guarded call cost
// one cudaGetDevice more inside the same C call: about 60 ns there. A thread
// the guard has once found on a device, or put on one, keeps that device, so
// the guard marks it (a pthread key of its own, ccall.Guard.CacheThreads) and
// later calls on it read the mark instead. On the fakes, timed on the CPU of a
// 2 × H200 machine, a guarded Comm.AllReduce went from 1.71 × the same call
// through cgo to 1.36 (an unguarded one: 1.27 to 1.30); on that machine
// TestGPUNoContextOnDeviceZero, whose child runs every step on fresh threads
// and then all of them on one marked thread, passed on all four libraries
// (docs/perf/h200x2-2026-11-27e).
// Without a CUDA runtime (WithoutCUDARuntime) there is no guard: NCCL's
// restore then creates device 0's context on threads that have no device.

// threadDevice is the guard's state in a CUDA runtime.
type threadDevice struct {
	guard ccall.Guard  // cudaGetDevice, cudaSetDevice
	home  atomic.Int32 // the first device other than 0 this process made current; -1 before
	used0 atomic.Bool  // device 0 was made current: its context exists
}

func (td *threadDevice) init(get, set uintptr) {
	td.guard = ccall.Guard{Get: get, Set: set}
	td.guard.CacheThreads()
	td.home.Store(-1)
}

// used notes that dev was made current on some thread.
func (td *threadDevice) used(dev int) {
	if dev == 0 {
		td.used0.Store(true)
		return
	}
	td.home.CompareAndSwap(-1, int32(dev))
}

// target is the device to give a thread without one before a call that
// concerns dev (-1: any), or -1 when no guard is needed.
func (td *threadDevice) target(dev int) int {
	if td.used0.Load() {
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

// callOn is ccall.Call on a thread with a current device (see target), dev
// the device the call concerns or -1. A failure of the guard's own call comes
// back as the CUDA error of that call.
func (cu *CUDA) callOn(dev int, fn uintptr, args ...uintptr) (uintptr, error) {
	d := cu.td.target(dev)
	if d < 0 {
		return ccall.Call(fn, args...), nil
	}
	r, gerr := ccall.CallOn(&cu.td.guard, d, fn, args...)
	if gerr != 0 {
		return 0, cu.guardFailure(gerr)
	}
	return r, nil
}

// guardFailure is the error of the guard's cudaGetDevice or cudaSetDevice.
//
//go:noinline
func (cu *CUDA) guardFailure(code int32) error {
	return cu.failure(cuSetDevice, abi.CudaError(code))
}

// setForGroup makes dev current on the calling thread, which the caller has
// locked, before a group's end: NCCL saves and restores the caller's device
// around the launch. Best effort: where it fails, NCCL's own cudaSetDevice
// fails too and the group's end says so.
func (cu *CUDA) setForGroup(dev int) {
	ccall.Call(cu.td.guard.Set, uintptr(int32(dev)))
}
