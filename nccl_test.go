package nccl_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
)

// open loads a fake NCCL variant with the fake CUDA runtime.
func open(t testing.TB, variant string, opts ...nccl.Option) *nccl.Library {
	t.Helper()
	opts = append([]nccl.Option{nccl.WithLibrary(nccl.FakeNCCL(t, variant)), nccl.WithCUDARuntime(nccl.FakeCUDART(t))}, opts...)
	l, err := nccl.Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// rank is one rank's communicator, stream and device.
type rank struct {
	comm *nccl.Comm
	s    nccl.Stream
	dev  int
}

// initRanks makes an n-rank communicator, one goroutine per rank on device r%8,
// the id passed by value to each.
func initRanks(t testing.TB, l *nccl.Library, n int) []rank {
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
			dev := r % 8
			c, err := l.InitRank(dev, id, n, r)
			if err != nil {
				errs[r] = err
				return
			}
			s, err := l.CUDA().StreamCreate(dev, abi.StreamNonBlocking)
			ranks[r] = rank{comm: c, s: s, dev: dev}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if ranks[r].comm.Rank() != r || ranks[r].comm.Count() != n || ranks[r].comm.Device() != r%8 {
			t.Fatalf("rank %d: comm says rank %d of %d on device %d", r, ranks[r].comm.Rank(), ranks[r].comm.Count(), ranks[r].comm.Device())
		}
	}
	t.Cleanup(func() {
		for _, rk := range ranks {
			rk.comm.Destroy()
			l.CUDA().StreamDestroy(rk.s)
		}
	})
	return ranks
}

// codec turns reference values (float64) into a data type's bytes and back.
// Reference values are small integers, so every partial result is exact and the
// order of reduction cannot matter; integers wrap in the type's width.
type codec struct {
	dt abi.DataType
}

func (c codec) put(b []byte, v float64) {
	switch c.dt {
	case abi.Int8, abi.Uint8:
		b[0] = byte(int64(v))
	case abi.Int32, abi.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(int64(v)))
	case abi.Int64, abi.Uint64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case abi.Float16:
		binary.LittleEndian.PutUint16(b, uint16(collectives.Float16From(v)))
	case abi.Bfloat16:
		binary.LittleEndian.PutUint16(b, uint16(collectives.BFloat16From(v)))
	case abi.Float8e4m3:
		b[0] = byte(collectives.Float8E4M3From(v))
	case abi.Float8e5m2:
		b[0] = byte(collectives.Float8E5M2From(v))
	case abi.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case abi.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	default:
		panic(c.dt)
	}
}

func (c codec) get(b []byte) float64 {
	switch c.dt {
	case abi.Int8:
		return float64(int8(b[0]))
	case abi.Uint8:
		return float64(b[0])
	case abi.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case abi.Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case abi.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case abi.Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case abi.Float16:
		return collectives.Float16(binary.LittleEndian.Uint16(b)).Float64()
	case abi.Bfloat16:
		return collectives.BFloat16(binary.LittleEndian.Uint16(b)).Float64()
	case abi.Float8e4m3:
		return collectives.Float8E4M3(b[0]).Float64()
	case abi.Float8e5m2:
		return collectives.Float8E5M2(b[0]).Float64()
	case abi.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case abi.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	panic(c.dt)
}

// round is what the type stores for v.
func (c codec) round(v float64) float64 {
	b := make([]byte, 8)
	c.put(b, v)
	return c.get(b)
}

func (c codec) isFloat() bool {
	switch c.dt {
	case abi.Float16, abi.Bfloat16, abi.Float8e4m3, abi.Float8e5m2, abi.Float32, abi.Float64:
		return true
	}
	return false
}

func (c codec) unsigned() bool {
	return c.dt == abi.Uint8 || c.dt == abi.Uint32 || c.dt == abi.Uint64
}

// random draws a value for op: small enough that every sum of 8 and every
// product is exact in the type (fp8 e5m2 holds integers to 8 exactly, e4m3 to 16).
func (c codec) random(rng *rand.Rand, op string) float64 {
	if op == "prod" {
		v := float64(1 + rng.IntN(2))
		if !c.unsigned() && rng.IntN(4) == 0 {
			v = -v
		}
		return v
	}
	lo, hi := -3, 3
	switch {
	case c.unsigned():
		lo = 0
	case c.dt == abi.Float8e5m2:
		lo, hi = 0, 1
	case c.dt == abi.Float8e4m3:
		lo, hi = 0, 2
	}
	return float64(lo + rng.IntN(hi-lo+1))
}

// reduce combines the ranks' values the way op defines.
func (c codec) reduce(op string, vals []float64) float64 {
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case "sum", "avg":
			acc += v
		case "premul":
			acc += v // scaled below
		case "prod":
			acc *= v
		case "max":
			acc = math.Max(acc, v)
		case "min":
			acc = math.Min(acc, v)
		}
	}
	switch op {
	case "premul":
		acc = 0
		for _, v := range vals {
			acc += c.round(2 * v)
		}
	case "avg":
		n := float64(len(vals))
		if c.isFloat() {
			acc /= n
		} else {
			acc = math.Trunc(c.round(acc) / n)
		}
	}
	return c.round(acc)
}

