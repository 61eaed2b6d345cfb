package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	c "github.com/gonccl/nccl/collectives"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakes.Cleanup()
	os.Exit(code)
}

func open(t *testing.T, variant string) *nccl.Library {
	t.Helper()
	l, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, variant)), nccl.WithCUDARuntime(fakes.CUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type rank struct {
	comm *nccl.Comm
	s    nccl.Stream
}

func initRanks(t *testing.T, l *nccl.Library, n int) []rank {
	t.Helper()
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]rank, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comm, err := l.InitRank(r, id, n, r)
			if err != nil {
				errs[r] = err
				return
			}
			s, err := l.CUDA().StreamCreate(r, abi.StreamNonBlocking)
			ranks[r], errs[r] = rank{comm, s}, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, rk := range ranks {
			rk.comm.Destroy()
			l.CUDA().StreamDestroy(rk.s)
		}
	})
	return ranks
}

// each runs f for every rank in its own goroutine and fails on any error.
func each(t *testing.T, ranks []rank, f func(r int, rk rank) error) {
	t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = f(r, rk); errs[r] == nil {
				errs[r] = rk.comm.Library().CUDA().StreamSynchronize(rk.s)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// value turns a small integer into T.
func value[T c.Element](v int) T {
	var z T
	switch any(z).(type) {
	case c.Float16:
		return any(c.Float16From(float64(v))).(T)
	case c.BFloat16:
		return any(c.BFloat16From(float64(v))).(T)
	case c.Float8E4M3:
		return any(c.Float8E4M3From(float64(v))).(T)
	case c.Float8E5M2:
		return any(c.Float8E5M2From(float64(v))).(T)
	case float32:
		return any(float32(v)).(T)
	case float64:
		return any(float64(v)).(T)
	case int8:
		return any(int8(v)).(T)
	case uint8:
		return any(uint8(v)).(T)
	case int32:
		return any(int32(v)).(T)
	case uint32:
		return any(uint32(v)).(T)
	case int64:
		return any(int64(v)).(T)
	case uint64:
		return any(uint64(v)).(T)
	}
	panic("type")
}

func alloc[T c.Element](t *testing.T, l *nccl.Library, dev int, host []T) c.Buffer[T] {
	t.Helper()
	b, err := c.Alloc[T](l.CUDA(), dev, len(host))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CopyIn(l.CUDA(), host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free(l.CUDA()) })
	return b
}

func read[T c.Element](t *testing.T, l *nccl.Library, b c.Buffer[T]) []T {
	t.Helper()
	out := make([]T, b.Len())
	if err := b.CopyOut(l.CUDA(), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// movement checks AlltoAll, Gather and Scatter of T: the native path (where the
// library has it) and the grouped one must give the reference result on the
// same inputs, element for element.
func movement[T c.Element](t *testing.T, l *nccl.Library, ranks []rank, rng *rand.Rand) {
	n := len(ranks)
	const k = 37
	root := n / 2
	in := make([][]T, n)
	for r := range in {
		in[r] = make([]T, n*k)
		for i := range in[r] {
			in[r][i] = value[T](rng.IntN(7))
		}
	}
	for _, grouped := range []bool{false, true} {
		name := fmt.Sprintf("%v grouped=%v", c.TypeOf[T](), grouped)
		send := make([]c.Buffer[T], n)
		recv := make([]c.Buffer[T], n)
		for r := range ranks {
			send[r] = alloc(t, l, r, in[r])
			recv[r] = alloc(t, l, r, make([]T, n*k))
		}
		wantPath := c.Grouped
		if l.Has("ncclAlltoAll") && !grouped {
			wantPath = c.Native
		}
		each(t, ranks, func(r int, rk rank) error {
			if grouped {
				return c.AlltoAllGrouped(rk.comm, send[r], recv[r], rk.s)
			}
			p, err := c.AlltoAll(rk.comm, send[r], recv[r], rk.s)
			if err == nil && p != wantPath {
				err = fmt.Errorf("AlltoAll ran %v, want %v", p, wantPath)
			}
			return err
		})
		for r := range ranks {
			var want []T
			for p := range n {
				want = append(want, in[p][r*k:(r+1)*k]...)
			}
			if got := read(t, l, recv[r]); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s AlltoAll, %d ranks: rank %d got %v, want %v", name, n, r, got[:4], want[:4])
			}
		}
		// Gather block 0 of every rank at root.
		each(t, ranks, func(r int, rk rank) error {
			var dst c.Buffer[T]
			if r == root {
				dst = recv[r]
			}
			if grouped {
				return c.GatherGrouped(rk.comm, send[r].Slice(0, k), dst, root, rk.s)
			}
			_, err := c.Gather(rk.comm, send[r].Slice(0, k), dst, root, rk.s)
			return err
		})
		var want []T
		for p := range n {
			want = append(want, in[p][:k]...)
		}
		if got := read(t, l, recv[root]); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s Gather, %d ranks: wrong result at root", name, n)
		}
		// Scatter root's send.
		each(t, ranks, func(r int, rk rank) error {
			var src c.Buffer[T]
			if r == root {
				src = send[r]
			}
			if grouped {
				return c.ScatterGrouped(rk.comm, src, recv[r].Slice(0, k), root, rk.s)
			}
			_, err := c.Scatter(rk.comm, src, recv[r].Slice(0, k), root, rk.s)
			return err
		})
		for r := range ranks {
			if got := read(t, l, recv[r])[:k]; !reflect.DeepEqual(got, in[root][r*k:(r+1)*k]) {
				t.Fatalf("%s Scatter, %d ranks: rank %d wrong", name, n, r)
			}
		}
	}
}

// TestNativeAndGrouped runs AlltoAll, Gather and Scatter on NCCL 2.28 (native
// and grouped) and on 2.14 (grouped only) with 1, 2, 3, 4 and 8 ranks.
func TestNativeAndGrouped(t *testing.T) {
	for _, variant := range []string{"default", "old"} {
		l := open(t, variant)
		for _, n := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/%d", variant, n), func(t *testing.T) {
				ranks := initRanks(t, l, n)
				rng := rand.New(rand.NewPCG(uint64(n), 3))
				movement[float32](t, l, ranks, rng)
				movement[int8](t, l, ranks, rng)
				movement[uint64](t, l, ranks, rng)
				movement[c.BFloat16](t, l, ranks, rng)
				movement[c.Float16](t, l, ranks, rng)
				if l.SupportsType(abi.Float8e4m3) {
					movement[c.Float8E4M3](t, l, ranks, rng)
				}
			})
		}
	}
}

