package ccall

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// Guard names the CUDA runtime's cudaGetDevice and cudaSetDevice, for CallOn,
// and, once CacheThreads has made one, a pthread key whose value on a thread
// marks it as seen on a device.
type Guard struct {
	Get, Set uintptr
	tls      threadMark
}

// threadMark is the guard's per-thread mark: pthread_getspecific and
// pthread_setspecific, and the key. getspecific 0: no mark, the guard asks
// cudaGetDevice on every call.
type threadMark struct {
	getspecific, setspecific uintptr
	key                      uintptr
}

// CacheThreads gives the guard a per-thread mark (a pthread key): a thread the
// guard has once seen on a device, or put on one, is marked, and later calls
// on it skip cudaGetDevice. A thread's current device is never taken back
// (CUDA keeps it until the thread ends), so the mark stays true; the key
// belongs to this guard, so marks made for another runtime do not count. It
// reports whether the mark is in use; without libc's pthread functions the
// guard asks on every call as before.
func (g *Guard) CacheThreads() bool {
	var m threadMark
	create, err := purego.Dlsym(purego.RTLD_DEFAULT, "pthread_key_create")
	if err != nil {
		return false
	}
	if m.getspecific, err = purego.Dlsym(purego.RTLD_DEFAULT, "pthread_getspecific"); err != nil {
		return false
	}
	if m.setspecific, err = purego.Dlsym(purego.RTLD_DEFAULT, "pthread_setspecific"); err != nil {
		return false
	}
	key := new(uint32) // pthread_key_t
	if CallPtr(create, uintptr(unsafe.Pointer(key)), 0) != 0 {
		return false
	}
	m.key = uintptr(*key)
	g.tls = m
	return true
}

// guardHead is shared with the assembly (call_*.s): the trampoline that
// makes the call at 0, the guard's functions at 8 and 16, the device at 24,
// the thread's current device as cudaGetDevice writes it at 32, the guard's
// own failing result at 40, then pthread_getspecific at 48 (0: no mark),
// pthread_setspecific at 56 and the key at 64. The call's frame follows at
// 72: guardFrame8 for calls of up to 8 arguments, guardFrame for the rest.
type guardHead struct {
	tramp uintptr
	get   uintptr
	set   uintptr
	dev   uintptr
	cur   uintptr
	gr    uintptr
	tls   threadMark
}

type guardFrame8 struct {
	h guardHead
	f frame8
}

type guardFrame struct {
	h guardHead
	f frame
}

// guardABI0 is the address of the guarded trampoline (call_*.s).
var guardABI0 uintptr

// CallOn is Call on a thread with a current CUDA device, in the same switch to
// the system stack: it first asks g.Get for the thread's current device, and
// where that is 0 (what the runtime answers on a thread that never chose one)
// makes dev current with g.Set, then calls fn. A thread without a device
// would otherwise get one at fn's first use of the runtime: device 0, whose
// primary context CUDA then creates (about 500 MiB there), in a process that
// may never use GPU 0. Threads already on a device are left on it. With
// CacheThreads, a thread marked as on a device skips the question.
//
// guardErr is the result of the guard's call that failed, and then fn was not
// called; 0 otherwise. CallOn allocates nothing.
//
//go:nosplit
func CallOn(g *Guard, dev int, fn uintptr, args ...uintptr) (r uintptr, guardErr int32) {
	if fn == 0 || g.Get == 0 || g.Set == 0 || len(args) > MaxArgs {
		panicCall(0, len(args))
	}
	if len(args) <= len(frame8{}.a) {
		var f guardFrame8
		f.h.tramp, f.h.get, f.h.set, f.h.dev, f.h.tls = trampoline8ABI0, g.Get, g.Set, uintptr(uint32(int32(dev))), g.tls
		f.f.fn = fn
		for i, a := range args {
			f.f.a[i] = a
		}
		runtime_cgocall(guardABI0, uintptr(unsafe.Pointer(&f)))
		return f.f.r, int32(f.h.gr)
	}
	return callOnLong(g, dev, fn, args)
}

// callOnLong is CallOn for calls of more than 8 arguments, in a frame of its
// own: both frames in CallOn would pass the limit of a nosplit chain. It may
// grow the stack on entry, before its frame's address is taken; after that it
// calls only runtime.cgocall, which cannot.
//
//go:noinline
func callOnLong(g *Guard, dev int, fn uintptr, args []uintptr) (r uintptr, guardErr int32) {
	var f guardFrame
	f.h.tramp, f.h.get, f.h.set, f.h.dev, f.h.tls = trampolineABI0, g.Get, g.Set, uintptr(uint32(int32(dev))), g.tls
	f.f.fn = fn
	for i, a := range args {
		f.f.a[i] = a
	}
	runtime_cgocall(guardABI0, uintptr(unsafe.Pointer(&f)))
	return f.f.r, int32(f.h.gr)
}
