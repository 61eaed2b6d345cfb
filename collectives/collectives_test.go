package collectives_test

import (
	"bytes"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
)

// Every expected value below is worked out by hand (or, for float16, by
// Python's struct.pack('<e'), which rounds to nearest even), not by the code
// under test.

var allTypes = []nccl.DataType{nccl.Int8, nccl.Uint8, nccl.Int32, nccl.Uint32, nccl.Int64, nccl.Uint64,
	nccl.Float16, nccl.Float32, nccl.Float64, nccl.Bfloat16, nccl.Float8e4m3, nccl.Float8e5m2}

func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		dt  nccl.DataType
		v   float64
		hex string  // little-endian bytes
		dec float64 // what Decode gives back
	}{
		{nccl.Int8, -1, "ff", -1},
		{nccl.Int8, 127, "7f", 127},
		{nccl.Int8, 128, "80", -128}, // wraps
		{nccl.Int8, -129, "7f", 127},
		{nccl.Int8, -2.7, "fe", -2}, // truncated toward zero
		{nccl.Uint8, -1, "ff", 255},
		{nccl.Uint8, 256, "00", 0},
		{nccl.Uint8, 300.9, "2c", 44},
		{nccl.Int32, -2, "feffffff", -2},
		{nccl.Int32, 1 << 31, "00000080", -(1 << 31)},
		{nccl.Uint32, 1<<32 + 5, "05000000", 5},
		{nccl.Uint32, -1, "ffffffff", 1<<32 - 1},
		{nccl.Int64, -1, "ffffffffffffffff", -1},
		{nccl.Int64, 1 << 63, "0000000000000080", -(1 << 63)},
		{nccl.Uint64, 1 << 63, "0000000000000080", 1 << 63},
		{nccl.Uint64, 1 << 64, "0000000000000000", 0},
		{nccl.Uint64, math.NaN(), "0000000000000000", 0},
		{nccl.Float16, 1, "003c", 1},
		{nccl.Float16, -2, "00c0", -2},
		{nccl.Float16, 0.1, "662e", 0.0999755859375},
		{nccl.Float16, 65504, "ff7b", 65504},
		{nccl.Float16, 65520, "007c", math.Inf(1)}, // past the largest finite: infinity
		{nccl.Bfloat16, 1, "803f", 1},
		{nccl.Bfloat16, 257, "8043", 256}, // tie to even
		{nccl.Bfloat16, 259, "8243", 260},
		{nccl.Float8e4m3, 1, "38", 1},
		{nccl.Float8e4m3, -0.5, "b0", -0.5},
		{nccl.Float8e4m3, 448, "7e", 448},
		{nccl.Float8e4m3, 1000, "7e", 448},          // saturates
		{nccl.Float8e4m3, math.Inf(-1), "fe", -448}, // saturates
		{nccl.Float8e5m2, 1, "3c", 1},
		{nccl.Float8e5m2, 1e6, "7b", 57344}, // saturates
		{nccl.Float32, 1, "0000803f", 1},
		{nccl.Float32, 0.1, "cdcccc3d", float64(float32(0.1))},
		{nccl.Float32, 1<<24 + 1, "0000804b", 1 << 24}, // tie to even
		{nccl.Float64, 0.1, "9a9999999999b93f", 0.1},
	} {
		b := collectives.Encode(tc.dt, []float64{tc.v})
		if got := hex.EncodeToString(b); got != tc.hex {
			t.Errorf("Encode(%v, %v) = %s, want %s", tc.dt, tc.v, got, tc.hex)
		}
		if got := collectives.Decode(tc.dt, b); len(got) != 1 || got[0] != tc.dec {
			t.Errorf("Decode(%v, %s) = %v, want %v", tc.dt, tc.hex, got, tc.dec)
		}
		if got := collectives.Round(tc.dt, tc.v); got != tc.dec {
			t.Errorf("Round(%v, %v) = %v, want %v", tc.dt, tc.v, got, tc.dec)
		}
	}
	// Several elements side by side.
	b := collectives.Encode(nccl.Int32, []float64{1, -1, 256})
	if got := hex.EncodeToString(b); got != "01000000"+"ffffffff"+"00010000" {
		t.Errorf("Encode of three int32: %s", got)
	}
	if got := collectives.Decode(nccl.Int32, b); len(got) != 3 || got[0] != 1 || got[1] != -1 || got[2] != 256 {
		t.Errorf("Decode of three int32: %v", got)
	}
	mustPanic(t, "Decode of a partial element", func() { collectives.Decode(nccl.Int32, make([]byte, 6)) })
	mustPanic(t, "Encode of an unknown type", func() { collectives.Encode(nccl.DataType(42), []float64{1}) })
}

