package nccl

import (
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// Library is a loaded libnccl (NCCL or a fork such as VCCL) and, unless
// WithoutCUDARuntime was given, the CUDA runtime beside it. Its methods are safe
// for concurrent use.
type Library struct {
	LibraryFile

	version abi.Version
	fn      [numNCCLSymbols]uintptr
	a2avABI int // 10 or 11 arguments: the ncclAlltoAllv form in use
	cuda    *CUDA

	closed atomic.Bool
	comms  atomic.Int64 // live communicators

	// AlltoAllv matrices NCCL may still read: pinned while any Group is open
	// (see Group).
	groupsOpen atomic.Int32 // goroutines inside Group
	pinsMu     sync.Mutex
	pins       []*runtime.Pinner
}

// Option configures Open.
type Option func(*options)

type options struct {
	nccl, cudart string
	a2avABI      int
	noCUDA       bool
}

// WithLibrary loads libnccl from path, a file or a folder, before any search.
func WithLibrary(path string) Option { return func(o *options) { o.nccl = path } }

// WithCUDARuntime loads libcudart from path, a file or a folder, before any search.
func WithCUDARuntime(path string) Option { return func(o *options) { o.cudart = path } }

// WithoutCUDARuntime loads NCCL alone. Calls that must make a device current
// (communicator creation, MemAlloc) then fail; the rest work.
func WithoutCUDARuntime() Option { return func(o *options) { o.noCUDA = true } }

// WithAlltoAllvABI chooses the form of VCCL's ncclAlltoAllv: 11 arguments (the
// current one, with relaycount; the default) or 10 (the January 2026 form). Both
// report version 2.29.2, so no symbol tells them apart. GONCCL_ALLTOALLV_ABI sets
// the same when this option is absent.
func WithAlltoAllvABI(nargs int) Option { return func(o *options) { o.a2avABI = nargs } }

// Open finds and loads libnccl and the CUDA runtime (see the README for the
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
				return nil, fmt.Errorf("gonccl: GONCCL_ALLTOALLV_ABI=%q: want 10 or 11", v)
			}
			o.a2avABI = n
		} else {
			o.a2avABI = 11
		}
	}
	if o.a2avABI != 10 && o.a2avABI != 11 {
		return nil, fmt.Errorf("gonccl: ncclAlltoAllv ABI %d: want 10 or 11 arguments", o.a2avABI)
	}

	file, err := search(ncclSpec, o.nccl, os.Getenv)
	if err != nil {
		return nil, err
	}
	l := &Library{LibraryFile: file, a2avABI: o.a2avABI}
	// The version first: it decides which symbols are required and the error
	// for a release too old is clearer than one about a missing symbol.
	if l.fn[fnGetVersion] = dlsym(file.handle, ncclSymbols[fnGetVersion].cname); l.fn[fnGetVersion] == 0 {
		return nil, &MissingSymbolError{Symbol: "ncclGetVersion", Path: file.Path}
	}
	var code int32
	if r := abi.Result(int32(ccall.CallPtr(l.fn[fnGetVersion], uintptr(unsafe.Pointer(&code))))); r != abi.Success {
		return nil, &Error{Op: "ncclGetVersion", Code: r}
	}
	l.version = abi.DecodeVersion(int(code))
	if !l.version.AtLeast(MinVersion) {
		return nil, &TooOldError{Path: file.Path, Version: l.version, Min: MinVersion}
	}
	if err := resolve(file.handle, file.Path, ncclSymbols[:], l.fn[:], func(s *symbol) bool { return s.required(MinVersion) }); err != nil {
		return nil, err
	}
	if !o.noCUDA {
		if l.cuda, err = OpenCUDA(WithCUDARuntime(o.cudart)); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Version is the NCCL version the library reports.
func (l *Library) Version() abi.Version { return l.version }

// CUDA is the CUDA runtime loaded with the library, or nil with WithoutCUDARuntime.
func (l *Library) CUDA() *CUDA { return l.cuda }

// AlltoAllvABI is the number of arguments of the ncclAlltoAllv form in use (10 or 11).
func (l *Library) AlltoAllvABI() int { return l.a2avABI }

// Has reports whether the library exports the named C function ("ncclCommSplit").
func (l *Library) Has(name string) bool {
	for i, s := range ncclSymbols {
		if s.name == name {
			return l.fn[i] != 0
		}
	}
	return false
}

// Features lists the functions some supported releases lack, and whether this
// library has each.
func (l *Library) Features() []Feature {
	var out []Feature
	for i, s := range ncclSymbols {
		if s.required(MinVersion) {
			continue
		}
		out = append(out, Feature{Name: s.name, Since: s.since, Vendor: s.vendor, Present: l.fn[i] != 0})
	}
	return out
}

// SupportsType reports whether the library knows the data type (bfloat16 from
// 2.10, the fp8 types from 2.24).
func (l *Library) SupportsType(t abi.DataType) bool {
	return t.Valid() && l.version.AtLeast(t.Since())
}

// Close ends the use of the library: later calls that would start work (ids,
// communicators, groups, memory) return an error matching ErrClosed. It fails
// while communicators are open. The files stay mapped: NCCL's threads and state
// can outlive an unload, and another Library of the same file shares them.
func (l *Library) Close() error {
	if n := l.comms.Load(); n > 0 {
		return &Error{Op: "Close", Code: abi.InvalidUsage, Msg: fmt.Sprintf("%d communicators still open", n)}
	}
	l.closed.Store(true)
	return nil
}

// ErrorString is NCCL's text for a result code.
func (l *Library) ErrorString(r abi.Result) string {
	if l.fn[fnGetErrorString] == 0 {
		return r.String()
	}
	return ccall.GoString(ccall.Call(l.fn[fnGetErrorString], uintptr(r)))
}

// LastError is NCCL's text for the last failure in the process (ncclGetLastError).
// NCCL keeps one buffer for the whole process: a failure on another goroutine
// may have replaced it.
func (l *Library) LastError() string {
	return ccall.GoString(ccall.Call(l.fn[fnGetLastError], 0))
}

// call runs an NCCL function with arguments that hold no Go pointers and turns its
// result into an error. It allocates nothing on success.
func (l *Library) call(sym int, args ...uintptr) error {
	fn := l.fn[sym]
	if fn == 0 {
		return l.unsupported(sym)
	}
	if r := abi.Result(int32(ccall.Call(fn, args...))); r != abi.Success {
		return l.failure(sym, r)
	}
	return nil
}

// callPtr is call for arguments converted from Go pointers in the argument list
// (see ccall.CallPtr).
//
//go:uintptrescapes
func (l *Library) callPtr(sym int, args ...uintptr) error {
	return l.call(sym, args...)
}

func (l *Library) failure(sym int, r abi.Result) error {
	msg := l.LastError()
	if msg == "" {
		msg = l.ErrorString(r)
	}
	return &Error{Op: ncclSymbols[sym].name, Code: r, Msg: msg}
}

func (l *Library) unsupported(sym int) error {
	s := ncclSymbols[sym]
	req := ">= " + shortVersion(s.since)
	if s.vendor != "" {
		req = s.vendor
	}
	return &UnsupportedError{Name: s.name, Path: l.Path, Version: l.version, Requires: req}
}

func shortVersion(v abi.Version) string {
	if v.Patch == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return v.String()
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

// UniqueID is the 128-byte ncclUniqueId that ranks share to form a communicator.
// Its text form is 256 hex digits.
type UniqueID abi.UniqueID

// GetUniqueID creates an id. Without NCCL_COMM_ID it also starts NCCL's bootstrap
// root in this process; with NCCL_COMM_ID=host:port every rank gets the same id
// from that address and nothing is started.
func (l *Library) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := l.live("ncclGetUniqueId"); err != nil {
		return id, err
	}
	err := l.callPtr(fnGetUniqueID, uintptr(unsafe.Pointer(&id)))
	return id, err
}

// String is the text form: 256 lowercase hex digits.
func (id UniqueID) String() string { return hex.EncodeToString(id.Internal[:]) }

// MarshalText implements encoding.TextMarshaler.
func (id UniqueID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *UniqueID) UnmarshalText(b []byte) error {
	v, err := ParseUniqueID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// MarshalBinary returns the 128 bytes.
func (id UniqueID) MarshalBinary() ([]byte, error) {
	return append([]byte(nil), id.Internal[:]...), nil
}

// UnmarshalBinary takes exactly 128 bytes.
func (id *UniqueID) UnmarshalBinary(b []byte) error {
	if len(b) != abi.UniqueIDBytes {
		return fmt.Errorf("gonccl: unique id is %d bytes, want %d", len(b), abi.UniqueIDBytes)
	}
	copy(id.Internal[:], b)
	return nil
}

// ParseUniqueID reads the text form (256 hex digits; surrounding white space is
// ignored).
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	s = trimSpace(s)
	if len(s) != 2*abi.UniqueIDBytes {
		return id, fmt.Errorf("gonccl: unique id text is %d characters, want %d hex digits", len(s), 2*abi.UniqueIDBytes)
	}
	if _, err := hex.Decode(id.Internal[:], []byte(s)); err != nil {
		return UniqueID{}, fmt.Errorf("gonccl: unique id text: %v", err)
	}
	return id, nil
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\n' || s[0] == '\t' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\n' || s[len(s)-1] == '\t' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// Comm is an NCCL communicator. Its methods are safe from any goroutine; stream
// operations only enqueue work and return. After Destroy or Abort every method
// returns an error matching ErrClosed.
type Comm struct {
	lib *Library
	// mu guards h: operations hold it shared, Destroy and Finalize exclusively,
	// so no call can reach NCCL with a freed communicator.
	mu     sync.RWMutex
	h      uintptr
	dev    int
	rank   int
	nranks int
	cfg    *configBuffer // the ncclConfig_t and its strings, kept for the communicator's life
}

// Config describes ncclConfig_t; nil fields keep NCCL's defaults.
type Config = abi.Config

// newComm wraps a handle NCCL returned. rank and nranks are queried unless known
// (a non-blocking communicator may not answer yet).
func (l *Library) newComm(h uintptr, dev, rank, nranks int, cfg *configBuffer) (*Comm, error) {
	c := &Comm{lib: l, h: h, dev: dev, rank: rank, nranks: nranks, cfg: cfg}
	l.comms.Add(1)
	if nranks > 0 {
		return c, nil
	}
	var n, r int32
	if err := l.callPtr(fnCommCount, h, uintptr(unsafe.Pointer(&n))); err != nil && !isInProgress(err) {
		return c, err
	}
	if err := l.callPtr(fnCommUserRank, h, uintptr(unsafe.Pointer(&r))); err != nil && !isInProgress(err) {
		return c, err
	}
	c.nranks, c.rank = int(n), int(r)
	return c, nil
}

func isInProgress(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Code == abi.InProgress
}

// InitRank creates rank's communicator among nranks on device dev (a CUDA device
// ordinal). It blocks until every rank has joined. The id is passed by value, as
// ncclCommInitRank takes it.
func (l *Library) InitRank(dev int, id UniqueID, nranks, rank int) (*Comm, error) {
	return l.InitRankConfig(dev, id, nranks, rank, nil)
}

// InitRankConfig is InitRank with a configuration, encoded in the ncclConfig_t
// layout of the loaded version. With Blocking set to false it returns at once:
// the communicator is ready when AsyncError stops reporting ErrInProgress.
func (l *Library) InitRankConfig(dev int, id UniqueID, nranks, rank int, cfg *Config) (*Comm, error) {
	op := "ncclCommInitRankConfig"
	if cfg == nil {
		op = "ncclCommInitRank"
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, argError(op, "rank %d of %d ranks", rank, nranks)
	}
	var c *Comm
	err := l.onDevice(op, dev, func() error {
		var h uintptr
		var err error
		var buf *configBuffer
		if cfg == nil {
			err = l.structCall(fnCommInitRank, 2, &id, uintptr(unsafe.Pointer(&h)), uintptr(nranks), uintptr(rank))
		} else {
			var ptr uintptr
			if buf, ptr, err = encodeConfig(op, cfg, l.version); err != nil {
				return err
			}
			err = l.structCall(fnCommInitRankConfig, 2, &id, uintptr(unsafe.Pointer(&h)), uintptr(nranks), uintptr(rank), ptr)
		}
		if err != nil && !isInProgress(err) {
			buf.free()
			return err
		}
		c, _ = l.newComm(h, dev, rank, nranks, buf)
		return err
	})
	if isInProgress(err) {
		return c, nil
	}
	return c, err
}

// structCall calls a function taking the 128-byte id by value at argument pos.
// Pointer arguments are converted in the argument list (see ccall.CallPtr).
//
//go:uintptrescapes
func (l *Library) structCall(sym, pos int, id *UniqueID, args ...uintptr) error {
	fn := l.fn[sym]
	if fn == 0 {
		return l.unsupported(sym)
	}
	if r := abi.Result(int32(ccall.CallStruct128(fn, pos, &id.Internal, args...))); r != abi.Success {
		return l.failure(sym, r)
	}
	return nil
}

// InitAll creates one communicator per device in one call, from one process
// (ncclCommInitAll): comms[i] is rank i on devs[i].
func (l *Library) InitAll(devs []int) ([]*Comm, error) {
	const op = "ncclCommInitAll"
	if err := l.live(op); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, argError(op, "no devices")
	}
	hs := make([]uintptr, len(devs))
	ds := make([]int32, len(devs))
	for i, d := range devs {
		ds[i] = int32(d)
	}
	if err := l.callPtr(fnCommInitAll, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(devs)), uintptr(unsafe.Pointer(&ds[0]))); err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(devs))
	for i, h := range hs {
		c, err := l.newComm(h, devs[i], i, len(devs), nil)
		if err != nil {
			return nil, err
		}
		comms[i] = c
	}
	return comms, nil
}

