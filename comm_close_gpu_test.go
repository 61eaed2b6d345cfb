//go:build gpu

package nccl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// The Close scenarios of comm_close_test.go on real NCCL: the library the
// search finds (GONCCL_NCCL_LIB chooses), 2 and 4 ranks where the GPUs allow,
// GONCCL_GPU_ROUNDS runs in a row (default 3).

func init() {
	closeOpen = func(t *testing.T) *nccl.Library { l, _ := openReal(t); return l }
}

func gpuRounds() int {
	if n, err := strconv.Atoi(os.Getenv("GONCCL_GPU_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

func TestGPUCloseDeadPeerBlocking(t *testing.T) {
	_, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 GPUs")
	}
	for _, k := range gpuRankCounts(n) {
		t.Run(fmt.Sprintf("%d ranks", k), func(t *testing.T) {
			runCloseDeadPeer(t, k, gpuRounds(), func(args ...string) *exec.Cmd {
				cmd := exec.Command(os.Args[0], args...)
				cmd.Env = os.Environ()
				return cmd
			})
		})
	}
}

func TestGPUCloseAfterPeerAbortedInClique(t *testing.T) {
	l, n := openReal(t)
	for _, m := range commModes {
		for _, k := range gpuRankCounts(n) {
			t.Run(fmt.Sprintf("%s/%d ranks", m.name, k), func(t *testing.T) {
				for range gpuRounds() {
					closeAfterPeerAborted(t, l, m.ctx(t), k)
				}
			})
		}
	}
}

func TestGPUCloseCliqueOneGoroutine(t *testing.T) {
	l, n := openReal(t)
	for _, m := range commModes {
		for _, k := range gpuRankCounts(n) {
			for _, all := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d ranks/CloseAll %v", m.name, k, all), func(t *testing.T) {
					ctx := m.ctx(t)
					comms, err := l.InitAll(ctx, devList(k), modeOf(ctx, nil))
					if err != nil {
						t.Fatal(err)
					}
					groupedSumCheck(t, l, comms, uint64(k))
					cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if all {
						err = nccl.CloseAll(cctx, comms)
					} else {
						for _, c := range comms {
							if err = c.Close(cctx); err != nil {
								break
							}
						}
					}
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}
