package launch

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// torchPython returns a Python that imports torch.distributed:
// $GONCCL_TEST_PYTHON, else python3 on the PATH, else /usr/bin/python3
// (Debian's python3-torch). The test is skipped without one.
func torchPython(t *testing.T) string {
	t.Helper()
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("GONCCL_TEST_PYTHON"); p != "" {
		cands = []string{p}
	}
	for _, p := range cands {
		if exec.Command(p, "-c", "import torch.distributed as d; d.TCPStore").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 that imports torch.distributed (apt-get install python3-torch, or set GONCCL_TEST_PYTHON)")
	return ""
}

// The Python side: a real torch.distributed.TCPStore server (libuv from
// PyTorch 2.4, the legacy daemon before), driven line by line.
const torchScript = `
import sys, datetime, torch, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=30), wait_for_workers=False)
s.set("from_py", b"\x00py\xff")
print("port", s.port, torch.__version__, flush=True)
key = sys.stdin.readline().split()[1]
print("from_go", s.get("from_go").hex(), flush=True)
print("counter", s.add("counter", 10), flush=True)
print("id", s.get(key).hex(), flush=True)
s.set("late", b"L")
sys.stdin.readline()
`

// TestTorchStore: PyTorch's own TCPStore server and the Go client exchange
// keys both ways (set, get, add, check, wait), a Go rank 0 shares an NCCL id
// through it that Python reads under IDKey, and a Go wait that its deadline
// ends leaves the store usable where the server has CANCEL_WAIT.
func TestTorchStore(t *testing.T) {
	py := torchPython(t)
	lib := openFake(t)
	t.Setenv("NCCL_COMM_ID", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", torchScript)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	out := bufio.NewScanner(stdout)
	line := func(want string) []string {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("python stopped before %q: %v", want, out.Err())
		}
		f := strings.Fields(out.Text())
		if len(f) < 2 || f[0] != want {
			t.Fatalf("python said %q, want %q", out.Text(), want)
		}
		return f[1:]
	}
	hello := line("port")
	addr := "127.0.0.1:" + hello[0]
	t.Logf("torch %s, store at %s", hello[1], addr)

	s, err := DialStore(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("legacy protocol: %v", s.Legacy())
	if v, err := s.Get(ctx, "from_py"); err != nil || string(v) != "\x00py\xff" {
		t.Errorf("Get from_py: %q, %v", v, err)
	}
	if err := s.Set(ctx, "from_go", []byte{1, 2, 3, 0}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Add(ctx, "counter", 5); err != nil || n != 5 {
		t.Errorf("Add: %d, %v", n, err)
	}
	job := Job{Size: 2, Launcher: Torchrun, RunID: "py", StoreAddr: addr}
	id, err := UniqueID(ctx, lib, job, Share{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go-done", IDKey(job, ""))
	if got := line("from_go")[0]; got != "01020300" {
		t.Errorf("Python got from_go %s", got)
	}
	if got := line("counter")[0]; got != "15" {
		t.Errorf("Python's add gave %s, want 15", got)
	}
	if got := line("id")[0]; got != hex.EncodeToString(id.Internal[:]) {
		t.Errorf("Python read the id %s, Go shared %s", got, id)
	}
	if v, err := s.Get(ctx, "late"); err != nil || string(v) != "L" {
		t.Errorf("Get late: %q, %v", v, err)
	}
	job.Rank = 1
	if got, err := UniqueID(ctx, nil, job, Share{}); err != nil || got != id {
		t.Errorf("rank 1 through PyTorch's store: %v", err)
	}
	if ok, err := s.Check(ctx, "counter", "late"); !ok || err != nil {
		t.Errorf("Check: %v, %v", ok, err)
	}
	timed(t, 200*time.Millisecond, func(ctx context.Context) error { return s.Wait(ctx, "never") })
	_, err = s.Check(ctx, "late")
	if s.Legacy() {
		if err == nil {
			t.Error("a legacy store took a call after an interrupted wait")
		}
	} else if err != nil {
		t.Errorf("after a withdrawn wait: %v", err)
	}
	fmt.Fprintln(stdin, "bye")
	if _, err := io.Copy(io.Discard, stdout); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Log(err)
	}
}
