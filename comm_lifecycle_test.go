package nccl_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
)

// Lifecycle under failure: Abort from any goroutine, contexts on everything
// that waits for peers, panics in groups, calls from threads on the wrong
// device. Each test names the defect it guards against.

func lcOpen(t testing.TB, opts ...nccl.Option) *nccl.Library {
	t.Helper()
	opts = append([]nccl.Option{nccl.WithLibrary(nccl.FakeNCCL(t, "default")), nccl.WithCUDARuntime(nccl.FakeCUDART(t))}, opts...)
	l, err := nccl.Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// lcSym is a C function of the fake libraries that the API does not reach
// (test controls, the thread's current device).
func lcSym(t testing.TB, lib, name string) uintptr {
	t.Helper()
	path := filepath.Join(nccl.FakeNCCL(t, "default"), "libnccl.so.2")
	if lib == "cudart" {
		path = filepath.Join(nccl.FakeCUDART(t), "libcudart.so.12")
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	f, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func lcCall(f uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(f, args...)
	return r
}

// setCallDelay makes every operation call of the fake NCCL stay inside the
// library for us microseconds, and check on the way out that its communicator
// was not freed meanwhile (the process dies if it was).
func setCallDelay(t *testing.T, us int) {
	f := lcSym(t, "nccl", "fakenccl_set_call_delay_us")
	lcCall(f, uintptr(us))
	t.Cleanup(func() { lcCall(f, 0) })
}

// resources counts what a failed job could leak: goroutines, OS threads, open
// files, fake device allocations and live fake communicators.
type resources struct{ goroutines, threads, fds, allocs, comms int }

func countResources(t *testing.T) resources {
	t.Helper()
	count := func(dir string) int {
		e, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(e)
	}
	var r resources
	// Goroutines and threads that are ending take a moment.
	for range 50 {
		r = resources{runtime.NumGoroutine(), count("/proc/self/task"), count("/proc/self/fd"),
			int(lcCall(lcSym(t, "cudart", "fakecuda_live_allocations"))), int(int32(lcCall(lcSym(t, "nccl", "fakenccl_live_comms"))))}
		time.Sleep(2 * time.Millisecond)
		if r2 := runtime.NumGoroutine(); r2 == r.goroutines {
			break
		}
	}
	return r
}

// checkNoLeak runs scenario once to warm up (the Go runtime keeps the threads
// it made), then n times more, and fails if anything grew.
func checkNoLeak(t *testing.T, n int, scenario func()) {
	t.Helper()
	scenario()
	before := countResources(t)
	for range n {
		scenario()
	}
	var after resources
	for range 100 { // detached C threads finish on their own time
		if after = countResources(t); after.threads <= before.threads && after.goroutines <= before.goroutines {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after.goroutines > before.goroutines || after.threads > before.threads || after.fds > before.fds ||
		after.allocs > before.allocs || after.comms > before.comms {
		t.Fatalf("after %d runs: %+v, before: %+v", n, after, before)
	}
}

// Abort from a watchdog goroutine while another goroutine is inside an
// operation freed the communicator under that call (use after free: the
// process died within 1 to 3 tries on the fakes).
func TestLifecycleAbortRacesCalls(t *testing.T) {
	l := lcOpen(t)
	setCallDelay(t, 5)
	cu := l.CUDA()
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	buf, err := cu.Alloc(0, nccl.Float32, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 3000
	calls := 0
	for i := range rounds {
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.InitRank(context.Background(), 0, id, 1, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var loopErr error
		n := 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if loopErr = c.AllReduce(buf, buf, nccl.Sum, s); loopErr != nil {
					return
				}
				n++
			}
		}()
		time.Sleep(time.Duration(rng.IntN(40)) * time.Microsecond)
		if err := c.Abort(); err != nil {
			t.Fatalf("round %d: Abort: %v", i, err)
		}
		wg.Wait()
		calls += n
		if !errors.Is(loopErr, nccl.ErrClosed) {
			t.Fatalf("round %d: the loop ended with %v, want ErrClosed", i, loopErr)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: not freed after the last call returned", i)
		}
		for _, err := range []error{c.Abort(), c.AllReduce(buf, buf, nccl.Sum, s), c.AsyncError(), c.Close(context.Background())} {
			if !errors.Is(err, nccl.ErrClosed) {
				t.Fatalf("round %d: after Abort: %v, want ErrClosed", i, err)
			}
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rounds, %d operations raced by Abort", rounds, calls)
}

// twoRanks makes a two-rank communicator on devices 0 and 1, one goroutine per
// rank, non-blocking (the init context has a deadline).
func twoRanks(t *testing.T, l *nccl.Library) [2]*nccl.Comm {
	t.Helper()
	ranks := initRanksCtx(t, l, 2, nonBlockingCtx(t))
	return [2]*nccl.Comm{ranks[0].comm, ranks[1].comm}
}

// allReduceWorks checks a fresh two-rank all-reduce end to end, every element.
func allReduceWorks(t *testing.T, l *nccl.Library) {
	t.Helper()
	comms := twoRanks(t, l)
	cu := l.CUDA()
	const n = 1000
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([][]int32, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				s, err := cu.NewStream(r, nccl.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer s.Destroy()
				b, err := cu.Alloc(r, nccl.Int32, n)
				if err != nil {
					return err
				}
				defer b.Free()
				host := make([]int32, n)
				for i := range host {
					host[i] = int32(i*(r+1) - 7)
				}
				if err := nccl.CopyIn(b, host); err != nil {
					return err
				}
				if err := comms[r].AllReduce(b, b, nccl.Sum, s); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := comms[r].Wait(ctx, s); err != nil {
					return err
				}
				outs[r] = make([]int32, n)
				if err := nccl.CopyOut(outs[r], b); err != nil {
					return err
				}
				return comms[r].Close(ctx)
			}()
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, v := range outs[r] {
			if want := int32(i*1-7) + int32(i*2-7); v != want {
				t.Fatalf("rank %d element %d: %d, want %d", r, i, v, want)
			}
		}
	}
}

// A Destroy that blocked (a peer never matched an operation) could not be
// rescued: Destroy cleared the handle before calling NCCL, so Abort returned
// ErrClosed and the process never exited.
func TestLifecycleAbortRescuesClose(t *testing.T) {
	l := lcOpen(t)
	cu := l.CUDA()
	run := func(t *testing.T, rescue func(c *nccl.Comm, s nccl.Stream) error, wantCtx bool) {
		comms := twoRanks(t, l)
		connectRanks(t, l, comms[:]...) // NCCL connects inside the first operation: rank 0's alone would wait there
		s, err := cu.NewStream(0, nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		b, err := cu.Alloc(0, nccl.Float32, 256)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		// Rank 0 enqueues an all-reduce rank 1 never joins; its Close waits.
		if err := comms[0].AllReduce(b, b, nccl.Sum, s); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = rescue(comms[0], s)
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("rescue took %v", el)
		}
		if wantCtx && !errors.Is(err, context.DeadlineExceeded) || !wantCtx && !errors.Is(err, nccl.ErrClosed) {
			t.Fatalf("Close: %v", err)
		}
		select {
		case <-comms[0].Done():
		case <-time.After(5 * time.Second):
			t.Fatal("rank 0 not freed")
		}
		if err := s.Synchronize(); err != nil { // the aborted work ends
			t.Fatal(err)
		}
		if err := comms[1].Abort(); err != nil {
			t.Fatal(err)
		}
		if err := comms[0].AllReduce(b, b, nccl.Sum, s); !errors.Is(err, nccl.ErrClosed) {
			t.Fatalf("after: %v", err)
		}
	}
	t.Run("Abort", func(t *testing.T) {
		run(t, func(c *nccl.Comm, s nccl.Stream) error {
			go func() {
				time.Sleep(100 * time.Millisecond)
				c.Abort()
			}()
			return c.Close(context.Background())
		}, false)
	})
	t.Run("Deadline", func(t *testing.T) {
		run(t, func(c *nccl.Comm, s nccl.Stream) error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			return c.Close(ctx)
		}, true)
	})
	t.Run("Wait", func(t *testing.T) {
		run(t, func(c *nccl.Comm, s nccl.Stream) error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := c.Wait(ctx, s); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Wait: %v", err)
			}
			return c.Close(context.Background())
		}, false)
	})
	allReduceWorks(t, l) // the process goes on: a fresh communicator works
}

// InitRank, InitRankScalable, InitAll and Split could not be cancelled: a rank
// that never arrived hung the others forever.
func TestLifecycleInitCancel(t *testing.T) {
	l := lcOpen(t)
	const deadline = 150 * time.Millisecond
	within := func(t testing.TB, what string, f func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v, want an error wrapping context.DeadlineExceeded", what, err)
		}
		if el := time.Since(start); el > deadline+time.Second {
			t.Fatalf("%s returned after %v", what, el)
		}
	}
	initAlone := func(t testing.TB) {
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		within(t, "InitRank", func(ctx context.Context) error {
			c, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil))
			if c != nil {
				t.Fatal("a communicator came back with the error")
			}
			return err
		})
		id2, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		within(t, "InitRankScalable", func(ctx context.Context) error {
			_, err := l.InitRankScalable(ctx, 1, []nccl.UniqueID{id2}, 3, 2, modeOf(ctx, nil))
			return err
		})
	}
	t.Run("Init", func(t *testing.T) { checkNoLeak(t, 5, func() { initAlone(t) }) })
	t.Run("Split", func(t *testing.T) {
		comms := twoRanks(t, l)
		within(t, "Split", func(ctx context.Context) error {
			_, err := comms[0].Split(ctx, 0, 0, nil)
			return err
		})
		for _, c := range comms {
			c.Abort()
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		id, _ := l.GetUniqueID()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		if _, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil)); !errors.Is(err, context.Canceled) {
			t.Fatalf("InitRank: %v", err)
		}
		if _, err := l.InitAll(ctx, []int{0, 1}, modeOf(ctx, nil)); !errors.Is(err, context.Canceled) {
			t.Fatalf("InitAll after cancel: %v", err)
		}
	})
	allReduceWorks(t, l)
}

