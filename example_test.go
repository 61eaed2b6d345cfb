package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/gonccl/nccl"
)

// The examples run against the fake libraries in `go test` (the test binary
// points GONCCL_NCCL_LIB and GONCCL_CUDART_LIB at them); on a GPU box the same
// code runs on the real NCCL.

// job is what most examples start from: n ranks on devices 0..n-1 of this
// process, a stream each.
type job struct {
	lib     *nccl.Library
	comms   []*nccl.Comm
	streams []nccl.Stream
}

func newJob(n int) job {
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	comms, err := lib.InitAll(context.Background(), devs, nil)
	if err != nil {
		log.Fatal(err)
	}
	j := job{lib: lib, comms: comms}
	for _, c := range comms {
		s, err := lib.CUDA().NewStream(c.Device(), nccl.StreamNonBlocking)
		if err != nil {
			log.Fatal(err)
		}
		j.streams = append(j.streams, s)
	}
	return j
}

// buffers allocates one buffer per rank, filled by fill(rank).
func (j job) buffers(fill func(rank int) []float32) []nccl.Buffer {
	var bufs []nccl.Buffer
	for r, c := range j.comms {
		host := fill(r)
		b, err := j.lib.CUDA().Alloc(c.Device(), nccl.Float32, len(host))
		if err != nil {
			log.Fatal(err)
		}
		if err := nccl.CopyIn(b, host); err != nil {
			log.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	return bufs
}

// read waits for every rank's stream and returns rank r's buffer.
func (j job) read(b nccl.Buffer, r int) []float32 {
	if err := j.streams[r].Synchronize(); err != nil {
		log.Fatal(err)
	}
	out := make([]float32, b.Len())
	if err := nccl.CopyOut(out, b); err != nil {
		log.Fatal(err)
	}
	return out
}

// each runs one operation per rank inside one group: one goroutine driving
// several communicators must group their operations, as NCCL requires.
func (j job) each(op func(r int, c *nccl.Comm, s nccl.Stream) error) {
	err := j.lib.Group(func() error {
		for r, c := range j.comms {
			if err := op(r, c, j.streams[r]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

func (j job) close() {
	for r, c := range j.comms {
		j.streams[r].Destroy()
		c.Close(context.Background())
	}
}

func seq(n int, f func(i int) float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// One process per GPU: every rank calls InitRank with the same id, under a
// deadline so that a rank that never arrives ends the wait instead of hanging
// the job. Close waits for outstanding work, then frees the communicator.
func ExampleLibrary_InitRank() {
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	id, err := lib.GetUniqueID() // rank 0 makes it; every rank needs it (id.String() is text)
	if err != nil {
		log.Fatal(err)
	}
	const nranks = 2
	var wg sync.WaitGroup
	for rank := range nranks { // here goroutines; usually one process each
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			comm, err := lib.InitRank(ctx, rank, id, nranks, rank, nil) // device = rank
			if err != nil {
				log.Fatal(err)
			}
			defer comm.Close(ctx)
			if rank == 0 {
				fmt.Println("rank", comm.Rank(), "of", comm.Size(), "on device", comm.Device(), "blocking:", comm.Blocking())
			}
		}()
	}
	wg.Wait()

	// A rank that never arrives: the context ends the wait. A blocking
	// init (the default) goes on inside NCCL and its communicator is
	// aborted when NCCL returns; Config.Blocking = false makes NCCL abort
	// the init itself.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	id2, _ := lib.GetUniqueID()
	_, err = lib.InitRank(ctx, 0, id2, 2, 0, nil)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// rank 0 of 2 on device 0 blocking: true
	// true
}

func ExampleComm_AllReduce() {
	j := newJob(2)
	defer j.close()
	bufs := j.buffers(func(r int) []float32 { return seq(4, func(i int) float32 { return float32((r + 1) * i) }) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error {
		return c.AllReduce(bufs[r], bufs[r], nccl.Sum, s) // in place
	})
	fmt.Println(j.read(bufs[0], 0), j.read(bufs[1], 1))
	// Output: [0 3 6 9] [0 3 6 9]
}

// Small operations in a loop: captured once into a CUDA graph, uploaded to
// the device before the loop (so that no launch in it pays for that), then
// replayed. The graph is destroyed before its communicator is closed.
func ExampleGraph_Upload() {
	j := newJob(1)
	defer j.close()
	c, s := j.comms[0], j.streams[0]
	in := j.buffers(func(int) []float32 { return []float32{1, 2, 3} })[0]
	out := j.buffers(func(int) []float32 { return make([]float32, 3) })[0]
	g, err := j.lib.CUDA().Capture(s, func() error { return c.AllReduce(in, out, nccl.Sum, s) })
	if err != nil {
		log.Fatal(err)
	}
	defer g.Destroy()
	if err := g.Upload(s); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if err := g.Launch(s); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(j.read(out, 0))
	// Output: [1 2 3]
}

// One process driving several GPUs from CUDA graphs: a goroutine per GPU,
// locked to its thread, captures its rank's step into a graph and replays it,
// so that no one thread launches every GPU's graphs (nccl-bench's -t 4 -g 1
// against -g 4 measures the difference: docs/performance.md). A first
// step runs in one group before the captures: NCCL connects the ranks at an
// operation's first use, which needs every rank at once.
func ExampleGraph_Launch() {
	j := newJob(2)
	defer j.close()
	bufs := j.buffers(func(r int) []float32 { return []float32{float32(r + 1)} })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AllReduce(bufs[r], bufs[r], nccl.Sum, s) }) // 3 on both
	errs := make([]error, len(j.comms))
	var wg sync.WaitGroup
	for r, c := range j.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			s := j.streams[r]
			g, err := j.lib.CUDA().Capture(s, func() error { return c.AllReduce(bufs[r], bufs[r], nccl.Sum, s) })
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Destroy()
			if err := g.Upload(s); err != nil {
				errs[r] = err
				return
			}
			for range 3 { // doubles the sum each time
				if err := g.Launch(s); err != nil {
					errs[r] = err
					return
				}
			}
			errs[r] = s.Synchronize()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.read(bufs[0], 0), j.read(bufs[1], 1))
	// Output: [24] [24]
}

// One goroutine driving several GPUs at the speed of a thread per GPU:
// Threads keeps an OS thread per GPU, and each call runs every GPU's part at
// once on them. Ranks' operations made there need no Group (each comes from
// a thread of its own), and a graph per GPU is launched in one call.
func ExampleThreads() {
	j := newJob(2)
	defer j.close()
	th, err := j.lib.CUDA().NewThreads(0, 1) // thread i on device i
	if err != nil {
		log.Fatal(err)
	}
	defer th.Close()
	bufs := j.buffers(func(r int) []float32 { return []float32{float32(r + 1)} })
	ctx := context.Background()
	step := func(i int) error { return j.comms[i].AllReduce(bufs[i], bufs[i], nccl.Sum, j.streams[i]) }
	if err := th.Run(ctx, step); err != nil { // 3 on both
		log.Fatal(err)
	}
	graphs := make([]*nccl.Graph, 2)
	if err := th.Run(ctx, func(i int) (err error) { // each thread captures its GPU's step
		graphs[i], err = j.lib.CUDA().Capture(j.streams[i], func() error { return step(i) })
		return err
	}); err != nil {
		log.Fatal(err)
	}
	for range 3 { // doubles the sum each time
		if err := th.Launch(ctx, graphs, j.streams); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(j.read(bufs[0], 0), j.read(bufs[1], 1))
	for _, g := range graphs {
		g.Destroy()
	}
	// Output: [24] [24]
}

func ExampleComm_Broadcast() {
	j := newJob(3)
	defer j.close()
	bufs := j.buffers(func(r int) []float32 { return seq(3, func(i int) float32 { return float32(10*r + i) }) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error {
		return c.Broadcast(bufs[r], bufs[r], 2, s) // from rank 2
	})
	fmt.Println(j.read(bufs[0], 0))
	// Output: [20 21 22]
}

func ExampleComm_Reduce() {
	j := newJob(2)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{float32(r + 2), 5} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 2) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error {
		return c.Reduce(send[r], recv[r], nccl.Max, 0, s) // into rank 0
	})
	fmt.Println(j.read(recv[0], 0))
	// Output: [3 5]
}

func ExampleComm_AllGather() {
	j := newJob(3)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{float32(r), float32(r)} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 6) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AllGather(send[r], recv[r], s) })
	fmt.Println(j.read(recv[1], 1))
	// Output: [0 0 1 1 2 2]
}

func ExampleComm_ReduceScatter() {
	j := newJob(2)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{1, 2, 3, 4} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 2) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.ReduceScatter(send[r], recv[r], nccl.Sum, s) })
	fmt.Println(j.read(recv[0], 0), j.read(recv[1], 1))
	// Output: [2 4] [6 8]
}

