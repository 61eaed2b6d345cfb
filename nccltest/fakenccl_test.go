package nccltest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
	"github.com/gonccl/nccl/internal/fakes"
	"github.com/gonccl/nccl/nccltest"
)

// The fake NCCL where real NCCL fails: a failed group, the connection flags a
// discarded Send leaves, ncclCommAbort beside other threads' groups and calls,
// two threads completing one non-blocking job, one-rank collectives inside a
// group, and a rank aborted while a peer checks its call. Each test drives the
// fake's C functions as a C program would (not through Group, whose semantics
// these cases decide), and checks results, states and last-error texts
// exactly. Cases whose outcome is the death of the process run in a child
// process (childCases in child_test.go, fakes.RunChild). gonccl opens the
// fake (its loader and buffers serve the driver); every NCCL call is made
// directly, by name.

// fakeDrv calls one variant of the fake NCCL directly.
type fakeDrv struct {
	fatalf  func(format string, args ...any)
	cleanup func(func()) // frees what the driver made, at the end of the test
	l       *nccl.Library
	cu      *nccl.CUDA
	dir     string  // the variant's folder
	h       uintptr // the variant's libnccl.so.2, as gonccl opened it
}

func newFakeDrv(t *testing.T, variant string) *fakeDrv {
	t.Helper()
	d := nccltest.Dir(fakes.Dir(t))
	f := openFakeDrv(t.Fatalf, d.NCCL(variant), d.CUDART())
	f.cleanup = t.Cleanup // other tests count the process's live allocations
	return f
}

// childFake is newFakeDrv in a child process (the parent passed the fakes'
// folder on): a failure panics, which the parent sees.
func childFake(variant string) *fakeDrv {
	dir, err := fakes.Built()
	if err != nil {
		panic(err)
	}
	return openFakeDrv(func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) },
		filepath.Join(dir, variant), filepath.Join(dir, "cudart"))
}

func openFakeDrv(fatalf func(string, ...any), ncclDir, cudart string) *fakeDrv {
	l, err := nccl.Open(nccl.WithLibrary(ncclDir), nccl.WithCUDARuntime(cudart))
	if err != nil {
		fatalf("Open: %v", err)
	}
	// The same file gonccl opened: dlopen gives the handle of the loaded copy.
	h, err := purego.Dlopen(l.Path, purego.RTLD_NOW)
	if err != nil {
		fatalf("dlopen %s: %v", l.Path, err)
	}
	return &fakeDrv{fatalf: fatalf, cleanup: func(func()) {}, l: l, cu: l.CUDA(), dir: ncclDir, h: h}
}

// sym is the fake's C function name.
func (f *fakeDrv) sym(name string) uintptr {
	fn, err := purego.Dlsym(f.h, name)
	if err != nil {
		f.fatalf("%s: %v", name, err)
	}
	return fn
}

func (f *fakeDrv) call(name string, args ...uintptr) abi.Result {
	return abi.Result(int32(ccall.Call(f.sym(name), args...)))
}

// callPtr is call for arguments converted from Go pointers in the argument list.
//
//go:uintptrescapes
func (f *fakeDrv) callPtr(name string, args ...uintptr) abi.Result {
	return abi.Result(int32(ccall.Call(f.sym(name), args...)))
}

func (f *fakeDrv) lastError() string { return ccall.GoString(ccall.Call(f.sym("ncclGetLastError"), 0)) }

// hook sets one of the fake's test controls (fakenccl_set_*_us).
func (f *fakeDrv) hook(name string, v int) {
	h, err := purego.Dlopen(filepath.Join(f.dir, "libnccl.so.2"), purego.RTLD_NOW)
	if err != nil {
		f.fatalf("dlopen: %v", err)
	}
	fn, err := purego.Dlsym(h, name)
	if err != nil {
		f.fatalf("%s: %v", name, err)
	}
	ccall.Call(fn, uintptr(v))
}

// hookFor is hook for the length of a test.
func (f *fakeDrv) hookFor(t *testing.T, name string, v int) {
	f.hook(name, v)
	t.Cleanup(func() { f.hook(name, 0) })
}

// expect fails unless r is want; what names the call.
func (f *fakeDrv) expect(what string, r, want abi.Result) {
	if r != want {
		f.fatalf("%s: %v (%s), want %v", what, r, f.lastError(), want)
	}
}

// initAll makes n blocking ranks of one communicator on devices 0..n-1.
func (f *fakeDrv) initAll(n int) []uintptr {
	comms := make([]uintptr, n)
	f.expect("ncclCommInitAll", f.callPtr("ncclCommInitAll", uintptr(unsafe.Pointer(&comms[0])), uintptr(n), 0), abi.Success)
	return comms
}

