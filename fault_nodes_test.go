package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gonccl/nccl"
)

// A node lost mid-collective, on the v230 fake: processes with different
// NCCL_HOSTID values are on different nodes, which NCCL connects through its
// network transport; when one node's processes die, every rank of the other
// node gets ncclRemoteError within milliseconds (the sockets closed) and
// keeps it, and 2.28.9's and 2.30.7's non-blocking ncclCommRevoke return it
// (a blocking one returns success, the error still kept). Within one
// node (SHM, P2P) NCCL sees nothing: the survivors wait for their deadline.

// nodeLossCase is one drill: each rank's host id, the ranks killed, and what
// the survivors must see ("remote": ErrRemote at once; "deadline").
type nodeLossCase struct {
	name    string
	hosts   []string
	victims []int
	expect  string
}

// TestFakeFaultMultiProcessNodeLost: 4 processes, one rank each (rank 0's
// process hosts the rendezvous), two on each of two host ids. Node B's
// processes killed mid-all-reduce: the hub's rank and a remote rank of node A
// fail with ErrRemote; node A's (the hub's) killed: node B's remote ranks,
// which lost their hub, fail with ErrRemote. Each survivor's Wait (5 s
// deadline) must return within a second, the error must stay (a second
// all-reduce fails the same way), and a non-blocking Revoke must return it.
// With one host id for all, the same kill costs the survivors their deadline.
func TestFakeFaultMultiProcessNodeLost(t *testing.T) {
	cases := []nodeLossCase{
		{"two nodes/node B killed", []string{"nodeA", "nodeA", "nodeB", "nodeB"}, []int{2, 3}, "remote"},
		{"two nodes/the hub's node A killed", []string{"nodeA", "nodeA", "nodeB", "nodeB"}, []int{0, 1}, "remote"},
		{"one node/ranks 2 and 3 killed", []string{"nodeA", "nodeA", "nodeA", "nodeA"}, []int{2, 3}, "deadline"},
	}
	for _, m := range commModes {
		for _, tc := range cases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				var victims []string
				for _, v := range tc.victims {
					victims = append(victims, strconv.Itoa(v))
				}
				var procs, survivors []*mpProc
				for r, host := range tc.hosts {
					p := startFT(t, fmt.Sprintf("rank %d on %s", r, host), "node-lost", dir, r, len(tc.hosts), ftMode(m),
						"NCCL_HOSTID="+host, "GONCCL_FT_VICTIMS="+strings.Join(victims, ","), "GONCCL_FT_EXPECT="+tc.expect)
					procs = append(procs, p)
					if !slices.Contains(tc.victims, r) {
						survivors = append(survivors, p)
					}
				}
				for _, v := range tc.victims {
					procs[v].waitFor(t, "READY", 20*time.Second)
				}
				for _, p := range survivors {
					p.waitFor(t, "ISSUED", 20*time.Second)
				}
				for _, v := range tc.victims {
					procs[v].cmd.Process.Signal(syscall.SIGKILL)
				}
				waitAll(t, 25*time.Second, survivors...)
				want := map[string]string{"remote": "LOST", "deadline": "DEADLINE"}[tc.expect]
				for _, p := range survivors {
					p.waitFor(t, want, time.Second)
					for line := range strings.Lines(p.out.String()) {
						if strings.HasPrefix(line, want) {
							t.Logf("%s: %s", p.name, strings.TrimSpace(line))
						}
					}
				}
			})
		}
	}
}

// ftNodeLost: every rank all-reduces once; the victims (GONCCL_FT_VICTIMS)
// then wait to be killed while the others issue a second all-reduce and Wait
// for it under a 5 s deadline (GONCCL_FT_EXPECT=remote: it must fail with
// ErrRemote within a second, kept for the next all-reduce and by Revoke) or a
// 1.5 s one (deadline: it must last until then).
func ftNodeLost(t *testing.T, l *nccl.Library, j ftJob, dir string, r, n int) {
	var victims []int
	for _, v := range strings.Split(os.Getenv("GONCCL_FT_VICTIMS"), ",") {
		x, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("GONCCL_FT_VICTIMS: %v", err)
		}
		victims = append(victims, x)
	}
	c, s := ftInit(t, l, j, dir, r, n)
	b := ftIssueAfterKill(t, l, j, c, s, r, n, slices.Contains(victims, r))
	defer b.Free()
	remote := os.Getenv("GONCCL_FT_EXPECT") == "remote"
	limit := 1500 * time.Millisecond
	if remote {
		limit = 5 * time.Second
	}
	began := time.Now()
	wctx, cancel := context.WithTimeout(j.ctx, limit)
	err := c.Wait(wctx, s)
	cancel()
	took := time.Since(began)
	if !remote {
		if !errors.Is(err, context.DeadlineExceeded) || took < limit {
			t.Fatalf("Wait with a peer of this node killed: %v after %v, want the %v deadline", err, took, limit)
		}
		fmt.Printf("DEADLINE: rank %d's Wait ended at its deadline, %v\n", r, took.Round(time.Millisecond))
		return
	}
	if !errors.Is(err, nccl.ErrRemote) || took > time.Second {
		t.Fatalf("Wait with another node's ranks killed: %v after %v, want ErrRemote within 1 s", err, took)
	}
	if err := c.AsyncError(); !errors.Is(err, nccl.ErrRemote) {
		t.Fatalf("AsyncError after the loss: %v, want ErrRemote kept", err)
	}
	// The error stays: a second all-reduce fails the same way, at the call or
	// at its wait, as quickly.
	again := time.Now()
	err = c.AllReduce(b, b, nccl.Sum, s)
	if err == nil {
		wctx, cancel := context.WithTimeout(j.ctx, 5*time.Second)
		err = c.Wait(wctx, s)
		cancel()
	}
	if !errors.Is(err, nccl.ErrRemote) || time.Since(again) > time.Second {
		t.Fatalf("a second all-reduce after the loss: %v after %v, want ErrRemote at once", err, time.Since(again))
	}
	// 2.28.9's and 2.30.7's ncclCommRevoke end with ncclCommGetAsyncError for
	// a non-blocking communicator: the kept error. A blocking one returns
	// what its revoke job returned, and the error stays kept.
	err = c.Revoke(j.ctx)
	if !c.Blocking() && !errors.Is(err, nccl.ErrRemote) {
		t.Fatalf("a non-blocking Revoke after the loss: %v, want ErrRemote", err)
	}
	if c.Blocking() && (err != nil || !errors.Is(c.AsyncError(), nccl.ErrRemote)) {
		t.Fatalf("a blocking Revoke after the loss: %v (async error %v), want nil with ErrRemote kept", err, c.AsyncError())
	}
	c.Abort()
	fmt.Printf("LOST: rank %d's Wait returned ErrRemote after %v, kept; Revoke refused\n", r, took.Round(time.Millisecond))
}
