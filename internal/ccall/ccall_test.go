package ccall

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// lib builds testdata/args.c with the Go toolchain's C compiler (or uses
// GONCCL_CCALL_TESTLIB when the target has none) and returns its handle.
func lib(tb testing.TB) uintptr {
	tb.Helper()
	path := os.Getenv("GONCCL_CCALL_TESTLIB")
	if path == "" {
		cc := os.Getenv("CC")
		if cc == "" {
			out, err := exec.Command("go", "env", "CC").Output()
			if err != nil {
				tb.Skipf("no C compiler: %v", err)
			}
			cc = strings.TrimSpace(string(out))
		}
		path = filepath.Join(tb.TempDir(), "libargs.so")
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", path, "testdata/args.c").CombinedOutput(); err != nil {
			tb.Fatalf("building testdata/args.c: %v\n%s", err, out)
		}
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func sym(tb testing.TB, h uintptr, name string) uintptr {
	tb.Helper()
	p, err := purego.Dlsym(h, name)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestEverySlot(t *testing.T) {
	fn := sym(t, lib(t), "weigh24")
	var a [24]uintptr
	for i := range a {
		a[i] = uintptr(0x1000_0000_0000_0001)*uintptr(i+1) ^ uintptr(i)<<40
	}
	var want uint64
	for _, v := range a {
		want = want*1000003 + uint64(v)
	}
	got := Call(fn, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
		a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23])
	if uint64(got) != want {
		t.Fatalf("weigh24 = %#x, want %#x", got, want)
	}
}

// TestEveryLength calls with 1 to MaxArgs arguments: calls of up to 8 take
// the short frame (frame8), longer ones the whole frame; each argument must
// arrive in its slot either way.
func TestEveryLength(t *testing.T) {
	fn := sym(t, lib(t), "weighn")
	for n := 0; n < MaxArgs; n++ {
		args, want := weighnCase(n)
		if got := Call(fn, args...); uint64(got) != want {
			t.Errorf("weighn with %d arguments = %#x, want %#x", len(args), got, want)
		}
	}
}

// weighnCase is a call of weighn (testdata/args.c) with n values after the
// count, n+1 arguments in all, and the result it must return.
func weighnCase(n int) (args []uintptr, want uint64) {
	args = []uintptr{uintptr(n)}
	want = uint64(n)
	for i := range n {
		v := uintptr(0x0123_4567_89ab_cdef)*uintptr(n+1) ^ uintptr(i+1)<<48
		args = append(args, v)
		want = want*1000003 + uint64(v)
	}
	return args, want
}

func TestStructByValue(t *testing.T) {
	fn := sym(t, lib(t), "byvalue")
	var id [128]byte
	for i := range id {
		id[i] = byte(i*7 + 3)
	}
	var want uint64
	for _, b := range id {
		want = want*131 + uint64(b)
	}
	var out uint64
	r := int32(CallStruct128(fn, 1, &id, 7, 9, uintptr(unsafe.Pointer(&out))))
	runtime.KeepAlive(&out)
	if r != 7009 || out != want {
		t.Fatalf("byvalue = %d, hash %#x; want 7009, %#x", r, out, want)
	}
}

func TestPointerArgAndConcurrency(t *testing.T) {
	fn := sym(t, lib(t), "store")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				var v int32
				want := int32(g*100000 + i)
				r := int32(CallPtr(fn, uintptr(unsafe.Pointer(&v)), uintptr(want)))
				if v != want || r != -want {
					t.Errorf("store: v=%d r=%d, want %d", v, r, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestNoAllocs(t *testing.T) {
	fn := sym(t, lib(t), "weigh24")
	if n := testing.AllocsPerRun(1000, func() { Call(fn, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11) }); n != 0 {
		t.Fatalf("Call allocates %v times per call", n)
	}
}

func BenchmarkCall(b *testing.B) {
	fn := sym(b, lib(b), "noop")
	b.ReportAllocs()
	for b.Loop() {
		Call(fn)
	}
}

func BenchmarkCall7(b *testing.B) {
	fn := sym(b, lib(b), "weigh24")
	b.ReportAllocs()
	for b.Loop() {
		Call(fn, 1, 2, 3, 4, 5, 6, 7)
	}
}