// initNonBlocking makes n non-blocking ranks of one communicator, rank r on
// device r, and waits (polling from this goroutine) until they are ready.
func (f *fakeDrv) initNonBlocking(n int) []uintptr {
	var id [128]byte
	f.expect("ncclGetUniqueId", f.callPtr("ncclGetUniqueId", uintptr(unsafe.Pointer(&id))), abi.Success)
	cfg := new([96]byte) // ncclConfig_t: size, magic, version, blocking = 0, the rest 0
	*(*uint64)(unsafe.Pointer(&cfg[0])) = 96
	*(*uint32)(unsafe.Pointer(&cfg[8])) = 0xcafebeef
	*(*uint32)(unsafe.Pointer(&cfg[12])) = 22803
	comms := make([]uintptr, n)
	for r := range n {
		var res abi.Result
		f.cu.OnDevice(r, func() error {
			res = abi.Result(int32(ccall.CallStruct128(f.sym("ncclCommInitRankConfig"), 2, &id,
				uintptr(unsafe.Pointer(&comms[r])), uintptr(n), uintptr(r), uintptr(unsafe.Pointer(cfg)))))
			return nil
		})
		if res != abi.InProgress && res != abi.Success {
			f.fatalf("ncclCommInitRankConfig rank %d: %v (%s)", r, res, f.lastError())
		}
	}
	runtime.KeepAlive(cfg)
	for r, c := range comms {
		f.expect(fmt.Sprintf("rank %d's init", r), f.settle(c), abi.Success)
	}
	return comms
}

// asyncErr is ncclCommGetAsyncError's state of c.
func (f *fakeDrv) asyncErr(c uintptr) abi.Result {
	var st int32
	if r := f.callPtr("ncclCommGetAsyncError", c, uintptr(unsafe.Pointer(&st))); r != abi.Success {
		f.fatalf("ncclCommGetAsyncError: %v (%s)", r, f.lastError())
	}
	return abi.Result(st)
}

// settle polls c until it is no longer in progress (5 s at most).
func (f *fakeDrv) settle(c uintptr) abi.Result {
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := f.asyncErr(c)
		if st != abi.InProgress {
			return st
		}
		if time.Now().After(deadline) {
			f.fatalf("communicator %#x still in progress after 5 s", c)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// floats allocates n float32s on dev holding vals (repeated).
func (f *fakeDrv) floats(dev, n int, val float32) nccl.Buffer {
	b, err := f.cu.Alloc(dev, nccl.Float32, n)
	if err != nil {
		f.fatalf("Alloc: %v", err)
	}
	host := make([]float32, n)
	for i := range host {
		host[i] = val
	}
	if err := nccl.CopyIn(b, host); err != nil {
		f.fatalf("nccl.CopyIn: %v", err)
	}
	f.cleanup(func() { b.Free() })
	return b
}

// check fails unless every element of b is want.
func (f *fakeDrv) check(what string, b nccl.Buffer, want float32) {
	host := make([]float32, b.Len())
	if err := nccl.CopyOut(host, b); err != nil {
		f.fatalf("nccl.CopyOut: %v", err)
	}
	for i, v := range host {
		if v != want {
			f.fatalf("%s: element %d is %v, want %v", what, i, v, want)
		}
	}
}

func (f *fakeDrv) stream(dev int) nccl.Stream {
	s, err := f.cu.NewStream(dev, nccl.StreamNonBlocking)
	if err != nil {
		f.fatalf("NewStream: %v", err)
	}
	f.cleanup(func() { s.Destroy() })
	return s
}

// sync waits for s, 5 s at most: work that would hang fails the test.
func (f *fakeDrv) sync(s nccl.Stream) {
	done := make(chan error, 1)
	go func() { done <- s.Synchronize() }()
	select {
	case err := <-done:
		if err != nil {
			f.fatalf("cudaStreamSynchronize: %v", err)
		}
	case <-time.After(5 * time.Second):
		f.fatalf("stream of device %d still busy after 5 s", s.Device())
	}
}

func (f *fakeDrv) allReduce(send, recv nccl.Buffer, comm uintptr, s nccl.Stream) abi.Result {
	return f.call("ncclAllReduce", uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(send.Len()), uintptr(nccl.Float32),
		uintptr(nccl.Sum), comm, s.Handle())
}

func (f *fakeDrv) send(b nccl.Buffer, peer int, comm uintptr, s nccl.Stream) abi.Result {
	return f.call("ncclSend", uintptr(b.Ptr()), uintptr(b.Len()), uintptr(nccl.Float32), uintptr(peer), comm, s.Handle())
}

func (f *fakeDrv) recv(b nccl.Buffer, peer int, comm uintptr, s nccl.Stream) abi.Result {
	return f.call("ncclRecv", uintptr(b.Ptr()), uintptr(b.Len()), uintptr(nccl.Float32), uintptr(peer), comm, s.Handle())
}

// failCall is a call that fails inside a group: an all-reduce on a NULL
// communicator (what gonccl's Group used to discard a group with).
func (f *fakeDrv) failCall() {
	f.expect("ncclAllReduce on a NULL communicator", f.call("ncclAllReduce", 0, 0, 1, uintptr(nccl.Float32), uintptr(nccl.Sum), 0, 0),
		abi.InvalidArgument)
}

// group runs fn between ncclGroupStart and ncclGroupEnd on this OS thread and
// returns ncclGroupEnd's result.
func (f *fakeDrv) group(fn func()) abi.Result {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f.expect("ncclGroupStart", f.call("ncclGroupStart"), abi.Success)
	fn()
	return f.call("ncclGroupEnd")
}

func wantText(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%s: last error %q, want it to contain %q", what, got, want)
	}
}

// wantDeath checks that a child died with the fake's message (SIGABRT).
func wantDeath(t *testing.T, out string, err error, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the child lived:\n%s", out)
	}
	if !strings.Contains(out, "fakenccl: "+msg) || !strings.Contains(out, "SIGABRT") {
		t.Fatalf("the child ended with %v, not with the fake's abort %q:\n%s", err, msg, out)
	}
	line := out[strings.Index(out, "fakenccl: "):]
	t.Log(line[:strings.IndexByte(line+"\n", '\n')])
}

