//go:build ignore

// launch-analog times a stand-in for a non-blocking NCCL launch
// (launch-analog.c: a thread per launch, polled, joined) from one Go process:
// the launch-and-wait loop in C, and in Go as gonccl's wait does it (a C call
// per poll, a kernel yield every 16th), with the goroutine locked to its
// thread or not, and locked with the wait in one C call. Rounds alternate the
// four.
//
//	gcc -O2 -shared -fPIC -o /tmp/libnb.so launch-analog.c -lpthread
//	go run launch-analog.go /tmp/libnb.so
package main

import (
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

func main() {
	h, err := purego.Dlopen(os.Args[1], purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		panic(err)
	}
	var loop func(int32) float64
	purego.RegisterLibFunc(&loop, h, "nb_loop")
	launch, _ := purego.Dlsym(h, "nb_launch")
	poll, _ := purego.Dlsym(h, "nb_poll")
	wait, _ := purego.Dlsym(h, "nb_wait")
	r := new(int32)
	goLoop := func(n int, lock, waitInC bool) float64 {
		t0 := time.Now()
		for range n {
			if lock {
				runtime.LockOSThread()
			}
			purego.SyscallN(launch)
			if waitInC {
				purego.SyscallN(wait)
			} else {
				for k := 0; ; k++ {
					purego.SyscallN(poll, uintptr(unsafe.Pointer(r)))
					if *r != 7 {
						break
					}
					if k%16 == 15 {
						unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
					}
				}
			}
			if lock {
				runtime.UnlockOSThread()
			}
		}
		return float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(n)
	}
	const n = 3000
	for range 8 {
		fmt.Printf("µs per launch: loop in C %.1f, Go locked %.1f, Go unlocked %.1f, Go locked with the wait in C %.1f\n",
			loop(n), goLoop(n, true, false), goLoop(n, false, false), goLoop(n, true, true))
	}
}
