package nccl_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gonccl/nccl"
)

// Numbers reached C unchecked: Alloc of 2^61+16 float64 gave a 128-byte
// allocation (the product wrapped), AllocSymmetric(-1) succeeded, nranks 2^32+1
// reached NCCL as 1, a root or peer of 2^32 as 0, device 2^32 as device 0.
// Every case must be refused before any C call, matching ErrInvalidArgument.

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("%s: %v, want an error matching ErrInvalidArgument", what, err)
	}
}

func TestBoundsSizes(t *testing.T) {
	l := lcOpen(t)
	cu := l.CUDA()
	for _, n := range []int{1<<61 + 16, math.MaxInt, -1, math.MinInt} {
		_, err := cu.Alloc(0, nccl.Float64, n)
		wantInvalid(t, "Alloc", err)
		_, err = l.MemAlloc(0, nccl.Float64, n)
		wantInvalid(t, "MemAlloc", err)
		_, err = cu.Wrap(0, 0x10000, nccl.Float64, n)
		wantInvalid(t, "Wrap", err)
	}
	_, err := cu.Alloc(0, nccl.DataType(99), 1)
	wantInvalid(t, "Alloc of an unknown type", err)
	_, err = cu.Wrap(0, nccl.DevicePtr(math.MaxUint64-8), nccl.Uint8, 100)
	wantInvalid(t, "Wrap past the end of the address space", err)
	_, err = cu.MallocHost(-1)
	wantInvalid(t, "MallocHost", err)
	if live := lcCall(lcSym(t, "cudart", "fakecuda_live_allocations")); live != 0 {
		t.Errorf("%d allocations made by refused calls", live)
	}

	id, _ := l.GetUniqueID()
	c, err := l.InitRank(context.Background(), 0, id, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, n := range []int{-1, math.MaxInt, 1<<62 + 1} {
		_, err := c.AllocSymmetric(nccl.Float32, n)
		wantInvalid(t, "AllocSymmetric", err)
	}
	b, err := cu.Alloc(0, nccl.Float32, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	wantInvalid(t, "CopyIn past the end", nccl.CopyIn(b, make([]float32, 9)))
	wantInvalid(t, "CopyIn of another type", nccl.CopyIn(b, make([]int32, 8)))
	wantInvalid(t, "CopyOut past the end", nccl.CopyOut(make([]float32, 9), b))
	wantInvalid(t, "Free of a slice", b.Slice(1, 2).Free())
	wantInvalid(t, "Free of a slice at the start", b.Slice(0, 2).Free()) // freed the whole allocation before
	wantInvalid(t, "Free of an empty slice at the start", b.Slice(0, 0).Free())
	wantInvalid(t, "Free of the zero Buffer", nccl.Buffer{}.Free())
	defer func() {
		if recover() == nil {
			t.Error("Slice past the end did not panic")
		}
	}()
	b.Slice(2, 9)
}

func TestBoundsRanksAndDevices(t *testing.T) {
	l := lcOpen(t)
	cu := l.CUDA()
	ctx := context.Background()
	id, _ := l.GetUniqueID()
	for _, tc := range []struct {
		what              string
		dev, nranks, rank int
	}{
		{"nranks 2^32+1", 0, 1<<32 + 1, 0},
		{"nranks 0", 0, 0, 0},
		{"rank 2^32", 0, 2, 1 << 32},
		{"rank -1", 0, 2, -1},
		{"device 2^32", 1 << 32, 1, 0},
		{"device -1", -1, 1, 0},
	} {
		_, err := l.InitRank(ctx, tc.dev, id, tc.nranks, tc.rank, modeOf(ctx, nil))
		wantInvalid(t, "InitRank "+tc.what, err)
		_, err = l.InitRankScalable(ctx, tc.dev, []nccl.UniqueID{id}, tc.nranks, tc.rank, modeOf(ctx, nil))
		wantInvalid(t, "InitRankScalable "+tc.what, err)
	}
	_, err := l.InitRankScalable(ctx, 0, nil, 1, 0, modeOf(ctx, nil))
	wantInvalid(t, "InitRankScalable without ids", err)
	_, err = l.InitAll(ctx, []int{0, 1 << 32}, modeOf(ctx, nil))
	wantInvalid(t, "InitAll device 2^32", err)
	_, err = cu.Alloc(1<<32, nccl.Float32, 1)
	wantInvalid(t, "Alloc on device 2^32", err)
	_, err = cu.NewStream(1<<32, nccl.StreamNonBlocking)
	wantInvalid(t, "NewStream on device 2^32", err)
	wantInvalid(t, "OnDevice 2^32", cu.OnDevice(1<<32, func() error { return nil }))
	wantInvalid(t, "DeviceSynchronize 2^32", cu.DeviceSynchronize(1<<32))

	comms, err := l.InitAll(ctx, []int{0, 1}, modeOf(ctx, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close(ctx)
		}
	}()
	c := comms[0]
	b, _ := cu.Alloc(0, nccl.Float32, 4)
	defer b.Free()
	s, _ := cu.NewStream(0, nccl.StreamNonBlocking)
	defer s.Destroy()
	for _, r := range []int{1 << 32, -1, 2, math.MaxInt} {
		wantInvalid(t, "Broadcast root", c.Broadcast(b, b, r, s))
		wantInvalid(t, "Reduce root", c.Reduce(b, b, nccl.Sum, r, s))
		wantInvalid(t, "Gather root", c.Gather(b, b, r, s))
		wantInvalid(t, "Scatter root", c.Scatter(b, b, r, s))
		wantInvalid(t, "Send peer", c.Send(b, r, s))
		wantInvalid(t, "Recv peer", c.Recv(b, r, s))
	}
	wantInvalid(t, "AllReduce with a negative op", c.AllReduce(b, b, nccl.RedOp(-1), s))
	for _, color := range []int{1 << 32, -2} {
		_, err := c.Split(ctx, color, 0, nil)
		wantInvalid(t, "Split color", err)
	}
	_, err = c.Split(ctx, 0, 1<<32, nil)
	wantInvalid(t, "Split key", err)
	other, _ := cu.Alloc(1, nccl.Float32, 4)
	defer other.Free()
	wantInvalid(t, "AllReduce of a buffer on another device", c.AllReduce(other, other, nccl.Sum, s))
	s1, _ := cu.NewStream(1, nccl.StreamNonBlocking)
	defer s1.Destroy()
	wantInvalid(t, "AllReduce on a stream of another device", c.AllReduce(b, b, nccl.Sum, s1))
	i32, _ := cu.Alloc(0, nccl.Int32, 4)
	defer i32.Free()
	wantInvalid(t, "AllReduce of two types", c.AllReduce(b, i32, nccl.Sum, s))
	wantInvalid(t, "AllReduce of the zero Buffer", c.AllReduce(nccl.Buffer{}, b, nccl.Sum, s))
	wantInvalid(t, "SetPath", c.SetPath(nccl.Path(7)))
}

// TestReductionsCheckedBeforeC: RedOp(99) reached NCCL, which refused it
// inside the call and so left a non-blocking communicator in error for good
// (the next valid Sum failed with the stale "invalid reduction operation 99",
// Close failed). Unknown ops, PreMulSum ops of another communicator, destroyed
// ones and ones made for another type are refused before C, and the
// communicator stays usable.
func TestReductionsCheckedBeforeC(t *testing.T) {
	l := open(t, "default")
	ctx := commModes[1].ctx(t)
	ranks := initRanksCtx(t, l, 2, ctx) // non-blocking
	cu := l.CUDA()
	bufs := make([]nccl.Buffer, 2)
	for r := range 2 {
		b, err := cu.Alloc(ranks[r].dev, nccl.Float32, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		bufs[r] = b
	}
	c, b, s := ranks[0].comm, bufs[0], ranks[0].s
	other, err := nccl.PreMulSum(ranks[1].comm, float32(2))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := nccl.PreMulSum(c, float32(2))
	if err != nil {
		t.Fatal(err)
	}
	f64, err := nccl.PreMulSum(c, float64(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DestroyRedOp(mine); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "AllReduce with RedOp(99)", c.AllReduce(b, b, nccl.RedOp(99), s))
	wantInvalid(t, "Reduce with RedOp(99)", c.Reduce(b, b, nccl.RedOp(99), 0, s))
	wantInvalid(t, "ReduceScatter with RedOp(99)", c.ReduceScatter(b, b.Slice(0, 32), nccl.RedOp(99), s))
	if other != mine { // the fake numbers ops per communicator: the same number may be valid here
		wantInvalid(t, "AllReduce with another communicator's op", c.AllReduce(b, b, other, s))
	}
	wantInvalid(t, "AllReduce with a destroyed op", c.AllReduce(b, b, mine, s))
	wantInvalid(t, "AllReduce of float32 with an op made for float64", c.AllReduce(b, b, f64, s))
	wantInvalid(t, "DestroyRedOp twice", c.DestroyRedOp(mine))
	wantInvalid(t, "DestroyRedOp(99)", c.DestroyRedOp(nccl.RedOp(99)))
	if err := c.AsyncError(); err != nil {
		t.Fatalf("AsyncError after the refusals: %v", err)
	}
	if err := c.DestroyRedOp(f64); err != nil {
		t.Fatal(err)
	}
	if err := ranks[1].comm.DestroyRedOp(other); err != nil {
		t.Fatal(err)
	}
	onRanks(t, []int{0, 1}, func(r int) error {
		return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1))
	})
	for r, rk := range ranks {
		if err := rk.comm.Close(ctx); err != nil {
			t.Fatalf("rank %d: Close after the refusals: %v", r, err)
		}
	}
}

// TestZeroBufferRefused: the zero Buffer (no allocation) as send and recv was
// accepted, a 0-element operation enqueued, although Free calls it the zero
// Buffer; as recv only it got "send has 16 elements, want 0". Every operation
// refuses it by name wherever a buffer is required, and a 0-element slice of
// a real allocation still runs.
func TestZeroBufferRefused(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 2)
	c, s := ranks[0].comm, ranks[0].s
	b, err := l.CUDA().Alloc(ranks[0].dev, nccl.Float32, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	var zero nccl.Buffer
	for _, tc := range []struct {
		what, name string
		err        error
	}{
		{"AllReduce(zero, zero)", "recv", c.AllReduce(zero, zero, nccl.Sum, s)},
		{"AllReduce(b, zero)", "recv", c.AllReduce(b, zero, nccl.Sum, s)},
		{"AllReduce(zero, b)", "send", c.AllReduce(zero, b, nccl.Sum, s)},
		{"Send(zero)", "buf", c.Send(zero, 1, s)},
		{"Recv(zero)", "buf", c.Recv(zero, 1, s)},
		{"AllGather(zero, zero)", "send", c.AllGather(zero, zero, s)},
		{"ReduceScatter(zero, zero)", "recv", c.ReduceScatter(zero, zero, nccl.Sum, s)},
		{"Broadcast(zero, zero) on the root", "recv", c.Broadcast(zero, zero, 0, s)},
		{"AlltoAll(zero, zero)", "recv", c.AlltoAll(zero, zero, s)},
	} {
		wantInvalid(t, tc.what, tc.err)
		if tc.err != nil && !strings.Contains(tc.err.Error(), tc.name+" is the zero Buffer") {
			t.Errorf("%s: %v, want it to say %q is the zero Buffer", tc.what, tc.err, tc.name)
		}
	}
	// A 0-element slice of an allocation is a valid empty operation.
	onRanks(t, []int{0, 1}, func(r int) error {
		e, err := l.CUDA().Alloc(ranks[r].dev, nccl.Float32, 4)
		if err != nil {
			return err
		}
		defer e.Free()
		empty := e.Slice(0, 0)
		if err := ranks[r].comm.AllReduce(empty, empty, nccl.Sum, ranks[r].s); err != nil {
			return err
		}
		return ranks[r].s.Synchronize()
	})
}

// TestWaitRefusesStreamOfOtherDevice: Comm.Wait accepted a stream of another
// device (AllReduce refuses it), and then waited on work that was not the
// communicator's.
func TestWaitRefusesStreamOfOtherDevice(t *testing.T) {
	l := open(t, "default")
	ranks := initRanks(t, l, 2)
	wantInvalid(t, "Wait on a stream of another device", ranks[0].comm.Wait(context.Background(), ranks[1].s))
	if err := ranks[0].comm.Wait(context.Background(), ranks[0].s); err != nil {
		t.Fatalf("Wait on its own stream: %v", err)
	}
}

// TestNonBlockingConcurrentCallsRefused: operations on one non-blocking
// communicator from two goroutines failed about one time in five inside NCCL
// ("call on a non-blocking communicator still in progress"), and real NCCL
// makes such a refusal the communicator's error for good (ncclEnqueueCheck).
// gonccl refuses the second call itself, saying why, and the communicator
// stays usable: two goroutines on rank 0 retry until their calls are taken,
// rank 1 matches them all.
func TestNonBlockingConcurrentCallsRefused(t *testing.T) {
	l := open(t, "default")
	ctx := commModes[1].ctx(t)
	ranks := initRanksCtx(t, l, 2, ctx) // non-blocking
	const k = 40
	bufs := make([]nccl.Buffer, 2)
	for r := range 2 {
		b, err := l.CUDA().Alloc(ranks[r].dev, nccl.Float32, 16)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		bufs[r] = b
	}
	var refused atomic.Int64
	issue := func(r, n int) error {
		for i := 0; i < n; {
			err := ranks[r].comm.AllReduce(bufs[r], bufs[r], nccl.Sum, ranks[r].s)
			switch {
			case err == nil:
				i++
			case errors.Is(err, nccl.ErrInvalidUsage) && strings.Contains(err.Error(), "another goroutine"):
				refused.Add(1)
				runtime.Gosched()
			default:
				for _, rk := range ranks { // the other rank would wait for this one's calls
					rk.comm.Abort()
				}
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, job := range []struct{ r, n int }{{0, k}, {0, k}, {1, 2 * k}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = issue(job.r, job.n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("a call refused otherwise than as busy: %v", err)
	}
	t.Logf("%d calls refused while another goroutine's launch ran", refused.Load())
	for r, rk := range ranks {
		if err := rk.comm.Wait(ctx, rk.s); err != nil {
			t.Fatalf("rank %d: Wait: %v", r, err)
		}
		if err := rk.comm.AsyncError(); err != nil {
			t.Fatalf("rank %d: AsyncError after the concurrent calls: %v", r, err)
		}
	}
	onRanks(t, []int{0, 1}, func(r int) error {
		return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1))
	})
}

// TestDeviceBeyondCount: a device number past the devices the process sees
// is an error matching ErrInvalidArgument that says how many there are, for
// memory, streams and communicators alike, not CUDA's bare
// cudaErrorInvalidDevice.
func TestDeviceBeyondCount(t *testing.T) {
	t.Setenv("FAKECUDA_DEVICES", "3")
	l := open(t, "default")
	cu := l.CUDA()
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Alloc":     func() error { _, err := cu.Alloc(7, nccl.Float32, 8); return err },
		"NewStream": func() error { _, err := cu.NewStream(3, nccl.StreamNonBlocking); return err },
		"InitRank": func() error {
			_, err := l.InitRank(context.Background(), 5, id, 1, 0, nil)
			return err
		},
	} {
		err := call()
		if !errors.Is(err, nccl.ErrInvalidArgument) || !errors.Is(err, nccl.ErrCUDA) || !strings.Contains(err.Error(), "this process sees 3 CUDA devices") {
			t.Errorf("%s on a device past the 3 there are: %v", name, err)
		}
	}
}

// TestInitAllDevices: InitAll refuses what ncclCommInitAll refuses, on both
// its paths (blocking: ncclCommInitAll; non-blocking: grouped inits): a device
// past the count (ErrInvalidArgument) and a device twice (ErrInvalidUsage),
// unless NCCL_MULTI_RANK_GPU_ENABLE=1 on NCCL 2.30 lets ranks share a GPU.
// Before, the blocking path handed back a communicator on device 4 of 4.
func TestInitAllDevices(t *testing.T) {
	t.Setenv("FAKECUDA_DEVICES", "4")
	t.Setenv("NCCL_MULTI_RANK_GPU_ENABLE", "")
	for _, variant := range []string{"default", "v230"} {
		l := open(t, variant)
		for _, ctx := range []context.Context{context.Background(), nonBlockingCtx(t)} {
			mode := map[bool]string{true: "blocking", false: "non-blocking"}[ctx.Done() == nil]
			if _, err := l.InitAll(ctx, []int{0, 4}, modeOf(ctx, nil)); !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "sees 4 CUDA devices") {
				t.Errorf("%s, %s: InitAll on devices 0 and 4 of 4: %v", variant, mode, err)
			}
			if _, err := l.InitAll(ctx, []int{1, 1}, modeOf(ctx, nil)); !errors.Is(err, nccl.ErrInvalidUsage) || !strings.Contains(err.Error(), "listed twice") {
				t.Errorf("%s, %s: InitAll on device 1 twice: %v", variant, mode, err)
			}
		}
	}
	t.Setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1")
	l := open(t, "v230")
	comms, err := l.InitAll(context.Background(), []int{1, 1}, nil)
	if err != nil {
		t.Fatalf("InitAll on device 1 twice with NCCL_MULTI_RANK_GPU_ENABLE=1 on 2.30: %v", err)
	}
	for _, c := range comms {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if _, err := open(t, "default").InitAll(context.Background(), []int{1, 1}, nil); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Errorf("device 1 twice on 2.28, where NCCL_MULTI_RANK_GPU_ENABLE does not exist: %v", err)
	}
}
