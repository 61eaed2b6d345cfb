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
// scripts/bench-overhead.sh reads these two.

func BenchmarkGroupIterationGonccl(b *testing.B) { benchGroupGonccl(b, 2) }

func BenchmarkGroupIterationCgo(b *testing.B) { benchGroupCgo(b, 2) }

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
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) { benchGroupGonccl(b, n) })
	}
}

func BenchmarkGroupScalingCgo(b *testing.B) {
	for _, n := range groupSizes {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) { benchGroupCgo(b, n) })
	}
}

// benchGroupGonccl times Library.Group around an AllReduce per GPU of n.
func benchGroupGonccl(b *testing.B, n int) {
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
}

// benchGroupCgo times the same calls made from C in one cgo call.
func benchGroupCgo(b *testing.B, n int) {
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
}
