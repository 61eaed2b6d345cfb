package collectives

import (
	"fmt"
	"unsafe"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// Element is every Go type NCCL can move, with its ncclDataType_t inferred.
type Element interface {
	int8 | uint8 | int32 | uint32 | int64 | uint64 | float32 | float64 |
		Float16 | BFloat16 | Float8E4M3 | Float8E5M2
}

// TypeOf is the NCCL data type of T.
func TypeOf[T Element]() abi.DataType {
	var z T
	switch any(z).(type) {
	case int8:
		return abi.Int8
	case uint8:
		return abi.Uint8
	case int32:
		return abi.Int32
	case uint32:
		return abi.Uint32
	case int64:
		return abi.Int64
	case uint64:
		return abi.Uint64
	case float32:
		return abi.Float32
	case float64:
		return abi.Float64
	case Float16:
		return abi.Float16
	case BFloat16:
		return abi.Bfloat16
	case Float8E4M3:
		return abi.Float8e4m3
	case Float8E5M2:
		return abi.Float8e5m2
	}
	panic("unreachable")
}

// Buffer is Len elements of T in device memory on Device. It is a small value:
// copy it freely; Slice views part of it. A Buffer from AllocSymmetric also
// carries the symmetric window it lies in, which VCCL's native AlltoAllv needs.
type Buffer[T Element] struct {
	ptr nccl.DevicePtr
	n   int
	dev int
	win nccl.Window
}

// Wrap describes device memory allocated elsewhere (another library, a kernel's
// output): n elements of T at ptr on device dev.
func Wrap[T Element](dev int, ptr nccl.DevicePtr, n int) Buffer[T] {
	return Buffer[T]{ptr: ptr, n: n, dev: dev}
}

// Alloc allocates n elements of T on device dev with cudaMalloc. Free it with Free.
func Alloc[T Element](cu *nccl.CUDA, dev, n int) (Buffer[T], error) {
	if n < 0 {
		return Buffer[T]{}, fmt.Errorf("collectives: Alloc of %d elements", n)
	}
	p, err := cu.Malloc(dev, n*elemSize[T]())
	if err != nil {
		return Buffer[T]{}, err
	}
	return Buffer[T]{ptr: p, n: n, dev: dev}, nil
}

// Free frees a buffer from Alloc.
func (b Buffer[T]) Free(cu *nccl.CUDA) error { return cu.Free(b.ptr) }

// Ptr is the device address of element 0.
func (b Buffer[T]) Ptr() nccl.DevicePtr { return b.ptr }

// Len is the number of elements.
func (b Buffer[T]) Len() int { return b.n }

// Device is the CUDA device the memory lives on.
func (b Buffer[T]) Device() int { return b.dev }

// Bytes is the size in bytes.
func (b Buffer[T]) Bytes() int { return b.n * elemSize[T]() }

// Window is the symmetric window the buffer lies in, or 0.
func (b Buffer[T]) Window() nccl.Window { return b.win }

// Slice is elements [from, to) of b. It panics on bad bounds, like a Go slice.
func (b Buffer[T]) Slice(from, to int) Buffer[T] {
	if from < 0 || to < from || to > b.n {
		panic(fmt.Sprintf("collectives: slice [%d:%d] of a buffer of %d", from, to, b.n))
	}
	return Buffer[T]{ptr: b.ptr + nccl.DevicePtr(from*elemSize[T]()), n: to - from, dev: b.dev, win: b.win}
}

// CopyIn copies host into the start of b, synchronously.
func (b Buffer[T]) CopyIn(cu *nccl.CUDA, host []T) error {
	if len(host) > b.n {
		return fmt.Errorf("collectives: CopyIn of %d elements into a buffer of %d", len(host), b.n)
	}
	return cu.CopyToDevice(b.ptr, asBytes(host))
}

// CopyOut copies the start of b into host, synchronously.
func (b Buffer[T]) CopyOut(cu *nccl.CUDA, host []T) error {
	if len(host) > b.n {
		return fmt.Errorf("collectives: CopyOut of %d elements from a buffer of %d", len(host), b.n)
	}
	return cu.CopyFromDevice(asBytes(host), b.ptr)
}

func elemSize[T Element]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*elemSize[T]())
}

// AllocSymmetric allocates n elements of T with ncclMemAlloc on c's device and
// registers them as a symmetric window (NCCL_WIN_COLL_SYMMETRIC), as VCCL's
// native AlltoAllv requires. Every rank of c must call it, with the same n. NCCL
// may report success without a window when symmetric memory is unavailable:
// that is an error matching nccl.ErrNotSupported, and the memory is freed.
func AllocSymmetric[T Element](c *nccl.Comm, n int) (Buffer[T], error) {
	lib := c.Library()
	size := n * elemSize[T]()
	// Windows are registered in whole pages.
	if r := size % abi.WindowAlignment; r != 0 || size == 0 {
		size += abi.WindowAlignment - r
	}
	p, err := lib.MemAlloc(c.Device(), size)
	if err != nil {
		return Buffer[T]{}, err
	}
	w, err := c.WindowRegister(p, size, abi.WinCollSymmetric)
	if err != nil {
		lib.MemFree(p)
		return Buffer[T]{}, err
	}
	return Buffer[T]{ptr: p, n: n, dev: c.Device(), win: w}, nil
}

// FreeSymmetric deregisters and frees a buffer from AllocSymmetric. Every rank
// must call it.
func FreeSymmetric[T Element](c *nccl.Comm, b Buffer[T]) error {
	err := c.WindowDeregister(b.win)
	if ferr := c.Library().MemFree(b.ptr); err == nil {
		err = ferr
	}
	return err
}