// AlltoAll, Gather and Scatter run the library's own function where it has one
// (NCCL >= 2.28) and grouped Send/Recv before; SetPath chooses.
func ExampleComm_AlltoAll() {
	j := newJob(2)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{float32(10 * r), float32(10*r + 1)} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 2) })
	fmt.Println(j.comms[0].PathOf("AlltoAll"))
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AlltoAll(send[r], recv[r], s) })
	fmt.Println(j.read(recv[0], 0), j.read(recv[1], 1))
	for _, c := range j.comms {
		c.SetPath(nccl.Grouped)
	}
	fmt.Println(j.comms[0].PathOf("AlltoAll"))
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AlltoAll(send[r], recv[r], s) })
	fmt.Println(j.read(recv[0], 0), j.read(recv[1], 1))
	// Output:
	// native
	// [0 10] [1 11]
	// grouped
	// [0 10] [1 11]
}

func ExampleComm_Gather() {
	j := newJob(3)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{float32(r * r)} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 3) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.Gather(send[r], recv[r], 1, s) })
	fmt.Println(j.read(recv[1], 1))
	// Output: [0 1 4]
}

func ExampleComm_Scatter() {
	j := newJob(3)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{7, 8, 9} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 1) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.Scatter(send[r], recv[r], 0, s) })
	fmt.Println(j.read(recv[0], 0), j.read(recv[1], 1), j.read(recv[2], 2))
	// Output: [7] [8] [9]
}

