// Command nodeloss keeps a job going when one of its nodes dies.
//
// One process per GPU under a launcher, as examples/allreduce. The ranks
// all-reduce a vector in a loop for -for, each step under a deadline of its
// own (-step-timeout), every element checked. When a node's processes die
// mid-loop, every other rank's step fails by that deadline: NCCL reports a
// peer whose connections closed (across nodes at once, ErrRemote), and a peer
// that only stops answering costs the deadline. Each rank says which error it
// got and when.
//
// With -lost-node K the ranks of the other nodes then go on without node K:
// they revoke the communicator (Comm.Revoke, NCCL >= 2.28.7), shrink node K's
// ranks away (Comm.Shrink with ShrinkAbort) and run -after more checked
// steps among themselves. Where NCCL refuses the revoke or the shrink with
// the peer's closed connection (NCCL 2.28.9 across nodes keeps that error
// and refuses to revoke), and with -rebuild on any NCCL, they abort and make
// a new communicator of the ranks left instead, its id shared through
// torchrun's store (kept by the first node's agent, which must be among
// them). On an NCCL without ncclCommRevoke and without -rebuild they say so
// and exit 1, as they do without -lost-node. Which ranks are on node K comes from
// the launcher (torchrun's GROUP_RANK, srun's SLURM_NODEID), gathered from
// every rank at the start. Two nodes, node 1 killed while the loop runs
// (scripts/gpu-nodes.sh does it with two nodes emulated on one machine):
//
//	torchrun --nnodes 2 --node-rank K --nproc-per-node 4 --master-addr nodeA --master-port 29500 --no-python ./nodeloss -lost-node 1
//
// A real job learns which node died from elsewhere (its scheduler, a health
// check); here the operator says it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

var (
	n         = flag.Int("n", 1<<20, "elements per rank")
	loopFor   = flag.Duration("for", time.Minute, "how long the loop of all-reduces runs")
	after     = flag.Int("after", 10, "checked steps the ranks left run after shrinking")
	lostNode  = flag.Int("lost-node", -1, "the node whose ranks the others shrink away when a step fails (-1: none, exit 1)")
	stepLimit = flag.Duration("step-timeout", 5*time.Second, "deadline of one step: past it, a silent peer counts as dead")
	timeout   = flag.Duration("timeout", time.Minute, "deadline to join, again to recover, and again to close")
	rebuild   = flag.Bool("rebuild", false, "go on without the lost node through a new communicator (abort, a fresh id through torchrun's store, init) instead of revoking and shrinking")
)

// nonBlocking: every call that waits on peers (init, Revoke, Shrink, Close)
// can then give up at its context's end, inside NCCL too.
var nonBlocking = &nccl.Config{Blocking: new(bool)}

func main() {
	lf := launch.Register(flag.CommandLine)
	flag.Parse()
	job, err := lf.Detect() // torchrun's, srun's or mpirun's variables, or -rank/-size
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	if err := run(lib, job, lf.Share()); err != nil {
		log.Fatalf("nodeloss: rank %d: %v", job.Rank, err)
	}
}

func run(lib *nccl.Library, job launch.Job, share launch.Share) error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	id, err := launch.UniqueID(ctx, lib, job, share)
	if err != nil {
		return err
	}
	visible, err := lib.CUDA().DeviceCount()
	if err != nil {
		return err
	}
	dev, err := job.Device(visible)
	if err != nil {
		return err
	}
	comm, err := lib.InitRank(ctx, dev, id, job.Size, job.Rank, nonBlocking)
	launch.Cleanup(job, share)
	if err != nil {
		return err
	}
	// A step past its deadline revokes the communicator instead of aborting
	// it, so that it can still be shrunk. Without ncclCommRevoke it aborts.
	canShrink := lib.Require("ncclCommRevoke", "ncclCommShrink")
	if canShrink == nil {
		if err := comm.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
			return err
		}
	}
	r, err := newRing(comm)
	if err != nil {
		return err
	}
	nodes, err := r.nodes(ctx, job.Node)
	if err != nil {
		return err
	}
	if *lostNode >= 0 && slices.Contains(nodes, -1) {
		return fmt.Errorf("-lost-node needs every rank's node from its launcher (torchrun, srun); nodes by rank: %v", nodes)
	}

	start := time.Now()
	step := 0
	for ; step == 0 || time.Since(start) < *loopFor; step++ {
		began := time.Now()
		err := r.step(step)
		if err == nil {
			if step == 0 {
				fmt.Printf("nodeloss: rank %d/%d on node %d (pid %d) on GPU %d, NCCL %s: looping for %v\n",
					job.Rank, job.Size, job.Node, os.Getpid(), dev, lib.Version(), *loopFor)
			}
			continue
		}
		kind := lossKind(err)
		if kind == "" { // not a lost peer: a wrong element, a CUDA failure
			comm.Abort()
			return fmt.Errorf("step %d: %w", step, err)
		}
		at := time.Now()
		fmt.Printf("nodeloss: rank %d/%d on node %d: step %d failed %v after it began (unix ms %d), %s: %v\n",
			job.Rank, job.Size, job.Node, step, at.Sub(began).Round(time.Millisecond), at.UnixMilli(), kind, err)
		if *lostNode < 0 || job.Node == *lostNode {
			comm.Abort()
			return fmt.Errorf("step %d: %w", step, err)
		}
		if *rebuild {
			return goOnAnew(lib, job, share, comm, r, nodes)
		}
		if canShrink != nil {
			comm.Abort()
			return fmt.Errorf("cannot go on without node %d: %w", *lostNode, canShrink)
		}
		return goOn(lib, job, share, comm, r, nodes)
	}
	if err := r.free(); err != nil {
		return err
	}
	cctx, ccancel := context.WithTimeout(context.Background(), *timeout)
	defer ccancel()
	if err := comm.Close(cctx); err != nil {
		return err
	}
	fmt.Printf("nodeloss: rank %d/%d: %d steps of %d floats, every element correct\n", job.Rank, job.Size, step, *n)
	return nil
}

