package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
	"github.com/gonccl/nccl/internal/fakes/graphtest"
)

// The fake NCCL's operations are captured into CUDA graphs and replayed as a
// real NCCL's are (nccltest/csrc/fakenccl/remote_ops.c, "CUDA graphs"): a capture records them
// without running them, each launch runs them afresh on the data as it is
// then, a launch is collective (one rank's launch completes only once its
// peers launch theirs), and from NCCL 2.26 on ncclCommDestroy and
// ncclCommAbort wait until the graphs holding the communicator's work are
// destroyed. Each test fails on fakes without that. The harness (ranks that
// capture, launch and check, reference data, raw C calls) is package
// internal/fakes/graphtest.

// ---- replay in one process ----

// TestFakeGraphAllReduce: every rank (goroutine, fake device) captures the same
// K all-reduces of several types and reductions on its stream; nothing runs
// during the capture; the graph is then launched R times, the inputs changed
// before each launch by asynchronous copies on the stream, and every element
// of every result is checked after each launch. Blocking communicators of
// every variant, 3 ranks, and non-blocking communicators (whose launch runs
// on a thread of the fake's own, still into the capture). The captured
// all-reduces are the communicators' first operations: the ranks connect
// inside the capture, on the capturing thread for a blocking communicator,
// which gonccl relaxes (CUDA.relax); without it the fake fails them as NCCL
// does ("failed to peer with device").
func TestFakeGraphAllReduce(t *testing.T) {
	type mode struct {
		variant     string
		nranks      int
		nonBlocking bool
	}
	var modes []mode
	for _, v := range graphtest.Variants {
		modes = append(modes, mode{v.Name, 2, false})
	}
	modes = append(modes, mode{"default", 3, false}, mode{"default", 2, true})
	for _, md := range modes {
		nranks := md.nranks
		name := fmt.Sprintf("%s/%dranks", md.variant, nranks)
		if md.nonBlocking {
			name += "/nonblocking"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if md.nonBlocking {
				ctx = nonBlockingCtx(t)
			}
			graphAllReduce(t, open(t, md.variant), nranks, ctx)
		})
	}
}

