package nccl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
)

// preMulSum makes the op "sum of v × x" for dt's Go type, with the scalar read
// from the host.
func preMulSum(c *nccl.Comm, dt nccl.DataType, v float64) (nccl.RedOp, error) {
	switch dt {
	case nccl.Int8:
		return nccl.PreMulSum(c, int8(v))
	case nccl.Uint8:
		return nccl.PreMulSum(c, uint8(v))
	case nccl.Int32:
		return nccl.PreMulSum(c, int32(v))
	case nccl.Uint32:
		return nccl.PreMulSum(c, uint32(v))
	case nccl.Int64:
		return nccl.PreMulSum(c, int64(v))
	case nccl.Uint64:
		return nccl.PreMulSum(c, uint64(v))
	case nccl.Float16:
		return nccl.PreMulSum(c, nccl.F16From(v))
	case nccl.Bfloat16:
		return nccl.PreMulSum(c, nccl.BF16From(v))
	case nccl.Float8e4m3:
		return nccl.PreMulSum(c, nccl.F8E4M3From(v))
	case nccl.Float8e5m2:
		return nccl.PreMulSum(c, nccl.F8E5M2From(v))
	case nccl.Float32:
		return nccl.PreMulSum(c, float32(v))
	case nccl.Float64:
		return nccl.PreMulSum(c, v)
	}
	panic(dt)
}

// reduction is one of the reductions the collective cases run: a built-in op,
// or a PreMulSum by premulScalar.
type reduction struct {
	name   string
	op     nccl.RedOp // built-in; unused for PreMulSum
	premul bool
}

const premulScalar = 2

var reductions = []reduction{{"sum", nccl.Sum, false}, {"prod", nccl.Prod, false}, {"max", nccl.Max, false},
	{"min", nccl.Min, false}, {"avg", nccl.Avg, false}, {"premul", 0, true}}

// randomOp is the op Random draws inputs for: PreMulSum counts as not built in.
func (red reduction) randomOp() nccl.RedOp {
	if red.premul {
		return nccl.RedOp(5)
	}
	return red.op
}

// reference is the reduction of every rank's input, from package collectives.
func (red reduction) reference(dt nccl.DataType, in [][]byte) []byte {
	if red.premul {
		return collectives.PreMulSum(dt, premulScalar, in)
	}
	return collectives.Reduce(dt, red.op, in)
}

// collCase is one collective: sizes of the buffers per rank (in elements), how to
// run it, and the expected receive buffer computed from every rank's input.
type collCase struct {
	name      string
	reduces   bool
	sendElems func(n int) int
	recvElems func(n int) int
	// inPlace gives send's offset inside recv (in elements) for the in-place
	// form, or -1 when the operation has no in-place form for this rank.
	inPlace func(rank, n int) int
	run     func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error
	// want is rank r's expected recv, from package collectives, or nil where recv
	// is undefined; reduced is the reduction of every rank's input.
	want func(r, n int, in [][]byte, reduced func() []byte) []byte
}

const count = 97 // odd, so no operation works by accident on aligned halves