var ops = map[string]abi.RedOp{"sum": abi.Sum, "prod": abi.Prod, "max": abi.Max, "min": abi.Min, "avg": abi.Avg}

// buffers are one rank's device buffers.
type buffers struct {
	send, recv nccl.DevicePtr
}

// collCase is one collective: sizes of the buffers per rank (in elements), how to
// run it, and the expected receive buffer computed from every rank's input.
type collCase struct {
	name      string
	sendElems func(n int) int
	recvElems func(n int) int
	// inPlace gives the send pointer inside recv (element offset) for the in-place
	// form, or -1 when the operation has no in-place form for this rank.
	inPlace func(rank, n int) int
	run     func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error
	// want returns the expected recv of rank r, or nil where recv is undefined.
	want func(c codec, op string, r, n int, in [][]float64, recv0 []float64) []float64
}

const count = 97 // odd, so no operation works by accident on aligned halves

func collCases(root int) []collCase {
	per := func(k int) func(int) int { return func(n int) int { return k } }
	times := func(k int) func(int) int { return func(n int) int { return k * n } }
	return []collCase{
		{"AllReduce", per(count), per(count), func(r, n int) int { return 0 },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.AllReduce(b.send, b.recv, count, dt, op, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, _ []float64) []float64 {
				return elementwise(count, func(i int) float64 { return c.reduce(op, column(in, i)) })
			}},
		{"Reduce", per(count), per(count), func(r, n int) int { return 0 },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.Reduce(b.send, b.recv, count, dt, op, root, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, recv0 []float64) []float64 {
				if r != root%n {
					return nil
				}
				return elementwise(count, func(i int) float64 { return c.reduce(op, column(in, i)) })
			}},
		{"ReduceScatter", times(count), per(count), func(r, n int) int { return -1 },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.ReduceScatter(b.send, b.recv, count, dt, op, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, _ []float64) []float64 {
				return elementwise(count, func(i int) float64 { return c.reduce(op, column(in, r*count+i)) })
			}},
		{"Broadcast", per(count), per(count), func(r, n int) int { return 0 },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.Broadcast(b.send, b.recv, count, dt, root, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, _ []float64) []float64 {
				return in[root%n]
			}},
		{"AllGather", per(count), times(count), func(r, n int) int { return r * count },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.AllGather(b.send, b.recv, count, dt, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, _ []float64) []float64 {
				var out []float64
				for p := range n {
					out = append(out, in[p]...)
				}
				return out
			}},
		{"AlltoAll", times(count), times(count), func(r, n int) int { return -1 },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.AlltoAll(b.send, b.recv, count, dt, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, _ []float64) []float64 {
				var out []float64
				for p := range n {
					out = append(out, in[p][r*count:(r+1)*count]...)
				}
				return out
			}},
		{"Gather", per(count), times(count), func(r, n int) int { return r * count },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.Gather(b.send, b.recv, count, dt, root, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, recv0 []float64) []float64 {
				if r != root%n {
					return nil
				}
				var out []float64
				for p := range n {
					out = append(out, in[p]...)
				}
				return out
			}},
		{"Scatter", times(count), per(count), func(r, n int) int { return -1 },
			func(rk rank, b buffers, dt abi.DataType, op abi.RedOp) error {
				return rk.comm.Scatter(b.send, b.recv, count, dt, root, rk.s)
			},
			func(c codec, op string, r, n int, in [][]float64, _ []float64) []float64 {
				return in[root%n][r*count : (r+1)*count]
			}},
	}
}