// A panic inside Group left the NCCL group open on that OS thread: every later
// operation the thread ran was swallowed (50 of 50 all-reduces returned nil
// and moved nothing).
func TestLifecyclePanicInGroup(t *testing.T) {
	l := lcOpen(t)
	cu := l.CUDA()
	id, _ := l.GetUniqueID()
	c, err := l.InitRank(context.Background(), 0, id, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	s, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	defer s.Destroy()
	send, _ := cu.Alloc(0, nccl.Int64, 100)
	recv, _ := cu.Alloc(0, nccl.Int64, 100)
	defer send.Free()
	defer recv.Free()
	// Stay on one OS thread, as the swallowed operations did.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for round := range 50 {
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			l.Group(func() error {
				c.AllReduce(send, recv, nccl.Sum, s)
				panic("boom")
			})
		}()
		host := make([]int64, 100)
		for i := range host {
			host[i] = int64(round*1000 + i)
		}
		if err := nccl.CopyIn(send, host); err != nil {
			t.Fatal(err)
		}
		if err := recv.Memset(0); err != nil {
			t.Fatal(err)
		}
		if err := c.AllReduce(send, recv, nccl.Sum, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]int64, 100)
		if err := nccl.CopyOut(got, recv); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != host[i] {
				t.Fatalf("round %d: element %d is %d, want %d: the operation after the panic did not run", round, i, v, host[i])
			}
		}
	}
}

