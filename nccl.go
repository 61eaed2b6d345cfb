package nccl

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
	"github.com/gonccl/nccl/internal/ccall"
	"github.com/gonccl/nccl/internal/load"
)

// Library is a loaded libnccl (NCCL or a fork such as VCCL) and, unless
// WithoutCUDARuntime was given, the CUDA runtime beside it. Its methods are safe
// for concurrent use.
type Library struct {
	LibraryFile

	version abi.Version
	nc      capi.NCCL // NCCL's functions
	a2avABI int       // 10 or 11 arguments: the ncclAlltoAllv form in use
	// How long a clique's maker waits for its other ranks (see arrive).
	arrivalGrace time.Duration
	cuda         *CUDA

	closed  atomic.Bool
	givenUp atomic.Int32 // blocking inits whose context ended while they run on inside NCCL (see bounded)
	types   [16]bool     // data types the library knows, by ncclDataType_t
	allOps  bool         // it knows every reduction gonccl passes (Avg, PreMulSum): >= 2.11

	commsMu   sync.Mutex
	commsOpen int // communicators open (see track)

	// Open groups, one per goroutine inside Group (see Group), and records
	// kept for reuse.
	groupsMu   sync.Mutex
	groups     []*groupRec
	groupFree  []*groupRec
	groupsOpen atomic.Int32 // len(groups), read without the lock
	lastGroup  atomic.Pointer[groupRec]

	// Memory NCCL may still read (AlltoAllv matrices, WaitSignal
	// descriptors): pinned while any Group is open.
	pinsMu sync.Mutex
	pins   []*runtime.Pinner
	spare  []*runtime.Pinner // unpinned, for reuse

	pollMu  sync.Mutex // ncclCommGetAsyncError calls take turns (see pollAsync)
	pollRes int32      // where they write

	cliquesMu sync.Mutex
	cliques   map[uint64]*clique // by key (see clique)
}

// Open finds and loads libnccl and the CUDA runtime (see docs/loading.md for the
// search order), resolves every symbol and reads the version.
func Open(opts ...Option) (*Library, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.a2avABI == 0 {
		if v := os.Getenv("GONCCL_ALLTOALLV_ABI"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, argError("Open", "GONCCL_ALLTOALLV_ABI=%s: want 10 or 11", quoteValue(v))
			}
			o.a2avABI = n
		} else {
			o.a2avABI = 11
		}
	}
	if o.a2avABI != 10 && o.a2avABI != 11 {
		return nil, argError("Open", "ncclAlltoAllv ABI %d: want 10 or 11 arguments", o.a2avABI)
	}

	file, err := load.Search(ncclSpec, o.nccl, os.Getenv)
	if err != nil {
		return nil, err
	}
	l := &Library{LibraryFile: file.File, a2avABI: o.a2avABI}
	l.arrivalGrace = ArrivalGrace
	if o.arrivalGrace != nil {
		l.arrivalGrace = max(*o.arrivalGrace, 0)
	}
	// The version first (read once, by the search's check): it decides
	// which symbols are required, and the error for a release too old is
	// clearer than one about a missing symbol.
	code := file.Version
	if code == 0 {
		return nil, &MissingSymbolError{Symbol: "ncclGetVersion", Path: file.Path}
	}
	l.version = abi.DecodeVersion(int(code))
	for t := DataType(0); t.Valid(); t++ {
		l.types[t] = l.version.AtLeast(t.Since())
	}
	l.allOps = l.version.AtLeast(Avg.Since()) && l.version.AtLeast((Avg + 1).Since())
	if !l.version.AtLeast(MinVersion) {
		return nil, &TooOldError{Path: file.Path, Version: l.version, Min: MinVersion}
	}
	if err := load.Resolve(file.Handle, file.Path, capi.NCCLSymbols[:], l.nc.Fn[:], func(s *capi.Symbol) bool { return s.Required(MinVersion) }); err != nil {
		return nil, err
	}
	if !o.noCUDA {
		if l.cuda, err = OpenCUDA(WithCUDARuntime(o.cudart)); err != nil {
			return nil, err
		}
		l.nc.TD = &l.cuda.rt.TD
	}
	l.nc.Err = (*ncclFailures)(l)
	return l, nil
}

