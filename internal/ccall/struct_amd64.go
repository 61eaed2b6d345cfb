package ccall

// CallStruct128 calls fn whose argument number pos (counting from 0) is a 128-byte
// struct passed by value and whose other arguments, in order, are args.
//
// System V amd64 classifies a struct over 16 bytes as MEMORY: it is copied onto the
// stack in its argument position among stack arguments and takes no register. With
// at most six integer arguments, all of them travel in registers and the struct's
// 16 eightbytes are the only stack arguments.
//
// Pointer arguments converted in the argument list are kept in place as with
// CallPtr.
//
//go:uintptrescapes
func CallStruct128(fn uintptr, pos int, s *[128]byte, args ...uintptr) uintptr {
	if len(args) > 6 || pos < 0 || pos > len(args) {
		panic("ccall: struct call layout not supported")
	}
	var slots [6 + 16]uintptr
	copy(slots[:], args)
	for i := range 16 {
		slots[6+i] = uintptr(le64(s[i*8:]))
	}
	return Call(fn, slots[:]...)
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
