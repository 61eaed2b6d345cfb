package nccl

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// TestGraphsUnsupported: a runtime without the graph functions (older than
// CUDA 11.4, or a stripped build) gives an *UnsupportedError naming the
// function, before any capture starts; so does one without stream-ordered
// allocation.
func TestGraphsUnsupported(t *testing.T) {
	cu, err := OpenCUDA(WithCUDARuntime(FakeCUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	if !cu.HasGraphs() {
		t.Fatal("the fake runtime has graphs")
	}
	s, err := cu.NewStream(0, StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	cu.rt.Fn[capi.CuGraphInstantiateWithFlags] = 0
	cu.rt.Fn[capi.CuStreamIsCapturing] = 0
	cu.rt.Fn[capi.CuMallocAsync] = 0
	if cu.HasGraphs() {
		t.Error("HasGraphs without cudaGraphInstantiateWithFlags")
	}
	_, err = cu.Capture(s, func() error { t.Error("fn ran"); return nil })
	var ue *UnsupportedError
	if !errors.Is(err, ErrNotSupported) || !errors.As(err, &ue) || ue.Name != "cudaGraphInstantiateWithFlags" || ue.Requires != "CUDA >= 11.4" {
		t.Fatalf("Capture without cudaGraphInstantiateWithFlags: %v", err)
	}
	t.Log(err)
	if st, err := s.Capturing(); !errors.Is(err, ErrNotSupported) || st != CaptureNone {
		t.Errorf("Capturing without cudaStreamIsCapturing: %v, %v", st, err)
	}
	if _, err := cu.MallocAsync(Uint8, 1, s); !errors.As(err, &ue) || ue.Name != "cudaMallocAsync" || ue.Requires != "CUDA >= 11.2" {
		t.Errorf("MallocAsync without cudaMallocAsync: %v", err)
	}
	if cu.capt.n.Load() != 0 {
		t.Error("a capture was left open")
	}
}

// recordedGraph is a graph of one event record on a stream of device 0 of the
// fake runtime, opened alone; the test's cleanup destroys all three.
func recordedGraph(t *testing.T) (*CUDA, Stream, *Graph) {
	t.Helper()
	cu, err := OpenCUDA(WithCUDARuntime(FakeCUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cu.NewStream(0, StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	e, err := cu.NewEvent(0, EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Destroy() })
	g, err := cu.Capture(s, func() error { return e.Record(s) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Destroy() })
	return cu, s, g
}

// TestWriteDotUnsupported: a runtime without cudaGraphDebugDotPrint (older
// than CUDA 11.3) gives an *UnsupportedError naming it.
func TestWriteDotUnsupported(t *testing.T) {
	cu, _, g := recordedGraph(t)
	cu.rt.Fn[capi.CuGraphDebugDotPrint] = 0
	var ue *UnsupportedError
	if err := g.WriteDot(t.TempDir()+"/g.dot", false); !errors.As(err, &ue) || ue.Name != "cudaGraphDebugDotPrint" || ue.Requires != "CUDA >= 11.3" {
		t.Fatalf("WriteDot without cudaGraphDebugDotPrint: %v", err)
	}
}

// TestForeignCaptureHint: a capture gonccl did not begin (another library's,
// begun here by a direct cudaStreamBeginCapture) gets no relaxed thread, so
// the ranks' first operations, which connect inside NCCL on the capturing
// thread, fail as NCCL's do ("failed to peer ... when stream is capturing"):
// the error matches ErrCapturing, keeps NCCL's code and text, and says what
// to do. The same operations under CUDA.Capture connect (TestFakeGraphAllReduce).
func TestForeignCaptureHint(t *testing.T) {
	l, err := Open(WithLibrary(FakeNCCL(t, "default")), WithCUDARuntime(FakeCUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	comms, err := l.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cu := l.CUDA()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := cu.NewStream(r, StreamNonBlocking)
			if err != nil {
				errs[r] = err
				return
			}
			defer s.Destroy()
			buf, err := cu.Alloc(r, Float32, 8)
			if err != nil {
				errs[r] = err
				return
			}
			defer buf.Free()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := cu.rt.StreamBeginCapture(s.h, captureModeThreadLocal); err != nil {
				errs[r] = err
				return
			}
			errs[r] = c.AllReduce(buf, buf, Sum, s)
			var g uintptr
			_ = cu.rt.StreamEndCapture(s.h, &g) // invalidated: no graph
			if g != 0 {
				_ = cu.rt.GraphDestroy(g)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		var ne *Error
		if !errors.Is(err, ErrCapturing) || !errors.As(err, &ne) || ne.Code != abi.InternalError ||
			!strings.Contains(ne.Msg, "failed to peer") || !strings.Contains(ne.Msg, "capture with CUDA.Capture") {
			t.Errorf("rank %d: %v: want NCCL's internal error matching ErrCapturing, with the hint", r, err)
		}
		if errors.Is(err, ErrInvalidUsage) || !errors.Is(err, ErrInternal) {
			t.Errorf("rank %d: %v: the code's own sentinel is kept", r, err)
		}
	}
	for _, c := range comms {
		c.Abort()
	}
}

// TestUploadUnsupported: a runtime without cudaGraphUpload (older than CUDA
// 11.1) gives an *UnsupportedError naming it; Launch is unaffected.
func TestUploadUnsupported(t *testing.T) {
	cu, s, g := recordedGraph(t)
	cu.rt.Fn[capi.CuGraphUpload] = 0
	var ue *UnsupportedError
	if err := g.Upload(s); !errors.As(err, &ue) || ue.Name != "cudaGraphUpload" || ue.Requires != "CUDA >= 11.1" {
		t.Fatalf("Upload without cudaGraphUpload: %v", err)
	}
	if err := g.Launch(s); err != nil {
		t.Fatalf("Launch without cudaGraphUpload: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
