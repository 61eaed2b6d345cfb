package ccall

import "unsafe"

// Guard names the CUDA runtime's cudaGetDevice and cudaSetDevice, for CallOn.
type Guard struct {
	Get, Set uintptr
}

// guardFrame is shared with the assembly (call_*.s): Call's frame, then the
// guard's functions at 208 and 216, the device at 224, the thread's current
// device as cudaGetDevice writes it at 232, and the guard's own failing result
// at 240.
type guardFrame struct {
	f   frame
	get uintptr
	set uintptr
	dev uintptr
	cur uintptr
	gr  uintptr
}

// guardABI0 is the address of the guarded trampoline (call_*.s).
var guardABI0 uintptr

// CallOn is Call on a thread with a current CUDA device, in the same switch to
// the system stack: it first asks g.Get for the thread's current device, and
// where that is 0 (what the runtime answers on a thread that never chose one)
// makes dev current with g.Set, then calls fn. A thread without a device
// would otherwise get one at fn's first use of the runtime: device 0, whose
// primary context CUDA then creates (about 500 MiB there), in a process that
// may never use GPU 0. Threads already on a device are left on it.
//
// guardErr is the result of the guard's call that failed, and then fn was not
// called; 0 otherwise. CallOn allocates nothing.
//
//go:nosplit
func CallOn(g *Guard, dev int, fn uintptr, args ...uintptr) (r uintptr, guardErr int32) {
	if fn == 0 || g.Get == 0 || g.Set == 0 || len(args) > MaxArgs {
		panicCall(0, len(args))
	}
	var f guardFrame
	f.f.fn = fn
	for i, a := range args {
		f.f.a[i] = a
	}
	f.get, f.set, f.dev = g.Get, g.Set, uintptr(uint32(int32(dev)))
	runtime_cgocall(guardABI0, uintptr(unsafe.Pointer(&f)))
	return f.f.r, int32(f.gr)
}
