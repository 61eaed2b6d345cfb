package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gonccl/nccl"
)

// Job is this process's place in the job.
type Job struct {
	Rank      int    // global rank, in [0, Size)
	Size      int    // number of ranks in the job
	LocalRank int    // rank among the job's processes on this node: the GPU to use (see the package documentation)
	Launcher  string // "torchrun", "mpirun", "srun", or "none" for a process started alone
}

// Flags holds the command-line flags Register adds.
type Flags struct {
	// NP, when positive, asks the program to start NP local ranks of itself
	// with SelfLaunch instead of running as a rank (-np).
	NP int
	// IDFile names the file through which rank 0 shares the unique id with
	// the others (-idfile); empty means NCCL_COMM_ID (see UniqueID).
	IDFile string
}

// Register adds -np and -idfile to fs and returns where their values land
// once fs is parsed.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.IntVar(&f.NP, "np", 0, "start this many local ranks (one process per GPU) and wait for them")
	fs.StringVar(&f.IDFile, "idfile", "", "share the unique id through this file (rank 0 writes it, as PyTorch's file:// init); default: NCCL_COMM_ID")
	return f
}

// Detect reads the launcher's environment: torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK), Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID). Without a local rank, the global rank stands in for it. A
// process started by none of them is rank 0 of 1. A rank variable that is set
// but not a number, or a rank outside [0, size), is an error.
func Detect() (Job, error) {
	for _, l := range []struct{ name, rank, size, local string }{
		{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
		{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
		{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
	} {
		if os.Getenv(l.rank) == "" {
			continue
		}
		j := Job{Launcher: l.name}
		var err error
		if j.Rank, err = atoi(l.rank); err != nil {
			return j, err
		}
		if j.Size, err = atoi(l.size); err != nil {
			return j, err
		}
		if j.LocalRank, err = atoi(l.local); err != nil {
			j.LocalRank = j.Rank
		}
		if j.Rank < 0 || j.Rank >= j.Size {
			return j, fmt.Errorf("%s: rank %d of %d", l.name, j.Rank, j.Size)
		}
		return j, nil
	}
	return Job{Size: 1, Launcher: "none"}, nil
}

func atoi(name string) (int, error) {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", name, os.Getenv(name), err)
	}
	return v, nil
}

// SelfLaunch starts np copies of this program as local ranks 0 to np-1, with
// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK) and args less any -np
// flag, waits for all of them and returns their exit errors joined (nil if
// every rank succeeded). Unless NCCL_COMM_ID is already set, it sets it to a
// local port for the ranks' rendezvous. The ranks inherit stdout and stderr.
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
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var cmds []*exec.Cmd
	for r := range np {
		cmd := exec.Command(self, stripNP(args)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(np), "LOCAL_RANK="+strconv.Itoa(r))
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

// UniqueID returns the id every rank of job passes to Library.InitRank.
//
// With idFile empty, the id comes from NCCL_COMM_ID=host:port, which every
// rank must have: NCCL derives the same id on every rank and rank 0 hosts the
// rendezvous at that address. When NCCL_COMM_ID is unset and MASTER_ADDR and
// MASTER_PORT are set (as torchrun users expect), NCCL_COMM_ID is set from
// them. A job of one rank needs neither.
//
// With idFile, rank 0 creates the id and writes its text form there atomically
// (write, then rename); it refuses a file that already exists, which would
// hand a stale id to the others, and should remove it with Cleanup once its
// communicator exists. The other ranks poll for the file until it appears or
// ctx ends; the error then wraps ctx.Err(). Give ctx a deadline: without one a
// rank whose rank 0 never writes the file waits forever.
func UniqueID(ctx context.Context, lib *nccl.Library, job Job, idFile string) (nccl.UniqueID, error) {
	if idFile == "" {
		if os.Getenv("NCCL_COMM_ID") == "" && os.Getenv("MASTER_ADDR") != "" && os.Getenv("MASTER_PORT") != "" {
			os.Setenv("NCCL_COMM_ID", hostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")))
		}
		if os.Getenv("NCCL_COMM_ID") == "" && job.Size > 1 {
			return nccl.UniqueID{}, errors.New("launch: no way to share the unique id: set NCCL_COMM_ID=host:port (or MASTER_ADDR and MASTER_PORT), or pass -idfile")
		}
		return lib.GetUniqueID()
	}
	if job.Rank == 0 {
		if _, err := os.Stat(idFile); err == nil {
			return nccl.UniqueID{}, fmt.Errorf("launch: %s exists: remove it, or name a fresh file", idFile)
		}
		id, err := lib.GetUniqueID()
		if err != nil {
			return id, err
		}
		tmp := filepath.Join(filepath.Dir(idFile), "."+filepath.Base(idFile)+".tmp")
		if err := os.WriteFile(tmp, []byte(id.String()+"\n"), 0o600); err != nil {
			return nccl.UniqueID{}, err
		}
		if err := os.Rename(tmp, idFile); err != nil {
			os.Remove(tmp)
			return nccl.UniqueID{}, err
		}
		return id, nil
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(idFile)
		if err == nil {
			return nccl.ParseUniqueID(string(b))
		}
		select {
		case <-ctx.Done(): // err says why the last read failed
			return nccl.UniqueID{}, fmt.Errorf("launch: waiting for rank 0 to write %s (%v): %w", idFile, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// hostPort joins a host and a port as NCCL_COMM_ID wants them, an IPv6
// address in brackets.
func hostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return host + ":" + port
}

// Cleanup removes the id file UniqueID wrote; rank 0 calls it once its
// communicator exists (every rank has read the file by then). Other ranks,
// and an empty idFile, do nothing.
func Cleanup(job Job, idFile string) {
	if job.Rank == 0 && idFile != "" {
		os.Remove(idFile)
	}
}
