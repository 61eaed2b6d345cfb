package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gonccl/nccl/internal/capi"
	"golang.org/x/sys/unix"
)

// CaptureStatus is cudaStreamCaptureStatus.
type CaptureStatus int32

const (
	CaptureNone        CaptureStatus = 0 // not capturing
	CaptureActive      CaptureStatus = 1 // capturing
	CaptureInvalidated CaptureStatus = 2 // capturing, but an error invalidated it: EndCapture fails
)

func (c CaptureStatus) String() string {
	switch c {
	case CaptureNone:
		return "none"
	case CaptureActive:
		return "active"
	case CaptureInvalidated:
		return "invalidated"
	}
	return fmt.Sprintf("CaptureStatus(%d)", int32(c))
}

// graphSyms are the functions a capture needs from start to launch.
var graphSyms = [...]int{capi.CuStreamBeginCapture, capi.CuStreamEndCapture, capi.CuGraphInstantiateWithFlags, capi.CuGraphLaunch, capi.CuGraphExecDestroy, capi.CuGraphDestroy}

// HasGraphs reports whether the runtime exports what Capture needs (CUDA >= 11.4).
func (cu *CUDA) HasGraphs() bool {
	if cu == nil {
		return false
	}
	for _, sym := range graphSyms {
		if !cu.has(sym) {
			return false
		}
	}
	return true
}

// BeginCapture starts capturing the work enqueued on s (not the legacy
// stream) into a graph, in thread-local mode, and locks the calling goroutine
// to its OS thread until EndCapture, which the same goroutine must call. See
// Capture for what a capture means for goroutines and which calls it refuses.
// A runtime without graphs gives an error matching ErrNotSupported.
func (cu *CUDA) BeginCapture(s Stream) error {
	if cu == nil {
		return nilCUDA("BeginCapture")
	}
	const op = "cudaStreamBeginCapture"
	for _, sym := range graphSyms {
		if !cu.has(sym) {
			return cu.unsupported(sym)
		}
	}
	if s.cu == nil {
		return argError(op, "the zero Stream has no CUDA runtime (make one with CUDA.NewStream)")
	}
	if s.h == 0 {
		return argError(op, "the legacy default stream cannot be captured (use a stream from NewStream)")
	}
	if !s.alive() {
		return destroyedStream(op)
	}
	runtime.LockOSThread()
	if err := cu.rt.StreamBeginCapture(s.h, captureModeThreadLocal); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	cu.capt.mu.Lock()
	cu.capt.open = append(cu.capt.open, &capture{stream: s.h, dev: s.dev, tid: unix.Gettid()})
	cu.capt.n.Add(1)
	cu.capt.mu.Unlock()
	return nil
}

