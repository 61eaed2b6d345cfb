// Package graphtest is the harness of gonccl's tests of CUDA graphs holding
// NCCL operations (the root package's cuda_graph_fake_test.go, and the tests
// that share its bodies on the fakes and on GPUs): reference data and its
// reduction, ranks that capture, launch and check a graph, and raw C calls
// into the fake libraries that make communicators and graphs gonccl does not
// know of.
//
// It imports package nccl, so only the root's external tests (package
// nccl_test) may use it: the root's internal tests (package nccl) importing
// it would be an import cycle. That is why it is a package of its own, apart
// from package fakes, which the internal tests import.
package graphtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/ccall"
)

// Variant is a fake NCCL whose operations can be captured.
type Variant struct {
	Name  string
	Waits bool // ncclCommDestroy and ncclCommAbort wait for the graphs (NCCL >= 2.26)
}

// Variants are the fake NCCLs whose operations can be captured: every one
// from 2.9 on, the destroy waiting for the graphs from 2.26 on.
var Variants = []Variant{{"default", true}, {"v230", true}, {"old", false}}

// ---- reference data ----

// Seed names the data of one rank's buffer k at one launch.
func Seed(base uint64, rank, launch, k int) uint64 {
	return base ^ uint64(rank+1)<<40 ^ uint64(launch+1)<<20 ^ uint64(k+1)
}

// GenData is n random elements of dt (float32, float64 or int64).
func GenData(dt nccl.DataType, n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	b := make([]byte, n*dt.Size())
	for i := range n {
		switch dt {
		// Floats with few significant bits (18 for float32, 45 for float64), so
		// that a sum of up to 32 ranks is exact in any order, as NCCL's is not
		// rounded the same way at more than 2 ranks (its ring sums in the type).
		case nccl.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rng.IntN(1<<18)-1<<17)/64))
		case nccl.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(rng.Int64N(1<<45)-1<<44)/1024))
		case nccl.Int64:
			binary.LittleEndian.PutUint64(b[8*i:], rng.Uint64())
		default:
			panic("GenData: type")
		}
	}
	return b
}

// ReduceRef is the all-reduce of ins (in rank order): floats summed in double
// precision and rounded once (exact for GenData's floats, whatever order
// NCCL sums in), integers wrapping.
func ReduceRef(dt nccl.DataType, op nccl.RedOp, ins [][]byte) []byte {
	out := make([]byte, len(ins[0]))
	sz := dt.Size()
	for i := 0; i < len(out); i += sz {
		switch dt {
		case nccl.Float32, nccl.Float64:
			get := func(b []byte) float64 {
				if dt == nccl.Float32 {
					return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
				}
				return math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
			}
			acc := get(ins[0])
			for _, in := range ins[1:] {
				if v := get(in); op == nccl.Max {
					acc = max(acc, v)
				} else {
					acc += v
				}
			}
			if dt == nccl.Float32 {
				binary.LittleEndian.PutUint32(out[i:], math.Float32bits(float32(acc)))
			} else {
				binary.LittleEndian.PutUint64(out[i:], math.Float64bits(acc))
			}
		case nccl.Int64:
			acc := int64(binary.LittleEndian.Uint64(ins[0][i:]))
			for _, in := range ins[1:] {
				if v := int64(binary.LittleEndian.Uint64(in[i:])); op == nccl.Max {
					acc = max(acc, v)
				} else {
					acc += v
				}
			}
			binary.LittleEndian.PutUint64(out[i:], uint64(acc))
		}
	}
	return out
}

// SameData compares every element and says where the first difference is.
func SameData(dt nccl.DataType, got, want []byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d bytes, want %d", len(got), len(want))
	}
	sz := dt.Size()
	for i := 0; i < len(got); i += sz {
		if !bytes.Equal(got[i:i+sz], want[i:i+sz]) {
			return fmt.Errorf("element %d of %d: got % x, want % x", i/sz, len(got)/sz, got[i:i+sz], want[i:i+sz])
		}
	}
	return nil
}

// ---- ranks ----

// OnRanks runs fn for every rank on a goroutine of its own and fails the test
// with the ranks' errors.
func OnRanks(tb testing.TB, n int, fn func(r int) error) {
	tb.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			tb.Errorf("rank %d: %v", r, err)
		}
	}
}

// CloseComms closes every communicator (their graphs destroyed first), one
// goroutine each, within a minute.
func CloseComms(tb testing.TB, comms []*nccl.Comm) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	OnRanks(tb, len(comms), func(r int) error { return comms[r].Close(ctx) })
}