// An error inside a group discards what the group enqueued: a partial group
// launched on one rank would pair its operations with the wrong ones of its
// peers.
func TestLifecycleErrorInGroupDiscards(t *testing.T) {
	l := lcOpen(t)
	cu := l.CUDA()
	comms := twoRanks(t, l)
	stop := errors.New("stop")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([][]float64, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				s, _ := cu.NewStream(r, nccl.StreamNonBlocking)
				defer s.Destroy()
				a, _ := cu.Alloc(r, nccl.Float64, 10)
				b, _ := cu.Alloc(r, nccl.Float64, 10)
				defer a.Free()
				defer b.Free()
				nccl.CopyIn(a, []float64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100})
				nccl.CopyIn(b, []float64{float64(r + 1), 2, 3, 4, 5, 6, 7, 8, 9, 10})
				if r == 0 {
					err := l.Group(func() error {
						if err := comms[r].AllReduce(a, a, nccl.Sum, s); err != nil {
							return err
						}
						return stop
					})
					if !errors.Is(err, stop) {
						return err
					}
				}
				if err := comms[r].AllReduce(b, b, nccl.Sum, s); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := comms[r].Wait(ctx, s); err != nil {
					return err
				}
				outs[r] = make([]float64, 10)
				return nccl.CopyOut(outs[r], b)
			}()
		}()
	}
	wg.Wait()
	want := []float64{3, 4, 6, 8, 10, 12, 14, 16, 18, 20}
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, v := range outs[r] {
			if v != want[i] {
				t.Fatalf("rank %d element %d: %v, want %v (the discarded group ran)", r, i, v, want[i])
			}
		}
	}
	for _, c := range comms {
		c.Close(context.Background())
	}
}

