package nccltest_test

import (
	"os"
	"testing"

	"github.com/gonccl/nccl/internal/fakes"
)

// Child processes: a case whose outcome is the death of the process (the fake
// stopping it as NCCL would crash) runs in a fresh copy of the test binary
// (fakes.RunChild), with GONCCL_TEST_CHILD naming one of these.
var childCases = map[string]func() error{}

func TestMain(m *testing.M) {
	fakes.ChildMain(childCases)
	os.Exit(m.Run())
}