// EndCapture ends the capture BeginCapture started on s, on the goroutine that
// started it, and instantiates the graph. A capture that a refused call
// invalidated ends with an error matching ErrCapturing and no graph.
//
// A goroutine may capture several streams at once (one per GPU it drives,
// each BeginCapture before the group of operations, each EndCapture after):
// CUDA refuses to instantiate a graph on a thread that still captures
// (cudaErrorStreamCaptureUnsupported), so the graphs of all but the last
// capture to end are instantiated when the last one ends. Until then such a
// graph's Launch returns an error matching ErrCapturing. The last EndCapture
// returns the error of any of them that fails to instantiate, and that
// graph's Launch returns it too.
func (cu *CUDA) EndCapture(s Stream) (*Graph, error) {
	if cu == nil {
		return nil, nilCUDA("EndCapture")
	}
	const op = "cudaStreamEndCapture"
	cu.capt.mu.Lock()
	i := -1
	for j, c := range cu.capt.open {
		if c.stream == s.h && s.h != 0 {
			i = j
		}
	}
	if i < 0 {
		cu.capt.mu.Unlock()
		return nil, argError(op, "stream %#x has no capture begun by BeginCapture", s.h)
	}
	c := cu.capt.open[i]
	if c.tid != unix.Gettid() {
		cu.capt.mu.Unlock()
		return nil, c.refuse(op, "EndCapture must be called by the goroutine that called BeginCapture (CUDA ends a thread-local capture only on its thread)")
	}
	cu.capt.open = append(cu.capt.open[:i], cu.capt.open[i+1:]...)
	cu.capt.n.Add(-1)
	last := true // the thread's last open capture
	for _, o := range cu.capt.open {
		last = last && o.tid != c.tid
	}
	var waiting []*Graph // graphs of the thread's earlier captures
	if last {
		waiting = cu.capt.takeWaiting(c.tid)
	}
	cu.capt.mu.Unlock()

	var graph uintptr
	err := cu.rt.StreamEndCapture(s.h, &graph)
	runtime.UnlockOSThread() // BeginCapture's
	if err != nil {
		c.release()
		return nil, errors.Join(err, cu.instantiate(waiting))
	}
	g := &Graph{cu: cu, graph: graph, dev: s.dev, captured: s.h}
	// The graph holds the communicators its capture held. One closed or
	// aborted meanwhile (Close and Abort wait in NCCL for this graph) gets
	// it destroyed at once, and the caller an error.
	g.comms = c.comms
	var gone *Comm
	for _, cm := range g.comms {
		cm.graphMu.Lock()
		if cm.state() == stOpen {
			cm.graphList = append(cm.graphList, g)
		} else if gone == nil {
			gone = cm
		}
		cm.graphMu.Unlock()
	}
	if gone != nil {
		g.Destroy()
		return nil, errors.Join(&ClosedError{Op: op, What: "communicator whose operations the capture holds"}, cu.instantiate(waiting))
	}
	if !last {
		cu.capt.mu.Lock()
		cu.capt.waiting = append(cu.capt.waiting, waitingGraph{c.tid, g})
		cu.capt.mu.Unlock()
		return g, nil
	}
	if err := cu.instantiate([]*Graph{g}); err != nil {
		g.Destroy()
		return nil, errors.Join(err, cu.instantiate(waiting))
	}
	return g, cu.instantiate(waiting)
}

// instantiate makes each graph's executable graph, on its device. A graph
// destroyed meanwhile is skipped; one that fails keeps the error for Launch.
func (cu *CUDA) instantiate(gs []*Graph) error {
	var errs []error
	for _, g := range gs {
		if g.life.Add(1)&graphDestroyed != 0 { // as a Launch: Destroy waits
			g.leave()
			continue
		}
		var exec uintptr
		err := cu.OnDevice(g.dev, func() error {
			return cu.rt.GraphInstantiateWithFlags(&exec, g.graph)
		})
		if err != nil {
			err = fmt.Errorf("the graph of device %d: %w", g.dev, err)
			cu.capt.mu.Lock()
			g.instErr = err
			cu.capt.mu.Unlock()
			errs = append(errs, err)
		} else {
			g.exec.Store(exec)
		}
		g.leave()
	}
	return errors.Join(errs...)
}

// notInstantiated is Launch's error for a graph without an executable graph.
func (g *Graph) notInstantiated(op string) error {
	g.cu.capt.mu.Lock()
	err := g.instErr
	g.cu.capt.mu.Unlock()
	if err != nil {
		return err
	}
	// Name the capture it waits for: one its goroutine still has open.
	e := &CaptureError{Op: op, Device: -1,
		Msg: fmt.Sprintf("the graph captured on stream %#x is instantiated when the goroutine that captured it ends this capture too (CUDA refuses to instantiate on a capturing thread)", g.captured)}
	g.cu.capt.mu.Lock()
	for _, w := range g.cu.capt.waiting {
		if w.g != g {
			continue
		}
		for _, o := range g.cu.capt.open {
			if o.tid == w.tid {
				e.Device, e.Stream = o.dev, o.stream
			}
		}
	}
	g.cu.capt.mu.Unlock()
	return e
}

