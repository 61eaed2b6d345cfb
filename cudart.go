package nccl

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
	"github.com/gonccl/nccl/internal/ccall"
	"github.com/gonccl/nccl/internal/load"
)

// CUDA is a loaded CUDA runtime (libcudart), found by the same search as NCCL.
// The runtime's current device belongs to the OS thread: methods that need one
// take the device and run pinned to a thread with it current (OnDevice).
type CUDA struct {
	LibraryFile
	rt capi.CUDA // the runtime's functions and the thread-device guard

	capt captures // the stream captures gonccl has open (cuda_capture.go)
}

// OpenCUDA loads the CUDA runtime alone. Of the options only WithCUDARuntime
// matters.
func OpenCUDA(opts ...Option) (*CUDA, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	file, err := load.Search(cudartSpec, o.cudart, os.Getenv)
	if err != nil {
		return nil, err
	}
	cu := &CUDA{LibraryFile: file.File}
	// Rows with a since (the CUDA release that added them: stream-ordered
	// allocation, graphs) are optional; the rest every runtime since 11.0 has.
	if err := load.Resolve(file.Handle, file.Path, capi.CUDASymbols[:], cu.rt.Fn[:], func(s *capi.Symbol) bool { return s.Since == abi.Version{} }); err != nil {
		return nil, err
	}
	cu.rt.TD.Init(cu.rt.Fn[capi.CuGetDevice], cu.rt.Fn[capi.CuSetDevice])
	cu.rt.Err = (*cudaFailures)(cu)
	return cu, nil
}

// cudaFailures gives the runtime's table the CUDA's errors (capi.Failures).
type cudaFailures CUDA

func (f *cudaFailures) Result(sym int, r int32) error {
	return (*CUDA)(f).failure(sym, abi.CudaError(r))
}
func (f *cudaFailures) Missing(sym int) error { return (*CUDA)(f).unsupported(sym) }
func (f *cudaFailures) Guard(r int32) error   { return (*CUDA)(f).guardFailure(r) }

// guardFailure is the error of the thread-device guard's cudaGetDevice or
// cudaSetDevice (see capi.ThreadDevice).
//
//go:noinline
func (cu *CUDA) guardFailure(code int32) error {
	return cu.failure(capi.CuSetDevice, abi.CudaError(code))
}

// callOn calls fn on a thread with a current device, dev the device the call
// concerns or -1 (see capi.ThreadDevice).
func (cu *CUDA) callOn(dev int, fn uintptr, args ...uintptr) (uintptr, error) {
	r, g := cu.rt.TD.Call(dev, fn, args...)
	if g != 0 {
		return 0, cu.guardFailure(g)
	}
	return r, nil
}

func (cu *CUDA) failure(sym int, r abi.CudaError) error {
	// Clear the thread's last error, as cudaGetLastError would be expected to.
	cu.rt.GetLastError()
	e := &CUDAError{Op: capi.CUDASymbols[sym].Name, Code: r, Msg: cu.ErrorString(r)}
	if r >= CUDAErrorStreamCaptureUnsupported && r <= CUDAErrorStreamCaptureWrongThread {
		// CUDA's own refusal of a call during a capture (one gonccl did not
		// know of, such as another library's): it matches ErrCapturing too.
		return &CaptureError{Op: e.Op, Msg: "CUDA refused the call during a stream capture", CUDA: e}
	}
	return e
}

// unsupported is the error of an optional runtime function the loaded
// libcudart lacks.
func (cu *CUDA) unsupported(sym int) error {
	s := capi.CUDASymbols[sym]
	var v abi.Version
	if code, err := cu.RuntimeVersion(); err == nil {
		maj, min := abi.DecodeCudaVersion(code)
		v = abi.V(maj, min, 0)
	}
	return &UnsupportedError{Name: s.Name, Path: cu.Path, Version: v, Requires: "CUDA >= " + shortVersion(s.Since)}
}

// has reports whether the runtime exports an optional function.
func (cu *CUDA) has(sym int) bool { return cu.rt.Fn[sym] != 0 }

// A nil *CUDA (Library.CUDA's answer for a library opened
// WithoutCUDARuntime) has no runtime to call: its methods return an error
// matching ErrClosed (see nilCUDA), HasGraphs false, and ErrorName and
// ErrorString gonccl's own name of the code. Wrap, WrapStream and
// DefaultStream, which call no CUDA function, still describe memory and
// streams for NCCL's operations.

