package goid

import (
	"runtime"
	"sync"
	"testing"
)

// Each goroutine has its own identity, the same at every call and on every
// OS thread the goroutine runs on.
func TestCurrent(t *testing.T) {
	const n = 64
	ids := make([]uintptr, n)
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			id := Current()
			for range 1000 {
				runtime.Gosched() // may resume on another thread
				if got := Current(); got != id {
					t.Errorf("goroutine %d: identity changed from %#x to %#x", i, id, got)
					return
				}
			}
			ids[i] = id
		}()
	}
	start.Done()
	wg.Wait()
	seen := map[uintptr]int{}
	for i, id := range ids {
		if id == 0 {
			t.Fatalf("goroutine %d: identity 0", i)
		}
		if j, ok := seen[id]; ok {
			t.Fatalf("goroutines %d and %d share identity %#x", j, i, id)
		}
		seen[id] = i
	}
	if Current() == 0 {
		t.Fatal("test goroutine: identity 0")
	}
}

func TestCurrentAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = Current() }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkCurrent(b *testing.B) {
	for b.Loop() {
		_ = Current()
	}
}
