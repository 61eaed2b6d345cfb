package nccl_test

// Four and eight ranks (issue 14), on the fakes: what the other tests do not
// already run at those counts. TestCollectives, TestNativeAndGrouped,
// TestSendRecvRing and TestAlltoAllvPaths run every collective, type and
// reduction at 4 and 8 ranks (goroutines) on the default and old fakes; here:
// the NCCL 2.30 and VCCL fakes at 4 and 8 ranks, 4 and 8 ranks across
// processes, uneven splits and splits of splits, skewed all-to-all-v layouts,
// and two of four ranks failing under RevokeOnDeadline, shrunk away and grown
// back. Every element of every result is checked against package collectives
// or a Go reference, on random data.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/collectives"
)

// scaleCollectives runs every collective with every type the library has,
// in place and not, each type with one reduction in turn (as mpCollectives),
// the root rotating with the case.
func scaleCollectives(t *testing.T, l *nccl.Library, ranks []rank, rng *rand.Rand) {
	t.Helper()
	n := len(ranks)
	for i, cc := range collCases((3 + n/2) % n) {
		for j, dt := range allTypes(l) {
			red := reduction{name: "none"}
			if cc.reduces {
				red = reductions[(i+j)%len(reductions)]
			}
			runCollective(t, l, ranks, cc, dt, red, false, rng)
			if cc.inPlace(0, n) >= 0 {
				runCollective(t, l, ranks, cc, dt, red, true, rng)
			}
		}
	}
}

// TestScaleCollectivesVariants: every collective at 4 and 8 ranks on the
// NCCL 2.30 and VCCL fakes, each count blocking on one and non-blocking on
// the other (TestCollectives runs the default and old fakes at those counts,
// blocking).
func TestScaleCollectivesVariants(t *testing.T) {
	for i, variant := range []string{"v230", "vccl11"} {
		l := open(t, variant)
		for j, n := range []int{4, 8} {
			m := commModes[(i+j)%2] // each variant and count once, each mode at each count
			t.Run(fmt.Sprintf("%s/%dranks/%s", variant, n, m.name), func(t *testing.T) {
				ranks := startRanks(t, l, n, m)
				scaleCollectives(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 14)))
			})
		}
	}
}

// TestScaleMultiProcess: 4 ranks as 2 processes of 2 and as 4 processes of 1,
// 8 ranks as 2 processes of 4, every collective, a ring, all-to-all-v and a
// split across processes (TestFakeMPChild's "job"), each process checking
// its ranks' elements.
func TestScaleMultiProcess(t *testing.T) {
	for _, c := range []struct {
		name   string
		layout [][]int
		env    []string
	}{
		{"4ranks-2x2-commid", [][]int{{0, 1}, {2, 3}}, []string{"GONCCL_MP_BLOCKING=1"}},
		{"4ranks-4x1-commid-nonblocking", [][]int{{0}, {1}, {2}, {3}}, nil},
		{"4ranks-1+3-vccl11", [][]int{{3}, {0, 1, 2}}, []string{"GONCCL_MP_VARIANT=vccl11", "GONCCL_MP_BLOCKING=1"}},
		{"8ranks-2x4-commid", [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}, []string{"GONCCL_MP_BLOCKING=1"}},
		{"8ranks-4x2-v230-nonblocking", [][]int{{6, 7}, {0, 1}, {2, 3}, {4, 5}}, []string{"GONCCL_MP_VARIANT=v230"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			procs := runJob(t, "job", c.layout, append([]string{"NCCL_COMM_ID=" + freeAddr(t)}, c.env...)...)
			for _, p := range procs {
				if !strings.Contains(p.out.String(), "job: ranks ") {
					t.Errorf("%s did not finish its job:\n%s", p.name, p.out)
				}
			}
		})
	}
}

// splitCase is one split of n ranks: each rank's color and key.
type splitCase struct {
	name   string
	colors []int
	keys   func(rng *rand.Rand, n int) []int
}

// shuffledKeys: distinct keys in a random order.
func shuffledKeys(rng *rand.Rand, n int) []int {
	k := rng.Perm(n)
	for i := range k {
		k[i] = k[i]*7 - 20 // negative keys too
	}
	return k
}

// tiedKeys: keys 0..2 drawn at random, so that ties are broken by the parent
// rank.
func tiedKeys(rng *rand.Rand, n int) []int {
	k := make([]int, n)
	for i := range k {
		k[i] = rng.IntN(3)
	}
	return k
}