// A nil *Library is no library: its accessors give zero values (no
// version, no runtime, no function, no type) and its other methods an error
// matching ErrClosed (see nilLibrary), as os.File's methods do for a nil
// *File. Its fields (Path, Via, Trace) cannot be read: Go has no way to
// refuse that.

// Version is the NCCL version the library reports.
func (l *Library) Version() Version {
	if l == nil {
		return Version{}
	}
	return l.version
}

// CUDA is the CUDA runtime loaded with the library, or nil with WithoutCUDARuntime.
func (l *Library) CUDA() *CUDA {
	if l == nil {
		return nil
	}
	return l.cuda
}

// AlltoAllvABI is the number of arguments of the ncclAlltoAllv form in use (10 or 11).
func (l *Library) AlltoAllvABI() int {
	if l == nil {
		return 0
	}
	return l.a2avABI
}

// Has reports whether the library exports the named C function ("ncclCommSplit").
// It scans the symbol table: call it once, not per operation.
func (l *Library) Has(name string) bool {
	if l == nil {
		return false
	}
	for i, s := range capi.NCCLSymbols {
		if s.Name == name {
			return l.nc.Fn[i] != 0
		}
	}
	return false
}

// Require returns nil if the library exports every named C function, else
// the *UnsupportedError of the first it lacks ("requires >= 2.29.2"), the
// same error a call of it would return: a program can say at start-up that
// the loaded NCCL is too old, before making communicators. A name gonccl does
// not bind is an error matching ErrInvalidArgument.
func (l *Library) Require(names ...string) error {
	if l == nil {
		return nilLibrary("Require")
	}
	for _, name := range names {
		i := slices.IndexFunc(capi.NCCLSymbols[:], func(s capi.Symbol) bool { return s.Name == name })
		if i < 0 {
			return argError("Require", "%q is not an NCCL function gonccl binds", name)
		}
		if l.nc.Fn[i] == 0 {
			return l.unsupported(i)
		}
	}
	return nil
}

// Features lists the functions some supported releases lack, and whether this
// library has each.
func (l *Library) Features() []Feature {
	if l == nil {
		return nil
	}
	var out []Feature
	for i, s := range capi.NCCLSymbols {
		if s.Required(MinVersion) {
			continue
		}
		out = append(out, Feature{Name: s.Name, Since: s.Since, Vendor: s.Vendor, Present: l.nc.Fn[i] != 0})
	}
	return out
}

// SupportsType reports whether the library knows the data type (bfloat16 from
// 2.10, the fp8 types from 2.24).
func (l *Library) SupportsType(t DataType) bool { return l != nil && l.typeOK(t) }

func (l *Library) typeOK(t DataType) bool { return t >= 0 && int(t) < len(l.types) && l.types[t] }

// track and untrack count the open communicators, for Close: newComm counts
// each in, and Comm.free, which runs once per communicator, out.
func (l *Library) track() {
	l.commsMu.Lock()
	l.commsOpen++
	l.commsMu.Unlock()
}

func (l *Library) untrack() {
	l.commsMu.Lock()
	l.commsOpen--
	l.commsMu.Unlock()
}

// Close ends the use of the library: later calls that would start NCCL work
// (ids, communicators, groups, NCCL's memory from MemAlloc) return an error
// matching ErrClosed. The CUDA runtime it opened (CUDA) is not NCCL's and
// stays usable: its memory, streams and events may outlive the library. It
// fails while communicators are open. The files stay mapped: NCCL's threads and state
// can outlive an unload, and another Library of the same file shares them.
func (l *Library) Close() error {
	if l == nil {
		return nilLibrary("Close")
	}
	l.commsMu.Lock()
	n := l.commsOpen
	l.commsMu.Unlock()
	if n > 0 {
		return &Error{Op: "Close", Code: abi.InvalidUsage, Msg: fmt.Sprintf("%d communicators still open", n)}
	}
	if n := l.givenUp.Load(); n > 0 {
		return &Error{Op: "Close", Code: abi.InvalidUsage, Msg: fmt.Sprintf("%d blocking inits given up at their context's end are still inside NCCL", n)}
	}
	l.closed.Store(true)
	return nil
}

