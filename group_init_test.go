package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestInitRankInsideGroup: one goroutine makes the ranks of several GPUs
// with InitRank inside a Group (NCCL's multi-GPU init), with a context that
// can end (non-blocking communicators), one that can be cancelled, and none
// (blocking). NCCL joins them at ncclGroupEnd: before, a non-blocking
// InitRank waited for its own readiness inside the group until its deadline,
// then aborted a communicator NCCL's open group still held (the fake stops
// the process on that, as NCCL would crash). The communicators then
// all-reduce random data, every element checked. A Group whose function
// fails after the inits returns its error, and non-blocking communicators of
// the discarded group are aborted.
func TestInitRankInsideGroup(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, mode := range initModes {
			t.Run(fmt.Sprintf("%dranks/%s", n, mode), func(t *testing.T) {
				testInitRankInsideGroup(t, open(t, "default"), n, mode)
			})
		}
	}
}

// initModes are the contexts InitRank gets inside a Group: one with a
// deadline and one that can be cancelled (non-blocking communicators), and
// the background context (blocking).
var initModes = []string{"deadline", "cancel", "background"}

// testInitRankInsideGroup makes n ranks on devices devOf(r) with InitRank
// inside one Group, the context as mode says, then all-reduces random data
// on them, every element checked.
func testInitRankInsideGroup(t *testing.T, l *nccl.Library, n int, mode string) {
	var ctx context.Context
	switch mode {
	case "deadline":
		var cancel func()
		ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
	case "cancel":
		var cancel func()
		ctx, cancel = context.WithCancel(context.Background())
		defer cancel()
	default:
		ctx = context.Background()
	}
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*nccl.Comm, n)
	start := time.Now()
	err = l.Group(func() error {
		for r := range n {
			c, err := l.InitRank(ctx, devOf(r), id, n, r, modeOf(ctx, nil))
			if err != nil {
				return err
			}
			comms[r] = c
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Group of %d InitRank: %v after %v", n, err, time.Since(start))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Group of %d InitRank took %v", n, took)
	}
	for r, c := range comms {
		if c.Blocking() != (mode == "background") || c.Rank() != r {
			t.Fatalf("rank %d: Blocking %v, Rank %d", r, c.Blocking(), c.Rank())
		}
	}
	allReduceAndClose(t, l, ctx, comms)
}

// TestInitRankInsideFailedGroup: a Group whose function fails after its
// InitRank calls returns the function's error at once, and the communicators
// of the discarded group are aborted (their calls fail with ErrClosed), not
// left waiting (non-blocking) or handed out uninitialized (blocking: NCCL's
// groupCleanup destroys the init jobs unrun, and the fake stops the process
// on any later call but Abort, as NCCL would run it on an empty shell).
func TestInitRankInsideFailedGroup(t *testing.T) {
	for _, mode := range []string{"deadline", "background"} {
		t.Run(mode, func(t *testing.T) { testInitRankInsideFailedGroup(t, open(t, "default"), mode) })
	}
}

func testInitRankInsideFailedGroup(t *testing.T, l *nccl.Library, mode string) {
	ctx := context.Background()
	if mode == "deadline" {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
	}
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var comms []*nccl.Comm
	start := time.Now()
	err = l.Group(func() error {
		for r := range 2 {
			c, err := l.InitRank(ctx, devOf(r), id, 2, r, modeOf(ctx, nil))
			if err != nil {
				return err
			}
			comms = append(comms, c)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Group: %v, want the function's error", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the failed Group took %v", took)
	}
	for r, c := range comms {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("rank %d of the discarded group was not aborted", r)
		}
		if c.Blocking() != (mode == "background") {
			t.Errorf("rank %d: Blocking %v in mode %s", r, c.Blocking(), mode)
		}
		if err := c.AsyncError(); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("rank %d after the discarded group: %v, want ErrClosed", r, err)
		}
		buf := upload(t, l, devOf(r), make([]float32, 16))
		if err := c.AllReduce(buf, buf, nccl.Sum, nccl.Stream{}); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("rank %d: AllReduce after the discarded group: %v, want ErrClosed", r, err)
		}
		buf.Free()
	}
}