// InitRankScalable creates a communicator from several ids, spreading the
// bootstrap over several roots (NCCL >= 2.23). ncclCommInitRankScalable takes the
// ids by pointer.
func (l *Library) InitRankScalable(dev int, ids []UniqueID, nranks, rank int, cfg *Config) (*Comm, error) {
	const op = "ncclCommInitRankScalable"
	if l.fn[fnCommInitRankScalable] == 0 {
		return nil, l.unsupported(fnCommInitRankScalable)
	}
	if len(ids) == 0 || nranks < 1 || rank < 0 || rank >= nranks {
		return nil, argError(op, "rank %d of %d ranks with %d ids", rank, nranks, len(ids))
	}
	var c *Comm
	err := l.onDevice(op, dev, func() error {
		var h uintptr
		buf, ptr, err := encodeConfig(op, cfg, l.version)
		if err != nil {
			return err
		}
		err = l.callPtr(fnCommInitRankScalable, uintptr(unsafe.Pointer(&h)), uintptr(nranks), uintptr(rank),
			uintptr(len(ids)), uintptr(unsafe.Pointer(&ids[0])), ptr)
		runtime.KeepAlive(ids)
		if err != nil && !isInProgress(err) {
			buf.free()
			return err
		}
		c, _ = l.newComm(h, dev, rank, nranks, buf)
		return err
	})
	if isInProgress(err) {
		return c, nil
	}
	return c, err
}