// ErrorString is NCCL's text for a result code.
func (l *Library) ErrorString(r Result) string {
	if l == nil || l.nc.Fn[capi.FnGetErrorString] == 0 {
		return r.String()
	}
	return ccall.GoString(l.nc.GetErrorString(r))
}

// LastError is NCCL's text for the last failure in the process (ncclGetLastError).
// NCCL keeps one buffer for the whole process: a failure on another goroutine
// may have replaced it.
func (l *Library) LastError() string {
	if l == nil {
		return ""
	}
	return ccall.GoString(l.nc.GetLastError())
}

// ncclFailures gives NCCL's table the Library's errors (capi.Failures).
type ncclFailures Library

func (f *ncclFailures) Result(sym int, r int32) error { return (*Library)(f).result(sym, r) }
func (f *ncclFailures) Missing(sym int) error         { return (*Library)(f).unsupported(sym) }
func (f *ncclFailures) Guard(r int32) error           { return (*Library)(f).cuda.guardFailure(r) }

// callOn calls an NCCL function on a thread with a current CUDA device (see
// capi.ThreadDevice): dev is the device of the communicator it concerns, or -1.
func (l *Library) callOn(dev int, fn uintptr, args ...uintptr) (uintptr, error) {
	if l.cuda == nil {
		return ccall.Call(fn, args...), nil
	}
	return l.cuda.callOn(dev, fn, args...)
}

// result is the error of a result other than ncclSuccess. Out of line: the
// hot path (Comm.stream) calls callOn itself and comes here only on a
// failure or a non-blocking communicator's ncclInProgress.
//
//go:noinline
func (l *Library) result(sym int, r int32) error {
	if abi.Result(r) == abi.InProgress { // a non-blocking communicator's every launch: no allocation
		return inProgress[sym]
	}
	return l.failure(sym, abi.Result(r))
}

// inProgress holds each function's ncclInProgress result, made once.
var inProgress = func() (e [capi.NumNCCL]*Error) {
	for i, s := range capi.NCCLSymbols {
		e[i] = &Error{Op: s.Name, Code: abi.InProgress, Msg: "operation in progress"}
	}
	return e
}()

func (l *Library) failure(sym int, r abi.Result) error {
	msg := l.LastError()
	if msg == "" {
		msg = l.ErrorString(r)
	}
	if strings.Contains(msg, "when stream is capturing") {
		// NCCL connected ranks (or allocated) on a thread a capture forbade
		// it: a capture gonccl did not begin, whose thread it cannot relax
		// (see CUDA.relax).
		return &Error{Op: capi.NCCLSymbols[sym].Name, Code: r, duringCapture: true, Msg: msg + captureHint}
	}
	return &Error{Op: capi.NCCLSymbols[sym].Name, Code: r, Msg: msg}
}

const captureHint = "; NCCL connects ranks inside their first operations together, which a CUDA stream capture forbids " +
	"on its thread unless gonccl began it: capture with CUDA.Capture or BeginCapture, or run the operations once before capturing them"

func (l *Library) unsupported(sym int) error {
	s := capi.NCCLSymbols[sym]
	req := ">= " + shortVersion(s.Since)
	if s.Vendor != "" {
		req = s.Vendor
	} else if l.version.AtLeast(s.Since) { // new enough, yet the build lacks it (a fork such as VCCL)
		req += ", which this build does not export"
	}
	return &UnsupportedError{Name: s.Name, Path: l.Path, Version: l.version, Requires: req}
}

func (l *Library) live(op string) error {
	if l.closed.Load() {
		return &ClosedError{Op: op, What: "library"}
	}
	return nil
}

// onDevice runs fn on a locked OS thread with dev as the CUDA runtime's current
// device, then restores the previous one: NCCL binds a communicator to the calling
// thread's current device, and goroutines move between threads.
func (l *Library) onDevice(op string, dev int, fn func() error) error {
	if err := l.live(op); err != nil {
		return err
	}
	if l.cuda == nil {
		return &Error{Op: op, Code: abi.InvalidUsage, Msg: "needs the CUDA runtime to select the device (opened WithoutCUDARuntime)"}
	}
	return l.cuda.OnDevice(dev, fn)
}