func collCases(root int) []collCase {
	per := func(k int) func(int) int { return func(n int) int { return k } }
	times := func(k int) func(int) int { return func(n int) int { return k * n } }
	return []collCase{
		{"AllReduce", true, per(count), per(count), func(r, n int) int { return 0 },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.AllReduce(send, recv, op, rk.s)
			},
			func(r, n int, in [][]byte, reduced func() []byte) []byte { return reduced() }},
		{"Reduce", true, per(count), per(count), func(r, n int) int { return 0 },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.Reduce(send, recv, op, root, rk.s)
			},
			func(r, n int, in [][]byte, reduced func() []byte) []byte {
				if r != root%n {
					return nil
				}
				return reduced()
			}},
		{"ReduceScatter", true, times(count), per(count), func(r, n int) int { return -1 },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.ReduceScatter(send, recv, op, rk.s)
			},
			func(r, n int, in [][]byte, reduced func() []byte) []byte {
				return collectives.Blocks(reduced(), n)[r]
			}},
		{"Broadcast", false, per(count), per(count), func(r, n int) int { return 0 },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.Broadcast(send, recv, root, rk.s)
			},
			func(r, n int, in [][]byte, _ func() []byte) []byte { return in[root%n] }},
		{"AllGather", false, per(count), times(count), func(r, n int) int { return r * count },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.AllGather(send, recv, rk.s)
			},
			func(r, n int, in [][]byte, _ func() []byte) []byte { return collectives.AllGather(in) }},
		{"AlltoAll", false, times(count), times(count), func(r, n int) int { return -1 },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.AlltoAll(send, recv, rk.s)
			},
			func(r, n int, in [][]byte, _ func() []byte) []byte { return collectives.AlltoAll(in)[r] }},
		{"Gather", false, per(count), times(count), func(r, n int) int { return r * count },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.Gather(send, recv, root, rk.s)
			},
			func(r, n int, in [][]byte, _ func() []byte) []byte {
				if r != root%n {
					return nil
				}
				return collectives.AllGather(in)
			}},
		{"Scatter", false, times(count), per(count), func(r, n int) int { return -1 },
			func(rk rank, send, recv nccl.Buffer, op nccl.RedOp) error {
				return rk.comm.Scatter(send, recv, root, rk.s)
			},
			func(r, n int, in [][]byte, _ func() []byte) []byte { return collectives.Blocks(in[root%n], n)[r] }},
	}
}

// repeat is n elements of v in dt.
func repeat(dt nccl.DataType, n int, v float64) []byte {
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = v
	}
	return collectives.Encode(dt, vals)
}

func allTypes(l *nccl.Library) []nccl.DataType {
	var out []nccl.DataType
	for dt := nccl.Int8; dt <= nccl.Float8e5m2; dt++ {
		if l.SupportsType(dt) {
			out = append(out, dt)
		}
	}
	return out
}

