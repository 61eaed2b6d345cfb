package nccl_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gonccl/nccl"
)

// Streams used after Destroy: no call passes a destroyed stream's handle to
// CUDA again.

// TestStreamDestroyTwice: a second Destroy reached CUDA with a dead handle
// (undefined on a real GPU: CUDA may have handed it to a new stream). Every
// copy of the Stream now knows it was destroyed.
func TestStreamDestroyTwice(t *testing.T) {
	l := open(t, "default")
	for _, mk := range []func() (nccl.Stream, error){
		func() (nccl.Stream, error) { return l.CUDA().NewStream(0, nccl.StreamNonBlocking) },
		func() (nccl.Stream, error) { return l.CUDA().NewStreamWithPriority(0, nccl.StreamNonBlocking, 0) },
	} {
		s, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		cp := s
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := s.Destroy(); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("second Destroy: %v, want an error matching ErrClosed", err)
		}
		if err := cp.Destroy(); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("Destroy of a copy: %v, want an error matching ErrClosed", err)
		}
	}
}

// TestDestroyedStreamRefused: after Destroy, no call passes the stream's
// handle to CUDA (which may give it to a new stream; on a GPU its use is
// undefined): the stream's own methods, copies and memsets on it, operations,
// Wait and graph launches all return an error matching ErrClosed, through any
// copy of the Stream. Before, Synchronize and MemsetAsync reached CUDA.
func TestDestroyedStreamRefused(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	comm := initComms(t, l, 1, context.Background(), nil)[0]
	defer comm.Close(context.Background())
	b, err := cu.Alloc(0, nccl.Float32, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	live, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Destroy()
	g, err := cu.Capture(live, func() error { return b.MemsetAsync(1, live) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	cp := s
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	ev, err := cu.NewEvent(0, nccl.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	host := make([]float32, 64)
	for name, call := range map[string]func() error{
		"Synchronize":  cp.Synchronize,
		"Query":        func() error { _, err := cp.Query(); return err },
		"Wait(event)":  func() error { return cp.Wait(ev) },
		"Record":       func() error { return ev.Record(cp) },
		"MemsetAsync":  func() error { return b.MemsetAsync(0, cp) },
		"CopyInAsync":  func() error { return nccl.CopyInAsync(b, host, cp) },
		"CopyOutAsync": func() error { return nccl.CopyOutAsync(host, b, cp) },
		"CopyAsync":    func() error { return nccl.CopyAsync(b, b, cp) },
		"AllReduce":    func() error { return comm.AllReduce(b, b, nccl.Sum, cp) },
		"Broadcast":    func() error { return comm.Broadcast(b, b, 0, cp) },
		"Comm.Wait":    func() error { return comm.Wait(context.Background(), cp) },
		"Graph.Launch": func() error { return g.Launch(cp) },
		"BeginCapture": func() error { return cu.BeginCapture(cp) },
		"After":        func() error { return cp.After(live) },
		"After(dead)":  func() error { return live.After(cp) },
		"MallocAsync":  func() error { _, err := cu.MallocAsync(nccl.Float32, 8, cp); return err },
		"MemcpyAsync":  func() error { return cu.MemcpyAsync(uintptr(b.Ptr()), uintptr(b.Ptr()), 4, cp) },
		"Send":         func() error { return comm.Send(b, 0, cp) },
	} {
		if err := call(); !errors.Is(err, nccl.ErrClosed) {
			t.Errorf("%s on a destroyed stream: %v, want an error matching ErrClosed", name, err)
		}
	}
}