// ErrorName is cudaGetErrorName ("cudaErrorInvalidValue").
func (cu *CUDA) ErrorName(e CUDAErrorCode) string {
	if cu == nil {
		return e.String()
	}
	return ccall.GoString(cu.rt.GetErrorName(e))
}

// ErrorString is cudaGetErrorString ("invalid argument").
func (cu *CUDA) ErrorString(e CUDAErrorCode) string {
	if cu == nil {
		return e.String()
	}
	return ccall.GoString(cu.rt.GetErrorString(e))
}

// RuntimeVersion is cudaRuntimeGetVersion's code (12040 for 12.4).
func (cu *CUDA) RuntimeVersion() (int, error) {
	if cu == nil {
		return 0, nilCUDA("RuntimeVersion")
	}
	var v int32
	err := cu.rt.RuntimeGetVersion(&v)
	return int(v), err
}

// DriverVersion is cudaDriverGetVersion's code; 0 when no driver is installed.
func (cu *CUDA) DriverVersion() (int, error) {
	if cu == nil {
		return 0, nilCUDA("DriverVersion")
	}
	var v int32
	err := cu.rt.DriverGetVersion(&v)
	return int(v), err
}

// DeviceCount is the number of visible devices. No GPU or no driver is an error
// matching ErrNoDevice.
func (cu *CUDA) DeviceCount() (int, error) {
	if cu == nil {
		return 0, nilCUDA("DeviceCount")
	}
	var n int32
	err := cu.rt.GetDeviceCount(&n)
	return int(n), err
}

// OnDevice runs fn on a locked OS thread with dev current, then restores the
// thread's previous device, except a device 0 that the thread only reported
// because it had none (see capi.ThreadDevice): setting that back would create
// device 0's context in a process that does not use GPU 0. The thread then
// stays on dev.
func (cu *CUDA) OnDevice(dev int, fn func() error) error {
	if cu == nil {
		return nilCUDA("OnDevice")
	}
	if err := checkDevice("cudaSetDevice", dev); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var prev int32
	if err := cu.rt.GetDevice(&prev); err != nil {
		return err
	}
	if int(prev) != dev {
		if err := cu.rt.SetDevice(dev); err != nil {
			return cu.noSuchDevice(dev, err)
		}
		if prev != 0 || cu.rt.TD.UsedZero() {
			defer cu.rt.SetDevice(int(prev))
		}
	}
	cu.rt.TD.Used(dev)
	return fn()
}

// noSuchDevice turns CUDA's refusal of a device number it does not have
// (cudaErrorInvalidDevice) into an error that also matches
// ErrInvalidArgument and says how many devices this process sees; other
// errors pass unchanged.
func (cu *CUDA) noSuchDevice(dev int, err error) error {
	var ce *CUDAError
	if !errors.As(err, &ce) || ce.Code != abi.CudaErrorInvalidDevice {
		return err
	}
	n, cerr := cu.DeviceCount()
	if cerr != nil {
		return err
	}
	// Both: ErrInvalidArgument, and CUDA's own error (ErrCUDA).
	return fmt.Errorf("%w (%w)", &Error{Op: "cudaSetDevice", Code: abi.InvalidArgument,
		Msg: fmt.Sprintf("device %d: this process sees %d CUDA devices (CUDA_VISIBLE_DEVICES decides which)", dev, n)}, ce)
}

// MemGetInfo is device dev's free and total memory in bytes (cudaMemGetInfo).
func (cu *CUDA) MemGetInfo(dev int) (free, total int, err error) {
	if cu == nil {
		return 0, 0, nilCUDA("MemGetInfo")
	}
	var f, t uintptr
	err = cu.OnDevice(dev, func() error { return cu.rt.MemGetInfo(&f, &t) })
	return int(f), int(t), err
}

// PointerAttributes says what memory p is: device (and which), host, or unknown.
func (cu *CUDA) PointerAttributes(p uintptr) (PointerAttributes, error) {
	if cu == nil {
		return PointerAttributes{}, nilCUDA("PointerAttributes")
	}
	var a abi.PointerAttributes
	err := cu.rt.PointerGetAttributes(unsafe.Pointer(&a), p)
	return a, err
}
