package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

// Close bounded by its context on the default (blocking) path, where NCCL's
// ncclCommFinalize would wait inside for work that waits on a dead peer. The
// scenarios run on the fakes here and on real NCCL in comm_close_gpu_test.go.

// closeOpen opens the library a child rank of TestCloseDeadPeer uses: the
// fakes, unless a GPU build set it to the real library.
var closeOpen = func(t *testing.T) *nccl.Library { return open(t, "v230") }

// TestCloseDeadPeerBlocking: n ranks, each a process with a default
// (blocking) communicator; one all-reduce done and checked; the last rank
// exits; every survivor enqueues one more all-reduce that the dead rank never
// joins and closes with a 2 s deadline. Close must return by the deadline + 1 s
// with an error wrapping context.DeadlineExceeded, having aborted the
// communicator (its kernels end: the stream drains).
func TestCloseDeadPeerBlocking(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			runCloseDeadPeer(t, n, 1, func(args ...string) *exec.Cmd {
				cmd := fakes.SelfCommand(context.Background(), args...)
				cmd.Env = append(os.Environ(), "GONCCL_FAKE_DIR="+nccl.FakeDir(t), "NCCL_COMM_ID=", "FAKECUDA_DELAY_US=20")
				return cmd
			})
		})
	}
}

// runCloseDeadPeer runs rounds of the job of n child processes that
// TestCloseDeadPeerChild is, each started by start.
func runCloseDeadPeer(t *testing.T, n, rounds int, start func(args ...string) *exec.Cmd) {
	for round := range rounds {
		dir := t.TempDir()
		var procs []*exec.Cmd
		var outs []*lockedBuffer
		for r := range n {
			cmd := start("-test.run=^TestCloseDeadPeerChild$", "-test.v", "-test.timeout=90s")
			cmd.Env = append(cmd.Env, "GONCCL_CLOSE_DIR="+dir, "GONCCL_CLOSE_RANK="+strconv.Itoa(r), "GONCCL_CLOSE_N="+strconv.Itoa(n))
			out := &lockedBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs, outs = append(procs, cmd), append(outs, out)
		}
		t.Cleanup(func() {
			for _, p := range procs {
				p.Process.Kill()
			}
		})
		// The victim exits after the first all-reduce; then the survivors
		// are told it is gone.
		if err := procs[n-1].Wait(); err != nil {
			t.Fatalf("round %d: the exiting rank: %v\n%s", round, err, outs[n-1].String())
		}
		if err := os.WriteFile(filepath.Join(dir, "gone"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, n-1)
		for r := range n - 1 {
			go func() { done <- procs[r].Wait() }()
		}
		timeout := time.After(60 * time.Second)
		for range n - 1 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: a survivor: %v\n%s", round, err, joinOutputs(outs))
				}
			case <-timeout:
				t.Fatalf("round %d: survivors still running after 60 s\n%s", round, joinOutputs(outs))
			}
		}
		for r := range n - 1 {
			for _, line := range strings.Split(outs[r].String(), "\n") {
				if strings.HasPrefix(line, "CLOSED") {
					t.Logf("round %d, rank %d: %s", round, r, line)
				}
			}
		}
	}
}

func joinOutputs(outs []*lockedBuffer) string {
	var b strings.Builder
	for r, o := range outs {
		fmt.Fprintf(&b, "--- rank %d:\n%s\n", r, lastLines(o.String(), 15))
	}
	return b.String()
}