// A ring: every rank sends to the next and receives from the previous, both in
// one group so neither waits for the other.
func ExampleComm_Send() {
	j := newJob(3)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{float32(100 + r)} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 1) })
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error {
		n := c.Size()
		if err := c.Send(send[r], (r+1)%n, s); err != nil {
			return err
		}
		return c.Recv(recv[r], (r+n-1)%n, s)
	})
	fmt.Println(j.read(recv[0], 0), j.read(recv[1], 1), j.read(recv[2], 2))
	// Output: [102] [100] [101]
}

// Uneven blocks: rank 0 sends one element to itself and two to rank 1; rank 1
// sends three to rank 0 and none to itself. The matrix form (every rank's row)
// runs VCCL's native ncclAlltoAllv on symmetric buffers; here, grouped.
func ExampleComm_AlltoAllv() {
	j := newJob(2)
	defer j.close()
	send := j.buffers(func(r int) []float32 { return []float32{float32(10 * r), float32(10*r + 1), float32(10*r + 2)} })
	recv := j.buffers(func(r int) []float32 { return make([]float32, 4) })
	m := nccl.Layout{ // [i*n+j]: from rank i to rank j
		SendCounts: []uint64{1, 2, 3, 0}, SendDispls: []uint64{0, 1, 0, 0},
		RecvCounts: []uint64{1, 3, 2, 0}, RecvDispls: []uint64{0, 1, 0, 0},
	}
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AlltoAllv(send[r], recv[r], m, s) })
	fmt.Println(j.read(recv[0], 0), j.read(recv[1], 1))
	// Output: [0 10 11 12] [1 2 0 0]
}

// PreMulSum scales each input before summing: an average with any weights.
func ExamplePreMulSum() {
	j := newJob(2)
	defer j.close()
	bufs := j.buffers(func(r int) []float32 { return []float32{float32(2 * (r + 1)), 8} })
	ops := make([]nccl.RedOp, 2)
	for r, c := range j.comms {
		op, err := nccl.PreMulSum(c, float32(0.25))
		if err != nil {
			log.Fatal(err)
		}
		ops[r] = op
	}
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AllReduce(bufs[r], bufs[r], ops[r], s) })
	fmt.Println(j.read(bufs[0], 0))
	for r, c := range j.comms {
		c.DestroyRedOp(ops[r])
	}
	// Output: [1.5 4]
}

// Split makes communicators of subsets: here the even and the odd ranks.
func ExampleComm_Split() {
	j := newJob(4)
	defer j.close()
	subs := make([]*nccl.Comm, 4)
	var wg sync.WaitGroup
	for r, c := range j.comms { // Split is collective: every rank at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := c.Split(context.Background(), r%2, r, nil)
			if err != nil {
				log.Fatal(err)
			}
			subs[r] = sub
		}()
	}
	wg.Wait()
	for r, sub := range subs {
		fmt.Printf("rank %d: rank %d of %d\n", r, sub.Rank(), sub.Size())
		defer sub.Close(context.Background())
	}
	// Output:
	// rank 0: rank 0 of 2
	// rank 1: rank 0 of 2
	// rank 2: rank 1 of 2
	// rank 3: rank 1 of 2
}

