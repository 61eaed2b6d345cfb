//go:build cgo

package cgobench

import (
	"context"
	"fmt"
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

// The same iteration with 1, 2, 4 and 8 GPUs: how the host's share grows
// with the GPUs one thread drives (nccl-tests -g N).

var groupSizes = []int{1, 2, 4, 8}

// setupGroupN makes n blocking communicators (InitAll on devices 0..n-1 of
// the fake runtime's 8), an empty buffer and a stream on each.
func setupGroupN(b *testing.B, n int) (*nccl.Library, []*nccl.Comm, []nccl.Buffer, []nccl.Stream) {
	l, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(b, "default")), nccl.WithCUDARuntime(fakes.CUDART(b)))
	if err != nil {
		b.Fatal(err)
	}
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	comms, err := l.InitAll(context.Background(), devs, nil)
	if err != nil {
		b.Fatal(err)
	}
	bufs := make([]nccl.Buffer, n)
	streams := make([]nccl.Stream, n)
	for i := range n {
		buf, err := l.CUDA().Alloc(i, nccl.Float32, 16)
		if err != nil {
			b.Fatal(err)
		}
		bufs[i] = buf.Slice(0, 0)
		if streams[i], err = l.CUDA().NewStream(i, nccl.StreamNonBlocking); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Close(context.Background())
		}
	})
	return l, comms, bufs, streams
}

func BenchmarkGroupScalingGonccl(b *testing.B) {
	for _, n := range groupSizes {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			l, comms, bufs, streams := setupGroupN(b, n)
			b.ReportAllocs()
			for b.Loop() {
				err := l.Group(func() error {
					for i, c := range comms {
						if err := c.AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGroupScalingCgo(b *testing.B) {
	for _, n := range groupSizes {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			_, comms, bufs, streams := setupGroupN(b, n)
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
			hs, ss := make([]uintptr, n), make([]uintptr, n)
			for i := range n {
				hs[i], ss[i] = comms[i].Handle(), streams[i].Handle()
			}
			b.ReportAllocs()
			for b.Loop() {
				if r := GroupIterationN(start, end, ar, uintptr(bufs[0].Ptr()), hs, ss); r != 0 {
					b.Fatal(r)
				}
			}
		})
	}
}