// runCollective runs one case on every rank and checks every element against
// package collectives' reference.
func runCollective(t *testing.T, l *nccl.Library, ranks []rank, cc collCase, dt nccl.DataType, red reduction, inPlace bool, rng *rand.Rand) {
	t.Helper()
	cu := l.CUDA()
	n := len(ranks)
	sz := dt.Size()
	in := make([][]byte, n)
	recv0 := make([][]byte, n)
	sends := make([]nccl.Buffer, n)
	recvs := make([]nccl.Buffer, n)
	var free []nccl.Buffer
	defer func() {
		for _, b := range free {
			b.Free()
		}
	}()
	// Every rank's input, in rank order from rng: a process holding only some of
	// the ranks draws the same numbers and so knows every input.
	for r := range ranks {
		sn, rn := cc.sendElems(n), cc.recvElems(n)
		// recv starts with values no result has, so stale data shows.
		recv0[r] = repeat(dt, rn, 7)
		vals := make([]float64, sn)
		for i := range vals {
			vals[i] = collectives.Random(rng, dt, red.randomOp())
		}
		in[r] = collectives.Encode(dt, vals)
		if inPlace {
			off := cc.inPlace(r, n)
			if off < 0 {
				t.Fatalf("%s has no in-place form", cc.name)
			}
			copy(recv0[r][off*sz:], in[r])
		}
	}
	for r, rk := range ranks {
		if rk.comm == nil {
			continue // another process's rank
		}
		sn, rn := cc.sendElems(n), cc.recvElems(n)
		recv, err := cu.Alloc(rk.dev, dt, rn)
		if err != nil {
			t.Fatal(err)
		}
		free = append(free, recv)
		send := recv
		if inPlace {
			off := cc.inPlace(r, n)
			send = recv.Slice(off, off+sn)
		} else {
			if send, err = cu.Alloc(rk.dev, dt, sn); err != nil {
				t.Fatal(err)
			}
			free = append(free, send)
		}
		if err := recv.WriteBytes(recv0[r]); err != nil {
			t.Fatal(err)
		}
		if err := send.WriteBytes(in[r]); err != nil {
			t.Fatal(err)
		}
		sends[r], recvs[r] = send, recv
	}

	op := red.op
	var premul []nccl.RedOp
	if red.premul {
		premul = make([]nccl.RedOp, n)
		for r, rk := range ranks {
			if rk.comm == nil {
				continue
			}
			var err error
			if premul[r], err = preMulSum(rk.comm, dt, premulScalar); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, rk := range ranks {
		if rk.comm == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := op
			if premul != nil {
				o = premul[r]
			}
			if errs[r] = cc.run(rk, sends[r], recvs[r], o); errs[r] == nil {
				errs[r] = rk.s.Synchronize()
			}
		}()
	}
	wg.Wait()
	if oneRankFP8PreMul(n, cc, dt, red) {
		// NCCL runs a one-rank PreMulSum (and Avg of a float, which becomes
		// one) with a kernel whose fp8 cases are compiled out of its host
		// code: it refuses them, 2.24 to 2.30 alike (seen on 2.28.3 and
		// VCCL 2.29.2 on an H200), and a refusal inside NCCL leaves a
		// non-blocking communicator in error. gonccl refuses fp8 PreMulSum
		// on one rank itself, typed, leaving the communicator usable (Avg
		// it runs as the Sum it equals there).
		for r, err := range errs {
			if ranks[r].comm != nil && !errors.Is(err, nccl.ErrInvalidArgument) {
				t.Fatalf("%s %v %s on one rank: %v; want NCCL's refusal (ErrInvalidArgument)", cc.name, dt, red.name, err)
			}
		}
		for r, rk := range ranks {
			if rk.comm != nil && premul != nil {
				if err := rk.comm.DestroyRedOp(premul[r]); err != nil {
					t.Fatal(err)
				}
			}
		}
		return
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s rank %d: %v", cc.name, r, err)
		}
	}
	var reducedOnce []byte
	reduced := func() []byte {
		if reducedOnce == nil {
			reducedOnce = red.reference(dt, in)
		}
		return reducedOnce
	}
	for r, rk := range ranks {
		if rk.comm == nil {
			continue
		}
		if premul != nil {
			if err := rk.comm.DestroyRedOp(premul[r]); err != nil {
				t.Fatal(err)
			}
		}
		want := cc.want(r, n, in, reduced)
		if want == nil {
			continue
		}
		if len(want) != recvs[r].Size() {
			t.Fatalf("%s: reference of %d bytes for a receive buffer of %d", cc.name, len(want), recvs[r].Size())
		}
		got := make([]byte, len(want))
		if err := recvs[r].ReadBytes(got); err != nil {
			t.Fatal(err)
		}
		if i := collectives.Mismatch(dt, got, want); i >= 0 {
			t.Fatalf("%s %v %s in-place=%v, %d ranks: rank %d element %d = %v, want %v",
				cc.name, dt, red.name, inPlace, n, r, i,
				collectives.Decode(dt, got[i*sz:(i+1)*sz])[0], collectives.Decode(dt, want[i*sz:(i+1)*sz])[0])
		}
		checked.cases.Add(1)
		checked.elements.Add(int64(len(want) / sz))
	}
}

// oneRankFP8PreMul is whether the case is refused: a reduction of an fp8
// type with PreMulSum on a communicator of one rank.
func oneRankFP8PreMul(n int, cc collCase, dt nccl.DataType, red reduction) bool {
	return n == 1 && cc.reduces && (dt == nccl.Float8e4m3 || dt == nccl.Float8e5m2) && red.premul
}

// checked counts what runCollective verified, for the GPU report.
var checked struct{ cases, elements atomic.Int64 }

// TestCollectives runs every collective, data type, reduction and in-place form
// on the fake NCCL with 1, 2, 3, 4 and 8 ranks as goroutines, from blocking
// communicators, and from non-blocking ones on 3 ranks.
func TestCollectives(t *testing.T) {
	for _, variant := range []string{"default", "old"} {
		l := open(t, variant)
		for _, n := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/%dranks", variant, n), func(t *testing.T) {
				ranks := initRanks(t, l, n)
				runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 42)))
			})
		}
		t.Run(variant+"/3ranks-nonblocking", func(t *testing.T) {
			ranks := initRanksCtx(t, l, 3, nonBlockingCtx(t))
			runAllCases(t, l, ranks, rand.New(rand.NewPCG(3, 43)))
		})
	}
}

