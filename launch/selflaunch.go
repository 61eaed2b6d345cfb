package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SelfLaunch starts np copies of this program as local ranks 0 to np-1, with
// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and
// args less any -np flag, waits for all of them and returns nil if every rank
// succeeded. Detect reports their launcher as Self. Unless NCCL_COMM_ID is
// already set, it sets it to a local port for the ranks' rendezvous, and
// GONCCL_RUN_ID to a name of this run unless set. The ranks inherit stdout and
// stderr.
//
// A rank that fails stops the job, as torchrun's agent does: the others would
// wait for it inside NCCL until their deadlines. SelfLaunch sends them SIGTERM
// at once and SIGKILL StopGrace later, and returns a *RankError per rank that
// did not succeed, joined: the rank that failed first, then those it stopped
// (RankError.StoppedFor says which rank's failure stopped them).
func SelfLaunch(np int, args []string) error {
	if np < 1 {
		return fmt.Errorf("launch: %d ranks", np)
	}
	if os.Getenv("NCCL_COMM_ID") == "" {
		os.Setenv("NCCL_COMM_ID", "127.0.0.1:"+strconv.Itoa(29500+os.Getpid()%1000))
	}
	if os.Getenv("GONCCL_RUN_ID") == "" {
		os.Setenv("GONCCL_RUN_ID", fmt.Sprintf("self-%d-%d", os.Getpid(), time.Now().UnixNano()))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var cmds []*exec.Cmd
	for r := range np {
		cmd := rankCommand(self, stripNP(args))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(np),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(np), "GONCCL_LAUNCHER="+string(Self))
		if err := cmd.Start(); err != nil {
			for _, c := range cmds { // the started ranks would wait for this one
				c.Process.Kill()
				c.Wait()
			}
			return &RankError{Rank: r, Err: err, StoppedFor: -1}
		}
		cmds = append(cmds, cmd)
	}
	return waitRanks(cmds)
}

// StopGrace is how long SelfLaunch lets the ranks it stops (SIGTERM) end by
// themselves before it kills them (SIGKILL).
var StopGrace = 5 * time.Second

// rankCommand makes the command of one rank; tests under an emulator
// replace it.
var rankCommand = func(self string, args []string) *exec.Cmd { return exec.Command(self, args...) }

// A RankError is a rank of SelfLaunch that did not succeed: it failed
// (StoppedFor is -1), or SelfLaunch stopped it because rank StoppedFor had
// failed.
type RankError struct {
	Rank       int
	Err        error // how it ended (an *exec.ExitError), or why it could not start
	StoppedFor int   // the rank whose failure stopped this one; -1 when it failed itself
}

func (e *RankError) Error() string {
	if e.StoppedFor >= 0 {
		return fmt.Sprintf("launch: rank %d stopped because rank %d failed (%v)", e.Rank, e.StoppedFor, e.Err)
	}
	return fmt.Sprintf("launch: rank %d: %v", e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// waitRanks waits for every rank; the first that fails stops the others.
func waitRanks(cmds []*exec.Cmd) error {
	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, len(cmds))
	for r, cmd := range cmds {
		go func() { exits <- exit{r, cmd.Wait()} }()
	}
	failed := -1
	done := make([]bool, len(cmds))
	var first *RankError
	var stopped []error
	var kill <-chan time.Time
	for left := len(cmds); left > 0; {
		select {
		case e := <-exits:
			left--
			done[e.rank] = true
			switch {
			case e.err == nil:
			case failed < 0:
				failed = e.rank
				first = &RankError{Rank: e.rank, Err: e.err, StoppedFor: -1}
				for r, cmd := range cmds {
					if !done[r] {
						cmd.Process.Signal(syscall.SIGTERM)
					}
				}
				kill = time.After(StopGrace)
			default:
				stopped = append(stopped, &RankError{Rank: e.rank, Err: e.err, StoppedFor: failed})
			}
		case <-kill:
			for r, cmd := range cmds {
				if !done[r] {
					cmd.Process.Kill()
				}
			}
		}
	}
	if first == nil {
		return nil
	}
	sort.Slice(stopped, func(i, j int) bool { return stopped[i].(*RankError).Rank < stopped[j].(*RankError).Rank })
	return errors.Join(append([]error{first}, stopped...)...)
}

// stripNP removes -np N, --np N, -np=N and --np=N from args.
func stripNP(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-np" || a == "--np" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-np=") || strings.HasPrefix(a, "--np=") {
			continue
		}
		out = append(out, a)
	}
	return out
}
