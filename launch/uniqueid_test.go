package launch

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// TestChoose: which way ViaAuto takes, in its order, and what it says when
// there is none.
func TestChoose(t *testing.T) {
	for _, c := range []struct {
		name string
		job  Job
		s    Share
		want Via
	}{
		{"one rank", Job{Size: 1}, Share{}, ViaAuto},
		{"id file over everything", Job{Size: 2, CommID: "h:1", StoreAddr: "h:2"}, Share{File: "/f"}, ViaFile},
		{"NCCL_COMM_ID over torchrun's store", Job{Size: 2, CommID: "h:1", StoreAddr: "h:2"}, Share{}, ViaCommID},
		{"torchrun's store", Job{Size: 2, StoreAddr: "h:2"}, Share{}, ViaStore},
		{"a store named", Job{Size: 2}, Share{Store: "h:3"}, ViaStore},
		{"MASTER_ADDR:MASTER_PORT", Job{Size: 2, CommID: "h:1"}, Share{}, ViaCommID},
		{"explicit over the job", Job{Size: 2, CommID: "h:1"}, Share{Via: ViaStore, Store: "h:3"}, ViaStore},
	} {
		got, err := Choose(c.job, c.s)
		if err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct {
		job  Job
		want string
	}{
		{Job{Size: 8, Launcher: Slurm, RootHost: "node01"},
			"launch: srun started 8 ranks but gave no way to share NCCL's unique id: set NCCL_COMM_ID=node01:<free port> on every rank (srun runs rank 0 on node01, the first node of the step), or pass -idfile with a path every rank can read"},
		{Job{Size: 2, Launcher: OpenMPI}, "set mpirun -x NCCL_COMM_ID=<rank 0's host>:<free port>, or pass -idfile"},
		{Job{Size: 2, Launcher: Torchrun}, "set MASTER_ADDR and MASTER_PORT, or NCCL_COMM_ID="},
	} {
		if _, err := Choose(c.job, Share{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c.job, err)
		}
	}
	if _, err := Choose(Job{Size: 2}, Share{Via: ViaFile}); err == nil {
		t.Error("ViaFile without a file taken")
	}
}

// ranks runs UniqueID on every rank of a job of n at once (rank 0 with lib)
// and returns their ids and errors.
func ranks(t *testing.T, lib *nccl.Library, n int, job func(r int) Job, s Share, d time.Duration) ([]nccl.UniqueID, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ids, errs := make([]nccl.UniqueID, n), make([]error, n)
	done := make(chan int)
	for r := range n {
		go func() {
			l := lib
			if r != 0 {
				l = nil // other ranks need no library
			}
			if r != 0 {
				time.Sleep(10 * time.Millisecond) // usually before rank 0; either order works
			}
			ids[r], errs[r] = UniqueID(ctx, l, job(r), s)
			done <- r
		}()
	}
	for range n {
		<-done
	}
	return ids, errs
}

func sameIDs(t *testing.T, ids []nccl.UniqueID, errs []error) {
	t.Helper()
	for r := range ids {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if ids[r] != ids[0] {
			t.Fatalf("rank %d has another id", r)
		}
	}
	if ids[0] == (nccl.UniqueID{}) {
		t.Fatal("a zero id")
	}
}

// TestUniqueIDStore: under torchrun's variables the ranks meet through the
// store at MASTER_ADDR:MASTER_PORT; the key is IDKey's; a second
// communicator under the same name is refused; names and restarts keep keys
// apart; a value that is no id is refused.
func TestUniqueIDStore(t *testing.T) {
	noLeak(t)
	t.Setenv("NCCL_COMM_ID", "")
	lib := openFake(t)
	srv := startTestServer(t, false)
	host, port, _ := strings.Cut(srv.addr(), ":")
	job := func(restart int) func(r int) Job {
		return func(r int) Job {
			j, err := detectEnv(map[string]string{"RANK": string(rune('0' + r)), "WORLD_SIZE": "3", "LOCAL_RANK": string(rune('0' + r)),
				"MASTER_ADDR": host, "MASTER_PORT": port, "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "run/1",
				"TORCHELASTIC_RESTART_COUNT": string(rune('0' + restart))})
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
	}
	ids, errs := ranks(t, lib, 3, job(0), Share{}, 5*time.Second)
	sameIDs(t, ids, errs)
	if key := IDKey(job(0)(0), ""); key != "gonccl/run%2F1/0/default/unique_id" {
		t.Errorf("IDKey: %s", key)
	}
	if v, ok := srv.value("/gonccl/run%2F1/0/default/unique_id"); !ok || string(v) != string(ids[0].Internal[:]) {
		t.Errorf("the store holds %d bytes, %v", len(v), ok)
	}
	_, err := UniqueID(bg(t), lib, job(0)(0), Share{})
	if err == nil || !strings.Contains(err.Error(), "already set: give each communicator its own Share.Name") {
		t.Errorf("a second id under one name: %v", err)
	}
	ids2, errs := ranks(t, lib, 3, job(0), Share{Name: "tp"}, 5*time.Second)
	sameIDs(t, ids2, errs)
	ids3, errs := ranks(t, lib, 3, job(1), Share{}, 5*time.Second)
	sameIDs(t, ids3, errs)
	if ids2[0] == ids[0] || ids3[0] == ids[0] {
		t.Error("another name or restart got the first id")
	}
	s := dial(t, srv.addr())
	s.Set(bg(t), IDKey(job(0)(1), "short"), []byte("abc"))
	if _, err := UniqueID(bg(t), nil, job(0)(1), Share{Name: "short"}); err == nil || !strings.Contains(err.Error(), "holds 3 bytes") {
		t.Errorf("a 3-byte id: %v", err)
	}
}

// TestUniqueIDStoreDeadline: a rank whose rank 0 never sets the key, and a
// store that never answers, end at the deadline with an error that says so.
func TestUniqueIDStoreDeadline(t *testing.T) {
	noLeak(t)
	srv := startTestServer(t, false)
	job := Job{Rank: 1, Size: 2, Launcher: Torchrun, StoreAddr: srv.addr()}
	err := timed(t, 200*time.Millisecond, func(ctx context.Context) error { _, err := UniqueID(ctx, nil, job, Share{}); return err })
	if !strings.Contains(err.Error(), "unique id via store (torchrun rank 1 of 2): waiting for rank 0 to set it") {
		t.Errorf("%v", err)
	}
	silent := rawServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	job.StoreAddr = silent
	timed(t, 200*time.Millisecond, func(ctx context.Context) error { _, err := UniqueID(ctx, nil, job, Share{}); return err })
}

// TestUniqueIDFile: rank 0 writes the id with its run; the others wait for
// it, also when they start first; Cleanup removes it.
func TestUniqueIDFile(t *testing.T) {
	lib := openFake(t)
	t.Setenv("NCCL_COMM_ID", "")
	file := filepath.Join(t.TempDir(), "id")
	job := func(r int) Job { return Job{Rank: r, Size: 3, RunID: "4242.0", Launcher: Slurm} }
	ids, errs := ranks(t, lib, 3, job, Share{File: file}, 5*time.Second)
	sameIDs(t, ids, errs)
	b, _ := os.ReadFile(file)
	if f, err := parseIDFile(b); err != nil || f.run != "4242.0" || f.id != ids[0] || time.Since(f.written) > time.Minute {
		t.Errorf("file %q: %+v, %v", b, f, err)
	}
	if _, err := UniqueID(bg(t), lib, job(0), Share{File: file}); err == nil || !strings.Contains(err.Error(), "give each communicator its own file") {
		t.Errorf("a second id in one file: %v", err)
	}
	Cleanup(job(1), Share{File: file})
	if _, err := os.Stat(file); err != nil {
		t.Errorf("rank 1's Cleanup removed the file: %v", err)
	}
	Cleanup(job(0), Share{File: file})
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Cleanup: %v", err)
	}
}

// TestUniqueIDFileStale: a file left by another run, by an earlier run
// without a distinctive RunID, or in the old format is not read as this run's
// id: the readers wait for rank 0 to replace it, and say why at the deadline.
func TestUniqueIDFileStale(t *testing.T) {
	lib := openFake(t)
	t.Setenv("NCCL_COMM_ID", "")
	var other nccl.UniqueID
	other.Internal[0] = 7
	for _, c := range []struct {
		name    string
		content []byte
		job     Job
		why     string
	}{
		{"another run", idFile{"4241.0", time.Now(), other}.encode(), Job{Size: 2, RunID: "4242.0"},
			`it is run "4241.0"'s, this is run "4242.0"`},
		{"an earlier run, no run id", idFile{"", processStart.Add(-time.Hour), other}.encode(), Job{Size: 2},
			"before this process started: a file of an earlier run"},
		{"torchrun's default run id, an hour old", idFile{"none", processStart.Add(-time.Hour), other}.encode(), Job{Size: 2, RunID: "none"},
			"before this process started"},
		{"the format before run ids", []byte(other.String() + "\n"), Job{Size: 2}, "an older format"},
		{"garbage", []byte("gonccl unique id 1\nrun x\ntime yesterday\nid 00\n"), Job{Size: 2, RunID: "x"}, "malformed time"},
	} {
		file := filepath.Join(t.TempDir(), "id")
		os.WriteFile(file, c.content, 0o600)
		reader := c.job
		reader.Rank = 1
		err := timed(t, 150*time.Millisecond, func(ctx context.Context) error { _, err := UniqueID(ctx, nil, reader, Share{File: file}); return err })
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.why)
		}
		// Rank 0 replaces the stale file; the reader then takes the new id.
		got := make(chan error, 1)
		var rid nccl.UniqueID
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			rid, err = UniqueID(ctx, nil, reader, Share{File: file})
			got <- err
		}()
		time.Sleep(30 * time.Millisecond)
		id0, err := UniqueID(bg(t), lib, c.job, Share{File: file})
		if err != nil {
			t.Fatalf("%s: rank 0: %v", c.name, err)
		}
		if err := <-got; err != nil || rid != id0 || id0 == other {
			t.Errorf("%s: rank 1 after the rewrite: %v", c.name, err)
		}
	}
	// A file of this run written a moment before a reader started (it started
	// late) is this run's.
	file := filepath.Join(t.TempDir(), "id")
	os.WriteFile(file, idFile{"", processStart.Add(-10 * time.Second), other}.encode(), 0o600)
	if id, err := UniqueID(bg(t), nil, Job{Rank: 1, Size: 2}, Share{File: file}); err != nil || id != other {
		t.Errorf("a file written 10 s before the reader started: %v", err)
	}
}

