package nccl_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestGraphDestroyUnderLaunches: Destroy from one goroutine while others
// launch the graph never frees it under a launch: every Launch either
// succeeds or returns ErrClosed, the CUDA objects are destroyed exactly once,
// and a second Destroy is ErrClosed.
func TestGraphDestroyUnderLaunches(t *testing.T) {
	cu, s, a, b := graphSetup(t, nccl.StreamNonBlocking)
	before := liveGraphs(t, cu)
	for round := range 20 {
		g, err := cu.Capture(s, func() error { return cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 64, s) })
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var ok, closed atomic.Int64
		start := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 200 {
					switch err := g.Launch(s); {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, nccl.ErrClosed):
						closed.Add(1)
						return
					default:
						t.Errorf("Launch: %v", err)
						return
					}
				}
			}()
		}
		close(start)
		if round%2 == 1 {
			time.Sleep(time.Duration(round) * 50 * time.Microsecond)
		}
		if err := g.Destroy(); err != nil {
			t.Fatalf("round %d: Destroy: %v", round, err)
		}
		wg.Wait()
		if err := g.Destroy(); !errors.Is(err, nccl.ErrClosed) || strings.Contains(err.Error(), "Abort") {
			t.Errorf("second Destroy: %v", err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if got := liveGraphs(t, cu); got != before {
			t.Fatalf("round %d: %d live graphs, want %d (%d launches ran, %d refused)", round, got, before, ok.Load(), closed.Load())
		}
	}
}

// TestCloseRefusedWhileGraphsHoldTheComm: a graph that captured a
// communicator's all-reduce holds it: Close refuses with ErrGraphsAlive and
// leaves it usable; once the graph is destroyed Close succeeds. Abort instead
// destroys the graphs first (NCCL >= 2.26 would wait for them), and their
// Launch and Destroy then return ErrClosed.
func TestCloseRefusedWhileGraphsHoldTheComm(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	for _, abort := range []bool{false, true} {
		ctx := context.Background()
		comms := initComms(t, l, 2, ctx, nil)
		streams := make([]nccl.Stream, 2)
		bufs := make([]nccl.Buffer, 2)
		graphs := make([]*nccl.Graph, 2)
		for r, c := range comms {
			var err error
			if streams[r], err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
				t.Fatal(err)
			}
			defer streams[r].Destroy()
			if bufs[r], err = cu.Alloc(c.Device(), nccl.Float32, 64); err != nil {
				t.Fatal(err)
			}
			defer bufs[r].Free()
		}
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := cu.Capture(streams[r], func() error { return c.AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]) })
				if err != nil {
					t.Errorf("rank %d: capture: %v", r, err)
				}
				graphs[r] = g
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if abort {
			for r, c := range comms {
				if err := c.Abort(); err != nil {
					t.Fatalf("rank %d: Abort with a live graph: %v", r, err)
				}
				<-c.Done()
				if err := graphs[r].Launch(streams[r]); !errors.Is(err, nccl.ErrClosed) || !strings.Contains(err.Error(), "destroyed by an Abort") {
					t.Errorf("rank %d: Launch after Abort: %v; want ErrClosed saying the Abort destroyed it", r, err)
				}
				if err := graphs[r].Destroy(); !errors.Is(err, nccl.ErrClosed) {
					t.Errorf("rank %d: Destroy after Abort: %v", r, err)
				}
			}
			continue
		}
		for r, c := range comms {
			err := c.Close(ctx)
			if !errors.Is(err, nccl.ErrGraphsAlive) {
				t.Fatalf("rank %d: Close with a live graph: %v", r, err)
			}
			t.Log(err)
		}
		// Still usable: the graphs replay.
		for r, g := range graphs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := g.Launch(streams[r]); err != nil {
					t.Errorf("rank %d: Launch after the refused Close: %v", r, err)
				}
				if err := streams[r].Synchronize(); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}()
		}
		wg.Wait()
		for r, g := range graphs {
			if err := g.Destroy(); err != nil {
				t.Fatal(err)
			}
			if err := comms[r].Close(ctx); err != nil {
				t.Fatalf("rank %d: Close after Destroy: %v", r, err)
			}
		}
	}
}