// Case 1. A call failing inside a group (an operation on a NULL communicator,
// or an invalid argument) makes ncclGroupEnd discard the group and return
// that error; groupCleanup (group.cc:395-467) gives the error to every
// non-blocking communicator that joined the group, and from then on every
// call but ncclCommAbort returns it from ncclCommEnsureReady. A non-blocking
// rank outside the group and blocking members stay as they were.
func TestFakeFailedGroupPoisonsNonBlockingMembers(t *testing.T) {
	for _, variant := range []string{"default", "v230", "old"} {
		for _, how := range []string{"NULL communicator", "invalid datatype"} {
			t.Run(variant+"/"+how, func(t *testing.T) {
				f := newFakeDrv(t, variant)
				nb := f.initNonBlocking(3) // ranks 0 and 1 join the group; rank 2 does not
				s0, s1 := f.stream(0), f.stream(1)
				in0, out0 := f.floats(0, 16, 1), f.floats(0, 16, -7)
				in1, out1 := f.floats(1, 16, 2), f.floats(1, 16, -7)
				r := f.group(func() {
					f.expect("ncclAllReduce rank 0", f.allReduce(in0, out0, nb[0], s0), abi.Success)
					if how == "NULL communicator" {
						f.expect("ncclAllReduce rank 1", f.allReduce(in1, out1, nb[1], s1), abi.Success)
						f.failCall()
					} else { // refused by ncclEnqueueCheck, which gives rank 1 the error itself
						f.expect("ncclAllReduce rank 1 of datatype 99", f.call("ncclAllReduce", uintptr(in1.Ptr()),
							uintptr(out1.Ptr()), 16, 99, uintptr(nccl.Sum), nb[1], s1.Handle()), abi.InvalidArgument)
					}
				})
				if r != abi.InvalidArgument {
					t.Fatalf("ncclGroupEnd: %v, want ncclInvalidArgument", r)
				}
				wantText(t, "ncclGroupEnd", f.lastError(), "ncclGroupEnd: a call inside the group failed; nothing was launched")
				// Nothing ran.
				f.sync(s0)
				f.sync(s1)
				f.check("rank 0's output after the discarded group", out0, -7)
				f.check("rank 1's output after the discarded group", out1, -7)
				for r, want := range []abi.Result{abi.InvalidArgument, abi.InvalidArgument, abi.Success} {
					if st := f.asyncErr(nb[r]); st != want {
						t.Errorf("rank %d's state after the discarded group: %v, want %v", r, st, want)
					}
				}
				// Every later call on a poisoned member fails with that error.
				var n int32
				for _, c := range []struct {
					name string
					r    abi.Result
				}{
					{"ncclAllReduce", f.allReduce(in0, out0, nb[0], s0)},
					{"ncclCommCount", f.callPtr("ncclCommCount", nb[0], uintptr(unsafe.Pointer(&n)))},
					{"ncclCommFinalize", f.call("ncclCommFinalize", nb[0])},
					{"ncclCommDestroy", f.call("ncclCommDestroy", nb[0])},
					{"ncclCommDestroy of rank 1", f.call("ncclCommDestroy", nb[1])},
				} {
					if c.r != abi.InvalidArgument {
						t.Errorf("%s on a poisoned communicator: %v (%s), want ncclInvalidArgument", c.name, c.r, f.lastError())
					}
				}
				if st := f.asyncErr(nb[0]); st != abi.InvalidArgument { // still there: the destroy freed nothing
					t.Errorf("rank 0's state after the refused destroy: %v", st)
				}
				// Rank 2 works (alone: a Count needs no peer), and only ncclCommAbort frees the others.
				if r := f.callPtr("ncclCommCount", nb[2], uintptr(unsafe.Pointer(&n))); r != abi.Success || n != 3 {
					t.Errorf("ncclCommCount on rank 2: %v, %d", r, n)
				}
				for r, c := range nb {
					f.expect(fmt.Sprintf("ncclCommAbort rank %d", r), f.call("ncclCommAbort", c), abi.Success)
				}

				// Blocking members are not poisoned: the next group of the same ranks runs.
				bl := f.initAll(2)
				r = f.group(func() {
					f.expect("ncclAllReduce blocking rank 0", f.allReduce(in0, out0, bl[0], s0), abi.Success)
					f.expect("ncclAllReduce blocking rank 1", f.allReduce(in1, out1, bl[1], s1), abi.Success)
					f.failCall()
				})
				if r != abi.InvalidArgument {
					t.Fatalf("ncclGroupEnd of blocking ranks: %v, want ncclInvalidArgument", r)
				}
				for r, c := range bl {
					if st := f.asyncErr(c); st != abi.Success {
						t.Errorf("blocking rank %d's state after the discarded group: %v", r, st)
					}
				}
				r = f.group(func() {
					f.expect("ncclAllReduce blocking rank 0", f.allReduce(in0, out0, bl[0], s0), abi.Success)
					f.expect("ncclAllReduce blocking rank 1", f.allReduce(in1, out1, bl[1], s1), abi.Success)
				})
				f.expect("the next ncclGroupEnd of blocking ranks", r, abi.Success)
				f.sync(s0)
				f.sync(s1)
				f.check("rank 0's sum", out0, 3)
				f.check("rank 1's sum", out1, 3)
				for r, c := range bl {
					f.expect(fmt.Sprintf("ncclCommDestroy blocking rank %d", r), f.call("ncclCommDestroy", c), abi.Success)
				}
			})
		}
	}
}

