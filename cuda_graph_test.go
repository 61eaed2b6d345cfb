package nccl_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/ccall"
)

// graphSetup is a non-blocking stream and two byte buffers on device 0.
func graphSetup(t *testing.T, flags nccl.StreamFlags) (*nccl.CUDA, nccl.Stream, nccl.Buffer, nccl.Buffer) {
	t.Helper()
	cu := open(t, "default").CUDA()
	s, err := cu.NewStream(0, flags)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cu.Alloc(0, nccl.Uint8, 256)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cu.Alloc(0, nccl.Uint8, 256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Destroy()
		a.Free()
		b.Free()
	})
	return cu, s, a, b
}

// syncRead waits for s, then reads all of b.
func syncRead(t *testing.T, s nccl.Stream, b nccl.Buffer) []byte {
	t.Helper()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, b.Size())
	if err := b.ReadBytes(got); err != nil {
		t.Fatal(err)
	}
	return got
}

// memsetCopyGraph is graphSetup's stream and buffers with memsetCopyRecord
// captured into a graph (its event destroyed at the test's end).
func memsetCopyGraph(t *testing.T) (*nccl.CUDA, nccl.Stream, nccl.Buffer, nccl.Buffer, *nccl.Graph) {
	t.Helper()
	cu, s, a, b := graphSetup(t, nccl.StreamNonBlocking)
	e, err := cu.NewEvent(0, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Destroy() })
	g, err := cu.Capture(s, func() error { return memsetCopyRecord(cu, s, a, b, e) })
	if err != nil {
		t.Fatal(err)
	}
	return cu, s, a, b, g
}

// memsetCopyRecord enqueues on s a memset of b to 7, a copy of a's first 128
// bytes over b's, and a record of e: the work the capture tests capture.
func memsetCopyRecord(cu *nccl.CUDA, s nccl.Stream, a, b nccl.Buffer, e nccl.Event) error {
	if err := b.MemsetAsync(7, s); err != nil {
		return err
	}
	if err := cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 128, s); err != nil {
		return err
	}
	return e.Record(s)
}

func liveGraphs(t *testing.T, cu *nccl.CUDA) int {
	return int(ccall.Call(cudaFn(t, cu, "fakecuda_live_graphs")))
}

// TestCaptureReplay: work enqueued during a capture does not run; each launch
// of the graph runs it afresh, reading the source as it is at launch time, in
// order (a memset, then a copy over half of it), byte for byte; an event
// recorded in the capture completes with each launch.
func TestCaptureReplay(t *testing.T) {
	cu, s, a, b := graphSetup(t, nccl.StreamNonBlocking)
	before := liveGraphs(t, cu)
	e, err := cu.NewEvent(0, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	if err := a.WriteBytes(bytes.Repeat([]byte{1}, 256)); err != nil {
		t.Fatal(err)
	}
	g, err := cu.Capture(s, func() error {
		if st, err := s.Capturing(); err != nil || st != nccl.CaptureActive {
			t.Errorf("Capturing inside the capture = %v, %v", st, err)
		}
		return memsetCopyRecord(cu, s, a, b, e)
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.Capturing(); err != nil || st != nccl.CaptureNone {
		t.Errorf("Capturing after the capture = %v, %v", st, err)
	}
	if got := liveGraphs(t, cu); got != before+2 {
		t.Errorf("live graphs %d, want %d (graph and executable)", got, before+2)
	}
	// Nothing ran during the capture.
	got := syncRead(t, s, b)
	if !bytes.Equal(got, make([]byte, 256)) {
		t.Fatalf("captured work ran during the capture: % x", got[:16])
	}
	for launch := range 3 {
		src := make([]byte, 256)
		for i := range src {
			src[i] = byte(launch*31 + i)
		}
		if err := a.WriteBytes(src); err != nil {
			t.Fatal(err)
		}
		if err := b.Memset(0); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := e.Synchronize(); err != nil { // the captured record, replayed
			t.Fatal(err)
		}
		if err := b.ReadBytes(got); err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte{}, src[:128]...), bytes.Repeat([]byte{7}, 128)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("launch %d: got % x..., want % x...", launch, got[120:136], want[120:136])
		}
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := g.Destroy(); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("second Destroy: %v", err)
	}
	if err := g.Launch(s); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("Launch after Destroy: %v", err)
	}
	if got := liveGraphs(t, cu); got != before {
		t.Errorf("live graphs %d after Destroy, want %d", got, before)
	}
}

