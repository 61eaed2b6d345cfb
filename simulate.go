package nccl

import (
	"encoding/binary"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/gonccl/nccl/internal/capi"
)

// simInfoMagic is the magic of NCCL_SIM_INFO_INITIALIZER.
const simInfoMagic = 0x74685283

// SimulateGroup runs fn as Group does, but ends the group with
// ncclGroupSimulateEnd (NCCL >= 2.22): NCCL plans the operations fn enqueued
// and launches none of them, and reports how long it expects them to take.
// If fn fails or panics, the group is discarded as in Group.
func (l *Library) SimulateGroup(fn func() error) (estimate time.Duration, err error) {
	if l == nil {
		return 0, nilLibrary("SimulateGroup")
	}
	if fn == nil { // refused before the group opens: nothing to undo
		return 0, argError("SimulateGroup", "nil function")
	}
	if l.nc.Fn[capi.FnGroupSimulateEnd] == 0 {
		return 0, l.unsupported(capi.FnGroupSimulateEnd)
	}
	g, mark, err := l.groupBegin()
	if err != nil {
		return 0, err
	}
	done := false
	defer func() {
		if !done { // fn panicked: drop what it recorded, let the panic go on
			l.groupEnd(g, mark, errPanicInGroup)
		}
	}()
	if g.depth > 1 {
		done = true
		return 0, l.groupEnd(g, mark, argError("ncclGroupSimulateEnd", "SimulateGroup inside a Group: the outer group would launch what it plans"))
	}
	if ferr := fn(); ferr != nil {
		done = true
		return 0, l.groupEnd(g, mark, ferr)
	}
	done = true
	// ncclSimInfo_t: size_t size; unsigned magic, version; float estimatedTime (µs).
	sim := new([24]byte)
	ne := binary.NativeEndian
	ne.PutUint64(sim[0:], 24)
	ne.PutUint32(sim[8:], simInfoMagic)
	ne.PutUint32(sim[12:], uint32(l.version.Code()))
	ne.PutUint32(sim[16:], math.Float32bits(-1)) // NCCL_UNDEF_FLOAT
	empty := len(g.ops) == 0 && !g.ncclOpen
	err = l.launch(g, capi.FnGroupSimulateEnd, uintptr(unsafe.Pointer(sim)))
	runtime.KeepAlive(sim)
	g.depth--
	l.groupRelease(g)
	if err != nil || empty {
		return 0, err
	}
	us := math.Float32frombits(ne.Uint32(sim[16:]))
	return time.Duration(float64(us) * float64(time.Microsecond)), nil
}
