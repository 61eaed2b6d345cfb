package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// A Send to the communicator's own rank, or a Recv from it. NCCL pairs a
// rank's Sends to itself with its Recvs from itself when it schedules a group
// (enqueue.cc, scheduleP2pTasksToPlan) and refuses a half left alone; a call
// outside a group is a group of its own, so NCCL refuses either half there
// (seen on an H100 with 2.28.3 and 2.28.9: "Trying to send to self without a
// matching recv"). gonccl refuses such a call itself, outside a Group, and
// leaves the pair inside a Group to NCCL. The fake refuses as NCCL does
// (nccltest's TestFakeSendRecvSelf); before, it took the lone Send and its
// stream waited for good, so that Close hung.

// selfModes are the communicators these tests run on: blocking and
// non-blocking.
var selfModes = []struct {
	name string
	ctx  func(t *testing.T) context.Context
}{
	{"blocking", func(*testing.T) context.Context { return context.Background() }},
	{"non-blocking", func(t *testing.T) context.Context { return nonBlockingCtx(t) }},
}

// wantSelfRefused checks err is gonccl's refusal of a lone half to self.
func wantSelfRefused(t *testing.T, what string, err error, op string) {
	t.Helper()
	var ne *nccl.Error
	if !errors.Is(err, nccl.ErrInvalidUsage) || !errors.As(err, &ne) {
		t.Fatalf("%s: %v, want an *nccl.Error matching ErrInvalidUsage", what, err)
	}
	if ne.Op != op || !strings.Contains(ne.Msg, "outside a Group") || !strings.Contains(ne.Msg, "in one Group") {
		t.Fatalf("%s: %v, want %s's refusal saying to put both halves in one Group", what, err, op)
	}
}

// abortIfFailed aborts the ranks when the test fails: work NCCL should have
// refused may hold their streams for good, and the cleanups' Close and
// buffer frees would wait for it. Registered after the ranks and buffers are
// made, it runs before their cleanups.
func abortIfFailed(t *testing.T, ranks []rank) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range ranks {
				r.comm.Abort()
			}
		}
	})
}

// randomInt32s is n random int32 values.
func randomInt32s(n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = rand.Int32()
	}
	return v
}

// selfPair sends src to the communicator's own rank and receives it into
// dst, in one Group, and checks dst element by element against want.
func selfPair(t *testing.T, rk rank, src, dst nccl.Buffer, want []int32) {
	t.Helper()
	me := rk.comm.Rank()
	if err := rk.comm.Library().Group(func() error {
		if err := rk.comm.Send(src, me, rk.s); err != nil {
			return err
		}
		return rk.comm.Recv(dst, me, rk.s)
	}); err != nil {
		t.Fatalf("grouped Send+Recv to rank %d itself: %v", me, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rk.comm.Wait(ctx, rk.s); err != nil {
		t.Fatalf("Wait after the grouped Send+Recv to itself: %v", err)
	}
	got := download[int32](t, dst)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rank %d's receive from itself: element %d = %d, want %d", me, i, got[i], want[i])
		}
	}
}

// selfOpen opens the library of the Send/Recv-to-self tests: the fakes, or
// real NCCL in a GPU build (ops_sendrecv_self_gpu_test.go).
var selfOpen = func(t *testing.T) *nccl.Library { return open(t, "default") }

