package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// SelfLaunch starts np copies of this program as local ranks 0 to np-1, with
// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and
// args less any -np flag, waits for all of them and returns their exit errors
// joined (nil if every rank succeeded). Detect reports their launcher as Self.
// Unless NCCL_COMM_ID is already set, it sets it to a local port for the
// ranks' rendezvous, and GONCCL_RUN_ID to a name of this run unless set. The
// ranks inherit stdout and stderr.
//
// A rank that fails leaves the others waiting for it inside NCCL: give them a
// deadline (a context that ends, for init and Close) so that they fail too.
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
		cmd := exec.Command(self, stripNP(args)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(np),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(np), "GONCCL_LAUNCHER="+string(Self))
		if err := cmd.Start(); err != nil {
			for _, c := range cmds { // the started ranks would wait for this one
				c.Process.Kill()
				c.Wait()
			}
			return fmt.Errorf("rank %d: %w", r, err)
		}
		cmds = append(cmds, cmd)
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
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