func TestTypeClasses(t *testing.T) {
	for _, dt := range allTypes {
		s := dt.String()
		float := strings.Contains(s, "Float") || strings.Contains(s, "float")
		signed := s == "ncclInt8" || s == "ncclInt32" || s == "ncclInt64"
		if collectives.IsFloat(dt) != float || collectives.IsSigned(dt) != signed {
			t.Errorf("%v: IsFloat %v, IsSigned %v", dt, collectives.IsFloat(dt), collectives.IsSigned(dt))
		}
	}
}

// rows encodes one input per rank.
func rows(dt nccl.DataType, vals ...[]float64) [][]byte {
	out := make([][]byte, len(vals))
	for r, v := range vals {
		out[r] = collectives.Encode(dt, v)
	}
	return out
}

func v(xs ...float64) []float64 { return xs }

func TestReduce(t *testing.T) {
	for _, tc := range []struct {
		name string
		dt   nccl.DataType
		op   nccl.RedOp
		in   [][]float64
		want []float64
	}{
		// Integers wrap in the type's width.
		{"int8 sum wraps", nccl.Int8, nccl.Sum, [][]float64{v(100, -100), v(100, -100)}, v(-56, 56)},
		{"uint8 sum wraps", nccl.Uint8, nccl.Sum, [][]float64{v(200), v(100)}, v(44)},
		{"int8 prod wraps", nccl.Int8, nccl.Prod, [][]float64{v(16, -128, 3), v(16, -1, -5)}, v(0, -128, -15)},
		{"int32 sum wraps", nccl.Int32, nccl.Sum, [][]float64{v(1<<31 - 1), v(1)}, v(-(1 << 31))},
		{"int64 sum wraps", nccl.Int64, nccl.Sum, [][]float64{v(1 << 62), v(1 << 62)}, v(-(1 << 63))},
		{"uint64 prod wraps", nccl.Uint64, nccl.Prod, [][]float64{v(1<<32, 3), v(1<<32, 5)}, v(0, 15)},
		{"uint32 sum of -1", nccl.Uint32, nccl.Sum, [][]float64{v(-1), v(2)}, v(1)},
		// Comparisons as the type holds the values.
		{"int32 max signed", nccl.Int32, nccl.Max, [][]float64{v(-5, -1), v(3, -7), v(-7, -2)}, v(3, -1)},
		{"int32 min signed", nccl.Int32, nccl.Min, [][]float64{v(-5, -1), v(3, -7), v(-7, -2)}, v(-7, -7)},
		{"uint32 max unsigned", nccl.Uint32, nccl.Max, [][]float64{v(-1), v(3)}, v(1<<32 - 1)},
		{"uint8 min unsigned", nccl.Uint8, nccl.Min, [][]float64{v(-1, 7), v(3, 200)}, v(3, 7)},
		{"int64 max", nccl.Int64, nccl.Max, [][]float64{v(-(1 << 62)), v(-3)}, v(-3)},
		// Avg of integers: the wrapped sum, divided toward zero.
		{"int32 avg toward zero", nccl.Int32, nccl.Avg, [][]float64{v(-7, 7), v(0, 0)}, v(-3, 3)},
		{"int8 avg of a wrapped sum", nccl.Int8, nccl.Avg, [][]float64{v(100), v(100)}, v(-28)},
		{"uint8 avg of a wrapped sum", nccl.Uint8, nccl.Avg, [][]float64{v(255), v(255), v(255)}, v(84)},
		{"int64 avg", nccl.Int64, nccl.Avg, [][]float64{v(-5), v(-5), v(1)}, v(-3)},
		{"one rank", nccl.Int32, nccl.Avg, [][]float64{v(-9, 4)}, v(-9, 4)},
		// Floats: exact, rounded once.
		{"f16 sum tie to even", nccl.Float16, nccl.Sum, [][]float64{v(2048, 2048), v(1, 3)}, v(2048, 2052)},
		{"f16 sum rounded once", nccl.Float16, nccl.Sum, [][]float64{v(2048), v(1), v(1)}, v(2050)},
		{"f16 sum overflows", nccl.Float16, nccl.Sum, [][]float64{v(65504), v(65504)}, v(math.Inf(1))},
		{"f16 avg", nccl.Float16, nccl.Avg, [][]float64{v(1, 1), v(2, 1), v(0, 2)}, v(1, 1.3330078125)},
		{"bf16 sum", nccl.Bfloat16, nccl.Sum, [][]float64{v(256, -3), v(1, 1.5)}, v(256, -1.5)},
		{"e4m3 sum saturates", nccl.Float8e4m3, nccl.Sum, [][]float64{v(448, 16), v(448, 1)}, v(448, 16)},
		{"e4m3 prod saturates", nccl.Float8e4m3, nccl.Prod, [][]float64{v(-16, 3)}, v(-16, 3)},
		{"e4m3 prod saturates negative", nccl.Float8e4m3, nccl.Prod, [][]float64{v(-16, 3), v(32, 7)}, v(-448, 20)},
		{"e5m2 sum saturates", nccl.Float8e5m2, nccl.Sum, [][]float64{v(57344, 8), v(57344, 1)}, v(57344, 8)},
		{"f32 sum", nccl.Float32, nccl.Sum, [][]float64{v(1, 1), v(0x1p-24, 0x1p-24), v(0, 0x1p-24)}, v(1, 1+0x1p-23)},
		{"f32 avg", nccl.Float32, nccl.Avg, [][]float64{v(1), v(2), v(3), v(4)}, v(2.5)},
		{"f64 max", nccl.Float64, nccl.Max, [][]float64{v(-0.5, -9), v(2, -8), v(-3, -10)}, v(2, -8)},
		{"f64 min", nccl.Float64, nccl.Min, [][]float64{v(-0.5, -9), v(2, -8), v(-3, -10)}, v(-3, -10)},
		{"f64 prod", nccl.Float64, nccl.Prod, [][]float64{v(-0.5), v(2), v(-3)}, v(3)},
	} {
		got := collectives.Reduce(tc.dt, tc.op, rows(tc.dt, tc.in...))
		if want := collectives.Encode(tc.dt, tc.want); !bytes.Equal(got, want) {
			t.Errorf("%s: Reduce = %v (%x), want %v (%x)", tc.name, collectives.Decode(tc.dt, got), got, tc.want, want)
		}
	}
	mustPanic(t, "Reduce with a PreMulSum op", func() { collectives.Reduce(nccl.Int32, nccl.RedOp(5), rows(nccl.Int32, v(1))) })
	mustPanic(t, "Reduce of no inputs", func() { collectives.Reduce(nccl.Int32, nccl.Sum, nil) })
	mustPanic(t, "Reduce of unequal inputs", func() { collectives.Reduce(nccl.Int32, nccl.Sum, rows(nccl.Int32, v(1), v(1, 2))) })
}

