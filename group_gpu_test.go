//go:build gpu

package nccl_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// gpuRankCounts is 2 and every GPU's rank count above it: the failure
// semantics are proven at 2 and 4 ranks on a 4-GPU machine.
func gpuRankCounts(n int) []int {
	if n <= 2 {
		return []int{n}
	}
	return []int{2, n}
}

// TestGPUGroupFailures runs every failing-group case (group_failure_test.go)
// on real NCCL: blocking and non-blocking, one goroutine driving every rank
// and one per rank, at 2 ranks and at every GPU's; the data of later groups
// checked in every element.
func TestGPUGroupFailures(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	for _, k := range gpuRankCounts(n) {
		for _, m := range commModes {
			t.Run(fmt.Sprintf("%d ranks/%s", k, m.name), func(t *testing.T) { testGroupFailures(t, l, k, m) })
		}
	}
}

// TestGPUAbortRacingGroups runs group_abort_test.go's race on real NCCL:
// GONCCL_GPU_ABORT_ROUNDS rounds (default 30) of every communicator aborted
// at a random moment while one goroutine runs Groups of all-reduces on all of
// them.
func TestGPUAbortRacingGroups(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	if n > devices {
		t.Skip("ranks sharing a GPU in one process: an Abort of one faults the other's kernel; needs a GPU per rank")
	}
	rounds := 30
	if v, err := strconv.Atoi(os.Getenv("GONCCL_GPU_ABORT_ROUNDS")); err == nil {
		rounds = v
	}
	for _, k := range gpuRankCounts(n) {
		for _, m := range commModes {
			t.Run(fmt.Sprintf("%d ranks/%s", k, m.name), func(t *testing.T) { testAbortRacingGroups(t, l, k, rounds, m) })
		}
	}
}

// TestGPUInitRankInsideGroup runs group_init_test.go's cases on real NCCL:
// the ranks of every GPU made by one goroutine with InitRank inside a Group
// (deadline, cancellable and background contexts), then an all-reduce of
// random data checked in every element; and a Group failing after its
// non-blocking inits, whose communicators must come out aborted.
func TestGPUInitRankInsideGroup(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	for _, k := range gpuRankCounts(n) {
		for _, mode := range initModes {
			t.Run(fmt.Sprintf("%d ranks/%s", k, mode), func(t *testing.T) { testInitRankInsideGroup(t, l, k, mode) })
		}
	}
	for _, mode := range []string{"deadline", "background"} {
		t.Run("failed group/"+mode, func(t *testing.T) { testInitRankInsideFailedGroup(t, l, mode) })
	}
}

// TestGPUBlockingInitGivenUp runs init_bounded_test.go's case on real NCCL: a
// blocking init (the default) whose peer comes only after the deadline
// returns at the deadline; when the peer comes, NCCL's init returns and gonccl
// aborts the communicator it gave up; Library.Close then succeeds.
func TestGPUBlockingInitGivenUp(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 ranks: 2 GPUs, or GONCCL_GPU_RANKS=2 with NCCL_MULTI_RANK_GPU_ENABLE=1")
	}
	testBlockingInitGivenUp(t, l)
}