// Case 2. A Send or Recv sets NCCL's per-peer hasSeen flags at the call
// (enqueue.cc:2661-2683), and a discarded group does not clear them: a
// direction that was not connected yet is then never asked for by this rank
// again, while the peer asks for its side. Seen on 4 x H100: the next group
// fails with "Message truncated : received 16384 bytes instead of 8192"
// (ncclInternalError). The fake fails the peer's matching group too
// (ncclRemoteError) instead of letting it hang; a direction connected before
// the discarded group is not affected.
func TestFakeDiscardedSendLeavesConnectionFlags(t *testing.T) {
	type ranks struct {
		f       *fakeDrv
		c       []uintptr
		s       [2]nccl.Stream
		in, out [2]nccl.Buffer
	}
	setup := func(t *testing.T) *ranks {
		f := newFakeDrv(t, "default")
		rk := &ranks{f: f, c: f.initAll(2)}
		for r := range 2 {
			rk.s[r] = f.stream(r)
			rk.in[r], rk.out[r] = f.floats(r, 8, float32(10+r)), f.floats(r, 8, -1)
		}
		t.Cleanup(func() {
			for r := range 2 {
				f.call("ncclCommAbort", rk.c[r])
			}
		})
		return rk
	}
	// exchange is one group in which rank me sends to the other and receives from it.
	exchange := func(rk *ranks, me int) abi.Result {
		f, p := rk.f, 1-me
		return f.group(func() {
			f.expect("ncclSend", f.send(rk.in[me], p, rk.c[me], rk.s[me]), abi.Success)
			f.expect("ncclRecv", f.recv(rk.out[me], p, rk.c[me], rk.s[me]), abi.Success)
		})
	}
	// both is one group of both ranks' exchanges (one thread driving both ranks).
	both := func(rk *ranks) abi.Result {
		f := rk.f
		return f.group(func() {
			for me := range 2 {
				f.expect("ncclSend", f.send(rk.in[me], 1-me, rk.c[me], rk.s[me]), abi.Success)
				f.expect("ncclRecv", f.recv(rk.out[me], 1-me, rk.c[me], rk.s[me]), abi.Success)
			}
		})
	}
	discard := func(rk *ranks, fn func()) {
		f := rk.f
		if r := f.group(func() { fn(); f.failCall() }); r != abi.InvalidArgument {
			f.fatalf("the discarded group's ncclGroupEnd: %v", r)
		}
	}

	t.Run("stale send", func(t *testing.T) {
		rk := setup(t)
		f := rk.f
		discard(rk, func() { f.expect("ncclSend", f.send(rk.in[0], 1, rk.c[0], rk.s[0]), abi.Success) })
		if r := exchange(rk, 0); r != abi.InternalError {
			t.Fatalf("rank 0's exchange after the discarded Send: %v (%s), want ncclInternalError", r, f.lastError())
		}
		if got := f.lastError(); got != "Message truncated : received 16384 bytes instead of 8192" {
			t.Errorf("rank 0's last error: %q", got)
		}
		// Its Recv's flag is set now too, and nothing connected: it asks for nothing.
		if r := exchange(rk, 0); r != abi.InternalError {
			t.Fatalf("rank 0's second exchange: %v (%s), want ncclInternalError", r, f.lastError())
		}
		wantText(t, "rank 0's second exchange", f.lastError(), "ncclGroupEnd: rank 0 does not ask to connect its Send/Recv with rank 1")
		if r := exchange(rk, 1); r != abi.RemoteError {
			t.Fatalf("rank 1's matching exchange: %v (%s), want ncclRemoteError", r, f.lastError())
		}
		wantText(t, "rank 1's exchange", f.lastError(),
			"ncclGroupEnd: rank 1 cannot connect its Send/Recv with rank 0: rank 0's side of the connection setup failed")
		f.sync(rk.s[0])
		f.sync(rk.s[1])
		f.check("rank 0's receive buffer", rk.out[0], -1)
		f.check("rank 1's receive buffer", rk.out[1], -1)
	})

	t.Run("rank 1 first", func(t *testing.T) {
		// Rank 1 connects first, from its own thread: it waits for rank 0's
		// setup, which fails; rank 1's group fails then, instead of hanging.
		rk := setup(t)
		f := rk.f
		discard(rk, func() { f.expect("ncclRecv", f.recv(rk.out[0], 1, rk.c[0], rk.s[0]), abi.Success) })
		done := make(chan abi.Result, 1)
		go func() { done <- exchange(rk, 1) }()
		time.Sleep(20 * time.Millisecond)
		if r := exchange(rk, 0); r != abi.InternalError {
			t.Fatalf("rank 0's exchange: %v (%s)", r, f.lastError())
		}
		select {
		case r := <-done:
			if r != abi.RemoteError {
				t.Fatalf("rank 1's exchange: %v, want ncclRemoteError", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("rank 1's exchange still waiting after 5 s")
		}
	})

	t.Run("connected before", func(t *testing.T) {
		rk := setup(t)
		f := rk.f
		f.expect("the first exchange", both(rk), abi.Success)
		f.sync(rk.s[0])
		f.sync(rk.s[1])
		f.check("rank 0 got", rk.out[0], 11)
		f.check("rank 1 got", rk.out[1], 10)
		discard(rk, func() {
			f.expect("ncclSend", f.send(rk.in[0], 1, rk.c[0], rk.s[0]), abi.Success)
			f.expect("ncclRecv", f.recv(rk.out[0], 1, rk.c[0], rk.s[0]), abi.Success)
		})
		rk.in[0], rk.in[1] = f.floats(0, 8, 20), f.floats(1, 8, 21)
		f.expect("the exchange after the discarded group", both(rk), abi.Success)
		f.sync(rk.s[0])
		f.sync(rk.s[1])
		f.check("rank 0 got", rk.out[0], 21)
		f.check("rank 1 got", rk.out[1], 20)
	})

	t.Run("direction", func(t *testing.T) {
		// 0 -> 1 is connected; 1 -> 0 is not when rank 0's Recv is discarded.
		rk := setup(t)
		f := rk.f
		oneWay := func() abi.Result {
			return f.group(func() {
				f.expect("ncclSend", f.send(rk.in[0], 1, rk.c[0], rk.s[0]), abi.Success)
				f.expect("ncclRecv", f.recv(rk.out[1], 0, rk.c[1], rk.s[1]), abi.Success)
			})
		}
		f.expect("0 -> 1", oneWay(), abi.Success)
		discard(rk, func() { f.expect("ncclRecv", f.recv(rk.out[0], 1, rk.c[0], rk.s[0]), abi.Success) })
		f.expect("0 -> 1 after the discarded Recv", oneWay(), abi.Success)
		f.sync(rk.s[1])
		f.check("rank 1 got", rk.out[1], 10)
		r := f.group(func() {
			f.expect("ncclSend", f.send(rk.in[1], 0, rk.c[1], rk.s[1]), abi.Success)
			f.expect("ncclRecv", f.recv(rk.out[0], 1, rk.c[0], rk.s[0]), abi.Success)
		})
		if r != abi.InternalError {
			t.Fatalf("1 -> 0 after rank 0's discarded Recv: %v (%s), want ncclInternalError", r, f.lastError())
		}
		wantText(t, "1 -> 0", f.lastError(), "ncclGroupEnd: rank 0 does not ask to connect its Send/Recv with rank 1 "+
			"(a discarded group left NCCL's per-peer connection flags set) while rank 1 asks")
	})
}

// Case 3. ncclCommAbort never looks at other threads' open groups: a
// communicator linked in a group that another thread has open is freed under
// it, and that thread's ncclGroupEnd (or its group's next call) uses freed
// memory. The fake stops the process there.
func TestFakeAbortFreesCommLinkedInOpenGroup(t *testing.T) {
	for _, tc := range []struct{ child, msg string }{
		{"fakefail-open-group-end", "ncclGroupEnd: communicator 0x"},
		{"fakefail-open-group-call", "ncclAllReduce: communicator 0x"},
	} {
		t.Run(tc.child, func(t *testing.T) {
			out, err := fakes.RunChild(t, 20*time.Second, tc.child)
			wantDeath(t, out, err, tc.msg)
			if !strings.Contains(out, "was freed by ncclCommAbort while linked in this thread's open group") {
				t.Errorf("the message does not name the case:\n%s", out)
			}
		})
	}
}

func abortInOpenGroup(later bool) error {
	f := childFake("default")
	comms := f.initAll(2)
	s := f.stream(0)
	b := f.floats(0, 16, 1)
	runtime.LockOSThread() // the group belongs to this thread; the abort runs on another
	f.expect("ncclGroupStart", f.call("ncclGroupStart"), abi.Success)
	f.expect("ncclAllReduce", f.allReduce(b, b, comms[0], s), abi.Success)
	done := make(chan abi.Result)
	go func() { done <- f.call("ncclCommAbort", comms[0]) }()
	f.expect("ncclCommAbort on another thread", <-done, abi.Success)
	if later {
		b1 := f.floats(1, 16, 1)
		s1 := f.stream(1)
		f.allReduce(b1, b1, comms[1], s1)
		return errors.New("the group's next call returned")
	}
	f.call("ncclGroupEnd")
	return errors.New("ncclGroupEnd returned")
}

// Case 4. From NCCL 2.29 a non-blocking group runs on a std::thread linked to
// each member (comm->groupJob), and the first ncclCommGetAsyncError that sees
// a member succeed joins it; two threads doing that at once on members of one
// job both complete it: "terminate called without an active exception". The
// fake stops the process in every variant (2.28's pthread underflows
// silently, but gonccl must not do it on any library). The complete window
// is widened so that the overlap is certain.
func TestFakeTwoThreadsCompleteOneGroupJob(t *testing.T) {
	for _, tc := range []struct{ variant, same string }{
		{"default", "0"}, {"default", "1"}, {"v230", "0"}, {"vccl11", "0"}, {"old", "1"},
	} {
		name := tc.variant + "/two-communicators"
		if tc.same == "1" {
			name = tc.variant + "/one-communicator"
		}
		t.Run(name, func(t *testing.T) {
			out, err := fakes.RunChild(t, 20*time.Second, "fakefail-two-pollers",
				"FAKEFAIL_VARIANT="+tc.variant, "FAKEFAIL_SAME="+tc.same)
			wantDeath(t, out, err, "terminate called without an active exception (two threads completed one non-blocking group job)")
		})
	}
}

func twoPollers() error {
	f := childFake(os.Getenv("FAKEFAIL_VARIANT"))
	comms := f.initNonBlocking(2)
	f.hook("fakenccl_set_complete_window_us", 200000)
	s := [2]nccl.Stream{f.stream(0), f.stream(1)}
	b := [2]nccl.Buffer{f.floats(0, 16, 1), f.floats(1, 16, 2)}
	r := f.group(func() {
		for i := range 2 {
			f.expect("ncclAllReduce", f.allReduce(b[i], b[i], comms[i], s[i]), abi.Success)
		}
	})
	f.expect("ncclGroupEnd of non-blocking ranks", r, abi.InProgress)
	targets := comms
	if os.Getenv("FAKEFAIL_SAME") == "1" {
		targets = []uintptr{comms[0], comms[0]}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			<-start
			f.settle(c)
		}()
	}
	close(start)
	wg.Wait()
	return errors.New("two threads completed one group job and the process lived")
}

// Polling each member of a non-blocking group from one thread at a time is
// fine, and so is one thread polling them all: only the overlap is fatal.
func TestFakeGroupJobCompletedByOneThreadAtATime(t *testing.T) {
	for _, variant := range []string{"default", "v230"} {
		t.Run(variant, func(t *testing.T) {
			f := newFakeDrv(t, variant)
			comms := f.initNonBlocking(2)
			s := [2]nccl.Stream{f.stream(0), f.stream(1)}
			b := [2]nccl.Buffer{f.floats(0, 16, 1), f.floats(1, 16, 2)}
			for round := range 3 {
				r := f.group(func() {
					for i := range 2 {
						f.expect("ncclAllReduce", f.allReduce(b[i], b[i], comms[i], s[i]), abi.Success)
					}
				})
				f.expect("ncclGroupEnd", r, abi.InProgress)
				for i := range 2 { // each member by another goroutine, one after the other
					done := make(chan abi.Result)
					go func() { done <- f.settle(comms[i]) }()
					f.expect(fmt.Sprintf("round %d rank %d", round, i), <-done, abi.Success)
				}
			}
			f.sync(s[0])
			f.sync(s[1])
			f.check("rank 0", b[0], 12) // in place: 1+2, then 3+3, then 6+6
			f.check("rank 1", b[1], 12)
			for _, c := range comms {
				f.expect("ncclCommDestroy", f.call("ncclCommDestroy", c), abi.Success)
			}
		})
	}
}

// Case 5. ncclCommAbort of one rank while another thread is inside a call on
// a rank of the same communicator held in this process (NCCL frees them under
// it: "double free or corruption (out)" seen on 2.29): whichever comes first,
// the fake stops the process. The call side is kept inside the library by
// the fake's call delay, the abort side by its abort delay.
func TestFakeAbortBesideCallOnSameCommunicator(t *testing.T) {
	for _, tc := range []struct{ mode, msg string }{
		{"call-first", "ncclCommAbort of rank 1 (communicator 0x"},
		{"abort-first", "ncclAllReduce on rank 0 (communicator 0x"},
		{"two-aborts", "ncclCommAbort of rank "},
		{"destroy-same", "ncclCommDestroy of rank 0 (communicator 0x"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			out, err := fakes.RunChild(t, 20*time.Second, "fakefail-abort-beside-call", "FAKEFAIL_MODE="+tc.mode)
			wantDeath(t, out, err, tc.msg)
		})
	}
}