// runAllCases runs every case with every type and reduction the library has.
// AlltoAll, Gather and Scatter run natively where the library has them and as
// grouped Send/Recv otherwise (TestNativeAndGrouped runs both on one library).
func runAllCases(t *testing.T, l *nccl.Library, ranks []rank, rng *rand.Rand) {
	n := len(ranks)
	for _, cc := range collCases(n - 1) {
		for _, dt := range allTypes(l) {
			reds := []reduction{{name: "none"}}
			if cc.reduces {
				reds = reductions
			}
			for _, red := range reds {
				runCollective(t, l, ranks, cc, dt, red, false, rng)
				if cc.inPlace(0, n) >= 0 {
					runCollective(t, l, ranks, cc, dt, red, true, rng)
				}
			}
		}
	}
}

// TestSendRecvRing exchanges around a ring inside groups, from goroutines the
// scheduler moves between threads: Group must keep each group on one thread.
func TestSendRecvRing(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	for _, n := range []int{1, 2, 3, 4, 8} {
		ranks := initRanks(t, l, n)
		const elems = 1000
		send := make([]nccl.Buffer, n)
		recv := make([]nccl.Buffer, n)
		for r, rk := range ranks {
			var err error
			if send[r], err = cu.Alloc(rk.dev, nccl.Uint32, elems); err != nil {
				t.Fatal(err)
			}
			if recv[r], err = cu.Alloc(rk.dev, nccl.Uint32, elems); err != nil {
				t.Fatal(err)
			}
			host := make([]uint32, elems)
			for i := range host {
				host[i] = uint32(r*1_000_000 + i)
			}
			if err := nccl.CopyIn(send[r], host); err != nil {
				t.Fatal(err)
			}
		}
		for iter := range 20 {
			var wg sync.WaitGroup
			errs := make([]error, n)
			for r, rk := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next, prev := (r+1)%n, (r+n-1)%n
					errs[r] = l.Group(func() error {
						runtime.Gosched() // invite the scheduler to move us
						if err := rk.comm.Send(send[r], next, rk.s); err != nil {
							return err
						}
						runtime.Gosched()
						return rk.comm.Recv(recv[r], prev, rk.s)
					})
					if errs[r] == nil {
						errs[r] = rk.s.Synchronize()
					}
				}()
			}
			wg.Wait()
			for r := range ranks {
				if errs[r] != nil {
					t.Fatalf("%d ranks, iteration %d, rank %d: %v", n, iter, r, errs[r])
				}
				host := make([]uint32, elems)
				if err := nccl.CopyOut(host, recv[r]); err != nil {
					t.Fatal(err)
				}
				prev := (r + n - 1) % n
				for i, got := range host {
					if got != uint32(prev*1_000_000+i) {
						t.Fatalf("%d ranks: rank %d element %d = %d, want %d", n, r, i, got, prev*1_000_000+i)
					}
				}
			}
		}
		for r := range ranks {
			send[r].Free()
			recv[r].Free()
		}
	}
}

func TestOpenReports(t *testing.T) {
	l := open(t, "default")
	if got := l.Version().String(); got != "2.28.3" {
		t.Errorf("version %s, want 2.28.3", got)
	}
	if l.Via != nccl.ViaOption || !strings.HasSuffix(l.Path, "/default/libnccl.so.2") {
		t.Errorf("loaded %s via %s", l.Path, l.Via)
	}
	present := map[string]bool{}
	for _, f := range l.Features() {
		present[f.Name] = f.Present
	}
	for name, want := range map[string]bool{"ncclCommSplit": true, "ncclAlltoAll": true, "ncclMemAlloc": true,
		"ncclCommWindowRegister": true, "ncclCommInitRankScalable": true, "ncclAlltoAllv": false} {
		if p, ok := present[name]; !ok || p != want {
			t.Errorf("feature %s present=%v (listed %v), want %v", name, p, ok, want)
		}
	}
}

