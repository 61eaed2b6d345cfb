package launch

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakes.Cleanup()
	os.Exit(code)
}

func openFake(t *testing.T) *nccl.Library {
	t.Helper()
	lib, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, "default")), nccl.WithCUDARuntime(fakes.CUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want Job
	}{
		{map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, Job{3, 8, 1, "torchrun"}},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, Job{2, 4, 0, "mpirun"}},
		{map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}, Job{5, 6, 1, "srun"}},
		{map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, Job{1, 2, 1, "srun"}}, // no local id: the rank
		{map[string]string{}, Job{0, 1, 0, "none"}},
	} {
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
			"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"} {
			t.Setenv(k, c.env[k])
		}
		got, err := Detect()
		if err != nil || got != c.want {
			t.Errorf("%v: %+v, %v; want %+v", c.env, got, err, c.want)
		}
	}
	t.Setenv("RANK", "4")
	t.Setenv("WORLD_SIZE", "4")
	if _, err := Detect(); err == nil {
		t.Error("rank 4 of 4 accepted")
	}
	t.Setenv("WORLD_SIZE", "x")
	if _, err := Detect(); err == nil {
		t.Error("WORLD_SIZE=x accepted")
	}
}

func TestStripNP(t *testing.T) {
	got := stripNP([]string{"-np", "2", "-n", "5", "-np=4", "--np", "3", "-idfile", "/x"})
	if want := []string{"-n", "5", "-idfile", "/x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestRegister(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f := Register(fs)
	if err := fs.Parse([]string{"-np", "3", "-idfile", "/tmp/id"}); err != nil {
		t.Fatal(err)
	}
	if f.NP != 3 || f.IDFile != "/tmp/id" {
		t.Errorf("%+v", *f)
	}
}

func TestHostPort(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"10.0.0.1", "29500"}: "10.0.0.1:29500",
		{"node1", "1"}:        "node1:1",
		{"fe80::1", "29500"}:  "[fe80::1]:29500",
		{"[::1]", "29500"}:    "[::1]:29500",
	} {
		if got := hostPort(in[0], in[1]); got != want {
			t.Errorf("hostPort(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

// TestUniqueIDFile: rank 0 writes the id, another rank reads the same one,
// and Cleanup removes the file.
func TestUniqueIDFile(t *testing.T) {
	lib := openFake(t)
	t.Setenv("NCCL_COMM_ID", "")
	file := filepath.Join(t.TempDir(), "id")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		id  nccl.UniqueID
		err error
	}
	got := make(chan res, 1)
	go func() { // rank 1 starts waiting before rank 0 writes
		id, err := UniqueID(ctx, lib, Job{Rank: 1, Size: 2, LocalRank: 1}, file)
		got <- res{id, err}
	}()
	time.Sleep(50 * time.Millisecond)
	job0 := Job{Rank: 0, Size: 2}
	id0, err := UniqueID(ctx, lib, job0, file)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.id != id0 {
		t.Fatalf("rank 1: %v, %v; rank 0 has %v", r.id, r.err, id0)
	}
	if _, err := UniqueID(ctx, lib, job0, file); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("rank 0 reused an existing id file: %v", err)
	}
	Cleanup(Job{Rank: 1, Size: 2}, file)
	if _, err := os.Stat(file); err != nil {
		t.Errorf("rank 1's Cleanup removed the file: %v", err)
	}
	Cleanup(job0, file)
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Cleanup: %v", err)
	}
}

// TestUniqueIDWaitEnds: a rank whose rank 0 never writes the file gets the
// context's error, not a hang.
func TestUniqueIDWaitEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := UniqueID(ctx, nil, Job{Rank: 1, Size: 2}, filepath.Join(t.TempDir(), "never"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v, want an error wrapping context.DeadlineExceeded", err)
	}
}

// TestUniqueIDAddress: without a file the id comes from NCCL_COMM_ID, made
// from MASTER_ADDR and MASTER_PORT when unset; a job of several ranks with
// neither is refused.
func TestUniqueIDAddress(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "")
	t.Setenv("MASTER_ADDR", "")
	t.Setenv("MASTER_PORT", "")
	ctx := context.Background()
	if _, err := UniqueID(ctx, nil, Job{Rank: 1, Size: 2}, ""); err == nil || !strings.Contains(err.Error(), "NCCL_COMM_ID") {
		t.Errorf("no address, 2 ranks: %v", err)
	}
	lib := openFake(t)
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	t.Setenv("MASTER_PORT", "29599")
	a, err := UniqueID(ctx, lib, Job{Rank: 0, Size: 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("NCCL_COMM_ID"); got != "127.0.0.1:29599" {
		t.Errorf("NCCL_COMM_ID = %q", got)
	}
	b, err := UniqueID(ctx, lib, Job{Rank: 1, Size: 2}, "")
	if err != nil || a != b {
		t.Errorf("rank 1: %v, %v; rank 0 has %v", b, err, a)
	}
}
