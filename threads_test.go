package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
)

// cliqueOf makes an n-rank communicator with InitAll from this goroutine, on
// devices 0..n-1, a stream each, and a Threads over those devices; cleanup
// closes them all.
func cliqueOf(t *testing.T, l *nccl.Library, n int) ([]*nccl.Comm, []nccl.Stream, *nccl.Threads) {
	t.Helper()
	devs := make([]int, n)
	for i := range devs {
		devs[i] = devOf(i)
	}
	comms, err := l.InitAll(context.Background(), devs, nil)
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]nccl.Stream, n)
	for i := range streams {
		if streams[i], err = l.CUDA().NewStream(devs[i], nccl.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
	}
	th, err := l.CUDA().NewThreads(devs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		th.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := nccl.CloseAll(ctx, comms); err != nil {
			t.Error(err)
		}
		for _, s := range streams {
			s.Destroy()
		}
	})
	return comms, streams, th
}

// randomInputs fills one buffer per rank with values the reference computes
// exactly, and returns the buffers and their bytes.
func randomInputs(t *testing.T, l *nccl.Library, rng *rand.Rand, dt nccl.DataType, op nccl.RedOp, n, elems int) ([]nccl.Buffer, [][]byte) {
	t.Helper()
	bufs := make([]nccl.Buffer, n)
	raw := make([][]byte, n)
	for r := range n {
		vals := make([]float64, elems)
		for i := range vals {
			vals[i] = collectives.Random(rng, dt, op)
		}
		raw[r] = collectives.Encode(dt, vals)
		b, err := l.CUDA().Alloc(devOf(r), dt, elems)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free() })
		if err := b.WriteBytes(raw[r]); err != nil {
			t.Fatal(err)
		}
		bufs[r] = b
	}
	return bufs, raw
}

// checkAll fails unless every rank's buffer holds want, after its stream.
func checkAll(t *testing.T, what string, bufs []nccl.Buffer, streams []nccl.Stream, want func(r int) []byte) {
	t.Helper()
	for r, b := range bufs {
		if err := streams[r].Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, b.Size())
		if err := b.ReadBytes(got); err != nil {
			t.Fatal(err)
		}
		if i := collectives.Mismatch(b.Type(), got, want(r)); i >= 0 {
			t.Fatalf("%s: rank %d element %d differs from the reference", what, r, i)
		}
	}
}

// One goroutine drives every rank of an InitAll clique through Threads, each
// rank's operations outside a Group: they run on threads of their own, so
// the ranks' first operations meet in NCCL, as from a goroutine per rank.
// Every element is checked against the host reference, for several rank
// counts, types and reductions.
func TestThreadsDriveRanksWithoutGroup(t *testing.T) {
	l := open(t, "default")
	rng := rand.New(rand.NewPCG(7, 42))
	for _, n := range []int{2, 3, 4} {
		comms, streams, th := cliqueOf(t, l, n)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, dt := range []nccl.DataType{nccl.Float32, nccl.Int32, nccl.Bfloat16, nccl.Uint8, nccl.Float64} {
			for _, op := range []nccl.RedOp{nccl.Sum, nccl.Max, nccl.Min, nccl.Prod} {
				const elems = 257
				send, in := randomInputs(t, l, rng, dt, op, n, elems)
				recv, _ := randomInputs(t, l, rng, dt, op, n, elems)
				if err := th.Run(ctx, func(i int) error {
					return comms[i].AllReduce(send[i], recv[i], op, streams[i])
				}); err != nil {
					t.Fatalf("%d ranks, %v %v: %v", n, dt, op, err)
				}
				want := collectives.Reduce(dt, op, in)
				checkAll(t, fmt.Sprintf("AllReduce %d ranks %v %v", n, dt, op), recv, streams, func(int) []byte { return want })
			}
		}
		// A reduce-scatter and an all-gather, in place, in one call.
		const k = 33
		bufs, in := randomInputs(t, l, rng, nccl.Int64, nccl.Sum, n, n*k)
		if err := th.Run(ctx, func(i int) error {
			if err := comms[i].ReduceScatter(bufs[i], bufs[i].Slice(i*k, (i+1)*k), nccl.Sum, streams[i]); err != nil {
				return err
			}
			return comms[i].AllGather(bufs[i].Slice(i*k, (i+1)*k), bufs[i], streams[i])
		}); err != nil {
			t.Fatal(err)
		}
		want := collectives.Reduce(nccl.Int64, nccl.Sum, in)
		checkAll(t, fmt.Sprintf("ReduceScatter+AllGather %d ranks", n), bufs, streams, func(int) []byte { return want })
	}
}