func TestOldLibraryLacksOptional(t *testing.T) {
	l := open(t, "old")
	if l.Version() != (nccl.Version{Major: 2, Minor: 14, Patch: 3}) {
		t.Fatalf("version %v", l.Version())
	}
	ranks := initRanks(t, l, 2)
	var wg sync.WaitGroup
	for _, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rk.comm.Split(context.Background(), 0, 0, nil)
			if !errors.Is(err, nccl.ErrNotSupported) {
				t.Errorf("Split on 2.14: %v, want ErrNotSupported", err)
				return
			}
			want := "Split: ncclCommSplit not supported by " + l.Path + " (2.14.3; requires >= 2.18)"
			if err.Error() != want {
				t.Errorf("error text %q\nwant %q", err, want)
			}
		}()
	}
	wg.Wait()
	if _, err := l.MemAlloc(0, nccl.Uint8, 64); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("MemAlloc on 2.14: %v", err)
	}
	if l.SupportsType(nccl.Float8e4m3) || !l.SupportsType(nccl.Bfloat16) {
		t.Errorf("2.14 type support wrong")
	}
	// A native AlltoAll, Gather or Scatter is refused: 2.14 has none.
	c := ranks[0].comm
	if err := c.SetPath(nccl.Native); err != nil {
		t.Fatal(err)
	}
	defer c.SetPath(nccl.Auto)
	a, _ := l.CUDA().Alloc(0, nccl.Float32, 4)
	b, _ := l.CUDA().Alloc(0, nccl.Float32, 4)
	defer a.Free()
	defer b.Free()
	for name, err := range map[string]error{
		"AlltoAll": c.AlltoAll(a, b, ranks[0].s),
		"Gather":   c.Gather(a.Slice(0, 2), b, 0, ranks[0].s),
		"Scatter":  c.Scatter(a, b.Slice(0, 2), 0, ranks[0].s),
	} {
		if !errors.Is(err, nccl.ErrNotSupported) || !strings.Contains(err.Error(), "requires >= 2.28") {
			t.Errorf("native %s on 2.14: %v, want ErrNotSupported (requires >= 2.28)", name, err)
		}
	}
}

func TestMissingRequiredSymbol(t *testing.T) {
	_, err := nccl.Open(nccl.WithLibrary(nccl.FakeNCCL(t, "broken")), nccl.WithCUDARuntime(nccl.FakeCUDART(t)))
	var me *nccl.MissingSymbolError
	if !errors.As(err, &me) || !errors.Is(err, nccl.ErrMissingSymbol) || me.Symbol != "ncclCommInitRank" ||
		!strings.Contains(err.Error(), "/broken/libnccl.so.2") {
		t.Fatalf("Open(broken) = %v", err)
	}
}

func TestTooOld(t *testing.T) {
	_, err := nccl.Open(nccl.WithLibrary(nccl.FakeNCCL(t, "ancient")), nccl.WithCUDARuntime(nccl.FakeCUDART(t)))
	if !errors.Is(err, nccl.ErrTooOld) || !strings.Contains(err.Error(), "2.12.3") {
		t.Fatalf("Open(2.12.3) = %v", err)
	}
}

func TestUniqueIDForms(t *testing.T) {
	l := open(t, "default")
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if id == (nccl.UniqueID{}) {
		t.Fatal("empty id")
	}
	back, err := nccl.ParseUniqueID(" " + id.String() + "\n")
	if err != nil || back != id {
		t.Fatalf("text round trip: %v", err)
	}
	bin, _ := id.MarshalBinary()
	var id2 nccl.UniqueID
	if err := id2.UnmarshalBinary(bin); err != nil || id2 != id {
		t.Fatalf("binary round trip: %v", err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("zz", 128), strings.Repeat("00", 127)} {
		if _, err := nccl.ParseUniqueID(bad); !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("ParseUniqueID(%q) = %v, want an error matching ErrInvalidArgument", bad, err)
		}
	}
	if err := id2.UnmarshalBinary(bin[:100]); err == nil {
		t.Error("short binary id accepted")
	}
}

