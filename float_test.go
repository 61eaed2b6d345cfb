package nccl

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Exhaustive round trips: every non-NaN pattern converts back to itself,
// and exactly the patterns the format reserves for NaN decode to NaN.

func TestFloat16RoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := F16(i)
		f := h.Float64()
		wantNaN := i&0x7C00 == 0x7C00 && i&0x3FF != 0
		if math.IsNaN(f) != wantNaN {
			t.Fatalf("%#04x: Float64() = %v, NaN expected %v", i, f, wantNaN)
		}
		got := F16From(f)
		if wantNaN {
			if !math.IsNaN(got.Float64()) {
				t.Errorf("%#04x: NaN came back as %#04x", i, uint16(got))
			}
		} else if got != h {
			t.Errorf("%#04x -> %v -> %#04x", i, f, uint16(got))
		}
	}
}

func TestBFloat16RoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		b := BF16(i)
		f := b.Float64()
		wantNaN := i&0x7F80 == 0x7F80 && i&0x7F != 0
		if math.IsNaN(f) != wantNaN {
			t.Fatalf("%#04x: Float64() = %v, NaN expected %v", i, f, wantNaN)
		}
		got := BF16From(f)
		if wantNaN {
			if !math.IsNaN(got.Float64()) {
				t.Errorf("%#04x: NaN came back as %#04x", i, uint16(got))
			}
		} else if got != b {
			t.Errorf("%#04x -> %v -> %#04x", i, f, uint16(got))
		}
	}
}

func TestFloat8E4M3RoundTrip(t *testing.T) {
	for i := 0; i < 256; i++ {
		v := F8E4M3(i)
		f := v.Float64()
		wantNaN := i&0x7F == 0x7F
		if math.IsNaN(f) != wantNaN || math.IsInf(f, 0) {
			t.Fatalf("%#02x: Float64() = %v", i, f)
		}
		got := F8E4M3From(f)
		if wantNaN {
			if got != float8NaN {
				t.Errorf("%#02x: NaN came back as %#02x", i, uint8(got))
			}
		} else if got != v {
			t.Errorf("%#02x -> %v -> %#02x", i, f, uint8(got))
		}
	}
}

func TestFloat8E5M2RoundTrip(t *testing.T) {
	for i := 0; i < 256; i++ {
		v := F8E5M2(i)
		f := v.Float64()
		wantNaN := i&0x7C == 0x7C && i&3 != 0
		wantInf := i&0x7F == 0x7C
		if math.IsNaN(f) != wantNaN || math.IsInf(f, 0) != wantInf {
			t.Fatalf("%#02x: Float64() = %v", i, f)
		}
		got := F8E5M2From(f)
		switch {
		case wantNaN:
			if got != float8NaN {
				t.Errorf("%#02x: NaN came back as %#02x", i, uint8(got))
			}
		case wantInf:
			// Saturating conversion: ±Inf comes back as ±max.
			if want := F8E5M2(i&0x80 | 0x7B); got != want {
				t.Errorf("%#02x: Inf came back as %#02x, want %#02x", i, uint8(got), uint8(want))
			}
		case got != v:
			t.Errorf("%#02x -> %v -> %#02x", i, f, uint8(got))
		}
	}
}

// Known values, including ties in both directions, subnormal edges and the
// double-rounding trap (an input just above a tie that float32 would round
// onto the tie).

type knownCase struct {
	in   float64
	want uint16
}

var (
	negZero = math.Copysign(0, -1)
	inf     = math.Inf(1)
	p2      = func(e int) float64 { return math.Ldexp(1, e) }
)