func TestPreMulSum(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dt     nccl.DataType
		scalar float64
		in     [][]float64
		want   []float64
	}{
		{"int32", nccl.Int32, 3, [][]float64{v(1, -2), v(4, 0)}, v(15, -6)},
		{"int8 wraps", nccl.Int8, 3, [][]float64{v(50), v(50)}, v(44)},              // 300 mod 256
		{"uint8 scalar -1 is 255", nccl.Uint8, -1, [][]float64{v(1), v(2)}, v(253)}, // 255+254 = 509 mod 256
		{"f32", nccl.Float32, 0.5, [][]float64{v(3), v(-1), v(0.25)}, v(1.125)},
		{"e4m3", nccl.Float8e4m3, 2, [][]float64{v(2), v(3)}, v(10)},
		// The scalar is stored as float16 (0.0999755859375), each product rounded
		// to float16 (5×s = 0.4998779296875 → 0.5), the sum rounded once
		// (0.5999755859375 → 0.60009765625). Unrounded products would sum to
		// 0.599853515625, which rounds (a tie) to 0.599609375.
		{"f16 rounds the scalar and each product", nccl.Float16, 0.1, [][]float64{v(1), v(5)}, v(0.60009765625)},
		// 2×s = 0.199951171875, 3×s → 0.2998046875, sum 0.499755859375 (exact);
		// with the scalar 0.1 unrounded the products would be 0.2 → 0.199951171875
		// and 0.3 → 0.300048828125, summing to 0.5.
		{"f16 rounds the scalar", nccl.Float16, 0.1, [][]float64{v(2), v(3)}, v(0.499755859375)},
	} {
		got := collectives.PreMulSum(tc.dt, tc.scalar, rows(tc.dt, tc.in...))
		if want := collectives.Encode(tc.dt, tc.want); !bytes.Equal(got, want) {
			t.Errorf("%s: PreMulSum = %v (%x), want %v (%x)", tc.name, collectives.Decode(tc.dt, got), got, tc.want, want)
		}
	}
}