const noColor = nccl.SplitNoColor

var splitCases = []splitCase{
	{"8ranks-2groups", []int{4, 9, 4, 4, noColor, 9, 4, 4}, shuffledKeys},
	{"8ranks-3groups", []int{0, 0, 0, 1, 1, 2, 2, 2}, shuffledKeys},
	{"8ranks-4groups-nocolor", []int{3, 0, 1, 0, noColor, 3, 1, 2}, tiedKeys},
	{"8ranks-4groups-ties", []int{1, 1, 2, 0, 3, 2, 0, 1}, tiedKeys},
	{"4ranks-2groups", []int{1, 0, 1, 0}, shuffledKeys},
	{"4ranks-2groups-nocolor", []int{2, noColor, 2, 5}, tiedKeys},
	{"4ranks-4groups", []int{3, 2, 1, 0}, shuffledKeys},
}

// splitMembers is, for each color, its members' parent ranks in the order of
// their new ranks: by key, then by parent rank.
func splitMembers(colors, keys []int) map[int][]int {
	groups := map[int][]int{}
	for r, c := range colors {
		if c != noColor {
			groups[c] = append(groups[c], r)
		}
	}
	for _, m := range groups {
		slices.SortStableFunc(m, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	}
	return groups
}

// splitRanks splits parent (every rank calling Split at once) by colors and
// keys and checks each rank's place: nil for SplitNoColor, else the position
// of its parent rank in its color's members. The new communicators share the
// parent ranks' streams; cleanup closes them. It returns each color's ranks
// in new-rank order.
func splitRanks(t *testing.T, ctx context.Context, parent []rank, colors, keys []int) map[int][]rank {
	t.Helper()
	n := len(parent)
	subs := make([]*nccl.Comm, n)
	all := make([]int, n)
	for r := range all {
		all[r] = r
	}
	onRanks(t, all, func(r int) error {
		sub, err := parent[r].comm.Split(ctx, colors[r], keys[r], nil)
		subs[r] = sub
		return err
	})
	t.Cleanup(func() {
		for _, s := range subs {
			if s != nil {
				s.Close(context.Background())
			}
		}
	})
	out := map[int][]rank{}
	for c, members := range splitMembers(colors, keys) {
		for i, p := range members {
			sub := subs[p]
			if sub == nil {
				t.Fatalf("parent rank %d (color %d): nil communicator", p, c)
			}
			if sub.Rank() != i || sub.Size() != len(members) || sub.Device() != parent[p].dev ||
				sub.Blocking() != parent[p].comm.Blocking() {
				t.Fatalf("parent rank %d (color %d, key %d): rank %d of %d on device %d (blocking %v), want %d of %d (members by key %v) on %d",
					p, c, keys[p], sub.Rank(), sub.Size(), sub.Device(), sub.Blocking(), i, len(members), members, parent[p].dev)
			}
			out[c] = append(out[c], rank{comm: sub, s: parent[p].s, dev: parent[p].dev})
		}
	}
	for r, c := range colors {
		if c == noColor && subs[r] != nil {
			t.Fatalf("parent rank %d passed SplitNoColor and got a communicator (rank %d of %d)", r, subs[r].Rank(), subs[r].Size())
		}
	}
	return out
}

// gatherOrder all-gathers each member's tag in a group and checks the result
// is the tags in new-rank order: the data follows the ranks the communicators
// report.
func gatherOrder(t *testing.T, ctx context.Context, group []rank, tag func(i int) int64) {
	t.Helper()
	n := len(group)
	want := make([]int64, n)
	for i := range n {
		want[i] = tag(i)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	onRanks(t, idx, func(i int) error {
		rk := group[i]
		cu := rk.comm.Library().CUDA()
		buf, err := cu.Alloc(rk.dev, nccl.Int64, n)
		if err != nil {
			return err
		}
		defer buf.Free()
		if err := nccl.CopyIn(buf.Slice(i, i+1), []int64{tag(i)}); err != nil {
			return err
		}
		if err := rk.comm.AllGather(buf.Slice(i, i+1), buf, rk.s); err != nil {
			return err
		}
		if err := rk.comm.Wait(ctx, rk.s); err != nil {
			return err
		}
		got := make([]int64, n)
		if err := nccl.CopyOut(got, buf); err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("all-gather of the members' tags = %v, want %v", got, want)
		}
		return nil
	})
}

// groupCollectives runs every collective on one group, one type each with a
// reduction in turn, and checks every element.
func groupCollectives(t *testing.T, l *nccl.Library, group []rank, rng *rand.Rand) {
	t.Helper()
	n := len(group)
	types := []nccl.DataType{nccl.Float32, nccl.Int64, nccl.Bfloat16, nccl.Uint8}
	for i, cc := range collCases(rng.IntN(n)) {
		dt := types[(i+n)%len(types)]
		red := reduction{name: "none"}
		if cc.reduces {
			red = reductions[(i+n)%len(reductions)]
		}
		runCollective(t, l, group, cc, dt, red, false, rng)
		if cc.inPlace(0, n) >= 0 {
			runCollective(t, l, group, cc, dt, red, true, rng)
		}
	}
}

// TestScaleSplit splits 8 and 4 ranks unevenly into 2, 3 and 4 groups, with
// shuffled keys (some tied: the parent rank breaks ties) and ranks passing
// SplitNoColor; each group's ranks are checked in key order (the numbers the
// communicators report and the order an all-gather puts their data in), and
// every collective runs in every group. Then each 8-rank split's largest
// group is split again, and one of those groups once more.
func TestScaleSplit(t *testing.T) {
	l := open(t, "default")
	for _, m := range commModes {
		for ci, sc := range splitCases {
			t.Run(m.name+"/"+sc.name, func(t *testing.T) { scaleSplit(t, l, m, sc, uint64(ci)) })
		}
	}
}

// scaleSplit is one case of TestScaleSplit on l (NCCL >= 2.18), with
// len(sc.colors) ranks on devices r%8.
func scaleSplit(t *testing.T, l *nccl.Library, m commMode, sc splitCase, seed uint64) {
	n := len(sc.colors)
	rng := rand.New(rand.NewPCG(seed, 14))
	parent := initRanksCtx(t, l, n, m.ctx(t)) // no fake-only checks: runs on a real NCCL too
	ctx := m.ctx(t)
	keys := sc.keys(rng, n)
	groups := splitRanks(t, ctx, parent, sc.colors, keys)
	colors := slices.Sorted(maps.Keys(groups))
	members := splitMembers(sc.colors, keys)
	for _, c := range colors {
		gatherOrder(t, ctx, groups[c], func(i int) int64 { return int64(members[c][i]*1000 + c) })
		groupCollectives(t, l, groups[c], rng)
	}
	if n < 8 {
		return
	}
	// Split a split: the largest group, by a new color and reversed
	// keys, with its last rank out; then the larger half again.
	var big []rank
	bigColor := colors[0]
	for _, c := range colors {
		if len(groups[c]) > len(big) {
			big, bigColor = groups[c], c
		}
	}
	k := len(big)
	colors2, keys2 := make([]int, k), make([]int, k)
	for i := range k {
		switch {
		case k >= 5 && i == k-1:
			colors2[i] = noColor
		case k >= 5:
			colors2[i] = 7 * (i % 2)
		case k >= 3 && i == k-1:
			colors2[i] = 7 // a group of one
		}
		keys2[i] = -i
	}
	groups2 := splitRanks(t, ctx, big, colors2, keys2)
	members2 := splitMembers(colors2, keys2)
	for c, g := range groups2 {
		// tag: the rank in the 8-rank parent
		gatherOrder(t, ctx, g, func(i int) int64 { return int64(members[bigColor][members2[c][i]]) })
		groupCollectives(t, l, g, rng)
	}
	g := groups2[0]
	if len(g) < 2 {
		t.Fatalf("nested split: group 0 has %d ranks", len(g))
	}
	colors3, keys3 := make([]int, len(g)), make([]int, len(g))
	for i := range g {
		colors3[i], keys3[i] = 1, rng.IntN(100)
	}
	groups3 := splitRanks(t, ctx, g, colors3, keys3)
	members3 := splitMembers(colors3, keys3)
	gatherOrder(t, ctx, groups3[1], func(i int) int64 {
		return int64(members[bigColor][members2[0][members3[1][i]]])
	})
	groupCollectives(t, l, groups3[1], rng)
}

// a2avCase is an all-to-all-v of n ranks: counts[i][j] elements from rank i
// to rank j.
type a2avCase struct {
	name   string
	counts func(rng *rand.Rand, n int) [][]int
}

func zeroCounts(n int) [][]int {
	c := make([][]int, n)
	for i := range c {
		c[i] = make([]int, n)
	}
	return c
}

var a2avCases = []a2avCase{
	{"one-rank-sends-most", func(rng *rand.Rand, n int) [][]int {
		c := zeroCounts(n)
		for i := range n {
			for j := range n {
				if i == 1 {
					c[i][j] = 3000 + rng.IntN(1000)
				} else {
					c[i][j] = rng.IntN(4)
				}
			}
		}
		return c
	}},
	{"empty-rows", func(rng *rand.Rand, n int) [][]int {
		c := zeroCounts(n)
		for i := range n {
			if i == 0 || i == n-2 {
				continue // ranks 0 and n-2 send nothing
			}
			for j := range n {
				c[i][j] = 1 + rng.IntN(200)
			}
		}
		return c
	}},
	{"sends-nothing-receives-something", func(rng *rand.Rand, n int) [][]int {
		c := zeroCounts(n)
		for i := range n {
			for j := range n {
				switch {
				case i == n-1: // sends nothing, receives from everyone else
				case j == 2: // rank 2 sends but receives nothing
				case j == n-1:
					c[i][j] = 5 + i
				default:
					c[i][j] = rng.IntN(30)
				}
			}
		}
		return c
	}},
	{"one-pair", func(rng *rand.Rand, n int) [][]int {
		c := zeroCounts(n)
		c[n-1][1] = 777
		return c
	}},
	{"sparse", func(rng *rand.Rand, n int) [][]int {
		c := zeroCounts(n)
		for i := range n {
			for j := range n {
				if rng.IntN(2) == 0 {
					c[i][j] = 1 + rng.IntN(300)
				}
			}
		}
		return c
	}},
	{"all-zero", func(rng *rand.Rand, n int) [][]int { return zeroCounts(n) }},
}

// a2avLayout lays counts out: blocks in rank order in the send buffers and in
// reverse rank order in the receive buffers, with a gap of gap elements
// before each (which the exchange must leave alone). It returns the buffers'
// lengths (at least 1).
func a2avLayout(counts [][]int, gap int) (m nccl.Layout, sendLen, recvLen []int) {
	n := len(counts)
	m = nccl.Layout{SendCounts: make([]uint64, n*n), SendDispls: make([]uint64, n*n),
		RecvCounts: make([]uint64, n*n), RecvDispls: make([]uint64, n*n)}
	sendLen, recvLen = make([]int, n), make([]int, n)
	for i := range n {
		off := 0
		for j := range n {
			off += gap
			m.SendCounts[i*n+j], m.SendDispls[i*n+j] = uint64(counts[i][j]), uint64(off)
			off += counts[i][j]
		}
		sendLen[i] = max(off, 1)
	}
	for j := range n {
		off := 0
		for i := n - 1; i >= 0; i-- {
			off += gap
			m.RecvCounts[j*n+i], m.RecvDispls[j*n+i] = uint64(counts[i][j]), uint64(off)
			off += counts[i][j]
		}
		recvLen[j] = max(off, 1)
	}
	return m, sendLen, recvLen
}

// TestScaleAlltoAllvSkewed runs skewed all-to-all-v layouts at 4 and 8 ranks
// (one rank sending most of the data, ranks sending nothing, a rank sending
// nothing but receiving, a rank receiving nothing, one block in all, an
// all-zero matrix) on symmetric buffers: on the default fake by grouped
// Send/Recv, on the VCCL fake by its native ncclAlltoAllv and, forced, grouped.
// Every element of every receive buffer is checked, the gaps between blocks
// included.
func TestScaleAlltoAllvSkewed(t *testing.T) {
	for _, v := range []struct {
		variant string
		path    nccl.Path
		want    nccl.Path
	}{{"default", nccl.Auto, nccl.Grouped}, {"vccl11", nccl.Auto, nccl.Native}, {"vccl11", nccl.Grouped, nccl.Grouped}} {
		l := open(t, v.variant)
		for _, n := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s-%v/%dranks", v.variant, v.want, n), func(t *testing.T) {
				ranks := initRanks(t, l, n)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(v.path)+14))
				types := []nccl.DataType{nccl.Float16, nccl.Int64, nccl.Uint8, nccl.Float32, nccl.Bfloat16, nccl.Int32}
				for ci, c := range a2avCases {
					dt := types[ci%len(types)]
					alltoallvCheck(t, l, ranks, c.name, c.counts(rng, n), dt, ci%3, v.path, v.want, rng)
				}
			})
		}
	}
}