func TestFloat16Known(t *testing.T) {
	for _, c := range []knownCase{
		{1, 0x3C00},
		{-2, 0xC000},
		{0, 0x0000},
		{negZero, 0x8000},
		{65504, 0x7BFF},                  // max
		{-65504, 0xFBFF},                 // -max
		{p2(-14), 0x0400},                // min normal
		{p2(-24), 0x0001},                // min subnormal
		{p2(-14) - p2(-24), 0x03FF},      // max subnormal
		{1 + p2(-11), 0x3C00},            // tie, down to even
		{1 + 3*p2(-11), 0x3C02},          // tie, up to even
		{1 + p2(-11) + p2(-40), 0x3C01},  // just above a tie (float32 would lose it)
		{p2(-25), 0x0000},                // half the min subnormal: tie to zero
		{3 * p2(-25), 0x0002},            // subnormal tie, up to even
		{p2(-25) + p2(-60), 0x0001},      // just above
		{p2(-26), 0x0000},                // underflow
		{-p2(-26), 0x8000},               // underflow keeps the sign
		{65519.99, 0x7BFF},               // just below the overflow boundary
		{65520, 0x7C00},                  // tie between max (odd) and 2^16: Inf
		{1e10, 0x7C00},                   // overflow
		{-1e300, 0xFC00},                 // overflow
		{inf, 0x7C00},                    // Inf
		{-inf, 0xFC00},                   // -Inf
		{math.NaN(), 0x7FFF},             // canonical NaN
		{math.SmallestNonzeroFloat64, 0}, // float64 subnormal
	} {
		if got := F16From(c.in); uint16(got) != c.want {
			t.Errorf("F16From(%v) = %#04x, want %#04x", c.in, uint16(got), c.want)
		}
	}
	if s := F16(0x3555).String(); s != "0.333251953125" {
		t.Errorf("String() = %q", s)
	}
}

func TestBFloat16Known(t *testing.T) {
	bfMax := (2 - p2(-7)) * p2(127)
	for _, c := range []knownCase{
		{1, 0x3F80},
		{-2, 0xC000},
		{0, 0x0000},
		{negZero, 0x8000},
		{bfMax, 0x7F7F},                  // max
		{p2(-126), 0x0080},               // min normal
		{p2(-133), 0x0001},               // min subnormal
		{1 + p2(-8), 0x3F80},             // tie, down to even
		{1 + 3*p2(-8), 0x3F82},           // tie, up to even
		{1 + p2(-8) + p2(-30), 0x3F81},   // just above a tie (float32 would lose it)
		{p2(-134), 0x0000},               // half the min subnormal: tie to zero
		{3 * p2(-134), 0x0002},           // subnormal tie, up to even
		{p2(-134) + p2(-170), 0x0001},    // just above
		{(2 - p2(-8)) * p2(127), 0x7F80}, // tie between max (odd) and 2^128: Inf
		{(2 - p2(-8)) * p2(127) * (1 - p2(-50)), 0x7F7F}, // just below it
		{math.MaxFloat32, 0x7F80},                        // overflow
		{-1e39, 0xFF80},                                  // overflow
		{inf, 0x7F80},
		{-inf, 0xFF80},
		{math.NaN(), 0x7FFF},
	} {
		if got := BF16From(c.in); uint16(got) != c.want {
			t.Errorf("BF16From(%v) = %#04x, want %#04x", c.in, uint16(got), c.want)
		}
	}
	if s := BF16(0x3F80).String(); s != "1" {
		t.Errorf("String() = %q", s)
	}
}

func TestFloat8E4M3Known(t *testing.T) {
	for _, c := range []knownCase{
		{1, 0x38},
		{-2, 0xC0},
		{0, 0x00},
		{negZero, 0x80},
		{448, 0x7E},                  // max
		{-448, 0xFE},                 // -max
		{p2(-6), 0x08},               // min normal
		{p2(-9), 0x01},               // min subnormal
		{1 + p2(-4), 0x38},           // tie, down to even
		{1 + 3*p2(-4), 0x3A},         // tie, up to even
		{1 + p2(-4) + p2(-40), 0x39}, // just above a tie
		{p2(-10), 0x00},              // half the min subnormal: tie to zero
		{3 * p2(-10), 0x02},          // subnormal tie, up to even
		{p2(-10) + p2(-60), 0x01},    // just above
		{-p2(-11), 0x80},             // underflow keeps the sign
		{464, 0x7E},                  // max + half ulp: saturates
		{480, 0x7E},                  // would be NaN without saturation
		{1e6, 0x7E},                  // saturates
		{-1e6, 0xFE},
		{inf, 0x7E}, // saturates, as __NV_SATFINITE does
		{-inf, 0xFE},
		{math.NaN(), 0x7F},
		{-math.NaN(), 0x7F},
	} {
		if got := F8E4M3From(c.in); uint16(got) != c.want {
			t.Errorf("F8E4M3From(%v) = %#02x, want %#02x", c.in, uint8(got), c.want)
		}
	}
	if f := F8E4M3(0x7E).Float64(); f != 448 {
		t.Errorf("0x7E = %v", f)
	}
	if s := F8E4M3(0xFF).String(); s != "NaN" {
		t.Errorf("String() = %q", s)
	}
}

