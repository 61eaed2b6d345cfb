package ccall

import (
	"runtime"
	"unsafe"
)

// CallStruct128 calls fn whose argument number pos (counting from 0) is a 128-byte
// struct passed by value and whose other arguments, in order, are args.
//
// AAPCS64 replaces a composite over 16 bytes by a pointer to a caller-owned copy,
// passed in the argument's own position; the callee may modify the copy.
//
// Pointer arguments converted in the argument list are kept in place as with
// CallPtr.
//
//go:uintptrescapes
func CallStruct128(fn uintptr, pos int, s *[128]byte, args ...uintptr) uintptr {
	if len(args) > 7 || pos < 0 || pos > len(args) {
		panic("ccall: struct call layout not supported")
	}
	// The copy must not move during the call: pinning puts it on the heap.
	cp := new([128]byte)
	*cp = *s
	var pin runtime.Pinner
	pin.Pin(cp)
	defer pin.Unpin()
	var slots [8]uintptr
	copy(slots[:pos], args[:pos])
	slots[pos] = uintptr(unsafe.Pointer(cp))
	copy(slots[pos+1:], args[pos:])
	return Call(fn, slots[:len(args)+1]...)
}
