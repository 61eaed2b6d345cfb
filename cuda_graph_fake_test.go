package nccl_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/ccall"
	"github.com/gonccl/nccl/internal/fakes"
)

// The fake NCCL's operations are captured into CUDA graphs and replayed as a
// real NCCL's are (nccltest/csrc/fakenccl/remote_ops.c, "CUDA graphs"): a capture records them
// without running them, each launch runs them afresh on the data as it is
// then, a launch is collective (one rank's launch completes only once its
// peers launch theirs), and from NCCL 2.26 on ncclCommDestroy and
// ncclCommAbort wait until the graphs holding the communicator's work are
// destroyed. Each test fails on fakes without that.

// graphVariants are the fake NCCLs whose operations can be captured: every
// one from 2.9 on, the destroy waiting for the graphs from 2.26 on.
var graphVariants = []struct {
	name  string
	waits bool // ncclCommDestroy and ncclCommAbort wait for the graphs (NCCL >= 2.26)
}{{"default", true}, {"v230", true}, {"old", false}}

// ---- reference data ----

// graphSeed names the data of one rank's buffer k at one launch.
func graphSeed(base uint64, rank, launch, k int) uint64 {
	return base ^ uint64(rank+1)<<40 ^ uint64(launch+1)<<20 ^ uint64(k+1)
}

// genData is n random elements of dt (float32, float64 or int64).
func genData(dt nccl.DataType, n int, seed uint64) []byte {
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
			panic("genData: type")
		}
	}
	return b
}

// reduceRef is the all-reduce of ins (in rank order): floats summed in double
// precision and rounded once (exact for genData's floats, whatever order
// NCCL sums in), integers wrapping.
func reduceRef(dt nccl.DataType, op nccl.RedOp, ins [][]byte) []byte {
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

// sameData compares every element and says where the first difference is.
func sameData(dt nccl.DataType, got, want []byte) error {
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

// graphOnRanks runs fn for every rank on a goroutine of its own and fails the test
// with the ranks' errors.
func graphOnRanks(t *testing.T, n int, fn func(r int) error) {
	t.Helper()
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
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// graphRank is what one rank of a graph test holds; free gives it back (the
// graph first: Close refuses while graphs hold the communicator).
type graphRank struct {
	cu       *nccl.CUDA
	c        *nccl.Comm
	s        nccl.Stream
	g        *nccl.Graph
	bufs     []nccl.Buffer
	hostIn   []byte // page-locked: the source of the asynchronous copies of the inputs
	hostOut  []byte // page-locked: where the results are copied back
	inOff    int
	outOff   int
	freeList []func()
}

func newGraphRank(cu *nccl.CUDA, c *nccl.Comm, hostBytes int) (*graphRank, error) {
	rk := &graphRank{cu: cu, c: c}
	var err error
	if rk.s, err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
		return nil, err
	}
	rk.freeList = append(rk.freeList, func() { rk.s.Destroy() })
	if rk.hostIn, err = cu.MallocHost(hostBytes); err != nil {
		rk.free()
		return nil, err
	}
	rk.freeList = append(rk.freeList, func() { cu.FreeHost(rk.hostIn) })
	if rk.hostOut, err = cu.MallocHost(hostBytes); err != nil {
		rk.free()
		return nil, err
	}
	rk.freeList = append(rk.freeList, func() { cu.FreeHost(rk.hostOut) })
	return rk, nil
}

func (rk *graphRank) alloc(dt nccl.DataType, n int, graphSentinel byte) (nccl.Buffer, error) {
	b, err := rk.cu.Alloc(rk.c.Device(), dt, n)
	if err != nil {
		return b, err
	}
	rk.bufs = append(rk.bufs, b)
	return b, b.Memset(graphSentinel)
}

// allocPairs allocates, per spec, an input of n zeros and an output of n
// elements filled with graphSentinel.
func (rk *graphRank) allocPairs(specs []arSpec, n int) (ins, outs []nccl.Buffer, err error) {
	for _, sp := range specs {
		in, err := rk.alloc(sp.dt, n, 0)
		if err != nil {
			return nil, nil, err
		}
		out, err := rk.alloc(sp.dt, n, graphSentinel)
		if err != nil {
			return nil, nil, err
		}
		ins, outs = append(ins, in), append(outs, out)
	}
	return ins, outs, nil
}

func (rk *graphRank) free() {
	if rk.g != nil {
		rk.g.Destroy()
	}
	for _, b := range rk.bufs {
		b.Free()
	}
	for i := len(rk.freeList) - 1; i >= 0; i-- {
		rk.freeList[i]()
	}
}

// put enqueues an asynchronous copy of data into b (through the page-locked
// staging memory) on the rank's stream.
func (rk *graphRank) put(b nccl.Buffer, data []byte) error {
	if rk.inOff+len(data) > len(rk.hostIn) {
		return errors.New("put: staging memory exhausted")
	}
	h := rk.hostIn[rk.inOff : rk.inOff+len(data)]
	rk.inOff += len(data)
	copy(h, data)
	return rk.cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(unsafe.Pointer(&h[0])), len(data), rk.s)
}

// get enqueues an asynchronous copy of b back to host memory; the bytes are
// there after the stream's next synchronize.
func (rk *graphRank) get(b nccl.Buffer) ([]byte, error) {
	n := b.Size()
	if rk.outOff+n > len(rk.hostOut) {
		return nil, errors.New("get: staging memory exhausted")
	}
	h := rk.hostOut[rk.outOff : rk.outOff+n]
	rk.outOff += n
	return h, rk.cu.MemcpyAsync(uintptr(unsafe.Pointer(&h[0])), uintptr(b.Ptr()), n, rk.s)
}

// sync waits for the stream and resets the staging memory.
func (rk *graphRank) sync() error {
	rk.inOff, rk.outOff = 0, 0
	return rk.s.Synchronize()
}

// nothingRan waits for the stream after a capture and checks that every
// buffer in bufs still holds graphSentinel: the capture ran nothing.
func (rk *graphRank) nothingRan(bufs ...nccl.Buffer) error {
	if err := rk.sync(); err != nil {
		return err
	}
	for _, b := range bufs {
		if err := graphUntouched(b, graphSentinel); err != nil {
			return err
		}
	}
	return nil
}

// graphUntouched checks that b still holds its graphSentinel bytes.
func graphUntouched(b nccl.Buffer, graphSentinel byte) error {
	got := make([]byte, b.Size())
	if err := b.ReadBytes(got); err != nil {
		return err
	}
	if want := bytes.Repeat([]byte{graphSentinel}, len(got)); !bytes.Equal(got, want) {
		return fmt.Errorf("a captured operation ran before the graph was launched: % x...", got[:min(16, len(got))])
	}
	return nil
}

// ---- replay in one process ----

type arSpec struct {
	dt nccl.DataType
	op nccl.RedOp
}

var graphARSpecs = []arSpec{{nccl.Float32, nccl.Sum}, {nccl.Int64, nccl.Max}, {nccl.Float64, nccl.Sum},
	{nccl.Float32, nccl.Max}, {nccl.Int64, nccl.Sum}, {nccl.Float64, nccl.Max}}

const graphSentinel = 0xEE

// TestFakeGraphAllReduce: every rank (goroutine, fake device) captures the same
// K all-reduces of several types and reductions on its stream; nothing runs
// during the capture; the graph is then launched R times, the inputs changed
// before each launch by asynchronous copies on the stream, and every element
// of every result is checked after each launch. Blocking communicators of
// every variant, 3 ranks, and non-blocking communicators (whose launch runs
// on a thread of the fake's own, still into the capture). The captured
// all-reduces are the communicators' first operations: the ranks connect
// inside the capture, on the capturing thread for a blocking communicator,
// which gonccl relaxes (CUDA.relax); without it the fake fails them as NCCL
// does ("failed to peer with device").
func TestFakeGraphAllReduce(t *testing.T) {
	type mode struct {
		variant     string
		nranks      int
		nonBlocking bool
	}
	var modes []mode
	for _, v := range graphVariants {
		modes = append(modes, mode{v.name, 2, false})
	}
	modes = append(modes, mode{"default", 3, false}, mode{"default", 2, true})
	for _, md := range modes {
		nranks := md.nranks
		name := fmt.Sprintf("%s/%dranks", md.variant, nranks)
		if md.nonBlocking {
			name += "/nonblocking"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if md.nonBlocking {
				ctx = nonBlockingCtx(t)
			}
			graphAllReduce(t, open(t, md.variant), nranks, ctx)
		})
	}
}

