//go:build gpu

package nccl_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// GPU tests run against the real NCCL and CUDA runtime that the search finds
// (GONCCL_NCCL_LIB and friends choose): cross-compile with
//
//	CGO_ENABLED=0 go test -tags gpu -c -o nccl-gpu.test .
//
// and run the binary on a machine with GPUs (scripts/gpu-check.sh).

func openReal(t *testing.T) (*nccl.Library, int) {
	t.Helper()
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.CUDA().DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %s from %s (%s); %d GPUs", l.Version(), l.Path, l.Via, n)
	return l, n
}

// TestGPUAllReduceFloat32 is the smallest proof: one goroutine per GPU, the id
// by value, a float32 sum checked element by element.
func TestGPUAllReduceFloat32(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 GPUs")
	}
	ranks := initRanks(t, l, n)
	cu := l.CUDA()
	const elems = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([][]float32, n)
	want := make([]float32, elems)
	for r := range in {
		in[r] = make([]float32, elems)
		for i := range in[r] {
			in[r][i] = float32(rng.IntN(2001) - 1000) // exact sums in float32
			want[i] += in[r][i]
		}
	}
	bufs := make([]nccl.DevicePtr, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host := make([]byte, 4*elems)
			for i, v := range in[r] {
				binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(v))
			}
			var err error
			if bufs[r], err = cu.Malloc(rk.dev, 4*elems); err != nil {
				errs[r] = err
				return
			}
			if err = cu.CopyToDevice(bufs[r], host); err != nil {
				errs[r] = err
				return
			}
			if err = rk.comm.AllReduce(bufs[r], bufs[r], elems, abi.Float32, abi.Sum, rk.s); err != nil {
				errs[r] = err
				return
			}
			if err = cu.StreamSynchronize(rk.s); err != nil {
				errs[r] = err
				return
			}
			errs[r] = cu.CopyFromDevice(host, bufs[r])
			for i := range elems {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:])); got != want[i] {
					t.Errorf("rank %d element %d = %v, want %v", r, i, got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		cu.Free(bufs[r])
	}
}

// TestGPUCollectives runs the fake-library suite's cases on the real library:
// every collective it has, every type, every reduction, in place and not.
func TestGPUCollectives(t *testing.T) {
	l, n := openReal(t)
	ranks := initRanks(t, l, n)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	runAllCases(t, l, ranks, rng)
}