// TestDroppedCommDoesNotCrash: a communicator made with a Config and dropped
// without Close (here because a graph held it and Close refused) is collected
// without a crash: its config memory is not Go memory under a runtime.Pinner,
// whose collection while pinned panics the program.
func TestDroppedCommDoesNotCrash(t *testing.T) {
	func() {
		l := open(t, "v230")
		cfg := &nccl.Config{CommName: "dropped"}
		comms := initComms(t, l, 1, context.Background(), cfg)
		cu := l.CUDA()
		s, err := cu.NewStream(0, nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		buf, err := cu.Alloc(0, nccl.Float32, 8)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cu.Capture(s, func() error { return comms[0].AllReduce(buf, buf, nccl.Sum, s) })
		if err != nil {
			t.Fatal(err)
		}
		if err := comms[0].Close(context.Background()); !errors.Is(err, nccl.ErrGraphsAlive) {
			t.Fatalf("Close: %v", err)
		}
		_ = g // dropped, with the communicator and the library
	}()
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// heldCapture makes one communicator and starts a capture on another
// goroutine that records an all-reduce of it and then stays open; it returns
// once the operation is recorded. finish lets the capture end and returns
// what EndCapture gave.
func heldCapture(t *testing.T, l *nccl.Library) (c *nccl.Comm, finish func() (*nccl.Graph, error)) {
	t.Helper()
	cu := l.CUDA()
	c = initComms(t, l, 1, context.Background(), nil)[0]
	s, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	buf, _ := cu.Alloc(0, nccl.Float32, 8)
	captured, end, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var g *nccl.Graph
	var gerr error
	go func() {
		defer close(done)
		g, gerr = cu.Capture(s, func() error {
			if err := c.AllReduce(buf, buf, nccl.Sum, s); err != nil {
				return err
			}
			close(captured)
			<-end
			return nil
		})
	}()
	<-captured
	return c, func() (*nccl.Graph, error) {
		close(end)
		<-done
		return g, gerr
	}
}

// TestCloseDuringOpenCapture: Close while another goroutine's capture holds
// the communicator's operation refuses (ErrGraphsAlive) instead of waiting in
// NCCL for a graph that does not exist yet.
func TestCloseDuringOpenCapture(t *testing.T) {
	c, finish := heldCapture(t, open(t, "v230"))
	closeRes := make(chan error, 1)
	go func() { closeRes <- c.Close(context.Background()) }()
	select {
	case err := <-closeRes:
		if !errors.Is(err, nccl.ErrGraphsAlive) {
			t.Errorf("Close during an open capture: %v, want ErrGraphsAlive", err)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("Close during an open capture: still blocked after 2s (NCCL waits for the capture's graph)")
	}
	g, gerr := finish()
	if g == nil || gerr != nil {
		t.Fatalf("EndCapture: %v, %v", g, gerr)
	}
	if err := c.Close(context.Background()); !errors.Is(err, nccl.ErrGraphsAlive) {
		t.Errorf("Close with the graph alive: %v, want ErrGraphsAlive", err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("Close after Destroy: %v", err)
	}
}

// TestAbortDuringOpenCapture: Abort while a capture holds the communicator
// returns once the capture ends: EndCapture destroys the graph of the aborted
// communicator and says so.
func TestAbortDuringOpenCapture(t *testing.T) {
	c, finish := heldCapture(t, open(t, "v230"))
	ab := make(chan error, 1)
	go func() { ab <- c.Abort() }()
	select {
	case err := <-ab: // the fake, as NCCL, waits in ncclCommAbort for the capture's graph
		t.Errorf("Abort returned during the open capture: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if g, gerr := finish(); g != nil || !errors.Is(gerr, nccl.ErrClosed) {
		t.Errorf("EndCapture after Abort: %v, %v; want no graph and ErrClosed", g, gerr)
	}
	select {
	case err := <-ab:
		if err != nil {
			t.Errorf("Abort: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("Abort still blocked 3s after EndCapture")
	}
}