// TestCloseDeadPeerChild is one rank of TestCloseDeadPeerBlocking (and of its
// GPU twin), in its own process.
func TestCloseDeadPeerChild(t *testing.T) {
	dir := os.Getenv("GONCCL_CLOSE_DIR")
	if dir == "" {
		return // not a child: TestCloseDeadPeerBlocking starts it
	}
	r, _ := strconv.Atoi(os.Getenv("GONCCL_CLOSE_RANK"))
	n, _ := strconv.Atoi(os.Getenv("GONCCL_CLOSE_N"))
	l := closeOpen(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := ftShareID(t, l, ctx, dir, r)
	// The default Config: a blocking communicator. Its init is bounded by
	// ctx as every init is.
	c, err := l.InitRank(ctx, devOf(r), id, n, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Blocking() {
		t.Fatal("the default communicator is not blocking")
	}
	cu := l.CUDA()
	s, err := cu.NewStream(devOf(r), nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	// The first all-reduce, random int64 data, every element checked.
	const count = 4099
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i)*7919 + 17
	}
	host := randomInt64s(seeds[r], count)
	b, err := cu.Alloc(devOf(r), nccl.Int64, count)
	if err != nil {
		t.Fatal(err)
	}
	if err := nccl.CopyIn(b, host); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, s); err != nil {
		t.Fatal(err)
	}
	got := make([]int64, count)
	if err := nccl.CopyOut(got, b); err != nil {
		t.Fatal(err)
	}
	want := make([]int64, count)
	for _, seed := range seeds {
		for i, v := range randomInt64s(seed, count) {
			want[i] += v
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rank %d: element %d is %d, want %d", r, i, got[i], want[i])
		}
	}
	if r == n-1 {
		fmt.Println("EXITING")
		os.Exit(0) // the peer that dies: its process is gone, its communicator never closed
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "gone")); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
		t.Fatal(err)
	}
	const deadline = 2 * time.Second
	cctx, ccancel := context.WithTimeout(context.Background(), deadline)
	defer ccancel()
	start := time.Now()
	err = c.Close(cctx)
	el := time.Since(start)
	fmt.Printf("CLOSED rank %d after %v: %v\n", r, el.Round(time.Millisecond), err)
	if el > deadline+time.Second {
		t.Fatalf("Close returned after %v, past its %v deadline + 1 s", el, deadline)
	}
	// The dead rank's connection may close first (NCCL's socket transport
	// sees it: ncclRemoteError); on one node the deadline ends the wait.
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nccl.ErrRemote) {
		t.Fatalf("Close: %v, want an error wrapping context.DeadlineExceeded (or a remote error)", err)
	}
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("the communicator is not freed a second after Close returned")
	}
	// The abort ended the all-reduce's kernels: the stream drains.
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := drain(sctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(b, b, nccl.Sum, s); !errors.Is(err, nccl.ErrClosed) {
		t.Fatalf("AllReduce after Close: %v, want ErrClosed", err)
	}
}

// drain waits for s to finish its work, or ctx to end.
func drain(ctx context.Context, s nccl.Stream) error {
	for {
		done, err := s.Query()
		if err != nil || done {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stream still busy: %w", ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
}

// randomInt64s is count values of a generator seeded with seed, small enough
// that sums over a few ranks do not overflow.
func randomInt64s(seed uint64, count int) []int64 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	v := make([]int64, count)
	for i := range v {
		v[i] = rng.Int64N(1<<40) - 1<<39
	}
	return v
}

// TestCloseCliqueOneGoroutine: the ranks of InitAll closed one after another
// from one goroutine, after a grouped all-reduce checked element by element,
// and again with CloseAll; both modes, 2 and 4 ranks.
func TestCloseCliqueOneGoroutine(t *testing.T) {
	l := open(t, "v230")
	for _, m := range commModes {
		for _, n := range []int{2, 4} {
			for _, how := range []string{"in turn", "CloseAll"} {
				t.Run(fmt.Sprintf("%s/%d ranks/%s", m.name, n, how), func(t *testing.T) {
					ctx := m.ctx(t)
					comms, err := l.InitAll(ctx, devList(n), modeOf(ctx, nil))
					if err != nil {
						t.Fatal(err)
					}
					groupedSumCheck(t, l, comms, uint64(n))
					cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					start := time.Now()
					if how == "in turn" {
						for _, c := range comms {
							if err := c.Close(cctx); err != nil {
								t.Fatalf("rank %d: Close: %v", c.Rank(), err)
							}
						}
					} else if err := nccl.CloseAll(cctx, comms); err != nil {
						t.Fatal(err)
					}
					t.Logf("closed in %v", time.Since(start).Round(time.Millisecond))
					for _, c := range comms {
						if err := c.Close(cctx); !errors.Is(err, nccl.ErrClosed) {
							t.Fatalf("second Close: %v, want ErrClosed", err)
						}
					}
				})
			}
		}
	}
}

// devList is devices 0..n-1 (round the fake's or the machine's devices).
func devList(n int) []int {
	d := make([]int, n)
	for i := range d {
		d[i] = devOf(i)
	}
	return d
}

// groupedSumCheck all-reduces random int64 data over comms (rank i on its
// own device) in one Group from this goroutine, each on a stream of its own,
// and checks every element on every rank.
func groupedSumCheck(t *testing.T, l *nccl.Library, comms []*nccl.Comm, seed uint64) {
	t.Helper()
	const count = 1031
	cu := l.CUDA()
	n := len(comms)
	bufs := make([]nccl.Buffer, n)
	streams := make([]nccl.Stream, n)
	want := make([]int64, count)
	for i, c := range comms {
		host := randomInt64s(seed*1000+uint64(i), count)
		for j, v := range host {
			want[j] += v
		}
		b, err := cu.Alloc(c.Device(), nccl.Int64, count)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free() })
		if err := nccl.CopyIn(b, host); err != nil {
			t.Fatal(err)
		}
		s, err := cu.NewStream(c.Device(), nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Destroy() })
		bufs[i], streams[i] = b, s
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, c := range comms {
		if err := c.Wait(ctx, streams[i]); err != nil {
			t.Fatal(err)
		}
		got := make([]int64, count)
		if err := nccl.CopyOut(got, bufs[i]); err != nil {
			t.Fatal(err)
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("rank %d: element %d is %d, want %d", i, j, got[j], want[j])
			}
		}
	}
}

