package nccl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/load"
)

// Sentinels for errors.Is. Every error gonccl returns names what failed (the
// Go method or the C function, the file, NCCL's or CUDA's own text) and
// matches at least one sentinel of this package, with three exceptions:
//
//   - the end of a context (InitRank, InitRankScalable, InitAll, GrowRank,
//     Split, Shrink, Grow, Revoke, Wait, Close) gives an error that wraps
//     ctx.Err(), matching context.DeadlineExceeded or context.Canceled;
//   - an error your own function returned (Group, SimulateGroup,
//     CUDA.OnDevice, CUDA.Capture) comes back as it was;
//   - a library file that Open or OpenCUDA could not examine gives a
//     *LoadError wrapping, through a *FileError, the system's error
//     (errors.Is(err, fs.ErrPermission)).
//
// By type:
//
//   - *Error: a failed NCCL call, matching the sentinel of its result code
//     (ErrInvalidArgument, ErrInvalidUsage, ErrSystem, ...), or an argument
//     gonccl refused before any C call, matching ErrInvalidArgument (a nil
//     context.Context, an unknown data type, a rank out of range, the zero
//     Buffer, Stream or Event, ...).
//   - *ClosedError (ErrClosed): a communicator, library, stream or graph
//     used after its end, and one gonccl never made: the zero Comm, a nil
//     *Comm, the zero Graph, a nil *Library, a nil *CUDA.
//   - *CUDAError (ErrCUDA, and ErrNoDevice without a GPU): a failed CUDA
//     runtime call; *CaptureError (ErrCapturing): a call an open stream
//     capture forbids.
//   - *UnsupportedError (ErrNotSupported): a function the loaded library
//     lacks. ErrGraphsAlive and ErrRevoked: Close refused, and a revoked
//     communicator's work, wrapped with what they concern.
//   - Open and OpenCUDA: *MissingSymbolError (ErrMissingSymbol),
//     *TooOldError (ErrTooOld), an *Error (ErrInvalidArgument) for a bad
//     option, or a *LoadError wrapping the reason the search ended:
//     ErrNotFound, ErrNotRegular, ErrNotELF, ErrWrongArch, ErrCorruptELF,
//     ErrBadVersion, ErrDlopen, ErrInvalidArgument (a relative path), or
//     the *Error of a failed ncclGetVersion.
var (
	// ErrNotSupported: the loaded library lacks an optional function or type.
	ErrNotSupported = errors.New("not supported")
	// ErrTooOld: the library is older than MinVersion.
	ErrTooOld = errors.New("library too old")
	// ErrClosed: the communicator was destroyed or aborted, the library
	// closed, or the value is one gonccl never made (the zero Comm, a nil
	// *Library or *CUDA).
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
	ErrInvalidArgument = load.ErrInvalidArgument // the same value as the search's (a relative path)
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
// One that CUDA's refusal inside NCCL during a stream capture caused (NCCL's
// text ends in "operation not permitted when stream is capturing") matches
// ErrCapturing too, and its Msg says what to do.
type Error struct {
	Op   string     // the C function, e.g. "ncclAllReduce", or the Go one that refused before any
	Code abi.Result // NCCL's result code
	Msg  string     // NCCL's last-error text, or gonccl's reason
	// Method is the Go method called ("Close"), when the error says so
	// before Op: "Close: ncclCommFinalize: ...". Empty when Op alone
	// names the call.
	Method string

	duringCapture bool // CUDA refused a call NCCL made during a capture
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("%s: %v", opName(e.Method, e.Op), e.Code)
	}
	return fmt.Sprintf("%s: %v: %s", opName(e.Method, e.Op), e.Code, e.Msg)
}

// Is matches the sentinel of the result code (ErrInvalidArgument, ...), and
// ErrCapturing where a capture made NCCL's call fail.
func (e *Error) Is(target error) bool {
	if target == ErrCapturing {
		return e.duringCapture
	}
	s, ok := resultSentinel[e.Code]
	return ok && s == target
}