// TestTypedReductions checks the typed AllReduce, Reduce, ReduceScatter,
// AllGather, Broadcast and PreMulSum against a reference, in place and not.
func TestTypedReductions(t *testing.T) {
	l := open(t, "default")
	for _, n := range []int{1, 3, 4} {
		typedReductions(t, l, initRanks(t, l, n))
	}
}

func typedReductions(t *testing.T, l *nccl.Library, ranks []rank) {
	n := len(ranks)
	{
		const k = 11
		in := make([][]int32, n)
		for r := range in {
			in[r] = make([]int32, n*k)
			for i := range in[r] {
				in[r][i] = int32(r*1000 + i)
			}
		}
		sum := func(i int) int32 {
			var s int32
			for r := range n {
				s += in[r][i]
			}
			return s
		}
		bufs := make([]c.Buffer[int32], n)
		outs := make([]c.Buffer[int32], n)
		reset := func() {
			for r := range ranks {
				bufs[r].CopyIn(l.CUDA(), in[r])
			}
		}
		for r := range ranks {
			bufs[r] = alloc(t, l, r, in[r])
			outs[r] = alloc(t, l, r, make([]int32, n*k))
		}
		// AllReduce in place, then PreMulSum out of place.
		each(t, ranks, func(r int, rk rank) error { return c.AllReduce(rk.comm, bufs[r], bufs[r], abi.Sum, rk.s) })
		for r := range ranks {
			got := read(t, l, bufs[r])
			for i := range got {
				if got[i] != sum(i) {
					t.Fatalf("AllReduce in place, %d ranks: rank %d [%d] = %d, want %d", n, r, i, got[i], sum(i))
				}
			}
		}
		reset()
		each(t, ranks, func(r int, rk rank) error {
			op, err := c.PreMulSum(rk.comm, int32(3))
			if err != nil {
				return err
			}
			defer rk.comm.DestroyRedOp(op)
			return c.AllReduce(rk.comm, bufs[r], outs[r], op, rk.s)
		})
		for r := range ranks {
			got := read(t, l, outs[r])
			for i := range got {
				if got[i] != 3*sum(i) {
					t.Fatalf("PreMulSum(3): [%d] = %d, want %d", i, got[i], 3*sum(i))
				}
			}
		}
		// ReduceScatter in place: block r of the buffer.
		reset()
		each(t, ranks, func(r int, rk rank) error {
			return c.ReduceScatter(rk.comm, bufs[r], bufs[r].Slice(r*k, (r+1)*k), abi.Sum, rk.s)
		})
		for r := range ranks {
			got := read(t, l, bufs[r])[r*k : (r+1)*k]
			for i := range got {
				if got[i] != sum(r*k+i) {
					t.Fatalf("ReduceScatter in place: rank %d [%d] = %d, want %d", r, i, got[i], sum(r*k+i))
				}
			}
		}
		// AllGather in place: each rank's block r already in place.
		reset()
		each(t, ranks, func(r int, rk rank) error {
			return c.AllGather(rk.comm, bufs[r].Slice(r*k, (r+1)*k), bufs[r], rk.s)
		})
		for r := range ranks {
			got := read(t, l, bufs[r])
			for p := range n {
				for i := range k {
					if got[p*k+i] != in[p][p*k+i] {
						t.Fatalf("AllGather in place: rank %d block %d [%d] = %d, want %d", r, p, i, got[p*k+i], in[p][p*k+i])
					}
				}
			}
		}
		// Reduce to the last rank, Broadcast from it; non-roots pass empty buffers.
		reset()
		root := n - 1
		each(t, ranks, func(r int, rk rank) error {
			var dst c.Buffer[int32]
			if r == root {
				dst = outs[r]
			}
			if err := c.Reduce(rk.comm, bufs[r], dst, abi.Max, root, rk.s); err != nil {
				return err
			}
			var src c.Buffer[int32]
			if r == root {
				src = outs[r]
			}
			return c.Broadcast(rk.comm, src, bufs[r], root, rk.s)
		})
		for r := range ranks {
			got := read(t, l, bufs[r])
			for i := range got {
				if want := in[n-1][i]; got[i] != want {
					t.Fatalf("Reduce(max)+Broadcast: rank %d [%d] = %d, want %d", r, i, got[i], want)
				}
			}
		}
	}
}

