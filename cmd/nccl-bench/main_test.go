package main

import (
	"os"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	os.Setenv("FAKECUDA_DELAY_US", "0")
	code := m.Run()
	fakes.Cleanup()
	os.Exit(code)
}

// TestEveryOperation runs each operation on the fake NCCL with three GPUs, in
// and out of place, checks its bytes, and keeps the timed loop free of
// allocations.
func TestEveryOperation(t *testing.T) {
	for _, variant := range []string{"default", "old", "vccl11"} {
		lib, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, variant)), nccl.WithCUDARuntime(fakes.CUDART(t)))
		if err != nil {
			t.Fatal(err)
		}
		comms, err := lib.InitAll([]int{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		for name, spec := range opSpecs {
			for _, grouped := range []bool{false, true} {
				b := newBench(lib, comms, abi.Uint8, abi.Sum, 1, spec, name, grouped)
				b.maxBytes = 3 * 4096
				for _, inPlace := range []bool{false, true} {
					_, wrong := b.run(1024, inPlace, 1, 2, true)
					if wrong > 0 {
						t.Errorf("%s %s grouped=%v in-place=%v: %d wrong", variant, name, grouped, inPlace, wrong)
					}
					if wrong < 0 && name != "alltoallv" && !inPlace {
						t.Errorf("%s %s: out of place not checked", variant, name)
					}
				}
				if allocs := testing.AllocsPerRun(20, func() { must(b.launch(1024, false)) }); allocs != 0 && name != "alltoallv" {
					t.Errorf("%s %s: %v allocations per timed iteration", variant, name, allocs)
				}
				for i := range b.comms {
					must(lib.CUDA().StreamSynchronize(b.streams[i]))
				}
			}
		}
		for _, c := range comms {
			c.Destroy()
		}
	}
}

func TestPeerBytesMatchesNCCLTests(t *testing.T) {
	// Two ranks, spread 1.0: nothing to oneself, everything to the other.
	if peerBytes(0, 0, 2, 1024) != 0 || peerBytes(0, 1, 2, 1024) != 1024 {
		t.Error("2 ranks")
	}
	// Four ranks: distance-weighted, 16-byte aligned, summing to the total.
	sum := 0
	for j := range 4 {
		v := peerBytes(1, j, 4, 6000)
		if v%16 != 0 {
			t.Errorf("unaligned %d", v)
		}
		sum += v
	}
	if sum > 6000 || sum < 6000-4*16 {
		t.Errorf("sum %d of 6000", sum)
	}
}