// TestGraphWriteDot: WriteDot writes the captured nodes in order, with their
// parameters when verbose; a path CUDA cannot write is its error, a path
// with a NUL byte or none an invalid argument, and a destroyed or zero graph
// ErrClosed.
func TestGraphWriteDot(t *testing.T) {
	_, _, _, _, g := memsetCopyGraph(t)
	dir := t.TempDir()
	for _, verbose := range []bool{false, true} {
		path := filepath.Join(dir, fmt.Sprintf("graph-%v.dot", verbose))
		if err := g.WriteDot(path, verbose); err != nil {
			t.Fatal(err)
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dot := string(text)
		for _, want := range []string{"digraph", "0: MEMSET", "1: MEMCPY", "2: EVENT_RECORD", `"node0" -> "node1"`, `"node1" -> "node2"`} {
			if !strings.Contains(dot, want) {
				t.Errorf("verbose %v: no %q in\n%s", verbose, want, dot)
			}
		}
		if got := strings.Contains(dot, "128 bytes"); got != verbose {
			t.Errorf("verbose %v: the copy's size in the text: %v\n%s", verbose, got, dot)
		}
	}
	var ce *nccl.CUDAError
	if err := g.WriteDot(filepath.Join(dir, "no-such-dir", "g.dot"), false); !errors.As(err, &ce) || ce.Code != 304 {
		t.Errorf("WriteDot into a missing folder: %v, want CUDA's cudaErrorOperatingSystem", err)
	}
	for _, bad := range []string{"", "a\x00b"} {
		if err := g.WriteDot(bad, false); !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("WriteDot(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteDot(filepath.Join(dir, "late.dot"), false); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("WriteDot after Destroy: %v, want ErrClosed", err)
	}
	if err := (&nccl.Graph{}).WriteDot(filepath.Join(dir, "zero.dot"), false); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("WriteDot of the zero Graph: %v, want ErrClosed", err)
	}
}

// TestGraphUpload: Upload takes a graph's stream on its device, runs none of
// its work, and leaves later launches as they were: each replays the capture
// once, checked in every byte. A stream of another device is an invalid
// argument, a destroyed stream and a destroyed or zero graph ErrClosed.
func TestGraphUpload(t *testing.T) {
	cu, s, a, b, g := memsetCopyGraph(t)
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i*13 + 5)
	}
	if err := a.WriteBytes(src); err != nil {
		t.Fatal(err)
	}
	if err := b.Memset(0); err != nil {
		t.Fatal(err)
	}
	for range 2 { // uploads of the same graph are allowed, and run nothing
		if err := g.Upload(s); err != nil {
			t.Fatal(err)
		}
	}
	got := syncRead(t, s, b)
	if !bytes.Equal(got, make([]byte, 256)) {
		t.Fatalf("Upload ran the graph's work: % x...", got[:16])
	}
	if err := g.Launch(s); err != nil {
		t.Fatal(err)
	}
	got = syncRead(t, s, b)
	want := append(append([]byte{}, src[:128]...), bytes.Repeat([]byte{7}, 128)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("launch after Upload: got % x..., want % x...", got[120:136], want[120:136])
	}
	other, err := cu.NewStream(1, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Upload(other); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Upload on a stream of device 1: %v, want ErrInvalidArgument", err)
	}
	if err := other.Destroy(); err != nil {
		t.Fatal(err)
	}
	gone, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := g.Upload(gone); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("Upload on a destroyed stream: %v, want ErrClosed", err)
	}
	if n := testing.AllocsPerRun(100, func() { g.Upload(s) }); n != 0 {
		t.Errorf("%v allocations per Upload", n)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := g.Upload(s); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("Upload after Destroy: %v, want ErrClosed", err)
	}
	if err := (&nccl.Graph{}).Upload(s); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("Upload of the zero Graph: %v, want ErrClosed", err)
	}
}

