package nccl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
	"github.com/gonccl/nccl/internal/fakes"
)

// The fakes behave as NCCL does where ranks meet (nccltest/csrc/fakenccl/, the hub in hub.c): ranks
// of different processes meet over loopback TCP (NCCL_COMM_ID, or an id from
// GetUniqueID handed over as text) and their collectives move real bytes;
// mismatched collectives fail loudly; a communicator's first operation waits
// until its peers issue theirs (NCCL's lazy connection), so one goroutine
// driving several ranks needs Group. The test binary starts itself as the
// ranks' processes (TestFakeMPChild). Each test fails on fakes without these.

// connectRanks runs one all-reduce on every communicator of comms together,
// in one group, and waits for it: NCCL (2.22 and later) connects the ranks
// inside their first operation, so a test that then lets one rank run alone
// (a peer that never joins, a goroutine driving several ranks) connects them
// first.
func connectRanks(t testing.TB, l *nccl.Library, comms ...*nccl.Comm) {
	t.Helper()
	cu := l.CUDA()
	bufs := make([]nccl.Buffer, len(comms))
	streams := make([]nccl.Stream, len(comms))
	for i, c := range comms {
		var err error
		if bufs[i], err = cu.Alloc(c.Device(), nccl.Float32, 1); err != nil {
			t.Fatal(err)
		}
		defer bufs[i].Free()
		if streams[i], err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
		defer streams[i].Destroy()
	}
	err := l.Group(func() error {
		for i, c := range comms {
			if err := c.AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, c := range comms {
		if err := c.Wait(ctx, streams[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// ---- processes ----

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// mpProc is one process of a job: this test binary running TestFakeMPChild.
type mpProc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

// startMP starts a child running scenario with env added to this process's.
func startMP(t *testing.T, name, scenario string, env ...string) *mpProc {
	t.Helper()
	args := []string{"-test.run=^TestFakeMPChild$", "-test.timeout=60s", "-test.v"}
	cmd := fakes.SelfCommand(context.Background(), args...)
	cmd.Env = append(os.Environ(), "GONCCL_FAKE_DIR="+nccl.FakeDir(t), "GONCCL_MP="+scenario, "FAKECUDA_DELAY_US=20")
	cmd.Env = append(cmd.Env, env...)
	p := &mpProc{name: name, cmd: cmd, out: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

// waitFor waits until the process's output contains s.
func (p *mpProc) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(end) {
			t.Fatalf("%s: no %q after %v; output:\n%s", p.name, s, limit, p.out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAll waits for every process to exit within limit; any that fails or is
// still running then fails the test with its output.
func waitAll(t *testing.T, limit time.Duration, procs ...*mpProc) {
	t.Helper()
	end := time.After(limit)
	failed := false
	for _, p := range procs {
		select {
		case err := <-p.done:
			p.done <- err
			if err != nil {
				failed = true
				t.Errorf("%s: %v", p.name, err)
			}
		case <-end:
			failed = true
			t.Errorf("%s: still running after %v", p.name, limit)
			end = time.After(0)
		}
	}
	if failed {
		for _, p := range procs {
			p.cmd.Process.Kill()
			t.Logf("%s output:\n%s", p.name, p.out)
		}
		t.FailNow()
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// runJob starts one process per entry of layout (the ranks it holds) running
// scenario, and waits for all of them.
func runJob(t *testing.T, scenario string, layout [][]int, env ...string) []*mpProc {
	t.Helper()
	n := 0
	for _, ranks := range layout {
		n += len(ranks)
	}
	var procs []*mpProc
	for i, ranks := range layout {
		procs = append(procs, startMP(t, fmt.Sprintf("process %d (ranks %v)", i, ranks), scenario,
			append([]string{"GONCCL_MP_RANKS=" + joinInts(ranks), "GONCCL_MP_N=" + strconv.Itoa(n)}, env...)...))
	}
	waitAll(t, 25*time.Second, procs...)
	return procs
}

var mpLayouts = []struct {
	name   string
	layout [][]int
}{
	{"2procs", [][]int{{0}, {1}}},
	{"3procs", [][]int{{0}, {1}, {2}}},
	{"2+1", [][]int{{0, 1}, {2}}},
	{"1+2", [][]int{{2}, {0, 1}}},
}

// TestFakeMultiProcessCommID: jobs of 2 and 3 processes (and one process with
// 2 ranks beside one with 1) meet at NCCL_COMM_ID, rank 0's process hosting
// the rendezvous, with blocking communicators; every collective, type and
// reduction family with random data, a send/receive ring, all-to-all-v and a
// split across processes, every element checked in each process.
func TestFakeMultiProcessCommID(t *testing.T) {
	for _, lc := range mpLayouts[:3] {
		t.Run(lc.name, func(t *testing.T) {
			runJob(t, "job", lc.layout, "NCCL_COMM_ID="+freeAddr(t), "GONCCL_MP_BLOCKING=1")
		})
	}
	t.Run("vccl11", func(t *testing.T) { // the native ncclAlltoAllv on symmetric windows
		runJob(t, "job", mpLayouts[2].layout, "NCCL_COMM_ID="+freeAddr(t), "GONCCL_MP_VARIANT=vccl11", "GONCCL_MP_BLOCKING=1")
	})
}

// TestFakeMultiProcessUniqueID: the id comes from GetUniqueID in this process
// (the hub, holding no rank) and reaches the ranks' processes as text;
// non-blocking communicators.
func TestFakeMultiProcessUniqueID(t *testing.T) {
	l := open(t, "default")
	t.Setenv("NCCL_COMM_ID", "")
	for _, lc := range []struct {
		name   string
		layout [][]int
	}{mpLayouts[0], mpLayouts[1], mpLayouts[3]} {
		t.Run(lc.name, func(t *testing.T) {
			id, err := l.GetUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			runJob(t, "job", lc.layout, "GONCCL_MP_ID="+id.String())
		})
	}
}

const mismatchText = "fakenccl: collective #1 mismatch: rank 0 called AllReduce(count 1024, float32, sum) but rank 1 called Broadcast(count 1024, float32, root 0)"

// TestFakeMultiProcessMismatch: rank 0 (one process) calls AllReduce where
// rank 1 (another) calls Broadcast: both fail with NCCL's invalid usage, the
// text naming both calls in each process's stderr and last error, and no data
// moves.
func TestFakeMultiProcessMismatch(t *testing.T) {
	l := open(t, "default")
	t.Setenv("NCCL_COMM_ID", "")
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	procs := runJob(t, "mismatch", [][]int{{0}, {1}}, "GONCCL_MP_ID="+id.String())
	for _, p := range procs {
		if got := strings.Count(p.out.String(), mismatchText+"\n"); got != 1 {
			t.Errorf("%s: the mismatch said %d times on stderr, want once; output:\n%s", p.name, got, p.out)
		}
	}
}

// TestFakeMismatchInProcess: the same with the ranks as goroutines, and
// mismatches of count, type, op and root.
func TestFakeMismatchInProcess(t *testing.T) {
	l := open(t, "default")
	for _, tc := range []struct {
		name string
		call func(c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error
		want string
	}{
		{"op", func(c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error {
			if c.Rank() == 0 {
				return c.AllReduce(b, b, nccl.Sum, s)
			}
			return c.Broadcast(b, b, 0, s)
		}, mismatchText},
		{"count", func(c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error {
			return c.AllReduce(b.Slice(0, 1024-c.Rank()*512), b.Slice(0, 1024-c.Rank()*512), nccl.Sum, s)
		}, "rank 0 called AllReduce(count 1024, float32, sum) but rank 1 called AllReduce(count 512, float32, sum)"},
		{"reduction", func(c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error {
			return c.AllReduce(b, b, []nccl.RedOp{nccl.Sum, nccl.Max}[c.Rank()], s)
		}, "rank 0 called AllReduce(count 1024, float32, sum) but rank 1 called AllReduce(count 1024, float32, max)"},
		{"root", func(c *nccl.Comm, b nccl.Buffer, s nccl.Stream) error {
			return c.Broadcast(b, b, c.Rank(), s)
		}, "rank 0 called Broadcast(count 1024, float32, root 0) but rank 1 called Broadcast(count 1024, float32, root 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranks := initRanks(t, l, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r, rk := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = mismatchRank(l, rk, func(b nccl.Buffer) error { return tc.call(rk.comm, b, rk.s) })
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			if got := l.LastError(); !strings.Contains(got, tc.want) {
				t.Errorf("last error %q, want it to say %q", got, tc.want)
			}
		})
	}
}

// mismatchRank runs a collective that the other rank calls differently and
// checks that it fails as NCCL's invalid usage, that the last error says so,
// and that its buffer is untouched.
func mismatchRank(l *nccl.Library, rk rank, call func(b nccl.Buffer) error) error {
	cu := l.CUDA()
	b, err := cu.Alloc(rk.dev, nccl.Float32, 1024)
	if err != nil {
		return err
	}
	defer b.Free()
	host := make([]float32, 1024)
	for i := range host {
		host[i] = float32(rk.comm.Rank()*10000 + i)
	}
	if err := nccl.CopyIn(b, host); err != nil {
		return err
	}
	// A non-blocking communicator may say so as the call settles, a
	// blocking one when Wait asks.
	err = call(b)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err = rk.comm.Wait(ctx, rk.s)
	}
	if !errors.Is(err, nccl.ErrInvalidUsage) {
		return fmt.Errorf("the collective: %v, want ncclInvalidUsage", err)
	}
	if err := rk.comm.AsyncError(); !errors.Is(err, nccl.ErrInvalidUsage) || !strings.Contains(err.Error(), "mismatch") {
		return fmt.Errorf("AsyncError = %v, want ncclInvalidUsage saying what differed", err)
	}
	if err == nil || !strings.Contains(err.Error(), "mismatch") {
		return fmt.Errorf("the collective's error %v does not say what differed", err)
	}
	if got := l.LastError(); !strings.Contains(got, "mismatch") {
		return fmt.Errorf("last error %q", got)
	}
	if err := rk.s.Synchronize(); err != nil {
		return err
	}
	got := make([]float32, 1024)
	if err := nccl.CopyOut(got, b); err != nil {
		return err
	}
	if !slices.Equal(got, host) {
		return errors.New("data moved in a mismatched collective")
	}
	return nil
}

// TestFakeOneThreadNeedsGroup: one goroutine, locked to its thread, issuing
// the first all-reduce of rank 0 and then of rank 1 without a group waits in
// rank 0's (NCCL connects the peers there) until Abort ends it with ErrClosed;
// the same calls inside Group complete. Goroutine-per-rank code is the rest of
// the suite.
func TestFakeOneThreadNeedsGroup(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	setup := func(t *testing.T) ([]*nccl.Comm, []nccl.Buffer, []nccl.Stream) {
		comms := initComms(t, l, 2, nonBlockingCtx(t), nil)
		bufs := make([]nccl.Buffer, 2)
		streams := make([]nccl.Stream, 2)
		for r := range 2 {
			var err error
			if bufs[r], err = cu.Alloc(r, nccl.Int32, 64); err != nil {
				t.Fatal(err)
			}
			if err := nccl.CopyIn(bufs[r], slices.Repeat([]int32{int32(r + 1)}, 64)); err != nil {
				t.Fatal(err)
			}
			if streams[r], err = cu.NewStream(r, nccl.StreamNonBlocking); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				comms[r].Abort()
				streams[r].Synchronize()
				streams[r].Destroy()
				bufs[r].Free()
			})
		}
		return comms, bufs, streams
	}
	t.Run("NoGroup", func(t *testing.T) {
		comms, bufs, streams := setup(t)
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for r := range 2 {
				if err := comms[r].AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
					done <- fmt.Errorf("rank %d: %w", r, err)
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			t.Fatalf("one goroutine's first all-reduces of two ranks returned (%v) without a group: NCCL waits in rank 0's for rank 1 to connect", err)
		case <-time.After(300 * time.Millisecond):
		}
		for _, c := range comms {
			c.Abort()
		}
		select {
		case err := <-done:
			if !errors.Is(err, nccl.ErrClosed) {
				t.Fatalf("after Abort: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Abort did not end the wait")
		}
	})
	t.Run("Group", func(t *testing.T) {
		comms, bufs, streams := setup(t)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := l.Group(func() error {
			for r := range 2 {
				if err := comms[r].AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for r := range 2 {
			if err := comms[r].Wait(ctx, streams[r]); err != nil {
				t.Fatal(err)
			}
			got := make([]int32, 64)
			if err := nccl.CopyOut(got, bufs[r]); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, slices.Repeat([]int32{3}, 64)) {
				t.Fatalf("rank %d: %v", r, got[:4])
			}
		}
	})
}

// TestFakeOneThreadBlockingRefused: the same with blocking communicators
// (ncclCommInitAll) would hang inside ncclAllReduce, as NCCL does (the fake
// says why on stderr after FAKENCCL_CONNECT_WARN_MS). gonccl refuses the call
// before C once the maker of the ranks has waited ArrivalGrace (the default,
// in a process of its own) for the other ranks from other goroutines.
func TestFakeOneThreadBlockingRefused(t *testing.T) {
	p := startMP(t, "child", "onethread", "FAKENCCL_CONNECT_WARN_MS=100")
	p.waitFor(t, "STARTED", 20*time.Second)
	p.waitFor(t, "REFUSED", nccl.ArrivalGrace+2*time.Second)
	out := p.out.String()
	if strings.Contains(out, "fakenccl: ncclAllReduce on rank 0 waits") || strings.Contains(out, "RETURNED") {
		t.Fatalf("the call reached the fake library; output:\n%s", out)
	}
	if !strings.Contains(out, "ncclInvalidUsage") || !strings.Contains(out, "one Group") {
		t.Fatalf("refused without ncclInvalidUsage and the advice; output:\n%s", out)
	}
}

// TestFakeCommIDBindConflict: rank 0 listens at NCCL_COMM_ID as NCCL does; an
// address taken (by another program, or by another job's rank 0 still
// gathering its ranks) fails its init with ncclSystemError, "Call to bind
// failed: Address already in use", at once.
func TestFakeCommIDBindConflict(t *testing.T) {
	l := open(t, "default")
	check := func(t *testing.T, addr string) {
		t.Helper()
		t.Setenv("NCCL_COMM_ID", addr)
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		c, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil))
		if c != nil {
			c.Abort()
		}
		if !errors.Is(err, nccl.ErrSystem) || !strings.Contains(err.Error(), "Address already in use") {
			t.Fatalf("InitRank of rank 0 at a taken address: %v, want ncclSystemError, Address already in use", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Fatalf("the failure took %v", el)
		}
		if got := l.LastError(); got != "Call to bind failed: Address already in use" {
			t.Fatalf("last error %q", got)
		}
	}
	t.Run("another program", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		check(t, ln.Addr().String())
	})
	t.Run("another job", func(t *testing.T) {
		addr := freeAddr(t)
		t.Setenv("NCCL_COMM_ID", addr)
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() { // rank 0 of a job whose rank 1 never comes
			_, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil))
			first <- err
		}()
		time.Sleep(100 * time.Millisecond)
		check(t, addr)
		cancel()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("the first job's rank 0: %v", err)
		}
		// Its address is free again: a whole job meets there.
		runJob(t, "job-lite", [][]int{{0}, {1}}, "NCCL_COMM_ID="+addr)
	})
}

// TestFakeMultiProcessPeerKilled: a peer process of the same node killed
// while the other is inside a collective is not detected (as with NCCL over
// SHM and P2P, short of its timeouts; across nodes see
// TestFakeFaultMultiProcessNodeLost):
// the survivor waits until its context's deadline, then Abort frees its
// communicator and it exits cleanly. Killed: the hub (rank 0 at NCCL_COMM_ID),
// or a rank whose hub is this process.
func TestFakeMultiProcessPeerKilled(t *testing.T) {
	run := func(t *testing.T, victim, survivor *mpProc) {
		victim.waitFor(t, "READY", 20*time.Second)
		survivor.waitFor(t, "ISSUED", 20*time.Second)
		victim.cmd.Process.Signal(syscall.SIGKILL)
		waitAll(t, 20*time.Second, survivor)
		survivor.waitFor(t, "SURVIVED", time.Second)
	}
	t.Run("hub", func(t *testing.T) {
		addr := freeAddr(t)
		victim := startMP(t, "rank 0 (hub)", "killed", "GONCCL_MP_VICTIM=1", "GONCCL_MP_RANKS=0", "GONCCL_MP_N=2", "NCCL_COMM_ID="+addr)
		survivor := startMP(t, "rank 1", "killed", "GONCCL_MP_RANKS=1", "GONCCL_MP_N=2", "NCCL_COMM_ID="+addr)
		run(t, victim, survivor)
	})
	t.Run("rank", func(t *testing.T) {
		l := open(t, "default")
		t.Setenv("NCCL_COMM_ID", "")
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		survivor := startMP(t, "rank 0", "killed", "GONCCL_MP_RANKS=0", "GONCCL_MP_N=2", "GONCCL_MP_ID="+id.String())
		victim := startMP(t, "rank 1", "killed", "GONCCL_MP_VICTIM=1", "GONCCL_MP_RANKS=1", "GONCCL_MP_N=2", "GONCCL_MP_ID="+id.String())
		run(t, victim, survivor)
	})
}

// TestFakeRemoteRankLeavesNothing: a rank whose rendezvous is in another
// process (this one, the hub) leaves no thread, socket, allocation or
// communicator behind once closed or aborted, blocking or not, after an
// operation or in the middle of its init; nor does the hub once that process
// has closed them.
func TestFakeRemoteRankLeavesNothing(t *testing.T) {
	l := open(t, "default")
	t.Setenv("NCCL_COMM_ID", "")
	var ids []string
	for range 16 {
		id, err := l.GetUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.String())
	}
	// The root's thread (GetUniqueID started it) names itself when it runs.
	before := settleTo(t, fakeResources{threads: 1, fds: 1 << 30, comms: 1 << 30, allocs: 1 << 30})
	for end := time.Now().Add(2 * time.Second); before.threads < 1 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		before = countFake(t)
	}
	p := startMP(t, "child", "leak", "GONCCL_MP_IDS="+strings.Join(ids, ","))
	waitAll(t, 25*time.Second, p)
	if after := settleTo(t, before); after.threads > before.threads || after.fds > before.fds {
		t.Fatalf("the hub: %+v after the rank's process, %+v before", after, before)
	}
}

// fakeResources is what a communicator could leave behind: the fake NCCL's
// threads (named fakenccl-...), open files, live fake communicators, fake
// device allocations. (Go's own threads, which it keeps, are not counted.)
type fakeResources struct{ threads, fds, comms, allocs int }

func countFake(t *testing.T) fakeResources {
	t.Helper()
	var r fakeResources
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		if name, err := os.ReadFile("/proc/self/task/" + e.Name() + "/comm"); err == nil && strings.HasPrefix(string(name), "fakenccl-") {
			r.threads++
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	r.fds = len(fds)
	r.comms = int(int32(lcCall(lcSym(t, "nccl", "fakenccl_live_comms"))))
	r.allocs = int(lcCall(lcSym(t, "cudart", "fakecuda_live_allocations")))
	return r
}

// settleTo waits up to 5 s for the count to come down to want (threads end
// and sockets close on their own time) and returns the last count.
func settleTo(t *testing.T, want fakeResources) fakeResources {
	t.Helper()
	var r fakeResources
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if r = countFake(t); r.threads <= want.threads && r.fds <= want.fds && r.comms <= want.comms && r.allocs <= want.allocs {
			break
		}
	}
	return r
}

// ---- the ranks' side ----

// TestFakeMPChild is one process of the tests above (GONCCL_MP names what it
// does; GONCCL_MP_RANKS the ranks it holds of GONCCL_MP_N; the id is
// GONCCL_MP_ID, or comes from NCCL_COMM_ID).
func TestFakeMPChild(t *testing.T) {
	scenario := os.Getenv("GONCCL_MP")
	if scenario == "" {
		return // not a child (and no skip: scripts/test-arm64.sh fails on unexpected skips)
	}
	switch scenario {
	case "onethread":
		mpOneThread(t)
		return
	case "leak":
		mpLeak(t)
		return
	}
	variant := os.Getenv("GONCCL_MP_VARIANT")
	if variant == "" {
		variant = "default"
	}
	l := open(t, variant)
	ctx := context.Background() // blocking communicators
	if os.Getenv("GONCCL_MP_BLOCKING") == "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	ranks := mpInit(t, l, ctx)
	switch scenario {
	case "job":
		mpCollectives(t, l, ranks)
		mpRing(t, l, ranks)
		mpAlltoAllv(t, l, ranks)
		mpSplit(t, l, ranks, ctx)
		mpGatherP2P(t, l, ranks) // last: rank 0 only receives, then closes
	case "job-lite":
		mpRing(t, l, ranks)
	case "mismatch":
		mpMismatch(t, l, ranks)
		for _, rk := range ranks { // broken: its async error stays; Close would report it
			if rk.comm != nil {
				rk.comm.Abort()
				rk.s.Destroy()
			}
		}
		return
	case "killed":
		mpKilled(t, l, ranks)
		return // its communicator is gone: nothing to close
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
	mpClose(t, ranks)
	fmt.Printf("%s: ranks %s of %d done\n", scenario, os.Getenv("GONCCL_MP_RANKS"), len(ranks))
}

// mpInit makes this process's ranks, one goroutine each; the others' entries
// stay empty.
func mpInit(t *testing.T, l *nccl.Library, ctx context.Context) []rank {
	n, err := strconv.Atoi(os.Getenv("GONCCL_MP_N"))
	if err != nil {
		t.Fatal(err)
	}
	var mine []int
	for _, s := range strings.Split(os.Getenv("GONCCL_MP_RANKS"), ",") {
		r, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, r)
	}
	var id nccl.UniqueID
	if s := os.Getenv("GONCCL_MP_ID"); s != "" {
		id, err = nccl.ParseUniqueID(s)
	} else {
		id, err = l.GetUniqueID() // from NCCL_COMM_ID: the same in every process
	}
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]rank, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for _, r := range mine {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := l.InitRank(ctx, r%8, id, n, r, modeOf(ctx, nil))
			if err != nil {
				errs[r] = err
				return
			}
			s, err := l.CUDA().NewStream(r%8, nccl.StreamNonBlocking)
			ranks[r] = rank{comm: c, s: s, dev: r % 8}
			errs[r] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, r := range mine {
		if c := ranks[r].comm; c.Rank() != r || c.Size() != n {
			t.Fatalf("rank %d: comm says rank %d of %d", r, c.Rank(), c.Size())
		}
	}
	return ranks
}

// mpEach runs fn for each of this process's ranks, one goroutine each.
func mpEach(t *testing.T, ranks []rank, fn func(r int, rk rank) error) {
	t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, rk := range ranks {
		if rk.comm == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, rk)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func mpClose(t *testing.T, ranks []rank) {
	mpEach(t, ranks, func(r int, rk rank) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		defer rk.s.Destroy()
		return rk.comm.Close(ctx)
	})
}

// mpCollectives runs every collective with every type, in place and not, each
// type with a reduction in turn, on inputs drawn in rank order from one seed
// in every process; runCollective checks this process's results.
func mpCollectives(t *testing.T, l *nccl.Library, ranks []rank) {
	n := len(ranks)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for i, cc := range collCases(n - 1) {
		for j, dt := range allTypes(l) {
			red := reduction{name: "none"}
			if cc.reduces {
				red = reductions[(i+j)%len(reductions)]
			}
			runCollective(t, l, ranks, cc, dt, red, false, rng)
			if cc.inPlace(0, n) >= 0 {
				runCollective(t, l, ranks, cc, dt, red, true, rng)
			}
		}
	}
	t.Logf("%d results checked, %d elements", checked.cases.Load(), checked.elements.Load())
}

// mpRing sends around the ring in groups, three types of random data.
func mpRing(t *testing.T, l *nccl.Library, ranks []rank) {
	n := len(ranks)
	const elems = 1001
	for _, dt := range []nccl.DataType{nccl.Uint8, nccl.Bfloat16, nccl.Float64} {
		rng := rand.New(rand.NewPCG(uint64(dt), 11))
		in := make([][]byte, n)
		for r := range n {
			vals := make([]float64, elems)
			for i := range vals {
				vals[i] = collectives.Random(rng, dt, nccl.Sum)
			}
			in[r] = collectives.Encode(dt, vals)
		}
		mpEach(t, ranks, func(r int, rk rank) error {
			cu := l.CUDA()
			send, err := cu.Alloc(rk.dev, dt, elems)
			if err != nil {
				return err
			}
			defer send.Free()
			recv, err := cu.Alloc(rk.dev, dt, elems)
			if err != nil {
				return err
			}
			defer recv.Free()
			if err := send.WriteBytes(in[r]); err != nil {
				return err
			}
			err = l.Group(func() error {
				if err := rk.comm.Send(send, (r+1)%n, rk.s); err != nil {
					return err
				}
				return rk.comm.Recv(recv, (r+n-1)%n, rk.s)
			})
			if err != nil {
				return err
			}
			if err := rk.s.Synchronize(); err != nil {
				return err
			}
			got := make([]byte, len(in[r]))
			if err := recv.ReadBytes(got); err != nil {
				return err
			}
			if i := collectives.Mismatch(dt, got, in[(r+n-1)%n]); i >= 0 {
				return fmt.Errorf("ring %v: element %d from rank %d differs", dt, i, (r+n-1)%n)
			}
			return nil
		})
	}
}

// mpGatherP2P sends every rank's block to rank 0, which only receives: its
// process may close and exit once it has them, and the senders must still
// learn that their sends completed.
func mpGatherP2P(t *testing.T, l *nccl.Library, ranks []rank) {
	n := len(ranks)
	const elems = 333
	mpEach(t, ranks, func(r int, rk rank) error {
		cu := l.CUDA()
		b, err := cu.Alloc(rk.dev, nccl.Int32, elems*n)
		if err != nil {
			return err
		}
		defer b.Free()
		host := make([]int32, elems*n)
		for i := range elems {
			host[r*elems+i] = int32(r<<20 | i)
		}
		if err := nccl.CopyIn(b, host); err != nil {
			return err
		}
		err = l.Group(func() error {
			if r != 0 {
				return rk.comm.Send(b.Slice(r*elems, (r+1)*elems), 0, rk.s)
			}
			for p := 1; p < n; p++ {
				if err := rk.comm.Recv(b.Slice(p*elems, (p+1)*elems), p, rk.s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := rk.s.Synchronize(); err != nil {
			return err
		}
		if r != 0 {
			return nil
		}
		if err := nccl.CopyOut(host, b); err != nil {
			return err
		}
		for i, v := range host {
			if want := int32(i/elems<<20 | i%elems); v != want {
				return fmt.Errorf("gather: element %d = %#x, want %#x", i, v, want)
			}
		}
		return nil
	})
}

// mpAlltoAllv exchanges uneven blocks with gaps between them in the receive
// buffers (which must keep their bytes), on symmetric buffers: the native
// ncclAlltoAllv where the library has it (VCCL), grouped sends otherwise.
func mpAlltoAllv(t *testing.T, l *nccl.Library, ranks []rank) {
	n := len(ranks)
	dt := nccl.Float16
	sc, sd := make([]uint64, n*n), make([]uint64, n*n)
	rc, rd := make([]uint64, n*n), make([]uint64, n*n)
	for i := range n {
		var off uint64
		for j := range n {
			sc[i*n+j], sd[i*n+j] = uint64(3*i+j+1), off
			off += sc[i*n+j] + 2
		}
	}
	for j := range n {
		var off uint64
		for i := range n {
			rc[j*n+i], rd[j*n+i] = sc[i*n+j], off+1
			off += rc[j*n+i] + 3
		}
	}
	m := nccl.Layout{SendCounts: sc, SendDispls: sd, RecvCounts: rc, RecvDispls: rd}
	const size = 256
	rng := rand.New(rand.NewPCG(uint64(n), 13))
	sends, recvs := make([][]byte, n), make([][]byte, n)
	for r := range n {
		vals := make([]float64, size)
		for i := range vals {
			vals[i] = collectives.Random(rng, dt, nccl.Sum)
		}
		sends[r] = collectives.Encode(dt, vals)
		recvs[r] = repeat(dt, size, 7)
	}
	want := collectives.AlltoAllv(dt, m, sends, recvs)
	native := false // the same on every rank: ask this process's first
	for _, rk := range ranks {
		if rk.comm != nil {
			native = rk.comm.PathOf("AlltoAllv") == nccl.Native
			break
		}
	}
	mpEach(t, ranks, func(r int, rk rank) error {
		send, err := rk.comm.AllocSymmetric(dt, size) // collective: one goroutine per rank
		if err != nil {
			return err
		}
		defer send.Free()
		recv, err := rk.comm.AllocSymmetric(dt, size)
		if err != nil {
			return err
		}
		defer recv.Free()
		if err := send.WriteBytes(sends[r]); err != nil {
			return err
		}
		if err := recv.WriteBytes(recvs[r]); err != nil {
			return err
		}
		if err := rk.comm.AlltoAllv(send, recv, m, rk.s); err != nil {
			return err
		}
		if err := rk.s.Synchronize(); err != nil {
			return err
		}
		got := make([]byte, len(want[r]))
		if err := recv.ReadBytes(got); err != nil {
			return err
		}
		if i := collectives.Mismatch(dt, got, want[r]); i >= 0 {
			return fmt.Errorf("alltoallv: element %d differs", i)
		}
		return nil
	})
	t.Logf("alltoallv checked (native: %v)", native)
}

// mpSplit splits the ranks across processes (color rank%2, keys reversed;
// one color for two ranks) and sums in each new communicator.
func mpSplit(t *testing.T, l *nccl.Library, ranks []rank, ctx context.Context) {
	n := len(ranks)
	color := func(r int) int {
		if n == 2 {
			return 0
		}
		return r % 2
	}
	mpEach(t, ranks, func(r int, rk rank) error {
		sub, err := rk.comm.Split(ctx, color(r), -r, nil)
		if err != nil {
			return err
		}
		defer sub.Close(ctx)
		var members []int
		for p := n - 1; p >= 0; p-- { // by key: reversed
			if color(p) == color(r) {
				members = append(members, p)
			}
		}
		if me := slices.Index(members, r); sub.Rank() != me || sub.Size() != len(members) {
			return fmt.Errorf("split: rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), me, len(members))
		}
		const elems = 100
		b, err := l.CUDA().Alloc(rk.dev, nccl.Int64, elems)
		if err != nil {
			return err
		}
		defer b.Free()
		host := make([]int64, elems)
		for i := range host {
			host[i] = int64((r + 1) * (i + 1))
		}
		if err := nccl.CopyIn(b, host); err != nil {
			return err
		}
		if err := sub.AllReduce(b, b, nccl.Sum, rk.s); err != nil {
			return err
		}
		if err := rk.s.Synchronize(); err != nil {
			return err
		}
		if err := nccl.CopyOut(host, b); err != nil {
			return err
		}
		sum := 0
		for _, p := range members {
			sum += p + 1
		}
		for i, v := range host {
			if v != int64(sum*(i+1)) {
				return fmt.Errorf("split all-reduce: element %d = %d, want %d", i, v, sum*(i+1))
			}
		}
		return nil
	})
}

func mpMismatch(t *testing.T, l *nccl.Library, ranks []rank) {
	mpEach(t, ranks, func(r int, rk rank) error {
		return mismatchRank(l, rk, func(b nccl.Buffer) error {
			if r == 0 {
				return rk.comm.AllReduce(b, b, nccl.Sum, rk.s)
			}
			return rk.comm.Broadcast(b, b, 0, rk.s)
		})
	})
	if got := l.LastError(); got != mismatchText {
		t.Fatalf("last error %q, want %q", got, mismatchText)
	}
}

// mpKilled: one all-reduce together, then the survivor issues a second one
// that its peer, killed meanwhile, never joins.
func mpKilled(t *testing.T, l *nccl.Library, ranks []rank) {
	var comms []*nccl.Comm
	for _, rk := range ranks {
		if rk.comm != nil {
			comms = append(comms, rk.comm)
		}
	}
	connectRanks(t, l, comms...)
	rk := ranks[slices.IndexFunc(ranks, func(rk rank) bool { return rk.comm != nil })]
	if os.Getenv("GONCCL_MP_VICTIM") != "" {
		fmt.Println("READY")
		time.Sleep(time.Minute)
		t.Fatal("not killed")
	}
	b, err := l.CUDA().Alloc(rk.dev, nccl.Float32, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if err := rk.comm.AllReduce(b, b, nccl.Sum, rk.s); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ISSUED")
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = rk.comm.Wait(ctx, rk.s)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with the peer killed: %v, want the deadline", err)
	}
	select {
	case <-rk.comm.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not freed after the abort")
	}
	if err := rk.s.Synchronize(); err != nil { // the aborted work ends
		t.Fatal(err)
	}
	rk.s.Destroy()
	fmt.Printf("SURVIVED: Wait returned after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
}

// mpLeak makes one communicator per id (each a remote rank: the ids are the
// parent's) and ends it in turn by Close or Abort, blocking or not, after an
// all-reduce, or by the deadline of an init whose other rank never comes,
// and counts what is left.
func mpLeak(t *testing.T) {
	l := open(t, "default")
	ids := strings.Split(os.Getenv("GONCCL_MP_IDS"), ",")
	cu := l.CUDA()
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	b, err := cu.Alloc(0, nccl.Float32, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	round := 0
	one := func() {
		id, err := nccl.ParseUniqueID(ids[round])
		if err != nil {
			t.Fatal(err)
		}
		mode := round % 4
		round++
		if mode == 3 { // a job of 2 whose rank 1 never comes: the deadline aborts the init
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if _, err := l.InitRank(ctx, 0, id, 2, 0, modeOf(ctx, nil)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d: init without its peer: %v", round, err)
			}
			return
		}
		ctx := context.Background()
		if mode != 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
		}
		c, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil))
		if err != nil {
			t.Fatal(err)
		}
		if sockets() == 0 {
			t.Fatal("a rank whose hub is another process holds no connection")
		}
		if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(ctx, s); err != nil {
			t.Fatal(err)
		}
		if mode == 2 {
			c.Abort()
			<-c.Done()
		} else if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // once each way first
		one()
	}
	// No thread of the fake stays in a process that only has remote ranks.
	before := settleTo(t, fakeResources{threads: 0, fds: 1 << 30, comms: 1 << 30, allocs: 1 << 30})
	if before.threads != 0 {
		t.Fatalf("%d threads of the fake left", before.threads)
	}
	before = countFake(t)
	for round < len(ids) {
		one()
	}
	if after := settleTo(t, before); after.threads > 0 || after.fds > before.fds || after.comms > before.comms || after.allocs > before.allocs {
		t.Fatalf("after %d more communicators: %+v, before: %+v", len(ids)-4, after, before)
	}
}

// sockets counts this process's open sockets.
func sockets() int {
	n := 0
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// mpOneThread: blocking communicators of one process, one goroutine on one
// thread issuing rank 0's first all-reduce, then rank 1's.
func mpOneThread(t *testing.T) {
	l := open(t, "default")
	comms, err := l.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cu := l.CUDA()
	runtime.LockOSThread()
	fmt.Println("STARTED")
	start := time.Now()
	for r, c := range comms {
		b, err := cu.Alloc(r, nccl.Float32, 16)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AllReduce(b, b, nccl.Sum, nccl.Stream{}); err != nil {
			if errors.Is(err, nccl.ErrInvalidUsage) && time.Since(start) < nccl.ArrivalGrace+time.Second {
				fmt.Println("REFUSED", err)
				return
			}
			t.Fatal(err)
		}
		fmt.Println("RETURNED", r)
	}
}
