//go:build gpu

package nccl_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/gonccl/nccl"
)

// GPU tests run against the real NCCL and CUDA runtime that the search finds
// (GONCCL_NCCL_LIB and friends choose): cross-compile with
//
//	CGO_ENABLED=0 go test -tags gpu -c -o nccl-gpu.test .
//
// and run the binary on a machine with GPUs (scripts/gpu-check.sh).

// openReal returns the library and the number of ranks the tests of several
// ranks place: one per GPU, or GONCCL_GPU_RANKS, which may exceed the GPUs
// when NCCL_MULTI_RANK_GPU_ENABLE=1 lets NCCL 2.30 and later put several ranks
// on one GPU (ranks go round the GPUs: devOf). That is how a machine of one GPU
// runs them.
func openReal(t *testing.T) (*nccl.Library, int) {
	t.Helper()
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := l.CUDA().DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	devices = gpus
	n := gpus
	if v := os.Getenv("GONCCL_GPU_RANKS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("GONCCL_GPU_RANKS=%q: want a positive number", v)
		}
		if n > gpus && os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE") != "1" {
			t.Fatalf("GONCCL_GPU_RANKS=%d on %d GPUs needs NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30)", n, gpus)
		}
	}
	t.Logf("NCCL %s from %s (%s); %d GPUs, %d ranks", l.Version(), l.Path, l.Via, gpus, n)
	return l, n
}

// TestGPUAllReduceFloat32 is the smallest proof: one goroutine per GPU, the id
// by value, a float32 sum checked element by element.
func TestGPUAllReduceFloat32(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	ranks := initRanks(t, l, n)
	cu := l.CUDA()
	const elems = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([][]float32, n)
	want := make([]float32, elems)
	for r := range in {
		in[r] = make([]float32, elems)
		for i := range in[r] {
			in[r][i] = float32(rng.IntN(2001) - 1000) // exact sums in float32
			want[i] += in[r][i]
		}
	}
	bufs := make([]nccl.Buffer, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if bufs[r], err = cu.Alloc(rk.dev, nccl.Float32, elems); err != nil {
				errs[r] = err
				return
			}
			if err = nccl.CopyIn(bufs[r], in[r]); err != nil {
				errs[r] = err
				return
			}
			if err = rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
				errs[r] = err
				return
			}
			if err = rk.s.Synchronize(); err != nil {
				errs[r] = err
				return
			}
			host := make([]float32, elems)
			if errs[r] = nccl.CopyOut(host, bufs[r]); errs[r] != nil {
				return
			}
			for i, got := range host {
				if got != want[i] {
					t.Errorf("rank %d element %d = %v, want %v", r, i, got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		bufs[r].Free()
	}
}

// TestGPUCollectives runs the fake-library suite's cases on the real library:
// every collective it has, every type, every reduction, in place and not; one
// goroutine per GPU, each with its own InitRank.
func TestGPUCollectives(t *testing.T) {
	l, n := openReal(t)
	ranks := initRanks(t, l, n)
	before := checked.cases.Load()
	runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 7)))
	t.Logf("%d rank-results checked, %d elements", checked.cases.Load()-before, checked.elements.Load())
}

// TestGPUCollectivesNonBlocking is the same from non-blocking communicators
// (made from a context with a deadline).
func TestGPUCollectivesNonBlocking(t *testing.T) {
	l, n := openReal(t)
	ranks := initRanksCtx(t, l, n, nonBlockingCtx(t))
	before := checked.cases.Load()
	runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 10)))
	t.Logf("%d rank-results checked", checked.cases.Load()-before)
}

// TestGPUCollectivesInitAll is the same from communicators made by one
// ncclCommInitAll call in one process (blocking), and by InitAll's grouped
// form (non-blocking).
func TestGPUCollectivesInitAll(t *testing.T) {
	l, n := openReal(t)
	devs := make([]int, n)
	for i := range devs {
		devs[i] = devOf(i)
	}
	for _, ctx := range []context.Context{context.Background(), nonBlockingCtx(t)} {
		comms, err := l.InitAll(ctx, devs, modeOf(ctx, nil))
		if err != nil {
			t.Fatal(err)
		}
		ranks := make([]rank, n)
		for i, c := range comms {
			s, err := l.CUDA().NewStream(devs[i], nccl.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			ranks[i] = rank{comm: c, s: s, dev: devs[i]}
			if c.Blocking() != (ctx.Done() == nil) {
				t.Errorf("InitAll (can end: %v): rank %d Blocking() = %v", ctx.Done() != nil, i, c.Blocking())
			}
		}
		before := checked.cases.Load()
		runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 8)))
		t.Logf("InitAll (can end: %v): %d rank-results checked", ctx.Done() != nil, checked.cases.Load()-before)
		for _, rk := range ranks {
			if err := rk.comm.Close(context.Background()); err != nil {
				t.Error(err)
			}
			rk.s.Destroy()
		}
	}
}