// TestCaptureRefusesBreakingCalls: while a capture is open, gonccl refuses the
// calls that would break it with a *CaptureError (ErrCapturing) before CUDA
// sees them, so the capture survives and its graph replays correctly; other
// goroutines and other devices go on.
func TestCaptureRefusesBreakingCalls(t *testing.T) {
	cu, s, a, b := graphSetup(t, nccl.StreamNonBlocking)
	other, err := cu.Alloc(1, nccl.Float32, 4) // device 1: not capturing
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	e, err := cu.NewEvent(0, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	host := make([]uint8, 4)
	var x nccl.Buffer // allocated by another goroutine during the capture
	defer func() {
		if err := x.Free(); err != nil {
			t.Error(err)
		}
	}()
	g, err := cu.Capture(s, func() error {
		if err := cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 256, s); err != nil {
			return err
		}
		if err := e.Record(s); err != nil {
			return err
		}
		refused := map[string]error{
			"Stream.Synchronize":        s.Synchronize(),
			"Stream.Destroy":            s.Destroy(),
			"legacy Synchronize":        cu.DefaultStream(0).Synchronize(),
			"DeviceSynchronize":         cu.DeviceSynchronize(0),
			"WriteBytes":                b.WriteBytes([]byte{1}),
			"ReadBytes":                 b.ReadBytes(make([]byte, 1)),
			"Memset":                    b.Memset(0),
			"CopyIn":                    nccl.CopyIn(b, host),
			"CopyOut":                   nccl.CopyOut(host, b),
			"Free":                      a.Free(),
			"Event.Synchronize":         e.Synchronize(),
			"Alloc on the capturing g.": func() error { _, err := cu.Alloc(1, nccl.Uint8, 1); return err }(),
			"MallocHost":                func() error { _, err := cu.MallocHost(64); return err }(),
			"MallocAsync":               func() error { _, err := cu.MallocAsync(nccl.Uint8, 1, s); return err }(),
		}
		_, qerr := s.Query()
		refused["Stream.Query"] = qerr
		_, qerr = e.Query()
		refused["Event.Query"] = qerr
		for name, err := range refused {
			var ce *nccl.CaptureError
			if !errors.Is(err, nccl.ErrCapturing) || !errors.As(err, &ce) || ce.CUDA != nil {
				t.Errorf("%s during the capture: %v, want gonccl's refusal (ErrCapturing)", name, err)
			} else if ce.Stream != s.Handle() || ce.Device != 0 {
				t.Errorf("%s: %+v does not name the capturing stream", name, ce)
			}
		}
		// Another goroutine, and another device, go on: a thread-local
		// capture forbids nothing to other threads.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			x, err = cu.Alloc(0, nccl.Uint8, 8)
			if err != nil {
				t.Errorf("Alloc on another goroutine during the capture: %v", err)
				return
			}
			if err := nccl.CopyIn(other, []float32{1, 2, 3, 4}); err != nil {
				t.Errorf("CopyIn on device 1 during the capture: %v", err)
			}
			// x is device 0's: its Free waits for the device, refused.
			if err := x.Free(); !errors.Is(err, nccl.ErrCapturing) {
				t.Errorf("Free of device 0 memory from another goroutine: %v", err)
			}
		}()
		wg.Wait()
		return nil
	})
	if err != nil {
		t.Fatal(err) // the refusals did not invalidate the capture
	}
	defer g.Destroy()
	src := []byte("a graph captured around refused calls still replays")
	if err := a.WriteBytes(src); err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(src))
	if err := b.ReadBytes(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("replay: %q", got)
	}
	if err := e.Synchronize(); err != nil { // a plain event again once the capture ended
		t.Fatal(err)
	}
}