// Split creates a communicator of the ranks that pass the same color, ordered by
// key then by their rank here (ncclCommSplit, NCCL >= 2.18). Every rank of c must
// call it. A rank passing abi.SplitNoColor gets a nil communicator and no error.
func (c *Comm) Split(color, key int, cfg *Config) (*Comm, error) {
	const op = "ncclCommSplit"
	l := c.lib
	if l.fn[fnCommSplit] == 0 {
		return nil, l.unsupported(fnCommSplit)
	}
	var nc *Comm
	err := l.onDevice(op, c.dev, func() error {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if c.h == 0 {
			return &ClosedError{Op: op, What: "communicator"}
		}
		var h uintptr
		buf, ptr, err := encodeConfig(op, cfg, l.version)
		if err != nil {
			return err
		}
		err = l.callPtr(fnCommSplit, c.h, uintptr(int32(color)), uintptr(int32(key)), uintptr(unsafe.Pointer(&h)), ptr)
		if err != nil && !isInProgress(err) || h == 0 {
			buf.free()
			return err
		}
		nc, _ = l.newComm(h, c.dev, 0, 0, buf)
		return err
	})
	if isInProgress(err) {
		return nc, nil
	}
	return nc, err
}

// Device is the CUDA device ordinal of the communicator.
func (c *Comm) Device() int { return c.dev }