// Buffer copies, memsets and frees ran on whatever device the calling thread
// had current: with one goroutine per GPU and blocking streams, rank 1's copy
// queued behind rank 0's collective, which waited for rank 1 (a deadlock, on
// GPUs and on the fakes).
func TestLifecycleCopiesRunOnTheBuffersDevice(t *testing.T) {
	l := lcOpen(t)
	cu := l.CUDA()
	comms, err := l.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close(context.Background())
		}
	}()
	// One thread drives both ranks below, without a group: NCCL would wait
	// inside rank 0's first all-reduce for rank 1 to connect. Connect first.
	connectRanks(t, l, comms...)
	var s [2]nccl.Stream
	var b [2]nccl.Buffer
	for r := range 2 {
		if s[r], err = cu.NewStream(r, nccl.StreamDefault); err != nil { // blocking streams
			t.Fatal(err)
		}
		defer s[r].Destroy()
		if b[r], err = cu.Alloc(r, nccl.Uint32, 1024); err != nil {
			t.Fatal(err)
		}
		defer b[r].Free()
	}
	done := make(chan error, 1)
	go func() {
		// This thread has device 0 current, as a thread that served rank 0 would.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		lcCall(lcSym(t, "cudart", "cudaSetDevice"), 0)
		host := make([]uint32, 1024)
		for i := range host {
			host[i] = uint32(i)
		}
		if err := nccl.CopyIn(b[0], host); err != nil {
			done <- err
			return
		}
		if err := comms[0].AllReduce(b[0], b[0], nccl.Sum, s[0]); err != nil {
			done <- err
			return
		}
		// Rank 0's all-reduce waits for rank 1: rank 1's copy must not wait for it.
		if err := nccl.CopyIn(b[1], host); err != nil {
			done <- err
			return
		}
		if err := b[1].Memset(0); err != nil {
			done <- err
			return
		}
		if err := nccl.CopyIn(b[1], host); err != nil {
			done <- err
			return
		}
		if err := comms[1].AllReduce(b[1], b[1], nccl.Sum, s[1]); err != nil {
			done <- err
			return
		}
		for r := range 2 {
			if err := s[r].Synchronize(); err != nil {
				done <- err
				return
			}
			got := make([]uint32, 1024)
			if err := nccl.CopyOut(got, b[r]); err != nil {
				done <- err
				return
			}
			for i, v := range got {
				if v != 2*uint32(i) {
					done <- errors.New("wrong sum")
					return
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		for _, c := range comms { // unblock the stuck copy before giving up
			c.Abort()
		}
		t.Fatal("deadlock: a copy to device 1 waited for device 0's collective")
	}
}

// Wait panicked on a library opened without the CUDA runtime.
func TestLifecycleWaitWithoutCUDA(t *testing.T) {
	l := lcOpen(t, nccl.WithoutCUDARuntime())
	comms, err := l.InitAll(context.Background(), []int{0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close(context.Background())
	if err := comms[0].Wait(context.Background(), nccl.Stream{}); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Fatalf("Wait: %v", err)
	}
}