func elementwise(n int, f func(int) float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func column(in [][]float64, i int) []float64 {
	out := make([]float64, len(in))
	for r := range in {
		out[r] = in[r][i]
	}
	return out
}

func allTypes(l *nccl.Library) []abi.DataType {
	var out []abi.DataType
	for dt := abi.Int8; dt <= abi.Float8e5m2; dt++ {
		if l.SupportsType(dt) {
			out = append(out, dt)
		}
	}
	return out
}

// runCollective runs one case on every rank and checks every element.
func runCollective(t *testing.T, l *nccl.Library, ranks []rank, cc collCase, c codec, opName string, inPlace bool, rng *rand.Rand) {
	t.Helper()
	cu := l.CUDA()
	n := len(ranks)
	sz := c.dt.Size()
	in := make([][]float64, n)
	recv0 := make([][]float64, n)
	bufs := make([]buffers, n)
	var free []nccl.DevicePtr
	defer func() {
		for _, p := range free {
			cu.Free(p)
		}
	}()
	// Every rank's input, in rank order from rng: a process holding only some of
	// the ranks draws the same numbers and so knows every input.
	for r := range ranks {
		sn, rn := cc.sendElems(n), cc.recvElems(n)
		// recv starts with values no result has, so stale data shows.
		recv0[r] = elementwise(rn, func(int) float64 { return c.round(7) })
		in[r] = elementwise(sn, func(int) float64 { return c.round(c.random(rng, opName)) })
		if inPlace {
			off := cc.inPlace(r, n)
			if off < 0 {
				t.Fatalf("%s has no in-place form", cc.name)
			}
			copy(recv0[r][off:], in[r])
		}
	}
	for r, rk := range ranks {
		if rk.comm == nil {
			continue // another process's rank
		}
		sn, rn := cc.sendElems(n), cc.recvElems(n)
		recv, err := cu.Malloc(rk.dev, rn*sz)
		if err != nil {
			t.Fatal(err)
		}
		free = append(free, recv)
		send := recv
		if inPlace {
			send = recv + nccl.DevicePtr(cc.inPlace(r, n)*sz)
		} else {
			if send, err = cu.Malloc(rk.dev, sn*sz); err != nil {
				t.Fatal(err)
			}
			free = append(free, send)
		}
		host := make([]byte, rn*sz)
		for i, v := range recv0[r] {
			c.put(host[i*sz:], v)
		}
		if err := cu.CopyToDevice(recv, host); err != nil {
			t.Fatal(err)
		}
		host = make([]byte, sn*sz)
		for i, v := range in[r] {
			c.put(host[i*sz:], v)
		}
		if err := cu.CopyToDevice(send, host); err != nil {
			t.Fatal(err)
		}
		bufs[r] = buffers{send: send, recv: recv}
	}

	op := ops[opName]
	var premul []abi.RedOp
	if opName == "premul" {
		premul = make([]abi.RedOp, n)
		scalar := make([]byte, sz)
		c.put(scalar, 2)
		for r, rk := range ranks {
			if rk.comm == nil {
				continue
			}
			var err error
			if premul[r], err = rk.comm.CreatePreMulSum(scalar, c.dt); err != nil {
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
			if errs[r] = cc.run(rk, bufs[r], c.dt, o); errs[r] == nil {
				errs[r] = cu.StreamSynchronize(rk.s)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s rank %d: %v", cc.name, r, err)
		}
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
		want := cc.want(c, opName, r, n, in, recv0[r])
		if want == nil {
			continue
		}
		host := make([]byte, len(want)*sz)
		if err := cu.CopyFromDevice(host, bufs[r].recv); err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if got := c.get(host[i*sz:]); got != w && !(math.IsNaN(got) && math.IsNaN(w)) {
				t.Fatalf("%s %v %s in-place=%v, %d ranks: rank %d element %d = %v, want %v",
					cc.name, c.dt, opName, inPlace, n, r, i, got, w)
			}
		}
		checked.cases.Add(1)
		checked.elements.Add(int64(len(want)))
	}
}

// checked counts what runCollective verified, for the GPU report.
var checked struct{ cases, elements atomic.Int64 }

// TestCollectives runs every collective, data type, reduction and in-place form
// on the fake NCCL with 1, 2, 3, 4 and 8 ranks as goroutines.
func TestCollectives(t *testing.T) {
	for _, variant := range []string{"default", "old"} {
		l := open(t, variant)
		for _, n := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/%dranks", variant, n), func(t *testing.T) {
				ranks := initRanks(t, l, n)
				runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 42)))
			})
		}
	}
}

