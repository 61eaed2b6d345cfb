package nccl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gonccl/nccl/internal/fakes"
)

// Child processes: a test that needs a fresh process (the system loader reads
// LD_LIBRARY_PATH at start; a library once loaded stays loaded) re-executes the
// test binary with GONCCL_TEST_CHILD naming one of these.
var children = map[string]func() error{}

func TestMain(m *testing.M) {
	if name := os.Getenv("GONCCL_TEST_CHILD"); name != "" {
		fn, ok := children[name]
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
	if useFakesForExamples && os.Getenv("GONCCL_NCCL_LIB") == "" && os.Getenv("GONCCL_CUDART_LIB") == "" {
		// The Example functions call Open as a program would: the search
		// finds the fakes through the variables a user would set.
		dir, err := fakes.Built()
		if err != nil {
			fmt.Fprintln(os.Stderr, "building the fake libraries:", err)
			os.Exit(2)
		}
		os.Setenv("GONCCL_NCCL_LIB", filepath.Join(dir, "default"))
		os.Setenv("GONCCL_CUDART_LIB", filepath.Join(dir, "cudart"))
	}
	os.Exit(m.Run())
}

// runChild runs children[name] in a fresh copy of the test binary with env added
// to a clean environment (the fakes already built are passed on), and returns its
// combined output.
func runChild(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	cmd := fakes.SelfCommand(context.Background(), "-test.run=^$")
	cmd.Env = append([]string{"GONCCL_TEST_CHILD=" + name, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"GONCCL_FAKE_DIR=" + FakeDir(t), "QEMU_LD_PREFIX=" + os.Getenv("QEMU_LD_PREFIX")}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