func abortBesideCall() error {
	f := childFake("default")
	comms := f.initAll(2)
	s := f.stream(0)
	b := f.floats(0, 16, 1)
	// An all-reduce of 0 elements does nothing, but stays inside the call for the call delay.
	inside := func(c uintptr) {
		f.call("ncclAllReduce", uintptr(b.Ptr()), uintptr(b.Ptr()), 0, uintptr(nccl.Float32), uintptr(nccl.Sum), c, s.Handle())
	}
	switch os.Getenv("FAKEFAIL_MODE") {
	case "call-first":
		f.hook("fakenccl_set_call_delay_us", 500000)
		go inside(comms[0])
		time.Sleep(50 * time.Millisecond)
		f.call("ncclCommAbort", comms[1])
	case "abort-first":
		f.hook("fakenccl_set_abort_delay_us", 500000)
		go f.call("ncclCommAbort", comms[1])
		time.Sleep(50 * time.Millisecond)
		inside(comms[0])
	case "two-aborts":
		f.hook("fakenccl_set_abort_delay_us", 500000)
		go f.call("ncclCommAbort", comms[1])
		time.Sleep(50 * time.Millisecond)
		f.call("ncclCommAbort", comms[0])
	case "destroy-same":
		f.hook("fakenccl_set_call_delay_us", 500000)
		go inside(comms[0])
		time.Sleep(50 * time.Millisecond)
		f.call("ncclCommDestroy", comms[0])
	}
	return errors.New("the process lived")
}

