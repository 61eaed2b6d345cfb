package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
)

// Tests of the operations through typed buffers: every path of AlltoAll,
// Gather, Scatter and AlltoAllv, typed reductions, the checks before any C
// call, waiting, and the cost of a call.

// setPath sets every rank's path and checks what PathOf then says.
func setPath(t *testing.T, ranks []rank, p nccl.Path, op string, want nccl.Path) {
	t.Helper()
	for r, rk := range ranks {
		if err := rk.comm.SetPath(p); err != nil {
			t.Fatal(err)
		}
		if got := rk.comm.PathOf(op); got != want {
			t.Fatalf("rank %d: PathOf(%s) = %v with SetPath(%v), want %v", r, op, got, p, want)
		}
	}
}

// movement checks AlltoAll, Gather and Scatter of T: the native path (where the
// library has it) and the grouped one must give the reference result on the
// same inputs, element for element.
func movement[T nccl.Element](t *testing.T, l *nccl.Library, ranks []rank, rng *rand.Rand) {
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
	defer setPath(t, ranks, nccl.Auto, "AlltoAll", pathFor(l, "ncclAlltoAll", nccl.Auto))
	for _, path := range []nccl.Path{nccl.Auto, nccl.Grouped} {
		name := fmt.Sprintf("%v path %v", nccl.TypeOf[T](), path)
		send := make([]nccl.Buffer, n)
		recv := make([]nccl.Buffer, n)
		for r := range ranks {
			send[r] = upload(t, l, ranks[r].dev, in[r])
			recv[r] = upload(t, l, ranks[r].dev, make([]T, n*k))
		}
		for _, op := range []string{"AlltoAll", "Gather", "Scatter"} {
			setPath(t, ranks, path, op, pathFor(l, "nccl"+op, path))
		}
		eachRank(t, ranks, func(r int, rk rank) error { return rk.comm.AlltoAll(send[r], recv[r], rk.s) })
		for r := range ranks {
			var want []T
			for p := range n {
				want = append(want, in[p][r*k:(r+1)*k]...)
			}
			if got := download[T](t, recv[r]); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s AlltoAll, %d ranks: rank %d got %v, want %v", name, n, r, got[:4], want[:4])
			}
		}
		// Gather block 0 of every rank at root; the others pass no receive buffer.
		eachRank(t, ranks, func(r int, rk rank) error {
			var dst nccl.Buffer
			if r == root {
				dst = recv[r]
			}
			return rk.comm.Gather(send[r].Slice(0, k), dst, root, rk.s)
		})
		var want []T
		for p := range n {
			want = append(want, in[p][:k]...)
		}
		if got := download[T](t, recv[root]); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s Gather, %d ranks: wrong result at root", name, n)
		}
		// Scatter root's send; the others pass no send buffer.
		eachRank(t, ranks, func(r int, rk rank) error {
			var src nccl.Buffer
			if r == root {
				src = send[r]
			}
			return rk.comm.Scatter(src, recv[r].Slice(0, k), root, rk.s)
		})
		for r := range ranks {
			if got := download[T](t, recv[r])[:k]; !reflect.DeepEqual(got, in[root][r*k:(r+1)*k]) {
				t.Fatalf("%s Scatter, %d ranks: rank %d wrong", name, n, r)
			}
		}
	}
}

// pathFor is the path an operation takes under p: native where the library has
// the function, unless grouped is asked for.
func pathFor(l *nccl.Library, fn string, p nccl.Path) nccl.Path {
	if p != nccl.Grouped && l.Has(fn) {
		return nccl.Native
	}
	return nccl.Grouped
}

// TestNativeAndGrouped runs AlltoAll, Gather and Scatter on NCCL 2.28 (native
// and grouped) and on 2.14 (grouped only) with 1, 2, 3, 4 and 8 ranks, from
// blocking communicators and from non-blocking ones.
func TestNativeAndGrouped(t *testing.T) {
	for _, variant := range []string{"default", "old"} {
		l := open(t, variant)
		for _, n := range []int{1, 2, 3, 4, 8} {
			for _, nb := range []bool{false, true} {
				if nb && n != 3 && n != 4 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%d/nonblocking=%v", variant, n, nb), func(t *testing.T) {
					ctx := context.Background()
					if nb {
						ctx = nonBlockingCtx(t)
					}
					ranks := initRanksCtx(t, l, n, ctx)
					rng := rand.New(rand.NewPCG(uint64(n), 3))
					movement[float32](t, l, ranks, rng)
					movement[int8](t, l, ranks, rng)
					movement[uint64](t, l, ranks, rng)
					movement[nccl.BF16](t, l, ranks, rng)
					movement[nccl.F16](t, l, ranks, rng)
					if l.SupportsType(nccl.Float8e4m3) {
						movement[nccl.F8E4M3](t, l, ranks, rng)
					}
				})
			}
		}
	}
}

