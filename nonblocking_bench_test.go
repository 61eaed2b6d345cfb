package nccl_test

import (
	"testing"

	"github.com/gonccl/nccl"
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
