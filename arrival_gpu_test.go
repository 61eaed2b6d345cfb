//go:build gpu

package nccl_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// The scenarios of arrival_test.go on real NCCL.

func openRealGrace(t *testing.T, grace time.Duration) (*nccl.Library, int) {
	t.Helper()
	_, n := openReal(t)
	l, err := nccl.Open(nccl.WithArrivalGrace(grace))
	if err != nil {
		t.Fatal(err)
	}
	return l, n
}

func TestGPUArrivalOneGoroutineRefused(t *testing.T) {
	const grace = time.Second
	l, n := openRealGrace(t, grace)
	for _, m := range commModes {
		for _, k := range gpuRankCounts(n) {
			t.Run(fmt.Sprintf("%s/%d ranks", m.name, k), func(t *testing.T) {
				for range gpuRounds() {
					oneGoroutineRefused(t, l, m.ctx(t), k, grace, loneAllReduce)
				}
			})
		}
	}
	t.Run("default grace", func(t *testing.T) {
		ld, _ := openReal(t)
		oneGoroutineRefused(t, ld, t.Context(), 2, nccl.ArrivalGrace, loneAllReduce)
	})
}

func TestGPUArrivalGoroutinePerRank(t *testing.T) {
	l, n := openRealGrace(t, 300*time.Millisecond)
	for _, m := range commModes {
		for _, k := range gpuRankCounts(n) {
			for _, mainDrives := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d ranks/maker drives rank 0 %v", m.name, k, mainDrives), func(t *testing.T) {
					goroutinePerRank(t, l, m.ctx(t), k, mainDrives, 150*time.Millisecond)
				})
			}
		}
	}
}
