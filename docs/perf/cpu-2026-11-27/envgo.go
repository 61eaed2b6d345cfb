//go:build ignore

// The loops of envlib.c called from goroutines of a Go process (purego, CGO_ENABLED=0):
// go build -o envgo envgo.go, run beside envmain (docs/perf/cpu-2026-11-27/README.md).
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/ebitengine/purego"
)

func main() {
	h, err := purego.Dlopen("./libenv.so", purego.RTLD_NOW)
	if err != nil {
		panic(err)
	}
	names := []string{"w_malloc", "w_mallocbig", "w_memcpy", "w_mutex", "w_tls", "w_clock", "w_compute", "w_yield"}
	ns := []int64{2000000, 200000, 20000, 5000000, 20000000, 2000000, 100000, 500000}
	var onp func(uintptr, int64) float64
	purego.RegisterLibFunc(&onp, h, "on_pthread")
	if os.Getenv("LOCKMAIN") != "" {
		runtime.LockOSThread()
	}
	for k, name := range names {
		var f func(int64) float64
		purego.RegisterLibFunc(&f, h, name)
		sym, _ := purego.Dlsym(h, name)
		f(ns[k] / 10)
		a := f(ns[k])
		b := onp(sym, ns[k])
		fmt.Printf("Go %s goroutine %.2f pthread %.2f\n", name, a, b)
	}
}
