package nccl_test

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"golang.org/x/sys/unix"
)

// BenchmarkNonBlockingAllReduce is one all-reduce call on a non-blocking
// communicator (one rank): NCCL launches it from a thread of its own and the
// call returns once gonccl has seen the launch end. The fake's launch thread
// (pthread_create per operation, as NCCL's groupLaunchNonBlocking) makes this
// the cost of gonccl's wait for a launch. On GPUs this wait made a 4 KiB
// all-reduce cost 0.75–0.84 ms while gonccl slept between polls
// (docs/gpu-results.md).
func BenchmarkNonBlockingAllReduce(b *testing.B) {
	l := open(b, "default")
	cu := l.CUDA()
	ranks := initRanksCtx(b, l, 1, nonBlockingCtx(b))
	rk := ranks[0]
	buf, err := cu.Alloc(rk.dev, nccl.Float32, 1024)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	b.ReportAllocs()
	for b.Loop() {
		if err := rk.comm.AllReduce(buf, buf, nccl.Sum, rk.s); err != nil {
			b.Fatal(err)
		}
	}
	rk.s.Synchronize()
}

// TestNonBlockingOpAllocs: an operation on a non-blocking communicator, whose
// launch ends in NCCL's launch thread and is polled for, allocates nothing
// (before, each poll allocated its result and each ncclInProgress an error).
func TestNonBlockingOpAllocs(t *testing.T) {
	l := open(t, "default")
	ranks := initRanksCtx(t, l, 1, nonBlockingCtx(t))
	rk := ranks[0]
	buf, err := l.CUDA().Alloc(rk.dev, nccl.Float32, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	if n := testing.AllocsPerRun(200, func() {
		if err := rk.comm.AllReduce(buf, buf, nccl.Sum, rk.s); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per all-reduce on a non-blocking communicator", n)
	}
	rk.s.Synchronize()
}

// TestNonBlockingLaunchStaysOnItsThread: a non-blocking launch and the polls
// that wait it out run on one OS thread. A goroutine free to move was handed
// to another thread at its yields between polls (33 000 to 39 600 polls
// elsewhere in 200 launches, 5 runs) and, with only the wait kept on its
// thread, still after the launch's C call, whenever the runtime had given
// its P away (171 to 503 in 8 runs). On 4 × H100 (-np 4, 8 bytes) launches cost a
// median of 126.7 µs free to move, 92.0 µs kept on their thread, and 81.0 µs
// from C.
// The fake counts the polls of a launch made from another thread than the
// launch call's (fakenccl_polls_elsewhere); its launch thread is slowed so
// that each wait polls many times, with other goroutines runnable. Two
// ranks: a one-rank communicator's collective is a copy launched at the
// call, never in progress.
func TestNonBlockingLaunchStaysOnItsThread(t *testing.T) {
	t.Setenv("FAKENCCL_LAUNCH_DELAY_US", "200")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	l := open(t, "default")
	elsewhere := fakeFn(t, l, "fakenccl_polls_elsewhere")
	polls := fakeFn(t, l, "fakenccl_launch_polls")
	ranks := initRanksCtx(t, l, 2, nonBlockingCtx(t))
	bufs := make([]nccl.Buffer, len(ranks))
	for r := range ranks {
		bufs[r] = upload(t, l, r, make([]float32, 256))
	}
	stop := make(chan struct{})
	var busy sync.WaitGroup
	defer busy.Wait()
	defer close(stop)
	for range 4 { // goroutines for the scheduler to juggle
		busy.Add(1)
		go func() {
			defer busy.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	before, _, _ := purego.SyscallN(elsewhere)
	pollsBefore, _, _ := purego.SyscallN(polls)
	const launches = 100
	eachRank(t, ranks, func(r int, rk rank) error {
		for range launches {
			if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
				return err
			}
		}
		return nil
	})
	after, _, _ := purego.SyscallN(elsewhere)
	pollsAfter, _, _ := purego.SyscallN(polls)
	if n := int(pollsAfter - pollsBefore); n < launches*len(ranks) {
		t.Fatalf("the fake saw %d polls of %d launches: the probe counts nothing", n, launches*len(ranks))
	}
	if n := after - before; n != 0 {
		t.Errorf("%d polls of %d launches came from another thread than the launch's", n, launches*len(ranks))
	}
}

// TestNonBlockingWaitSpinsWithoutParking: while a wait for a non-blocking
// launch spins, its OS thread never parks. The wait used to yield every 16th
// poll; kept on its thread (TestNonBlockingLaunchStaysOnItsThread), the
// goroutine's yield parks the thread until another thread hands the
// goroutine back: about 20 µs a yield on the 2-vCPU development machine,
// against 0.1 µs for a goroutine free to move. The kernel counts each park as
// a voluntary context switch of the thread (getrusage RUSAGE_THREAD), one per
// 16 polls before; a spin makes none. The fake's launch thread is slowed to
// 200 µs, within the wait's spin.
func TestNonBlockingWaitSpinsWithoutParking(t *testing.T) {
	t.Setenv("FAKENCCL_LAUNCH_DELAY_US", "100")
	// At GOMAXPROCS=1 the wait yields to the Go scheduler on purpose
	// (TestNonBlockingWaitSharesTheOnlyP).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	l := open(t, "default")
	polls := fakeFn(t, l, "fakenccl_launch_polls")
	// The poll that completes a launch job sleeps in the fake (a window for
	// a second thread's completion to be caught): not here, where every
	// sleep would be a switch.
	window := fakeFn(t, l, "fakenccl_set_complete_window_us")
	purego.SyscallN(window, 0)
	defer purego.SyscallN(window, 200)
	ranks := initRanksCtx(t, l, 2, nonBlockingCtx(t))
	bufs := make([]nccl.Buffer, len(ranks))
	for r := range ranks {
		bufs[r] = upload(t, l, r, make([]float32, 256))
	}
	eachRank(t, ranks, func(r int, rk rank) error { // the ranks connect at their first operation
		return rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s)
	})
	// Then the ranks' launches in turn, from one thread (a launch does not
	// wait for the peer's): no other thread spins for a CPU beside the fake's
	// launch threads. Only the launches that end within the wait's spin
	// count: a longer wait sleeps, and each sleep is a switch.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const launches = 100
	var kept, polled, switched int64
	var took []time.Duration
	for range launches {
		for r, rk := range ranks {
			var before, after unix.Rusage
			p0, _, _ := purego.SyscallN(polls)
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
				t.Fatal(err)
			}
			d := time.Since(t0)
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
				t.Fatal(err)
			}
			p1, _, _ := purego.SyscallN(polls)
			took = append(took, d)
			if d < 300*time.Microsecond {
				kept++
				polled += int64(p1 - p0)
				switched += after.Nvcsw - before.Nvcsw
			}
		}
	}
	for _, rk := range ranks {
		if err := rk.s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	t.Logf("%d launches (median %v): %d within 300 µs, with %d polls and %d voluntary context switches of the launching thread",
		len(took), took[len(took)/2], kept, polled, switched)
	if kept < 20 || polled < kept*32 {
		// A machine this slow (an emulator) launches too slowly, or polls
		// too seldom, for a yield every 16 polls to show.
		t.Logf("cannot tell on this machine")
		return
	}
	if switched > polled/64 {
		t.Errorf("the launching thread parked %d times in %d polls: the wait yields while it spins", switched, polled)
	}
}

// TestNonBlockingWaitSharesTheOnlyP: with GOMAXPROCS=1 a wait's spin holds
// the only P, so there it yields to the Go scheduler: another goroutine runs
// during the waits. A spin with only the kernel's yields let it run only at
// the runtime's 10 ms preemption: 2 turns in 200 launches (and in one run of
// the suite at GOMAXPROCS=1, TestGroupFailuresLeaveNothing's poller never
// ran).
func TestNonBlockingWaitSharesTheOnlyP(t *testing.T) {
	t.Setenv("FAKENCCL_LAUNCH_DELAY_US", "100")
	l := open(t, "default")
	window := fakeFn(t, l, "fakenccl_set_complete_window_us")
	purego.SyscallN(window, 0) // no sleep in the poll that completes a launch
	defer purego.SyscallN(window, 200)
	ranks := initRanksCtx(t, l, 2, nonBlockingCtx(t))
	bufs := make([]nccl.Buffer, len(ranks))
	for r := range ranks {
		bufs[r] = upload(t, l, r, make([]float32, 256))
	}
	eachRank(t, ranks, func(r int, rk rank) error { // the ranks connect at their first operation
		return rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s)
	})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var turns atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				turns.Add(1)
				runtime.Gosched()
			}
		}
	}()
	const launches = 100
	start := time.Now()
	for range launches {
		for r, rk := range ranks {
			if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
				t.Fatal(err)
			}
		}
	}
	took := time.Since(start)
	n := turns.Load()
	close(stop)
	<-done
	for _, rk := range ranks {
		if err := rk.s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d launches in %v; the other goroutine ran %d times", launches*len(ranks), took, n)
	if n < launches*int64(len(ranks)) {
		t.Errorf("the other goroutine ran %d times during %d launches with GOMAXPROCS=1: the waits held the only P", n, launches*len(ranks))
	}
}
