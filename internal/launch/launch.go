// Package launch gives the examples and nccl-bench their place in a job: rank, world size and
// local GPU from whichever launcher started the process (mpirun, srun, torchrun,
// or the example itself with -np), and the NCCL unique id by the launcher's way.
package launch

import (
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
	Rank, Size int // global rank and number of ranks
	LocalRank  int // rank on this node: the GPU to use
	Launcher   string
}

// Flags common to the examples; register them before flag.Parse.
type Flags struct {
	NP     int
	IDFile string
}

// Register adds -np and -idfile.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.IntVar(&f.NP, "np", 0, "start this many local ranks (one process per GPU) and wait for them")
	fs.StringVar(&f.IDFile, "idfile", "", "share the unique id through this file (rank 0 writes it, as PyTorch's file:// init); default: NCCL_COMM_ID")
	return f
}

// Detect reads the launcher's environment: torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK), Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID). A process started by none of them is rank 0 of 1.
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

// SelfLaunch starts np copies of this program as local ranks, with torchrun's
// variables and NCCL_COMM_ID on a free local port, waits for all and returns
// their combined exit error. Children inherit stdout and stderr.
func SelfLaunch(np int, args []string) error {
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
			return err
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

// UniqueID gets the id every rank must share. With idFile, rank 0 creates it and
// writes its text form atomically (write, then rename); the others poll for the
// file for up to a minute. Rank 0 refuses a file that already exists and should
// remove it once the communicator exists (Cleanup). Without, NCCL_COMM_ID must be set (MASTER_ADDR and
// MASTER_PORT are turned into it, as torchrun users expect): NCCL then derives the
// same id on every rank and rank 0 hosts the rendezvous.
func UniqueID(lib *nccl.Library, job Job, idFile string) (nccl.UniqueID, error) {
	if idFile == "" {
		if os.Getenv("NCCL_COMM_ID") == "" && os.Getenv("MASTER_ADDR") != "" && os.Getenv("MASTER_PORT") != "" {
			os.Setenv("NCCL_COMM_ID", os.Getenv("MASTER_ADDR")+":"+os.Getenv("MASTER_PORT"))
		}
		if os.Getenv("NCCL_COMM_ID") == "" && job.Size > 1 {
			return nccl.UniqueID{}, errors.New("no way to share the unique id: set NCCL_COMM_ID=host:port (or MASTER_ADDR and MASTER_PORT), or pass -idfile")
		}
		return lib.GetUniqueID()
	}
	if job.Rank == 0 {
		// A file left from an earlier job would hand its stale id to the others.
		if _, err := os.Stat(idFile); err == nil {
			return nccl.UniqueID{}, fmt.Errorf("%s exists: remove it, or name a fresh file", idFile)
		}
		id, err := lib.GetUniqueID()
		if err != nil {
			return id, err
		}
		tmp := filepath.Join(filepath.Dir(idFile), "."+filepath.Base(idFile)+".tmp")
		if err := os.WriteFile(tmp, []byte(id.String()+"\n"), 0o600); err != nil {
			return id, err
		}
		return id, os.Rename(tmp, idFile)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(idFile)
		if err == nil {
			return nccl.ParseUniqueID(string(b))
		}
		if time.Now().After(deadline) {
			return nccl.UniqueID{}, fmt.Errorf("waiting for %s: %v", idFile, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Cleanup removes the id file; rank 0 calls it once every rank has joined.
func Cleanup(job Job, idFile string) {
	if job.Rank == 0 && idFile != "" {
		os.Remove(idFile)
	}
}
