package nccl

import (
	"errors"
	"testing"
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
	cu.fn[cuGraphInstantiateWithFlags] = 0
	cu.fn[cuStreamIsCapturing] = 0
	cu.fn[cuMallocAsync] = 0
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
