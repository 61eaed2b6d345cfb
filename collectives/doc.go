// Package collectives computes on the host, in plain Go, what each NCCL
// collective leaves in the receive buffers: the reference that gonccl's tests,
// nccl-bench and users' own tests check device results against.
//
// Buffers are the raw little-endian bytes of a device buffer, as
// nccl.Buffer.ReadBytes returns them; inputs[r] is rank r's send buffer. Every
// NCCL data type and built-in reduction is covered, and PreMulSum:
//
//	AllReduce      every rank:  Reduce(dt, op, inputs)
//	Reduce         root:        Reduce(dt, op, inputs)
//	ReduceScatter  rank r:      Blocks(Reduce(dt, op, inputs), n)[r]
//	Broadcast      every rank:  inputs[root]
//	AllGather      every rank:  AllGather(inputs)
//	Gather         root:        AllGather(inputs)
//	Scatter        rank r:      Blocks(inputs[root], n)[r]
//	AlltoAll       rank r:      AlltoAll(inputs)[r]
//	AlltoAllv      rank r:      AlltoAllv(dt, layout, inputs, recvs)[r]
//
// with PreMulSum(dt, scalar, inputs) in place of Reduce for an op made by
// nccl.PreMulSum. What the other ranks' receive buffers hold is undefined.
//
// # Arithmetic
//
// Integers wrap around in the type's width (two's complement), as NCCL's
// kernels compute in the type; Avg of an integer type is the wrapped sum
// divided by the number of ranks, truncated toward zero, as NCCL's SumPostDiv
// does.
//
// Floating-point results are computed in float64 and rounded once
// to the type, to nearest even: float16, bfloat16 and the fp8 types through
// nccl.F16From, nccl.BF16From, nccl.F8E4M3From and nccl.F8E5M2From, so fp8
// saturates to its largest finite value as NCCL's kernels do. NCCL instead
// rounds every partial result, in an order that depends on the algorithm
// (ring, tree, NVLS) and the number of ranks; it also computes Avg of a
// floating type as a PreMulSum by 1/n rounded to the type. Its results equal
// the reference exactly whenever every partial result is exact in the type
// (for Avg of a floating type, n must then be a power of two). Random draws
// values for which every partial result over up to 8 ranks is exact, so a test
// can compare every element for equality (Mismatch). NaN inputs are not
// modelled.
package collectives
