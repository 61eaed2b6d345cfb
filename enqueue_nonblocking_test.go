package nccl_test

import (
	"runtime"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
)

// BenchmarkNonBlockingAllReduce is one all-reduce on each of two ranks of a
// non-blocking communicator, launched at once from a goroutine each: NCCL
// launches a rank's operation from a thread of its own and the call returns
// once gonccl has seen the launch end (a one-rank communicator's collective
// is a copy launched at the call, never in progress). The fake's launch
// thread (pthread_create per operation, as NCCL's groupLaunchNonBlocking)
// makes this the cost of gonccl's wait for a launch. On GPUs this wait made a
// 4 KiB all-reduce cost 0.75–0.84 ms while gonccl slept between polls
// (docs/gpu-results.md). On the 2-vCPU development machine it reads about
// 0.8 ms now: two spinning waits and two launch threads share two CPUs.
func BenchmarkNonBlockingAllReduce(b *testing.B) {
	l := open(b, "default")
	ranks := initRanksCtx(b, l, 2, nonBlockingCtx(b))
	bufs := make([]nccl.Buffer, len(ranks))
	for r, rk := range ranks {
		buf, err := l.CUDA().Alloc(rk.dev, nccl.Float32, 1024)
		if err != nil {
			b.Fatal(err)
		}
		defer buf.Free()
		bufs[r] = buf
	}
	b.ReportAllocs()
	b.ResetTimer()
	eachRank(b, ranks, func(r int, rk rank) error {
		for range b.N {
			if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
				return err
			}
		}
		return nil
	})
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
// to another thread at its yields between polls and, with only the wait kept
// on its thread, still after the launch's C call, whenever the runtime had
// given its P away; on GPUs the handoffs cost a large share of a launch
// (scripts/bench-nonblocking.sh against the same program in C).
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
