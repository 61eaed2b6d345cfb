//go:build ignore

// The cost of runtime.Gosched for a goroutine free to move and for one locked
// to its OS thread (go run locked-gosched.go; docs/performance.md).
package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

func main() {
	var stop atomic.Bool
	for i := 0; i < 3; i++ { // other goroutines that come and go, as in a service
		go func() {
			for !stop.Load() {
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	for _, locked := range []bool{false, true, false, true} {
		done := make(chan time.Duration)
		go func() {
			if locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			const n = 20000
			t := time.Now()
			for i := 0; i < n; i++ {
				runtime.Gosched()
			}
			done <- time.Since(t) / n
		}()
		fmt.Printf("locked %v: %v per Gosched\n", locked, <-done)
	}
	stop.Store(true)
}
