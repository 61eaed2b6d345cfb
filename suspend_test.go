package nccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
)

func TestSuspendResume(t *testing.T) {
	l := open(t, "v230")
	ranks := initRanks(t, l, 2)
	ctx := context.Background()
	c := ranks[0].comm
	const mib = 1 << 20
	stats := func(want nccl.MemStats) {
		t.Helper()
		got, err := c.MemStats()
		if err != nil || got != want {
			t.Fatalf("MemStats %+v, %v; want %+v", got, err, want)
		}
	}
	stats(nccl.MemStats{Suspendable: 4 * mib, Persistent: mib, Total: 5 * mib})
	if err := c.Suspend(nccl.SuspendMem); err != nil {
		t.Fatal(err)
	}
	stats(nccl.MemStats{Suspended: true, Persistent: mib, Total: mib})
	if err := c.Suspend(nccl.SuspendMem); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Errorf("Suspend twice: %v, want ErrInvalidUsage", err)
	}
	buf, err := l.CUDA().Alloc(0, nccl.Uint64, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	if err := c.AllReduce(buf, buf, nccl.Sum, ranks[0].s); !errors.Is(err, nccl.ErrInvalidUsage) || !strings.Contains(err.Error(), "suspended") {
		t.Errorf("AllReduce while suspended: %v, want ErrInvalidUsage", err)
	}
	if err := c.Suspend(4); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Suspend(4): %v, want ErrInvalidArgument", err)
	}
	if err := c.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(); !errors.Is(err, nccl.ErrInvalidUsage) {
		t.Errorf("Resume when not suspended: %v, want ErrInvalidUsage", err)
	}
	stats(nccl.MemStats{Suspendable: 4 * mib, Persistent: mib, Total: 5 * mib})
	onRanks(t, []int{0, 1}, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(0, 1)) })

	old := initRanks(t, open(t, "default"), 1)[0].comm
	for what, err := range map[string]error{"Suspend": old.Suspend(nccl.SuspendMem), "Resume": old.Resume()} {
		if !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "requires >= 2.29.7)") {
			t.Errorf("%s on 2.28.3: %v", what, err)
		}
	}
	if _, err := old.MemStats(); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("MemStats on 2.28.3: %v", err)
	}
}
