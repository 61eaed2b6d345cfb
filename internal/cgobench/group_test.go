//go:build cgo

package cgobench

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

// One iteration of a one-thread, two-GPU benchmark (nccl-tests -g 2): a group
// around an operation per GPU, through Library.Group and Comm.AllReduce, and
// as a C program makes it (one cgo call into C that makes all four calls).

type groupSetup struct {
	lib   *nccl.Library
	comms []*nccl.Comm
	buf   [2]nccl.Buffer
	s     [2]nccl.Stream
}

func setupGroup(b *testing.B) groupSetup {
	l, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(b, "default")), nccl.WithCUDARuntime(fakes.CUDART(b)))
	if err != nil {
		b.Fatal(err)
	}
	comms, err := l.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	g := groupSetup{lib: l, comms: comms}
	for i := range 2 {
		buf, err := l.CUDA().Alloc(i, nccl.Float32, 16)
		if err != nil {
			b.Fatal(err)
		}
		g.buf[i] = buf.Slice(0, 0)
		g.s[i], _ = l.CUDA().NewStream(i, nccl.StreamNonBlocking)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Close(context.Background())
		}
	})
	return g
}

func BenchmarkGroupIterationGonccl(b *testing.B) {
	g := setupGroup(b)
	b.ReportAllocs()
	for b.Loop() {
		err := g.lib.Group(func() error {
			for i, c := range g.comms {
				if err := c.AllReduce(g.buf[i], g.buf[i], nccl.Sum, g.s[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGroupIterationCgo(b *testing.B) {
	g := setupGroup(b)
	h, err := purego.Dlopen(filepath.Join(fakes.NCCL(b, "default"), "libnccl.so.2"), purego.RTLD_NOW)
	if err != nil {
		b.Fatal(err)
	}
	sym := func(name string) uintptr {
		f, err := purego.Dlsym(h, name)
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	start, end, ar := sym("ncclGroupStart"), sym("ncclGroupEnd"), sym("ncclAllReduce")
	b.ReportAllocs()
	for b.Loop() {
		if r := GroupIteration(start, end, ar, uintptr(g.buf[0].Ptr()), g.comms[0].Handle(), g.comms[1].Handle(), g.s[0].Handle(), g.s[1].Handle()); r != 0 {
			b.Fatal(r)
		}
	}
}
