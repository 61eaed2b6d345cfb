package ccall

import (
	"slices"
	"testing"
	"unsafe"
)

// callLog empties the C side's log (testdata/args.c).
func callLog(t *testing.T, h uintptr) []uint64 {
	t.Helper()
	var out [64]uint64
	n := int(Call(sym(t, h, "take_log"), uintptr(unsafe.Pointer(&out[0]))))
	return slices.Clone(out[:n])
}

// TestBatchEverySlot: every argument slot of every entry arrives, for entries
// one after another (the loop keeps its state across the C calls).
func TestBatchEverySlot(t *testing.T) {
	h := lib(t)
	callLog(t, h)
	es := make([]Entry, 5)
	var want []uint64
	for k := range es {
		es[k].Fn = sym(t, h, "weigh11")
		var s uint64
		for i := range es[k].Args {
			v := uintptr(0x1000_0000_0000_0001)*uintptr(i+1+k*11) ^ uintptr(k)<<50
			es[k].Args[i] = v
			s = s*1000003 + uint64(v)
		}
		want = append(want, s)
	}
	if got := Batch(es, 0); got != -1 {
		t.Fatalf("Batch = %d, want -1", got)
	}
	if got := callLog(t, h); !slices.Equal(got, want) {
		t.Errorf("sums %x, want %x", got, want)
	}
	for k := range es {
		if es[k].R != 0 {
			t.Errorf("entry %d: R %#x, want 0", k, es[k].R)
		}
		// Call, the reference, agrees.
		a := es[k].Args
		Call(es[k].Fn, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10])
		if got := callLog(t, h); !slices.Equal(got, want[k:k+1]) {
			t.Errorf("Call: sum %x, want %x", got, want[k])
		}
	}
}

// TestBatchStops: the batch stops after the first result that is neither 0
// nor alsoOK, and says which; the results are C ints, NotCalled after it.
func TestBatchStops(t *testing.T) {
	h := lib(t)
	logged := sym(t, h, "logged")
	callLog(t, h)
	for _, tc := range []struct {
		name    string
		rets    []int32
		failed  int
		run     []uint64
		results []uintptr
	}{
		{"all succeed", []int32{0, 0, 7, 0}, -1, []uint64{0, 1, 2, 3}, []uintptr{0, 0, 7, 0}},
		{"one fails", []int32{0, 0, 5, 0, 0}, 2, []uint64{0, 1, 2}, []uintptr{0, 0, 5, NotCalled, NotCalled}},
		{"the first fails", []int32{2, 0}, 0, []uint64{0}, []uintptr{2, NotCalled}},
		{"negative", []int32{-1, 0}, 0, []uint64{0}, []uintptr{0xffffffff, NotCalled}},
		{"the last fails", []int32{7, 4}, 1, []uint64{0, 1}, []uintptr{7, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := make([]Entry, len(tc.rets))
			for i, r := range tc.rets {
				es[i] = Entry{Fn: logged, R: 12345}
				es[i].Args[0], es[i].Args[1] = uintptr(i), uintptr(uint32(r))
			}
			if got := Batch(es, 7); got != tc.failed {
				t.Errorf("Batch = %d, want %d", got, tc.failed)
			}
			if got := callLog(t, h); !slices.Equal(got, tc.run) {
				t.Errorf("called %v, want %v", got, tc.run)
			}
			for i, want := range tc.results {
				if es[i].R != want {
					t.Errorf("entry %d: R %#x, want %#x", i, es[i].R, want)
				}
			}
		})
	}
}

func TestBatchNoAllocs(t *testing.T) {
	fn := sym(t, lib(t), "noop")
	es := make([]Entry, 4)
	for i := range es {
		es[i].Fn = fn
	}
	if n := testing.AllocsPerRun(1000, func() { Batch(es, 0) }); n != 0 {
		t.Fatalf("Batch allocates %v times per call", n)
	}
}

// BenchmarkBatch4 against BenchmarkCallLoop4: four calls in one switch to
// the system stack, and in four.
func BenchmarkBatch4(b *testing.B) {
	fn := sym(b, lib(b), "noop")
	es := make([]Entry, 4)
	for i := range es {
		es[i].Fn = fn
	}
	b.ReportAllocs()
	for b.Loop() {
		Batch(es, 0)
	}
}

func BenchmarkCallLoop4(b *testing.B) {
	fn := sym(b, lib(b), "noop")
	b.ReportAllocs()
	for b.Loop() {
		for range 4 {
			Call(fn, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		}
	}
}