// TestSendRecvSelfOutsideGroup: a Send to the communicator's own rank outside
// a Group, and a Recv from it, are refused before NCCL with an error matching
// ErrInvalidUsage that says to group them; nothing reaches the stream, the
// communicator stays usable, and Close then returns at once. On one rank, and
// on rank 1 of two; blocking and non-blocking.
func TestSendRecvSelfOutsideGroup(t *testing.T) {
	const elems = 1024
	l := selfOpen(t)
	for _, mode := range selfModes {
		for _, tc := range []struct{ nranks, me int }{{1, 0}, {2, 1}} {
			t.Run(fmt.Sprintf("%s/rank%dof%d", mode.name, tc.me, tc.nranks), func(t *testing.T) {
				ranks := initRanksCtx(t, l, tc.nranks, mode.ctx(t))
				rk := ranks[tc.me]
				src := randomInt32s(elems)
				a := upload(t, l, rk.dev, src)
				b := upload(t, l, rk.dev, make([]int32, elems))
				abortIfFailed(t, ranks)
				wantSelfRefused(t, "Send to itself", rk.comm.Send(a, tc.me, rk.s), "ncclSend")
				wantSelfRefused(t, "Recv from itself", rk.comm.Recv(b, tc.me, rk.s), "ncclRecv")
				// Inside another goroutine's Group it is still outside one.
				if err := l.Group(func() error {
					errc := make(chan error, 1)
					go func() { errc <- rk.comm.Send(a, tc.me, rk.s) }()
					wantSelfRefused(t, "Send to itself beside another goroutine's Group", <-errc, "ncclSend")
					return nil
				}); err != nil {
					t.Fatalf("the empty Group: %v", err)
				}
				if err := rk.comm.AsyncError(); err != nil {
					t.Fatalf("the communicator after the refusals: %v", err)
				}
				for i, v := range download[int32](t, b) {
					if v != 0 {
						t.Fatalf("the refused Recv wrote element %d: %d", i, v)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				start := time.Now()
				for _, r := range ranks {
					if err := r.comm.Close(ctx); err != nil {
						t.Fatalf("Close of rank %d after the refusals: %v (after %v)", r.comm.Rank(), err, time.Since(start))
					}
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("Close took %v", d)
				}
			})
		}
	}
}

// TestSendRecvSelfInGroup: inside a Group a Send to the communicator's own
// rank with its matching Recv is legal and delivers the data, on one rank and
// on each rank of two at once; a Group holding one half alone fails at its
// end, refused before NCCL (which fails it with "Trying to send to self
// without a matching recv" and leaves a non-blocking communicator in error),
// and the communicator stays usable.
func TestSendRecvSelfInGroup(t *testing.T) {
	const elems = 4096
	l := selfOpen(t)
	for _, mode := range selfModes {
		for _, nranks := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%dranks", mode.name, nranks), func(t *testing.T) {
				ranks := initRanksCtx(t, l, nranks, mode.ctx(t))
				srcs := make([][]int32, nranks)
				ins := make([]nccl.Buffer, nranks)
				outs := make([]nccl.Buffer, nranks)
				for r, rk := range ranks {
					srcs[r] = randomInt32s(elems)
					ins[r] = upload(t, l, rk.dev, srcs[r])
					outs[r] = upload(t, l, rk.dev, make([]int32, elems))
				}
				abortIfFailed(t, ranks)
				// Each rank to itself, all ranks at once.
				eachRank(t, ranks, func(r int, rk rank) error {
					return l.Group(func() error {
						if err := rk.comm.Send(ins[r], r, rk.s); err != nil {
							return err
						}
						return rk.comm.Recv(outs[r], r, rk.s)
					})
				})
				for r := range ranks {
					got := download[int32](t, outs[r])
					for i := range got {
						if got[i] != srcs[r][i] {
							t.Fatalf("rank %d's receive from itself: element %d = %d, want %d", r, i, got[i], srcs[r][i])
						}
					}
				}
				// Again, the Recv first, on the last rank alone, with new data.
				last := ranks[nranks-1]
				src := randomInt32s(elems)
				in := upload(t, l, last.dev, src)
				abortIfFailed(t, ranks)
				selfPair(t, last, in, outs[nranks-1], src)
			})
		}
	}
	for _, mode := range selfModes {
		t.Run("one half in a Group/"+mode.name, func(t *testing.T) {
			ranks := initRanksCtx(t, l, 1, mode.ctx(t))
			rk := ranks[0]
			src := randomInt32s(elems)
			a := upload(t, l, rk.dev, src)
			b := upload(t, l, rk.dev, make([]int32, elems))
			abortIfFailed(t, ranks)
			for _, half := range []struct {
				name, text string
				call       func() error
			}{
				{"Send", "1 Send(s) to its own rank and 0 Recv(s)", func() error { return rk.comm.Send(a, 0, rk.s) }},
				{"Recv", "0 Send(s) to its own rank and 1 Recv(s)", func() error { return rk.comm.Recv(b, 0, rk.s) }},
			} {
				err := l.Group(half.call)
				if !errors.Is(err, nccl.ErrInvalidUsage) || !strings.Contains(err.Error(), half.text) {
					t.Fatalf("a Group holding only a %s to itself: %v, want ErrInvalidUsage with %q", half.name, err, half.text)
				}
			}
			if err := rk.comm.AsyncError(); err != nil {
				t.Fatalf("the communicator after the refused groups: %v", err)
			}
			selfPair(t, rk, a, b, src)
		})
	}
}

// TestAlltoAllvLocalSelfCounts: in the local form, what a rank sends to
// itself must be what it receives from itself, or its group would hold a
// Send to itself without its Recv (or one of another length), which NCCL
// refuses at the group's end.
func TestAlltoAllvLocalSelfCounts(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 2)
	rk := ranks[0]
	a := upload(t, l, rk.dev, make([]float32, 8))
	b := upload(t, l, rk.dev, make([]float32, 8))
	abortIfFailed(t, ranks)
	// Only the block to itself: no peer is waited for, whatever happens.
	m := nccl.Layout{SendCounts: []uint64{2, 0}, SendDispls: []uint64{0, 0}, RecvCounts: []uint64{0, 0}, RecvDispls: []uint64{0, 0}}
	if err := rk.comm.AlltoAllv(a, b, m, rk.s); !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "itself") {
		t.Fatalf("AlltoAllv sending 2 elements to itself and expecting none: %v, want ErrInvalidArgument", err)
	}
}
