//go:build gpu

package nccl_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gonccl/nccl/internal/fakes"
)

// TestGPUNoContextOnDeviceZero runs TestNoContextOnDeviceZero's child on the
// real CUDA runtime and NCCL: a process on GPU 1 alone, every step on a fresh
// OS thread (streams, memory, init, a launch, a group, a capture and its
// graph's launch, close), and after each the driver must report a primary
// context on device 1 only. Without the guard, each process of nccl-bench
// -np 4 off GPU 0 holds a context of hundreds of MiB there.
func TestGPUNoContextOnDeviceZero(t *testing.T) {
	l, _ := openReal(t)
	if n, err := l.CUDA().DeviceCount(); err != nil || n < 2 {
		t.Skipf("needs 2 GPUs (%d, %v)", n, err)
	}
	for _, mode := range []string{"blocking", "nonblocking"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := fakes.SelfCommand(ctx, "-test.run=^$")
			cmd.Env = append(os.Environ(), "GONCCL_TEST_CHILD=device-one-only", "GONCCL_TEST_MODE="+mode)
			cmd.WaitDelay = time.Second
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