// Rank is this communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// Count is the number of ranks.
func (c *Comm) Count() int { return c.nranks }

// Library is the library the communicator was made with.
func (c *Comm) Library() *Library { return c.lib }

// Handle is the raw ncclComm_t, for calls gonccl does not wrap; 0 once closed.
func (c *Comm) Handle() uintptr {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.h
}

// AsyncError is ncclCommGetAsyncError: nil, an error matching ErrInProgress while
// a non-blocking operation runs, or the communicator's asynchronous failure.
func (c *Comm) AsyncError() error {
	const op = "ncclCommGetAsyncError"
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return &ClosedError{Op: op, What: "communicator"}
	}
	var r int32
	if err := c.lib.callPtr(fnCommGetAsyncError, c.h, uintptr(unsafe.Pointer(&r))); err != nil {
		return err
	}
	if abi.Result(r) != abi.Success {
		return &Error{Op: op, Code: abi.Result(r), Msg: c.lib.ErrorString(abi.Result(r))}
	}
	return nil
}

// Finalize flushes the communicator's outstanding work and stops its use for new
// operations (ncclCommFinalize); Destroy must still follow.
func (c *Comm) Finalize() error {
	const op = "ncclCommFinalize"
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == 0 {
		return &ClosedError{Op: op, What: "communicator"}
	}
	err := c.lib.call(fnCommFinalize, c.h)
	if isInProgress(err) {
		return nil
	}
	return err
}

