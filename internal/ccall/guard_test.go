package ccall

import (
	"runtime"
	"testing"
)

// onFreshThread runs fn locked to an OS thread that no later test reuses: the
// goroutine stays locked when it ends, so the runtime retires its thread. The
// thread itself may be one an earlier test ran on (a new goroutine starts on
// any idle thread): a test that needs a thread without a device calls
// dev_clear first.
func onFreshThread(fn func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		fn()
	}()
	<-done
}

func TestCallOn(t *testing.T) {
	h := lib(t)
	g := &Guard{Get: sym(t, h, "dev_get"), Set: sym(t, h, "dev_set")}
	here, sets, set := sym(t, h, "dev_here"), sym(t, h, "dev_sets"), sym(t, h, "dev_set")
	failGet, weigh, noDev := sym(t, h, "dev_fail_get"), sym(t, h, "weigh24"), sym(t, h, "dev_clear")
	onFreshThread(func() {
		Call(noDev) // a new goroutine's thread may have run an earlier test's calls
		before := Call(sets)
		// A thread without a device gets dev before fn runs, once.
		if r, ge := CallOn(g, 3, here); r != 3 || ge != 0 {
			t.Errorf("first CallOn(3): fn saw device %d (guard %d), want 3", r, ge)
		}
		if r, ge := CallOn(g, 5, here); r != 3 || ge != 0 {
			t.Errorf("CallOn(5) on a thread on device 3: fn saw device %d (guard %d), want 3 (left alone)", r, ge)
		}
		if n := Call(sets) - before; n != 1 {
			t.Errorf("%d cudaSetDevice calls, want 1", n)
		}
	})
	onFreshThread(func() {
		// Every argument slot passes through the guard.
		var a [24]uintptr
		var want uint64
		for i := range a {
			a[i] = uintptr(0x1000_0000_0000_0001)*uintptr(i+1) ^ uintptr(i)<<40
			want = want*1000003 + uint64(a[i])
		}
		r, ge := CallOn(g, 2, weigh, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
			a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23])
		if uint64(r) != want || ge != 0 {
			t.Errorf("weigh24 through CallOn = %#x (guard %d), want %#x", r, ge, want)
		}
	})
	onFreshThread(func() {
		// Calls of every length, short frame and whole frame, through the
		// guard: the first on a thread without a device.
		Call(noDev)
		fn := sym(t, h, "weighn")
		for n := 0; n < MaxArgs; n++ {
			args, want := weighnCase(n)
			if r, ge := CallOn(g, 2, fn, args...); uint64(r) != want || ge != 0 {
				t.Errorf("weighn with %d arguments through CallOn = %#x (guard %d), want %#x", len(args), r, ge, want)
			}
		}
		if d := Call(here); d != 2 {
			t.Errorf("after the calls the thread is on device %d, want 2", d)
		}
	})
	onFreshThread(func() {
		// A refused device: the guard's error, fn not called.
		Call(noDev)
		if r, ge := CallOn(g, 99, set, 7); ge != 101 || r != 0 {
			t.Errorf("CallOn(99): guard %d, fn result %d; want guard 101 and fn not called", ge, r)
		}
		if d := Call(here); d != 0 {
			t.Errorf("after the refusal the thread is on device %d, want 0 (fn not called)", d)
		}
	})
	onFreshThread(func() {
		Call(failGet, 35)
		defer Call(failGet, 0)
		if r, ge := CallOn(g, 4, here); ge != 35 || r != 0 {
			t.Errorf("failing cudaGetDevice: guard %d, fn result %d; want guard 35 and fn not called", ge, r)
		}
	})
}

