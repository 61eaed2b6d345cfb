package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestGroupWhileLaunching: a Group whose member is a non-blocking
// communicator another goroutine's launch still holds is refused as busy
// (NCCL takes one call at a time on it), and gives back everything it took:
// the first launch completes, a later Group on the member runs, and Close
// returns, which it could not while a call stayed counted in. The fake's
// launch thread is slowed (FAKENCCL_LAUNCH_DELAY_US) so that the Group comes
// during the first launch. Two ranks: a one-rank all-reduce is a copy that
// NCCL launches at the call.
func TestGroupWhileLaunching(t *testing.T) {
	t.Setenv("FAKENCCL_LAUNCH_DELAY_US", "200000")
	l := open(t, "default")
	comms := initComms(t, l, 2, nonBlockingCtx(t), nil)
	ops := make([]func() error, 2)
	streams := make([]nccl.Stream, 2)
	for r, c := range comms {
		buf := upload(t, l, r, make([]float32, 1024))
		s, err := l.CUDA().NewStream(r, nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		streams[r] = s
		ops[r] = func() error { return c.AllReduce(buf, buf, nccl.Sum, s) }
	}
	first, peer := make(chan error, 1), make(chan error, 2)
	go func() { first <- ops[0]() }()
	go func() { peer <- ops[1](); peer <- ops[1]() }() // the peer of both of rank 0's all-reduces
	time.Sleep(20 * time.Millisecond)                  // rank 0's launch is in NCCL's thread now
	err := l.Group(ops[0])
	if !errors.Is(err, nccl.ErrInvalidUsage) || !strings.Contains(err.Error(), "another goroutine") {
		t.Fatalf("Group during another goroutine's launch: %v, want the busy refusal", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first launch: %v", err)
	}
	if err := l.Group(ops[0]); err != nil {
		t.Fatalf("a Group after the refusal: %v", err)
	}
	for range 2 {
		if err := <-peer; err != nil {
			t.Fatalf("rank 1: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r, c := range comms {
		if err := c.Wait(ctx, streams[r]); err != nil {
			t.Fatalf("rank %d: Wait: %v", r, err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatalf("rank %d: Close after the refused Group: %v (a call still counted in?)", r, err)
		}
	}
}
