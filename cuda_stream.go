package nccl

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/nccl/abi"
)

// Stream is a CUDA stream on one device. The zero Stream is the legacy
// default stream of whichever device the call runs on (a communicator's, for
// its operations). Make one with CUDA.NewStream, or describe another
// library's with CUDA.WrapStream.
type Stream struct {
	cu   *CUDA
	h    uintptr // cudaStream_t
	dev  int
	life *streamLife // shared by the copies of a stream NewStream or WrapStream made
}

// streamLife marks a stream destroyed for every copy of its Stream: a second
// Destroy would hand CUDA a dead handle (undefined; CUDA may have reused it).
type streamLife struct{ destroyed atomic.Bool }

// NewStream creates a stream on device dev. StreamNonBlocking keeps it from
// synchronising with the legacy default stream. Destroy it when done.
func (cu *CUDA) NewStream(dev int, flags StreamFlags) (Stream, error) {
	if cu == nil {
		return Stream{}, nilCUDA("NewStream")
	}
	var h uintptr
	err := cu.OnDevice(dev, func() error {
		return cu.rt.StreamCreateWithFlags(&h, uint32(flags))
	})
	if err == nil {
		destroyedStreams.Delete(h) // CUDA may hand out a destroyed stream's handle again
	}
	return Stream{cu: cu, h: h, dev: dev, life: new(streamLife)}, err
}

// WrapStream describes a stream created elsewhere (a PyTorch stream's
// cuda_stream, say) on device dev; 0 is that device's legacy default stream.
// On a nil *CUDA (a library opened WithoutCUDARuntime) it still describes
// it, for NCCL's operations; the Stream's own methods then refuse, there
// being no runtime to call.
func (cu *CUDA) WrapStream(dev int, handle uintptr) (Stream, error) {
	if err := checkDevice("WrapStream", dev); err != nil {
		return Stream{}, err
	}
	return Stream{cu: cu, h: handle, dev: dev, life: new(streamLife)}, nil
}

// DefaultStream is device dev's legacy default stream.
func (cu *CUDA) DefaultStream(dev int) Stream { return Stream{cu: cu, dev: dev} }

// Handle is the cudaStream_t.
func (s Stream) Handle() uintptr { return s.h }

// Device is the stream's device.
func (s Stream) Device() int { return s.dev }

func (s Stream) runtime(op string) (*CUDA, error) {
	if s.cu == nil {
		return nil, argError(op, "the stream has no CUDA runtime (the zero Stream, or one a nil *CUDA described): make one with CUDA.NewStream or CUDA.DefaultStream")
	}
	if !s.alive() {
		return nil, destroyedStream(op)
	}
	return s.cu, nil
}

// alive reports whether s was not destroyed (through any copy of it): a
// destroyed stream's handle must not reach CUDA, which may have given it to
// a new stream. One atomic load.
func (s Stream) alive() bool { return s.life == nil || !s.life.destroyed.Load() }

func destroyedStream(op string) error { return &ClosedError{Op: op, What: "stream (destroyed)"} }

// Destroy destroys the stream; work already on it still completes. A second
// Destroy of the stream (through any copy of the Stream) returns an error
// matching ErrClosed.
func (s Stream) Destroy() error {
	const op = "cudaStreamDestroy"
	cu, err := s.runtime(op)
	if err != nil {
		return err
	}
	if s.h == 0 {
		return argError(op, "the legacy default stream cannot be destroyed")
	}
	if err := cu.refuseStream(op, s.h, s.dev); err != nil {
		return err
	}
	if s.life != nil && !s.life.destroyed.CompareAndSwap(false, true) {
		return destroyedStream(op)
	}
	err = cu.OnDevice(s.dev, func() error { return cu.rt.StreamDestroy(s.h) })
	if err != nil && s.life != nil {
		s.life.destroyed.Store(false)
	}
	if err == nil {
		destroyedStreams.Store(s.h, struct{}{})
	}
	return err
}

// destroyedStreams holds the handles of the streams destroyed through gonccl
// and not handed out again since: Comm.Close waits for the streams its
// operations used (see waitOutstanding) and must not give CUDA a dead one.
var destroyedStreams sync.Map

func streamDestroyed(h uintptr) bool {
	_, ok := destroyedStreams.Load(h)
	return ok
}

// Synchronize waits until all work on the stream is done.
func (s Stream) Synchronize() error {
	cu, err := s.runtime("cudaStreamSynchronize")
	if err != nil {
		return err
	}
	if err := cu.refuseStream("cudaStreamSynchronize", s.h, s.dev); err != nil {
		return err
	}
	if s.h == 0 { // the legacy stream of the current device: make it s's
		return cu.OnDevice(s.dev, func() error { return cu.rt.StreamSynchronize(0) })
	}
	return cu.rt.StreamSynchronize(s.h)
}

// Query reports whether all work on the stream is done, without waiting.
func (s Stream) Query() (bool, error) {
	cu, err := s.runtime("cudaStreamQuery")
	if err != nil {
		return false, err
	}
	if err := cu.refuseStream("cudaStreamQuery", s.h, s.dev); err != nil {
		return false, err
	}
	if s.h == 0 {
		var done bool
		err := cu.OnDevice(s.dev, func() (err error) { done, err = cu.rt.StreamQuery(0); return err })
		return done, err
	}
	return cu.rt.StreamQuery(s.h)
}

