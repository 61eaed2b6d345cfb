// Package ccall calls C functions from Go without cgo and without allocating.
//
// purego's SyscallN allocates on every call (its variadic slice escapes through
// go:uintptrescapes) and RegisterFunc pays for reflection; the stream operations of
// NCCL are called per tensor, so gonccl keeps its own minimal call path: the
// arguments go into a frame on the caller's stack, and runtime.cgocall runs a small
// assembly trampoline on the system stack that loads them into the registers and
// stack slots of the C calling convention. This is what cgo itself does, minus the
// generated code. purego is still needed: its fakecgo runtime makes cgocall usable
// in CGO_ENABLED=0 binaries, and it provides Dlopen and Dlsym.
//
// Only integer and pointer arguments are supported: no NCCL or CUDA runtime function
// gonccl calls takes a floating-point value or a struct in registers. Structs passed
// by value in memory (ncclUniqueId) are spread over argument slots by the caller, as
// the platform's calling convention lays them out.
package ccall

import (
	"unsafe"

	// fakecgo: lets runtime.cgocall run in CGO_ENABLED=0 binaries.
	_ "github.com/ebitengine/purego"
)

// MaxArgs is the number of argument slots a call can fill. It covers the largest
// NCCL call: ncclCommInitRankConfig with its 128-byte id spread over 16 stack slots
// on amd64.
const MaxArgs = 24

// frame is shared with the assembly trampolines: fn at 0, args from 8, result at 200.
type frame struct {
	fn uintptr
	a  [MaxArgs]uintptr
	r  uintptr
}

// frame8 is frame for calls of up to 8 arguments, which every stream
// operation of NCCL is: 80 bytes to clear and 2 stack slots to copy instead
// of 208 and 18, which scripts/bench-overhead.sh sees in the no-op call and in
// Comm.AllReduce against cgo (internal/cgobench). fn at 0, args from 8, result
// at 72.
type frame8 struct {
	fn uintptr
	a  [8]uintptr
	r  uintptr
}

// trampolineABI0 and trampoline8ABI0 are the addresses of the assembly
// trampolines for frame and frame8 (call_*.s).
var trampolineABI0, trampoline8ABI0 uintptr

// runtime_cgocall is runtime.cgocall (exported to purego and friends by a
// go:linkname in the runtime). Its argument is declared uintptr rather than
// unsafe.Pointer so that the frame it points to stays on the caller's stack: the
// runtime never moves the stack of a goroutine inside a system call, and cgo passes
// its own argument frames the same way.
//
//go:linkname runtime_cgocall runtime.cgocall
func runtime_cgocall(fn uintptr, arg uintptr) int32

// Call calls the C function at fn with up to MaxArgs integer or pointer arguments
// and returns the raw return register. It allocates nothing.
//
// The arguments must not point into Go memory that may move: plain values, C or
// device pointers, and pointers to heap objects pinned with runtime.Pinner are
// fine. Pointers to Go variables go through CallPtr instead. Call panics if fn is 0
// or there are too many arguments: both are mistakes inside gonccl, not user input.
//
//go:nosplit
func Call(fn uintptr, args ...uintptr) uintptr {
	if fn == 0 || len(args) > MaxArgs {
		panicCall(fn, len(args))
	}
	if len(args) <= len(frame8{}.a) {
		var f frame8
		f.fn = fn
		for i, a := range args {
			f.a[i] = a
		}
		runtime_cgocall(trampoline8ABI0, uintptr(unsafe.Pointer(&f)))
		return f.r
	}
	var f frame
	f.fn = fn
	for i, a := range args { // a loop, not copy: no memmove call for a few words
		f.a[i] = a
	}
	runtime_cgocall(trampolineABI0, uintptr(unsafe.Pointer(&f)))
	return f.r
}

// CallPtr is Call for arguments converted from Go pointers in the argument list
// itself (uintptr(unsafe.Pointer(&v))): go:uintptrescapes moves what they point to
// onto the heap, where it cannot move, and keeps it alive until the call returns.
// It costs an allocation or two, so hot paths use Call.
//
//go:uintptrescapes
func CallPtr(fn uintptr, args ...uintptr) uintptr {
	return Call(fn, args...)
}

func panicCall(fn uintptr, n int) {
	if fn == 0 {
		panic("ccall: call of a nil C function")
	}
	panic("ccall: too many arguments")
}

// GoString copies the NUL-terminated C string at p; "" for NULL.
func GoString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(ptr, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}