// Capture records the work fn enqueues on s into a graph and returns it,
// instantiated, to Launch as often as wanted. Nothing fn enqueues on s runs
// during the capture. fn runs on the calling goroutine, locked to its OS
// thread; work it hands to other goroutines is not captured unless they
// enqueue it on s. The calls that would break the capture are refused with an
// error matching ErrCapturing (below). If fn fails or panics the
// capture is ended and discarded and fn's error (or panic) is what comes out.
//
// NCCL operations can be captured with a real NCCL (>= 2.9; every rank must
// capture the same operations, and a graph launch is then collective), and
// with the fake NCCL of gonccl's tests, which replays them the same way (each
// launch runs the captured operations afresh, matched across ranks in launch
// order). A graph holding a communicator's operations holds the communicator:
// see Graph.
//
// CUDA graphs capture the work enqueued on a stream once, to launch it many
// times. A launch is one call however many operations the graph holds, which
// is what makes small collectives fast (nccl-bench -G against plain launches;
// docs/performance.md).
//
// Why thread-local capture. CUDA's capture modes say which *threads* may not
// make "potentially unsafe" calls (cudaMalloc, synchronous copies, device
// synchronizes) while a capture is open: in Global mode every thread of the
// process, in ThreadLocal mode only the thread that began the capture. Go
// runs goroutines on whatever OS thread is free, so in Global mode an
// unrelated goroutine (a data loader's cudaMalloc, a logger's cudaMemGetInfo)
// would break the capture, and in ThreadLocal mode the rule would follow an OS
// thread that the capturing goroutine may leave. gonccl therefore captures in
// ThreadLocal mode and keeps the capturing goroutine on one OS thread from
// BeginCapture to EndCapture (CUDA also requires a non-relaxed capture to end
// on the thread that began it, cudaErrorStreamCaptureWrongThread). For a
// goroutine this means:
//
//   - the capture belongs to the stream: every operation enqueued on it, from
//     any goroutine, is recorded into the graph instead of running;
//   - the capturing goroutine stays on its OS thread until EndCapture, and
//     BeginCapture and EndCapture must be called by the same goroutine (Capture
//     does both around fn);
//   - the calls that would break the capture are refused by gonccl, before
//     reaching CUDA, with a *CaptureError matching ErrCapturing: on the
//     capturing stream, Synchronize, Query, Destroy, MallocAsync and FreeAsync;
//     on its device, from every goroutine, the synchronous calls that wait for
//     the device or go through its legacy stream (DeviceSynchronize, the legacy
//     stream's Synchronize, Buffer.WriteBytes, ReadBytes, Memset, CopyIn,
//     CopyOut, Free of cudaMalloc memory); on an event recorded into the
//     capture, Synchronize, Query and Elapsed; on the capturing goroutine,
//     the allocation calls CUDA forbids there (Alloc, MallocHost, FreeHost,
//     HostRegister, HostUnregister). Other goroutines' work elsewhere goes on.
//
// A call gonccl does not know to refuse (another library's, or one on a
// stream whose capture another library began) gets CUDA's own code; gonccl
// returns it as a *CaptureError too, wrapping the *CUDAError.
//
// One goroutine driving several GPUs captures all their streams at once,
// since its operations on them form one group: nest Capture calls, one per
// stream, with the group innermost, or call BeginCapture on every stream,
// issue the group, and EndCapture on every stream. CUDA refuses to
// instantiate a graph on a thread that still captures, so the graphs of the
// inner captures are instantiated when the outermost (the goroutine's last)
// capture ends (see EndCapture); launch them after that.
func (cu *CUDA) Capture(s Stream, fn func() error) (g *Graph, err error) {
	if cu == nil {
		return nil, nilCUDA("Capture")
	}
	if err := cu.BeginCapture(s); err != nil {
		return nil, err
	}
	ended := false
	defer func() {
		if !ended { // fn panicked: end and discard the capture, then go on panicking
			if g, _ := cu.EndCapture(s); g != nil {
				g.Destroy()
			}
		}
	}()
	ferr := fn()
	g, err = cu.EndCapture(s)
	ended = true
	if ferr != nil {
		if g != nil {
			g.Destroy()
		}
		return nil, ferr
	}
	return g, err
}

// Capturing reports the capture status of s (cudaStreamIsCapturing), whoever
// began the capture.
func (s Stream) Capturing() (CaptureStatus, error) {
	const op = "cudaStreamIsCapturing"
	cu, err := s.runtime(op)
	if err != nil {
		return 0, err
	}
	if !cu.has(capi.CuStreamIsCapturing) {
		return 0, cu.unsupported(capi.CuStreamIsCapturing)
	}
	var st int32
	if s.h == 0 {
		err = cu.OnDevice(s.dev, func() error { return cu.rt.StreamIsCapturing(0, &st) })
	} else {
		err = cu.rt.StreamIsCapturing(s.h, &st)
	}
	return CaptureStatus(st), err
}

