package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gonccl/nccl/internal/fakes"
)

// selfRankMain is a rank of TestSelfLaunch: GONCCL_LAUNCH_TEST_SELF says how
// it behaves. "ok": every rank succeeds. "fail": rank 1 exits 3 at once, the
// others wait as ranks do inside NCCL for a peer. "stubborn": as fail, and
// the waiting ranks ignore SIGTERM; rank 1 fails only once they do (each
// leaves a file in GONCCL_LAUNCH_TEST_DIR): a rank started late under the
// emulator took the SIGTERM before it ignored it.
func selfRankMain(mode string) int {
	job, err := Detect()
	if err != nil || job.Launcher != Self {
		return 10
	}
	dir := os.Getenv("GONCCL_LAUNCH_TEST_DIR")
	switch {
	case mode == "ok":
		return 0
	case job.Rank == 1:
		time.Sleep(100 * time.Millisecond)
		for deadline := time.Now().Add(10 * time.Second); mode == "stubborn" && time.Now().Before(deadline); {
			if m, _ := filepath.Glob(filepath.Join(dir, "ignoring-*")); len(m) == job.Size-1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return 3
	case mode == "stubborn":
		signal.Ignore(syscall.SIGTERM)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ignoring-%d", job.Rank)), nil, 0o600); err != nil {
			return 11
		}
	}
	time.Sleep(time.Minute)
	return 0
}

func useSelfCommand(t *testing.T) {
	old := rankCommand
	rankCommand = func(_ string, args []string) *exec.Cmd { return fakes.SelfCommand(context.Background(), args...) }
	t.Cleanup(func() { rankCommand = old })
}

// TestSelfLaunch: a job whose ranks succeed returns nil; a rank that fails
// stops the others at once (SIGTERM), or after StopGrace (SIGKILL) where they
// ignore SIGTERM, and the error names the rank that failed and each rank it
// stopped.
func TestSelfLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	useSelfCommand(t)
	oldGrace := StopGrace
	StopGrace = time.Second
	t.Cleanup(func() { StopGrace = oldGrace })
	t.Setenv("NCCL_COMM_ID", "") // SelfLaunch sets both in this process: restored after the test
	t.Setenv("GONCCL_RUN_ID", "")
	t.Setenv("GONCCL_LAUNCH_TEST_DIR", t.TempDir())

	t.Setenv("GONCCL_LAUNCH_TEST_SELF", "ok")
	if err := SelfLaunch(3, []string{"-np", "3"}); err != nil {
		t.Fatalf("ranks that succeed: %v", err)
	}
	for _, mode := range []string{"fail", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("GONCCL_LAUNCH_TEST_SELF", mode)
			start := time.Now()
			err := SelfLaunch(3, []string{"-np=3"})
			took := time.Since(start)
			if took > 20*time.Second {
				t.Fatalf("SelfLaunch took %v: the ranks left were not stopped", took)
			}
			if mode == "stubborn" && took < StopGrace {
				t.Fatalf("ranks that ignore SIGTERM ended after %v, before StopGrace %v", took, StopGrace)
			}
			var re *RankError
			if !errors.As(err, &re) || re.Rank != 1 || re.StoppedFor != -1 {
				t.Fatalf("the first error is %#v, want rank 1 failed: %v", re, err)
			}
			var ee *exec.ExitError
			if !errors.As(re, &ee) || ee.ExitCode() != 3 {
				t.Fatalf("rank 1's error %v, want its exit status 3", re.Err)
			}
			msg := err.Error()
			for _, want := range []string{"launch: rank 1: exit status 3",
				"launch: rank 0 stopped because rank 1 failed", "launch: rank 2 stopped because rank 1 failed"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
			sig := "signal: terminated"
			if mode == "stubborn" {
				sig = "signal: killed"
			}
			if strings.Count(msg, sig) != 2 {
				t.Errorf("error %q: want the two ranks stopped by %q", msg, sig)
			}
			t.Logf("%v after %v", strings.ReplaceAll(msg, "\n", "; "), took.Round(time.Millisecond))
		})
	}
}

// TestSelfLaunchStartFailure: a rank that cannot start is a RankError, and the
// ranks already started are killed.
func TestSelfLaunchStartFailure(t *testing.T) {
	old := rankCommand
	n := 0
	rankCommand = func(self string, args []string) *exec.Cmd {
		n++
		if n == 2 {
			return exec.Command("/nonexistent/gonccl-rank")
		}
		return exec.Command("sleep", "60")
	}
	t.Cleanup(func() { rankCommand = old })
	t.Setenv("NCCL_COMM_ID", "")
	t.Setenv("GONCCL_RUN_ID", "")
	start := time.Now()
	err := SelfLaunch(3, nil)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("SelfLaunch with rank 1 unable to start: %v after %v", err, time.Since(start))
	}
}
