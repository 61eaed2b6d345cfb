package nccl

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// doneAfter is a wait's condition that holds d after its first poll.
func doneAfter(d time.Duration) func() (bool, error) {
	var t0 time.Time
	return func() (bool, error) {
		if t0.IsZero() {
			t0 = time.Now()
		}
		return time.Since(t0) >= d, nil
	}
}

// TestWaitSpinsWithoutParking: while a wait spins, with a P to spare, its OS
// thread never parks. The wait used to call runtime.Gosched every 16th poll,
// which for a goroutine locked to its thread parks the thread until another
// hands the goroutine back (about 20 µs); the kernel counts each park as a
// voluntary context switch of the thread (getrusage RUSAGE_THREAD): 519 to
// 656 in 100 waits of 300 µs before, none after (a kernel yield is an
// involuntary one). A few are allowed for the garbage collector's stops.
func TestWaitSpinsWithoutParking(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := &Comm{}
	const waits = 100
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		t.Fatal(err)
	}
	for range waits {
		if err := c.waitFor(context.Background(), "test", doneAfter(300*time.Microsecond)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
		t.Fatal(err)
	}
	if n := after.Nvcsw - before.Nvcsw; n > 5 {
		t.Errorf("the waiting thread parked %d times in %d waits of 300 µs: the wait yields its goroutine while it spins", n, waits)
	}
	if n := spinning.Load(); n != 0 {
		t.Errorf("%d waits still counted as spinning after they ended", n)
	}
}

// TestWaitSharesBusyPs: where spinning waits hold every P (GOMAXPROCS=1 with
// one, GOMAXPROCS=2 with two ranks waiting at once), they still yield to the
// Go scheduler, so that another goroutine (the test's own) runs while they
// spin. With the kernel's yields alone it ran only at the runtime's 10 ms
// preemption: 1 or 2 turns in 100 waits.
func TestWaitSharesBusyPs(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(map[int]string{1: "one P", 2: "two Ps"}[procs], func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			c := &Comm{}
			const waits = 100
			errs := make([]error, procs)
			var finished atomic.Int32
			for w := range procs {
				go func() {
					defer finished.Add(1)
					for range waits / procs {
						if errs[w] = c.waitFor(context.Background(), "test", doneAfter(300*time.Microsecond)); errs[w] != nil {
							return
						}
					}
				}()
			}
			// Sleep until the waits spin on every P: a goroutine that
			// yields all along would keep the scheduler from stealing a
			// wait queued behind the other (it serialised them).
			for spinning.Load() < int32(procs) && finished.Load() == 0 {
				time.Sleep(20 * time.Microsecond)
			}
			turns := 0
			for finished.Load() < int32(procs) {
				if spinning.Load() >= int32(procs) { // a turn while the waits spin on every P
					turns++
				}
				runtime.Gosched()
			}
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d turns", turns)
			if turns < waits {
				t.Errorf("another goroutine ran %d times while %d waits spun on all %d P(s): the waits kept them", turns, waits, procs)
			}
		})
	}
}