func TestFloat8E5M2Known(t *testing.T) {
	for _, c := range []knownCase{
		{1, 0x3C},
		{-2, 0xC0},
		{0, 0x00},
		{negZero, 0x80},
		{57344, 0x7B},                // max
		{-57344, 0xFB},               // -max
		{p2(-14), 0x04},              // min normal
		{p2(-16), 0x01},              // min subnormal
		{1 + p2(-3), 0x3C},           // tie, down to even
		{1 + 3*p2(-3), 0x3E},         // tie, up to even
		{1 + p2(-3) + p2(-40), 0x3D}, // just above a tie
		{p2(-17), 0x00},              // half the min subnormal: tie to zero
		{3 * p2(-17), 0x02},          // subnormal tie, up to even
		{p2(-17) + p2(-60), 0x01},    // just above
		{61440, 0x7B},                // max + half ulp: saturates
		{1e9, 0x7B},
		{-1e9, 0xFB},
		{inf, 0x7B}, // saturates, as __NV_SATFINITE does
		{-inf, 0xFB},
		{math.NaN(), 0x7F},
	} {
		if got := F8E5M2From(c.in); uint16(got) != c.want {
			t.Errorf("F8E5M2From(%v) = %#02x, want %#02x", c.in, uint8(got), c.want)
		}
	}
	if f := F8E5M2(0xFC).Float64(); !math.IsInf(f, -1) {
		t.Errorf("0xFC = %v", f)
	}
	if s := F8E5M2(0x7C).String(); s != "+Inf" {
		t.Errorf("String() = %q", s)
	}
}

// Independent references.

// nearest scans every non-negative code 0..len(vals)-1 for the values just
// below and above x (x >= 0) and returns the nearer, ties to the even code.
// Past the last value it returns the last code. The two differences are
// exact: the bracketing values are adjacent, so each is within a factor of
// two of x (or zero).
func nearest(vals []float64, x float64) int {
	lo, hi := -1, -1
	loV, hiV := math.Inf(-1), math.Inf(1)
	for c, v := range vals {
		if v <= x && v > loV {
			lo, loV = c, v
		}
		if v >= x && v < hiV {
			hi, hiV = c, v
		}
	}
	if hi < 0 || hi == lo {
		return lo
	}
	dl, dh := x-loV, hiV-x
	if dl < dh || dl == dh && lo%2 == 0 {
		return lo
	}
	return hi
}

// refCode applies nearest to |x| and puts the sign back at signBit.
func refCode(vals []float64, x float64, signBit int) int {
	c := nearest(vals, math.Abs(x))
	if math.Signbit(x) {
		c |= signBit
	}
	return c
}

// valueTable lists the values of codes 0..top; extra, if not 0, is put at
// code top to stand for the next step of the exponent progression (the
// infinity encoding), so that overflow follows the same nearest-even rule.
func valueTable(top int, extra float64, val func(int) float64) []float64 {
	vals := make([]float64, top+1)
	for c := range vals {
		vals[c] = val(c)
	}
	if extra != 0 {
		vals[top] = extra
	}
	return vals
}