// runAllCases runs every case the library has with every type and reduction.
func runAllCases(t *testing.T, l *nccl.Library, ranks []rank, rng *rand.Rand) {
	n := len(ranks)
	for _, cc := range collCases(n - 1) {
		if !l.Has("nccl" + cc.name) {
			continue // AlltoAll, Gather, Scatter before 2.28: see the fallbacks in collectives
		}
		reduces := strings.Contains(cc.name, "Reduce")
		for _, dt := range allTypes(l) {
			c := codec{dt}
			opNames := []string{""}
			if reduces {
				opNames = []string{"sum", "prod", "max", "min", "avg", "premul"}
			}
			for _, opName := range opNames {
				runCollective(t, l, ranks, cc, c, opName, false, rng)
				if cc.inPlace(0, n) >= 0 {
					runCollective(t, l, ranks, cc, c, opName, true, rng)
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
		send := make([]nccl.DevicePtr, n)
		recv := make([]nccl.DevicePtr, n)
		for r, rk := range ranks {
			send[r], _ = cu.Malloc(rk.dev, elems*4)
			recv[r], _ = cu.Malloc(rk.dev, elems*4)
			host := make([]byte, elems*4)
			for i := range elems {
				binary.LittleEndian.PutUint32(host[i*4:], uint32(r*1_000_000+i))
			}
			cu.CopyToDevice(send[r], host)
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
						if err := rk.comm.Send(send[r], elems, abi.Uint32, next, rk.s); err != nil {
							return err
						}
						runtime.Gosched()
						return rk.comm.Recv(recv[r], elems, abi.Uint32, prev, rk.s)
					})
					if errs[r] == nil {
						errs[r] = cu.StreamSynchronize(rk.s)
					}
				}()
			}
			wg.Wait()
			for r := range ranks {
				if errs[r] != nil {
					t.Fatalf("%d ranks, iteration %d, rank %d: %v", n, iter, r, errs[r])
				}
				host := make([]byte, elems*4)
				cu.CopyFromDevice(host, recv[r])
				prev := (r + n - 1) % n
				for i := range elems {
					if got := binary.LittleEndian.Uint32(host[i*4:]); got != uint32(prev*1_000_000+i) {
						t.Fatalf("%d ranks: rank %d element %d = %d, want %d", n, r, i, got, prev*1_000_000+i)
					}
				}
			}
		}
		for r := range ranks {
			cu.Free(send[r])
			cu.Free(recv[r])
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
	if l.Version() != abi.V(2, 14, 3) {
		t.Fatalf("version %v", l.Version())
	}
	ranks := initRanks(t, l, 2)
	var wg sync.WaitGroup
	for _, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rk.comm.Split(0, 0, nil)
			if !errors.Is(err, nccl.ErrNotSupported) {
				t.Errorf("Split on 2.14: %v, want ErrNotSupported", err)
				return
			}
			want := "ncclCommSplit not supported by " + l.Path + " (2.14.3; requires >= 2.18)"
			if err.Error() != want {
				t.Errorf("error text %q\nwant %q", err, want)
			}
		}()
	}
	wg.Wait()
	if _, err := l.MemAlloc(0, 64); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("MemAlloc on 2.14: %v", err)
	}
	if l.SupportsType(abi.Float8e4m3) || !l.SupportsType(abi.Bfloat16) {
		t.Errorf("2.14 type support wrong")
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
		if _, err := nccl.ParseUniqueID(bad); err == nil {
			t.Errorf("ParseUniqueID(%q) accepted", bad)
		}
	}
	if err := id2.UnmarshalBinary(bin[:100]); err == nil {
		t.Error("short binary id accepted")
	}
}

