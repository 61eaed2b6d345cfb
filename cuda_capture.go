package nccl

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gonccl/nccl/internal/capi"
	"golang.org/x/sys/unix"
)

// The captures gonccl began, by stream and OS thread: what the guards of
// capture-breaking calls consult, the communicators a capture holds, and the
// graphs waiting for their goroutine's other captures to end (see
// CUDA.EndCapture).

// captures is what a CUDA knows of the captures gonccl began. n is read on
// every guarded call: with no capture open a guard is one atomic load.
type captures struct {
	n       atomic.Int32
	mu      sync.Mutex
	open    []*capture
	waiting []waitingGraph
}

type capture struct {
	stream uintptr
	dev    int
	tid    int       // the OS thread the capturing goroutine is locked to
	events []uintptr // events recorded into the capture
	comms  []*Comm   // communicators whose operations were captured
}

// cudaStreamCaptureMode
const (
	captureModeThreadLocal = 1
	captureModeRelaxed     = 2
)

func (c *capture) refuse(op, msg string) error {
	return &CaptureError{Op: op, Device: c.dev, Stream: c.stream, Msg: msg}
}

// refuseStream refuses op on stream h (0: device dev's legacy stream) while
// it captures; the legacy stream while its device has a capture open.
func (cu *CUDA) refuseStream(op string, h uintptr, dev int) error {
	if cu.capt.n.Load() == 0 {
		return nil
	}
	if h == 0 {
		return cu.refuseDevice(op, dev)
	}
	cu.capt.mu.Lock()
	defer cu.capt.mu.Unlock()
	for _, c := range cu.capt.open {
		if c.stream == h {
			return c.refuse(op, "the call would wait for the capturing stream (end the capture first)")
		}
	}
	return nil
}

// refuseDevice refuses a synchronous call on device dev (one that waits for
// the device or goes through its legacy stream) while a capture is open there.
func (cu *CUDA) refuseDevice(op string, dev int) error {
	if cu.capt.n.Load() == 0 {
		return nil
	}
	cu.capt.mu.Lock()
	defer cu.capt.mu.Unlock()
	for _, c := range cu.capt.open {
		if c.dev == dev {
			return c.refuse(op, "synchronous calls on the capture's device are refused until the capture ends (use the stream's asynchronous calls)")
		}
	}
	return nil
}

// refuseHere refuses op on the capturing goroutine: CUDA forbids it on the
// thread of a thread-local capture. The capturing goroutine is locked to its
// thread, so a goroutine on that thread is the capturing one; others never are.
func (cu *CUDA) refuseHere(op string) error {
	if cu.capt.n.Load() == 0 {
		return nil
	}
	tid := unix.Gettid()
	cu.capt.mu.Lock()
	defer cu.capt.mu.Unlock()
	for _, c := range cu.capt.open {
		if c.tid == tid {
			return c.refuse(op, "CUDA forbids this call on the capturing goroutine until the capture ends")
		}
	}
	return nil
}

// refuseEvent refuses op on an event recorded into an open capture.
func (cu *CUDA) refuseEvent(op string, ev uintptr) error {
	if cu.capt.n.Load() == 0 {
		return nil
	}
	cu.capt.mu.Lock()
	defer cu.capt.mu.Unlock()
	for _, c := range cu.capt.open {
		for _, e := range c.events {
			if e == ev {
				return c.refuse(op, "the event was recorded into the capture: it completes only when the graph runs")
			}
		}
	}
	return nil
}

// noteRecord keeps track of event ev recorded on stream h.
func (cu *CUDA) noteRecord(ev, h uintptr) {
	if cu.capt.n.Load() == 0 {
		return
	}
	cu.capt.mu.Lock()
	defer cu.capt.mu.Unlock()
	for _, c := range cu.capt.open {
		c.events = removeHandle(c.events, ev)
		if c.stream == h {
			c.events = append(c.events, ev)
		}
	}
}

// noteComm records that c enqueued an operation on stream h, if h captures:
// the graph will hold c's operations (see Comm.Close). It reports whether h
// captures.
func (cu *CUDA) noteComm(c *Comm, h uintptr) bool {
	cu.capt.mu.Lock()
	defer cu.capt.mu.Unlock()
	captured := false
	for _, cp := range cu.capt.open {
		if cp.stream == h && h != 0 {
			captured = true
			if !slices.Contains(cp.comms, c) {
				cp.comms = append(cp.comms, c)
				c.graphs.Add(1) // the capture holds c from now on; its graph inherits the hold
			}
		}
	}
	return captured
}

// NCCL connects a communicator's ranks inside their first operations (2.22+;
// Send/Recv peers always). With several communicators in one group it
// connects them on threads of its own, but with one (one goroutine per GPU,
// or one GPU per process) it connects on the calling thread, where the
// thread-local capture forbids what a connection between two GPUs of one
// process needs: NCCL fails a captured first all-to-all of four goroutines
// with "failed to peer with device 0: 900 operation not permitted when stream
// is capturing" (cudaDeviceEnablePeerAccess, in p2p.cc;
// TestGPUCapturedAllReduce). NCCL relaxes the thread around its own
// allocations for the same reason; gonccl relaxes it around an NCCL call on a
// capturing stream, so that a captured operation connects as it would
// outside the capture.

// relax puts the calling OS thread in CUDA's relaxed capture mode, locking
// the goroutine to it, and returns the mode to restore with unrelax. ok is
// false where the runtime lacks cudaThreadExchangeStreamCaptureMode or refuses
// it: nothing was changed.
func (cu *CUDA) relax() (prev int32, ok bool) {
	if !cu.has(capi.CuThreadExchangeStreamCaptureMode) {
		return 0, false
	}
	runtime.LockOSThread()
	prev = captureModeRelaxed
	if cu.rt.ThreadExchangeStreamCaptureMode(&prev) != nil {
		runtime.UnlockOSThread()
		return 0, false
	}
	return prev, true
}

// unrelax gives the thread back the mode relax took.
func (cu *CUDA) unrelax(prev int32, ok bool) {
	if !ok {
		return
	}
	_ = cu.rt.ThreadExchangeStreamCaptureMode(&prev)
	runtime.UnlockOSThread()
}

// callRelaxed is cu.callOn(dev, fn, args...) in the relaxed mode (see relax).
func (cu *CUDA) callRelaxed(dev int, fn uintptr, args []uintptr) (uintptr, error) {
	prev, ok := cu.relax()
	r, err := cu.callOn(dev, fn, args...)
	cu.unrelax(prev, ok)
	return r, err
}

// release drops the holds of a capture that made no graph.
func (c *capture) release() {
	for _, cm := range c.comms {
		cm.graphs.Add(-1)
	}
}

func removeHandle(s []uintptr, h uintptr) []uintptr {
	for i, x := range s {
		if x == h {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// A waitingGraph is a graph captured on thread tid while that thread had
// other captures open: it is instantiated when the last of them ends.
type waitingGraph struct {
	tid int
	g   *Graph
}

// takeWaiting removes and returns the graphs waiting for thread tid's
// captures to end (mu held).
func (c *captures) takeWaiting(tid int) []*Graph {
	var out []*Graph
	keep := c.waiting[:0]
	for _, w := range c.waiting {
		if w.tid == tid {
			out = append(out, w.g)
		} else {
			keep = append(keep, w)
		}
	}
	clear(c.waiting[len(keep):])
	c.waiting = keep
	return out
}