// graphAllReduce: nranks ranks of one process, one goroutine each, capture K
// all-reduces as their communicators' first operations (NCCL connects the
// ranks inside them), upload the graphs, launch them and check every element
// (TestFakeGraphAllReduce, TestGPUCapturedAllReduce).
func graphAllReduce(t *testing.T, l *nccl.Library, nranks int, ctx context.Context) {
	comms := initComms(t, l, nranks, ctx, nil)
	defer graphtest.CloseComms(t, comms)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	const n, launches = 257, 4
	graphtest.OnRanks(t, nranks, func(r int) error {
		rk, err := graphtest.NewRank(l.CUDA(), comms[r], 16*n*len(graphtest.ARSpecs))
		if err != nil {
			return err
		}
		defer rk.Free()
		ins, outs, err := rk.AllocPairs(graphtest.ARSpecs, n)
		if err != nil {
			return err
		}
		rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error {
			for k, sp := range graphtest.ARSpecs {
				if err := rk.Comm.AllReduce(ins[k], outs[k], sp.Op, rk.Stream); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.NothingRan(outs...); err != nil {
			return err
		}
		// Uploaded first, as a program that times its launches does: the
		// launches that follow must be unchanged by it.
		if err := rk.Graph.Upload(rk.Stream); err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		if err := rk.NothingRan(outs...); err != nil {
			return fmt.Errorf("after the upload: %w", err)
		}
		for launch := range launches {
			for k, sp := range graphtest.ARSpecs {
				if err := rk.Put(ins[k], graphtest.GenData(sp.DT, n, graphtest.Seed(base, r, launch, k))); err != nil {
					return err
				}
			}
			if err := rk.Graph.Launch(rk.Stream); err != nil {
				return fmt.Errorf("launch %d: %w", launch, err)
			}
			got := make([][]byte, len(outs))
			for k := range outs {
				if got[k], err = rk.Get(outs[k]); err != nil {
					return err
				}
			}
			if err := rk.Sync(); err != nil {
				return err
			}
			for k, sp := range graphtest.ARSpecs {
				all := make([][]byte, nranks)
				for p := range nranks {
					all[p] = graphtest.GenData(sp.DT, n, graphtest.Seed(base, p, launch, k))
				}
				if err := graphtest.SameData(sp.DT, got[k], graphtest.ReduceRef(sp.DT, sp.Op, all)); err != nil {
					return fmt.Errorf("launch %d, all-reduce %d (%v, %v): %v", launch, k, sp.DT, sp.Op, err)
				}
			}
		}
		return nil
	})
}

// TestFakeGraphSendRecv: every rank captures one grouped step of a ring
// (a send to the next rank and a receive from the previous one, of two
// types), launched R times with fresh data each time.
func TestFakeGraphSendRecv(t *testing.T) {
	for _, v := range graphtest.Variants {
		for _, nranks := range []int{2, 3} {
			if nranks == 3 && v.Name != "default" {
				continue
			}
			t.Run(fmt.Sprintf("%s/%dranks", v.Name, nranks), func(t *testing.T) {
				l := open(t, v.Name)
				comms := initComms(t, l, nranks, context.Background(), nil)
				defer graphtest.CloseComms(t, comms)
				base := rand.Uint64()
				t.Logf("seed %#x", base)
				const n, launches = 300, 4
				types := []nccl.DataType{nccl.Int64, nccl.Float32}
				graphtest.OnRanks(t, nranks, func(r int) error {
					rk, err := graphtest.NewRank(l.CUDA(), comms[r], 32*n)
					if err != nil {
						return err
					}
					defer rk.Free()
					next, prev := (r+1)%nranks, (r+nranks-1)%nranks
					var sends, recvs []nccl.Buffer
					for _, dt := range types {
						s, err := rk.Alloc(dt, n, 0)
						if err != nil {
							return err
						}
						rv, err := rk.Alloc(dt, n, graphtest.Sentinel)
						if err != nil {
							return err
						}
						sends, recvs = append(sends, s), append(recvs, rv)
					}
					rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error {
						return l.Group(func() error {
							for k := range types {
								if err := rk.Comm.Send(sends[k], next, rk.Stream); err != nil {
									return err
								}
								if err := rk.Comm.Recv(recvs[k], prev, rk.Stream); err != nil {
									return err
								}
							}
							return nil
						})
					})
					if err != nil {
						return fmt.Errorf("capture: %w", err)
					}
					if err := rk.NothingRan(recvs...); err != nil {
						return err
					}
					for launch := range launches {
						for k, dt := range types {
							if err := rk.Put(sends[k], graphtest.GenData(dt, n, graphtest.Seed(base, r, launch, k))); err != nil {
								return err
							}
						}
						if err := rk.Graph.Launch(rk.Stream); err != nil {
							return err
						}
						got := make([][]byte, len(types))
						for k := range types {
							if got[k], err = rk.Get(recvs[k]); err != nil {
								return err
							}
						}
						if err := rk.Sync(); err != nil {
							return err
						}
						for k, dt := range types {
							if err := graphtest.SameData(dt, got[k], graphtest.GenData(dt, n, graphtest.Seed(base, prev, launch, k))); err != nil {
								return fmt.Errorf("launch %d, receive %d from rank %d: %v", launch, k, prev, err)
							}
						}
					}
					return nil
				})
			})
		}
	}
}

// TestFakeGraphAllGather: the graph holds a copy into the input (a captured
// device-to-device copy from a staging buffer) followed by an all-gather: each
// launch runs them in that order, so the all-gather sees the staging data of
// that launch.
func TestFakeGraphAllGather(t *testing.T) {
	for _, v := range graphtest.Variants {
		t.Run(v.Name, func(t *testing.T) {
			l := open(t, v.Name)
			const nranks, n, launches = 2, 129, 4
			comms := initComms(t, l, nranks, context.Background(), nil)
			defer graphtest.CloseComms(t, comms)
			base := rand.Uint64()
			t.Logf("seed %#x", base)
			dt := nccl.Float64
			graphtest.OnRanks(t, nranks, func(r int) error {
				rk, err := graphtest.NewRank(l.CUDA(), comms[r], 8*n*(nranks+1))
				if err != nil {
					return err
				}
				defer rk.Free()
				staging, err := rk.Alloc(dt, n, 0)
				if err != nil {
					return err
				}
				in, err := rk.Alloc(dt, n, 0)
				if err != nil {
					return err
				}
				out, err := rk.Alloc(dt, n*nranks, graphtest.Sentinel)
				if err != nil {
					return err
				}
				rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error {
					if err := l.CUDA().MemcpyAsync(uintptr(in.Ptr()), uintptr(staging.Ptr()), in.Size(), rk.Stream); err != nil {
						return err
					}
					return rk.Comm.AllGather(in, out, rk.Stream)
				})
				if err != nil {
					return fmt.Errorf("capture: %w", err)
				}
				if err := rk.NothingRan(out); err != nil {
					return err
				}
				for launch := range launches {
					if err := rk.Put(staging, graphtest.GenData(dt, n, graphtest.Seed(base, r, launch, 0))); err != nil {
						return err
					}
					if err := rk.Graph.Launch(rk.Stream); err != nil {
						return err
					}
					got, err := rk.Get(out)
					if err != nil {
						return err
					}
					if err := rk.Sync(); err != nil {
						return err
					}
					var want []byte
					for p := range nranks {
						want = append(want, graphtest.GenData(dt, n, graphtest.Seed(base, p, launch, 0))...)
					}
					if err := graphtest.SameData(dt, got, want); err != nil {
						return fmt.Errorf("launch %d: %v", launch, err)
					}
				}
				return nil
			})
		})
	}
}