func TestAlltoAllvPaths(t *testing.T) {
	for _, variant := range []string{"vccl11", "vccl10", "default", "old"} {
		l := open(t, variant)
		if variant == "vccl10" {
			var err error
			if l, err = nccl.Open(nccl.WithLibrary(fakes.NCCL(t, variant)), nccl.WithCUDARuntime(fakes.CUDART(t)), nccl.WithAlltoAllvABI(10)); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []int{1, 2, 3, 4, 8} {
			alltoallvPaths(t, l, initRanks(t, l, n))
		}
	}
}

// alltoallvPaths runs one uneven exchange by every form the library allows and
// checks every element; "auto" must take the native path exactly where the
// library has ncclAlltoAllv.
func alltoallvPaths(t *testing.T, l *nccl.Library, ranks []rank) {
	variant := l.Path
	n := len(ranks)
	{
		{
			m, total := layout(n)
			for _, form := range []string{"auto", "grouped", "local"} {
				got := make([][]int64, n)
				paths := make([]c.Path, n)
				each(t, ranks, func(r int, rk rank) error {
					var send, recv c.Buffer[int64]
					var err error
					native := form == "auto" && l.Has("ncclAlltoAllv")
					if native {
						if send, err = c.AllocSymmetric[int64](rk.comm, total(m.SendCounts, r, n)); err != nil {
							return err
						}
						defer c.FreeSymmetric(rk.comm, send)
						if recv, err = c.AllocSymmetric[int64](rk.comm, total(m.RecvCounts, r, n)); err != nil {
							return err
						}
						defer c.FreeSymmetric(rk.comm, recv)
					} else {
						send, _ = c.Alloc[int64](l.CUDA(), r, total(m.SendCounts, r, n))
						defer send.Free(l.CUDA())
						recv, _ = c.Alloc[int64](l.CUDA(), r, total(m.RecvCounts, r, n))
						defer recv.Free(l.CUDA())
					}
					host := make([]int64, send.Len())
					for j := range n {
						for e := range int(m.SendCounts[r*n+j]) {
							host[int(m.SendDispls[r*n+j])+e] = int64(r<<32 | j<<16 | e)
						}
					}
					send.CopyIn(l.CUDA(), host)
					switch form {
					case "auto":
						paths[r], err = c.AlltoAllv(rk.comm, send, recv, m, rk.s)
					case "grouped":
						paths[r], err = c.Grouped, c.AlltoAllvGrouped(rk.comm, send, recv, m, rk.s)
					case "local":
						row := c.Layout{SendCounts: m.SendCounts[r*n : (r+1)*n], SendDispls: m.SendDispls[r*n : (r+1)*n],
							RecvCounts: m.RecvCounts[r*n : (r+1)*n], RecvDispls: m.RecvDispls[r*n : (r+1)*n]}
						paths[r], err = c.Grouped, c.AlltoAllvLocal(rk.comm, send, recv, row, rk.s)
					}
					if err != nil {
						return err
					}
					if err := l.CUDA().StreamSynchronize(rk.s); err != nil {
						return err
					}
					got[r] = make([]int64, recv.Len())
					return recv.CopyOut(l.CUDA(), got[r])
				})
				wantPath := c.Grouped
				if form == "auto" && l.Has("ncclAlltoAllv") {
					wantPath = c.Native
				}
				for r := range n {
					if paths[r] != wantPath {
						t.Fatalf("%s %s: path %v, want %v", variant, form, paths[r], wantPath)
					}
					for i := range n {
						for e := range int(m.RecvCounts[r*n+i]) {
							if v := got[r][int(m.RecvDispls[r*n+i])+e]; v != int64(i<<32|r<<16|e) {
								t.Fatalf("%s %s %d ranks: rank %d, element %d from %d = %#x", variant, form, n, r, e, i, v)
							}
						}
					}
				}
			}
		}
	}
}

// layout: rank i sends (i*3+j)%4 elements to rank j (zero-sized blocks too),
// received in reverse rank order to exercise the displacements.
func layout(n int) (c.Layout, func([]uint64, int, int) int) {
	m := c.Layout{SendCounts: make([]uint64, n*n), SendDispls: make([]uint64, n*n),
		RecvCounts: make([]uint64, n*n), RecvDispls: make([]uint64, n*n)}
	for i := range n {
		var off uint64
		for j := range n {
			m.SendCounts[i*n+j] = uint64((i*3 + j) % 4)
			m.SendDispls[i*n+j] = off
			off += m.SendCounts[i*n+j]
		}
	}
	for j := range n {
		var off uint64
		for i := n - 1; i >= 0; i-- {
			m.RecvCounts[j*n+i] = m.SendCounts[i*n+j]
			m.RecvDispls[j*n+i] = off
			off += m.RecvCounts[j*n+i]
		}
	}
	total := func(v []uint64, r, n int) int {
		var t uint64
		for _, x := range v[r*n : (r+1)*n] {
			t += x
		}
		return max(int(t), 1)
	}
	return m, total
}

func TestValidation(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 2)
	rk := ranks[0]
	a := alloc(t, l, 0, make([]float32, 8))
	b := alloc(t, l, 0, make([]float32, 6))
	other := alloc(t, l, 1, make([]float32, 8))
	m, _ := layout(2)
	m.RecvCounts[1] += 1 // disagrees with what rank 1 sends
	for name, err := range map[string]error{
		"AllReduce lengths":         c.AllReduce(rk.comm, a, b, abi.Sum, rk.s),
		"AllReduce other device":    c.AllReduce(rk.comm, a, other, abi.Sum, rk.s),
		"AllGather lengths":         c.AllGather(rk.comm, a, a, rk.s),
		"ReduceScatter lengths":     c.ReduceScatter(rk.comm, b, a, abi.Sum, rk.s),
		"Broadcast root":            c.Broadcast(rk.comm, a, a, 2, rk.s),
		"Send peer":                 c.Send(rk.comm, a, -1, rk.s),
		"AlltoAll multiple":         second(c.AlltoAll(rk.comm, alloc(t, l, 0, make([]float32, 7)), alloc(t, l, 0, make([]float32, 7)), rk.s)),
		"Gather root recv":          second(c.Gather(rk.comm, a, a, 0, rk.s)),
		"AlltoAllv matrix":          second(c.AlltoAllv(rk.comm, a, a, m, rk.s)),
		"AlltoAllv short":           second(c.AlltoAllv(rk.comm, a, b, c.Layout{}, rk.s)),
		"AlltoAllv in place":        second(c.AlltoAllv(rk.comm, a, a, m, rk.s)),
		"AlltoAll grouped in place": c.AlltoAllGrouped(rk.comm, a, a, rk.s),
		"AlltoAll in place":         second(c.AlltoAll(rk.comm, a, a, rk.s)),
	} {
		var ne *nccl.Error
		if !errors.Is(err, nccl.ErrInvalidArgument) || !errors.As(err, &ne) || ne.Msg == "" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func second(_ c.Path, err error) error { return err }

// TestWaitAbortsOnDeadline: a receive no one sends to never completes; Wait
// returns at the deadline, aborts the communicator and wraps ctx.Err().
func TestWaitAbortsOnDeadline(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 2)
	buf := alloc(t, l, 0, make([]int32, 4))
	if err := c.Recv(ranks[0].comm, buf, 1, ranks[0].s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Wait(ctx, ranks[0].comm, ranks[0].s)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Wait = %v after %v", err, time.Since(start))
	}
	if err := c.AllReduce(ranks[0].comm, buf, buf, abi.Sum, ranks[0].s); !errors.Is(err, nccl.ErrClosed) {
		t.Fatalf("after the abort: %v, want ErrClosed", err)
	}
	// An idle stream returns at once.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if err := c.Wait(ctx2, ranks[1].comm, ranks[1].s); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReadyNonBlocking(t *testing.T) {
	l := open(t, "default")
	id, _ := l.GetUniqueID()
	no := false
	comms := make([]*nccl.Comm, 2)
	for r := range comms {
		var err error
		if comms[r], err = l.InitRankConfig(r, id, 2, r, &nccl.Config{Blocking: &no}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, comm := range comms {
		if err := c.WaitReady(ctx, comm); err != nil {
			t.Fatal(err)
		}
		comm.Destroy()
	}
}

func TestStreamWait(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	a, _ := cu.StreamCreate(0, abi.StreamNonBlocking)
	b, _ := cu.StreamCreate(0, abi.StreamNonBlocking)
	buf := alloc(t, l, 0, make([]uint8, 4096))
	out := alloc(t, l, 0, make([]uint8, 4096))
	// a fills buf; b copies it only after a's work: the order is on the GPU.
	cu.MemsetAsync(buf.Ptr(), 0x5a, 4096, a)
	if err := c.StreamWait(cu, 0, b, a); err != nil {
		t.Fatal(err)
	}
	cu.MemcpyAsync(uintptr(out.Ptr()), uintptr(buf.Ptr()), 4096, abi.MemcpyDeviceToDevice, b)
	cu.StreamSynchronize(b)
	for i, v := range read(t, l, out) {
		if v != 0x5a {
			t.Fatalf("byte %d = %#x: the copy ran before the memset", i, v)
		}
	}
}

func TestTypeOf(t *testing.T) {
	for got, want := range map[abi.DataType]abi.DataType{
		c.TypeOf[int8](): abi.Int8, c.TypeOf[uint8](): abi.Uint8, c.TypeOf[int32](): abi.Int32,
		c.TypeOf[uint32](): abi.Uint32, c.TypeOf[int64](): abi.Int64, c.TypeOf[uint64](): abi.Uint64,
		c.TypeOf[float32](): abi.Float32, c.TypeOf[float64](): abi.Float64, c.TypeOf[c.Float16](): abi.Float16,
		c.TypeOf[c.BFloat16](): abi.Bfloat16, c.TypeOf[c.Float8E4M3](): abi.Float8e4m3, c.TypeOf[c.Float8E5M2](): abi.Float8e5m2,
	} {
		if got != want {
			t.Errorf("%v, want %v", got, want)
		}
	}
}

func TestTypedCallAllocatesNothing(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 1)
	buf := alloc(t, l, 0, make([]float32, 16))
	n := testing.AllocsPerRun(100, func() {
		if err := c.AllReduce(ranks[0].comm, buf, buf, abi.Sum, ranks[0].s); err != nil {
			t.Fatal(err)
		}
	})
	l.CUDA().StreamSynchronize(ranks[0].s)
	if n != 0 {
		t.Fatalf("typed AllReduce allocates %v times", n)
	}
	// The grouped fallback too: the group, its closure and its bookkeeping.
	out := alloc(t, l, 0, make([]float32, 16))
	n = testing.AllocsPerRun(100, func() {
		if err := c.AlltoAllGrouped(ranks[0].comm, buf, out, ranks[0].s); err != nil {
			t.Fatal(err)
		}
	})
	l.CUDA().StreamSynchronize(ranks[0].s)
	if n != 0 {
		t.Fatalf("grouped AlltoAll allocates %v times", n)
	}
}