// Spec is one all-reduce of a graph: its type and reduction.
type Spec struct {
	DT nccl.DataType
	Op nccl.RedOp
}

// ARSpecs are the all-reduces the graph tests capture, in order.
var ARSpecs = []Spec{{nccl.Float32, nccl.Sum}, {nccl.Int64, nccl.Max}, {nccl.Float64, nccl.Sum},
	{nccl.Float32, nccl.Max}, {nccl.Int64, nccl.Sum}, {nccl.Float64, nccl.Max}}

// Sentinel fills the outputs before a capture: a byte no captured operation
// writes, so that Untouched tells whether one ran.
const Sentinel = 0xEE

// Rank is what one rank of a graph test holds: its communicator, a
// non-blocking stream, the graph the test captures (Graph, set by the test)
// and page-locked staging memory for the asynchronous copies around each
// launch. Free gives it back (the graph first: Close refuses while graphs
// hold the communicator).
type Rank struct {
	CUDA   *nccl.CUDA
	Comm   *nccl.Comm
	Stream nccl.Stream
	Graph  *nccl.Graph

	bufs     []nccl.Buffer
	hostIn   []byte // page-locked: the source of the asynchronous copies of the inputs
	hostOut  []byte // page-locked: where the results are copied back
	inOff    int
	outOff   int
	freeList []func()
}

// NewRank makes c's rank: a non-blocking stream on c's device and hostBytes
// of page-locked staging memory each way.
func NewRank(cu *nccl.CUDA, c *nccl.Comm, hostBytes int) (*Rank, error) {
	rk := &Rank{CUDA: cu, Comm: c}
	var err error
	if rk.Stream, err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
		return nil, err
	}
	rk.freeList = append(rk.freeList, func() { rk.Stream.Destroy() })
	if rk.hostIn, err = cu.MallocHost(hostBytes); err != nil {
		rk.Free()
		return nil, err
	}
	rk.freeList = append(rk.freeList, func() { cu.FreeHost(rk.hostIn) })
	if rk.hostOut, err = cu.MallocHost(hostBytes); err != nil {
		rk.Free()
		return nil, err
	}
	rk.freeList = append(rk.freeList, func() { cu.FreeHost(rk.hostOut) })
	return rk, nil
}

// Alloc allocates n elements of dt on the rank's device, every byte set to
// fill; Free frees them.
func (rk *Rank) Alloc(dt nccl.DataType, n int, fill byte) (nccl.Buffer, error) {
	b, err := rk.CUDA.Alloc(rk.Comm.Device(), dt, n)
	if err != nil {
		return b, err
	}
	rk.bufs = append(rk.bufs, b)
	return b, b.Memset(fill)
}

// AllocPairs allocates, per spec, an input of n zeros and an output of n
// elements filled with Sentinel.
func (rk *Rank) AllocPairs(specs []Spec, n int) (ins, outs []nccl.Buffer, err error) {
	for _, sp := range specs {
		in, err := rk.Alloc(sp.DT, n, 0)
		if err != nil {
			return nil, nil, err
		}
		out, err := rk.Alloc(sp.DT, n, Sentinel)
		if err != nil {
			return nil, nil, err
		}
		ins, outs = append(ins, in), append(outs, out)
	}
	return ins, outs, nil
}

// Free destroys the graph, frees the buffers, the staging memory and the
// stream.
func (rk *Rank) Free() {
	if rk.Graph != nil {
		rk.Graph.Destroy()
	}
	for _, b := range rk.bufs {
		b.Free()
	}
	for i := len(rk.freeList) - 1; i >= 0; i-- {
		rk.freeList[i]()
	}
}

// Put enqueues an asynchronous copy of data into b (through the page-locked
// staging memory) on the rank's stream.
func (rk *Rank) Put(b nccl.Buffer, data []byte) error {
	if rk.inOff+len(data) > len(rk.hostIn) {
		return errors.New("Put: staging memory exhausted")
	}
	h := rk.hostIn[rk.inOff : rk.inOff+len(data)]
	rk.inOff += len(data)
	copy(h, data)
	return rk.CUDA.MemcpyAsync(uintptr(b.Ptr()), uintptr(unsafe.Pointer(&h[0])), len(data), rk.Stream)
}

// Get enqueues an asynchronous copy of b back to host memory; the bytes are
// there after the stream's next synchronize.
func (rk *Rank) Get(b nccl.Buffer) ([]byte, error) {
	n := b.Size()
	if rk.outOff+n > len(rk.hostOut) {
		return nil, errors.New("Get: staging memory exhausted")
	}
	h := rk.hostOut[rk.outOff : rk.outOff+n]
	rk.outOff += n
	return h, rk.CUDA.MemcpyAsync(uintptr(unsafe.Pointer(&h[0])), uintptr(b.Ptr()), n, rk.Stream)
}

