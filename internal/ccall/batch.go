package ccall

import (
	"runtime"
	"unsafe"
)

// BatchArgs is the most arguments a call of a batch takes: the largest NCCL
// stream operation (ncclAlltoAllv in its 11-argument form).
const BatchArgs = 11

// Entry is one call of a batch: the function, its arguments and its result.
// The layout is shared with the assembly (call_*.s): Fn at 0, Args from 8, R
// at 96.
type Entry struct {
	Fn   uintptr
	Args [BatchArgs]uintptr
	R    uintptr
}

// NotCalled is the result of an entry a batch did not call.
const NotCalled = ^uintptr(0)

// batchFrame is shared with the assembly: entries at 0, count at 8, the
// second success value at 16.
type batchFrame struct {
	e    uintptr
	n    uintptr
	also uintptr
}

// batchABI0 is the address of the batch trampoline (call_*.s).
var batchABI0 uintptr

// Batch calls the functions of es in order, in one switch to the system
// stack: where a loop of Call pays the switch once per function, a batch of
// n calls pays it once. An entry fails when its result, as a C int, is
// neither 0 nor alsoOK, and the batch stops there: Batch returns its index,
// or -1 when every entry succeeded. Each entry's R is its result as a C int
// (zero-extended: batches call functions that return an int status, as
// NCCL's do), or NotCalled for those after a failure. The caller handles a
// failure in Go, where it can read the library's error state before the next
// call. Batch allocates nothing.
//
// Arguments follow Call's rules; es itself must stay reachable (it is passed
// as an address): Batch keeps it alive until the calls return.
//
//go:nosplit
func Batch(es []Entry, alsoOK int32) int {
	if len(es) == 0 {
		return -1
	}
	for i := range es {
		if es[i].Fn == 0 {
			panicCall(0, 0)
		}
		es[i].R = NotCalled
	}
	f := batchFrame{e: uintptr(unsafe.Pointer(&es[0])), n: uintptr(len(es)), also: uintptr(uint32(alsoOK))}
	runtime_cgocall(batchABI0, uintptr(unsafe.Pointer(&f)))
	runtime.KeepAlive(&es[0])
	for i := range es {
		if r := es[i].R; r != NotCalled && int32(r) != 0 && int32(r) != alsoOK {
			return i
		}
	}
	return -1
}