// TestIDReachesCIntact corrupts one byte at a time: the fake checks all 128 bytes,
// so an id mangled by the by-value passing would fail every InitRank.
func TestIDReachesCIntact(t *testing.T) {
	l := open(t, "default")
	initRanks(t, l, 2) // the intact id works (checked inside)
	for _, pos := range []int{0, 8, 63, 64, 127} {
		id, _ := l.GetUniqueID()
		id.Internal[pos] ^= 0x5a
		_, err := l.InitRank(0, id, 1, 0)
		if !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "corrupt unique id") {
			t.Fatalf("corrupt byte %d: %v", pos, err)
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

func TestClosedCommunicator(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	for _, how := range []string{"Destroy", "Abort"} {
		id, _ := l.GetUniqueID()
		c, err := l.InitRank(0, id, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf, _ := cu.Malloc(0, 64)
		if how == "Destroy" {
			err = c.Destroy()
		} else {
			err = c.Abort()
		}
		if err != nil {
			t.Fatal(err)
		}
		checks := map[string]error{
			"AllReduce":  c.AllReduce(buf, buf, 4, abi.Float32, abi.Sum, 0),
			"Send":       c.Send(buf, 4, abi.Float32, 0, 0),
			"AsyncError": c.AsyncError(),
			"Destroy":    c.Destroy(),
			"Abort":      c.Abort(),
			"Finalize":   c.Finalize(),
		}
		_, checks["Split"] = c.Split(0, 0, nil)
		_, checks["Register"] = c.Register(buf, 64)
		for name, err := range checks {
			if !errors.Is(err, nccl.ErrClosed) {
				t.Errorf("%s after %s: %v, want ErrClosed", name, how, err)
			}
		}
		cu.Free(buf)
	}
}

func TestArgumentErrors(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := initRanks(t, l, 2)
	c := ranks[0].comm
	mine, _ := cu.Malloc(ranks[0].dev, 1024)
	other, _ := cu.Malloc(ranks[1].dev, 1024)
	defer cu.Free(mine)
	defer cu.Free(other)
	for _, tc := range []struct {
		name string
		err  error
		text string
	}{
		{"bad type", c.AllReduce(mine, mine, 4, abi.DataType(42), abi.Sum, ranks[0].s), "42"},
		{"bad op", c.AllReduce(mine, mine, 4, abi.Float32, abi.RedOp(99), ranks[0].s), "op"},
		{"null buffer", c.AllReduce(0, mine, 4, abi.Float32, abi.Sum, ranks[0].s), ""},
		{"other device", c.AllReduce(other, mine, 4, abi.Float32, abi.Sum, ranks[0].s), "device"},
		{"root out of range", c.Broadcast(mine, mine, 4, abi.Float32, 2, ranks[0].s), ""},
		{"peer out of range", c.Send(mine, 4, abi.Float32, 5, ranks[0].s), ""},
		{"negative count", c.AllReduce(mine, mine, -1, abi.Float32, abi.Sum, ranks[0].s), "negative count"},
	} {
		var ne *nccl.Error
		if !errors.Is(tc.err, nccl.ErrInvalidArgument) || !errors.As(tc.err, &ne) || ne.Msg == "" ||
			!strings.Contains(tc.err.Error(), tc.text) {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
	if _, err := l.InitRank(0, nccl.UniqueID{}, 2, 5); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("rank out of range: %v", err)
	}
}

// TestStreamsAreAsynchronous: the fake runs stream work later, on its own thread,
// so the data is only there after a synchronize.
func TestStreamsAreAsynchronous(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := initRanks(t, l, 1)
	rk := ranks[0]
	buf, _ := cu.Malloc(rk.dev, 4)
	defer cu.Free(buf)
	cu.Memset(buf, 0, 4)
	if err := cu.MemsetAsync(buf, 0xff, 4, rk.s); err != nil {
		t.Fatal(err)
	}
	if done, err := cu.StreamQuery(rk.s); err != nil || done {
		t.Fatalf("StreamQuery right after enqueue = %v, %v; want pending", done, err)
	}
	start, _ := cu.EventCreate(rk.dev, abi.EventDefault)
	end, _ := cu.EventCreate(rk.dev, abi.EventDefault)
	cu.EventRecord(start, rk.s)
	cu.EventRecord(end, rk.s)
	if err := cu.EventSynchronize(end); err != nil {
		t.Fatal(err)
	}
	if done, err := cu.StreamQuery(rk.s); err != nil || !done {
		t.Fatalf("StreamQuery after the last event = %v, %v", done, err)
	}
	if d, err := cu.EventElapsed(start, end); err != nil || d < 0 {
		t.Fatalf("EventElapsed = %v, %v", d, err)
	}
	host := make([]byte, 4)
	cu.CopyFromDevice(host, buf)
	if binary.LittleEndian.Uint32(host) != 0xffffffff {
		t.Fatalf("data after synchronize: %x", host)
	}
	cu.EventDestroy(start)
	cu.EventDestroy(end)
}

func TestRawCallAllocatesNothing(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	ranks := initRanks(t, l, 1)
	rk := ranks[0]
	buf, _ := cu.Malloc(rk.dev, 1024)
	defer cu.Free(buf)
	allocs := testing.AllocsPerRun(200, func() {
		if err := rk.comm.AllReduce(buf, buf, 16, abi.Float32, abi.Sum, rk.s); err != nil {
			t.Fatal(err)
		}
	})
	cu.StreamSynchronize(rk.s)
	if allocs != 0 {
		t.Fatalf("AllReduce allocates %v times per call", allocs)
	}
}

func BenchmarkAllReduceCall(b *testing.B) {
	l := open(b, "default")
	cu := l.CUDA()
	ranks := initRanks(b, l, 1)
	rk := ranks[0]
	buf, _ := cu.Malloc(rk.dev, 1024)
	defer cu.Free(buf)
	b.ReportAllocs()
	for b.Loop() {
		rk.comm.AllReduce(buf, buf, 0, abi.Float32, abi.Sum, rk.s)
	}
	cu.StreamSynchronize(rk.s)
}