// TestRandomIsExact: Random's values keep every partial result of every op
// over 8 ranks exact, so NCCL's order of reduction cannot change a result.
func TestRandomIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range allTypes {
		for _, op := range []nccl.RedOp{nccl.Sum, nccl.Prod, nccl.Max, nccl.Min, nccl.Avg, nccl.RedOp(5)} {
			for range 2000 {
				acc := 0.0
				for r := range 8 {
					x := collectives.Random(rng, dt, op)
					if x != math.Trunc(x) || collectives.Round(dt, x) != x {
						t.Fatalf("%v %v: %v is not an integer the type holds", dt, op, x)
					}
					if op == nccl.Prod && x == 0 {
						t.Fatalf("%v: a zero factor", dt)
					}
					if !collectives.IsFloat(dt) && !collectives.IsSigned(dt) && x < 0 {
						t.Fatalf("%v: negative %v", dt, x)
					}
					switch {
					case r == 0 && op != nccl.RedOp(5):
						acc = x
					case op == nccl.Prod:
						acc *= x
					case op == nccl.RedOp(5):
						acc += 2 * x
					default:
						acc += x
					}
					if collectives.IsFloat(dt) && collectives.Round(dt, acc) != acc {
						t.Fatalf("%v %v: partial result %v after %d ranks is not exact", dt, op, acc, r+1)
					}
				}
			}
		}
	}
}

func TestMismatch(t *testing.T) {
	f32 := func(xs ...float64) []byte { return collectives.Encode(nccl.Float32, xs) }
	for _, tc := range []struct {
		name      string
		dt        nccl.DataType
		got, want []byte
		idx       int
	}{
		{"equal", nccl.Float32, f32(1, 2), f32(1, 2), -1},
		{"second differs", nccl.Float32, f32(1, 2, 3), f32(1, 5, 3), 1},
		{"+0 is -0", nccl.Float32, f32(0), f32(math.Copysign(0, -1)), -1},
		{"NaN is NaN", nccl.Float32, f32(math.NaN()), []byte{1, 0, 0xc0, 0x7f}, -1},
		{"NaN is not 1", nccl.Float32, f32(math.NaN()), f32(1), 0},
		{"integers bit for bit", nccl.Int64, []byte{1, 0, 0, 0, 0, 0, 0, 0x40}, []byte{0, 0, 0, 0, 0, 0, 0, 0x40}, 0},
		{"shorter", nccl.Int32, collectives.Encode(nccl.Int32, v(1)), collectives.Encode(nccl.Int32, v(1, 2)), 1},
		{"longer", nccl.Int8, []byte{1, 2, 3}, []byte{1, 2}, 2},
	} {
		if got := collectives.Mismatch(tc.dt, tc.got, tc.want); got != tc.idx {
			t.Errorf("%s: Mismatch = %d, want %d", tc.name, got, tc.idx)
		}
	}
}