// Graph is an instantiated CUDA graph (a cudaGraphExec_t, with the cudaGraph_t
// it came from) of one device. Launch it on a stream of that device; Destroy
// it when done.
//
// A graph that captured a communicator's operations holds that communicator:
// NCCL (>= 2.26) makes ncclCommDestroy and ncclCommAbort wait until every such
// graph is destroyed, and launching one after its communicator is freed would
// use freed memory. So Comm.Close refuses (ErrGraphsAlive) while graphs
// captured through gonccl hold the communicator, and Comm.Abort destroys them
// first. Destroy the graphs before closing. Graphs captured by another library
// (a PyTorch capture on a wrapped stream) are not known to gonccl.
//
// Launch and Destroy may be called from any goroutine: a Destroy (or an Abort
// of a communicator it holds) never frees the graph under a Launch in progress.
//
// gonccl knows an operation was captured when it is enqueued on the stream
// BeginCapture began on. One enqueued on another stream that joined the
// capture (forked through an event) is captured by CUDA but not counted:
// close such a communicator only after destroying the graph.
type Graph struct {
	cu       *CUDA
	graph    uintptr
	exec     atomic.Uintptr // 0 until instantiated (see EndCapture)
	instErr  error          // why instantiation failed; under cu.capt.mu
	dev      int
	captured uintptr // the stream it was captured on
	comms    []*Comm // the communicators whose operations it holds

	// life: graphDestroyed once Destroy was asked for, plus the number of
	// Launch calls inside CUDA; whoever leaves it at exactly graphDestroyed
	// frees the graph.
	life     atomic.Int64
	released atomic.Bool // free ran (refused launches also leave at graphDestroyed)
	aborted  atomic.Bool // destroyed by an Abort of a communicator it held
	freeErr  error
	freed    chan struct{}
	once     sync.Once
}

const graphDestroyed = 1 << 62

// Handle is the cudaGraphExec_t.
func (g *Graph) Handle() uintptr {
	if g == nil {
		return 0
	}
	return g.exec.Load()
}

// Device is the device of the captured stream.
func (g *Graph) Device() int {
	if g == nil {
		return 0
	}
	return g.dev
}

// made reports whether gonccl made g. As with Comm, the zero Graph and a nil
// *Graph count as destroyed ones: Launch and Destroy return an error matching
// ErrClosed.
func (g *Graph) made() bool { return g != nil && g.cu != nil }

func zeroGraph(op string) error {
	return &ClosedError{Op: op, What: "graph (the zero Graph, which gonccl did not make)"}
}

// Launch enqueues the graph's work on s (cudaGraphLaunch), which must be on
// the graph's device. It allocates nothing.
func (g *Graph) Launch(s Stream) error { return g.onStream(s, false) }

// Upload uploads the graph to its device in s without running it
// (cudaGraphUpload, CUDA >= 11.1), ordered after the work already in s and
// the graph's earlier launches. The first Launch of a graph never uploaded
// uploads it: Upload before a loop of launches, or before the first launch
// a service times, takes that out of them. s must be on the graph's device.
// A runtime without the function gives an *UnsupportedError.
func (g *Graph) Upload(s Stream) error {
	if g.made() && !g.cu.has(capi.CuGraphUpload) {
		return g.cu.unsupported(capi.CuGraphUpload)
	}
	return g.onStream(s, true)
}

// onStream is Launch, or Upload where upload is set: the checks, then the
// call on s, or on the legacy default stream of the graph's device.
func (g *Graph) onStream(s Stream, upload bool) (err error) {
	op := "cudaGraphLaunch"
	if upload {
		op = "cudaGraphUpload"
	}
	if !g.made() {
		return zeroGraph(op)
	}
	if g.life.Add(1)&graphDestroyed != 0 {
		g.leave()
		return g.closedError(op)
	}
	defer g.leave()
	if s.cu != nil && s.dev != g.dev {
		return argError(op, "graph of device %d, stream on device %d", g.dev, s.dev)
	}
	if !s.alive() {
		return destroyedStream(op)
	}
	exec := g.exec.Load()
	if exec == 0 {
		return g.notInstantiated(op)
	}
	if s.h == 0 {
		return g.cu.OnDevice(g.dev, func() error { return g.execOn(upload, exec, 0) })
	}
	return g.execOn(upload, exec, s.h)
}

