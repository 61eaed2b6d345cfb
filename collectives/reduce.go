package collectives

import (
	"fmt"
	"math"

	"github.com/gonccl/nccl"
)

// Reduce is op applied element by element across the ranks' buffers: what
// AllReduce leaves on every rank and Reduce on the root. inputs hold the same
// number of whole elements of dt; op is Sum, Prod, Max, Min or Avg (Avg
// divides by len(inputs), the number of ranks). See the package comment for
// the arithmetic. It panics on inputs no NCCL call could take.
func Reduce(dt nccl.DataType, op nccl.RedOp, inputs [][]byte) []byte {
	if !op.Builtin() {
		panic(fmt.Sprintf("collectives: Reduce with %v: not a built-in reduction (use PreMulSum)", op))
	}
	return reduce(dt, op, 0, inputs)
}

// PreMulSum is the reduction of an op made by nccl.PreMulSum(c, scalar): the
// sum over ranks of scalar × x, where the scalar is stored in dt and every
// product is rounded to dt (wrapped, for integers) before the sum, as NCCL
// multiplies in the type.
func PreMulSum(dt nccl.DataType, scalar float64, inputs [][]byte) []byte {
	return reduce(dt, preMul, scalar, inputs)
}

// preMul is the op code reduce takes for PreMulSum.
const preMul nccl.RedOp = -1

func reduce(dt nccl.DataType, op nccl.RedOp, scalar float64, inputs [][]byte) []byte {
	sz := size(dt)
	if len(inputs) == 0 {
		panic("collectives: no inputs")
	}
	for r, in := range inputs {
		if len(in) != len(inputs[0]) || len(in)%sz != 0 {
			panic(fmt.Sprintf("collectives: input %d has %d bytes; input 0 has %d, in %d-byte elements", r, len(in), len(inputs[0]), sz))
		}
	}
	out := make([]byte, len(inputs[0]))
	for off := 0; off < len(out); off += sz {
		if IsFloat(dt) {
			put(dt, out[off:], reduceFloat(dt, op, scalar, inputs, off))
		} else {
			putInt(dt, out[off:], reduceInt(dt, op, scalar, inputs, off))
		}
	}
	return out
}

// reduceFloat combines the element at off of every input exactly, or as
// closely as float64 allows; the caller rounds once to dt.
func reduceFloat(dt nccl.DataType, op nccl.RedOp, scalar float64, inputs [][]byte, off int) float64 {
	if op == preMul {
		s := Round(dt, scalar)
		var acc float64
		for _, in := range inputs {
			acc += Round(dt, s*get(dt, in[off:]))
		}
		return acc
	}
	acc := get(dt, inputs[0][off:])
	for _, in := range inputs[1:] {
		v := get(dt, in[off:])
		switch op {
		case nccl.Sum, nccl.Avg:
			acc += v
		case nccl.Prod:
			acc *= v
		case nccl.Max:
			acc = math.Max(acc, v)
		case nccl.Min:
			acc = math.Min(acc, v)
		}
	}
	if op == nccl.Avg {
		acc /= float64(len(inputs))
	}
	return acc
}

// reduceInt combines the element at off of every input modulo 2^64, which
// agrees with the type's width in the bits stored; comparisons and Avg's
// division see the values as the type holds them.
func reduceInt(dt nccl.DataType, op nccl.RedOp, scalar float64, inputs [][]byte, off int) uint64 {
	signed := IsSigned(dt)
	if op == preMul {
		s := intOf(scalar)
		var acc uint64
		for _, in := range inputs {
			acc += getInt(dt, in[off:]) * s
		}
		return acc
	}
	acc := getInt(dt, inputs[0][off:])
	for _, in := range inputs[1:] {
		v := getInt(dt, in[off:])
		switch op {
		case nccl.Sum, nccl.Avg:
			acc += v
		case nccl.Prod:
			acc *= v
		case nccl.Max:
			if signed && int64(v) > int64(acc) || !signed && v > acc {
				acc = v
			}
		case nccl.Min:
			if signed && int64(v) < int64(acc) || !signed && v < acc {
				acc = v
			}
		}
	}
	if op == nccl.Avg {
		// The sum as the type holds it, then C's division (toward zero).
		var b [8]byte
		putInt(dt, b[:], acc)
		acc = getInt(dt, b[:])
		n := uint64(len(inputs))
		if signed {
			return uint64(int64(acc) / int64(n))
		}
		return acc / n
	}
	return acc
}