// lossKind names the error of a step that lost a peer, "" for any other.
func lossKind(err error) string {
	switch {
	case errors.Is(err, nccl.ErrRemote):
		return "a peer's connection closed (ErrRemote)"
	case errors.Is(err, nccl.ErrSystem):
		return "a system error (ErrSystem)"
	case errors.Is(err, context.DeadlineExceeded):
		return "the step's deadline (context.DeadlineExceeded)"
	case errors.Is(err, nccl.ErrRevoked):
		return "the communicator revoked (ErrRevoked)"
	}
	return ""
}

// goOn revokes comm, shrinks the lost node's ranks away and runs -after
// checked steps on the ranks left. Where NCCL refuses the revoke or the
// shrink because the communicator holds a peer's closed connection
// (ErrRemote: NCCL keeps that error for good, and 2.28.9 refuses to revoke
// across nodes after it), it goes on through a new communicator instead
// (goOnAnew).
func goOn(lib *nccl.Library, job launch.Job, share launch.Share, comm *nccl.Comm, r *ring, nodes []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	began := time.Now()
	// A step that reached its deadline revoked the communicator already (Wait
	// under RevokeOnDeadline); one that NCCL failed first (a connection
	// closed) is revoked here: its work stops, and NCCL resets the
	// communicator's error, which its shrink checks.
	if !comm.Revoked() {
		if err := comm.Revoke(ctx); err != nil {
			if errors.Is(err, nccl.ErrRemote) {
				fmt.Printf("nodeloss: rank %d/%d: NCCL refused the revoke (%v): a new communicator instead\n", comm.Rank(), comm.Size(), err)
				return goOnAnew(lib, job, share, comm, r, nodes)
			}
			return fmt.Errorf("revoke: %w", err)
		}
	}
	var gone []int
	for rank, node := range nodes {
		if node == *lostNode {
			gone = append(gone, rank)
		}
	}
	left, err := comm.Shrink(ctx, gone, nil, nccl.ShrinkAbort)
	if errors.Is(err, nccl.ErrRemote) {
		fmt.Printf("nodeloss: rank %d/%d: NCCL refused the shrink (%v): a new communicator instead\n", comm.Rank(), comm.Size(), err)
		return goOnAnew(lib, job, share, comm, r, nodes)
	}
	if err != nil {
		return fmt.Errorf("shrink away ranks %v: %w", gone, err)
	}
	if err := comm.Close(ctx); err != nil { // shrunk with ShrinkAbort: aborted
		return fmt.Errorf("closing the revoked communicator: %w", err)
	}
	if err := r.free(); err != nil { // revoked: nothing of NCCL's runs on them now
		return err
	}
	fmt.Printf("nodeloss: rank %d/%d is rank %d/%d without node %d (ranks %v): revoked and shrunk in %v\n",
		comm.Rank(), comm.Size(), left.Rank(), left.Size(), *lostNode, gone, time.Since(began).Round(time.Millisecond))
	return stepsWithout(ctx, left)
}

