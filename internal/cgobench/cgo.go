//go:build cgo

package cgobench

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

typedef const char* (*errstr_fn)(int);
typedef int (*allreduce_fn)(const void*, void*, size_t, int, int, void*, void*);

#include <stdint.h>

static uintptr_t call_errstr(uintptr_t f, int r) { return (uintptr_t)((errstr_fn)f)(r); }
static int call_allreduce(uintptr_t f, uintptr_t buf, uintptr_t comm, uintptr_t stream) {
	return ((allreduce_fn)f)((void*)buf, (void*)buf, 0, 7, 0, (void*)comm, (void*)stream);
}

// loop_errstr times n calls made from C itself and returns nanoseconds.
static long long loop_errstr(uintptr_t f, long n) {
	struct timespec a, b;
	volatile const char* sink;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) sink = ((errstr_fn)f)((int)(i & 1));
	clock_gettime(CLOCK_MONOTONIC, &b);
	(void)sink;
	return (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}

// open_all is what a C program does to use the libraries: dlopen both, dlsym
// every symbol gonccl resolves. Returns the number of symbols found.
static int open_all(const char* nccl, const char* cudart, const char** names, int n) {
	void* h = dlopen(nccl, RTLD_NOW | RTLD_GLOBAL);
	void* c = dlopen(cudart, RTLD_NOW | RTLD_GLOBAL);
	if (!h || !c) return -1;
	int found = 0;
	for (int i = 0; i < n; i++) found += dlsym(h, names[i]) != NULL || dlsym(c, names[i]) != NULL;
	return found;
}
*/
import "C"

import "unsafe"

// CallErrorString calls ncclGetErrorString at f through cgo.
func CallErrorString(f uintptr, r int) uintptr {
	return uintptr(C.call_errstr(C.uintptr_t(f), C.int(r)))
}

// CallAllReduce calls ncclAllReduce at f with count 0 through cgo.
func CallAllReduce(f, buf, comm, stream uintptr) int {
	return int(C.call_allreduce(C.uintptr_t(f), C.uintptr_t(buf), C.uintptr_t(comm), C.uintptr_t(stream)))
}

// LoopErrorString makes n calls from C and returns the nanoseconds they took.
func LoopErrorString(f uintptr, n int) int64 {
	return int64(C.loop_errstr(C.uintptr_t(f), C.long(n)))
}

// OpenAll opens both libraries and resolves names from C.
func OpenAll(nccl, cudart string, names []string) int {
	cn, cc := C.CString(nccl), C.CString(cudart)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cc))
	cs := make([]*C.char, len(names))
	for i, n := range names {
		cs[i] = C.CString(n)
	}
	r := int(C.open_all(cn, cc, &cs[0], C.int(len(cs))))
	for _, p := range cs {
		C.free(unsafe.Pointer(p))
	}
	return r
}
