//go:build gpu

package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// Faults on real GPUs: an Abort watchdog racing enqueues, and a peer process
// that dies before init, during a collective and during close. The survivor
// must return within its deadline plus a second, give its device memory back,
// and form a working communicator afterwards in the same process.

// TestGPUFaultAbortWatchdog aborts both ranks of a two-GPU communicator at
// random moments while one goroutine per rank enqueues all-reduces, for
// GONCCL_GPU_WATCHDOG_SECONDS (default 10), blocking and non-blocking rounds
// in turn. Passing means no crash, every call after the abort says ErrClosed,
// and the streams drain.
func TestGPUFaultAbortWatchdog(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	if n > devices {
		// Seen on NCCL 2.30.7, two ranks on one H200 in one process: the
		// Abort of one rank frees memory the other rank's kernel still
		// reads, and the illegal address (cudaError 700) poisons the
		// process's CUDA context for both. With a GPU each, as NCCL wants,
		// the test passes (2×H200, NCCL 2.28.3 and 2.28.9).
		t.Skip("ranks sharing a GPU in one process: an Abort of one faults the other's kernel; needs a GPU per rank")
	}
	secs := 10
	if v, err := strconv.Atoi(os.Getenv("GONCCL_GPU_WATCHDOG_SECONDS")); err == nil {
		secs = v
	}
	cu := l.CUDA()
	var streams [2]nccl.Stream
	var bufs [2]nccl.Buffer
	for r := range 2 {
		var err error
		if streams[r], err = cu.NewStream(devOf(r), nccl.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
		defer streams[r].Destroy()
		if bufs[r], err = cu.Alloc(devOf(r), nccl.Float32, 1<<18); err != nil {
			t.Fatal(err)
		}
		defer bufs[r].Free()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	end := time.Now().Add(time.Duration(secs) * time.Second)
	rounds, ops := 0, 0
	for time.Now().Before(end) {
		ctx := context.Background() // blocking
		var cancel context.CancelFunc = func() {}
		if rounds%2 == 1 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Minute) // non-blocking
		}
		ranks := initRanksCtx(t, l, 2, ctx)
		comms := [2]*nccl.Comm{ranks[0].comm, ranks[1].comm}
		cancel()
		// One all-reduce together first: NCCL connects the peers on the first
		// operation, inside the call; the race is meant for plain enqueues.
		if err := l.Group(func() error {
			for r := range 2 {
				if err := comms[r].AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			if err := streams[r].Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var counts [2]int
		var last [2]error
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if last[r] = comms[r].AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); last[r] != nil {
						return
					}
					counts[r]++
				}
			}()
		}
		time.Sleep(time.Duration(rng.IntN(20000)) * time.Microsecond)
		for _, c := range comms {
			if err := c.Abort(); err != nil {
				t.Fatalf("round %d: Abort: %v", rounds, err)
			}
		}
		wg.Wait()
		for r := range 2 {
			if !errors.Is(last[r], nccl.ErrClosed) {
				t.Fatalf("round %d rank %d: loop ended with %v", rounds, r, last[r])
			}
			select {
			case <-comms[r].Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d rank %d: not freed", rounds, r)
			}
			if err := streams[r].Synchronize(); err != nil {
				t.Fatalf("round %d rank %d: stream after abort: %v", rounds, r, err)
			}
			ops += counts[r]
		}
		rounds++
	}
	t.Logf("watchdog: %d rounds in %ds, %d all-reduces enqueued, every one aborted cleanly", rounds, secs, ops)
}

// faultChild starts this test binary as rank 1 on GPU 1, told to die at the
// given point (or to behave: "ok").
func faultChild(t *testing.T, id nccl.UniqueID, when string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUFaultChild$", "-test.v", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), "GONCCL_FAULT_ID="+id.String(), "GONCCL_FAULT_WHEN="+when)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("child (%s):\n%s", when, lastLines(out.String(), 20))
		}
	})
	return cmd
}

