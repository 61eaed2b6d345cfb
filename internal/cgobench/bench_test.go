//go:build cgo

package cgobench

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/ccall"
	"github.com/gonccl/nccl/internal/fakes"
)

func errorString(b *testing.B) uintptr {
	h, err := purego.Dlopen(filepath.Join(fakes.NCCL(b, "default"), "libnccl.so.2"), purego.RTLD_NOW)
	if err != nil {
		b.Fatal(err)
	}
	f, err := purego.Dlsym(h, "ncclGetErrorString")
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// The no-op: ncclGetErrorString, the same C function by each path.

func BenchmarkNoopGonccl(b *testing.B) {
	f := errorString(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ccall.Call(f, uintptr(i&1))
	}
}

func BenchmarkNoopCgo(b *testing.B) {
	f := errorString(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		CallErrorString(f, i&1)
	}
}

func BenchmarkNoopC(b *testing.B) {
	f := errorString(b)
	b.ResetTimer()
	ns := LoopErrorString(f, b.N)
	b.ReportMetric(float64(ns)/float64(b.N), "ns/op")
}

// The hot path of the public API: an AllReduce of 0 elements (checked by the
// library, then nothing to do), through Comm.AllReduce and through cgo.

func setup(b *testing.B) (*nccl.Library, *nccl.Comm, nccl.Buffer, nccl.Stream) { return setupOn(b, 0) }

// setupOn is setup on device dev.
func setupOn(b *testing.B, dev int) (*nccl.Library, *nccl.Comm, nccl.Buffer, nccl.Stream) {
	l, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(b, "default")), nccl.WithCUDARuntime(fakes.CUDART(b)))
	if err != nil {
		b.Fatal(err)
	}
	id, _ := l.GetUniqueID()
	c, err := l.InitRank(context.Background(), dev, id, 1, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	buf, err := l.CUDA().Alloc(dev, nccl.Float32, 16)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := l.CUDA().NewStream(dev, nccl.StreamNonBlocking)
	b.Cleanup(func() { c.Close(context.Background()) })
	return l, c, buf.Slice(0, 0), s
}

func BenchmarkAllReduceGonccl(b *testing.B) {
	_, c, buf, s := setup(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.AllReduce(buf, buf, nccl.Sum, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllReduceGoncclDevice1 is BenchmarkAllReduceGonccl where the
// library has not used device 0: each call runs through the thread-device
// guard (internal/capi/threaddevice.go), one cudaGetDevice more inside the same C call.
func BenchmarkAllReduceGoncclDevice1(b *testing.B) {
	_, c, buf, s := setupOn(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.AllReduce(buf, buf, nccl.Sum, s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllReduceCgo(b *testing.B) {
	_, c, buf, s := setup(b)
	h, _ := purego.Dlopen(filepath.Join(fakes.NCCL(b, "default"), "libnccl.so.2"), purego.RTLD_NOW)
	f, _ := purego.Dlsym(h, "ncclAllReduce")
	b.ReportAllocs()
	for b.Loop() {
		if r := CallAllReduce(f, uintptr(buf.Ptr()), c.Handle(), s.Handle()); r != 0 {
			b.Fatal(r)
		}
	}
}

// The parts of the hot path's cost, on the same call as AllReduceCgo:
// AllReduceCcall is gonccl's bare call path (internal/ccall, no checks, no
// lifecycle), AllReduceCcallLifecycle adds the two atomic adds with which
// every operation counts itself in and out of the communicator (what makes
// Abort safe from any goroutine). AllReduceGonccl less AllReduceCcallLifecycle
// is what the argument checks, the capture check and the Go calls cost.

func BenchmarkAllReduceCcall(b *testing.B) {
	f, p, ch, sh := rawAllReduce(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := ccall.Call(f, p, p, 0, 7, 0, ch, sh); r != 0 {
			b.Fatal(r)
		}
	}
}

func BenchmarkAllReduceCcallLifecycle(b *testing.B) {
	f, p, ch, sh := rawAllReduce(b)
	var life atomic.Int64 // as nccl.Comm's: state in the high half, calls in the low
	b.ReportAllocs()
	for b.Loop() {
		if life.Add(1)>>32 != 0 {
			b.Fatal("not open")
		}
		r := ccall.Call(f, p, p, 0, 7, 0, ch, sh)
		if life.Add(-1) == 2<<32 {
			b.Fatal("aborted")
		}
		if r != 0 {
			b.Fatal(r)
		}
	}
}

// AllReduceCcallAsymmetric is a design not taken, timed for comparison: the
// call marks itself in and out of the communicator with plain stores (no
// locked instruction) and loads the state, and Abort would pay for the
// ordering with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) between setting
// the state and reading the mark (an asymmetric Dekker, as userspace RCU
// does). A plain mark counts one caller at a time only: two goroutines
// calling one communicator at once (which NCCL forbids but cannot stop)
// would let Abort free it under a call. docs/call-cost.md has the numbers.
func BenchmarkAllReduceCcallAsymmetric(b *testing.B) {
	f, p, ch, sh := rawAllReduce(b)
	type comm struct {
		inCall uint32 // written by the one caller, read by Abort after its membarrier
		state  atomic.Uint32
	}
	c := new(comm)
	b.ReportAllocs()
	for b.Loop() {
		c.inCall = 1
		if c.state.Load() != 0 {
			b.Fatal("not open")
		}
		r := ccall.Call(f, p, p, 0, 7, 0, ch, sh)
		c.inCall = 0
		if r != 0 {
			b.Fatal(r)
		}
	}
}

// rawAllReduce is ncclAllReduce's address and the arguments AllReduceCgo passes.
func rawAllReduce(b *testing.B) (f, buf, comm, stream uintptr) {
	_, c, bf, s := setup(b)
	h, err := purego.Dlopen(filepath.Join(fakes.NCCL(b, "default"), "libnccl.so.2"), purego.RTLD_NOW)
	if err != nil {
		b.Fatal(err)
	}
	if f, err = purego.Dlsym(h, "ncclAllReduce"); err != nil {
		b.Fatal(err)
	}
	return f, uintptr(bf.Ptr()), c.Handle(), s.Handle()
}

// Open: gonccl's Open (search, ELF check, dlopen, every symbol, the version)
// against a C program's dlopen of both files and dlsym of the same symbols,
// on the fake that has every optional function (NCCL 2.30.7).

func BenchmarkOpenGonccl(b *testing.B) {
	opts := []nccl.Option{nccl.WithLibrary(filepath.Join(fakes.NCCL(b, "v230"), "libnccl.so.2")),
		nccl.WithCUDARuntime(filepath.Join(fakes.CUDART(b), "libcudart.so.12"))}
	for b.Loop() {
		if _, err := nccl.Open(opts...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenC(b *testing.B) {
	n, c := filepath.Join(fakes.NCCL(b, "v230"), "libnccl.so.2"), filepath.Join(fakes.CUDART(b), "libcudart.so.12")
	names := nccl.Symbols()
	for b.Loop() {
		if OpenAll(n, c, names) < len(names)-2 {
			b.Fatal("symbols missing")
		}
	}
}
