package nccl_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestCloseDuringOpenCapture: Close while another goroutine's capture holds
// the communicator's operation refuses (ErrGraphsAlive) instead of waiting in
// NCCL for a graph that does not exist yet.
func TestCloseDuringOpenCapture(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	comms := initComms(t, l, 1, context.Background(), nil)
	c := comms[0]
	s, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	buf, _ := cu.Alloc(0, nccl.Float32, 8)
	captured := make(chan struct{})
	end := make(chan struct{})
	var g *nccl.Graph
	var gerr error
	done := make(chan struct{})
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
	close(end)
	<-done
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
	l := open(t, "v230")
	cu := l.CUDA()
	comms := initComms(t, l, 1, context.Background(), nil)
	c := comms[0]
	s, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	buf, _ := cu.Alloc(0, nccl.Float32, 8)
	captured := make(chan struct{})
	end := make(chan struct{})
	var g *nccl.Graph
	var gerr error
	done := make(chan struct{})
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
	ab := make(chan error, 1)
	go func() { ab <- c.Abort() }()
	select {
	case err := <-ab: // the fake, as NCCL, waits in ncclCommAbort for the capture's graph
		t.Errorf("Abort returned during the open capture: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(end)
	<-done
	if g != nil || !errors.Is(gerr, nccl.ErrClosed) {
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

// device's legacy stream (0), so DefaultStream(1).Synchronize does not wait for it.
func TestAsyncCopyOnAnotherDevicesLegacyStream(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	b, err := cu.Alloc(1, nccl.Float32, 1024)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]float32, 1024)
	for i := range src {
		src[i] = 5
	}
	if err := nccl.CopyIn(b, src); err != nil {
		t.Fatal(err)
	}
	host, err := nccl.MallocHostOf[float32](cu, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer nccl.FreeHostOf(cu, host)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := cu.DefaultStream(1)
	if err := nccl.CopyOutAsync(host, b, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if host[1023] != 5 {
		t.Errorf("after DefaultStream(1).Synchronize the copy has not landed (host[1023]=%v): it went to device 0's legacy stream", host[1023])
	}
}

// TestConcurrentWaitsRevokeOnce: two Waits reaching one deadline under
// RevokeOnDeadline revoke once; neither aborts the communicator.
func TestConcurrentWaitsRevokeOnce(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	aborted := 0
	for iter := 0; iter < 20; iter++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		comms := initComms(t, l, 2, ctx, nil)
		c := comms[0]
		c.SetDeadlineAction(nccl.RevokeOnDeadline)
		bufs := make([]nccl.Buffer, 2)
		ss := make([]nccl.Stream, 2)
		for r, cc := range comms {
			bufs[r], _ = cu.Alloc(cc.Device(), nccl.Float32, 8)
			ss[r], _ = cu.NewStream(cc.Device(), nccl.StreamNonBlocking)
		}
		var wg sync.WaitGroup
		for r, cc := range comms {
			wg.Add(1)
			go func() { defer wg.Done(); cc.AllReduce(bufs[r], bufs[r], nccl.Sum, ss[r]); cc.Wait(ctx, ss[r]) }()
		}
		wg.Wait()
		s2, _ := cu.NewStream(0, nccl.StreamNonBlocking)
		c.AllReduce(bufs[0], bufs[0], nccl.Sum, ss[0])
		c.AllReduce(bufs[0], bufs[0], nccl.Sum, s2)
		wctx, wc := context.WithTimeout(context.Background(), 100*time.Millisecond)
		errs := make([]error, 2)
		for i, s := range []nccl.Stream{ss[0], s2} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = c.Wait(wctx, s) }()
		}
		wg.Wait()
		wc()
		select {
		case <-c.Done():
			aborted++
			if aborted == 1 {
				t.Logf("iter %d: aborted: %v | %v", iter, errs[0], errs[1])
			}
		default:
			if iter == 0 {
				t.Logf("iter %d: alive: %v | %v", iter, errs[0], errs[1])
			}
			c.Abort()
		}
		comms[1].Abort()
		cancel()
	}
	if aborted > 0 {
		t.Errorf("%d of 20: RevokeOnDeadline communicator aborted because two Waits revoked it at once", aborted)
	}
}

// TestWaitAfterRevokeFails: a Wait whose work a revoke stopped reports
// ErrRevoked instead of success.
func TestWaitAfterRevokeFails(t *testing.T) {
	l := open(t, "v230")
	cu := l.CUDA()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := initComms(t, l, 2, ctx, nil)
	defer comms[1].Abort()
	defer comms[0].Abort()
	c := comms[0]
	bufs := make([]nccl.Buffer, 2)
	ss := make([]nccl.Stream, 2)
	for r, cc := range comms {
		bufs[r], _ = cu.Alloc(cc.Device(), nccl.Float32, 8)
		ss[r], _ = cu.NewStream(cc.Device(), nccl.StreamNonBlocking)
	}
	var wg sync.WaitGroup
	for r, cc := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); cc.AllReduce(bufs[r], bufs[r], nccl.Sum, ss[r]); cc.Wait(ctx, ss[r]) }()
	}
	wg.Wait()
	c.AllReduce(bufs[0], bufs[0], nccl.Sum, ss[0]) // peer never comes
	c.SetDeadlineAction(nccl.RevokeOnDeadline)
	wctx, wc := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer wc()
	s2, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	_ = s2
	done := make(chan error)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done <- c.Revoke(context.Background()) // e.g. the watchdog, or another Wait's deadline
	}()
	err := c.Wait(wctx, ss[0])
	t.Logf("Revoke: %v", <-done)
	t.Logf("Wait on the stream whose all-reduce was revoked: %v; AsyncError=%v", err, c.AsyncError())
	if !errors.Is(err, nccl.ErrRevoked) {
		t.Errorf("Wait: %v, want ErrRevoked (the all-reduce never completed: the communicator was revoked)", err)
	}
}
