package nccl

import (
	"errors"
	"fmt"

	"github.com/gonccl/nccl/abi"
)

// Sentinels for errors.Is. Every error gonccl returns carries context (the
// operation, the file, NCCL's own last-error text) and matches one of these.
var (
	// ErrNotSupported: the loaded library lacks an optional function or type.
	ErrNotSupported = errors.New("not supported")
	// ErrMissingSymbol: the library lacks a function every supported release has.
	ErrMissingSymbol = errors.New("required symbol missing")
	// ErrTooOld: the library is older than MinVersion.
	ErrTooOld = errors.New("library too old")
	// ErrClosed: the communicator was destroyed or aborted, or the library closed.
	ErrClosed = errors.New("closed")
	// ErrGraphsAlive: Comm.Close refused because CUDA graphs captured
	// through gonccl still hold the communicator's operations.
	ErrGraphsAlive = errors.New("CUDA graphs hold the communicator")
	// ErrRevoked: the communicator was revoked (Comm.Revoke, or a Wait under
	// RevokeOnDeadline): work waited for was stopped, not done.
	ErrRevoked = errors.New("communicator revoked")

	// One per ncclResult_t, matched by *Error.
	ErrUnhandledCuda   = errors.New("unhandled CUDA error")
	ErrSystem          = errors.New("system error")
	ErrInternal        = errors.New("internal error")
	ErrInvalidArgument = errors.New("invalid argument")
	ErrInvalidUsage    = errors.New("invalid usage")
	ErrRemote          = errors.New("remote error")
	ErrInProgress      = errors.New("in progress")
	ErrTimeout         = errors.New("timeout")

	// ErrCUDA matches every *CUDAError; ErrNoDevice only those saying there is no
	// usable GPU (cudaErrorNoDevice, or cudaErrorInsufficientDriver when no driver
	// is installed at all).
	ErrCUDA     = errors.New("CUDA runtime error")
	ErrNoDevice = errors.New("no CUDA device")
)

var resultSentinel = map[abi.Result]error{
	abi.UnhandledCudaError: ErrUnhandledCuda,
	abi.SystemError:        ErrSystem,
	abi.InternalError:      ErrInternal,
	abi.InvalidArgument:    ErrInvalidArgument,
	abi.InvalidUsage:       ErrInvalidUsage,
	abi.RemoteError:        ErrRemote,
	abi.InProgress:         ErrInProgress,
	abi.Timeout:            ErrTimeout,
}

// Error is a failed NCCL call, or an argument gonccl refused before calling NCCL.
type Error struct {
	Op   string     // the C function, e.g. "ncclAllReduce"
	Code abi.Result // NCCL's result code
	Msg  string     // NCCL's last-error text, or gonccl's reason
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Code)
	}
	return fmt.Sprintf("%s: %v: %s", e.Op, e.Code, e.Msg)
}

// Is matches the sentinel of the result code (ErrInvalidArgument, ...).
func (e *Error) Is(target error) bool {
	s, ok := resultSentinel[e.Code]
	return ok && s == target
}

// ClosedError is the use of a destroyed or aborted communicator or a closed library.
type ClosedError struct {
	Op   string
	What string // "communicator" or "library"
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("%s: use of a closed %s", e.Op, e.What)
}

func (e *ClosedError) Is(target error) bool { return target == ErrClosed }

// UnsupportedError is a call of an optional function the loaded library lacks.
type UnsupportedError struct {
	Name     string      // C function or feature
	Path     string      // the library file
	Version  abi.Version // its version
	Requires string      // ">= 2.18", "VCCL"
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s not supported by %s (%s; requires %s)", e.Name, e.Path, e.Version, e.Requires)
}

func (e *UnsupportedError) Is(target error) bool { return target == ErrNotSupported }

// MissingSymbolError is a required function absent from the library file.
type MissingSymbolError struct {
	Symbol string
	Path   string
}

func (e *MissingSymbolError) Error() string {
	return fmt.Sprintf("%s lacks %s, which every supported release exports: not a usable build", e.Path, e.Symbol)
}

func (e *MissingSymbolError) Is(target error) bool { return target == ErrMissingSymbol }

// TooOldError is a library older than gonccl supports.
type TooOldError struct {
	Path    string
	Version abi.Version
	Min     abi.Version
}

func (e *TooOldError) Error() string {
	return fmt.Sprintf("%s is NCCL %s; gonccl needs >= %s", e.Path, e.Version, e.Min)
}

func (e *TooOldError) Is(target error) bool { return target == ErrTooOld }

// CUDAError is a failed CUDA runtime call.
type CUDAError struct {
	Op   string        // e.g. "cudaMalloc"
	Code abi.CudaError // cudaError_t
	Msg  string        // cudaGetErrorString's text
}

func (e *CUDAError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Code)
	}
	return fmt.Sprintf("%s: %v: %s", e.Op, e.Code, e.Msg)
}

func (e *CUDAError) Is(target error) bool {
	switch target {
	case ErrCUDA:
		return true
	case ErrNoDevice:
		return e.Code == abi.CudaErrorNoDevice || e.Code == abi.CudaErrorInsufficientDriver
	}
	return false
}