// TestCallOnThreadMark: with CacheThreads, the guard asks a thread for its
// device once: a thread it put on a device, or found on one, is marked, and
// later calls go straight to fn, on that device. A guard call that fails
// marks nothing, and another guard's key does not see this one's marks.
func TestCallOnThreadMark(t *testing.T) {
	h := lib(t)
	g := &Guard{Get: sym(t, h, "dev_get"), Set: sym(t, h, "dev_set")}
	if !g.CacheThreads() {
		t.Fatal("CacheThreads: no pthread key")
	}
	here, sets, gets, set := sym(t, h, "dev_here"), sym(t, h, "dev_sets"), sym(t, h, "dev_gets"), sym(t, h, "dev_set")
	failGet, noDev := sym(t, h, "dev_fail_get"), sym(t, h, "dev_clear")
	count := func(f func()) (getCalls, setCalls int) {
		g0, s0 := Call(gets), Call(sets)
		f()
		return int(Call(gets) - g0), int(Call(sets) - s0)
	}
	onFreshThread(func() {
		Call(noDev)
		gc, sc := count(func() {
			for i := range 10 {
				if r, ge := CallOn(g, 3, here); r != 3 || ge != 0 {
					t.Errorf("call %d: fn saw device %d (guard %d), want 3", i, r, ge)
				}
			}
		})
		if gc != 1 || sc != 1 {
			t.Errorf("10 calls on a thread without a device: %d cudaGetDevice, %d cudaSetDevice; want 1 and 1", gc, sc)
		}
	})
	onFreshThread(func() {
		Call(noDev)
		Call(set, 5) // the thread chose its device itself
		gc, sc := count(func() {
			for range 10 {
				if r, _ := CallOn(g, 3, here); r != 5 {
					t.Errorf("fn saw device %d on a thread on device 5", r)
				}
			}
		})
		if gc != 1 || sc != 0 {
			t.Errorf("10 calls on a thread on device 5: %d cudaGetDevice, %d cudaSetDevice; want 1 and 0", gc, sc)
		}
		g2 := &Guard{Get: g.Get, Set: g.Set}
		if !g2.CacheThreads() {
			t.Fatal("second key")
		}
		if gc, _ := count(func() { CallOn(g2, 3, here) }); gc != 1 {
			t.Errorf("another guard's first call on a thread marked for the first: %d cudaGetDevice, want 1", gc)
		}
	})
	onFreshThread(func() {
		Call(noDev)
		if _, ge := CallOn(g, 99, here); ge != 101 {
			t.Fatalf("refused device: guard %d, want 101", ge)
		}
		if r, ge := CallOn(g, 4, here); r != 4 || ge != 0 {
			t.Errorf("after a refused cudaSetDevice: fn saw device %d (guard %d), want 4 (the thread was not marked)", r, ge)
		}
	})
	onFreshThread(func() {
		Call(noDev)
		Call(failGet, 35)
		_, ge := CallOn(g, 4, here)
		Call(failGet, 0)
		if ge != 35 {
			t.Fatalf("failing cudaGetDevice: guard %d, want 35", ge)
		}
		if r, ge := CallOn(g, 4, here); r != 4 || ge != 0 {
			t.Errorf("after a failed cudaGetDevice: fn saw device %d (guard %d), want 4 (the thread was not marked)", r, ge)
		}
	})
}

func TestCallOnNoAllocs(t *testing.T) {
	h := lib(t)
	g := &Guard{Get: sym(t, h, "dev_get"), Set: sym(t, h, "dev_set")}
	fn := sym(t, h, "weigh24")
	if n := testing.AllocsPerRun(1000, func() { CallOn(g, 1, fn, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11) }); n != 0 {
		t.Fatalf("CallOn allocates %v times per call", n)
	}
}

// BenchmarkCallOnMarked is BenchmarkCallOn with the thread mark: after the
// first call, one pthread_getspecific instead of a cudaGetDevice.
func BenchmarkCallOnMarked(b *testing.B) {
	h := lib(b)
	g := &Guard{Get: sym(b, h, "dev_get"), Set: sym(b, h, "dev_set")}
	if !g.CacheThreads() {
		b.Fatal("no pthread key")
	}
	fn := sym(b, h, "noop")
	b.ReportAllocs()
	for b.Loop() {
		CallOn(g, 1, fn)
	}
}

func BenchmarkCallOn(b *testing.B) {
	h := lib(b)
	g := &Guard{Get: sym(b, h, "dev_get"), Set: sym(b, h, "dev_set")}
	fn := sym(b, h, "noop")
	b.ReportAllocs()
	for b.Loop() {
		CallOn(g, 1, fn)
	}
}
