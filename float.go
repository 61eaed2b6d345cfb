package nccl

import (
	"math"
	"strconv"
)

// F16 is an IEEE 754 binary16 value (ncclFloat16), held as its bit
// pattern so buffers can be shared with the device unchanged.
type F16 uint16

// BF16 is a bfloat16 value (ncclBfloat16): the top 16 bits of a float32.
type BF16 uint16

// F8E4M3 is an OCP FP8 E4M3 value (ncclFloat8e4m3, CUDA's __nv_fp8_e4m3):
// exponent bias 7, no infinities, 0x7F and 0xFF are NaN, largest finite 448.
type F8E4M3 uint8

// F8E5M2 is an OCP FP8 E5M2 value (ncclFloat8e5m2, CUDA's __nv_fp8_e5m2):
// exponent bias 15, IEEE-style infinities (0x7C, 0xFC) and NaNs, largest
// finite 57344.
type F8E5M2 uint8

// Canonical NaN encodings, as CUDA produces them.
const (
	float16NaN  = 0x7FFF
	bfloat16NaN = 0x7FFF
	float8NaN   = 0x7F // both FP8 kinds
)

const float64Inf = 0x7FF0000000000000

// roundMag rounds abs, the bits of a finite non-negative float64, to nearest
// even in a format with mbits stored mantissa bits and the given exponent
// bias, subnormals included. It returns the magnitude code; a carry past the
// largest exponent gives a code beyond the finite range, which the caller
// turns into infinity or saturates. Rounding straight from float64 avoids the
// double rounding a detour through float32 would bring.
func roundMag(abs uint64, mbits uint, bias int) uint64 {
	e := int(abs >> 52)
	mant := abs & (1<<52 - 1)
	if e == 0 {
		e = 1 // float64 subnormal: no implicit bit
	} else {
		mant |= 1 << 52
	}
	e -= 1023
	emin := 1 - bias
	shift := 52 - mbits
	var base uint64
	if e >= emin {
		// mant carries the implicit bit, which lifts base to the exponent field.
		base = uint64(e-emin) << mbits
	} else {
		shift += uint(emin - e)
		if shift > 54 {
			shift = 54 // below half the smallest subnormal: rounds to zero
		}
	}
	q := mant >> shift
	r := mant & (1<<shift - 1)
	half := uint64(1) << (shift - 1)
	if r > half || r == half && q&1 != 0 {
		q++
	}
	return base + q
}

// decode returns the value of a finite code of a binary format.
func decode(neg bool, exp, frac uint64, mbits uint, bias int) float64 {
	var v float64
	if exp == 0 {
		v = math.Ldexp(float64(frac), 1-bias-int(mbits))
	} else {
		v = math.Float64frombits(uint64(int(exp)-bias+1023)<<52 | frac<<(52-mbits))
	}
	if neg {
		return -v
	}
	return v
}

// F16From rounds f to the nearest F16, ties to even. Values beyond
// the finite range become ±Inf; NaN becomes the quiet NaN 0x7FFF.
func F16From(f float64) F16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	abs := b &^ (1 << 63)
	switch {
	case abs > float64Inf:
		return float16NaN
	case abs >= 0x40F0000000000000: // 65536, past the rounding boundary 65520
		return F16(sign | 0x7C00)
	}
	return F16(sign | uint16(roundMag(abs, 10, 15)))
}

// Float64 returns h's value exactly.
func (h F16) Float64() float64 {
	exp, frac := uint64(h>>10)&0x1F, uint64(h)&0x3FF
	if exp == 0x1F {
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(1 - 2*int(h>>15))
	}
	return decode(h&0x8000 != 0, exp, frac, 10, 15)
}

func (h F16) String() string { return strconv.FormatFloat(h.Float64(), 'g', -1, 64) }

// BF16From rounds f to the nearest BF16, ties to even. Values beyond
// the finite range become ±Inf; NaN becomes the quiet NaN 0x7FFF.
func BF16From(f float64) BF16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	abs := b &^ (1 << 63)
	switch {
	case abs > float64Inf:
		return bfloat16NaN
	case abs >= 0x47F0000000000000: // 2^128, past the rounding boundary
		return BF16(sign | 0x7F80)
	}
	return BF16(sign | uint16(roundMag(abs, 7, 127)))
}

// Float64 returns b's value exactly.
func (b BF16) Float64() float64 {
	return float64(math.Float32frombits(uint32(b) << 16))
}

func (b BF16) String() string { return strconv.FormatFloat(b.Float64(), 'g', -1, 64) }

// F8E4M3From rounds f to the nearest F8E4M3, ties to even. Like
// CUDA's __NV_SATFINITE conversion, which NCCL's reduction kernels use,
// anything beyond ±448 (infinities included) saturates to ±448; NaN becomes
// 0x7F.
func F8E4M3From(f float64) F8E4M3 {
	b := math.Float64bits(f)
	sign := uint8(b>>56) & 0x80
	abs := b &^ (1 << 63)
	if abs > float64Inf {
		return float8NaN
	}
	c := roundMag(abs, 3, 7)
	if c > 0x7E {
		c = 0x7E
	}
	return F8E4M3(sign | uint8(c))
}

// Float64 returns v's value exactly.
func (v F8E4M3) Float64() float64 {
	if v&0x7F == 0x7F {
		return math.NaN()
	}
	return decode(v&0x80 != 0, uint64(v>>3)&0xF, uint64(v)&7, 3, 7)
}

func (v F8E4M3) String() string { return strconv.FormatFloat(v.Float64(), 'g', -1, 64) }

// F8E5M2From rounds f to the nearest F8E5M2, ties to even. Like
// CUDA's __NV_SATFINITE conversion, which NCCL's reduction kernels use,
// anything beyond ±57344 saturates to ±57344, infinities included, so ±Inf
// never comes out; NaN becomes 0x7F.
func F8E5M2From(f float64) F8E5M2 {
	b := math.Float64bits(f)
	sign := uint8(b>>56) & 0x80
	abs := b &^ (1 << 63)
	if abs > float64Inf {
		return float8NaN
	}
	c := roundMag(abs, 2, 15)
	if c > 0x7B {
		c = 0x7B
	}
	return F8E5M2(sign | uint8(c))
}

// Float64 returns v's value exactly.
func (v F8E5M2) Float64() float64 {
	exp, frac := uint64(v>>2)&0x1F, uint64(v)&3
	if exp == 0x1F {
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(1 - 2*int(v>>7))
	}
	return decode(v&0x80 != 0, exp, frac, 2, 15)
}

func (v F8E5M2) String() string { return strconv.FormatFloat(v.Float64(), 'g', -1, 64) }