// graphAllReduce: nranks ranks of one process, one goroutine each, capture K
// all-reduces as their communicators' first operations (NCCL connects the
// ranks inside them), upload the graphs, launch them and check every element
// (TestFakeGraphAllReduce, TestGPUCapturedAllReduce).
func graphAllReduce(t *testing.T, l *nccl.Library, nranks int, ctx context.Context) {
	comms := initComms(t, l, nranks, ctx, nil)
	defer graphCloseComms(t, comms)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	const n, launches = 257, 4
	graphOnRanks(t, nranks, func(r int) error {
		rk, err := newGraphRank(l.CUDA(), comms[r], 16*n*len(graphARSpecs))
		if err != nil {
			return err
		}
		defer rk.free()
		ins, outs, err := rk.allocPairs(graphARSpecs, n)
		if err != nil {
			return err
		}
		rk.g, err = l.CUDA().Capture(rk.s, func() error {
			for k, sp := range graphARSpecs {
				if err := rk.c.AllReduce(ins[k], outs[k], sp.op, rk.s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.nothingRan(outs...); err != nil {
			return err
		}
		// Uploaded first, as a program that times its launches does: the
		// launches that follow must be unchanged by it.
		if err := rk.g.Upload(rk.s); err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		if err := rk.nothingRan(outs...); err != nil {
			return fmt.Errorf("after the upload: %w", err)
		}
		for launch := range launches {
			for k, sp := range graphARSpecs {
				if err := rk.put(ins[k], genData(sp.dt, n, graphSeed(base, r, launch, k))); err != nil {
					return err
				}
			}
			if err := rk.g.Launch(rk.s); err != nil {
				return fmt.Errorf("launch %d: %w", launch, err)
			}
			got := make([][]byte, len(outs))
			for k := range outs {
				if got[k], err = rk.get(outs[k]); err != nil {
					return err
				}
			}
			if err := rk.sync(); err != nil {
				return err
			}
			for k, sp := range graphARSpecs {
				all := make([][]byte, nranks)
				for p := range nranks {
					all[p] = genData(sp.dt, n, graphSeed(base, p, launch, k))
				}
				if err := sameData(sp.dt, got[k], reduceRef(sp.dt, sp.op, all)); err != nil {
					return fmt.Errorf("launch %d, all-reduce %d (%v, %v): %v", launch, k, sp.dt, sp.op, err)
				}
			}
		}
		return nil
	})
}

// graphCloseComms closes every communicator (their graphs destroyed first).
func graphCloseComms(t *testing.T, comms []*nccl.Comm) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	graphOnRanks(t, len(comms), func(r int) error { return comms[r].Close(ctx) })
}

// TestFakeGraphSendRecv: every rank captures one grouped step of a ring
// (a send to the next rank and a receive from the previous one, of two
// types), launched R times with fresh data each time.
func TestFakeGraphSendRecv(t *testing.T) {
	for _, v := range graphVariants {
		for _, nranks := range []int{2, 3} {
			if nranks == 3 && v.name != "default" {
				continue
			}
			t.Run(fmt.Sprintf("%s/%dranks", v.name, nranks), func(t *testing.T) {
				l := open(t, v.name)
				comms := initComms(t, l, nranks, context.Background(), nil)
				defer graphCloseComms(t, comms)
				base := rand.Uint64()
				t.Logf("seed %#x", base)
				const n, launches = 300, 4
				types := []nccl.DataType{nccl.Int64, nccl.Float32}
				graphOnRanks(t, nranks, func(r int) error {
					rk, err := newGraphRank(l.CUDA(), comms[r], 32*n)
					if err != nil {
						return err
					}
					defer rk.free()
					next, prev := (r+1)%nranks, (r+nranks-1)%nranks
					var sends, recvs []nccl.Buffer
					for _, dt := range types {
						s, err := rk.alloc(dt, n, 0)
						if err != nil {
							return err
						}
						rv, err := rk.alloc(dt, n, graphSentinel)
						if err != nil {
							return err
						}
						sends, recvs = append(sends, s), append(recvs, rv)
					}
					rk.g, err = l.CUDA().Capture(rk.s, func() error {
						return l.Group(func() error {
							for k := range types {
								if err := rk.c.Send(sends[k], next, rk.s); err != nil {
									return err
								}
								if err := rk.c.Recv(recvs[k], prev, rk.s); err != nil {
									return err
								}
							}
							return nil
						})
					})
					if err != nil {
						return fmt.Errorf("capture: %w", err)
					}
					if err := rk.nothingRan(recvs...); err != nil {
						return err
					}
					for launch := range launches {
						for k, dt := range types {
							if err := rk.put(sends[k], genData(dt, n, graphSeed(base, r, launch, k))); err != nil {
								return err
							}
						}
						if err := rk.g.Launch(rk.s); err != nil {
							return err
						}
						got := make([][]byte, len(types))
						for k := range types {
							if got[k], err = rk.get(recvs[k]); err != nil {
								return err
							}
						}
						if err := rk.sync(); err != nil {
							return err
						}
						for k, dt := range types {
							if err := sameData(dt, got[k], genData(dt, n, graphSeed(base, prev, launch, k))); err != nil {
								return fmt.Errorf("launch %d, receive %d from rank %d: %v", launch, k, prev, err)
							}
						}
					}
					return nil
				})
			})
		}
	}
}

// TestFakeGraphAllGather: the graph holds a copy into the input (a captured
// device-to-device copy from a staging buffer) followed by an all-gather: each
// launch runs them in that order, so the all-gather sees the staging data of
// that launch.
func TestFakeGraphAllGather(t *testing.T) {
	for _, v := range graphVariants {
		t.Run(v.name, func(t *testing.T) {
			l := open(t, v.name)
			const nranks, n, launches = 2, 129, 4
			comms := initComms(t, l, nranks, context.Background(), nil)
			defer graphCloseComms(t, comms)
			base := rand.Uint64()
			t.Logf("seed %#x", base)
			dt := nccl.Float64
			graphOnRanks(t, nranks, func(r int) error {
				rk, err := newGraphRank(l.CUDA(), comms[r], 8*n*(nranks+1))
				if err != nil {
					return err
				}
				defer rk.free()
				staging, err := rk.alloc(dt, n, 0)
				if err != nil {
					return err
				}
				in, err := rk.alloc(dt, n, 0)
				if err != nil {
					return err
				}
				out, err := rk.alloc(dt, n*nranks, graphSentinel)
				if err != nil {
					return err
				}
				rk.g, err = l.CUDA().Capture(rk.s, func() error {
					if err := l.CUDA().MemcpyAsync(uintptr(in.Ptr()), uintptr(staging.Ptr()), in.Size(), rk.s); err != nil {
						return err
					}
					return rk.c.AllGather(in, out, rk.s)
				})
				if err != nil {
					return fmt.Errorf("capture: %w", err)
				}
				if err := rk.nothingRan(out); err != nil {
					return err
				}
				for launch := range launches {
					if err := rk.put(staging, genData(dt, n, graphSeed(base, r, launch, 0))); err != nil {
						return err
					}
					if err := rk.g.Launch(rk.s); err != nil {
						return err
					}
					got, err := rk.get(out)
					if err != nil {
						return err
					}
					if err := rk.sync(); err != nil {
						return err
					}
					var want []byte
					for p := range nranks {
						want = append(want, genData(dt, n, graphSeed(base, p, launch, 0))...)
					}
					if err := sameData(dt, got, want); err != nil {
						return fmt.Errorf("launch %d: %v", launch, err)
					}
				}
				return nil
			})
		})
	}
}

// TestFakeGraphLaunchIsCollective: a graph launched by rank 0 alone does not
// complete (its all-reduce waits for rank 1, as NCCL's kernel does) until
// rank 1 launches its graph; then both complete with the right sums.
func TestFakeGraphLaunchIsCollective(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	const n = 64
	comms := initComms(t, l, 2, context.Background(), nil)
	defer graphCloseComms(t, comms)
	ranks := make([]*graphRank, 2)
	ins := make([]nccl.Buffer, 2)
	outs := make([]nccl.Buffer, 2)
	defer func() {
		for _, rk := range ranks {
			if rk != nil {
				rk.free()
			}
		}
	}()
	graphOnRanks(t, 2, func(r int) error {
		rk, err := newGraphRank(cu, comms[r], 8*n)
		if err != nil {
			return err
		}
		ranks[r] = rk
		if ins[r], err = rk.alloc(nccl.Float32, n, 0); err != nil {
			return err
		}
		if outs[r], err = rk.alloc(nccl.Float32, n, graphSentinel); err != nil {
			return err
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(r*1000 + i)
		}
		if err := nccl.CopyIn(ins[r], data); err != nil {
			return err
		}
		rk.g, err = cu.Capture(rk.s, func() error { return rk.c.AllReduce(ins[r], outs[r], nccl.Sum, rk.s) })
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	if err := ranks[0].g.Launch(ranks[0].s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if done, err := ranks[0].s.Query(); err != nil || done {
		t.Fatalf("rank 0's launch completed without rank 1's (query %v, %v)", done, err)
	}
	if err := graphUntouched(outs[0], graphSentinel); err != nil {
		t.Fatal(err)
	}
	if err := ranks[1].g.Launch(ranks[1].s); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if err := ranks[r].s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if err := nccl.CopyOut(got, outs[r]); err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if want := float32(1000 + 2*i); x != want {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, x, want)
			}
		}
	}
}

// ---- the destroy waits for the graphs: raw C calls, unknown to gonccl ----

// rawFakes calls the fake libraries' C functions directly, so that the
// communicators and graphs of a test are ones gonccl does not know of: what is
// tested is the fake's own ncclCommDestroy and ncclCommAbort.
type rawFakes struct {
	nccl, cudart uintptr
}

func openRaw(ncclPath, cudartPath string) (*rawFakes, error) {
	var r rawFakes
	var err error
	if r.cudart, err = purego.Dlopen(cudartPath, purego.RTLD_NOW); err != nil {
		return nil, err
	}
	if r.nccl, err = purego.Dlopen(ncclPath, purego.RTLD_NOW); err != nil {
		return nil, err
	}
	return &r, nil
}

func (r *rawFakes) sym(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		panic(err)
	}
	return p
}

// N calls an NCCL function, C calls a CUDA runtime function; both return the
// result code.
func (r *rawFakes) N(name string, args ...uintptr) int32 {
	return int32(ccall.Call(r.sym(r.nccl, name), args...))
}
func (r *rawFakes) C(name string, args ...uintptr) int32 {
	return int32(ccall.Call(r.sym(r.cudart, name), args...))
}

// rawJob is n communicators from ncclCommInitAll, each with a stream, a
// float32 buffer (rank r holds r+1 everywhere) and a graph (and its
// executable) holding one in-place all-reduce of it, captured in one group.
type rawJob struct {
	r       *rawFakes
	comms   []uintptr
	streams []nccl.Stream
	bufs    []nccl.Buffer
	graphs  []uintptr
	execs   []uintptr
}

const rawN = 32

func newRawJob(r *rawFakes, cu *nccl.CUDA, n int) (*rawJob, error) {
	j := &rawJob{r: r, comms: make([]uintptr, n), graphs: make([]uintptr, n), execs: make([]uintptr, n)}
	if rc := ccall.CallPtr(r.sym(r.nccl, "ncclCommInitAll"), uintptr(unsafe.Pointer(&j.comms[0])), uintptr(n), 0); rc != 0 {
		return nil, fmt.Errorf("ncclCommInitAll: %d", rc)
	}
	for i := range n {
		s, err := cu.NewStream(i, nccl.StreamNonBlocking)
		if err != nil {
			return nil, err
		}
		b, err := cu.Alloc(i, nccl.Float32, rawN)
		if err != nil {
			return nil, err
		}
		j.streams, j.bufs = append(j.streams, s), append(j.bufs, b)
	}
	if err := j.fill(); err != nil {
		return nil, err
	}
	// The group is the calling thread's: stay on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range n {
		if rc := r.C("cudaStreamBeginCapture", j.streams[i].Handle(), 2); rc != 0 {
			return nil, fmt.Errorf("cudaStreamBeginCapture: %d", rc)
		}
	}
	r.N("ncclGroupStart")
	for i := range n {
		b := uintptr(j.bufs[i].Ptr())
		if rc := r.N("ncclAllReduce", b, b, rawN, uintptr(nccl.Float32), uintptr(nccl.Sum), j.comms[i], j.streams[i].Handle()); rc != 0 {
			return nil, fmt.Errorf("ncclAllReduce: %d", rc)
		}
	}
	if rc := r.N("ncclGroupEnd"); rc != 0 {
		return nil, fmt.Errorf("ncclGroupEnd: %d", rc)
	}
	for i := range n {
		if rc := ccall.CallPtr(r.sym(r.cudart, "cudaStreamEndCapture"), j.streams[i].Handle(), uintptr(unsafe.Pointer(&j.graphs[i]))); rc != 0 {
			return nil, fmt.Errorf("cudaStreamEndCapture: %d", rc)
		}
		if rc := ccall.CallPtr(r.sym(r.cudart, "cudaGraphInstantiateWithFlags"), uintptr(unsafe.Pointer(&j.execs[i])), j.graphs[i], 0); rc != 0 {
			return nil, fmt.Errorf("cudaGraphInstantiateWithFlags: %d", rc)
		}
	}
	return j, nil
}

// fill sets rank r's buffer to r+1 everywhere.
func (j *rawJob) fill() error {
	for i, b := range j.bufs {
		data := make([]float32, rawN)
		for k := range data {
			data[k] = float32(i + 1)
		}
		if err := nccl.CopyIn(b, data); err != nil {
			return err
		}
	}
	return nil
}

func (j *rawJob) launch(i int) error {
	if rc := j.r.C("cudaGraphLaunch", j.execs[i], j.streams[i].Handle()); rc != 0 {
		return fmt.Errorf("cudaGraphLaunch: %d", rc)
	}
	return nil
}

// check waits for rank i's stream and checks its buffer holds want.
func (j *rawJob) check(i int, want float32) error {
	if err := j.streams[i].Synchronize(); err != nil {
		return err
	}
	got := make([]float32, rawN)
	if err := nccl.CopyOut(got, j.bufs[i]); err != nil {
		return err
	}
	for k, x := range got {
		if x != want {
			return fmt.Errorf("rank %d element %d: %v, want %v", i, k, x, want)
		}
	}
	return nil
}

func (j *rawJob) destroyGraph(i int) error {
	if rc := j.r.C("cudaGraphExecDestroy", j.execs[i]); rc != 0 {
		return fmt.Errorf("cudaGraphExecDestroy: %d", rc)
	}
	if rc := j.r.C("cudaGraphDestroy", j.graphs[i]); rc != 0 {
		return fmt.Errorf("cudaGraphDestroy: %d", rc)
	}
	return nil
}

func (j *rawJob) free() {
	for _, s := range j.streams {
		s.Synchronize()
		s.Destroy()
	}
	for _, b := range j.bufs {
		b.Free()
	}
}

// async runs a C call on a goroutine; its result comes on the channel.
func graphAsync(f func() int32) chan int32 {
	ch := make(chan int32, 1)
	go func() { ch <- f() }()
	return ch
}

// blocked says whether ch gives nothing for d.
func graphBlocked(ch chan int32, d time.Duration) bool {
	select {
	case <-ch:
		return false
	case <-time.After(d):
		return true
	}
}

func graphReturns(ch chan int32, d time.Duration) (int32, error) {
	select {
	case rc := <-ch:
		return rc, nil
	case <-time.After(d):
		return 0, fmt.Errorf("still blocked after %v", d)
	}
}

// TestFakeGraphDestroyWaits: with NCCL >= 2.26 (default, v230),
// ncclCommDestroy and ncclCommAbort do not return while a CUDA graph holding
// the communicator's captured work lives (the executable graph and the graph
// it came from both count, and a launch still in flight of a graph already
// destroyed too), and return once they are gone; with 2.14 ("old") they
// return at once. The communicators and graphs are made with the C functions,
// unknown to gonccl.
func TestFakeGraphDestroyWaits(t *testing.T) {
	for _, v := range graphVariants {
		t.Run(v.name, func(t *testing.T) {
			l := open(t, v.name)
			cu := l.CUDA()
			r, err := openRaw(l.Path, cu.Path)
			if err != nil {
				t.Fatal(err)
			}
			j, err := newRawJob(r, cu, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer j.free()
			if err := j.check(0, 1); err != nil { // nothing ran during the capture
				t.Fatal(err)
			}
			for i := range 2 {
				if err := j.launch(i); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 2 {
				if err := j.check(i, 3); err != nil {
					t.Fatal(err)
				}
			}
			if !v.waits {
				if _, err := graphReturns(graphAsync(func() int32 { return r.N("ncclCommDestroy", j.comms[0]) }), 10*time.Second); err != nil {
					t.Fatalf("ncclCommDestroy of NCCL 2.14 with a graph alive: %v", err)
				}
				if _, err := graphReturns(graphAsync(func() int32 { return r.N("ncclCommAbort", j.comms[1]) }), 10*time.Second); err != nil {
					t.Fatalf("ncclCommAbort of NCCL 2.14 with a graph alive: %v", err)
				}
				for i := range 2 {
					if err := j.destroyGraph(i); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			// Rank 0's graph launched alone stays in flight; destroying it
			// returns at once, but CUDA frees it only after that launch.
			if err := j.fill(); err != nil {
				t.Fatal(err)
			}
			if err := j.launch(0); err != nil {
				t.Fatal(err)
			}
			if err := j.destroyGraph(0); err != nil {
				t.Fatal(err)
			}
			destroy := graphAsync(func() int32 { return r.N("ncclCommDestroy", j.comms[0]) })
			if !graphBlocked(destroy, 300*time.Millisecond) {
				t.Fatal("ncclCommDestroy returned while a launch of its graph was in flight")
			}
			if err := j.launch(1); err != nil {
				t.Fatal(err)
			}
			if rc, err := graphReturns(destroy, 10*time.Second); err != nil || rc != 0 {
				t.Fatalf("ncclCommDestroy after the last launch completed: %d, %v", rc, err)
			}
			if err := j.check(1, 3); err != nil {
				t.Fatal(err)
			}
			if err := j.check(0, 3); err != nil {
				t.Fatal(err)
			}
			// Rank 1: the abort waits for the executable graph and the graph.
			abort := graphAsync(func() int32 { return r.N("ncclCommAbort", j.comms[1]) })
			if !graphBlocked(abort, 300*time.Millisecond) {
				t.Fatal("ncclCommAbort returned while its graph lives")
			}
			if rc := r.C("cudaGraphDestroy", j.graphs[1]); rc != 0 {
				t.Fatal(rc)
			}
			if !graphBlocked(abort, 200*time.Millisecond) {
				t.Fatal("ncclCommAbort returned while its executable graph lives")
			}
			if rc := r.C("cudaGraphExecDestroy", j.execs[1]); rc != 0 {
				t.Fatal(rc)
			}
			if rc, err := graphReturns(abort, 10*time.Second); err != nil || rc != 0 {
				t.Fatalf("ncclCommAbort after the graphs were destroyed: %d, %v", rc, err)
			}
		})
	}
}

// TestFakeGraphDestroyWarns: past FAKENCCL_CONNECT_WARN_MS the waiting
// ncclCommDestroy says once on stderr what it waits for (real NCCL waits
// silently), in a child process, and returns once the graph is destroyed.
func TestFakeGraphDestroyWarns(t *testing.T) {
	out, err := fakes.RunChild(t, 30*time.Second, "graph-destroy-warns", "FAKENCCL_CONNECT_WARN_MS=100",
		"GONCCL_NCCL_LIB="+nccl.FakeNCCL(t, "default"), "GONCCL_CUDART_LIB="+nccl.FakeCUDART(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const want = "fakenccl: ncclCommDestroy on rank 0 waits for CUDA graphs holding 1 captured launch(es) of the communicator to be destroyed"
	if strings.Count(out, want) != 1 {
		t.Fatalf("want the warning once:\n%s", out)
	}
}

func init() {
	nccl.Children["graph-destroy-warns"] = func() error {
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		cu := l.CUDA()
		r, err := openRaw(l.Path, cu.Path)
		if err != nil {
			return err
		}
		j, err := newRawJob(r, cu, 1)
		if err != nil {
			return err
		}
		if err := j.launch(0); err != nil {
			return err
		}
		if err := j.check(0, 1); err != nil {
			return err
		}
		destroy := graphAsync(func() int32 { return r.N("ncclCommDestroy", j.comms[0]) })
		if !graphBlocked(destroy, time.Second) {
			return errors.New("ncclCommDestroy returned while its graph lives")
		}
		if err := j.destroyGraph(0); err != nil {
			return err
		}
		if rc, err := graphReturns(destroy, 10*time.Second); err != nil || rc != 0 {
			return fmt.Errorf("ncclCommDestroy after the graph was destroyed: %d, %v", rc, err)
		}
		j.free()
		return nil
	}
}

// ---- across processes ----

// TestFakeGraphMultiProcess: two processes, one rank each, meeting at
// NCCL_COMM_ID (rank 0's process hosts the clique, rank 1's is its remote
// rank): each captures two all-reduces and a send/receive exchange and
// launches the graph R times with fresh data, every element checked in each
// process.
func TestFakeGraphMultiProcess(t *testing.T) {
	addr := freeAddr(t)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[r], errs[r] = fakes.RunChild(t, 60*time.Second, "graph-mp", "NCCL_COMM_ID="+addr,
				"GONCCL_NCCL_LIB="+nccl.FakeNCCL(t, "default"), "GONCCL_CUDART_LIB="+nccl.FakeCUDART(t),
				"FAKECUDA_DELAY_US=20", "GRAPH_RANK="+strconv.Itoa(r), "GRAPH_SEED="+strconv.FormatUint(base, 10))
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
}

func init() {
	nccl.Children["graph-mp"] = func() error {
		const nranks, n, launches = 2, 100, 5
		r, _ := strconv.Atoi(os.Getenv("GRAPH_RANK"))
		base, _ := strconv.ParseUint(os.Getenv("GRAPH_SEED"), 10, 64)
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		id, err := l.GetUniqueID()
		if err != nil {
			return err
		}
		c, err := l.InitRank(context.Background(), 0, id, nranks, r, nil)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		rk, err := newGraphRank(l.CUDA(), c, 64*n)
		if err != nil {
			return err
		}
		defer rk.free()
		specs := graphARSpecs[:2]
		ins, outs, err := rk.allocPairs(specs, n)
		if err != nil {
			return err
		}
		send, err := rk.alloc(nccl.Int64, n, 0)
		if err != nil {
			return err
		}
		recv, err := rk.alloc(nccl.Int64, n, graphSentinel)
		if err != nil {
			return err
		}
		peer := 1 - r
		rk.g, err = l.CUDA().Capture(rk.s, func() error {
			for k, sp := range specs {
				if err := c.AllReduce(ins[k], outs[k], sp.op, rk.s); err != nil {
					return err
				}
			}
			return l.Group(func() error {
				if err := c.Send(send, peer, rk.s); err != nil {
					return err
				}
				return c.Recv(recv, peer, rk.s)
			})
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.nothingRan(append(outs, recv)...); err != nil {
			return err
		}
		for launch := range launches {
			for k, sp := range specs {
				if err := rk.put(ins[k], genData(sp.dt, n, graphSeed(base, r, launch, k))); err != nil {
					return err
				}
			}
			if err := rk.put(send, genData(nccl.Int64, n, graphSeed(base, r, launch, 9))); err != nil {
				return err
			}
			if err := rk.g.Launch(rk.s); err != nil {
				return err
			}
			got := make([][]byte, len(specs)+1)
			for k := range specs {
				if got[k], err = rk.get(outs[k]); err != nil {
					return err
				}
			}
			if got[len(specs)], err = rk.get(recv); err != nil {
				return err
			}
			if err := rk.sync(); err != nil {
				return err
			}
			for k, sp := range specs {
				all := make([][]byte, nranks)
				for p := range nranks {
					all[p] = genData(sp.dt, n, graphSeed(base, p, launch, k))
				}
				if err := sameData(sp.dt, got[k], reduceRef(sp.dt, sp.op, all)); err != nil {
					return fmt.Errorf("launch %d, all-reduce %d: %v", launch, k, err)
				}
			}
			if err := sameData(nccl.Int64, got[len(specs)], genData(nccl.Int64, n, graphSeed(base, peer, launch, 9))); err != nil {
				return fmt.Errorf("launch %d, receive: %v", launch, err)
			}
		}
		if err := rk.g.Destroy(); err != nil {
			return err
		}
		rk.g = nil
		return nil
	}
}

// TestFakeGraphRMA: NCCL 2.30's one-sided calls are captured too: each rank's
// graph puts its source into the next rank's window and waits for the
// previous rank's signal; every launch moves that launch's data (the ranks
// meet between launches: a put lands in the peer's window at once).
func TestFakeGraphRMA(t *testing.T) {
	l := open(t, "v230")
	const nranks, size, half, launches = 2, 777, 1024, 4
	comms := initComms(t, l, nranks, context.Background(), nil)
	defer graphCloseComms(t, comms)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	ranks := make([]*graphRank, nranks)
	syms := make([]nccl.Buffer, nranks)
	defer func() {
		for r, rk := range ranks {
			if rk != nil {
				rk.free()
			}
			if syms[r].Len() > 0 {
				syms[r].Free()
			}
		}
	}()
	graphOnRanks(t, nranks, func(r int) (err error) {
		syms[r], err = comms[r].AllocSymmetric(nccl.Uint8, 2*half)
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	graphOnRanks(t, nranks, func(r int) error {
		rk, err := newGraphRank(l.CUDA(), comms[r], 4*half)
		if err != nil {
			return err
		}
		ranks[r] = rk
		if err := syms[r].Memset(0); err != nil {
			return err
		}
		win, off, err := rk.c.WindowOf(syms[r].Slice(half, 2*half))
		if err != nil {
			return err
		}
		next, prev := (r+1)%nranks, (r+nranks-1)%nranks
		rk.g, err = l.CUDA().Capture(rk.s, func() error {
			if err := rk.c.PutSignal(syms[r].Slice(0, size), next, win, off, rk.s); err != nil {
				return err
			}
			return rk.c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(prev)}}, rk.s)
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.sync(); err != nil {
			return err
		}
		return graphUntouched(syms[r].Slice(half, 2*half), 0)
	})
	if t.Failed() {
		t.FailNow()
	}
	for launch := range launches {
		graphOnRanks(t, nranks, func(r int) error {
			rk := ranks[r]
			if err := rk.put(syms[r].Slice(0, size), genData(nccl.Int64, size/8+1, graphSeed(base, r, launch, 0))[:size]); err != nil {
				return err
			}
			if err := rk.g.Launch(rk.s); err != nil {
				return err
			}
			return rk.sync() // ends once the previous rank's put and signal came
		})
		graphOnRanks(t, nranks, func(r int) error {
			prev := (r + nranks - 1) % nranks
			got := make([]byte, size)
			if err := nccl.CopyOut(got, syms[r].Slice(half, half+size)); err != nil {
				return err
			}
			if err := sameData(nccl.Uint8, got, genData(nccl.Int64, size/8+1, graphSeed(base, prev, launch, 0))[:size]); err != nil {
				return fmt.Errorf("launch %d: the window: %v", launch, err)
			}
			return nil
		})
	}
}

// TestFakeGraphAlltoAllv: an all-to-all-v on symmetric buffers, where a plain
// launch takes VCCL's native ncclAlltoAllv, is captured, and each launch
// exchanges that launch's data. VCCL 2.29.2 aborts the process when its native
// call is captured (an assertion in ncclLaunchRmaColl, seen on 4 × H200; the
// fake aborts too): under a capture gonccl runs the exchange grouped, and with
// SetPath(Native) the capture gets an *UnsupportedError.
func TestFakeGraphAlltoAllv(t *testing.T) {
	for _, variant := range []string{"vccl11", "default"} {
		t.Run(variant, func(t *testing.T) { graphAlltoAllv(t, open(t, variant), 2) })
	}
}

// graphAlltoAllv captures an all-to-all-v of nranks ranks on symmetric
// buffers and checks four launches' data (TestFakeGraphAlltoAllv,
// TestGPUAlltoAllvCaptured). With SetPath(Native) the capture is refused: on
// a library with ncclAlltoAllv because it cannot be captured, on one without
// because it has none.
func graphAlltoAllv(t *testing.T, l *nccl.Library, nranks int) {
	const launches = 4
	comms := initComms(t, l, nranks, context.Background(), nil)
	defer graphCloseComms(t, comms)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	m := nccl.Layout{make([]uint64, nranks*nranks), make([]uint64, nranks*nranks), make([]uint64, nranks*nranks), make([]uint64, nranks*nranks)}
	sendLen, recvLen := make([]int, nranks), make([]int, nranks)
	for i := range nranks { // sender i to receiver j: 3+5i+7j elements, packed
		for j := range nranks {
			k := uint64(3 + 5*i + 7*j)
			m.SendCounts[i*nranks+j], m.SendDispls[i*nranks+j] = k, uint64(sendLen[i])
			m.RecvCounts[j*nranks+i], m.RecvDispls[j*nranks+i] = k, uint64(recvLen[j])
			sendLen[i] += int(k)
			recvLen[j] += int(k)
		}
	}
	dt := nccl.Float32
	ranks := make([]*graphRank, nranks)
	sends, recvs := make([]nccl.Buffer, nranks), make([]nccl.Buffer, nranks)
	defer func() {
		for r, rk := range ranks {
			if rk != nil {
				rk.free()
			}
			for _, b := range []nccl.Buffer{sends[r], recvs[r]} {
				if b.Len() > 0 {
					b.Free()
				}
			}
		}
	}()
	graphOnRanks(t, nranks, func(r int) (err error) {
		if sends[r], err = comms[r].AllocSymmetric(dt, sendLen[r]); err != nil {
			return err
		}
		recvs[r], err = comms[r].AllocSymmetric(dt, recvLen[r])
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	graphOnRanks(t, nranks, func(r int) error {
		rk, err := newGraphRank(l.CUDA(), comms[r], 8*(sendLen[r]+recvLen[r]))
		if err != nil {
			return err
		}
		ranks[r] = rk
		if err := recvs[r].Memset(graphSentinel); err != nil {
			return err
		}
		if err := rk.c.SetPath(nccl.Native); err != nil {
			return err
		}
		_, err = l.CUDA().Capture(rk.s, func() error { return rk.c.AlltoAllv(sends[r], recvs[r], m, rk.s) })
		if ue := (*nccl.UnsupportedError)(nil); !errors.As(err, &ue) || l.Has("ncclAlltoAllv") != strings.Contains(ue.Name, "capture") {
			return fmt.Errorf("native path captured: got %v, want an *UnsupportedError (naming the capture where the library has ncclAlltoAllv)", err)
		}
		if err := rk.c.SetPath(nccl.Auto); err != nil {
			return err
		}
		rk.g, err = l.CUDA().Capture(rk.s, func() error { return rk.c.AlltoAllv(sends[r], recvs[r], m, rk.s) })
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.sync(); err != nil {
			return err
		}
		return graphUntouched(recvs[r], graphSentinel)
	})
	if t.Failed() {
		t.FailNow()
	}
	for launch := range launches {
		graphOnRanks(t, nranks, func(r int) error {
			rk := ranks[r]
			if err := rk.put(sends[r], genData(dt, sendLen[r], graphSeed(base, r, launch, 0))); err != nil {
				return err
			}
			if err := rk.g.Launch(rk.s); err != nil {
				return err
			}
			return rk.sync()
		})
		graphOnRanks(t, nranks, func(r int) error {
			got := make([]byte, recvs[r].Size())
			if err := recvs[r].ReadBytes(got); err != nil {
				return err
			}
			want := make([]byte, len(got))
			for i := range nranks {
				src := genData(dt, sendLen[i], graphSeed(base, i, launch, 0))
				sd, k, rd := int(m.SendDispls[i*nranks+r]), int(m.SendCounts[i*nranks+r]), int(m.RecvDispls[r*nranks+i])
				copy(want[4*rd:4*(rd+k)], src[4*sd:4*(sd+k)])
			}
			if err := sameData(dt, got, want); err != nil {
				return fmt.Errorf("launch %d: %v", launch, err)
			}
			return nil
		})
	}
}

// TestFakeGraphMismatch: replayed collectives are checked across ranks as
// those called directly are: rank 0's graph holds an all-reduce where rank
// 1's holds a broadcast, so their launch fails on both ranks with NCCL's
// invalid usage (the async error), naming both calls, and no data moves.
func TestFakeGraphMismatch(t *testing.T) {
	l := open(t, "default")
	const n = 16
	comms := initComms(t, l, 2, context.Background(), nil)
	ranks := make([]*graphRank, 2)
	outs := make([]nccl.Buffer, 2)
	defer func() {
		for _, c := range comms {
			c.Abort() // the communicators failed: aborted, as after an asynchronous error
		}
	}()
	defer func() {
		for _, rk := range ranks {
			if rk != nil {
				rk.free()
			}
		}
	}()
	graphOnRanks(t, 2, func(r int) error {
		rk, err := newGraphRank(l.CUDA(), comms[r], 8*n)
		if err != nil {
			return err
		}
		ranks[r] = rk
		in, err := rk.alloc(nccl.Float32, n, 1)
		if err != nil {
			return err
		}
		if outs[r], err = rk.alloc(nccl.Float32, n, graphSentinel); err != nil {
			return err
		}
		rk.g, err = l.CUDA().Capture(rk.s, func() error {
			if r == 0 {
				return rk.c.AllReduce(in, outs[r], nccl.Sum, rk.s)
			}
			return rk.c.Broadcast(in, outs[r], 0, rk.s)
		})
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	graphOnRanks(t, 2, func(r int) error {
		if err := ranks[r].g.Launch(ranks[r].s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := comms[r].Wait(ctx, ranks[r].s)
		if !errors.Is(err, nccl.ErrInvalidUsage) {
			return fmt.Errorf("Wait after the launch: %v, want invalid usage", err)
		}
		if err := ranks[r].s.Synchronize(); err != nil {
			return err
		}
		return graphUntouched(outs[r], graphSentinel)
	})
	if last := l.LastError(); !strings.Contains(last, "rank 0 called AllReduce(count 16, float32, sum) but rank 1 called Broadcast(count 16, float32, root 0)") {
		t.Errorf("last error %q", last)
	}
}

// TestFakeGraphCloseWaitsForForeignGraph: a graph captured by another library
// (here the C calls, on a gonccl stream) holding a communicator's all-reduce is
// unknown to gonccl, so Close and Abort reach ncclCommDestroy and
// ncclCommAbort, which (NCCL >= 2.26) wait until that graph is destroyed.
func TestFakeGraphCloseWaitsForForeignGraph(t *testing.T) {
	for _, how := range []string{"Close", "Abort"} {
		t.Run(how, func(t *testing.T) {
			l := open(t, "default")
			cu := l.CUDA()
			r, err := openRaw(l.Path, cu.Path)
			if err != nil {
				t.Fatal(err)
			}
			c := initComms(t, l, 1, context.Background(), nil)[0]
			s, err := cu.NewStream(0, nccl.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			b, err := cu.Alloc(0, nccl.Float32, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			if err := nccl.CopyIn(b, []float32{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
				t.Fatal(err)
			}
			var graph, exec uintptr
			if rc := r.C("cudaStreamBeginCapture", s.Handle(), 2); rc != 0 {
				t.Fatal(rc)
			}
			if err := c.AllReduce(b, b, nccl.Max, s); err != nil {
				t.Fatal(err)
			}
			if rc := ccall.CallPtr(r.sym(r.cudart, "cudaStreamEndCapture"), s.Handle(), uintptr(unsafe.Pointer(&graph))); rc != 0 {
				t.Fatal(rc)
			}
			if rc := ccall.CallPtr(r.sym(r.cudart, "cudaGraphInstantiateWithFlags"), uintptr(unsafe.Pointer(&exec)), graph, 0); rc != 0 {
				t.Fatal(rc)
			}
			if rc := r.C("cudaGraphLaunch", exec, s.Handle()); rc != 0 {
				t.Fatal(rc)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				if how == "Close" {
					done <- c.Close(context.Background())
				} else {
					done <- c.Abort()
				}
			}()
			select {
			case err := <-done:
				t.Fatalf("%s returned (%v) while a graph holds the communicator", how, err)
			case <-time.After(300 * time.Millisecond):
			}
			if rc := r.C("cudaGraphExecDestroy", exec); rc != 0 {
				t.Fatal(rc)
			}
			if rc := r.C("cudaGraphDestroy", graph); rc != 0 {
				t.Fatal(rc)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still blocked after the graph was destroyed", how)
			}
		})
	}
}