// Destroy frees the communicator once its work is done. Later calls return
// ErrClosed.
func (c *Comm) Destroy() error { return c.release(fnCommDestroy) }

// Abort frees the communicator at once, cancelling its outstanding work. It is
// the way out of a hung operation: call it from another goroutine.
func (c *Comm) Abort() error { return c.release(fnCommAbort) }

func (c *Comm) release(sym int) error {
	op := ncclSymbols[sym].name
	if sym != fnCommAbort {
		c.mu.Lock()
		defer c.mu.Unlock()
	} else if c.mu.TryLock() {
		defer c.mu.Unlock()
	} // else: an operation is inside NCCL, maybe blocked; Abort is what unblocks it.
	h := atomic.SwapUintptr(&c.h, 0)
	if h == 0 {
		return &ClosedError{Op: op, What: "communicator"}
	}
	c.lib.comms.Add(-1)
	err := c.lib.call(sym, h)
	c.cfg.free()
	return err
}

// stream runs a stream operation whose last two C arguments are the communicator
// and the stream: args holds them as placeholders, the communicator is filled in
// under the lock. No allocation.
func (c *Comm) stream(sym int, args ...uintptr) error {
	c.mu.RLock()
	h := atomic.LoadUintptr(&c.h)
	if h == 0 {
		c.mu.RUnlock()
		return &ClosedError{Op: ncclSymbols[sym].name, What: "communicator"}
	}
	args[len(args)-2] = h
	err := c.lib.call(sym, args...)
	c.mu.RUnlock()
	return err
}

// DevicePtr is an address in device memory (or any address NCCL accepts as a
// buffer: registered or managed memory).
type DevicePtr uintptr

// Stream is a cudaStream_t; 0 is the legacy default stream.
type Stream uintptr

func checkCount(sym int, count int) error {
	if count < 0 {
		return argError(ncclSymbols[sym].name, "negative count %d", count)
	}
	return nil
}

// AllReduce reduces count elements across ranks into recv on every rank.
func (c *Comm) AllReduce(send, recv DevicePtr, count int, dt abi.DataType, op abi.RedOp, s Stream) error {
	if err := checkCount(fnAllReduce, count); err != nil {
		return err
	}
	return c.stream(fnAllReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), 0, uintptr(s))
}

// Broadcast copies count elements from root's send to every rank's recv.
func (c *Comm) Broadcast(send, recv DevicePtr, count int, dt abi.DataType, root int, s Stream) error {
	if err := checkCount(fnBroadcast, count); err != nil {
		return err
	}
	return c.stream(fnBroadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(root)), 0, uintptr(s))
}

// Reduce reduces count elements across ranks into root's recv.
func (c *Comm) Reduce(send, recv DevicePtr, count int, dt abi.DataType, op abi.RedOp, root int, s Stream) error {
	if err := checkCount(fnReduce, count); err != nil {
		return err
	}
	return c.stream(fnReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(int32(root)), 0, uintptr(s))
}

// AllGather gathers sendCount elements from each rank into recv (nranks×sendCount).
func (c *Comm) AllGather(send, recv DevicePtr, sendCount int, dt abi.DataType, s Stream) error {
	if err := checkCount(fnAllGather, sendCount); err != nil {
		return err
	}
	return c.stream(fnAllGather, uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), 0, uintptr(s))
}