// TestUniqueIDCommID: NCCL_COMM_ID, or MASTER_ADDR:MASTER_PORT where no store
// listens, gives every rank the same id; NCCL_COMM_ID on torchrun's store is
// refused.
func TestUniqueIDCommID(t *testing.T) {
	lib := openFake(t)
	t.Setenv("NCCL_COMM_ID", "")
	job, err := detectEnv(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29599"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := UniqueID(bg(t), lib, job, Share{})
	if err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("NCCL_COMM_ID"); got != "127.0.0.1:29599" {
		t.Errorf("NCCL_COMM_ID = %q", got)
	}
	job.Rank = 1
	if b, err := UniqueID(bg(t), lib, job, Share{}); err != nil || a != b {
		t.Errorf("rank 1: %v, %v; rank 0 has %v", b, err, a)
	}
	t.Setenv("NCCL_COMM_ID", "node0:29500")
	_, err = UniqueID(bg(t), lib, Job{Size: 2, StoreAddr: "node0:29500", CommID: "node0:29500", Launcher: Torchrun}, Share{})
	if err == nil || !strings.Contains(err.Error(), "is where torchrun's store listens") {
		t.Errorf("NCCL_COMM_ID on the store: %v", err)
	}
	if _, err := UniqueID(bg(t), lib, Job{Size: 2, Launcher: Slurm}, Share{}); err == nil || !strings.Contains(err.Error(), "no way to share") {
		t.Errorf("no way: %v", err)
	}
}

// TestUniqueIDNeedsLibrary: a nil library is an error where GetUniqueID must
// run (rank 0, and every rank through NCCL_COMM_ID), never a panic.
func TestUniqueIDNeedsLibrary(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:29581")
	for _, rank := range []int{0, 1} {
		job, err := DetectWith(Options{Size: 2, Rank: rank, LocalRank: rank})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := UniqueID(context.Background(), nil, job, Share{}); err == nil || !strings.Contains(err.Error(), "no library") {
			t.Fatalf("rank %d, nil library: %v", rank, err)
		}
	}
}

// TestUniqueIDCommIDOneName: NCCL_COMM_ID yields one id per process, so a
// second communicator's name is refused on that way instead of silently
// getting the first one's id.
func TestUniqueIDCommIDOneName(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:29582")
	job, err := DetectWith(Options{Size: 2, Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	lib := openFake(t)
	if _, err := UniqueID(context.Background(), lib, job, Share{Name: "pipeline"}); err == nil || !strings.Contains(err.Error(), `"pipeline"`) {
		t.Fatalf("named communicator via NCCL_COMM_ID: %v", err)
	}
	if _, err := UniqueID(context.Background(), lib, job, Share{}); err != nil {
		t.Fatalf("the default name: %v", err)
	}
}