// Threads.Launch replays a graph per rank, captured on the rank's thread,
// from one goroutine; each launch is an in-place all-reduce, so k launches
// leave the reference applied k times.
func TestThreadsLaunchGraphs(t *testing.T) {
	l := open(t, "default")
	rng := rand.New(rand.NewPCG(3, 9))
	for _, n := range []int{2, 4} {
		comms, streams, th := cliqueOf(t, l, n)
		ctx := context.Background()
		bufs, in := randomInputs(t, l, rng, nccl.Int32, nccl.Sum, n, 1000)
		graphs := make([]*nccl.Graph, n)
		// A first operation connects the ranks; a capture cannot.
		if err := th.Run(ctx, func(i int) error {
			return comms[i].AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i])
		}); err != nil {
			t.Fatal(err)
		}
		if err := th.Run(ctx, func(i int) error {
			g, err := l.CUDA().Capture(streams[i], func() error {
				return comms[i].AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i])
			})
			graphs[i] = g
			if err != nil {
				return err
			}
			return g.Upload(streams[i])
		}); err != nil {
			t.Fatal(err)
		}
		const launches = 5
		for range launches {
			if err := th.Launch(ctx, graphs, streams); err != nil {
				t.Fatal(err)
			}
		}
		want := in
		for range 1 + launches {
			all := collectives.Reduce(nccl.Int32, nccl.Sum, want)
			want = make([][]byte, n)
			for r := range want {
				want[r] = all
			}
		}
		checkAll(t, fmt.Sprintf("%d graph launches, %d ranks", launches, n), bufs, streams, func(r int) []byte { return want[r] })
		for _, g := range graphs {
			if err := g.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Each thread is an OS thread of its own, kept from call to call, and a call
// runs on all of them at once: fn blocks until every thread has entered it.
func TestThreadsRunInParallelOnKeptThreads(t *testing.T) {
	l := open(t, "default")
	const n = 4
	th, err := l.CUDA().NewThreads(0, 1, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	if th.Len() != n || th.Device(2) != 2 {
		t.Fatalf("Len %d, Device(2) %d", th.Len(), th.Device(2))
	}
	tids := make([][2]int, n)
	for call := range 2 {
		var entered atomic.Int32
		err := th.Run(context.Background(), func(i int) error {
			tids[i][call] = unix.Gettid()
			entered.Add(1)
			for deadline := time.Now().Add(10 * time.Second); entered.Load() < n; {
				if time.Now().After(deadline) {
					return errors.New("the other threads never entered: the calls did not run at once")
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	for i, ids := range tids {
		if ids[0] != ids[1] {
			t.Errorf("thread %d ran on OS threads %d then %d", i, ids[0], ids[1])
		}
		if seen[ids[0]] {
			t.Errorf("OS thread %d serves two threads", ids[0])
		}
		seen[ids[0]] = true
	}
}

// Calls reach threads that parked (no spinning) as well as spinning ones
// (GOMAXPROCS above the threads' count: below it nothing spins).
func TestThreadsWakeParkedThreads(t *testing.T) {
	l := open(t, "default")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(5))
	th, err := l.CUDA().NewThreads(0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	var calls [3]atomic.Int32
	for k := range 300 {
		switch k {
		case 0:
			th.SetSpin(0)
		case 100:
			th.SetSpin(nccl.DefaultThreadSpin)
		case 200:
			th.SetSpin(time.Microsecond)
		}
		if k%50 == 0 {
			time.Sleep(2 * time.Millisecond) // every side parks
		}
		if err := th.Run(context.Background(), func(i int) error { calls[i].Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range calls {
		if c := calls[i].Load(); c != 300 {
			t.Errorf("thread %d ran %d calls of 300", i, c)
		}
	}
}

// A Run whose calls outlive its context returns at the deadline with an error
// matching context.DeadlineExceeded; the next call waits for the threads
// under its own context, and runs once they are free.
func TestThreadsRunBoundedByContext(t *testing.T) {
	l := open(t, "default")
	th, err := l.CUDA().NewThreads(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	hold := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = th.Run(ctx, func(i int) error {
		if i == 1 {
			<-hold
			return errors.New("lost: its caller left")
		}
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nccl.ErrInvalidUsage) {
		t.Fatalf("Run past its deadline: %v", err)
	}
	if !strings.Contains(err.Error(), "Threads.Run: 1 of 2 threads still running") {
		t.Errorf("error does not say what happened: %v", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("Run returned %v after a 100 ms deadline", d)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := th.Run(ctx2, func(int) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run while the threads are held: %v", err)
	}
	close(hold)
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	var ran atomic.Int32
	if err := th.Run(ctx3, func(int) error { ran.Add(1); return nil }); err != nil || ran.Load() != 2 {
		t.Fatalf("Run after the held call returned: %v, %d calls", err, ran.Load())
	}
}

// Close while a call holds the threads returns at once; the threads end once
// the call returns, and later calls are refused.
func TestThreadsCloseWhileHeld(t *testing.T) {
	l := open(t, "default")
	th, err := l.CUDA().NewThreads(3)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := th.Run(ctx, func(int) error { <-hold; return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held Run: %v", err)
	}
	t0 := time.Now()
	if err := th.Close(); err != nil || time.Since(t0) > 100*time.Millisecond {
		t.Fatalf("Close while held: %v after %v", err, time.Since(t0))
	}
	close(hold)
	if err := th.Run(context.Background(), func(int) error { return nil }); !errors.Is(err, nccl.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

// Errors: each thread's own, joined, saying which thread; bad arguments and
// closed or nil values give typed errors, not panics.
func TestThreadsErrors(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	th, err := cu.NewThreads(0, 5)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = th.Run(context.Background(), func(i int) error {
		if i == 1 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "thread 1 (device 5): boom") {
		t.Errorf("thread 1's error: %v", err)
	}
	var nilThreads *nccl.Threads
	var nilCUDA *nccl.CUDA
	_, errNone := cu.NewThreads()
	_, errNeg := cu.NewThreads(0, -1)
	_, errMissing := cu.NewThreads(0, 99)
	_, errNilCUDA := nilCUDA.NewThreads(0)
	var nilCtx context.Context
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"no devices", errNone, nccl.ErrInvalidArgument},
		{"device -1", errNeg, nccl.ErrInvalidArgument},
		{"device 99 of 8", errMissing, nccl.ErrInvalidArgument},
		{"nil *CUDA", errNilCUDA, nccl.ErrClosed},
		{"nil function", th.Run(context.Background(), nil), nccl.ErrInvalidArgument},
		{"nil context", th.Run(nilCtx, func(int) error { return nil }), nccl.ErrInvalidArgument},
		{"one graph for two threads", th.Launch(context.Background(), make([]*nccl.Graph, 1), make([]nccl.Stream, 2)), nccl.ErrInvalidArgument},
		{"zero graphs", th.Launch(context.Background(), make([]*nccl.Graph, 2), make([]nccl.Stream, 2)), nccl.ErrClosed},
		{"nil *Threads Run", nilThreads.Run(context.Background(), func(int) error { return nil }), nccl.ErrClosed},
		{"nil *Threads Launch", nilThreads.Launch(context.Background(), nil, nil), nccl.ErrClosed},
		{"nil *Threads Close", nilThreads.Close(), nccl.ErrClosed},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want an error matching %v", c.what, c.err, c.want)
		}
	}
	if !strings.Contains(errMissing.Error(), "this process sees 8 CUDA devices") {
		t.Errorf("device 99: %v", errMissing)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if err := th.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := th.Launch(context.Background(), nil, nil); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("Launch after Close: %v", err)
	}
}

// Threads.Launch and a Run of a function made once allocate nothing.
func TestThreadsAllocateNothing(t *testing.T) {
	l := open(t, "default")
	comms, streams, th := cliqueOf(t, l, 2)
	ctx := context.Background()
	bufs, _ := randomInputs(t, l, rand.New(rand.NewPCG(1, 1)), nccl.Float32, nccl.Sum, 2, 64)
	step := func(i int) error { return comms[i].AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]) }
	if err := th.Run(ctx, step); err != nil {
		t.Fatal(err)
	}
	graphs := make([]*nccl.Graph, 2)
	if err := th.Run(ctx, func(i int) error {
		var err error
		graphs[i], err = l.CUDA().Capture(streams[i], func() error { return step(i) })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range graphs {
			g.Destroy()
		}
	}()
	if a := testing.AllocsPerRun(200, func() {
		if err := th.Run(ctx, step); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Run: %v allocations per call", a)
	}
	if a := testing.AllocsPerRun(200, func() {
		if err := th.Launch(ctx, graphs, streams); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Launch: %v allocations per call", a)
	}
	for _, s := range streams {
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkThreadsLaunch: one goroutine launching a graph per GPU through
// Threads, against the same launches made in turn from the goroutine itself
// (nccl-bench -threads and -g on GPUs).
func BenchmarkThreadsLaunch(b *testing.B) {
	l := open(b, "default")
	const n = 2
	comms, err := l.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer nccl.CloseAll(context.Background(), comms)
	th, err := l.CUDA().NewThreads(0, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer th.Close()
	streams := make([]nccl.Stream, n)
	bufs := make([]nccl.Buffer, n)
	for i := range n {
		streams[i], _ = l.CUDA().NewStream(i, nccl.StreamNonBlocking)
		defer streams[i].Destroy()
		bufs[i], _ = l.CUDA().Alloc(i, nccl.Float32, 2)
		defer bufs[i].Free()
	}
	ctx := context.Background()
	step := func(i int) error { return comms[i].AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]) }
	graphs := make([]*nccl.Graph, n)
	if err := th.Run(ctx, step); err != nil {
		b.Fatal(err)
	}
	if err := th.Run(ctx, func(i int) error {
		var err error
		graphs[i], err = l.CUDA().Capture(streams[i], func() error { return step(i) })
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Run("threads", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := th.Launch(ctx, graphs, streams); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-turn", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i, g := range graphs {
				if err := g.Launch(streams[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	for i, g := range graphs {
		streams[i].Synchronize()
		g.Destroy()
	}
}