func TestMovement(t *testing.T) {
	in := [][]byte{{0, 1, 2, 3, 4, 5}, {10, 11, 12, 13, 14, 15}, {20, 21, 22, 23, 24, 25}}
	if got := collectives.Blocks(in[1], 3); len(got) != 3 || !bytes.Equal(got[0], []byte{10, 11}) ||
		!bytes.Equal(got[1], []byte{12, 13}) || !bytes.Equal(got[2], []byte{14, 15}) {
		t.Errorf("Blocks = %v", got)
	}
	if got := collectives.AllGather(in); !bytes.Equal(got, []byte{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25}) {
		t.Errorf("AllGather = %v", got)
	}
	want := [][]byte{{0, 1, 10, 11, 20, 21}, {2, 3, 12, 13, 22, 23}, {4, 5, 14, 15, 24, 25}}
	for r, got := range collectives.AlltoAll(in) {
		if !bytes.Equal(got, want[r]) {
			t.Errorf("AlltoAll: rank %d = %v, want %v", r, got, want[r])
		}
	}
	if in[0][0] != 0 || in[2][5] != 25 {
		t.Error("AlltoAll changed its inputs")
	}
	mustPanic(t, "Blocks of uneven bytes", func() { collectives.Blocks(make([]byte, 5), 2) })
}

func TestAlltoAllv(t *testing.T) {
	// Two ranks, uint8 elements. Rank 0 sends 1 element to itself and 2 to rank
	// 1; rank 1 sends none to rank 0 and 3 to itself.
	m := nccl.Layout{
		SendCounts: []uint64{1, 2, 0, 3},
		SendDispls: []uint64{2, 0, 0, 1},
		RecvCounts: []uint64{1, 0, 2, 3}, // RecvCounts[j*n+i] = SendCounts[i*n+j]
		RecvDispls: []uint64{0, 0, 3, 0},
	}
	sends := [][]byte{{10, 11, 12}, {20, 21, 22, 23}}
	recvs := [][]byte{{99, 98}, {97, 96, 95, 94, 93}}
	got := collectives.AlltoAllv(nccl.Uint8, m, sends, recvs)
	want := [][]byte{{12, 98}, {21, 22, 23, 10, 11}}
	for r := range want {
		if !bytes.Equal(got[r], want[r]) {
			t.Errorf("uint8: rank %d = %v, want %v", r, got[r], want[r])
		}
	}
	if recvs[0][0] != 99 || recvs[1][0] != 97 {
		t.Error("AlltoAllv changed its receive buffers")
	}
	// The same in int32: displacements count elements, not bytes.
	i32 := func(xs ...float64) []byte { return collectives.Encode(nccl.Int32, xs) }
	got = collectives.AlltoAllv(nccl.Int32, m, [][]byte{i32(10, 11, 12), i32(20, 21, 22, 23)},
		[][]byte{i32(99, 98), i32(97, 96, 95, 94, 93)})
	want = [][]byte{i32(12, 98), i32(21, 22, 23, 10, 11)}
	for r := range want {
		if !bytes.Equal(got[r], want[r]) {
			t.Errorf("int32: rank %d = %v, want %v", r, collectives.Decode(nccl.Int32, got[r]), collectives.Decode(nccl.Int32, want[r]))
		}
	}

	bad := m
	bad.RecvCounts = []uint64{1, 0, 1, 3}
	mustPanic(t, "counts that disagree", func() { collectives.AlltoAllv(nccl.Uint8, bad, sends, recvs) })
	bad = m
	bad.SendDispls = []uint64{3, 0, 0, 1}
	mustPanic(t, "a block past the send buffer", func() { collectives.AlltoAllv(nccl.Uint8, bad, sends, recvs) })
	bad = m
	bad.RecvDispls = []uint64{0, 0, 1 << 63, 0}
	mustPanic(t, "a displacement that overflows", func() { collectives.AlltoAllv(nccl.Uint8, bad, sends, recvs) })
	local := nccl.Layout{SendCounts: m.SendCounts[:2], SendDispls: m.SendDispls[:2], RecvCounts: m.RecvCounts[:2], RecvDispls: m.RecvDispls[:2]}
	mustPanic(t, "the local form", func() { collectives.AlltoAllv(nccl.Uint8, local, sends, recvs) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}
