// Package fakes gives gonccl's own tests the fake libraries of package
// nccltest, and a way to start a fresh copy of the test binary.
package fakes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gonccl/nccl/nccltest"
)

// Dir returns the folder holding the fake libraries (nccltest.Build), ending
// the test when they cannot be built.
func Dir(tb testing.TB) string {
	tb.Helper()
	d, err := nccltest.Build()
	if err != nil {
		tb.Fatalf("building the fake libraries: %v", err)
	}
	return string(d)
}

// Built is Dir for callers without a testing.TB (TestMain).
func Built() (string, error) {
	d, err := nccltest.Build()
	return string(d), err
}

// NCCL is the folder of one variant's libnccl.so.2.
func NCCL(tb testing.TB, variant string) string { return nccltest.Dir(Dir(tb)).NCCL(variant) }

// CUDART is the folder of the fake libcudart.so.12.
func CUDART(tb testing.TB) string { return nccltest.Dir(Dir(tb)).CUDART() }

// SelfCommand is exec.CommandContext for a fresh copy of the running test
// binary with args. Under emulation without binfmt_misc (scripts/test-arm64.sh)
// a binary cannot start itself: GONCCL_TEST_EMULATOR then names the emulator
// to start it with.
func SelfCommand(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{os.Args[0]}, args...)
	if emu := os.Getenv("GONCCL_TEST_EMULATOR"); emu != "" {
		argv = append([]string{emu}, argv...)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// ChildMain, called first in a test package's TestMain, runs the child case
// that GONCCL_TEST_CHILD names (see RunChild) and exits: 0 when it returns
// nil, 1 with its error printed, 2 for a name cases lacks. Without the
// variable it returns.
func ChildMain(cases map[string]func() error) {
	name := os.Getenv("GONCCL_TEST_CHILD")
	if name == "" {
		return
	}
	fn, ok := cases[name]
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

// RunChild runs the child case name (see ChildMain) in a fresh copy of the
// test binary, with env added to a clean environment that passes the fakes
// already built on, and returns its combined output. A child still running
// after d is killed and reported; d <= 0 sets no limit.
func RunChild(tb testing.TB, d time.Duration, name string, env ...string) (string, error) {
	tb.Helper()
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	cmd := SelfCommand(ctx, "-test.run=^$")
	cmd.Env = append([]string{"GONCCL_TEST_CHILD=" + name, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"GONCCL_FAKE_DIR=" + Dir(tb), "QEMU_LD_PREFIX=" + os.Getenv("QEMU_LD_PREFIX")}, env...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("still running after %v, killed: %v", d, err)
	}
	return string(out), err
}
