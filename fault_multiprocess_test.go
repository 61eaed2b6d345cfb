package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

// Fault tolerance and one-sided RMA across processes, on the v230 fake
// (nccltest/csrc/fakenccl/fault.c): a rank of a communicator spread over processes whose
// peer is killed with SIGKILL mid-all-reduce revokes it (Wait under
// RevokeOnDeadline), shrinks the dead rank away, and grows back with a new
// process joining through a grow id passed in a file; survivors in different
// processes shrink together even when the process that hosted the original
// rendezvous is the dead one; a healthy communicator spread over processes
// grows by a new process, whichever rank makes the grow id; PutSignal moves
// bytes into a window of another process. The test binary starts itself as the ranks' processes
// (TestFakeFaultMPChild). Each test fails on fakes that model these within one
// process only.

// startFT starts a child running scenario as rank (of n), the job's files in
// dir (the init id from rank 0's process, the grow id), with env added.
func startFT(t *testing.T, name, scenario, dir string, rank, n int, env ...string) *mpProc {
	t.Helper()
	args := []string{"-test.run=^TestFakeFaultMPChild$", "-test.timeout=60s", "-test.v"}
	cmd := fakes.SelfCommand(context.Background(), args...)
	cmd.Env = append(os.Environ(), "GONCCL_FAKE_DIR="+nccl.FakeDir(t), "GONCCL_FT="+scenario, "GONCCL_FT_DIR="+dir,
		"GONCCL_FT_RANK="+strconv.Itoa(rank), "GONCCL_FT_N="+strconv.Itoa(n), "NCCL_COMM_ID=", "FAKECUDA_DELAY_US=20")
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

// killMidAllReduce starts n rank processes, one rank each (rank 0's process
// hosts the rendezvous), waits until the victim has done its part of a first
// all-reduce and the others have issued a second one that the victim never
// joins, and kills the victim with SIGKILL. It returns the survivors.
func killMidAllReduce(t *testing.T, scenario, dir string, n, victim int, env ...string) []*mpProc {
	t.Helper()
	var procs, survivors []*mpProc
	for r := range n {
		p := startFT(t, fmt.Sprintf("rank %d", r), scenario, dir, r, n, append(env, "GONCCL_FT_VICTIM="+strconv.Itoa(victim))...)
		procs = append(procs, p)
		if r != victim {
			survivors = append(survivors, p)
		}
	}
	procs[victim].waitFor(t, "READY", 20*time.Second)
	for _, p := range survivors {
		p.waitFor(t, "ISSUED", 20*time.Second)
	}
	procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	return survivors
}

// TestFakeFaultMultiProcessRecover: 2 processes; one is killed mid-all-reduce.
// The survivor's Wait revokes at its deadline, Shrink(ShrinkAbort) leaves it
// a 1-rank communicator that all-reduces, and a new process joins it through
// Grow (the grow id in a file); the grown communicator's all-reduce is checked
// element by element on both ranks. Killed: the rank whose process is not the
// hub (as examples/faulttolerant does), or the hub itself.
func TestFakeFaultMultiProcessRecover(t *testing.T) {
	for _, m := range commModes {
		for _, victim := range []int{1, 0} {
			name := map[int]string{0: "hub killed", 1: "rank killed"}[victim]
			t.Run(m.name+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				env := ftMode(m)
				survivors := killMidAllReduce(t, "recover", dir, 2, victim, env)
				survivors[0].waitFor(t, "GROWID", 20*time.Second)
				joiner := startFT(t, "new rank", "grow-new", dir, 1, 2, env)
				waitAll(t, 25*time.Second, survivors[0], joiner)
				survivors[0].waitFor(t, "RECOVERED", time.Second)
				joiner.waitFor(t, "JOINED", time.Second)
			})
		}
	}
}

// ftMode is the children's environment for communicators of mode m.
func ftMode(m commMode) string {
	if m.nonBlocking {
		return "GONCCL_FT_BLOCKING=0"
	}
	return "GONCCL_FT_BLOCKING=1"
}