// Sync waits for the stream and resets the staging memory.
func (rk *Rank) Sync() error {
	rk.inOff, rk.outOff = 0, 0
	return rk.Stream.Synchronize()
}

// NothingRan waits for the stream after a capture and checks that every
// buffer in bufs still holds Sentinel: the capture ran nothing.
func (rk *Rank) NothingRan(bufs ...nccl.Buffer) error {
	if err := rk.Sync(); err != nil {
		return err
	}
	for _, b := range bufs {
		if err := Untouched(b, Sentinel); err != nil {
			return err
		}
	}
	return nil
}

// Untouched checks that every byte of b still holds sentinel.
func Untouched(b nccl.Buffer, sentinel byte) error {
	got := make([]byte, b.Size())
	if err := b.ReadBytes(got); err != nil {
		return err
	}
	if want := bytes.Repeat([]byte{sentinel}, len(got)); !bytes.Equal(got, want) {
		return fmt.Errorf("a captured operation ran before the graph was launched: % x...", got[:min(16, len(got))])
	}
	return nil
}

// ---- raw C calls, unknown to gonccl ----

// Raw calls the fake libraries' C functions directly, so that the
// communicators and graphs of a test are ones gonccl does not know of: what is
// tested is the fake's own ncclCommDestroy and ncclCommAbort.
type Raw struct {
	NCCL, CUDART uintptr // the dlopen handles
}

// OpenRaw opens the libraries at the two paths (those gonccl loaded: the
// same handles).
func OpenRaw(ncclPath, cudartPath string) (*Raw, error) {
	var r Raw
	var err error
	if r.CUDART, err = purego.Dlopen(cudartPath, purego.RTLD_NOW); err != nil {
		return nil, err
	}
	if r.NCCL, err = purego.Dlopen(ncclPath, purego.RTLD_NOW); err != nil {
		return nil, err
	}
	return &r, nil
}

// Sym is the address of the function name in the library of handle h; it
// panics when there is none.
func (r *Raw) Sym(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		panic(err)
	}
	return p
}

// N calls an NCCL function, C calls a CUDA runtime function; both return the
// result code. Their arguments are handles and numbers, no Go pointers.
func (r *Raw) N(name string, args ...uintptr) int32 {
	return int32(ccall.Call(r.Sym(r.NCCL, name), args...))
}

func (r *Raw) C(name string, args ...uintptr) int32 {
	return int32(ccall.Call(r.Sym(r.CUDART, name), args...))
}

// EndCapture is cudaStreamEndCapture on the stream handle s: the graph and
// the result code.
func (r *Raw) EndCapture(s uintptr) (graph uintptr, rc int32) {
	rc = int32(ccall.CallPtr(r.Sym(r.CUDART, "cudaStreamEndCapture"), s, uintptr(unsafe.Pointer(&graph))))
	return graph, rc
}

// Instantiate is cudaGraphInstantiateWithFlags of graph (no flags): the
// executable graph and the result code.
func (r *Raw) Instantiate(graph uintptr) (exec uintptr, rc int32) {
	rc = int32(ccall.CallPtr(r.Sym(r.CUDART, "cudaGraphInstantiateWithFlags"), uintptr(unsafe.Pointer(&exec)), graph, 0))
	return exec, rc
}

// RawN is the element count of a RawJob's buffers.
const RawN = 32

// RawJob is n communicators from ncclCommInitAll, each with a stream, a
// float32 buffer of RawN elements (rank r holds r+1 everywhere) and a graph
// (and its executable) holding one in-place all-reduce of it, captured in one
// group.
type RawJob struct {
	r       *Raw
	Comms   []uintptr
	Streams []nccl.Stream
	Bufs    []nccl.Buffer
	Graphs  []uintptr
	Execs   []uintptr
}