// alltoallvCheck runs one exchange of counts on symmetric buffers on path
// (PathOf must say want) and checks every element against package
// collectives.
func alltoallvCheck(t *testing.T, l *nccl.Library, ranks []rank, name string, counts [][]int, dt nccl.DataType,
	gap int, path, want nccl.Path, rng *rand.Rand) {
	t.Helper()
	n := len(ranks)
	m, sendLen, recvLen := a2avLayout(counts, gap)
	sends, recvs := make([][]byte, n), make([][]byte, n)
	for r := range n {
		vals := make([]float64, sendLen[r])
		for i := range vals {
			vals[i] = collectives.Random(rng, dt, nccl.Sum)
		}
		sends[r] = collectives.Encode(dt, vals)
		recvs[r] = repeat(dt, recvLen[r], 7)
	}
	ref := collectives.AlltoAllv(dt, m, sends, recvs)
	got := make([][]byte, n)
	eachRank(t, ranks, func(r int, rk rank) error {
		send, err := rk.comm.AllocSymmetric(dt, sendLen[r]) // collective: every rank at once
		if err != nil {
			return err
		}
		defer send.Free()
		recv, err := rk.comm.AllocSymmetric(dt, recvLen[r])
		if err != nil {
			return err
		}
		defer recv.Free()
		if err := send.WriteBytes(sends[r]); err != nil {
			return err
		}
		if err := recv.WriteBytes(recvs[r]); err != nil {
			return err
		}
		if err := rk.comm.SetPath(path); err != nil {
			return err
		}
		defer rk.comm.SetPath(nccl.Auto)
		if p := rk.comm.PathOf("AlltoAllv"); p != want {
			return fmt.Errorf("%s: PathOf(AlltoAllv) = %v, want %v", name, p, want)
		}
		if err := rk.comm.AlltoAllv(send, recv, m, rk.s); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := rk.s.Synchronize(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		got[r] = make([]byte, recv.Size())
		return recv.ReadBytes(got[r])
	})
	sz := dt.Size()
	for r := range n {
		if i := collectives.Mismatch(dt, got[r], ref[r]); i >= 0 {
			t.Fatalf("%s, %v, %d ranks, %v: rank %d element %d = %v, want %v", name, dt, n, want, r, i,
				collectives.Decode(dt, got[r][i*sz:(i+1)*sz])[0], collectives.Decode(dt, ref[r][i*sz:(i+1)*sz])[0])
		}
	}
}

// TestScaleFaultTolerance: of 4 ranks (and of 8), some "fail" while the
// others hang in an all-reduce they never join (one failed rank's
// communicator aborted during the hang, the others abandoned). The survivors'
// Wait under RevokeOnDeadline revokes; they shrink the failed ranks away with
// ShrinkAbort, renumbered in order, and all-reduce; then they grow back to
// the full size with new ranks (GrowID, Grow, Library.GrowRank on the failed
// ranks' GPUs), all-reduce again and run every collective once.
func TestScaleFaultTolerance(t *testing.T) {
	for _, c := range []struct {
		n      int
		failed []int
	}{{4, []int{2, 3}}, {4, []int{0, 2}}, {8, []int{1, 4, 6}}} {
		for _, m := range commModes {
			t.Run(fmt.Sprintf("%dranks-fail%v/%s", c.n, joinInts(c.failed), m.name), func(t *testing.T) {
				scaleFault(t, open(t, "v230"), c.n, c.failed, m)
			})
		}
	}
}

// scaleFault is one run of TestScaleFaultTolerance on l (NCCL >= 2.29.2):
// n ranks on devices r%8, those in failed failing.
func scaleFault(t *testing.T, l *nccl.Library, n int, failed []int, m commMode) {
	ranks := initRanksCtx(t, l, n, m.ctx(t))
	ctx := m.ctx(t)
	all := make([]int, n)
	for r := range all {
		all[r] = r
	}
	var survivors []int
	for r := range n {
		if !slices.Contains(failed, r) {
			survivors = append(survivors, r)
		}
	}
	onRanks(t, all, func(r int) error { return sumCheck(ctx, ranks[r].comm, ranks[r].s, uint64(r), tags(all...)) })
	for _, r := range survivors {
		if err := ranks[r].comm.SetDeadlineAction(nccl.RevokeOnDeadline); err != nil {
			t.Fatal(err)
		}
	}
	hang(t, ranks, survivors...)
	// The first failed rank's communicator is aborted while the others hang;
	// the rest are abandoned (aborted at the end, as a dead process's are
	// never).
	if err := ranks[failed[0]].comm.Abort(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range failed {
			ranks[r].comm.Abort()
		}
	})
	onRanks(t, survivors, func(r int) error {
		wctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c := ranks[r].comm
		err := c.Wait(wctx, ranks[r].s)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "revoked") || !c.Revoked() {
			return fmt.Errorf("Wait: %v (revoked %v), want the deadline and a revoked communicator", err, c.Revoked())
		}
		select {
		case <-c.Done():
			return errors.New("the communicator was freed: aborted, not revoked")
		default:
		}
		return ranks[r].s.Synchronize() // the hung all-reduce was stopped
	})
	k := len(survivors)
	subs := make([]*nccl.Comm, n)
	onRanks(t, survivors, func(r int) error {
		sub, err := ranks[r].comm.Shrink(ctx, failed, nil, nccl.ShrinkAbort)
		if err != nil {
			return err
		}
		subs[r] = sub
		t.Cleanup(func() { sub.Close(context.Background()) })
		if want := slices.Index(survivors, r); sub.Rank() != want || sub.Size() != k || sub.Device() != ranks[r].dev ||
			sub.Blocking() != ranks[r].comm.Blocking() {
			return fmt.Errorf("shrunk to rank %d of %d on device %d (blocking %v), want %d of %d on %d",
				sub.Rank(), sub.Size(), sub.Device(), sub.Blocking(), want, k, ranks[r].dev)
		}
		return sumCheck(ctx, sub, ranks[r].s, uint64(r), tags(survivors...))
	})
	shrunk := make([]rank, k)
	for i, r := range survivors {
		shrunk[i] = rank{comm: subs[r], s: ranks[r].s, dev: ranks[r].dev}
	}
	rng := rand.New(rand.NewPCG(uint64(n), 15))
	runCollective(t, l, shrunk, collCases(0)[0], nccl.Float32, reductions[0], false, rng) // all-reduce, random data

	// Grow back: the survivors keep their numbers 0..k-1, new ranks on the
	// failed ranks' GPUs take k..n-1 (tags 100+).
	id, err := subs[survivors[0]].GrowID()
	if err != nil {
		t.Fatal(err)
	}
	grown := make([]rank, n)
	growTags := make([]uint64, n)
	for i, r := range survivors {
		grown[i] = rank{s: ranks[r].s, dev: ranks[r].dev}
		growTags[i] = uint64(r)
	}
	for i, r := range failed {
		g := k + i
		s, err := l.CUDA().NewStream(ranks[r].dev, nccl.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Destroy() })
		grown[g] = rank{s: s, dev: ranks[r].dev}
		growTags[g] = uint64(100 + r)
	}
	onRanks(t, all, func(g int) error {
		var c *nccl.Comm
		var err error
		switch {
		case g == 0:
			c, err = shrunk[0].comm.Grow(ctx, n, &id, nil)
		case g < k:
			c, err = shrunk[g].comm.Grow(ctx, n, nil, nil)
		default:
			c, err = l.GrowRank(ctx, grown[g].dev, id, n, g, modeOf(ctx, nil))
		}
		if err != nil {
			return err
		}
		grown[g].comm = c
		t.Cleanup(func() { c.Close(context.Background()) })
		if c.Rank() != g || c.Size() != n || c.Device() != grown[g].dev || c.Blocking() == m.nonBlocking {
			return fmt.Errorf("grown comm says rank %d of %d on device %d (blocking %v), want %d of %d on %d",
				c.Rank(), c.Size(), c.Device(), c.Blocking(), g, n, grown[g].dev)
		}
		return sumCheck(ctx, c, grown[g].s, growTags[g], growTags)
	})
	for _, cc := range collCases(n - 1) {
		runCollective(t, l, grown, cc, nccl.Bfloat16, reductions[rng.IntN(len(reductions))], false, rng)
	}
	// The revoked communicators close without finalizing.
	for _, r := range survivors {
		if err := ranks[r].comm.Close(ctx); err != nil {
			t.Errorf("rank %d: Close of the revoked communicator: %v", r, err)
		}
	}
}
