package main

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEachThread: -t's drives run at once, each on an OS thread of its own
// that it keeps throughout (locked), the first bench's reporting; a single
// bench runs on the caller's goroutine.
func TestEachThread(t *testing.T) {
	const n = 3
	benches := make([]*bench, n)
	for i := range benches {
		benches[i] = &bench{}
	}
	var (
		mu      sync.Mutex
		tids    = map[*bench]int{}
		firsts  []*bench
		arrived sync.WaitGroup
		moved   []string
	)
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		eachThread(benches, func(b *bench, first bool) {
			tid := unix.Gettid()
			arrived.Done()
			select { // every drive is in at once, or none would get past here
			case <-all:
			case <-time.After(10 * time.Second):
				t.Error("the drives did not run at the same time")
			}
			for range 100 {
				runtime.Gosched()
				time.Sleep(10 * time.Microsecond)
				if unix.Gettid() != tid {
					mu.Lock()
					moved = append(moved, "a drive left its thread")
					mu.Unlock()
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			tids[b] = tid
			if first {
				firsts = append(firsts, b)
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("eachThread did not return")
	}
	if len(moved) > 0 {
		t.Error(moved)
	}
	seen := map[int]bool{}
	for _, b := range benches {
		tid, ok := tids[b]
		if !ok {
			t.Fatalf("a bench was not driven: %v", tids)
		}
		if seen[tid] {
			t.Errorf("two drives on thread %d", tid)
		}
		seen[tid] = true
	}
	if len(firsts) != 1 || firsts[0] != benches[0] {
		t.Errorf("first was true for %d drives, want the first bench's alone", len(firsts))
	}

	// One bench: driven on the caller's goroutine, first.
	var called, wasFirst bool
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := unix.Gettid()
	eachThread(benches[:1], func(b *bench, first bool) {
		called, wasFirst = true, first
		if unix.Gettid() != me {
			t.Error("a single bench was driven off the caller's thread")
		}
	})
	if !called || !wasFirst {
		t.Errorf("single bench: called %v, first %v", called, wasFirst)
	}
}
