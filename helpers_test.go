package nccl_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// Helpers the tests of package nccl_test share: the fakes opened, ranks and
// communicators made one goroutine per rank, typed buffers uploaded and read.

// open loads a fake NCCL variant with the fake CUDA runtime.
func open(t testing.TB, variant string, opts ...nccl.Option) *nccl.Library {
	t.Helper()
	opts = append([]nccl.Option{nccl.WithLibrary(nccl.FakeNCCL(t, variant)), nccl.WithCUDARuntime(nccl.FakeCUDART(t))}, opts...)
	l, err := nccl.Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// rank is one rank's communicator, stream and device.
type rank struct {
	comm *nccl.Comm
	s    nccl.Stream
	dev  int
}

// devices is how many devices ranks go round: the fake runtime's 8, or the
// GPUs a GPU test sees (openReal).
var devices = 8

// devOf is rank r's device: r modulo devices.
func devOf(r int) int { return r % devices }

// initRanks makes an n-rank blocking communicator, one goroutine per rank on
// device devOf(r), the id passed by value to each.
func initRanks(t testing.TB, l *nccl.Library, n int) []rank {
	t.Helper()
	return initRanksCtx(t, l, n, context.Background())
}

// nonBlockingCtx is a context that can end: communicators made from it are
// non-blocking.
func nonBlockingCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// modeOf is the tests' convention: a context that can end (nonBlockingCtx)
// asks for a non-blocking communicator, unless cfg sets the mode.
func modeOf(ctx context.Context, cfg *nccl.Config) *nccl.Config {
	if ctx.Done() == nil || cfg != nil && cfg.Blocking != nil {
		return cfg
	}
	var c nccl.Config
	if cfg != nil {
		c = *cfg
	}
	c.Blocking = new(bool)
	return &c
}

// initComms makes an n-rank communicator from ctx and cfg, one goroutine per
// rank on device devOf(r), the id passed by value to each; it fails the test if a
// rank fails. A context that can end makes non-blocking communicators (modeOf).
func initComms(t testing.TB, l *nccl.Library, n int, ctx context.Context, cfg *nccl.Config) []*nccl.Comm {
	t.Helper()
	cfg = modeOf(ctx, cfg)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*nccl.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = l.InitRank(ctx, devOf(r), id, n, r, cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, c := range comms {
				if c != nil {
					c.Abort()
				}
			}
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms
}

// initRanksCtx is initRanks from ctx: a context that can end makes the
// communicators non-blocking. Cleanup closes them and their streams.
func initRanksCtx(t testing.TB, l *nccl.Library, n int, ctx context.Context) []rank {
	t.Helper()
	comms := initComms(t, l, n, ctx, nil)
	ranks := make([]rank, n)
	errs := make([]error, n)
	for r, c := range comms {
		s, err := l.CUDA().NewStream(devOf(r), nccl.StreamNonBlocking)
		ranks[r] = rank{comm: c, s: s, dev: devOf(r)}
		errs[r] = err
	}
	t.Cleanup(func() {
		for _, rk := range ranks {
			if rk.comm != nil {
				rk.comm.Close(context.Background())
			}
			if rk.s != (nccl.Stream{}) {
				rk.s.Destroy()
			}
		}
	})
	wantBlocking := ctx.Done() == nil
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		c := ranks[r].comm
		if c.Rank() != r || c.Size() != n || c.Device() != devOf(r) || c.Blocking() != wantBlocking {
			t.Fatalf("rank %d: comm says rank %d of %d on device %d, blocking %v", r, c.Rank(), c.Size(), c.Device(), c.Blocking())
		}
	}
	return ranks
}

// eachRank runs f for every rank in its own goroutine, then synchronises the
// rank's stream; it fails on any error.
func eachRank(t testing.TB, ranks []rank, f func(r int, rk rank) error) {
	t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = f(r, rk); errs[r] == nil {
				errs[r] = rk.s.Synchronize()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// value turns a small integer into T.
func value[T nccl.Element](v int) T {
	var z T
	switch any(z).(type) {
	case nccl.F16:
		return any(nccl.F16From(float64(v))).(T)
	case nccl.BF16:
		return any(nccl.BF16From(float64(v))).(T)
	case nccl.F8E4M3:
		return any(nccl.F8E4M3From(float64(v))).(T)
	case nccl.F8E5M2:
		return any(nccl.F8E5M2From(float64(v))).(T)
	case float32:
		return any(float32(v)).(T)
	case float64:
		return any(float64(v)).(T)
	case int8:
		return any(int8(v)).(T)
	case uint8:
		return any(uint8(v)).(T)
	case int32:
		return any(int32(v)).(T)
	case uint32:
		return any(uint32(v)).(T)
	case int64:
		return any(int64(v)).(T)
	case uint64:
		return any(uint64(v)).(T)
	}
	panic("type")
}

// upload allocates a buffer of T on dev holding host; cleanup frees it.
func upload[T nccl.Element](t *testing.T, l *nccl.Library, dev int, host []T) nccl.Buffer {
	t.Helper()
	b, err := l.CUDA().Alloc(dev, nccl.TypeOf[T](), len(host))
	if err != nil {
		t.Fatal(err)
	}
	if err := nccl.CopyIn(b, host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

// download reads every element of b.
func download[T nccl.Element](t *testing.T, b nccl.Buffer) []T {
	t.Helper()
	out := make([]T, b.Len())
	if err := nccl.CopyOut(out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

// allReduceAndClose all-reduces random int64 data over comms (rank r on
// device devOf(r)) in one Group, checks every element on every rank, and
// closes the communicators.
func allReduceAndClose(t *testing.T, l *nccl.Library, ctx context.Context, comms []*nccl.Comm) {
	t.Helper()
	const elems = 1000
	want := make([]int64, elems)
	bufs := make([]nccl.Buffer, len(comms))
	streams := make([]nccl.Stream, len(comms))
	for r := range comms {
		host := make([]int64, elems)
		for i := range host {
			host[i] = rand.Int64N(1 << 40)
			want[i] += host[i]
		}
		bufs[r] = upload(t, l, devOf(r), host)
		var err error
		if streams[r], err = l.CUDA().NewStream(devOf(r), nccl.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
		defer streams[r].Destroy()
	}
	if err := l.Group(func() error {
		for r, c := range comms {
			if err := c.AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		if err := c.Wait(ctx, streams[r]); err != nil {
			t.Fatal(err)
		}
		got := download[int64](t, bufs[r])
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("rank %d element %d = %d, want %d", r, i, got[i], want[i])
			}
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