// TestCaptureFakeModelsCUDA: a binding that gets capture wrong hits the fake's
// CUDA codes, each a *CaptureError wrapping the *CUDAError: synchronizing the
// capturing stream (900) invalidates the capture, which then ends with 901;
// cudaMalloc on the capturing thread is 900; legacy-stream work beside a
// capturing blocking stream is 906; a captured event's query is 907.
func TestCaptureFakeModelsCUDA(t *testing.T) {
	code := func(err error) nccl.CUDAErrorCode {
		var ce *nccl.CaptureError
		var cuerr *nccl.CUDAError
		if !errors.As(err, &ce) || ce.CUDA == nil || !errors.As(err, &cuerr) || !errors.Is(err, nccl.ErrCapturing) || !errors.Is(err, nccl.ErrCUDA) {
			t.Fatalf("%v: not CUDA's capture error", err)
		}
		return cuerr.Code
	}
	raw := func(cu *nccl.CUDA, name string, args ...uintptr) int32 {
		return int32(ccall.Call(cudaFn(t, cu, name), args...))
	}
	t.Run("unsafe call invalidates", func(t *testing.T) {
		cu, s, _, _ := graphSetup(t, nccl.StreamNonBlocking)
		if err := cu.BeginCapture(s); err != nil {
			t.Fatal(err)
		}
		var p uintptr
		if r := raw(cu, "cudaMalloc", uintptr(unsafe.Pointer(&p)), 16); r != 900 {
			t.Errorf("cudaMalloc on the capturing thread = %d, want 900", r)
		}
		if r := raw(cu, "cudaStreamSynchronize", s.Handle()); r != 900 {
			t.Errorf("cudaStreamSynchronize on the capturing stream = %d, want 900", r)
		}
		if st, err := s.Capturing(); err != nil || st != nccl.CaptureInvalidated {
			t.Errorf("status %v, %v; want invalidated", st, err)
		}
		g, err := cu.EndCapture(s)
		if g != nil || code(err) != nccl.CUDAErrorStreamCaptureInvalidated {
			t.Fatalf("EndCapture of an invalidated capture: %v, %v", g, err)
		}
		if st, err := s.Capturing(); err != nil || st != nccl.CaptureNone {
			t.Errorf("status after the end %v, %v", st, err)
		}
	})
	t.Run("legacy stream beside a blocking capture", func(t *testing.T) {
		cu, s, _, b := graphSetup(t, nccl.StreamDefault)
		_, err := cu.Capture(s, func() error {
			if st, err := cu.DefaultStream(0).Capturing(); code(err) != nccl.CUDAErrorStreamCaptureImplicit {
				t.Errorf("legacy stream's status beside the capture: %v, %v", st, err)
			}
			return b.MemsetAsync(1, cu.DefaultStream(0)) // not refused by gonccl: CUDA's 906
		})
		if code(err) != nccl.CUDAErrorStreamCaptureImplicit {
			t.Fatalf("MemsetAsync on the legacy stream: %v", err)
		}
	})
	t.Run("captured event", func(t *testing.T) {
		cu, s, _, _ := graphSetup(t, nccl.StreamNonBlocking)
		e, err := cu.NewEvent(0, nccl.EventDefault)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Destroy()
		g, err := cu.Capture(s, func() error {
			if err := e.Record(s); err != nil {
				return err
			}
			if r := raw(cu, "cudaEventQuery", e.Handle()); r != 907 {
				t.Errorf("cudaEventQuery of a captured event = %d, want 907", r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		g.Destroy()
	})
	t.Run("end on another goroutine", func(t *testing.T) {
		cu, s, _, _ := graphSetup(t, nccl.StreamNonBlocking)
		if err := cu.BeginCapture(s); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error)
		go func() { _, err := cu.EndCapture(s); errc <- err }()
		var ce *nccl.CaptureError
		if err := <-errc; !errors.As(err, &ce) || ce.CUDA != nil {
			t.Errorf("EndCapture on another goroutine: %v, want gonccl's refusal", err)
		}
		if st, _ := s.Capturing(); st != nccl.CaptureActive {
			t.Errorf("the capture did not survive: %v", st)
		}
		g, err := cu.EndCapture(s)
		if err != nil {
			t.Fatal(err)
		}
		g.Destroy()
	})
}

// TestCaptureErrors: argument checks, a failing or panicking fn discards the
// capture, and a capture can follow.
func TestCaptureErrors(t *testing.T) {
	cu, s, _, b := graphSetup(t, nccl.StreamNonBlocking)
	if _, err := cu.Capture(cu.DefaultStream(0), func() error { return nil }); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("capture of the legacy stream: %v", err)
	}
	if _, err := cu.Capture(nccl.Stream{}, func() error { return nil }); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("capture of the zero Stream: %v", err)
	}
	if _, err := cu.EndCapture(s); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("EndCapture without a capture: %v", err)
	}
	boom := errors.New("boom")
	if g, err := cu.Capture(s, func() error { b.MemsetAsync(1, s); return boom }); g != nil || err != boom {
		t.Errorf("failing fn: %v, %v", g, err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		cu.Capture(s, func() error { panic("boom") })
	}()
	if st, err := s.Capturing(); err != nil || st != nccl.CaptureNone {
		t.Fatalf("after a failed and a panicking capture: %v, %v", st, err)
	}
	if err := s.Synchronize(); err != nil { // not refused: no capture open
		t.Fatal(err)
	}
	g, err := cu.Capture(s, func() error { return nil }) // an empty graph
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	s1, err := cu.NewStream(1, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Destroy()
	if err := g.Launch(s1); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("launch on another device's stream: %v", err)
	}
	if err := g.Launch(cu.DefaultStream(0)); err != nil {
		t.Errorf("launch on the legacy stream: %v", err)
	}
}

// TestGraphLaunchAllocs: the hot path (launch, and an event record once a
// capture exists elsewhere or not) allocates nothing.
func TestGraphLaunchAllocs(t *testing.T) {
	cu, s, a, b := graphSetup(t, nccl.StreamNonBlocking)
	g, err := cu.Capture(s, func() error { return cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), 16, s) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	e, err := cu.NewEvent(0, nccl.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	if n := testing.AllocsPerRun(100, func() {
		g.Launch(s)
		e.Record(s)
		b.MemsetAsync(0, s)
	}); n != 0 {
		t.Errorf("%v allocations per launch, record and memset", n)
	}
	s.Synchronize()
}

// TestZeroGraph: the zero Graph's Launch panicked (a nil *Graph got an
// argument error). Both count as destroyed graphs, as the zero Comm counts as
// a closed communicator.
func TestZeroGraph(t *testing.T) {
	l := open(t, "default")
	s, err := l.CUDA().NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	for _, g := range []*nccl.Graph{new(nccl.Graph), nil} {
		if err := g.Launch(s); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("Launch of %v: %v, want an error matching ErrClosed", g, err)
		}
		if err := g.Destroy(); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("Destroy of %v: %v, want an error matching ErrClosed", g, err)
		}
		if g.Handle() != 0 || g.Device() != 0 {
			t.Errorf("accessors of %v: %#x, %d", g, g.Handle(), g.Device())
		}
	}
}
