package nccl

import (
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
	fakes.ChildMain(children)
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
