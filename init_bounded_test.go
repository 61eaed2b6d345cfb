package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestBlockingInitByDefault: a context with a deadline no longer makes the
// communicator non-blocking (NCCL launches a non-blocking communicator's
// operations from a thread it starts for each, several times slower for a
// small all-reduce: scripts/bench-nonblocking.sh). The ranks come out
// blocking, and an all-reduce of random data is checked in every element.
func TestBlockingInitByDefault(t *testing.T) {
	l := open(t, "default")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	comms := make([]*nccl.Comm, n)
	errs := make(chan error, n)
	for r := range n {
		go func() {
			var err error
			comms[r], err = l.InitRank(ctx, r, id, n, r, nil)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range comms {
		if !c.Blocking() {
			t.Fatalf("rank %d: non-blocking from a context with a deadline and no Config.Blocking", r)
		}
	}
	allReduceAndClose(t, l, ctx, comms)
}

// TestBlockingInitGivenUp: a blocking init whose peer does not come returns
// at its context's end with an error wrapping ctx.Err() that says what
// happens next; Library.Close refuses while NCCL still runs the init; when
// the late peer comes and NCCL returns, gonccl aborts the communicator it
// gave up, and Close succeeds. InitAll is bounded the same way.
func TestBlockingInitGivenUp(t *testing.T) {
	testBlockingInitGivenUp(t, open(t, "default"))

	// InitAll of devices whose init cannot finish within the deadline: the
	// fake's init delay holds ncclCommInitAll.
	l2 := open(t, "default")
	t.Setenv("FAKENCCL_INIT_DELAY_US", "500000")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if comms, err := l2.InitAll(ctx2, []int{0, 1}, nil); !errors.Is(err, context.DeadlineExceeded) || comms != nil {
		t.Fatalf("InitAll past its deadline: %v, %v", comms, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for l2.Close() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Close after the given-up InitAll: %v", l2.Close())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testBlockingInitGivenUp: rank 0 of 2 on device devOf(0) alone until its
// deadline, then rank 1 on devOf(1).
func testBlockingInitGivenUp(t *testing.T, l *nccl.Library) {
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := l.InitRank(ctx, devOf(0), id, 2, 0, nil)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || c != nil {
		t.Fatalf("InitRank without its peer: %v, %v; want DeadlineExceeded", c, err)
	}
	if !strings.Contains(err.Error(), "Config.Blocking = false") {
		t.Errorf("the error does not say how to make the init abortable: %v", err)
	}
	if took > 2*time.Second {
		t.Errorf("InitRank returned %v after a 200 ms deadline", took)
	}
	if err := l.Close(); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Fatalf("Close with a given-up init inside NCCL: %v, want ErrInvalidUsage", err)
	}
	// The late peer: NCCL's init of rank 0 completes with it, and gonccl
	// aborts what it gave up.
	late, err := l.InitRank(context.Background(), devOf(1), id, 2, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	late.Abort()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Close 10 s after the late peer came: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBlockingSplitGivenUp: a blocking communicator's Split waits inside NCCL
// for the other ranks, where no context reaches. gonccl runs it on a goroutine
// of its own: rank 0's Split returns at its deadline with an error wrapping
// context.DeadlineExceeded, and once rank 1 comes (3 s later) NCCL's split
// ends and rank 0's parent and the communicator it made are aborted. Rank 1
// gets its communicator; its peer being gone, it is aborted too.
func TestBlockingSplitGivenUp(t *testing.T) {
	l := open(t, "v230")
	comms, err := l.InitAll(context.Background(), devList(2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !comms[0].Blocking() {
		t.Fatal("not blocking")
	}
	late := make(chan error, 1)
	go func() {
		time.Sleep(3 * time.Second)
		c, err := comms[1].Split(context.Background(), 0, 1, nil)
		if c != nil {
			c.Abort()
		}
		late <- err
	}()
	const deadline = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	c, err := comms[0].Split(ctx, 0, 0, nil)
	el := time.Since(start)
	if c != nil || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "Split: ") {
		t.Fatalf("Split after %v = %v, %v; want an error wrapping context.DeadlineExceeded that names Split", el, c, err)
	}
	if el > deadline+time.Second {
		t.Fatalf("Split returned after %v, deadline %v", el, deadline)
	}
	t.Logf("Split returned after %v: %v", el.Round(time.Millisecond), err)
	if err := <-late; err != nil {
		t.Logf("rank 1's Split: %v", err)
	}
	select {
	case <-comms[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0's parent not freed once NCCL's split returned")
	}
	comms[1].Abort()
	// Library.Close refuses until what the given-up split made is aborted.
	for stop := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := l.Close()
		if err == nil {
			break
		}
		if time.Now().After(stop) {
			t.Fatalf("Library.Close after the split ended: %v", err)
		}
	}
}