// ClosedError is the use of a destroyed or aborted communicator, a closed
// library, a destroyed stream or graph, or one gonccl never made.
type ClosedError struct {
	Op   string
	What string // "communicator", "library", "stream (destroyed)", ...
	// Method is the Go method called, printed before Op (see Error.Method).
	Method string
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("%s: use of a closed %s", opName(e.Method, e.Op), e.What)
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
	// Method is the Go method called, printed before Op (see Error.Method).
	Method string
}

func (e *CUDAError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("%s: %v", opName(e.Method, e.Op), e.Code)
	}
	return fmt.Sprintf("%s: %v: %s", opName(e.Method, e.Op), e.Code, e.Msg)
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

// opName is how an error names its call: "Method: Op" when the Go method
// called is known and is not the C function itself, else Op alone.
func opName(method, op string) string {
	if method == "" || method == op {
		return op
	}
	return method + ": " + op
}

// inMethod names method, the exported Go method a caller called, at the
// front of err's text, so that "ncclCommFinalize: ..." reads "Close:
// ncclCommFinalize: ...". An *Error, *ClosedError or *CUDAError at the top
// of err is copied with Method set, never changed in place (some are shared:
// every ncclInProgress result of a function is one value), and keeps its
// type for callers that assert it. Any other error is wrapped as "method:
// err", which keeps errors.Is and errors.As. An error whose text already
// begins with method (the zero Comm's, say) and nil pass unchanged.
func inMethod(method string, err error) error {
	switch e := err.(type) {
	case nil:
		return nil
	case *Error:
		if e.Method == "" && e.Op != method {
			c := *e
			c.Method = method
			return &c
		}
		return err
	case *ClosedError:
		if e.Method == "" && e.Op != method {
			c := *e
			c.Method = method
			return &c
		}
		return err
	case *CUDAError:
		if e.Method == "" && e.Op != method {
			c := *e
			c.Method = method
			return &c
		}
		return err
	}
	if strings.HasPrefix(err.Error(), method+": ") {
		return err
	}
	return fmt.Errorf("%s: %w", method, err)
}

// nilLibrary is the error of a method called on a nil *Library. As os.File's
// methods refuse a nil *File rather than panic, gonccl's refuse a nil
// library: one never opened counts as a closed one.
func nilLibrary(method string) error {
	return &ClosedError{Op: method, What: "library (a nil *Library, which Open did not make)"}
}

// nilCUDA is the error of a method called on a nil *CUDA, which is what
// Library.CUDA returns for a library opened WithoutCUDARuntime: there is no
// runtime to call, as after a close.
func nilCUDA(method string) error {
	return &ClosedError{Op: method, What: "CUDA runtime (a nil *CUDA, as Library.CUDA returns WithoutCUDARuntime)"}
}

// nilContext is the refusal of a nil context.Context, which the context
// package forbids passing: it would panic at the first look at it, possibly
// after NCCL was called.
func nilContext(method string) error {
	return &Error{Op: method, Code: abi.InvalidArgument, Msg: "nil context.Context (pass context.Background() or context.TODO() for none)"}
}

// The errors of the library search and of symbol resolution, made in
// internal/load. A *LoadError wraps one of the sentinels; each Attempt's Err
// may too.
type (
	// LoadError reports a library that could not be loaded, with the whole
	// search: Library ("libnccl" or "libcudart"), Trace (every candidate
	// tried, as []Attempt), Err (the reason: ErrNotFound, ErrNotELF, a
	// *FileError, ...) and Hint (what to set or install). Its Error() prints
	// the reason, one line per attempt, and the hint.
	LoadError = load.LoadError
	// FileError is a candidate file the search could not examine (a
	// permission problem: errors.Is(err, fs.ErrPermission)) or refused
	// before dlopen: Err wraps ErrNotRegular, ErrCorruptELF, ErrNotELF,
	// ErrWrongArch, ErrNotFound, the system's error, or the *Error of a
	// failed ncclGetVersion. Fields: Path, Err.
	FileError = load.FileError
	// VersionError is a library whose ncclGetVersion answers a code that
	// decodes to no NCCL release (not positive, or a major version other
	// than 2 or 3). It matches ErrBadVersion. Fields: Path, Code (the raw
	// code ncclGetVersion wrote).
	VersionError = load.VersionError
	// MissingSymbolError is a required function absent from the library
	// file. It matches ErrMissingSymbol. Fields: Symbol (the C name), Path.
	MissingSymbolError = load.MissingSymbolError
)

