package nccl_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
)

// TestOneRankFP8 runs fp8 reductions on a non-blocking communicator of one
// rank. NCCL refuses PreMulSum and Avg of fp8 there (its one-rank kernel lacks
// fp8; seen on 2.28.3 and VCCL 2.29.2 on an H200, modelled by the fake), and a
// refusal inside NCCL leaves a non-blocking communicator in error for good.
// gonccl must run Avg as the Sum it equals on one rank, refuse PreMulSum
// itself, typed, and leave the communicator usable.
func TestOneRankFP8(t *testing.T) {
	l := open(t, "default")
	for _, ctx := range []context.Context{context.Background(), nonBlockingCtx(t)} {
		rk := initRanksCtx(t, l, 1, ctx)[0]
		for _, dt := range []nccl.DataType{nccl.Float8e4m3, nccl.Float8e5m2} {
			const n = 1000
			rng := rand.New(rand.NewPCG(uint64(dt), 1))
			vals := make([]float64, n)
			for i := range vals {
				vals[i] = collectives.Random(rng, dt, nccl.Avg)
			}
			in := collectives.Encode(dt, vals)
			send, err := l.CUDA().Alloc(rk.dev, dt, n)
			if err != nil {
				t.Fatal(err)
			}
			defer send.Free()
			recv, err := l.CUDA().Alloc(rk.dev, dt, n)
			if err != nil {
				t.Fatal(err)
			}
			defer recv.Free()
			if err := send.WriteBytes(in); err != nil {
				t.Fatal(err)
			}
			op, err := nccl.PreMulSum(rk.comm, uint8(0x38)) // 1.0 in e4m3's bits; the value does not matter
			if dt == nccl.Float8e5m2 {
				op, err = nccl.PreMulSum(rk.comm, uint8(0x3c))
			}
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func(nccl.RedOp) error{
				"AllReduce":     func(o nccl.RedOp) error { return rk.comm.AllReduce(send, recv, o, rk.s) },
				"Reduce":        func(o nccl.RedOp) error { return rk.comm.Reduce(send, recv, o, 0, rk.s) },
				"ReduceScatter": func(o nccl.RedOp) error { return rk.comm.ReduceScatter(send, recv, o, rk.s) },
			}
			for name, call := range calls {
				if err := call(op); !errors.Is(err, nccl.ErrInvalidArgument) {
					t.Errorf("%v %s PreMulSum on one rank (blocking %v): %v; want ErrInvalidArgument", dt, name, rk.comm.Blocking(), err)
				}
				if err := recv.Memset(0); err != nil {
					t.Fatal(err)
				}
				if err := call(nccl.Avg); err != nil {
					t.Fatalf("%v %s Avg on one rank (blocking %v): %v", dt, name, rk.comm.Blocking(), err)
				}
				if err := rk.comm.Wait(context.Background(), rk.s); err != nil {
					t.Fatalf("%v %s Avg: wait: %v", dt, name, err)
				}
				got := make([]byte, len(in))
				if err := recv.ReadBytes(got); err != nil {
					t.Fatal(err)
				}
				if i := collectives.Mismatch(dt, got, in); i >= 0 {
					t.Errorf("%v %s Avg on one rank: element %d differs from the input", dt, name, i)
				}
			}
			if err := rk.comm.DestroyRedOp(op); err != nil {
				t.Fatal(err)
			}
		}
	}
}