// TestFakeGraphLaunchIsCollective: a graph launched by rank 0 alone does not
// complete (its all-reduce waits for rank 1, as NCCL's kernel does) until
// rank 1 launches its graph; then both complete with the right sums.
func TestFakeGraphLaunchIsCollective(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	const n = 64
	comms := initComms(t, l, 2, context.Background(), nil)
	defer graphtest.CloseComms(t, comms)
	ranks := make([]*graphtest.Rank, 2)
	ins := make([]nccl.Buffer, 2)
	outs := make([]nccl.Buffer, 2)
	defer func() {
		for _, rk := range ranks {
			if rk != nil {
				rk.Free()
			}
		}
	}()
	graphtest.OnRanks(t, 2, func(r int) error {
		rk, err := graphtest.NewRank(cu, comms[r], 8*n)
		if err != nil {
			return err
		}
		ranks[r] = rk
		if ins[r], err = rk.Alloc(nccl.Float32, n, 0); err != nil {
			return err
		}
		if outs[r], err = rk.Alloc(nccl.Float32, n, graphtest.Sentinel); err != nil {
			return err
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(r*1000 + i)
		}
		if err := nccl.CopyIn(ins[r], data); err != nil {
			return err
		}
		rk.Graph, err = cu.Capture(rk.Stream, func() error { return rk.Comm.AllReduce(ins[r], outs[r], nccl.Sum, rk.Stream) })
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	if err := ranks[0].Graph.Launch(ranks[0].Stream); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if done, err := ranks[0].Stream.Query(); err != nil || done {
		t.Fatalf("rank 0's launch completed without rank 1's (query %v, %v)", done, err)
	}
	if err := graphtest.Untouched(outs[0], graphtest.Sentinel); err != nil {
		t.Fatal(err)
	}
	if err := ranks[1].Graph.Launch(ranks[1].Stream); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if err := ranks[r].Stream.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if err := nccl.CopyOut(got, outs[r]); err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if want := float32(1000 + 2*i); x != want {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, x, want)
			}
		}
	}
}

// ---- the destroy waits for the graphs: raw C calls, unknown to gonccl ----