// TestGPUFaultChild is rank 1 of TestGPUFaultPeerDies, in its own process.
func TestGPUFaultChild(t *testing.T) {
	when := os.Getenv("GONCCL_FAULT_WHEN")
	if when == "" {
		t.Skip("started by TestGPUFaultPeerDies")
	}
	if when == "before" {
		os.Exit(0) // dies before init
	}
	id, err := nccl.ParseUniqueID(os.Getenv("GONCCL_FAULT_ID"))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := openReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := l.InitRank(ctx, devOf(1), id, 2, 1, modeOf(ctx, nil))
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.CUDA().NewStream(devOf(1), nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.CUDA().Alloc(devOf(1), nccl.Float32, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// One all-reduce together, so the peer knows this rank is alive.
	if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, s); err != nil {
		t.Fatal(err)
	}
	switch when {
	case "during", "close":
		os.Exit(0) // the peer's next all-reduce or its close finds this rank gone
	}
	if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGPUFaultPeerDies: this process is rank 0 on GPU 0; rank 1 is a child
// process on GPU 1 that dies before init, during a collective, or during close.
// GONCCL_GPU_FAULT_PASSES (default 3) sets how many passes of the three faults run.
func TestGPUFaultPeerDies(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	cu := l.CUDA()
	const deadline = 5 * time.Second
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()

	// round runs one job with a child told when to die, and reports how long
	// each step the survivor took.
	round := func(when string) {
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		child := faultChild(t, id, when)
		limit := deadline
		if when == "ok" {
			limit = time.Minute
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		start := time.Now()
		c, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil))
		if when == "before" {
			el := time.Since(start)
			if err == nil || el > deadline+time.Second {
				t.Fatalf("%s: InitRank returned %v after %v", when, err, el)
			}
			t.Logf("peer dies before init: InitRank returned after %v: %v", el.Round(time.Millisecond), err)
			return
		}
		if err != nil {
			t.Fatalf("%s: InitRank: %v", when, err)
		}
		b, err := cu.Alloc(0, nccl.Float32, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := b.Free(); err != nil {
				t.Errorf("%s: Free: %v", when, err)
			}
		}()
		if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(ctx, s); err != nil {
			t.Fatalf("%s: the first all-reduce: %v", when, err)
		}
		if when != "ok" {
			child.Wait() // rank 1 is gone now
		}
		switch when {
		case "during":
			wctx, wcancel := context.WithTimeout(context.Background(), deadline)
			defer wcancel()
			start := time.Now()
			if err := c.AllReduce(b, b, nccl.Sum, s); err != nil && !errors.Is(err, nccl.ErrClosed) {
				t.Logf("during: AllReduce: %v", err)
			}
			err := c.Wait(wctx, s)
			el := time.Since(start)
			if err == nil || el > deadline+time.Second {
				t.Fatalf("during: Wait returned %v after %v", err, el)
			}
			t.Logf("peer dies during a collective: Wait returned after %v: %v", el.Round(time.Millisecond), err)
			c.Abort()
			select {
			case <-c.Done():
			case <-time.After(time.Second):
				t.Fatal("during: not freed a second after Abort")
			}
			if err := s.Synchronize(); err != nil {
				t.Fatalf("during: stream after the abort: %v", err)
			}
		case "close":
			cctx, ccancel := context.WithTimeout(context.Background(), deadline)
			defer ccancel()
			start := time.Now()
			err := c.Close(cctx)
			el := time.Since(start)
			if el > deadline+time.Second {
				t.Fatalf("close: Close returned %v after %v", err, el)
			}
			t.Logf("peer dies before close: Close returned after %v: %v", el.Round(time.Millisecond), err)
		case "ok":
			if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := child.Wait(); err != nil {
				t.Fatalf("ok: rank 1: %v", err)
			}
		}
	}
	free := func() int {
		f, _, err := cu.MemGetInfo(0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	round("ok") // NCCL's first communicator makes what it keeps for the process
	// Passes of the three faults. NCCL itself keeps about 1 MiB of GPU memory
	// for each init aborted without its peer that is followed by an abort with
	// a kernel in flight: one 2 MiB granule every other pass, on 2.28.3,
	// 2.28.9 and 2.29.2. scripts/repro/nccl-abort-memory.c (BEFORE=1) shows
	// the same in C with no gonccl, and nothing kept without the aborted init.
	// That much is allowed; anything gonccl lost per fault (its 4 MiB buffer,
	// say) would show on every pass.
	const granule = 2 << 20
	passes := 3
	if v, err := strconv.Atoi(os.Getenv("GONCCL_GPU_FAULT_PASSES")); err == nil && v > 0 {
		passes = v
	}
	allowed := granule * ((passes + 1) / 2)
	start := free()
	for pass := 1; pass <= passes; pass++ {
		for _, when := range []string{"before", "during", "close"} {
			base := free()
			round(when)
			// The device frees what an abort released on its own time.
			got := free()
			for i := 0; i < 50 && got < base; i++ {
				time.Sleep(100 * time.Millisecond)
				got = free()
			}
			t.Logf("pass %d, %s: GPU 0 free memory %d MiB, %+d bytes", pass, when, got>>20, got-base)
		}
	}
	if lost := start - free(); lost > allowed {
		t.Errorf("%d bytes of GPU 0 not returned after %d faults (NCCL's own share is at most %d)", lost, 3*passes, allowed)
	} else {
		t.Logf("after %d faults: %d bytes of GPU 0 kept", 3*passes, lost)
	}
	round("ok") // and a fresh communicator works in the same process
	fmt.Println("fault rounds: before, during, close, then a fresh communicator: ok")
}