// What case 5 lets through: ncclCommDestroy of one rank while another thread
// is inside a call on another rank (a destroy that is not the clique's last
// frees nothing), two destroys at once, and aborts from one thread.
func TestFakeDestroyBesideCallsOnOtherRanks(t *testing.T) {
	f := newFakeDrv(t, "default")
	s := f.stream(0)
	b := f.floats(0, 16, 1)
	inside := func(c uintptr) abi.Result {
		return f.call("ncclAllReduce", uintptr(b.Ptr()), uintptr(b.Ptr()), 0, uintptr(nccl.Float32), uintptr(nccl.Sum), c, s.Handle())
	}
	f.hookFor(t, "fakenccl_set_call_delay_us", 100000)
	comms := f.initAll(3)
	done := make(chan abi.Result)
	go func() { done <- inside(comms[0]) }()
	time.Sleep(20 * time.Millisecond)
	f.expect("ncclCommDestroy of rank 1 beside a call on rank 0", f.call("ncclCommDestroy", comms[1]), abi.Success)
	f.expect("the call on rank 0", <-done, abi.Success)
	var wg sync.WaitGroup
	res := make([]abi.Result, 2)
	for i, c := range []uintptr{comms[0], comms[2]} {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = f.call("ncclCommDestroy", c) }()
	}
	wg.Wait()
	f.expect("ncclCommDestroy of rank 0 beside rank 2's", res[0], abi.Success)
	f.expect("ncclCommDestroy of rank 2 beside rank 0's", res[1], abi.Success)
	more := f.initAll(2)
	for _, c := range more {
		f.expect("ncclCommAbort from one thread", f.call("ncclCommAbort", c), abi.Success)
	}
}

