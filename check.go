package nccl

import (
	"fmt"
	"math"

	"github.com/gonccl/nccl/abi"
)

// Range checks run before any C call: NCCL takes ranks, roots, peers, devices,
// colors and keys as C int (32 bits) and counts as size_t, so a Go int out of
// range would reach C truncated (rank 2^32 as 0) or wrapped (count -1 as
// 2^64-1).

// argError is an argument refused before any C call, with NCCL's code for it.
func argError(op string, format string, args ...any) error {
	return &Error{Op: op, Code: abi.InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// checkInt32 refuses v outside [lo, math.MaxInt32].
func checkInt32(op, name string, v, lo int) error {
	if v < lo || v > math.MaxInt32 {
		return argError(op, "%s %d out of range [%d, %d]", name, v, lo, math.MaxInt32)
	}
	return nil
}

// checkRank refuses r outside [0, n).
func checkRank(op, name string, r, n int) error {
	if r < 0 || r >= n {
		return argError(op, "%s %d out of range [0, %d)", name, r, n)
	}
	return nil
}

// checkDevice refuses device ordinals that are negative or not a C int.
func checkDevice(op string, dev int) error { return checkInt32(op, "device", dev, 0) }

// byteSize is n elements of size bytes, refusing negative counts and sizes
// that overflow an int (and so a size_t on 64-bit targets).
func byteSize(op string, n, size int) (int, error) {
	if n < 0 {
		return 0, argError(op, "negative count %d", n)
	}
	if size > 0 && n > math.MaxInt/size {
		return 0, argError(op, "%d elements of %d bytes overflow", n, size)
	}
	return n * size, nil
}