// A watchdog: Abort from another goroutine is the way out of a hung operation.
// Here rank 1 never joins rank 0's all-reduce; Wait gives up at its deadline
// and aborts the communicator; every later call says it is closed.
func ExampleComm_Abort() {
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	id, _ := lib.GetUniqueID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*nccl.Comm, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := lib.InitRank(ctx, r, id, 2, r, nil)
			if err != nil {
				log.Fatal(err)
			}
			comms[r] = c
		}()
	}
	wg.Wait()
	cu := lib.CUDA()
	s, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	defer s.Destroy()
	b, _ := cu.Alloc(0, nccl.Float32, 1024)
	defer b.Free()
	s1, _ := cu.NewStream(1, nccl.StreamNonBlocking)
	defer s1.Destroy()
	b1, _ := cu.Alloc(1, nccl.Float32, 1024)
	defer b1.Free()

	// One all-reduce together first: NCCL connects the ranks inside their
	// first operation, where rank 0's alone would wait for rank 1.
	lib.Group(func() error {
		comms[0].AllReduce(b, b, nccl.Sum, s)
		return comms[1].AllReduce(b1, b1, nccl.Sum, s1)
	})
	if err := comms[0].AllReduce(b, b, nccl.Sum, s); err != nil {
		log.Fatal(err)
	}
	wait, cancelWait := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelWait()
	err = comms[0].Wait(wait, s) // aborts comms[0] at the deadline
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	<-comms[0].Done()
	fmt.Println(errors.Is(comms[0].AllReduce(b, b, nccl.Sum, s), nccl.ErrClosed))
	comms[1].Abort()
	// Output:
	// true
	// true
}

// Group runs operations of one goroutine together. An error or a panic inside
// discards them all: NCCL launches nothing of a failed group.
func ExampleLibrary_Group() {
	j := newJob(2)
	defer j.close()
	bufs := j.buffers(func(r int) []float32 { return []float32{1} })
	err := j.lib.Group(func() error {
		if err := j.comms[0].AllReduce(bufs[0], bufs[0], nccl.Sum, j.streams[0]); err != nil {
			return err
		}
		return errors.New("changed my mind")
	})
	fmt.Println(err)
	j.each(func(r int, c *nccl.Comm, s nccl.Stream) error { return c.AllReduce(bufs[r], bufs[r], nccl.Sum, s) })
	fmt.Println(j.read(bufs[0], 0))
	// Output:
	// changed my mind
	// [2]
}

// Buffers carry their element type: CopyIn and CopyOut check it, and memory
// another library allocated is wrapped with its type to use the same calls.
func ExampleCopyIn() {
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	cu := lib.CUDA()
	b, err := cu.Alloc(0, nccl.Bfloat16, 3)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Free()
	if err := nccl.CopyIn(b, []nccl.BF16{nccl.BF16From(1), nccl.BF16From(0.1), nccl.BF16From(3e38)}); err != nil {
		log.Fatal(err)
	}
	out := make([]nccl.BF16, 3)
	if err := nccl.CopyOut(out, b); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out, b.Type(), b.Len(), b.Size())
	fmt.Println(nccl.CopyIn(b, []float32{1}))
	// Output:
	// [1 0.10009765625 3.00405527047391e+38] ncclBfloat16 3 6
	// CopyIn: ncclInvalidArgument: ncclFloat32 elements into a buffer of ncclBfloat16
}

func ExampleOpen() {
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err) // says where it looked and why each candidate failed
	}
	// lib.Path, lib.Via and lib.Version() say which file was loaded, what
	// found it and its version: "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3
	// system loader 2.28.3" on a GPU box (GONCCL_NCCL_LIB and a fake library
	// under go test), so the example checks what holds everywhere.
	fmt.Println(filepath.IsAbs(lib.Path), lib.Via != "", lib.Version().AtLeast(nccl.MinVersion))
	// Output: true true true
}

// The ranks of one communicator in this process, made by InitAll: one
// goroutine drives them with each step's operations of every rank in one
// Group (alone, a rank's first operation would wait inside NCCL for ranks the
// goroutine has yet to call: gonccl refuses it instead), and CloseAll closes
// them together, bounded by one deadline.
func ExampleCloseAll() {
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	comms, err := lib.InitAll(context.Background(), []int{0, 1}, nil)
	if err != nil {
		log.Fatal(err)
	}
	cu := lib.CUDA()
	bufs := make([]nccl.Buffer, len(comms))
	for r, c := range comms {
		if bufs[r], err = cu.Alloc(c.Device(), nccl.Int32, 3); err != nil {
			log.Fatal(err)
		}
		defer bufs[r].Free()
		if err := nccl.CopyIn(bufs[r], []int32{int32(r), 10, 100}); err != nil {
			log.Fatal(err)
		}
	}
	err = lib.Group(func() error {
		for r, c := range comms {
			if err := c.AllReduce(bufs[r], bufs[r], nccl.Sum, cu.DefaultStream(c.Device())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Close waits for each rank's work before freeing it.
	if err := nccl.CloseAll(ctx, comms); err != nil {
		log.Fatal(err)
	}
	out := make([]int32, 3)
	if err := nccl.CopyOut(out, bufs[1]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output: [1 20 200]
}