// Case 6. A one-rank communicator's collective is launched at the call, in a
// group too (enqueue.cc:3039-3041), and joins no group: a failed group does
// not hold it back, and does not poison its non-blocking communicator. A
// one-rank Send/Recv to itself is a task like any other: discarded with the
// group.
func TestFakeOneRankCollectiveLaunchedAtTheCall(t *testing.T) {
	for _, mode := range []string{"blocking", "non-blocking"} {
		t.Run(mode, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f := newFakeDrv(t, "default")
			var c uintptr
			if mode == "blocking" {
				c = f.initAll(1)[0]
			} else {
				c = f.initNonBlocking(1)[0]
			}
			defer f.call("ncclCommAbort", c)
			s := f.stream(0)
			in, out := f.floats(0, 16, 5), f.floats(0, 16, -1)
			f.expect("ncclGroupStart", f.call("ncclGroupStart"), abi.Success)
			f.expect("ncclAllReduce in the group", f.allReduce(in, out, c, s), abi.Success)
			f.sync(s) // the group is still open
			f.check("the output before ncclGroupEnd", out, 5)
			f.failCall()
			f.expect("ncclGroupEnd", f.call("ncclGroupEnd"), abi.InvalidArgument)
			if st := f.asyncErr(c); st != abi.Success {
				t.Fatalf("the one-rank communicator's state after the failed group: %v", st)
			}
			// Outside a group it is done at the call: ncclSuccess, not ncclInProgress.
			in2, out2 := f.floats(0, 16, 6), f.floats(0, 16, -1)
			f.expect("ncclAllReduce outside a group", f.allReduce(in2, out2, c, s), abi.Success)
			if st := f.asyncErr(c); st != abi.Success {
				t.Fatalf("the one-rank communicator's state after its all-reduce: %v", st)
			}
			f.sync(s)
			f.check("the output of the all-reduce outside a group", out2, 6)
			// A Send/Recv to itself joins the group and goes with it.
			r := f.group(func() {
				f.expect("ncclSend to itself", f.send(in, 0, c, s), abi.Success)
				f.expect("ncclRecv from itself", f.recv(out2, 0, c, s), abi.Success)
				f.failCall()
			})
			f.expect("ncclGroupEnd of a Send/Recv to itself", r, abi.InvalidArgument)
			f.sync(s)
			f.check("the discarded receive", out2, 6)
			want := abi.Success
			if mode == "non-blocking" {
				want = abi.InvalidArgument
			}
			if st := f.asyncErr(c); st != want {
				t.Fatalf("the state after the discarded Send/Recv: %v, want %v", st, want)
			}
		})
	}
}

