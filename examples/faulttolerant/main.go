// Command faulttolerant trains through the death of a rank (NCCL >= 2.29.2).
//
// It starts two rank processes, one per GPU, that train a linear model
// data-parallel (as examples/dataparallel does). After -kill-at steps it kills
// rank 1 with SIGKILL. Rank 0's next Wait reaches its deadline and, under
// nccl.RevokeOnDeadline, revokes the communicator instead of aborting it; rank 0
// shrinks the dead rank away (Comm.Shrink with ShrinkAbort) and trains on alone
// over both shards for -alone steps. Then it makes a grow id (Comm.GrowID) and
// writes it to a file; a replacement process, started when rank 1 died, reads
// it and joins as rank 1 (Library.GrowRank) while rank 0 grows its communicator
// (Comm.Grow). Rank 0 broadcasts the step and the weights, and both finish the
// training. Each checks that the two ranks hold the same weights, bit for bit,
// and that they match a run without the failure over all the data.
//
//	faulttolerant -kill-at 10 -alone 10 -steps 50
//
// Needs ncclCommRevoke (2.28.7), ncclCommShrink (2.27) and ncclCommGrow (2.29.2)
// and two GPUs; on an older NCCL every rank exits with the library's typed
// "requires NCCL >= ..." error.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

// nonBlocking is the config of the ranks: every call that waits on peers
// (init, Shrink, Grow, Close) can then give up at its context's end.
var nonBlocking = &nccl.Config{Blocking: new(bool)}

const features = 16

var (
	role      = flag.String("role", "", "internal: rank or replacement (empty: start the job)")
	dir       = flag.String("dir", "", "internal: the job's folder for the id files")
	steps     = flag.Int("steps", 50, "gradient steps")
	killAt    = flag.Int("kill-at", 10, "kill rank 1 once it reports this step")
	alone     = flag.Int("alone", 10, "steps rank 0 trains alone before growing back")
	perRank   = flag.Int("samples", 4096, "training samples per rank")
	lr        = flag.Float64("lr", 0.05, "learning rate")
	stepLimit = flag.Duration("step-timeout", 5*time.Second, "deadline of one step's all-reduce: past it the peer counts as dead")
	timeout   = flag.Duration("timeout", 60*time.Second, "deadline to join, recover and finish, and again to close")
)