// ReduceScatter reduces nranks×recvCount elements and leaves block rank in recv.
func (c *Comm) ReduceScatter(send, recv DevicePtr, recvCount int, dt abi.DataType, op abi.RedOp, s Stream) error {
	if err := checkCount(fnReduceScatter, recvCount); err != nil {
		return err
	}
	return c.stream(fnReduceScatter, uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt), uintptr(op), 0, uintptr(s))
}

// AlltoAll sends count elements to every rank and receives count from each
// (ncclAlltoAll, NCCL >= 2.28).
func (c *Comm) AlltoAll(send, recv DevicePtr, count int, dt abi.DataType, s Stream) error {
	if err := checkCount(fnAlltoAll, count); err != nil {
		return err
	}
	return c.stream(fnAlltoAll, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), 0, uintptr(s))
}

// Gather collects count elements from every rank into root's recv (NCCL >= 2.28).
func (c *Comm) Gather(send, recv DevicePtr, count int, dt abi.DataType, root int, s Stream) error {
	if err := checkCount(fnGather, count); err != nil {
		return err
	}
	return c.stream(fnGather, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(root)), 0, uintptr(s))
}

// Scatter sends count elements of root's send to each rank (NCCL >= 2.28).
func (c *Comm) Scatter(send, recv DevicePtr, count int, dt abi.DataType, root int, s Stream) error {
	if err := checkCount(fnScatter, count); err != nil {
		return err
	}
	return c.stream(fnScatter, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(root)), 0, uintptr(s))
}

// Send sends count elements to peer. Pair it with the peer's Recv, inside a Group
// when a rank both sends and receives.
func (c *Comm) Send(send DevicePtr, count int, dt abi.DataType, peer int, s Stream) error {
	if err := checkCount(fnSend, count); err != nil {
		return err
	}
	return c.stream(fnSend, uintptr(send), uintptr(count), uintptr(dt), uintptr(int32(peer)), 0, uintptr(s))
}

// Recv receives count elements from peer.
func (c *Comm) Recv(recv DevicePtr, count int, dt abi.DataType, peer int, s Stream) error {
	if err := checkCount(fnRecv, count); err != nil {
		return err
	}
	return c.stream(fnRecv, uintptr(recv), uintptr(count), uintptr(dt), uintptr(int32(peer)), 0, uintptr(s))
}

// AlltoAllv is VCCL's ncclAlltoAllv. sendCounts, sendDispls, recvCounts and
// recvDispls are the whole nranks×nranks matrices, in elements, indexed
// [i*nranks+j], identical on every rank. send and recv must lie in windows
// registered with abi.WinCollSymmetric. relay and relayCount serve transfers
// across nodes; 0 on one node. relayCount is dropped in the 10-argument form.
//
// NCCL reads the matrices until the enclosing group ends: gonccl pins them until
// then (until the call returns outside a Group); do not change them before.
func (c *Comm) AlltoAllv(send DevicePtr, sendCounts, sendDispls []uint64, recv DevicePtr, recvCounts, recvDispls []uint64,
	relay DevicePtr, relayCount int, dt abi.DataType, s Stream) error {
	const op = "ncclAlltoAllv"
	l := c.lib
	if l.fn[fnAlltoAllv] == 0 {
		return l.unsupported(fnAlltoAllv)
	}
	n := c.nranks * c.nranks
	for _, m := range []struct {
		name string
		v    []uint64
	}{{"sendCounts", sendCounts}, {"sendDispls", sendDispls}, {"recvCounts", recvCounts}, {"recvDispls", recvDispls}} {
		if len(m.v) != n {
			return argError(op, "%s has %d entries, want nranks×nranks = %d", m.name, len(m.v), n)
		}
	}
	if relayCount < 0 {
		return argError(op, "negative relay count %d", relayCount)
	}
	pin := new(runtime.Pinner)
	for _, v := range [][]uint64{sendCounts, sendDispls, recvCounts, recvDispls} {
		pin.Pin(&v[0])
	}
	sc, sd := uintptr(unsafe.Pointer(&sendCounts[0])), uintptr(unsafe.Pointer(&sendDispls[0]))
	rc, rd := uintptr(unsafe.Pointer(&recvCounts[0])), uintptr(unsafe.Pointer(&recvDispls[0]))
	var err error
	if l.a2avABI == 10 {
		err = c.stream(fnAlltoAllv, uintptr(send), sc, sd, uintptr(recv), rc, rd, uintptr(relay), uintptr(dt), 0, uintptr(s))
	} else {
		err = c.stream(fnAlltoAllv, uintptr(send), sc, sd, uintptr(recv), rc, rd, uintptr(relay), uintptr(relayCount), uintptr(dt), 0, uintptr(s))
	}
	if l.groupsOpen.Load() == 0 {
		pin.Unpin() // not in a group: NCCL is done with the matrices
		return err
	}
	// Perhaps inside a group: kept until no group is open (see Group).
	l.pinsMu.Lock()
	l.pins = append(l.pins, pin)
	l.pinsMu.Unlock()
	l.releasePins()
	return err
}