// randomInputs mixes exact ties between adjacent codes, ties nudged by one
// float64 ulp either way, code values nudged by a small relative amount, and
// log-uniform magnitudes from well below the smallest subnormal to past the
// largest value. All are finite, half of them negative.
func randomInputs(r *rand.Rand, vals []float64, n, minExp, maxExp int) []float64 {
	in := make([]float64, n)
	for i := range in {
		var x float64
		c := r.IntN(len(vals) - 1)
		mid := (vals[c] + vals[c+1]) / 2
		switch i % 5 {
		case 0:
			x = mid
		case 1:
			x = math.Nextafter(mid, inf)
		case 2:
			x = math.Nextafter(mid, 0)
		case 3:
			x = vals[c] * (1 + (r.Float64()-0.5)*math.Ldexp(1, -r.IntN(40)))
		case 4:
			x = math.Ldexp(1+r.Float64(), minExp+r.IntN(maxExp-minExp))
		}
		if r.IntN(2) == 1 {
			x = -x
		}
		in[i] = x
	}
	return in
}

func TestFloat16Reference(t *testing.T) {
	vals := valueTable(0x7C00, 65536, func(c int) float64 { return F16(c).Float64() })
	r := rand.New(rand.NewPCG(1, 16))
	for _, x := range randomInputs(r, vals, 4000, -30, 18) {
		want := refCode(vals, x, 0x8000)
		if got := F16From(x); int(got) != want {
			t.Errorf("F16From(%v) = %#04x, reference %#04x", x, uint16(got), want)
		}
	}
}

func TestBFloat16Reference(t *testing.T) {
	vals := valueTable(0x7F80, p2(128), func(c int) float64 { return BF16(c).Float64() })
	r := rand.New(rand.NewPCG(2, 16))
	for _, x := range randomInputs(r, vals, 3000, -140, 130) {
		want := refCode(vals, x, 0x8000)
		if got := BF16From(x); int(got) != want {
			t.Errorf("BF16From(%v) = %#04x, reference %#04x", x, uint16(got), want)
		}
	}
}

// rneBFloat16 rounds a float32 to bfloat16 on its bits. Only exact for inputs
// that are already float32, so it is fed nothing else.
func rneBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}

func TestBFloat16Float32Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 32))
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if f != f {
			return
		}
		x := float64(f)
		if got, want := BF16From(x), rneBFloat16(f); uint16(got) != want {
			t.Fatalf("BF16From(%v) = %#04x, reference %#04x", x, uint16(got), want)
		}
	}
	// Every upper half with the low halves that matter for rounding.
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, r.Uint32() & 0xFFFF} {
			check(hi<<16 | lo)
		}
	}
	for range 1 << 18 {
		check(r.Uint32())
	}
}

func TestFloat8E4M3Reference(t *testing.T) {
	vals := valueTable(0x7E, 0, func(c int) float64 { return F8E4M3(c).Float64() })
	r := rand.New(rand.NewPCG(4, 8))
	for _, x := range randomInputs(r, vals, 5000, -12, 11) {
		want := refCode(vals, x, 0x80)
		if got := F8E4M3From(x); int(got) != want {
			t.Errorf("F8E4M3From(%v) = %#02x, reference %#02x", x, uint8(got), want)
		}
	}
}

func TestFloat8E5M2Reference(t *testing.T) {
	vals := valueTable(0x7B, 0, func(c int) float64 { return F8E5M2(c).Float64() })
	r := rand.New(rand.NewPCG(5, 8))
	for _, x := range randomInputs(r, vals, 5000, -19, 18) {
		want := refCode(vals, x, 0x80)
		if got := F8E5M2From(x); int(got) != want {
			t.Errorf("F8E5M2From(%v) = %#02x, reference %#02x", x, uint8(got), want)
		}
	}
}

var benchSink F16

func BenchmarkFloat16From(b *testing.B) {
	r := rand.New(rand.NewPCG(6, 16))
	in := make([]float64, 1024)
	for i := range in {
		in[i] = math.Ldexp(r.Float64()-0.5, r.IntN(40)-24)
	}
	var s F16
	for i := 0; b.Loop(); i++ {
		s ^= F16From(in[i&1023])
	}
	benchSink = s
}