func main() {
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	var err error
	switch *role {
	case "":
		// Say at once if this NCCL is too old, before starting any rank.
		var lib *nccl.Library
		if lib, err = nccl.Open(); err == nil {
			err = lib.Require("ncclCommRevoke", "ncclCommShrink", "ncclCommGetUniqueId", "ncclCommGrow")
		}
		if err == nil {
			err = orchestrate()
		}
	case "rank", "replacement":
		err = rankMain(lf)
	default:
		err = fmt.Errorf("-role %q", *role)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// orchestrate runs ranks 0 and 1, kills rank 1 at -kill-at and starts its
// replacement.
func orchestrate() error {
	d, err := os.MkdirTemp("", "faulttolerant")
	if err != nil {
		return err
	}
	defer os.RemoveAll(d)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := func(r int, role string, stdout *os.File) (*exec.Cmd, *bufio.Scanner, error) {
		args := append([]string{"-role", role, "-dir", d, "-rank", fmt.Sprint(r), "-size", "2", "-local-rank", fmt.Sprint(r),
			"-idfile", filepath.Join(d, "id")}, os.Args[1:]...)
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		// Rank 0's ncclGetUniqueId hosts the rendezvous (no NCCL_COMM_ID); the
		// run id marks the id file as this job's.
		cmd.Env = []string{"GONCCL_RUN_ID=faulttolerant-" + filepath.Base(d)}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "NCCL_COMM_ID=") && !strings.HasPrefix(kv, "GONCCL_RUN_ID=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if stdout != nil {
			cmd.Stdout = stdout
			return cmd, nil, cmd.Start()
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		return cmd, bufio.NewScanner(out), cmd.Start()
	}
	r0, _, err := start(0, "rank", os.Stdout)
	if err != nil {
		return err
	}
	r1, lines, err := start(1, "rank", nil)
	if err != nil {
		r0.Process.Kill()
		return err
	}
	killed := false
	for lines.Scan() {
		if line := lines.Text(); line == fmt.Sprintf("step %d", *killAt) && !killed {
			r1.Process.Signal(syscall.SIGKILL)
			killed = true
			fmt.Printf("faulttolerant: killed rank 1 (pid %d) after step %d\n", r1.Process.Pid, *killAt)
		} else if !strings.HasPrefix(line, "step ") {
			fmt.Println(line)
		}
	}
	werr := r1.Wait()
	if !killed {
		r0.Process.Kill()
		r0.Wait()
		return fmt.Errorf("rank 1 ended before step %d: %v", *killAt, werr)
	}
	rep, _, err := start(1, "replacement", os.Stdout)
	if err != nil {
		r0.Process.Kill()
		return err
	}
	// If rank 0 fails, the replacement would wait for it to its deadline.
	r0err := make(chan error, 1)
	go func() {
		err := r0.Wait()
		if err != nil {
			rep.Process.Kill()
		}
		r0err <- err
	}()
	reperr := rep.Wait()
	return errors.Join(wrap("rank 0", <-r0err), wrap("replacement rank 1", reperr))
}

func wrap(who string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	return nil
}

// rankMain is a rank process: rank 0 or 1 of the first communicator, or the
// replacement that joins rank 0's grown one.
func rankMain(lf *launch.Flags) error {
	job, err := lf.Detect()
	if err != nil {
		return err
	}
	lib, err := nccl.Open()
	if err != nil {
		return err
	}
	if err := lib.Require("ncclCommRevoke", "ncclCommShrink", "ncclCommGetUniqueId", "ncclCommGrow"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	visible, err := lib.CUDA().DeviceCount()
	if err != nil {
		return err
	}
	dev, err := job.Device(visible) // the local rank's GPU, or a shared one under NCCL_MULTI_RANK_GPU_ENABLE=1
	if err != nil {
		return err
	}
	t := &trainer{rank: job.Rank, dev: dev, step: 0, w: make([]float64, features)}
	t.xs, t.ys, t.wStar = dataset(2 * *perRank)
	var comm *nccl.Comm
	if *role == "rank" {
		id, err := launch.UniqueID(ctx, lib, job, lf.Share())
		if err != nil {
			return err
		}
		// Non-blocking: Shrink and Grow then give up at their deadline too
		// (a blocking call cannot be stopped inside NCCL).
		if comm, err = lib.InitRank(ctx, dev, id, 2, job.Rank, nonBlocking); err != nil {
			return err
		}
		launch.Cleanup(job, lf.Share())
		// A Wait past its deadline revokes instead of aborting, so that the
		// communicator is left to shrink.
		if err := comm.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
			comm.Close(ctx)
			return err
		}
	} else { // the replacement: join rank 0's grow
		gid, err := readID(ctx, filepath.Join(*dir, "grow.id"))
		if err != nil {
			return err
		}
		if comm, err = lib.GrowRank(ctx, dev, gid, 2, 1, nonBlocking); err != nil {
			return err
		}
		if err := t.receiveState(ctx, comm); err != nil {
			return err
		}
		fmt.Printf("faulttolerant: replacement rank 1 joined through Grow at step %d\n", t.step)
	}
	for t.step < *steps {
		err := t.trainStep(ctx, comm, t.rank, 2)
		if err == nil {
			if t.rank == 1 && *role == "rank" {
				fmt.Printf("step %d\n", t.step) // the orchestrator kills at -kill-at
			}
			t.step++
			continue
		}
		// Only rank 0 recovers, and only from a peer that stopped answering
		// (the deadline, a revoke) or that NCCL saw fail.
		peerGone := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nccl.ErrRevoked) ||
			errors.Is(err, nccl.ErrRemote) || errors.Is(err, nccl.ErrSystem)
		if t.rank != 0 || *role != "rank" || !peerGone {
			return err
		}
		// Rank 1 is gone: shrink it away, go on alone, then grow back.
		began := time.Now()
		if !comm.Revoked() { // NCCL reported the failure before the deadline
			if rerr := comm.Revoke(ctx); rerr != nil {
				return fmt.Errorf("%v; revoke: %w", err, rerr)
			}
		}
		solo, serr := comm.Shrink(ctx, []int{1}, nil, nccl.ShrinkAbort)
		if serr != nil {
			return fmt.Errorf("%v; shrink: %w", err, serr)
		}
		if cerr := comm.Close(ctx); cerr != nil { // revoked: destroyed without finalizing
			return fmt.Errorf("closing the revoked communicator: %w", cerr)
		}
		fmt.Printf("faulttolerant: rank 0 saw the failure at step %d (%v), shrank to %d rank in %v\n",
			t.step, err, solo.Size(), time.Since(began).Round(time.Millisecond))
		for end := min(t.step+*alone, *steps); t.step < end; t.step++ {
			if err := t.trainStep(ctx, solo, -1, 1); err != nil {
				return err
			}
		}
		if comm, err = t.growBack(ctx, solo); err != nil {
			return err
		}
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), *timeout)
		defer ccancel()
		comm.Close(cctx)
	}()
	if err := t.sameOnEveryRank(ctx, comm); err != nil {
		return err
	}
	dist, diff, err := t.compare()
	if err != nil {
		return err
	}
	fmt.Printf("faulttolerant: rank %d (%s) on GPU %d, NCCL %s: %d steps, weights identical on both ranks, |w-w*| = %.4f, max diff to a run without the failure %.1e\n",
		t.rank, *role, dev, lib.Version(), *steps, dist, diff)
	return nil
}

