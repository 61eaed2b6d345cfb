package nccltest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gonccl/nccl/internal/fakes"
)

// Child processes: a case whose outcome is the death of the process (the fake
// stopping it as NCCL would crash) runs in a fresh copy of the test binary,
// with GONCCL_TEST_CHILD naming one of these.
var childCases = map[string]func() error{}

func TestMain(m *testing.M) {
	if name := os.Getenv("GONCCL_TEST_CHILD"); name != "" {
		fn, ok := childCases[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(2)
		}
		if err := fn(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChildWithin runs childCases[name] in a fresh copy of the test binary
// with env added to a clean environment (the fakes already built are passed
// on), and returns its combined output; a child still running after d is
// killed and reported.
func runChildWithin(t *testing.T, d time.Duration, name string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := fakes.SelfCommand(ctx, "-test.run=^$")
	cmd.Env = append([]string{"GONCCL_TEST_CHILD=" + name, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"GONCCL_FAKE_DIR=" + fakes.Dir(t), "QEMU_LD_PREFIX=" + os.Getenv("QEMU_LD_PREFIX")}, env...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("still running after %v, killed: %v", d, err)
	}
	return string(out), err
}