// TestGPUCollectivesMultiProcess runs the cases with one process per GPU: the
// test binary starts itself once per rank (TestGPUChildRank), the ranks meet
// through NCCL_COMM_ID, and each checks its own results against inputs it
// regenerates for every rank from the shared seed.
func TestGPUCollectivesMultiProcess(t *testing.T) {
	_, n := openReal(t)
	port := 29000 + os.Getpid()%900
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGPUChildRank$", "-test.v", "-test.timeout=240s")
		cmd.Env = append(os.Environ(), fmt.Sprintf("GONCCL_GPU_RANK=%d", r), fmt.Sprintf("GONCCL_GPU_WORLD=%d", n),
			fmt.Sprintf("NCCL_COMM_ID=127.0.0.1:%d", port))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		t.Logf("rank %d process:\n%s", r, lastLines(outs[r].String(), 4))
		if err != nil {
			t.Errorf("rank %d process: %v", r, err)
		}
	}
}

// TestGPUChildRank is one rank of TestGPUCollectivesMultiProcess.
func TestGPUChildRank(t *testing.T) {
	me, err1 := strconv.Atoi(os.Getenv("GONCCL_GPU_RANK"))
	n, err2 := strconv.Atoi(os.Getenv("GONCCL_GPU_WORLD"))
	if err1 != nil || err2 != nil {
		t.Skip("run by TestGPUCollectivesMultiProcess")
	}
	l, _ := openReal(t)
	id, err := l.GetUniqueID() // from NCCL_COMM_ID: the same on every rank
	if err != nil {
		t.Fatal(err)
	}
	comm, err := l.InitRank(context.Background(), devOf(me), id, n, me, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close(context.Background())
	s, err := l.CUDA().NewStream(devOf(me), nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ranks := make([]rank, n)
	ranks[me] = rank{comm: comm, s: s, dev: devOf(me)}
	runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 9)))
	t.Logf("rank %d of %d (pid %d): %d results checked, %d elements", me, n, os.Getpid(), checked.cases.Load(), checked.elements.Load())
}

// TestGPUCopyInComplete: WriteBytes (what CopyIn does) is documented to
// return once the bytes are on the device, so work a non-blocking stream starts
// right after it (which CUDA does not order after the legacy stream's copy)
// must see the new bytes. CUDA returns from a pageable host-to-device
// cudaMemcpy once the data is staged, before its DMA lands; each size is tried
// many times with fresh bytes.
func TestGPUCopyInComplete(t *testing.T) {
	l, _ := openReal(t)
	cu := l.CUDA()
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const most = 4 << 20
	a, err := cu.Alloc(0, nccl.Uint8, most)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	b, err := cu.Alloc(0, nccl.Uint8, most)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	host, got := make([]byte, most), make([]byte, most)
	for _, size := range []int{256, 8192, 65536, 1 << 20, most} {
		stale := 0
		for it := range 200 {
			for k := range host[:size] {
				host[k] = byte(it*31 + k%251)
			}
			if err := a.WriteBytes(host[:size]); err != nil {
				t.Fatal(err)
			}
			if err := cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), size, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := b.ReadBytes(got[:size]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:size], host[:size]) {
				stale++
			}
		}
		if stale > 0 {
			t.Errorf("%d bytes: %d of 200 copies not complete when WriteBytes returned", size, stale)
		} else {
			t.Logf("%d bytes: 200 of 200 copies complete", size)
		}
	}
}

// TestGPUAlltoAllvCaptured: an all-to-all-v on symmetric buffers captured into
// a CUDA graph per rank, four launches checked in every element. VCCL 2.29.2
// aborts the process when its native ncclAlltoAllv is captured (an assertion
// in ncclLaunchRmaColl, seen on 4 × H200): there the capture runs grouped, and
// SetPath(Native) is refused with an *UnsupportedError.
func TestGPUAlltoAllvCaptured(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks")
	}
	graphAlltoAllv(t, l, n)
}

// TestGPUCapturedAllReduce: one goroutine per GPU captures K all-reduces as
// its communicator's first operations, so that NCCL connects the ranks inside
// the capture on the capturing thread; the graphs are launched and every
// element checked. NCCL 2.28.3 on 4 × H100 failed such a capture with "failed
// to peer with device" until gonccl relaxed the thread around the call.
func TestGPUCapturedAllReduce(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks")
	}
	if !l.CUDA().HasGraphs() {
		t.Skip("the CUDA runtime lacks graphs")
	}
	graphAllReduce(t, l, n, context.Background())
}

// TestGPUTyped: AlltoAll, Gather and Scatter by the native and the grouped path
// for every type, typed reductions in place, and AlltoAllv by every form
// (native on a VCCL build), on the real library the search finds.
func TestGPUTyped(t *testing.T) {
	l, n := openReal(t)
	t.Logf("ncclAlltoAllv %v", l.Has("ncclAlltoAllv"))
	ranks := initRanks(t, l, n)
	rng := rand.New(rand.NewPCG(5, 6))
	movement[int8](t, l, ranks, rng)
	movement[uint8](t, l, ranks, rng)
	movement[int32](t, l, ranks, rng)
	movement[uint32](t, l, ranks, rng)
	movement[int64](t, l, ranks, rng)
	movement[uint64](t, l, ranks, rng)
	movement[float32](t, l, ranks, rng)
	movement[float64](t, l, ranks, rng)
	movement[nccl.F16](t, l, ranks, rng)
	movement[nccl.BF16](t, l, ranks, rng)
	if l.SupportsType(nccl.Float8e4m3) {
		movement[nccl.F8E4M3](t, l, ranks, rng)
		movement[nccl.F8E5M2](t, l, ranks, rng)
	}
	typedReductions(t, l, ranks)
	alltoallvPaths(t, l, ranks)
}
