package collectives

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gonccl/nccl"
)

// Values: float64 numbers to and from a data type's bytes. Every value of
// every NCCL type is a float64 exactly, except 64-bit integers beyond 2^53.

// IsFloat reports whether dt is a floating-point type.
func IsFloat(dt nccl.DataType) bool {
	switch dt {
	case nccl.Float16, nccl.Bfloat16, nccl.Float8e4m3, nccl.Float8e5m2, nccl.Float32, nccl.Float64:
		return true
	}
	return false
}

// IsSigned reports whether dt is a signed integer type.
func IsSigned(dt nccl.DataType) bool {
	return dt == nccl.Int8 || dt == nccl.Int32 || dt == nccl.Int64
}

// size is dt's element size; it panics on a type no NCCL release knows.
func size(dt nccl.DataType) int {
	if !dt.Valid() {
		panic(fmt.Sprintf("collectives: unknown data type %v", dt))
	}
	return dt.Size()
}

// Encode stores vals in dt's encoding: floating types round to nearest even
// (see the package comment), integers are truncated toward zero and wrapped to
// the type's width, as a C conversion through a 64-bit integer does (-1 is
// 0xFF as Uint8).
func Encode(dt nccl.DataType, vals []float64) []byte {
	sz := size(dt)
	b := make([]byte, len(vals)*sz)
	for i, v := range vals {
		put(dt, b[i*sz:], v)
	}
	return b
}

// Decode reads every element of b, which holds whole elements of dt.
func Decode(dt nccl.DataType, b []byte) []float64 {
	sz := size(dt)
	if len(b)%sz != 0 {
		panic(fmt.Sprintf("collectives: %d bytes are not whole %v elements", len(b), dt))
	}
	out := make([]float64, len(b)/sz)
	for i := range out {
		out[i] = get(dt, b[i*sz:])
	}
	return out
}

// Round is the value dt stores for v.
func Round(dt nccl.DataType, v float64) float64 {
	var b [8]byte
	put(dt, b[:], v)
	return get(dt, b[:])
}

// put stores v as the first element of b.
func put(dt nccl.DataType, b []byte, v float64) {
	switch dt {
	case nccl.Float16:
		binary.LittleEndian.PutUint16(b, uint16(nccl.F16From(v)))
	case nccl.Bfloat16:
		binary.LittleEndian.PutUint16(b, uint16(nccl.BF16From(v)))
	case nccl.Float8e4m3:
		b[0] = byte(nccl.F8E4M3From(v))
	case nccl.Float8e5m2:
		b[0] = byte(nccl.F8E5M2From(v))
	case nccl.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case nccl.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	default:
		putInt(dt, b, intOf(v))
	}
}

// get reads the first element of b.
func get(dt nccl.DataType, b []byte) float64 {
	switch dt {
	case nccl.Float16:
		return nccl.F16(binary.LittleEndian.Uint16(b)).Float64()
	case nccl.Bfloat16:
		return nccl.BF16(binary.LittleEndian.Uint16(b)).Float64()
	case nccl.Float8e4m3:
		return nccl.F8E4M3(b[0]).Float64()
	case nccl.Float8e5m2:
		return nccl.F8E5M2(b[0]).Float64()
	case nccl.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case nccl.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	x := getInt(dt, b)
	if IsSigned(dt) {
		return float64(int64(x))
	}
	return float64(x)
}

// intOf is v truncated toward zero, modulo 2^64; 0 for NaN and infinities.
func intOf(v float64) uint64 {
	t := math.Trunc(v)
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0):
		return 0
	case t >= 0:
		return uint64(math.Mod(t, 1<<64))
	}
	return -uint64(math.Mod(-t, 1<<64))
}

// getInt reads an integer element: sign-extended for a signed type, so that
// int64(x) is its value, zero-extended otherwise.
func getInt(dt nccl.DataType, b []byte) uint64 {
	switch dt {
	case nccl.Int8:
		return uint64(int64(int8(b[0])))
	case nccl.Uint8:
		return uint64(b[0])
	case nccl.Int32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	case nccl.Uint32:
		return uint64(binary.LittleEndian.Uint32(b))
	case nccl.Int64, nccl.Uint64:
		return binary.LittleEndian.Uint64(b)
	}
	panic(fmt.Sprintf("collectives: %v is not an integer type", dt))
}

// putInt stores the low bits of x.
func putInt(dt nccl.DataType, b []byte, x uint64) {
	switch dt.Size() {
	case 1:
		b[0] = byte(x)
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(x))
	case 8:
		binary.LittleEndian.PutUint64(b, x)
	default:
		panic(fmt.Sprintf("collectives: %v is not an integer type", dt))
	}
}

// Random draws one input value of dt for op, small enough that every partial
// result of op over up to 8 ranks is exact in dt: integers from -3 to 3 (0 to
// 3 unsigned; 0 to 2 for fp8 e4m3 and 0 to 1 for e5m2, whose exact integers end
// at 16 and 8), and for Prod ±1 and ±2 (only positive for unsigned types), so
// that no product is zero. Any op that is not built in counts as a PreMulSum by
// 2, whose inputs are those of Sum.
func Random(rng *rand.Rand, dt nccl.DataType, op nccl.RedOp) float64 {
	unsigned := !IsFloat(dt) && !IsSigned(dt)
	if op == nccl.Prod {
		v := float64(1 + rng.IntN(2))
		if !unsigned && rng.IntN(4) == 0 {
			v = -v
		}
		return v
	}
	lo, hi := -3, 3
	switch {
	case unsigned:
		lo = 0
	case dt == nccl.Float8e5m2:
		lo, hi = 0, 1
	case dt == nccl.Float8e4m3:
		lo, hi = 0, 2
	}
	return float64(lo + rng.IntN(hi-lo+1))
}

// Mismatch is the index of the first element where got differs from want, or
// -1 if none does (nor their lengths). Integers must match bit for bit;
// floating values by value, so +0 matches -0 and NaN matches NaN.
func Mismatch(dt nccl.DataType, got, want []byte) int {
	sz := size(dt)
	n := min(len(got), len(want)) / sz
	for i := range n {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if string(g) == string(w) {
			continue
		}
		if IsFloat(dt) {
			gv, wv := get(dt, g), get(dt, w)
			if gv == wv || math.IsNaN(gv) && math.IsNaN(wv) {
				continue
			}
		}
		return i
	}
	if len(got) != len(want) {
		return n
	}
	return -1
}