// CreatePreMulSum creates a reduction op that multiplies each input by scalar
// before summing (ncclRedOpCreatePreMulSum). scalar holds one element of dt in
// host memory, read during this call. Free it with DestroyRedOp.
func (c *Comm) CreatePreMulSum(scalar []byte, dt abi.DataType) (abi.RedOp, error) {
	const op = "ncclRedOpCreatePreMulSum"
	if len(scalar) != dt.Size() || dt.Size() == 0 {
		return 0, argError(op, "scalar of %d bytes for %v", len(scalar), dt)
	}
	return c.createPreMulSum(uintptr(unsafe.Pointer(&scalar[0])), dt, abi.ScalarHostImmediate, scalar)
}

// CreatePreMulSumDevice is CreatePreMulSum with the scalar in device memory, read
// by every operation that uses the op (so it can change between them).
func (c *Comm) CreatePreMulSumDevice(scalar DevicePtr, dt abi.DataType) (abi.RedOp, error) {
	return c.createPreMulSum(uintptr(scalar), dt, abi.ScalarDevice, nil)
}

func (c *Comm) createPreMulSum(scalar uintptr, dt abi.DataType, res abi.ScalarResidence, keep []byte) (abi.RedOp, error) {
	const op = "ncclRedOpCreatePreMulSum"
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return 0, &ClosedError{Op: op, What: "communicator"}
	}
	var r int32
	err := c.lib.callPtr(fnRedOpCreatePreMulSum, uintptr(unsafe.Pointer(&r)), scalar, uintptr(dt), uintptr(res), c.h)
	runtime.KeepAlive(keep)
	return abi.RedOp(r), err
}

// DestroyRedOp frees an op made by CreatePreMulSum.
func (c *Comm) DestroyRedOp(op abi.RedOp) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return &ClosedError{Op: "ncclRedOpDestroy", What: "communicator"}
	}
	return c.lib.call(fnRedOpDestroy, uintptr(op), c.h)
}

// RegHandle is a buffer registration made by Register.
type RegHandle uintptr

// Register registers a buffer with the communicator for zero-copy transfers
// (ncclCommRegister, NCCL >= 2.19).
func (c *Comm) Register(buf DevicePtr, size int) (RegHandle, error) {
	const op = "ncclCommRegister"
	if size < 0 {
		return 0, argError(op, "negative size %d", size)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return 0, &ClosedError{Op: op, What: "communicator"}
	}
	var h uintptr
	err := c.lib.callPtr(fnCommRegister, c.h, uintptr(buf), uintptr(size), uintptr(unsafe.Pointer(&h)))
	return RegHandle(h), err
}

// Deregister undoes Register.
func (c *Comm) Deregister(h RegHandle) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return &ClosedError{Op: "ncclCommDeregister", What: "communicator"}
	}
	return c.lib.call(fnCommDeregister, c.h, uintptr(h))
}

// Window is a window registration made by WindowRegister.
type Window uintptr

// WindowRegister registers buf as a window (ncclCommWindowRegister, NCCL >= 2.27);
// with abi.WinCollSymmetric it is a symmetric window, which every rank must
// register together. NCCL can report success without a window when symmetric
// memory is unavailable: that is returned as an error matching ErrNotSupported.
func (c *Comm) WindowRegister(buf DevicePtr, size int, flags int) (Window, error) {
	const op = "ncclCommWindowRegister"
	if size < 0 {
		return 0, argError(op, "negative size %d", size)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return 0, &ClosedError{Op: op, What: "communicator"}
	}
	var w uintptr
	if err := c.lib.callPtr(fnCommWindowRegister, c.h, uintptr(buf), uintptr(size), uintptr(unsafe.Pointer(&w)), uintptr(int32(flags))); err != nil {
		return 0, err
	}
	if w == 0 {
		return 0, &UnsupportedError{Name: op + " (returned no window: symmetric memory unavailable)", Path: c.lib.Path, Version: c.lib.version, Requires: "symmetric memory support"}
	}
	return Window(w), nil
}