// growBack makes a grow id for solo, publishes it for the replacement, grows
// to two ranks and sends the step and the weights to the new rank.
func (t *trainer) growBack(ctx context.Context, solo *nccl.Comm) (*nccl.Comm, error) {
	gid, err := solo.GrowID()
	if err != nil {
		return nil, err
	}
	if err := writeID(filepath.Join(*dir, "grow.id"), gid); err != nil {
		return nil, err
	}
	grown, err := solo.Grow(ctx, 2, &gid, nil)
	if err != nil {
		return nil, err
	}
	if err := solo.Close(ctx); err != nil {
		return nil, fmt.Errorf("closing the shrunk communicator: %w", err)
	}
	if err := grown.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
		return nil, err
	}
	fmt.Printf("faulttolerant: rank 0 grew back to %d ranks at step %d\n", grown.Size(), t.step)
	return grown, t.receiveState(ctx, grown) // rank 0 is the root: it sends
}

func writeID(path string, id nccl.UniqueID) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readID(ctx context.Context, path string) (nccl.UniqueID, error) {
	for {
		if b, err := os.ReadFile(path); err == nil {
			return nccl.ParseUniqueID(string(b))
		}
		select {
		case <-ctx.Done():
			return nccl.UniqueID{}, fmt.Errorf("waiting for the grow id in %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// trainer is one rank's model and data: shard r of the data set.
type trainer struct {
	rank, dev, step int
	w               []float64
	xs              [][]float64
	ys, wStar       []float64
}

func (t *trainer) shard(r int) ([][]float64, []float64) {
	lo, hi := r**perRank, (r+1)**perRank
	return t.xs[lo:hi], t.ys[lo:hi]
}

// trainStep averages the gradient over comm's ranks, each of shard r, or over
// both shards when r is -1 (alone), and applies it.
func (t *trainer) trainStep(ctx context.Context, comm *nccl.Comm, r, shards int) error {
	var g []float64
	if r >= 0 {
		xs, ys := t.shard(r)
		g = gradient(t.w, xs, ys)
	} else {
		x0, y0 := t.shard(0)
		x1, y1 := t.shard(1)
		g0, g1 := gradient(t.w, x0, y0), gradient(t.w, x1, y1)
		g = make([]float64, features)
		for f := range g {
			g[f] = (g0[f] + g1[f]) / 2
		}
	}
	sctx, cancel := context.WithTimeout(ctx, *stepLimit)
	defer cancel()
	if err := onDevice(comm, g, func(b nccl.Buffer, s nccl.Stream) error {
		if err := comm.AllReduce(b, b, nccl.Avg, s); err != nil {
			return err
		}
		return comm.Wait(sctx, s)
	}); err != nil {
		return err
	}
	for f := range t.w {
		t.w[f] -= *lr * g[f]
	}
	return nil
}

// receiveState broadcasts rank 0's step and weights to the other ranks.
func (t *trainer) receiveState(ctx context.Context, comm *nccl.Comm) error {
	state := append([]float64{float64(t.step)}, t.w...)
	err := onDevice(comm, state, func(b nccl.Buffer, s nccl.Stream) error {
		if err := comm.Broadcast(b, b, 0, s); err != nil {
			return err
		}
		return comm.Wait(ctx, s)
	})
	t.step = int(state[0])
	copy(t.w, state[1:])
	return err
}

// onDevice copies v to a device buffer, runs f on it and copies it back.
func onDevice(comm *nccl.Comm, v []float64, f func(nccl.Buffer, nccl.Stream) error) error {
	cu := comm.Library().CUDA()
	s, err := cu.NewStream(comm.Device(), nccl.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer s.Destroy()
	b, err := cu.Alloc(comm.Device(), nccl.Float64, len(v))
	if err != nil {
		return err
	}
	defer b.Free()
	if err := nccl.CopyIn(b, v); err != nil {
		return err
	}
	if err := f(b, s); err != nil {
		return err
	}
	return nccl.CopyOut(v, b)
}

// sameOnEveryRank checks, with a max and a min all-reduce, that every rank
// holds t.w bit for bit.
func (t *trainer) sameOnEveryRank(ctx context.Context, comm *nccl.Comm) error {
	for _, op := range []nccl.RedOp{nccl.Max, nccl.Min} {
		got := append([]float64(nil), t.w...)
		if err := onDevice(comm, got, func(b nccl.Buffer, s nccl.Stream) error {
			if err := comm.AllReduce(b, b, op, s); err != nil {
				return err
			}
			return comm.Wait(ctx, s)
		}); err != nil {
			return err
		}
		for f := range got {
			if math.Float64bits(got[f]) != math.Float64bits(t.w[f]) {
				return fmt.Errorf("weight %d differs between the ranks: %v here, %v by %v", f, t.w[f], got[f], op)
			}
		}
	}
	return nil
}

// compare trains without the failure over all the data and returns the
// distance of t.w to w* and its largest difference to that run.
func (t *trainer) compare() (dist, maxDiff float64, err error) {
	ref := make([]float64, features)
	for range *steps {
		g := gradient(ref, t.xs, t.ys)
		for f := range ref {
			ref[f] -= *lr * g[f]
		}
	}
	for f := range ref {
		maxDiff = math.Max(maxDiff, math.Abs(ref[f]-t.w[f]))
		dist += (t.w[f] - t.wStar[f]) * (t.w[f] - t.wStar[f])
	}
	if maxDiff > 1e-9 {
		return 0, 0, fmt.Errorf("weights differ from the run without the failure by %g", maxDiff)
	}
	return math.Sqrt(dist), maxDiff, nil
}

// dataset is y = x·w* + noise over n samples, the same in every process.
func dataset(n int) (xs [][]float64, ys, wStar []float64) {
	rng := rand.New(rand.NewPCG(7, 11))
	wStar = make([]float64, features)
	for i := range wStar {
		wStar[i] = rng.NormFloat64()
	}
	xs, ys = make([][]float64, n), make([]float64, n)
	for i := range xs {
		xs[i] = make([]float64, features)
		for f := range xs[i] {
			xs[i][f] = rng.NormFloat64()
			ys[i] += xs[i][f] * wStar[f]
		}
		ys[i] += 0.01 * rng.NormFloat64()
	}
	return xs, ys, wStar
}

// gradient of ½·mean((x·w − y)²) with respect to w over the shard.
func gradient(w []float64, sh [][]float64, ys []float64) []float64 {
	g := make([]float64, len(w))
	for i, x := range sh {
		var pred float64
		for f := range w {
			pred += x[f] * w[f]
		}
		e := pred - ys[i]
		for f := range w {
			g[f] += e * x[f]
		}
	}
	for f := range g {
		g[f] /= float64(len(sh))
	}
	return g
}