// TestIDReachesCIntact corrupts one byte at a time: the fake checks all 128 bytes,
// so an id mangled by the by-value passing would fail every InitRank, blocking
// or not.
func TestIDReachesCIntact(t *testing.T) {
	l := open(t, "default")
	initRanks(t, l, 2) // the intact id works (checked inside)
	for _, ctx := range []context.Context{context.Background(), nonBlockingCtx(t)} {
		for _, pos := range []int{0, 8, 63, 64, 127} {
			id, _ := l.GetUniqueID()
			id.Internal[pos] ^= 0x5a
			_, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil))
			if !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "corrupt unique id") {
				t.Fatalf("corrupt byte %d (can end: %v): %v", pos, ctx.Done() != nil, err)
			}
		}
	}
}

func FuzzParseUniqueID(f *testing.F) {
	f.Add(strings.Repeat("ab", 128))
	f.Add("")
	f.Add(strings.Repeat("0", 255) + "g")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := nccl.ParseUniqueID(s)
		if err != nil {
			return
		}
		if back, err := nccl.ParseUniqueID(id.String()); err != nil || back != id {
			t.Fatalf("accepted %q but its own text does not round-trip", s)
		}
	})
}

// TestClosedCommunicator: after Close or Abort, of a blocking or a
// non-blocking communicator, every method refuses with ErrClosed.
func TestClosedCommunicator(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	for _, ctx := range []context.Context{context.Background(), nonBlockingCtx(t)} {
		for _, how := range []string{"Close", "Abort"} {
			id, _ := l.GetUniqueID()
			c, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil))
			if err != nil {
				t.Fatal(err)
			}
			buf, _ := cu.Alloc(0, nccl.Float32, 16)
			if how == "Close" {
				err = c.Close(ctx)
			} else {
				err = c.Abort()
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.Done():
			default:
				t.Errorf("Done not closed after %s", how)
			}
			if c.Handle() != 0 {
				t.Errorf("Handle after %s = %#x, want 0", how, c.Handle())
			}
			checks := map[string]error{
				"AllReduce":  c.AllReduce(buf, buf, nccl.Sum, nccl.Stream{}),
				"Send":       c.Send(buf.Slice(0, 4), 0, nccl.Stream{}),
				"AsyncError": c.AsyncError(),
				"Close":      c.Close(ctx),
				"Abort":      c.Abort(),
				"Wait":       c.Wait(ctx, nccl.Stream{}),
				"SetPath+AlltoAll": func() error {
					c.SetPath(nccl.Grouped)
					return c.AlltoAll(buf.Slice(0, 4), buf.Slice(4, 8), nccl.Stream{})
				}(),
			}
			_, checks["Split"] = c.Split(ctx, 0, 0, nil)
			_, checks["Register"] = c.Register(buf)
			_, checks["PreMulSum"] = nccl.PreMulSum(c, float32(2))
			for name, err := range checks {
				if !errors.Is(err, nccl.ErrClosed) {
					t.Errorf("%s after %s (blocking %v): %v, want ErrClosed", name, how, c.Blocking(), err)
				}
			}
			buf.Free()
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := initRanks(t, l, 2)
	c, s := ranks[0].comm, ranks[0].s
	mine, _ := cu.Alloc(ranks[0].dev, nccl.Float32, 256)
	ints, _ := cu.Alloc(ranks[0].dev, nccl.Int32, 256)
	other, _ := cu.Alloc(ranks[1].dev, nccl.Float32, 256)
	defer mine.Free()
	defer ints.Free()
	defer other.Free()
	_, badType := cu.Alloc(0, nccl.DataType(42), 4)
	_, negative := cu.Alloc(0, nccl.Float32, -1)
	_, rankRange := l.InitRank(context.Background(), 0, nccl.UniqueID{}, 2, 5, nil)
	for _, tc := range []struct {
		name string
		err  error
		text string
	}{
		{"bad type", badType, "42"},
		{"bad op", c.AllReduce(mine, mine, nccl.RedOp(99), s), "op"},
		{"negative op", c.AllReduce(mine, mine, nccl.RedOp(-1), s), "reduction"},
		{"zero buffer", c.AllReduce(nccl.Buffer{}, mine, nccl.Sum, s), ""},
		{"types differ", c.AllReduce(ints, mine, nccl.Sum, s), "Int32"},
		{"lengths differ", c.AllReduce(mine.Slice(0, 4), mine, nccl.Sum, s), "elements"},
		{"other device", c.AllReduce(other, mine, nccl.Sum, s), "device"},
		{"stream on other device", c.AllReduce(mine, mine, nccl.Sum, ranks[1].s), "stream"},
		{"root out of range", c.Broadcast(mine, mine, 2, s), "root"},
		{"peer out of range", c.Send(mine, 5, s), "peer"},
		{"negative peer", c.Recv(mine, -1, s), "peer"},
		{"negative count", negative, "negative count"},
		{"rank out of range", rankRange, "rank"},
		{"unknown path", c.SetPath(nccl.Path(7)), "path"},
	} {
		var ne *nccl.Error
		if !errors.Is(tc.err, nccl.ErrInvalidArgument) || !errors.As(tc.err, &ne) || ne.Msg == "" ||
			!strings.Contains(tc.err.Error(), tc.text) {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
}

// TestStreamsAreAsynchronous: the fake runs stream work later, on its own thread,
// so the data is only there after a synchronize.
func TestStreamsAreAsynchronous(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := initRanks(t, l, 1)
	rk := ranks[0]
	buf, _ := cu.Alloc(rk.dev, nccl.Uint32, 1)
	defer buf.Free()
	if err := buf.Memset(0); err != nil {
		t.Fatal(err)
	}
	if err := buf.MemsetAsync(0xff, rk.s); err != nil {
		t.Fatal(err)
	}
	if done, err := rk.s.Query(); err != nil || done {
		t.Fatalf("Query right after enqueue = %v, %v; want pending", done, err)
	}
	start, _ := cu.NewEvent(rk.dev, nccl.EventDefault)
	end, _ := cu.NewEvent(rk.dev, nccl.EventDefault)
	start.Record(rk.s)
	end.Record(rk.s)
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := rk.s.Query(); err != nil || !done {
		t.Fatalf("Query after the last event = %v, %v", done, err)
	}
	if done, err := end.Query(); err != nil || !done {
		t.Fatalf("event Query after Synchronize = %v, %v", done, err)
	}
	if d, err := end.Elapsed(start); err != nil || d < 0 {
		t.Fatalf("Elapsed = %v, %v", d, err)
	}
	host := make([]byte, 4)
	buf.ReadBytes(host)
	if binary.LittleEndian.Uint32(host) != 0xffffffff {
		t.Fatalf("data after synchronize: %x", host)
	}
	start.Destroy()
	end.Destroy()
}

func BenchmarkAllReduceCall(b *testing.B) {
	l := open(b, "default")
	cu := l.CUDA()
	ranks := initRanks(b, l, 1)
	rk := ranks[0]
	buf, _ := cu.Alloc(rk.dev, nccl.Float32, 256)
	defer buf.Free()
	empty := buf.Slice(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		rk.comm.AllReduce(empty, empty, nccl.Sum, rk.s)
	}
	rk.s.Synchronize()
}

// BenchmarkAlltoAllCall is AllReduce's benchmark for an operation routed
// between the native and the grouped form: the routing is an index into the
// symbol table, so the two cost the same.
func BenchmarkAlltoAllCall(b *testing.B) {
	l := open(b, "default")
	cu := l.CUDA()
	ranks := initRanks(b, l, 1)
	rk := ranks[0]
	send, _ := cu.Alloc(rk.dev, nccl.Float32, 256)
	recv, _ := cu.Alloc(rk.dev, nccl.Float32, 256)
	defer send.Free()
	defer recv.Free()
	s0, r0 := send.Slice(0, 0), recv.Slice(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		rk.comm.AlltoAll(s0, r0, rk.s)
	}
	rk.s.Synchronize()
}