// Case 7. The fake's own use after free: rank 1 aborted while its all-reduce
// waited for rank 0 in their meeting place freed its task there, and rank 0,
// arriving, compared its call with the freed task (check_calls) and read its
// input: a false mismatch, or a crash. The child runs it with glibc's
// MALLOC_PERTURB_ so that freed memory is scribbled on.
func TestFakeAbortedRankTaskStaysForPeers(t *testing.T) {
	out, err := fakes.RunChild(t, 20*time.Second, "fakefail-aborted-rank-task", "MALLOC_PERTURB_=165")
	if err != nil || strings.Contains(out, "mismatch") {
		t.Fatalf("the child: %v\n%s", err, out)
	}
}

func abortedRankTask() error {
	f := childFake("default")
	comms := f.initAll(2)
	s := [2]nccl.Stream{f.stream(0), f.stream(1)}
	b := [2]nccl.Buffer{f.floats(0, 1024, 1), f.floats(1, 1024, 2)}
	r := f.group(func() { // connects the ranks
		for i := range 2 {
			f.expect("ncclAllReduce", f.allReduce(b[i], b[i], comms[i], s[i]), abi.Success)
		}
	})
	f.expect("ncclGroupEnd", r, abi.Success)
	f.sync(s[0])
	f.sync(s[1])
	// Rank 1's next all-reduce reaches the meeting place and waits for rank 0 ...
	f.expect("rank 1's ncclAllReduce", f.allReduce(b[1], b[1], comms[1], s[1]), abi.Success)
	time.Sleep(50 * time.Millisecond)
	// ... until rank 1 is aborted and its work gives up.
	f.expect("ncclCommAbort of rank 1", f.call("ncclCommAbort", comms[1]), abi.Success)
	time.Sleep(50 * time.Millisecond)
	// Rank 0 arrives: it checks rank 1's call and reads its input.
	f.expect("rank 0's ncclAllReduce", f.allReduce(b[0], b[0], comms[0], s[0]), abi.Success)
	time.Sleep(100 * time.Millisecond)
	if st := f.asyncErr(comms[0]); st != abi.Success {
		return fmt.Errorf("rank 0's state: %v (%s)", st, f.lastError())
	}
	f.expect("ncclCommAbort of rank 0", f.call("ncclCommAbort", comms[0]), abi.Success)
	return nil
}

func init() {
	childCases["fakefail-open-group-end"] = func() error { return abortInOpenGroup(false) }
	childCases["fakefail-open-group-call"] = func() error { return abortInOpenGroup(true) }
	childCases["fakefail-two-pollers"] = twoPollers
	childCases["fakefail-abort-beside-call"] = abortBesideCall
	childCases["fakefail-aborted-rank-task"] = abortedRankTask
}