// goOnAnew aborts comm and makes a new communicator of the ranks left, on
// any NCCL: the lowest of them makes a fresh id and shares it through the
// launcher's store (torchrun's, which the first node's agent keeps: that
// node must be among the ranks left), the others read it, and all init.
// Then -after checked steps.
func goOnAnew(lib *nccl.Library, job launch.Job, share launch.Share, comm *nccl.Comm, r *ring, nodes []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	began := time.Now()
	comm.Abort() // nothing of NCCL's runs on the buffers after it
	if err := r.free(); err != nil {
		return err
	}
	j := job
	j.Rank, j.Size = -1, 0
	for rank, node := range nodes {
		if node == *lostNode {
			continue
		}
		if rank == comm.Rank() {
			j.Rank = j.Size
		}
		j.Size++
	}
	id, err := launch.UniqueID(ctx, lib, j, launch.Share{Via: launch.ViaStore, Store: share.Store,
		Name: fmt.Sprintf("nodeloss-without-node-%d", *lostNode)})
	if err != nil {
		return fmt.Errorf("a new id for the ranks left: %w", err)
	}
	left, err := lib.InitRank(ctx, comm.Device(), id, j.Size, j.Rank, nonBlocking)
	if err != nil {
		return fmt.Errorf("a new communicator of the ranks left: %w", err)
	}
	fmt.Printf("nodeloss: rank %d/%d is rank %d/%d without node %d: a new communicator in %v\n",
		comm.Rank(), comm.Size(), left.Rank(), left.Size(), *lostNode, time.Since(began).Round(time.Millisecond))
	return stepsWithout(ctx, left)
}

// stepsWithout runs -after checked steps on left, the communicator of the
// ranks left, and closes it.
func stepsWithout(ctx context.Context, left *nccl.Comm) error {
	r, err := newRing(left)
	if err != nil {
		return err
	}
	for step := range *after {
		if err := r.step(step); err != nil {
			left.Abort()
			return fmt.Errorf("step %d without node %d: %w", step, *lostNode, err)
		}
	}
	if err := r.free(); err != nil {
		return err
	}
	if err := left.Close(ctx); err != nil {
		return err
	}
	fmt.Printf("nodeloss: rank %d/%d went on without node %d: %d steps of %d floats, every element correct\n",
		left.Rank(), left.Size(), *lostNode, *after, *n)
	return nil
}

// ring is a communicator with the stream and the buffer of its steps.
type ring struct {
	comm *nccl.Comm
	s    nccl.Stream
	buf  nccl.Buffer
	host []float32
}

func newRing(comm *nccl.Comm) (*ring, error) {
	cu := comm.Library().CUDA()
	s, err := cu.NewStream(comm.Device(), nccl.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	buf, err := cu.Alloc(comm.Device(), nccl.Float32, *n)
	if err != nil {
		s.Destroy()
		return nil, err
	}
	return &ring{comm: comm, s: s, buf: buf, host: make([]float32, *n)}, nil
}

func (r *ring) free() error {
	return errors.Join(r.s.Synchronize(), r.buf.Free(), r.s.Destroy())
}

// nodes all-gathers every rank's node index (-1 where its launcher did not
// say).
func (r *ring) nodes(ctx context.Context, node int) ([]int, error) {
	cu := r.comm.Library().CUDA()
	send, err := cu.Alloc(r.comm.Device(), nccl.Int32, 1)
	if err != nil {
		return nil, err
	}
	defer send.Free()
	recv, err := cu.Alloc(r.comm.Device(), nccl.Int32, r.comm.Size())
	if err != nil {
		return nil, err
	}
	defer recv.Free()
	if err := nccl.CopyIn(send, []int32{int32(node)}); err != nil {
		return nil, err
	}
	if err := r.comm.AllGather(send, recv, r.s); err != nil {
		return nil, err
	}
	if err := r.comm.Wait(ctx, r.s); err != nil {
		return nil, err
	}
	got := make([]int32, r.comm.Size())
	if err := nccl.CopyOut(got, recv); err != nil {
		return nil, err
	}
	nodes := make([]int, len(got))
	for i, v := range got {
		nodes[i] = int(v)
	}
	return nodes, nil
}

// step all-reduces (rank+1)·((i+k)%100) under -step-timeout and checks every
// element of the sum.
func (r *ring) step(k int) error {
	rank, size := r.comm.Rank(), r.comm.Size()
	for i := range r.host {
		r.host[i] = float32((rank + 1) * ((i + k) % 100))
	}
	if err := nccl.CopyIn(r.buf, r.host); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *stepLimit)
	defer cancel()
	if err := r.comm.AllReduce(r.buf, r.buf, nccl.Sum, r.s); err != nil {
		return err
	}
	if err := r.comm.Wait(ctx, r.s); err != nil {
		return err
	}
	if err := nccl.CopyOut(r.host, r.buf); err != nil {
		return err
	}
	scale := size * (size + 1) / 2
	for i, v := range r.host {
		if want := float32(scale * ((i + k) % 100)); v != want {
			return fmt.Errorf("element %d = %v, want %v", i, v, want)
		}
	}
	return nil
}