// TestFakeGraphDestroyWaits: with NCCL >= 2.26 (default, v230),
// ncclCommDestroy and ncclCommAbort do not return while a CUDA graph holding
// the communicator's captured work lives (the executable graph and the graph
// it came from both count, and a launch still in flight of a graph already
// destroyed too), and return once they are gone; with 2.14 ("old") they
// return at once. The communicators and graphs are made with the C functions,
// unknown to gonccl.
func TestFakeGraphDestroyWaits(t *testing.T) {
	for _, v := range graphtest.Variants {
		t.Run(v.Name, func(t *testing.T) {
			l := open(t, v.Name)
			cu := l.CUDA()
			r, err := graphtest.OpenRaw(l.Path, cu.Path)
			if err != nil {
				t.Fatal(err)
			}
			j, err := graphtest.NewRawJob(r, cu, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Free()
			if err := j.Check(0, 1); err != nil { // nothing ran during the capture
				t.Fatal(err)
			}
			for i := range 2 {
				if err := j.Launch(i); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 2 {
				if err := j.Check(i, 3); err != nil {
					t.Fatal(err)
				}
			}
			if !v.Waits {
				if _, err := graphtest.Returns(graphtest.Async(func() int32 { return r.N("ncclCommDestroy", j.Comms[0]) }), 10*time.Second); err != nil {
					t.Fatalf("ncclCommDestroy of NCCL 2.14 with a graph alive: %v", err)
				}
				if _, err := graphtest.Returns(graphtest.Async(func() int32 { return r.N("ncclCommAbort", j.Comms[1]) }), 10*time.Second); err != nil {
					t.Fatalf("ncclCommAbort of NCCL 2.14 with a graph alive: %v", err)
				}
				for i := range 2 {
					if err := j.DestroyGraph(i); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			// Rank 0's graph launched alone stays in flight; destroying it
			// returns at once, but CUDA frees it only after that launch.
			if err := j.Fill(); err != nil {
				t.Fatal(err)
			}
			if err := j.Launch(0); err != nil {
				t.Fatal(err)
			}
			if err := j.DestroyGraph(0); err != nil {
				t.Fatal(err)
			}
			destroy := graphtest.Async(func() int32 { return r.N("ncclCommDestroy", j.Comms[0]) })
			if !graphtest.Blocked(destroy, 300*time.Millisecond) {
				t.Fatal("ncclCommDestroy returned while a launch of its graph was in flight")
			}
			if err := j.Launch(1); err != nil {
				t.Fatal(err)
			}
			if rc, err := graphtest.Returns(destroy, 10*time.Second); err != nil || rc != 0 {
				t.Fatalf("ncclCommDestroy after the last launch completed: %d, %v", rc, err)
			}
			if err := j.Check(1, 3); err != nil {
				t.Fatal(err)
			}
			if err := j.Check(0, 3); err != nil {
				t.Fatal(err)
			}
			// Rank 1: the abort waits for the executable graph and the graph.
			abort := graphtest.Async(func() int32 { return r.N("ncclCommAbort", j.Comms[1]) })
			if !graphtest.Blocked(abort, 300*time.Millisecond) {
				t.Fatal("ncclCommAbort returned while its graph lives")
			}
			if rc := r.C("cudaGraphDestroy", j.Graphs[1]); rc != 0 {
				t.Fatal(rc)
			}
			if !graphtest.Blocked(abort, 200*time.Millisecond) {
				t.Fatal("ncclCommAbort returned while its executable graph lives")
			}
			if rc := r.C("cudaGraphExecDestroy", j.Execs[1]); rc != 0 {
				t.Fatal(rc)
			}
			if rc, err := graphtest.Returns(abort, 10*time.Second); err != nil || rc != 0 {
				t.Fatalf("ncclCommAbort after the graphs were destroyed: %d, %v", rc, err)
			}
		})
	}
}

// TestFakeGraphDestroyWarns: past FAKENCCL_CONNECT_WARN_MS the waiting
// ncclCommDestroy says once on stderr what it waits for (real NCCL waits
// silently), in a child process, and returns once the graph is destroyed.
func TestFakeGraphDestroyWarns(t *testing.T) {
	out, err := fakes.RunChild(t, 30*time.Second, "graph-destroy-warns", "FAKENCCL_CONNECT_WARN_MS=100",
		"GONCCL_NCCL_LIB="+nccl.FakeNCCL(t, "default"), "GONCCL_CUDART_LIB="+nccl.FakeCUDART(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const want = "fakenccl: ncclCommDestroy on rank 0 waits for CUDA graphs holding 1 captured launch(es) of the communicator to be destroyed"
	if strings.Count(out, want) != 1 {
		t.Fatalf("want the warning once:\n%s", out)
	}
}

func init() {
	nccl.Children["graph-destroy-warns"] = func() error {
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		cu := l.CUDA()
		r, err := graphtest.OpenRaw(l.Path, cu.Path)
		if err != nil {
			return err
		}
		j, err := graphtest.NewRawJob(r, cu, 1)
		if err != nil {
			return err
		}
		if err := j.Launch(0); err != nil {
			return err
		}
		if err := j.Check(0, 1); err != nil {
			return err
		}
		destroy := graphtest.Async(func() int32 { return r.N("ncclCommDestroy", j.Comms[0]) })
		if !graphtest.Blocked(destroy, time.Second) {
			return errors.New("ncclCommDestroy returned while its graph lives")
		}
		if err := j.DestroyGraph(0); err != nil {
			return err
		}
		if rc, err := graphtest.Returns(destroy, 10*time.Second); err != nil || rc != 0 {
			return fmt.Errorf("ncclCommDestroy after the graph was destroyed: %d, %v", rc, err)
		}
		j.Free()
		return nil
	}
}

// ---- across processes ----

// TestFakeGraphMultiProcess: two processes, one rank each, meeting at
// NCCL_COMM_ID (rank 0's process hosts the clique, rank 1's is its remote
// rank): each captures two all-reduces and a send/receive exchange and
// launches the graph R times with fresh data, every element checked in each
// process.
func TestFakeGraphMultiProcess(t *testing.T) {
	addr := freeAddr(t)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[r], errs[r] = fakes.RunChild(t, 60*time.Second, "graph-mp", "NCCL_COMM_ID="+addr,
				"GONCCL_NCCL_LIB="+nccl.FakeNCCL(t, "default"), "GONCCL_CUDART_LIB="+nccl.FakeCUDART(t),
				"FAKECUDA_DELAY_US=20", "GRAPH_RANK="+strconv.Itoa(r), "GRAPH_SEED="+strconv.FormatUint(base, 10))
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
}

func init() {
	nccl.Children["graph-mp"] = func() error {
		const nranks, n, launches = 2, 100, 5
		r, _ := strconv.Atoi(os.Getenv("GRAPH_RANK"))
		base, _ := strconv.ParseUint(os.Getenv("GRAPH_SEED"), 10, 64)
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		id, err := l.GetUniqueID()
		if err != nil {
			return err
		}
		c, err := l.InitRank(context.Background(), 0, id, nranks, r, nil)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		rk, err := graphtest.NewRank(l.CUDA(), c, 64*n)
		if err != nil {
			return err
		}
		defer rk.Free()
		specs := graphtest.ARSpecs[:2]
		ins, outs, err := rk.AllocPairs(specs, n)
		if err != nil {
			return err
		}
		send, err := rk.Alloc(nccl.Int64, n, 0)
		if err != nil {
			return err
		}
		recv, err := rk.Alloc(nccl.Int64, n, graphtest.Sentinel)
		if err != nil {
			return err
		}
		peer := 1 - r
		rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error {
			for k, sp := range specs {
				if err := c.AllReduce(ins[k], outs[k], sp.Op, rk.Stream); err != nil {
					return err
				}
			}
			return l.Group(func() error {
				if err := c.Send(send, peer, rk.Stream); err != nil {
					return err
				}
				return c.Recv(recv, peer, rk.Stream)
			})
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.NothingRan(append(outs, recv)...); err != nil {
			return err
		}
		for launch := range launches {
			for k, sp := range specs {
				if err := rk.Put(ins[k], graphtest.GenData(sp.DT, n, graphtest.Seed(base, r, launch, k))); err != nil {
					return err
				}
			}
			if err := rk.Put(send, graphtest.GenData(nccl.Int64, n, graphtest.Seed(base, r, launch, 9))); err != nil {
				return err
			}
			if err := rk.Graph.Launch(rk.Stream); err != nil {
				return err
			}
			got := make([][]byte, len(specs)+1)
			for k := range specs {
				if got[k], err = rk.Get(outs[k]); err != nil {
					return err
				}
			}
			if got[len(specs)], err = rk.Get(recv); err != nil {
				return err
			}
			if err := rk.Sync(); err != nil {
				return err
			}
			for k, sp := range specs {
				all := make([][]byte, nranks)
				for p := range nranks {
					all[p] = graphtest.GenData(sp.DT, n, graphtest.Seed(base, p, launch, k))
				}
				if err := graphtest.SameData(sp.DT, got[k], graphtest.ReduceRef(sp.DT, sp.Op, all)); err != nil {
					return fmt.Errorf("launch %d, all-reduce %d: %v", launch, k, err)
				}
			}
			if err := graphtest.SameData(nccl.Int64, got[len(specs)], graphtest.GenData(nccl.Int64, n, graphtest.Seed(base, peer, launch, 9))); err != nil {
				return fmt.Errorf("launch %d, receive: %v", launch, err)
			}
		}
		if err := rk.Graph.Destroy(); err != nil {
			return err
		}
		rk.Graph = nil
		return nil
	}
}

// TestFakeGraphRMA: NCCL 2.30's one-sided calls are captured too: each rank's
// graph puts its source into the next rank's window and waits for the
// previous rank's signal; every launch moves that launch's data (the ranks
// meet between launches: a put lands in the peer's window at once).
func TestFakeGraphRMA(t *testing.T) {
	l := open(t, "v230")
	const nranks, size, half, launches = 2, 777, 1024, 4
	comms := initComms(t, l, nranks, context.Background(), nil)
	defer graphtest.CloseComms(t, comms)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	ranks := make([]*graphtest.Rank, nranks)
	syms := make([]nccl.Buffer, nranks)
	defer func() {
		for r, rk := range ranks {
			if rk != nil {
				rk.Free()
			}
			if syms[r].Len() > 0 {
				syms[r].Free()
			}
		}
	}()
	graphtest.OnRanks(t, nranks, func(r int) (err error) {
		syms[r], err = comms[r].AllocSymmetric(nccl.Uint8, 2*half)
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	graphtest.OnRanks(t, nranks, func(r int) error {
		rk, err := graphtest.NewRank(l.CUDA(), comms[r], 4*half)
		if err != nil {
			return err
		}
		ranks[r] = rk
		if err := syms[r].Memset(0); err != nil {
			return err
		}
		win, off, err := rk.Comm.WindowOf(syms[r].Slice(half, 2*half))
		if err != nil {
			return err
		}
		next, prev := (r+1)%nranks, (r+nranks-1)%nranks
		rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error {
			if err := rk.Comm.PutSignal(syms[r].Slice(0, size), next, win, off, rk.Stream); err != nil {
				return err
			}
			return rk.Comm.WaitSignal([]nccl.WaitSignalDesc{{OpCnt: 1, Peer: int32(prev)}}, rk.Stream)
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.Sync(); err != nil {
			return err
		}
		return graphtest.Untouched(syms[r].Slice(half, 2*half), 0)
	})
	if t.Failed() {
		t.FailNow()
	}
	for launch := range launches {
		graphtest.OnRanks(t, nranks, func(r int) error {
			rk := ranks[r]
			if err := rk.Put(syms[r].Slice(0, size), graphtest.GenData(nccl.Int64, size/8+1, graphtest.Seed(base, r, launch, 0))[:size]); err != nil {
				return err
			}
			if err := rk.Graph.Launch(rk.Stream); err != nil {
				return err
			}
			return rk.Sync() // ends once the previous rank's put and signal came
		})
		graphtest.OnRanks(t, nranks, func(r int) error {
			prev := (r + nranks - 1) % nranks
			got := make([]byte, size)
			if err := nccl.CopyOut(got, syms[r].Slice(half, half+size)); err != nil {
				return err
			}
			if err := graphtest.SameData(nccl.Uint8, got, graphtest.GenData(nccl.Int64, size/8+1, graphtest.Seed(base, prev, launch, 0))[:size]); err != nil {
				return fmt.Errorf("launch %d: the window: %v", launch, err)
			}
			return nil
		})
	}
}

// TestFakeGraphAlltoAllv: an all-to-all-v on symmetric buffers, where a plain
// launch takes VCCL's native ncclAlltoAllv, is captured, and each launch
// exchanges that launch's data. VCCL 2.29.2 aborts the process when its native
// call is captured (an assertion in ncclLaunchRmaColl, seen on 4 × H200; the
// fake aborts too): under a capture gonccl runs the exchange grouped, and with
// SetPath(Native) the capture gets an *UnsupportedError.
func TestFakeGraphAlltoAllv(t *testing.T) {
	for _, variant := range []string{"vccl11", "default"} {
		t.Run(variant, func(t *testing.T) { graphAlltoAllv(t, open(t, variant), 2) })
	}
}

// graphAlltoAllv captures an all-to-all-v of nranks ranks on symmetric
// buffers and checks four launches' data (TestFakeGraphAlltoAllv,
// TestGPUAlltoAllvCaptured). With SetPath(Native) the capture is refused: on
// a library with ncclAlltoAllv because it cannot be captured, on one without
// because it has none.
func graphAlltoAllv(t *testing.T, l *nccl.Library, nranks int) {
	const launches = 4
	comms := initComms(t, l, nranks, context.Background(), nil)
	defer graphtest.CloseComms(t, comms)
	base := rand.Uint64()
	t.Logf("seed %#x", base)
	m := nccl.Layout{make([]uint64, nranks*nranks), make([]uint64, nranks*nranks), make([]uint64, nranks*nranks), make([]uint64, nranks*nranks)}
	sendLen, recvLen := make([]int, nranks), make([]int, nranks)
	for i := range nranks { // sender i to receiver j: 3+5i+7j elements, packed
		for j := range nranks {
			k := uint64(3 + 5*i + 7*j)
			m.SendCounts[i*nranks+j], m.SendDispls[i*nranks+j] = k, uint64(sendLen[i])
			m.RecvCounts[j*nranks+i], m.RecvDispls[j*nranks+i] = k, uint64(recvLen[j])
			sendLen[i] += int(k)
			recvLen[j] += int(k)
		}
	}
	dt := nccl.Float32
	ranks := make([]*graphtest.Rank, nranks)
	sends, recvs := make([]nccl.Buffer, nranks), make([]nccl.Buffer, nranks)
	defer func() {
		for r, rk := range ranks {
			if rk != nil {
				rk.Free()
			}
			for _, b := range []nccl.Buffer{sends[r], recvs[r]} {
				if b.Len() > 0 {
					b.Free()
				}
			}
		}
	}()
	graphtest.OnRanks(t, nranks, func(r int) (err error) {
		if sends[r], err = comms[r].AllocSymmetric(dt, sendLen[r]); err != nil {
			return err
		}
		recvs[r], err = comms[r].AllocSymmetric(dt, recvLen[r])
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	graphtest.OnRanks(t, nranks, func(r int) error {
		rk, err := graphtest.NewRank(l.CUDA(), comms[r], 8*(sendLen[r]+recvLen[r]))
		if err != nil {
			return err
		}
		ranks[r] = rk
		if err := recvs[r].Memset(graphtest.Sentinel); err != nil {
			return err
		}
		if err := rk.Comm.SetPath(nccl.Native); err != nil {
			return err
		}
		_, err = l.CUDA().Capture(rk.Stream, func() error { return rk.Comm.AlltoAllv(sends[r], recvs[r], m, rk.Stream) })
		if ue := (*nccl.UnsupportedError)(nil); !errors.As(err, &ue) || l.Has("ncclAlltoAllv") != strings.Contains(ue.Name, "capture") {
			return fmt.Errorf("native path captured: got %v, want an *UnsupportedError (naming the capture where the library has ncclAlltoAllv)", err)
		}
		if err := rk.Comm.SetPath(nccl.Auto); err != nil {
			return err
		}
		rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error { return rk.Comm.AlltoAllv(sends[r], recvs[r], m, rk.Stream) })
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := rk.Sync(); err != nil {
			return err
		}
		return graphtest.Untouched(recvs[r], graphtest.Sentinel)
	})
	if t.Failed() {
		t.FailNow()
	}
	for launch := range launches {
		graphtest.OnRanks(t, nranks, func(r int) error {
			rk := ranks[r]
			if err := rk.Put(sends[r], graphtest.GenData(dt, sendLen[r], graphtest.Seed(base, r, launch, 0))); err != nil {
				return err
			}
			if err := rk.Graph.Launch(rk.Stream); err != nil {
				return err
			}
			return rk.Sync()
		})
		graphtest.OnRanks(t, nranks, func(r int) error {
			got := make([]byte, recvs[r].Size())
			if err := recvs[r].ReadBytes(got); err != nil {
				return err
			}
			want := make([]byte, len(got))
			for i := range nranks {
				src := graphtest.GenData(dt, sendLen[i], graphtest.Seed(base, i, launch, 0))
				sd, k, rd := int(m.SendDispls[i*nranks+r]), int(m.SendCounts[i*nranks+r]), int(m.RecvDispls[r*nranks+i])
				copy(want[4*rd:4*(rd+k)], src[4*sd:4*(sd+k)])
			}
			if err := graphtest.SameData(dt, got, want); err != nil {
				return fmt.Errorf("launch %d: %v", launch, err)
			}
			return nil
		})
	}
}

// TestFakeGraphMismatch: replayed collectives are checked across ranks as
// those called directly are: rank 0's graph holds an all-reduce where rank
// 1's holds a broadcast, so their launch fails on both ranks with NCCL's
// invalid usage (the async error), naming both calls, and no data moves.
func TestFakeGraphMismatch(t *testing.T) {
	l := open(t, "default")
	const n = 16
	comms := initComms(t, l, 2, context.Background(), nil)
	ranks := make([]*graphtest.Rank, 2)
	outs := make([]nccl.Buffer, 2)
	defer func() {
		for _, c := range comms {
			c.Abort() // the communicators failed: aborted, as after an asynchronous error
		}
	}()
	defer func() {
		for _, rk := range ranks {
			if rk != nil {
				rk.Free()
			}
		}
	}()
	graphtest.OnRanks(t, 2, func(r int) error {
		rk, err := graphtest.NewRank(l.CUDA(), comms[r], 8*n)
		if err != nil {
			return err
		}
		ranks[r] = rk
		in, err := rk.Alloc(nccl.Float32, n, 1)
		if err != nil {
			return err
		}
		if outs[r], err = rk.Alloc(nccl.Float32, n, graphtest.Sentinel); err != nil {
			return err
		}
		rk.Graph, err = l.CUDA().Capture(rk.Stream, func() error {
			if r == 0 {
				return rk.Comm.AllReduce(in, outs[r], nccl.Sum, rk.Stream)
			}
			return rk.Comm.Broadcast(in, outs[r], 0, rk.Stream)
		})
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	graphtest.OnRanks(t, 2, func(r int) error {
		if err := ranks[r].Graph.Launch(ranks[r].Stream); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := comms[r].Wait(ctx, ranks[r].Stream)
		if !errors.Is(err, nccl.ErrInvalidUsage) {
			return fmt.Errorf("Wait after the launch: %v, want invalid usage", err)
		}
		if err := ranks[r].Stream.Synchronize(); err != nil {
			return err
		}
		return graphtest.Untouched(outs[r], graphtest.Sentinel)
	})
	if last := l.LastError(); !strings.Contains(last, "rank 0 called AllReduce(count 16, float32, sum) but rank 1 called Broadcast(count 16, float32, root 0)") {
		t.Errorf("last error %q", last)
	}
}

// TestFakeGraphCloseWaitsForForeignGraph: a graph captured by another library
// (here the C calls, on a gonccl stream) holding a communicator's all-reduce is
// unknown to gonccl, so Close and Abort reach ncclCommDestroy and
// ncclCommAbort, which (NCCL >= 2.26) wait until that graph is destroyed.
func TestFakeGraphCloseWaitsForForeignGraph(t *testing.T) {
	for _, how := range []string{"Close", "Abort"} {
		t.Run(how, func(t *testing.T) {
			l := open(t, "default")
			cu := l.CUDA()
			r, err := graphtest.OpenRaw(l.Path, cu.Path)
			if err != nil {
				t.Fatal(err)
			}
			c := initComms(t, l, 1, context.Background(), nil)[0]
			s, err := cu.NewStream(0, nccl.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			b, err := cu.Alloc(0, nccl.Float32, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			if err := nccl.CopyIn(b, []float32{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
				t.Fatal(err)
			}
			if rc := r.C("cudaStreamBeginCapture", s.Handle(), 2); rc != 0 {
				t.Fatal(rc)
			}
			if err := c.AllReduce(b, b, nccl.Max, s); err != nil {
				t.Fatal(err)
			}
			graph, rc := r.EndCapture(s.Handle())
			if rc != 0 {
				t.Fatal(rc)
			}
			exec, rc := r.Instantiate(graph)
			if rc != 0 {
				t.Fatal(rc)
			}
			if rc := r.C("cudaGraphLaunch", exec, s.Handle()); rc != 0 {
				t.Fatal(rc)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				if how == "Close" {
					done <- c.Close(context.Background())
				} else {
					done <- c.Abort()
				}
			}()
			select {
			case err := <-done:
				t.Fatalf("%s returned (%v) while a graph holds the communicator", how, err)
			case <-time.After(300 * time.Millisecond):
			}
			if rc := r.C("cudaGraphExecDestroy", exec); rc != 0 {
				t.Fatal(rc)
			}
			if rc := r.C("cudaGraphDestroy", graph); rc != 0 {
				t.Fatal(rc)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still blocked after the graph was destroyed", how)
			}
		})
	}
}