// TestTypedReductions checks AllReduce, Reduce, ReduceScatter, AllGather,
// Broadcast and PreMulSum on typed buffers against a reference, in place and
// not.
func TestTypedReductions(t *testing.T) {
	l := open(t, "default")
	for _, n := range []int{1, 3, 4} {
		typedReductions(t, l, initRanks(t, l, n))
	}
	typedReductions(t, l, initRanksCtx(t, l, 3, nonBlockingCtx(t)))
}

func typedReductions(t *testing.T, l *nccl.Library, ranks []rank) {
	n := len(ranks)
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
	bufs := make([]nccl.Buffer, n)
	outs := make([]nccl.Buffer, n)
	reset := func() {
		for r := range ranks {
			if err := nccl.CopyIn(bufs[r], in[r]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for r, rk := range ranks {
		bufs[r] = upload(t, l, rk.dev, in[r])
		outs[r] = upload(t, l, rk.dev, make([]int32, n*k))
	}
	// AllReduce in place, then PreMulSum out of place.
	eachRank(t, ranks, func(r int, rk rank) error { return rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s) })
	for r := range ranks {
		got := download[int32](t, bufs[r])
		for i := range got {
			if got[i] != sum(i) {
				t.Fatalf("AllReduce in place, %d ranks: rank %d [%d] = %d, want %d", n, r, i, got[i], sum(i))
			}
		}
	}
	reset()
	eachRank(t, ranks, func(r int, rk rank) error {
		op, err := nccl.PreMulSum(rk.comm, int32(3))
		if err != nil {
			return err
		}
		defer rk.comm.DestroyRedOp(op)
		return rk.comm.AllReduce(bufs[r], outs[r], op, rk.s)
	})
	for r := range ranks {
		got := download[int32](t, outs[r])
		for i := range got {
			if got[i] != 3*sum(i) {
				t.Fatalf("PreMulSum(3): [%d] = %d, want %d", i, got[i], 3*sum(i))
			}
		}
	}
	// ReduceScatter in place: block r of the buffer.
	reset()
	eachRank(t, ranks, func(r int, rk rank) error {
		return rk.comm.ReduceScatter(bufs[r], bufs[r].Slice(r*k, (r+1)*k), nccl.Sum, rk.s)
	})
	for r := range ranks {
		got := download[int32](t, bufs[r])[r*k : (r+1)*k]
		for i := range got {
			if got[i] != sum(r*k+i) {
				t.Fatalf("ReduceScatter in place: rank %d [%d] = %d, want %d", r, i, got[i], sum(r*k+i))
			}
		}
	}
	// AllGather in place: each rank's block r already in place.
	reset()
	eachRank(t, ranks, func(r int, rk rank) error {
		return rk.comm.AllGather(bufs[r].Slice(r*k, (r+1)*k), bufs[r], rk.s)
	})
	for r := range ranks {
		got := download[int32](t, bufs[r])
		for p := range n {
			for i := range k {
				if got[p*k+i] != in[p][p*k+i] {
					t.Fatalf("AllGather in place: rank %d block %d [%d] = %d, want %d", r, p, i, got[p*k+i], in[p][p*k+i])
				}
			}
		}
	}
	// Reduce to the last rank, Broadcast from it; non-roots pass zero buffers.
	reset()
	root := n - 1
	eachRank(t, ranks, func(r int, rk rank) error {
		var dst nccl.Buffer
		if r == root {
			dst = outs[r]
		}
		if err := rk.comm.Reduce(bufs[r], dst, nccl.Max, root, rk.s); err != nil {
			return err
		}
		var src nccl.Buffer
		if r == root {
			src = outs[r]
		}
		return rk.comm.Broadcast(src, bufs[r], root, rk.s)
	})
	for r := range ranks {
		got := download[int32](t, bufs[r])
		for i := range got {
			if want := in[n-1][i]; got[i] != want {
				t.Fatalf("Reduce(max)+Broadcast: rank %d [%d] = %d, want %d", r, i, got[i], want)
			}
		}
	}
}

func TestAlltoAllvPaths(t *testing.T) {
	for _, variant := range []string{"vccl11", "vccl10", "default", "old"} {
		var opts []nccl.Option
		if variant == "vccl10" {
			opts = append(opts, nccl.WithAlltoAllvABI(10))
		}
		l := open(t, variant, opts...)
		for _, n := range []int{1, 2, 3, 4, 8} {
			alltoallvPaths(t, l, initRanks(t, l, n))
		}
		alltoallvPaths(t, l, initRanksCtx(t, l, 3, nonBlockingCtx(t)))
	}
}

// alltoallvPaths runs one uneven exchange by every form the library allows and
// checks every element; "auto" on symmetric buffers must take the native path
// exactly where the library has ncclAlltoAllv. The result is also checked
// against package collectives' reference, receive bytes outside the blocks
// included.
func alltoallvPaths(t *testing.T, l *nccl.Library, ranks []rank) {
	variant := l.Path
	n := len(ranks)
	m, total := layout(n)
	hasNative := l.Has("ncclAlltoAllv")
	for _, form := range []string{"auto", "native", "grouped", "local"} {
		if form == "native" && (!hasNative || n == 1) {
			// With one rank the matrix and the local form are both one entry:
			// AlltoAllv takes it as the local form, which never runs natively.
			continue
		}
		sendBytes := make([][]byte, n)
		recvBytes := make([][]byte, n)
		got := make([][]byte, n)
		paths := make([]nccl.Path, n)
		eachRank(t, ranks, func(r int, rk rank) error {
			var send, recv nccl.Buffer
			var err error
			symmetric := (form == "auto" || form == "native") && hasNative
			if symmetric {
				if send, err = rk.comm.AllocSymmetric(nccl.Int64, total(m.SendCounts, r, n)); err != nil {
					return err
				}
				defer send.Free()
				if recv, err = rk.comm.AllocSymmetric(nccl.Int64, total(m.RecvCounts, r, n)); err != nil {
					return err
				}
				defer recv.Free()
				if send.Window() == 0 || recv.Window() == 0 {
					return fmt.Errorf("AllocSymmetric gave no window")
				}
			} else {
				if send, err = l.CUDA().Alloc(rk.dev, nccl.Int64, total(m.SendCounts, r, n)); err != nil {
					return err
				}
				defer send.Free()
				if recv, err = l.CUDA().Alloc(rk.dev, nccl.Int64, total(m.RecvCounts, r, n)); err != nil {
					return err
				}
				defer recv.Free()
			}
			host := make([]int64, send.Len())
			for j := range n {
				for e := range int(m.SendCounts[r*n+j]) {
					host[int(m.SendDispls[r*n+j])+e] = int64(r<<32 | j<<16 | e)
				}
			}
			if err := nccl.CopyIn(send, host); err != nil {
				return err
			}
			if err := recv.Memset(0xee); err != nil {
				return err
			}
			sendBytes[r] = make([]byte, send.Size())
			send.ReadBytes(sendBytes[r])
			recvBytes[r] = make([]byte, recv.Size())
			recv.ReadBytes(recvBytes[r])
			p := map[string]nccl.Path{"auto": nccl.Auto, "native": nccl.Native, "grouped": nccl.Grouped, "local": nccl.Auto}[form]
			if err := rk.comm.SetPath(p); err != nil {
				return err
			}
			defer rk.comm.SetPath(nccl.Auto)
			paths[r] = rk.comm.PathOf("AlltoAllv")
			switch form {
			case "local":
				row := nccl.Layout{SendCounts: m.SendCounts[r*n : (r+1)*n], SendDispls: m.SendDispls[r*n : (r+1)*n],
					RecvCounts: m.RecvCounts[r*n : (r+1)*n], RecvDispls: m.RecvDispls[r*n : (r+1)*n]}
				err = rk.comm.AlltoAllv(send, recv, row, rk.s)
			default:
				err = rk.comm.AlltoAllv(send, recv, m, rk.s)
			}
			if err != nil {
				return fmt.Errorf("%s form, %d ranks: %w", form, n, err)
			}
			if err := rk.s.Synchronize(); err != nil {
				return err
			}
			got[r] = make([]byte, recv.Size())
			return recv.ReadBytes(got[r])
		})
		wantPath := nccl.Grouped
		if form != "grouped" && hasNative {
			wantPath = nccl.Native
		}
		ref := collectives.AlltoAllv(nccl.Int64, m, sendBytes, recvBytes)
		for r := range n {
			if paths[r] != wantPath {
				t.Fatalf("%s %s: PathOf = %v, want %v", variant, form, paths[r], wantPath)
			}
			vals := collectives.Decode(nccl.Int64, got[r])
			for i := range n {
				for e := range int(m.RecvCounts[r*n+i]) {
					if v := int64(vals[int(m.RecvDispls[r*n+i])+e]); v != int64(i<<32|r<<16|e) {
						t.Fatalf("%s %s %d ranks: rank %d, element %d from %d = %#x", variant, form, n, r, e, i, v)
					}
				}
			}
			if i := collectives.Mismatch(nccl.Int64, got[r], ref[r]); i >= 0 {
				t.Fatalf("%s %s %d ranks: rank %d element %d differs from the reference", variant, form, n, r, i)
			}
		}
	}
}

// layout: rank i sends (i*3+j)%4 elements to rank j (zero-sized blocks too),
// received in reverse rank order to exercise the displacements.
func layout(n int) (nccl.Layout, func([]uint64, int, int) int) {
	m := nccl.Layout{SendCounts: make([]uint64, n*n), SendDispls: make([]uint64, n*n),
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
	c := rk.comm
	a := upload(t, l, 0, make([]float32, 8))
	b := upload(t, l, 0, make([]float32, 6))
	seven := upload(t, l, 0, make([]float32, 7))
	seven2 := upload(t, l, 0, make([]float32, 7))
	other := upload(t, l, 1, make([]float32, 8))
	m, _ := layout(2)
	m.RecvCounts[1] += 1 // disagrees with what rank 1 sends
	good, _ := layout(2)
	withPath := func(p nccl.Path, f func() error) error {
		c.SetPath(p)
		defer c.SetPath(nccl.Auto)
		return f()
	}
	for name, err := range map[string]error{
		"AllReduce lengths":         c.AllReduce(a, b, nccl.Sum, rk.s),
		"AllReduce other device":    c.AllReduce(a, other, nccl.Sum, rk.s),
		"AllGather lengths":         c.AllGather(a, a, rk.s),
		"ReduceScatter lengths":     c.ReduceScatter(b, a, nccl.Sum, rk.s),
		"Broadcast root":            c.Broadcast(a, a, 2, rk.s),
		"Send peer":                 c.Send(a, -1, rk.s),
		"AlltoAll multiple":         c.AlltoAll(seven, seven2, rk.s),
		"Gather root recv":          c.Gather(a, a, 0, rk.s),
		"Scatter root send":         c.Scatter(a, a, 0, rk.s),
		"AlltoAllv matrix":          c.AlltoAllv(a, b, m, rk.s),
		"AlltoAllv short":           c.AlltoAllv(a, b, nccl.Layout{}, rk.s),
		"AlltoAllv in place":        c.AlltoAllv(a, a, good, rk.s),
		"AlltoAllv overlap":         c.AlltoAllv(a.Slice(0, 4), a.Slice(2, 8), good, rk.s),
		"AlltoAll grouped in place": withPath(nccl.Grouped, func() error { return c.AlltoAll(a, a, rk.s) }),
		"AlltoAll in place":         c.AlltoAll(a, a, rk.s),
		"AlltoAll overlap":          c.AlltoAll(a.Slice(0, 4), a.Slice(2, 6), rk.s),
	} {
		var ne *nccl.Error
		if !errors.Is(err, nccl.ErrInvalidArgument) || !errors.As(err, &ne) || ne.Msg == "" {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The default library has no ncclAlltoAllv: Native is refused as such.
	err := withPath(nccl.Native, func() error { return c.AlltoAllv(a, b, good, rk.s) })
	if !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("native AlltoAllv without the function: %v, want ErrNotSupported", err)
	}
	// VCCL has it, but only for the matrix form on symmetric windows.
	lv := open(t, "vccl11")
	vr := initRanks(t, lv, 2)
	va := upload(t, lv, 0, make([]float32, 8))
	vb := upload(t, lv, 0, make([]float32, 6))
	vc := vr[0].comm
	vc.SetPath(nccl.Native)
	defer vc.SetPath(nccl.Auto)
	row := nccl.Layout{SendCounts: good.SendCounts[:2], SendDispls: good.SendDispls[:2], RecvCounts: good.RecvCounts[:2], RecvDispls: good.RecvDispls[:2]}
	for name, err := range map[string]error{
		"native AlltoAllv without windows": vc.AlltoAllv(va, vb, good, vr[0].s),
		"native AlltoAllv of a local form": vc.AlltoAllv(va, vb, row, vr[0].s),
	} {
		var ne *nccl.Error
		if !errors.Is(err, nccl.ErrInvalidArgument) || !errors.As(err, &ne) || ne.Msg == "" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestWaitAbortsOnDeadline: a receive no one sends to never completes; Wait
// returns at the deadline, aborts the communicator and wraps ctx.Err(). Both
// kinds of communicator.
func TestWaitAbortsOnDeadline(t *testing.T) {
	l := open(t, "default")
	for _, ctx := range []context.Context{context.Background(), nonBlockingCtx(t)} {
		ranks := initRanksCtx(t, l, 2, ctx)
		connectRanks(t, l, ranks[0].comm, ranks[1].comm) // or rank 0's Recv waits inside NCCL for rank 1 to connect
		buf := upload(t, l, 0, make([]int32, 4))
		if err := ranks[0].comm.Recv(buf, 1, ranks[0].s); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		err := ranks[0].comm.Wait(wctx, ranks[0].s)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Fatalf("Wait = %v after %v", err, time.Since(start))
		}
		select {
		case <-ranks[0].comm.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("communicator not freed after the abort")
		}
		if err := ranks[0].comm.AllReduce(buf, buf, nccl.Sum, ranks[0].s); !errors.Is(err, nccl.ErrClosed) {
			t.Fatalf("after the abort: %v, want ErrClosed", err)
		}
		// An idle stream returns at once.
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		if err := ranks[1].comm.Wait(ctx2, ranks[1].s); err != nil {
			t.Fatal(err)
		}
		cancel2()
	}
}

// TestWaitNonBlocking: non-blocking communicators, from a context with a
// deadline, from Config.Blocking or from NCCL_COMM_BLOCKING (which NCCL lets
// override the config), are ready once init returns; their operations
// complete and Wait sees it. Blocking communicators too.
func TestWaitNonBlocking(t *testing.T) {
	l := open(t, "default")
	no, yes := false, true
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		cfg      *nccl.Config
		env      string // NCCL_COMM_BLOCKING
		blocking bool
	}{
		{"deadline", nonBlockingCtx(t), nil, "", false},
		{"Config.Blocking=false", context.Background(), &nccl.Config{Blocking: &no}, "", false},
		{"background", context.Background(), nil, "", true},
		{"deadline, Config.Blocking=true", nonBlockingCtx(t), &nccl.Config{Blocking: &yes}, "", true},
		{"background, NCCL_COMM_BLOCKING=0", context.Background(), nil, "0", false},
		{"deadline, Config.Blocking=false, NCCL_COMM_BLOCKING=1", nonBlockingCtx(t), &nccl.Config{Blocking: &no}, "1", true},
		{"deadline, NCCL_COMM_BLOCKING=yes (not NCCL's)", nonBlockingCtx(t), nil, "yes", false},
	} {
		t.Setenv("NCCL_COMM_BLOCKING", tc.env)
		comms := initComms(t, l, 2, tc.ctx, tc.cfg)
		bufs := make([]nccl.Buffer, 2)
		streams := make([]nccl.Stream, 2)
		for r, c := range comms {
			if c.Blocking() != tc.blocking {
				t.Errorf("%s: Blocking() = %v", tc.name, c.Blocking())
			}
			if err := c.AsyncError(); err != nil {
				t.Errorf("%s: rank %d not ready after init: %v", tc.name, r, err)
			}
			bufs[r] = upload(t, l, r, []float64{float64(r + 1), 10})
			var err error
			if streams[r], err = l.CUDA().NewStream(r, nccl.StreamNonBlocking); err != nil {
				t.Fatal(err)
			}
			defer streams[r].Destroy()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[r] = c.AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); errs[r] == nil {
					errs[r] = c.Wait(ctx, streams[r])
				}
			}()
		}
		wg.Wait()
		cancel()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for r, c := range comms {
			if got := download[float64](t, bufs[r]); got[0] != 3 || got[1] != 20 {
				t.Errorf("%s: rank %d got %v, want [3 20]", tc.name, r, got)
			}
			if err := c.Close(context.Background()); err != nil {
				t.Errorf("%s: Close: %v", tc.name, err)
			}
		}
	}
}

// TestStreamWait: b.After(a) orders b's later work after a's, on the GPU.
func TestStreamWait(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	a, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	b, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	defer a.Destroy()
	defer b.Destroy()
	buf := upload(t, l, 0, make([]uint8, 4096))
	out := upload(t, l, 0, make([]uint8, 4096))
	// a fills buf; b copies it only after a's work: the order is on the GPU.
	if err := buf.MemsetAsync(0x5a, a); err != nil {
		t.Fatal(err)
	}
	if err := b.After(a); err != nil {
		t.Fatal(err)
	}
	if err := cu.MemcpyAsync(uintptr(out.Ptr()), uintptr(buf.Ptr()), 4096, b); err != nil {
		t.Fatal(err)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i, v := range download[uint8](t, out) {
		if v != 0x5a {
			t.Fatalf("byte %d = %#x: the copy ran before the memset", i, v)
		}
	}
}

func TestTypeOf(t *testing.T) {
	for got, want := range map[nccl.DataType]nccl.DataType{
		nccl.TypeOf[int8](): nccl.Int8, nccl.TypeOf[uint8](): nccl.Uint8, nccl.TypeOf[int32](): nccl.Int32,
		nccl.TypeOf[uint32](): nccl.Uint32, nccl.TypeOf[int64](): nccl.Int64, nccl.TypeOf[uint64](): nccl.Uint64,
		nccl.TypeOf[float32](): nccl.Float32, nccl.TypeOf[float64](): nccl.Float64, nccl.TypeOf[nccl.F16](): nccl.Float16,
		nccl.TypeOf[nccl.BF16](): nccl.Bfloat16, nccl.TypeOf[nccl.F8E4M3](): nccl.Float8e4m3, nccl.TypeOf[nccl.F8E5M2](): nccl.Float8e5m2,
	} {
		if got != want {
			t.Errorf("%v, want %v", got, want)
		}
	}
	// CopyIn and CopyOut refuse a buffer of another type.
	l := open(t, "default")
	b := upload(t, l, 0, make([]float32, 4))
	if err := nccl.CopyIn(b, make([]int32, 4)); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("CopyIn of int32 into float32: %v", err)
	}
	if err := nccl.CopyOut(make([]uint32, 4), b); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("CopyOut of float32 into uint32: %v", err)
	}
}

// TestCallsAllocateNothing: an operation on Buffers allocates nothing, in
// place or not, on a slice, and the grouped AlltoAll (its group and
// bookkeeping) neither.
func TestCallsAllocateNothing(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 1)
	rk := ranks[0]
	buf := upload(t, l, 0, make([]float32, 256))
	out := upload(t, l, 0, make([]float32, 256))
	for _, tc := range []struct {
		name string
		path nccl.Path
		call func() error
	}{
		{"AllReduce in place", nccl.Auto, func() error { return rk.comm.AllReduce(buf, buf, nccl.Sum, rk.s) }},
		{"AllReduce of a slice", nccl.Auto, func() error {
			return rk.comm.AllReduce(buf.Slice(0, 16), out.Slice(16, 32), nccl.Sum, rk.s)
		}},
		{"AlltoAll native", nccl.Auto, func() error { return rk.comm.AlltoAll(buf, out, rk.s) }},
		{"AlltoAll grouped", nccl.Grouped, func() error { return rk.comm.AlltoAll(buf, out, rk.s) }},
	} {
		rk.comm.SetPath(tc.path)
		allocs := testing.AllocsPerRun(100, func() {
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
		})
		rk.s.Synchronize()
		if allocs != 0 {
			t.Errorf("%s allocates %v times per call", tc.name, allocs)
		}
	}
	rk.comm.SetPath(nccl.Auto)
}
