// Package fakes gives gonccl's own tests the fake libraries of package
// nccltest, and a way to start a fresh copy of the test binary.
package fakes

import (
	"context"
	"os"
	"os/exec"
	"testing"

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
