package nccl

import (
	"context"
	"runtime"
	"runtime/debug"
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
// thread does not park. The wait used to call runtime.Gosched every 16th
// poll, which for a goroutine locked to its thread parks the thread until
// another hands the goroutine back; the kernel counts each park as a
// voluntary context switch of the thread (getrusage RUSAGE_THREAD): hundreds
// in 100 waits before, a few at most on a quiet machine after (a
// kernel yield is an involuntary one; the runtime's preemption of a goroutine
// that runs on parks it). Only waits that ended within spinFor count: a
// longer one, on a machine too busy to give the thread its CPU, slept. The
// bound is one park per 256 polls, where the code before parked once per 16.
func TestWaitSpinsWithoutParking(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collector's stops in the count
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := &Comm{}
	const waits = 100
	kept, polls, parks := 0, 0, int64(0)
	for range waits {
		n := 0
		done := doneAfter(300 * time.Microsecond)
		var before, after unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := c.waitFor(context.Background(), "test", func() (bool, error) { n++; return done() }); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
			t.Fatal(err)
		}
		if d < spinFor {
			kept++
			polls += n
			parks += after.Nvcsw - before.Nvcsw
		}
	}
	t.Logf("%d waits of 300 µs, %d within spinFor: %d polls, %d parks", waits, kept, polls, parks)
	if kept < waits/10 {
		t.Logf("too few waits ended within spinFor to tell: the machine is too busy")
	} else if parks > int64(polls/256) {
		t.Errorf("the waiting thread parked %d times in %d polls: the wait yields its goroutine while it spins", parks, polls)
	}
	if n := spinning.Load(); n != 0 {
		t.Errorf("%d waits still counted as spinning after they ended", n)
	}
}

// TestWaitSharesBusyPs: where spinning waits hold every P (GOMAXPROCS=1 with
// one, GOMAXPROCS=2 with two ranks waiting at once), they still yield to the
// Go scheduler, so that another goroutine (the test's own) runs while they
// spin. With the kernel's yields alone it ran only at the runtime's 10 ms
// preemption: 0 to 2 turns in 100 waits.
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
