package nccl_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

func TestSimulateGroup(t *testing.T) {
	l := open(t, "default") // 2.28.3
	ranks := initRanks(t, l, 2)
	const n = 1 << 20
	bufs := make([]nccl.Buffer, 2)
	host := make([]float32, n)
	for r := range bufs {
		b, err := l.CUDA().Alloc(ranks[r].dev, nccl.Float32, n)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		for i := range host {
			host[i] = float32(r + 1)
		}
		if err := nccl.CopyIn(b, host); err != nil {
			t.Fatal(err)
		}
		bufs[r] = b
	}
	both := func() error {
		for r, rk := range ranks {
			if err := rk.comm.AllReduce(bufs[r], bufs[r], nccl.Sum, rk.s); err != nil {
				return err
			}
		}
		return nil
	}
	est, err := l.SimulateGroup(both)
	if err != nil {
		t.Fatal(err)
	}
	// The fake's model: 5 µs per operation plus 4 MiB at 20 GB/s, twice.
	us := 2 * (5 + 4.0*n/20000)
	want := time.Duration(us * float64(time.Microsecond))
	if d := est - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("estimate %v, want %v", est, want)
	}
	check := func(want float32) {
		t.Helper()
		for r, rk := range ranks {
			if err := rk.s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := nccl.CopyOut(host, bufs[r]); err != nil {
				t.Fatal(err)
			}
			w := want
			if w == 0 {
				w = float32(r + 1)
			}
			for i, v := range host {
				if v != w {
					t.Fatalf("rank %d: element %d is %v, want %v", r, i, v, w)
				}
			}
		}
	}
	check(0) // nothing ran
	// fn's failure discards the group; then the same group really runs.
	boom := errors.New("boom")
	if _, err := l.SimulateGroup(func() error { both(); return boom }); err != boom {
		t.Errorf("SimulateGroup of a failing fn: %v", err)
	}
	if err := l.Group(both); err != nil {
		t.Fatal(err)
	}
	check(3)

	if _, err := open(t, "old").SimulateGroup(both); !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "requires >= 2.22)") {
		t.Errorf("SimulateGroup on 2.14: %v", err)
	}
}