var (
	// ErrMissingSymbol: the library lacks a function every supported release has.
	ErrMissingSymbol = load.ErrMissingSymbol
	ErrNotFound      = load.ErrNotFound
	ErrNotELF        = load.ErrNotELF
	ErrWrongArch     = load.ErrWrongArch
	ErrDlopen        = load.ErrDlopen
	// ErrNotRegular: a candidate is a FIFO, a socket, a device or a folder,
	// which gonccl never opens (opening a FIFO blocks until a writer comes).
	ErrNotRegular = load.ErrNotRegular
	// ErrCorruptELF: a candidate's ELF headers describe more than the file
	// holds (a truncated copy, a damaged download); dlopen would crash on it.
	ErrCorruptELF = load.ErrCorruptELF
	// ErrBadVersion: ncclGetVersion answers a code no NCCL release reports.
	ErrBadVersion = load.ErrBadVersion
)

// quoteValue renders an outside string for an error message, bounded (see
// load.Quote).
func quoteValue(s string) string { return load.Quote(s) }

// CUDA's error codes of stream capture (cudaError_t).
const (
	CUDAErrorStreamCaptureUnsupported CUDAErrorCode = 900 // the call is not permitted while the stream captures
	CUDAErrorStreamCaptureInvalidated CUDAErrorCode = 901 // an earlier error invalidated the capture
	CUDAErrorStreamCaptureMerge       CUDAErrorCode = 902
	CUDAErrorStreamCaptureUnmatched   CUDAErrorCode = 903
	CUDAErrorStreamCaptureUnjoined    CUDAErrorCode = 904
	CUDAErrorStreamCaptureIsolation   CUDAErrorCode = 905 // a dependency would cross the capture's boundary
	CUDAErrorStreamCaptureImplicit    CUDAErrorCode = 906 // the legacy stream would join a capturing blocking stream
	CUDAErrorCapturedEvent            CUDAErrorCode = 907 // the event was last recorded in a capture
	CUDAErrorStreamCaptureWrongThread CUDAErrorCode = 908 // a non-relaxed capture ended on another thread
)

// ErrCapturing matches every *CaptureError: a call refused because a stream
// capture is open, by gonccl before reaching CUDA or by CUDA (codes 900–908).
var ErrCapturing = errors.New("CUDA stream capture in progress")

// CaptureError is a call refused because of an open stream capture.
type CaptureError struct {
	Op     string     // the call, e.g. "cudaStreamSynchronize"
	Device int        // the capturing stream's device; -1 if unknown
	Stream uintptr    // the capturing stream; 0 if unknown
	Msg    string     // why
	CUDA   *CUDAError // CUDA's refusal; nil when gonccl refused first
}

func (e *CaptureError) Error() string {
	if e.CUDA != nil {
		return fmt.Sprintf("%s: %s (%v)", e.Op, e.Msg, e.CUDA.Code)
	}
	return fmt.Sprintf("%s: refused: stream %#x on device %d is capturing a CUDA graph: %s", e.Op, e.Stream, e.Device, e.Msg)
}

// Is matches ErrCapturing, and ErrCUDA when CUDA refused.
func (e *CaptureError) Is(target error) bool {
	return target == ErrCapturing || (e.CUDA != nil && e.CUDA.Is(target))
}

// Unwrap is CUDA's *CUDAError, when CUDA refused.
func (e *CaptureError) Unwrap() error {
	if e.CUDA == nil {
		return nil
	}
	return e.CUDA
}

// shortVersion is v without a zero patch level ("2.28").
func shortVersion(v abi.Version) string {
	if v.Patch == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return v.String()
}

// isInProgress reports a non-blocking call's ncclInProgress.
func isInProgress(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Code == abi.InProgress
}
