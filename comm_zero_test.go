package nccl_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/gonccl/nccl"
)

// TestZeroComm: the zero Comm (and a nil *Comm) is not a communicator gonccl
// made. The rule: it is a closed one. Every method that returns an error
// returns one matching ErrClosed, none panics, Done is closed, the accessors
// give zero values. Before, AllReduce, Close and Split panicked, Abort
// returned nil and Done never closed.
func TestZeroComm(t *testing.T) {
	for _, c := range []*nccl.Comm{new(nccl.Comm), nil} {
		name := "the zero Comm"
		if c == nil {
			name = "a nil *Comm"
		}
		v := reflect.ValueOf(c)
		typ := v.Type()
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			args := make([]reflect.Value, m.Type.NumIn()-1)
			for j := range args {
				at := m.Type.In(j + 1)
				args[j] = reflect.Zero(at)
				if at == reflect.TypeFor[context.Context]() {
					args[j] = reflect.ValueOf(context.Background())
				}
			}
			var out []reflect.Value
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s: %s panicked: %v", name, m.Name, p)
					}
				}()
				out = v.Method(i).Call(args)
			}()
			for _, o := range out {
				if o.Type() != reflect.TypeFor[error]() {
					continue
				}
				err, _ := o.Interface().(error)
				if !errors.Is(err, nccl.ErrClosed) {
					t.Errorf("%s: %s returned %v, want an error matching ErrClosed", name, m.Name, err)
				}
			}
		}
		select {
		case <-c.Done():
		default:
			t.Errorf("%s: Done is not closed", name)
		}
		if c.Handle() != 0 || c.Size() != 0 || c.Library() != nil {
			t.Errorf("%s: accessors gave %#x, %d, %v", name, c.Handle(), c.Size(), c.Library())
		}
	}
	if _, err := nccl.PreMulSum(new(nccl.Comm), float32(1)); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("PreMulSum on the zero Comm: %v", err)
	}
}

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
