//go:build gpu

package collectives_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	c "github.com/gonccl/nccl/collectives"
)

// The typed layer on the real NCCL the search finds (GONCCL_NCCL_LIB chooses):
// AlltoAll, Gather, Scatter by the native and the grouped path for every type,
// typed reductions in place, and AlltoAllv by every form (native on a VCCL
// build). Cross-compile with CGO_ENABLED=0 go test -tags gpu -c ./collectives.
func TestGPUTyped(t *testing.T) {
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.CUDA().DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %s from %s; %d GPUs; ncclAlltoAllv %v", l.Version(), l.Path, n, l.Has("ncclAlltoAllv"))
	ranks := initRanks(t, l, n)
	rng := rand.New(rand.NewPCG(5, 6))
	movement[int8](t, l, ranks, rng)
	movement[uint8](t, l, ranks, rng)
	movement[int32](t, l, ranks, rng)
	movement[uint32](t, l, ranks, rng)
	movement[int64](t, l, ranks, rng)
	movement[uint64](t, l, ranks, rng)
	movement[float32](t, l, ranks, rng)
	movement[float64](t, l, ranks, rng)
	movement[c.Float16](t, l, ranks, rng)
	movement[c.BFloat16](t, l, ranks, rng)
	if l.SupportsType(abi.Float8e4m3) {
		movement[c.Float8E4M3](t, l, ranks, rng)
		movement[c.Float8E5M2](t, l, ranks, rng)
	}
	typedReductions(t, l, ranks)
	alltoallvPaths(t, l, ranks)
}