// Wait makes later work on s wait until e completes, on the GPU.
func (s Stream) Wait(e Event) error {
	cu, err := s.runtime("cudaStreamWaitEvent")
	if err != nil {
		return err
	}
	if s.h == 0 { // the legacy stream of the current device: make it s's
		return cu.OnDevice(s.dev, func() error { return cu.rt.StreamWaitEvent(0, e.h) })
	}
	return cu.rt.StreamWaitEvent(s.h, e.h)
}

// After makes later work on s wait for everything enqueued on other so far, on
// the GPU, without blocking the host (an event recorded on other, waited on by
// s). Use it to order a compute stream after a communication stream and the
// reverse.
func (s Stream) After(other Stream) error {
	cu, err := s.runtime("cudaStreamWaitEvent")
	if err != nil {
		return err
	}
	if !other.alive() {
		return destroyedStream("cudaStreamWaitEvent")
	}
	e, err := cu.NewEvent(other.dev, EventDisableTiming)
	if err != nil {
		return err
	}
	// The runtime keeps what the wait needs: the event can go at once.
	defer e.Destroy()
	if err := e.Record(other); err != nil {
		return err
	}
	return s.Wait(e)
}

// DeviceSynchronize waits for all work on device dev.
func (cu *CUDA) DeviceSynchronize(dev int) error {
	if cu == nil {
		return nilCUDA("DeviceSynchronize")
	}
	if err := checkDevice("cudaDeviceSynchronize", dev); err != nil {
		return err
	}
	if err := cu.refuseDevice("cudaDeviceSynchronize", dev); err != nil {
		return err
	}
	return cu.OnDevice(dev, func() error { return cu.rt.DeviceSynchronize() })
}

func (cu *CUDA) ready(sym int, h uintptr) (bool, error) {
	v, err := cu.callOn(-1, cu.rt.Fn[sym], h)
	if err != nil {
		return false, err
	}
	r := abi.CudaError(int32(v))
	switch r {
	case abi.CudaSuccess:
		return true, nil
	case abi.CudaErrorNotReady:
		return false, nil
	}
	return false, cu.failure(sym, r)
}

// Event is a CUDA event on one device.
type Event struct {
	cu  *CUDA
	h   uintptr // cudaEvent_t
	dev int
}

// NewEvent creates an event on device dev.
func (cu *CUDA) NewEvent(dev int, flags EventFlags) (Event, error) {
	if cu == nil {
		return Event{}, nilCUDA("NewEvent")
	}
	var h uintptr
	err := cu.OnDevice(dev, func() error {
		return cu.rt.EventCreateWithFlags(&h, uint32(flags))
	})
	return Event{cu: cu, h: h, dev: dev}, err
}

// Handle is the cudaEvent_t.
func (e Event) Handle() uintptr { return e.h }

func (e Event) runtime(op string) (*CUDA, error) {
	if e.cu == nil {
		return nil, argError(op, "the zero Event (make one with CUDA.NewEvent)")
	}
	return e.cu, nil
}

// Record records the event at the current end of s, on the same device.
func (e Event) Record(s Stream) error {
	cu, err := e.runtime("cudaEventRecord")
	if err != nil {
		return err
	}
	if s.cu != nil && s.dev != e.dev {
		return argError("cudaEventRecord", "event on device %d, stream on device %d", e.dev, s.dev)
	}
	if !s.alive() {
		return destroyedStream("cudaEventRecord")
	}
	if s.h == 0 { // the legacy stream of the current device: make it the event's
		return cu.OnDevice(e.dev, func() error { return cu.rt.EventRecord(e.h, 0) })
	}
	// The event and the stream name their device: no current device involved,
	// and no allocation (nccl-bench records two per iteration).
	if err := cu.rt.EventRecord(e.h, s.h); err != nil {
		return err
	}
	cu.noteRecord(e.h, s.h) // one atomic load when no capture is open
	return nil
}

// Synchronize waits until the event completes.
func (e Event) Synchronize() error {
	cu, err := e.runtime("cudaEventSynchronize")
	if err != nil {
		return err
	}
	if err := cu.refuseEvent("cudaEventSynchronize", e.h); err != nil {
		return err
	}
	return cu.rt.EventSynchronize(e.h)
}

// Query reports whether the event has completed, without waiting.
func (e Event) Query() (bool, error) {
	cu, err := e.runtime("cudaEventQuery")
	if err != nil {
		return false, err
	}
	if err := cu.refuseEvent("cudaEventQuery", e.h); err != nil {
		return false, err
	}
	return cu.rt.EventQuery(e.h)
}

// Elapsed is the time from start to e, both completed timing events.
func (e Event) Elapsed(start Event) (time.Duration, error) {
	cu, err := e.runtime("cudaEventElapsedTime")
	if err != nil {
		return 0, err
	}
	if err := cu.refuseEvent("cudaEventElapsedTime", e.h); err != nil {
		return 0, err
	}
	if err := cu.refuseEvent("cudaEventElapsedTime", start.h); err != nil {
		return 0, err
	}
	var ms float32
	if err := cu.rt.EventElapsedTime(&ms, start.h, e.h); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Destroy destroys the event.
func (e Event) Destroy() error {
	cu, err := e.runtime("cudaEventDestroy")
	if err != nil {
		return err
	}
	return cu.OnDevice(e.dev, func() error { return cu.rt.EventDestroy(e.h) })
}
