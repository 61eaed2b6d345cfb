//go:build cgo

package cgobench

/*
#include <stdint.h>
#include <stddef.h>

typedef int (*group_fn)(void);
typedef int (*allreduce0_fn)(const void*, void*, size_t, int, int, void*, void*);

// group_iteration_n is one iteration of a benchmark driving n GPUs from one
// thread, as a C program writes it: a group around one operation per
// communicator of comms, each on its stream of streams.
static int group_iteration_n(uintptr_t start, uintptr_t end, uintptr_t allreduce, uintptr_t buf,
                             const uintptr_t* comms, const uintptr_t* streams, int n) {
	int r = ((group_fn)start)();
	if (r) return r;
	for (int i = 0; i < n && !r; i++)
		r = ((allreduce0_fn)allreduce)((void*)buf, (void*)buf, 0, 7, 0, (void*)comms[i], (void*)streams[i]);
	int e = ((group_fn)end)();
	return r ? r : e;
}
*/
import "C"

import "unsafe"

// GroupIterationN runs group_iteration_n through cgo: a group around an
// all-reduce of 0 elements on each of comms, each on its stream, all from C.
// comms and streams hold handles, no Go pointers.
func GroupIterationN(start, end, allreduce, buf uintptr, comms, streams []uintptr) int {
	return int(C.group_iteration_n(C.uintptr_t(start), C.uintptr_t(end), C.uintptr_t(allreduce), C.uintptr_t(buf),
		(*C.uintptr_t)(unsafe.Pointer(&comms[0])), (*C.uintptr_t)(unsafe.Pointer(&streams[0])), C.int(len(comms))))
}