// execOn calls cudaGraphUpload or cudaGraphLaunch.
func (g *Graph) execOn(upload bool, exec, stream uintptr) error {
	if upload {
		return g.cu.rt.GraphUpload(exec, stream)
	}
	return g.cu.rt.GraphLaunch(exec, stream)
}

// WriteDot writes the graph as captured to path, in Graphviz's DOT format
// (cudaGraphDebugDotPrint, CUDA >= 11.3): its nodes (kernels, copies, event
// records, host calls) and their dependencies; verbose adds each node's
// parameters (a kernel's function, grid, block and arguments). It shows
// what a capture recorded: two programs whose graphs of the same operations
// run at different speeds can be compared node by node. A runtime without
// the function gives an *UnsupportedError.
func (g *Graph) WriteDot(path string, verbose bool) error {
	const op = "cudaGraphDebugDotPrint"
	if !g.made() {
		return zeroGraph(op)
	}
	if !g.cu.has(capi.CuGraphDebugDotPrint) {
		return g.cu.unsupported(capi.CuGraphDebugDotPrint)
	}
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return argError(op, "path %q: want a file name without NUL bytes", path)
	}
	if g.life.Add(1)&graphDestroyed != 0 { // as a Launch: Destroy waits
		g.leave()
		return g.closedError(op)
	}
	defer g.leave()
	flags := uint32(0)
	if verbose {
		flags = 1 // cudaGraphDebugDotFlagsVerbose
	}
	c := append([]byte(path), 0)
	return g.cu.rt.GraphDebugDotPrint(g.graph, &c[0], flags)
}

// Destroy destroys the executable graph and the graph (launches already
// enqueued still run), and releases the communicators it holds. A second
// Destroy, or a Destroy after an Abort of a communicator it held destroyed
// it, returns an error matching ErrClosed.
func (g *Graph) Destroy() error {
	const op = "cudaGraphExecDestroy"
	if !g.made() {
		return zeroGraph(op)
	}
	for {
		v := g.life.Load()
		if v&graphDestroyed != 0 {
			return g.closedError(op)
		}
		if g.life.CompareAndSwap(v, v|graphDestroyed) {
			if v == 0 {
				return g.free()
			}
			<-g.freedChan() // the last Launch out frees it
			return g.freeErr
		}
	}
}

// destroyForAbort is Destroy by an Abort of a communicator g holds: later
// Launch and Destroy calls say why the graph is gone.
func (g *Graph) destroyForAbort() {
	g.aborted.Store(true)
	g.Destroy()
}

func (g *Graph) closedError(op string) error {
	if g.aborted.Load() {
		return &ClosedError{Op: op, What: "graph (destroyed by an Abort of a communicator it holds)"}
	}
	return &ClosedError{Op: op, What: "graph"}
}

// leave ends a Launch; the last one out of a destroyed graph frees it.
func (g *Graph) leave() {
	if g.life.Add(-1) == graphDestroyed {
		g.free()
	}
}

func (g *Graph) freedChan() chan struct{} {
	g.once.Do(func() { g.freed = make(chan struct{}) })
	return g.freed
}

// free destroys the CUDA objects, once, and releases the communicators.
func (g *Graph) free() error {
	if !g.released.CompareAndSwap(false, true) {
		<-g.freedChan()
		return g.freeErr
	}
	var err error
	if exec := g.exec.Load(); exec != 0 {
		err = g.cu.rt.GraphExecDestroy(exec)
	}
	if gerr := g.cu.rt.GraphDestroy(g.graph); err == nil {
		err = gerr
	}
	g.freeErr = err
	for _, c := range g.comms {
		c.graphMu.Lock()
		if i := slices.Index(c.graphList, g); i >= 0 {
			c.graphList = slices.Delete(c.graphList, i, i+1)
		}
		c.graphMu.Unlock()
		c.graphs.Add(-1)
	}
	close(g.freedChan())
	return err
}