// TestFakeFaultMultiProcessShrink: 3 processes; one is killed mid-all-reduce
// and the other two, in different processes, shrink to a 2-rank communicator
// that all-reduces, every element checked. Killed: the process that hosted
// the rendezvous (rank 0's), or another.
func TestFakeFaultMultiProcessShrink(t *testing.T) {
	for _, m := range commModes {
		for _, victim := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/rank %d killed", m.name, victim), func(t *testing.T) {
				survivors := killMidAllReduce(t, "shrink", t.TempDir(), 3, victim, ftMode(m))
				waitAll(t, 25*time.Second, survivors...)
				for _, p := range survivors {
					p.waitFor(t, "SHRUNK", time.Second)
				}
			})
		}
	}
}

// TestFakeFaultMultiProcessGrowSpread: a healthy communicator of 2 processes
// grows to 3 with a new process. The id is made by the rank whose process
// hosts the rendezvous, or by the other (the grown communicator then lives in
// that process); the other existing rank passes no id and learns it through
// the rendezvous. Every rank checks the grown communicator's all-reduce and
// broadcast, every element.
func TestFakeFaultMultiProcessGrowSpread(t *testing.T) {
	for _, m := range commModes {
		for _, maker := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/id by rank %d", m.name, maker), func(t *testing.T) {
				dir := t.TempDir()
				env := []string{ftMode(m), "GONCCL_FT_MAKER=" + strconv.Itoa(maker)}
				procs := []*mpProc{startFT(t, "rank 0", "grow-spread", dir, 0, 2, env...), startFT(t, "rank 1", "grow-spread", dir, 1, 2, env...),
					startFT(t, "new rank 2", "grow-new", dir, 2, 3, env...)}
				waitAll(t, 25*time.Second, procs...)
				for _, p := range procs {
					p.waitFor(t, "GROWN", time.Second)
				}
			})
		}
	}
}

// TestFakeFaultMultiProcessPutSignal: one-sided puts and signals between
// ranks of different processes, each rank putting seeded bytes into the next
// one's window in turn; every byte of every window is checked, the bytes
// around the put's too. With 3 processes puts also go between two ranks
// neither of which hosts the rendezvous.
func TestFakeFaultMultiProcessPutSignal(t *testing.T) {
	for _, m := range commModes {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d processes", m.name, n), func(t *testing.T) {
				dir := t.TempDir()
				var procs []*mpProc
				for r := range n {
					procs = append(procs, startFT(t, fmt.Sprintf("rank %d", r), "rma", dir, r, n, ftMode(m)))
				}
				waitAll(t, 25*time.Second, procs...)
				for _, p := range procs {
					p.waitFor(t, "CHECKED", time.Second)
				}
			})
		}
	}
}

// ---- the ranks' side ----