// WindowDeregister undoes WindowRegister.
func (c *Comm) WindowDeregister(w Window) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return &ClosedError{Op: "ncclCommWindowDeregister", What: "communicator"}
	}
	return c.lib.call(fnCommWindowDeregister, c.h, uintptr(w))
}

// MemAlloc allocates size bytes on device dev with NCCL's allocator (ncclMemAlloc,
// NCCL >= 2.19), suitable for registration and symmetric windows.
func (l *Library) MemAlloc(dev int, size int) (DevicePtr, error) {
	const op = "ncclMemAlloc"
	if l.fn[fnMemAlloc] == 0 {
		return 0, l.unsupported(fnMemAlloc)
	}
	if size < 0 {
		return 0, argError(op, "negative size %d", size)
	}
	var p uintptr
	err := l.onDevice(op, dev, func() error {
		return l.callPtr(fnMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size))
	})
	return DevicePtr(p), err
}

// MemFree frees memory from MemAlloc.
func (l *Library) MemFree(p DevicePtr) error {
	if err := l.live("ncclMemFree"); err != nil {
		return err
	}
	return l.call(fnMemFree, uintptr(p))
}

// configBuffer holds an encoded ncclConfig_t and its strings in pinned Go memory.
type configBuffer struct {
	pin  runtime.Pinner
	mem  []byte
	strs [][]byte
}

// encodeConfig lays cfg out for library version v; nil gives a NULL config.
func encodeConfig(op string, cfg *Config, v abi.Version) (*configBuffer, uintptr, error) {
	if cfg == nil {
		return nil, 0, nil
	}
	b := &configBuffer{mem: make([]byte, 256)}
	b.pin.Pin(&b.mem[0])
	cstr := func(s string) uintptr {
		z := append([]byte(s), 0)
		b.strs = append(b.strs, z)
		b.pin.Pin(&z[0])
		return uintptr(unsafe.Pointer(&z[0]))
	}
	if _, err := abi.EncodeConfig(b.mem, cfg, v, cstr); err != nil {
		b.free()
		return nil, 0, &Error{Op: op, Code: abi.InvalidArgument, Msg: err.Error()}
	}
	return b, uintptr(unsafe.Pointer(&b.mem[0])), nil
}

func (b *configBuffer) free() {
	if b != nil {
		b.pin.Unpin()
	}
}

// Group runs fn between ncclGroupStart and ncclGroupEnd on one locked OS thread:
// NCCL's group state belongs to the thread, and a goroutine may otherwise move
// between threads in the middle. Operations issued by fn on this goroutine join
// the group (not those of goroutines fn starts). Groups nest. ncclGroupEnd runs
// even when fn fails, so the thread is never left inside a group; the errors of
// both are returned.
//
// Group costs two C calls and two atomic operations around fn. AlltoAllv's
// matrices, which NCCL reads until the group ends, stay pinned until no
// goroutine is inside a Group: gonccl does not ask the kernel which thread it
// runs on, so it cannot tell one goroutine's group from another's and keeps
// them for the longest.
func (l *Library) Group(fn func() error) error {
	if err := l.live("ncclGroupStart"); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := l.call(fnGroupStart); err != nil {
		return err
	}
	l.groupsOpen.Add(1)
	ferr := fn()
	eerr := l.call(fnGroupEnd)
	if l.groupsOpen.Add(-1) == 0 {
		l.releasePins()
	}
	if ferr != nil && eerr != nil {
		return fmt.Errorf("%w (and ncclGroupEnd: %v)", ferr, eerr)
	}
	if ferr != nil {
		return ferr
	}
	if isInProgress(eerr) {
		return nil
	}
	return eerr
}

// releasePins unpins the AlltoAllv matrices once no group is open. The count
// is read under the lock: a pin added after a group started is never in the
// list this call sees with the count at zero.
func (l *Library) releasePins() {
	l.pinsMu.Lock()
	defer l.pinsMu.Unlock()
	if len(l.pins) == 0 || l.groupsOpen.Load() != 0 {
		return
	}
	for _, p := range l.pins {
		p.Unpin()
	}
	clear(l.pins)
	l.pins = l.pins[:0]
}