// NewRawJob makes a RawJob of n ranks on devices 0..n-1; its graphs are not
// launched yet.
func NewRawJob(r *Raw, cu *nccl.CUDA, n int) (*RawJob, error) {
	j := &RawJob{r: r, Comms: make([]uintptr, n), Graphs: make([]uintptr, n), Execs: make([]uintptr, n)}
	if rc := ccall.CallPtr(r.Sym(r.NCCL, "ncclCommInitAll"), uintptr(unsafe.Pointer(&j.Comms[0])), uintptr(n), 0); rc != 0 {
		return nil, fmt.Errorf("ncclCommInitAll: %d", rc)
	}
	for i := range n {
		s, err := cu.NewStream(i, nccl.StreamNonBlocking)
		if err != nil {
			return nil, err
		}
		b, err := cu.Alloc(i, nccl.Float32, RawN)
		if err != nil {
			return nil, err
		}
		j.Streams, j.Bufs = append(j.Streams, s), append(j.Bufs, b)
	}
	if err := j.Fill(); err != nil {
		return nil, err
	}
	// The group is the calling thread's: stay on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range n {
		if rc := r.C("cudaStreamBeginCapture", j.Streams[i].Handle(), 2); rc != 0 {
			return nil, fmt.Errorf("cudaStreamBeginCapture: %d", rc)
		}
	}
	r.N("ncclGroupStart")
	for i := range n {
		b := uintptr(j.Bufs[i].Ptr())
		if rc := r.N("ncclAllReduce", b, b, RawN, uintptr(nccl.Float32), uintptr(nccl.Sum), j.Comms[i], j.Streams[i].Handle()); rc != 0 {
			return nil, fmt.Errorf("ncclAllReduce: %d", rc)
		}
	}
	if rc := r.N("ncclGroupEnd"); rc != 0 {
		return nil, fmt.Errorf("ncclGroupEnd: %d", rc)
	}
	for i := range n {
		var rc int32
		if j.Graphs[i], rc = r.EndCapture(j.Streams[i].Handle()); rc != 0 {
			return nil, fmt.Errorf("cudaStreamEndCapture: %d", rc)
		}
		if j.Execs[i], rc = r.Instantiate(j.Graphs[i]); rc != 0 {
			return nil, fmt.Errorf("cudaGraphInstantiateWithFlags: %d", rc)
		}
	}
	return j, nil
}

// Fill sets rank r's buffer to r+1 everywhere.
func (j *RawJob) Fill() error {
	for i, b := range j.Bufs {
		data := make([]float32, RawN)
		for k := range data {
			data[k] = float32(i + 1)
		}
		if err := nccl.CopyIn(b, data); err != nil {
			return err
		}
	}
	return nil
}

// Launch launches rank i's executable graph on its stream.
func (j *RawJob) Launch(i int) error {
	if rc := j.r.C("cudaGraphLaunch", j.Execs[i], j.Streams[i].Handle()); rc != 0 {
		return fmt.Errorf("cudaGraphLaunch: %d", rc)
	}
	return nil
}

// Check waits for rank i's stream and checks its buffer holds want.
func (j *RawJob) Check(i int, want float32) error {
	if err := j.Streams[i].Synchronize(); err != nil {
		return err
	}
	got := make([]float32, RawN)
	if err := nccl.CopyOut(got, j.Bufs[i]); err != nil {
		return err
	}
	for k, x := range got {
		if x != want {
			return fmt.Errorf("rank %d element %d: %v, want %v", i, k, x, want)
		}
	}
	return nil
}

// DestroyGraph destroys rank i's executable graph, then its graph.
func (j *RawJob) DestroyGraph(i int) error {
	if rc := j.r.C("cudaGraphExecDestroy", j.Execs[i]); rc != 0 {
		return fmt.Errorf("cudaGraphExecDestroy: %d", rc)
	}
	if rc := j.r.C("cudaGraphDestroy", j.Graphs[i]); rc != 0 {
		return fmt.Errorf("cudaGraphDestroy: %d", rc)
	}
	return nil
}

// Free synchronizes and destroys the streams and frees the buffers (the
// communicators and graphs are the test's to destroy).
func (j *RawJob) Free() {
	for _, s := range j.Streams {
		s.Synchronize()
		s.Destroy()
	}
	for _, b := range j.Bufs {
		b.Free()
	}
}

// ---- calls that may block ----

// Async runs a C call on a goroutine; its result comes on the channel.
func Async(f func() int32) chan int32 {
	ch := make(chan int32, 1)
	go func() { ch <- f() }()
	return ch
}

// Blocked says whether ch gives nothing for d.
func Blocked(ch chan int32, d time.Duration) bool {
	select {
	case <-ch:
		return false
	case <-time.After(d):
		return true
	}
}

// Returns waits up to d for ch's result.
func Returns(ch chan int32, d time.Duration) (int32, error) {
	select {
	case rc := <-ch:
		return rc, nil
	case <-time.After(d):
		return 0, fmt.Errorf("still blocked after %v", d)
	}
}