// TestFakeFaultMPChild is one process of the tests above (GONCCL_FT names
// what it does, GONCCL_FT_RANK its rank of GONCCL_FT_N, GONCCL_FT_DIR the
// job's folder; GONCCL_FT_BLOCKING=1: blocking communicators).
func TestFakeFaultMPChild(t *testing.T) {
	scenario := os.Getenv("GONCCL_FT")
	if scenario == "" {
		return // not a child
	}
	l := open(t, "v230")
	// mk makes the communicators: a context that can end makes non-blocking
	// ones, the background context blocking ones. Waits end at ctx's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	j := ftJob{ctx: ctx, mk: ctx}
	if os.Getenv("GONCCL_FT_BLOCKING") == "1" {
		j.mk = context.Background()
	}
	r, _ := strconv.Atoi(os.Getenv("GONCCL_FT_RANK"))
	n, _ := strconv.Atoi(os.Getenv("GONCCL_FT_N"))
	dir := os.Getenv("GONCCL_FT_DIR")
	switch scenario {
	case "recover", "shrink":
		ftSurvive(t, l, j, dir, r, n, scenario == "recover")
	case "grow-new":
		ftGrowNew(t, l, j, dir, r, n)
	case "grow-spread":
		ftGrowSpread(t, l, j, dir, r, n)
	case "rma":
		ftRMA(t, l, j, dir, r, n)
	case "node-lost":
		ftNodeLost(t, l, j, dir, r, n)
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
}

// ftJob is a child's contexts: mk to make and close communicators (it sets
// their mode), ctx for waits.
type ftJob struct{ mk, ctx context.Context }

// ftInit joins rank r of n with the id ftShareID passes through dir.
func ftInit(t *testing.T, l *nccl.Library, j ftJob, dir string, r, n int) (*nccl.Comm, nccl.Stream) {
	t.Helper()
	id := ftShareID(t, l, j.ctx, dir, r)
	c, err := l.InitRank(j.mk, r, id, n, r, modeOf(j.mk, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Blocking() != (j.mk.Done() == nil) {
		t.Fatalf("Blocking() = %v", c.Blocking())
	}
	s, err := l.CUDA().NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return c, s
}

// ftShareID is the id of a job whose rank 0's process makes it (and so hosts
// the rendezvous) and writes it to dir/id; the others read it from there.
func ftShareID(t *testing.T, l *nccl.Library, ctx context.Context, dir string, r int) nccl.UniqueID {
	t.Helper()
	path := filepath.Join(dir, "id")
	var id nccl.UniqueID
	var err error
	if r == 0 {
		if id, err = l.GetUniqueID(); err != nil {
			t.Fatal(err)
		}
		if err := ftWriteID(path, id); err != nil {
			t.Fatal(err)
		}
	} else if id, err = ftReadID(ctx, path); err != nil {
		t.Fatal(err)
	}
	return id
}

func ftWriteID(path string, id nccl.UniqueID) error {
	if err := os.WriteFile(path+".tmp", []byte(id.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func ftReadID(ctx context.Context, path string) (nccl.UniqueID, error) {
	for {
		if b, err := os.ReadFile(path); err == nil {
			return nccl.ParseUniqueID(string(b))
		}
		select {
		case <-ctx.Done():
			return nccl.UniqueID{}, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ftIssueAfterKill: every rank of c all-reduces once, checked; a victim then
// says READY and waits to be killed, while every other rank issues a second
// all-reduce (not waited for) on the buffer it returns and says ISSUED.
func ftIssueAfterKill(t *testing.T, l *nccl.Library, j ftJob, c *nccl.Comm, s nccl.Stream, r, n int, victim bool) nccl.Buffer {
	t.Helper()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if err := sumCheck(j.ctx, c, s, uint64(r), tags(all...)); err != nil {
		t.Fatal(err)
	}
	if victim {
		fmt.Println("READY")
		time.Sleep(time.Minute)
		t.Fatal("not killed")
	}
	b, err := l.CUDA().Alloc(r, nccl.Float32, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(b, b, nccl.Sum, s); err != nil {
		b.Free()
		t.Fatal(err)
	}
	fmt.Println("ISSUED")
	return b
}

// ftSurvive: every rank all-reduces once; the victim then waits to be killed
// while the others issue a second all-reduce and Wait for it under
// RevokeOnDeadline. Its deadline revokes the communicator; each survivor
// checks that operations are refused now, shrinks the victim away with
// ShrinkAbort and checks the new communicator's shape and an all-reduce over
// exactly the survivors. With grow (a single survivor), it then makes a grow
// id, writes it to dir/grow.id, grows to 2 ranks with the new process and
// checks an all-reduce over both.
func ftSurvive(t *testing.T, l *nccl.Library, j ftJob, dir string, r, n int, grow bool) {
	victim, _ := strconv.Atoi(os.Getenv("GONCCL_FT_VICTIM"))
	c, s := ftInit(t, l, j, dir, r, n)
	ctx := j.ctx
	if err := c.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
		t.Fatal(err)
	}
	b := ftIssueAfterKill(t, l, j, c, s, r, n, r == victim)
	defer b.Free()
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	err := c.Wait(wctx, s)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !c.Revoked() {
		t.Fatalf("Wait with the peer killed: %v (revoked %v), want the deadline and a revoke", err, c.Revoked())
	}
	if err := s.Synchronize(); err != nil { // the revoked all-reduce has ended
		t.Fatal(err)
	}
	if err := c.AllReduce(b, b, nccl.Sum, s); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Fatalf("an all-reduce after the revoke: %v, want ErrInvalidUsage", err)
	}
	shrunk, err := c.Shrink(j.mk, []int{victim}, nil, nccl.ShrinkAbort)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(j.mk); err != nil { // revoked: destroyed without finalizing
		t.Fatal(err)
	}
	var stay []int
	for x := range n {
		if x != victim {
			stay = append(stay, x)
		}
	}
	if want := slices.Index(stay, r); shrunk.Rank() != want || shrunk.Size() != n-1 {
		t.Fatalf("shrunk communicator: rank %d of %d, want %d of %d", shrunk.Rank(), shrunk.Size(), want, n-1)
	}
	if err := sumCheck(ctx, shrunk, s, uint64(r), tags(stay...)); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SHRUNK: rank %d is rank %d of %d\n", r, shrunk.Rank(), shrunk.Size())
	if !grow {
		if err := shrunk.Close(j.mk); err != nil {
			t.Fatal(err)
		}
		return
	}
	gid, err := shrunk.GrowID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ftWriteID(filepath.Join(dir, "grow.id"), gid); err != nil {
		t.Fatal(err)
	}
	fmt.Println("GROWID")
	grown, err := shrunk.Grow(j.mk, 2, &gid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := shrunk.Close(j.mk); err != nil {
		t.Fatal(err)
	}
	if grown.Rank() != 0 || grown.Size() != 2 {
		t.Fatalf("grown communicator: rank %d of %d, want 0 of 2", grown.Rank(), grown.Size())
	}
	if err := ftCheckGrown(ctx, grown, s); err != nil {
		t.Fatal(err)
	}
	if err := grown.Close(j.mk); err != nil {
		t.Fatal(err)
	}
	fmt.Println("RECOVERED")
}

// ftGrowSpread: rank r of a healthy communicator of n ranks, one per
// process, grows it by one rank; rank GONCCL_FT_MAKER makes the grow id,
// writes it to dir/grow.id and passes it, the others pass none.
func ftGrowSpread(t *testing.T, l *nccl.Library, j ftJob, dir string, r, n int) {
	maker, _ := strconv.Atoi(os.Getenv("GONCCL_FT_MAKER"))
	c, s := ftInit(t, l, j, dir, r, n)
	var idp *nccl.UniqueID
	if r == maker {
		gid, err := c.GrowID()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GrowID(); !errors.Is(err, nccl.ErrInvalidUsage) {
			t.Errorf("a second GrowID while one is unused: %v, want ErrInvalidUsage", err)
		}
		if err := ftWriteID(filepath.Join(dir, "grow.id"), gid); err != nil {
			t.Fatal(err)
		}
		idp = &gid
	}
	grown, err := c.Grow(j.mk, n+1, idp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if grown.Rank() != r || grown.Size() != n+1 {
		t.Fatalf("grown communicator: rank %d of %d, want %d of %d", grown.Rank(), grown.Size(), r, n+1)
	}
	if err := ftCheckGrown(j.ctx, grown, s); err != nil {
		t.Fatal(err)
	}
	if err := sumCheck(j.ctx, c, s, uint64(r), tags(0, 1)); err != nil { // the parent still works
		t.Fatal(err)
	}
	if err := grown.Close(j.mk); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(j.mk); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("GROWN: rank %d of %d\n", r, n+1)
}

// ftCheckGrown checks an all-reduce over the grown communicator's ranks (tags
// 100, 101, ...) and a broadcast of rank 0's seeded bytes, every element.
func ftCheckGrown(ctx context.Context, c *nccl.Comm, s nccl.Stream) error {
	members := make([]uint64, c.Size())
	for i := range members {
		members[i] = uint64(100 + i)
	}
	if err := sumCheck(ctx, c, s, uint64(100+c.Rank()), members); err != nil {
		return err
	}
	cu := c.Library().CUDA()
	const size = 100003
	b, err := cu.Alloc(c.Device(), nccl.Uint8, size)
	if err != nil {
		return err
	}
	defer b.Free()
	want := make([]byte, size)
	ftFill(want, 99)
	got := make([]byte, size)
	if c.Rank() == 0 {
		copy(got, want)
	}
	if err := nccl.CopyIn(b, got); err != nil {
		return err
	}
	if err := c.Broadcast(b, b, 0, s); err != nil {
		return err
	}
	if err := c.Wait(ctx, s); err != nil {
		return err
	}
	if err := b.ReadBytes(got); err != nil {
		return err
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("broadcast byte %d = %#x, want %#x", i, got[i], want[i])
		}
	}
	return nil
}

// ftGrowNew is the new process: it reads the grow id from dir/grow.id and
// joins as rank r of n.
func ftGrowNew(t *testing.T, l *nccl.Library, j ftJob, dir string, r, n int) {
	ctx := j.ctx
	gid, err := ftReadID(ctx, filepath.Join(dir, "grow.id"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.GrowRank(j.mk, r, gid, n, r, modeOf(j.mk, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() != r || c.Size() != n {
		t.Fatalf("joined as rank %d of %d, want %d of %d", c.Rank(), c.Size(), r, n)
	}
	s, err := l.CUDA().NewStream(r, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := ftCheckGrown(ctx, c, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(j.mk); err != nil {
		t.Fatal(err)
	}
	fmt.Println("JOINED")
	fmt.Println("GROWN")
}

// ftRMA: rank turn puts seeded bytes into rank turn+1's window at an offset
// and signals it; that rank waits for the signal and checks its whole window.
// Then each rank signals the next without data and waits for its own.
func ftRMA(t *testing.T, l *nccl.Library, j ftJob, dir string, r, n int) {
	c, s := ftInit(t, l, j, dir, r, n)
	ctx := j.ctx
	const size, offset = 70001, 4099
	cu := l.CUDA()
	win, err := c.AllocSymmetric(nccl.Uint8, offset+size+17)
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.AllocSymmetric(nccl.Uint8, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := win.Memset(0); err != nil {
		t.Fatal(err)
	}
	w, base, err := c.WindowOf(win)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cu.Alloc(r, nccl.Uint8, win.Len())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	next, prev := (r+1)%n, (r+n-1)%n
	data, got := make([]byte, size), make([]byte, win.Len())
	for turn := range n {
		switch r {
		case turn:
			ftFill(data, r)
			if err := nccl.CopyIn(src, data); err != nil {
				t.Fatal(err)
			}
			if err := c.PutSignal(src, next, w, base+offset, s); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, s); err != nil {
				t.Fatal(err)
			}
		case (turn + 1) % n:
			if err := c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(prev)}}, s); err != nil {
				t.Fatal(err)
			}
			if err := nccl.CopyAsync(out, win, s); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := out.ReadBytes(got); err != nil {
				t.Fatal(err)
			}
			ftFill(data, prev)
			for i, b := range got {
				want := byte(0)
				if i >= offset && i < offset+size {
					want = data[i-offset]
				}
				if b != want {
					t.Fatalf("window byte %d = %#x after rank %d's put, want %#x", i, b, prev, want)
				}
			}
		}
	}
	// Signals alone, every rank at once: the waits complete.
	if err := c.Signal(next, s); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(prev)}}, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := src.Free(); err != nil {
		t.Fatal(err)
	}
	if err := win.Free(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(j.mk); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("CHECKED: rank %d: %d bytes from rank %d, every byte of the window\n", r, size, prev)
}

// ftFill writes the bytes seeded by seed.
func ftFill(p []byte, seed int) {
	rng := rand.New(rand.NewPCG(2030, uint64(seed)))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
}