// TestCloseAfterPeerAbortedInClique: an InitAll pair; a goroutine loops a
// Group of an all-reduce on both ranks and a Wait on each; 300 ms in, rank 0
// is aborted, then rank 1 is closed with a 3 s deadline. Real NCCL returns
// at once (rank 0's abort ends the pair's kernels: see the fake's
// ncclCommAbort); Close must return within the deadline + 1 s, and the loop
// must end with errors matching ErrClosed.
func TestCloseAfterPeerAbortedInClique(t *testing.T) {
	l := open(t, "v230")
	for _, m := range commModes {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d ranks", m.name, n), func(t *testing.T) {
				closeAfterPeerAborted(t, l, m.ctx(t), n)
			})
		}
	}
}

// closeAfterPeerAborted is TestCloseAfterPeerAbortedInClique's scenario on l,
// its communicators made from ctx (a context that can end: non-blocking).
func closeAfterPeerAborted(t *testing.T, l *nccl.Library, ctx context.Context, n int) {
	comms, err := l.InitAll(ctx, devList(n), modeOf(ctx, nil))
	if err != nil {
		t.Fatal(err)
	}
	cu := l.CUDA()
	bufs := make([]nccl.Buffer, n)
	streams := make([]nccl.Stream, n)
	for i, c := range comms {
		if bufs[i], err = cu.Alloc(c.Device(), nccl.Float32, 1<<16); err != nil {
			t.Fatal(err)
		}
		if streams[i], err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var loopErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			err := l.Group(func() error {
				for i, c := range comms {
					if err := c.AllReduce(bufs[i], bufs[i], nccl.Sum, streams[i]); err != nil {
						return err
					}
				}
				return nil
			})
			for i, c := range comms {
				if err != nil {
					break
				}
				err = c.Wait(wctx, streams[i])
			}
			if err != nil {
				loopErr = err
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := comms[0].Abort(); err != nil {
		t.Fatal(err)
	}
	const deadline = 3 * time.Second
	cctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err = comms[1].Close(cctx)
	el := time.Since(start)
	t.Logf("Close of rank 1 after rank 0's abort: %v after %v", err, el.Round(time.Millisecond))
	if el > deadline+time.Second {
		t.Fatalf("Close returned after %v", el)
	}
	for _, c := range comms[2:] {
		c.Abort()
	}
	wg.Wait()
	if !errors.Is(loopErr, nccl.ErrClosed) && !errors.Is(loopErr, context.DeadlineExceeded) {
		t.Errorf("the loop ended with %v, want ErrClosed", loopErr)
	}
	for i := range comms {
		select {
		case <-comms[i].Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("rank %d not freed", i)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := drain(sctx, streams[i]); err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
		scancel()
		streams[i].Destroy()
		bufs[i].Free()
	}
}
