package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A CUDA launch (a kernel's, a graph's, an NCCL operation's) holds its calling
// thread for microseconds. One thread launching for four GPUs pays four of
// those in a row before the last GPU starts; a thread per GPU pays one, in
// parallel. nccl-bench measures both layouts (-g 4 against -t 4 -g 1,
// docs/performance.md). Threads gives one goroutine the second: it keeps an
// OS thread per GPU, locked, with its GPU current, and a call hands each
// thread its share and waits for all of them. Between calls a thread spins
// for a while (SetSpin) so that the next call reaches it in the time of a
// cache line's transfer, then parks, costing nothing until the next.
// BenchmarkThreadsLaunch measures a call's own cost on the fakes; nccl-bench
// -threads, the whole against nccl-tests on GPUs.

// Threads runs one goroutine's work for several GPUs in parallel, on one OS
// thread per GPU that it keeps for the purpose (NewThreads). Run calls a
// function on every thread at once; Launch launches a CUDA graph per thread
// and allocates nothing. Operations of several ranks of one communicator
// made through Run come from goroutines of their own, as NCCL asks of
// ranks that are not in one Group: each thread may call a rank's operations
// without a Group, and their first operations connect the ranks together.
//
// One call runs at a time; a second waits for the first under its own
// context. A Threads is safe for use by several goroutines.
type Threads struct {
	cu   *CUDA
	devs []int
	ws   []threadWorker

	call     atomic.Uint32 // the call's number, bumped to hand the threads a call (a futex word)
	sleepers atomic.Int32  // threads parked on call
	lock     atomic.Int32  // 1 while a call holds the threads (see release)
	pending  atomic.Int64  // threads yet to finish the call, plus callerLeft
	finished atomic.Uint32 // bumped by the last thread to finish a call (a futex word)
	waiting  atomic.Bool   // the caller is parked on finished
	spin     atomic.Int64  // how long a waiting side spins before it parks, ns
	procs    int           // GOMAXPROCS when made (see spinUntil)
	closed   atomic.Bool
	stop     sync.Once

	// The call, written before call is bumped and read by the threads after
	// they see the new number.
	kind    threadCall
	fn      func(i int) error
	graphs  []*Graph
	streams []Stream
}

// threadWorker is what one thread's call returned, in a cache line of its
// own: the thread writes it while the others spin.
type threadWorker struct {
	err error
	_   [112]byte
}

type threadCall int

const (
	callRun threadCall = iota
	callLaunch
	callStop
)

// callerLeft marks pending when a Run's caller returned at its context's end
// before the threads did: the last thread to finish then releases the
// threads, not the caller.
const callerLeft = 1 << 32

// DefaultThreadSpin is how long, by default, a thread of a Threads spins for
// its next call after finishing one, and a caller for the threads to finish,
// before parking. It covers the gaps of a loop of launches, including the
// launches that block while CUDA's queue is full (nccl-bench -threads'
// plain loop: with a shorter spin every call paid a wake-up). Spinning holds
// one of the process's GOMAXPROCS per thread: with GOMAXPROCS not above the
// number of threads nothing spins. A service that calls rarely may prefer
// SetSpin(0).
const DefaultThreadSpin = time.Millisecond

// NewThreads starts an OS thread for each of devices (a GPU may come more
// than once), locked, with its device current. Thread i runs index i of
// every call. Close ends them.
func (cu *CUDA) NewThreads(devices ...int) (*Threads, error) {
	const op = "NewThreads"
	if cu == nil {
		return nil, nilCUDA(op)
	}
	if len(devices) == 0 {
		return nil, argError(op, "no devices")
	}
	for _, d := range devices {
		if err := checkDevice(op, d); err != nil {
			return nil, err
		}
	}
	t := &Threads{cu: cu, devs: append([]int(nil), devices...), ws: make([]threadWorker, len(devices)),
		procs: runtime.GOMAXPROCS(0)}
	t.spin.Store(int64(DefaultThreadSpin))
	started := make(chan error, len(devices))
	for i := range t.ws {
		go t.work(i, started)
	}
	var errs []error
	for range devices {
		if err := <-started; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.Close()
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// Len is the number of threads.
func (t *Threads) Len() int {
	if t == nil {
		return 0
	}
	return len(t.devs)
}

// Device is thread i's device.
func (t *Threads) Device(i int) int { return t.devs[i] }

// SetSpin sets how long the threads spin for their next call, and a caller
// for the threads, before parking (DefaultThreadSpin; 0: park at once). A
// service that calls rarely may prefer 0; a training loop, the default.
func (t *Threads) SetSpin(d time.Duration) {
	if t != nil {
		t.spin.Store(max(int64(d), 0))
	}
}

// Run calls fn(i) on thread i, for every thread at once, and returns when
// all have returned: nil, or their errors joined, each saying its thread
// and device. fn runs with the thread's device current and may call any
// gonccl method (a rank's operations, a Group of them, a capture).
//
// A panic in fn ends the program, as in any goroutine.
//
// If ctx ends first, Run returns an error wrapping ctx.Err() and leaves the
// calls running: the threads take the next call once the last has returned,
// and their errors are not reported. Close or Abort the communicators that
// hold them to free calls waiting inside NCCL.
func (t *Threads) Run(ctx context.Context, fn func(i int) error) error {
	const op = "Threads.Run"
	if err := t.acquire(ctx, op); err != nil {
		return err
	}
	if fn == nil {
		t.release()
		return argError(op, "nil function")
	}
	t.fn = fn
	t.start(callRun)
	return t.finish(ctx, op)
}

// Launch launches graphs[i] on streams[i] from thread i (Graph.Launch), for
// every thread at once, and returns when every launch has returned. Each
// stream should be on its thread's device, as each graph on its stream's.
// It allocates nothing where the launches succeed.
func (t *Threads) Launch(ctx context.Context, graphs []*Graph, streams []Stream) error {
	const op = "Threads.Launch"
	if err := t.acquire(ctx, op); err != nil {
		return err
	}
	if len(graphs) != len(t.ws) || len(streams) != len(t.ws) {
		t.release()
		return argError(op, "%d graphs and %d streams for %d threads", len(graphs), len(streams), len(t.ws))
	}
	t.graphs, t.streams = graphs, streams
	t.start(callLaunch)
	return t.finish(ctx, op)
}

// Close ends the threads once no call holds them: at once, or when the
// calls of a Run that returned at its context's end return. It does not
// wait for them. Later calls return an error matching ErrClosed.
func (t *Threads) Close() error {
	if t == nil {
		return &ClosedError{Op: "Threads.Close", What: "Threads (a nil *Threads)"}
	}
	t.closed.Store(true)
	if t.lock.CompareAndSwap(0, 1) {
		t.end()
	}
	return nil
}

// acquire takes the threads for one call: at once where none holds them,
// else it waits (polling: a second caller is not the loop this serves) until
// the holder releases them, ctx ends or the threads are closed.
func (t *Threads) acquire(ctx context.Context, op string) error {
	if t == nil {
		return &ClosedError{Op: op, What: "Threads (a nil *Threads)"}
	}
	if ctx == nil {
		return nilContext(op)
	}
	for pause := time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		if t.closed.Load() {
			return &ClosedError{Op: op, What: "Threads"}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if t.lock.CompareAndSwap(0, 1) {
			if t.closed.Load() {
				t.release()
				return &ClosedError{Op: op, What: "Threads"}
			}
			return nil
		}
		time.Sleep(pause)
	}
}

// release lets the next call take the threads, or ends them after Close.
func (t *Threads) release() {
	t.lock.Store(0)
	if t.closed.Load() && t.lock.CompareAndSwap(0, 1) {
		t.end()
	}
}

// end stops the threads; the caller holds them.
func (t *Threads) end() {
	t.stop.Do(func() {
		t.kind = callStop
		t.handOut()
	})
}

// start hands the call in t.kind's place to every thread.
func (t *Threads) start(kind threadCall) {
	for i := range t.ws {
		t.ws[i].err = nil
	}
	t.kind = kind
	t.pending.Store(int64(len(t.ws)))
	t.handOut()
}

// handOut bumps the call's number and wakes the threads that parked. A
// thread parks only after counting itself in sleepers and seeing no new
// call, and the kernel's futex wait compares the number again: with the
// number bumped before sleepers is read, either the thread sees the call or
// this sees it asleep.
func (t *Threads) handOut() {
	t.call.Add(1)
	if t.sleepers.Load() > 0 {
		futexWake(&t.call)
	}
}

// finish waits for the threads to finish the call, spinning, then parked,
// until ctx ends; then the result.
func (t *Threads) finish(ctx context.Context, op string) error {
	if !t.spinUntil(func() bool { return t.pending.Load() == 0 }) {
		// Parked on the finished word, for at most a millisecond at a time
		// where ctx can end: a futex knows no channel.
		var slice *unix.Timespec
		if ctx.Done() != nil {
			slice = &unix.Timespec{Nsec: int64(time.Millisecond)}
		}
		for t.pending.Load() != 0 {
			f := t.finished.Load()
			t.waiting.Store(true)
			if t.pending.Load() != 0 {
				futexWait(&t.finished, f, slice)
			}
			t.waiting.Store(false)
			if ctx.Err() == nil {
				continue
			}
			if v := t.pending.Add(callerLeft); v != callerLeft {
				return fmt.Errorf("%s: %d of %d threads still running the call: %w", op, v-callerLeft, len(t.ws), ctx.Err())
			}
			t.pending.Add(-callerLeft) // all done meanwhile: the result stands
		}
	}
	err := t.result()
	t.fn, t.graphs, t.streams = nil, nil, nil
	t.release()
	return err
}

// spinUntil spins until cond holds (true) or the spin time passes (false).
// Nothing spins where GOMAXPROCS (when NewThreads ran) leaves no room for the
// threads and their caller to spin at once: a spinning goroutine would hold
// the P that another needs.
func (t *Threads) spinUntil(cond func() bool) bool {
	d := time.Duration(t.spin.Load())
	if d == 0 || t.procs <= len(t.ws) {
		return cond()
	}
	t0 := time.Now()
	for k := 1; ; k++ {
		if cond() {
			return true
		}
		if k%64 == 0 && time.Since(t0) > d {
			return false
		}
	}
}

// result is nil, or the threads' errors joined, each with its thread.
func (t *Threads) result() error {
	n := 0
	for i := range t.ws {
		if t.ws[i].err != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	errs := make([]error, 0, n)
	for i := range t.ws {
		if err := t.ws[i].err; err != nil {
			errs = append(errs, fmt.Errorf("thread %d (device %d): %w", i, t.devs[i], err))
		}
	}
	return errors.Join(errs...)
}

// work is thread i: locked to its OS thread for good (the thread ends with
// it), its device current, it runs each call it is handed.
func (t *Threads) work(i int, started chan<- error) {
	runtime.LockOSThread()
	dev := t.devs[i]
	if err := t.cu.rt.SetDevice(dev); err != nil {
		started <- t.cu.noSuchDevice(dev, err)
		return
	}
	t.cu.rt.TD.Used(dev)
	started <- nil
	w := &t.ws[i]
	var seen uint32
	for {
		seen = t.next(seen)
		var err error
		switch t.kind {
		case callStop:
			return
		case callRun:
			err = t.fn(i)
		case callLaunch:
			err = t.graphs[i].Launch(t.streams[i])
		}
		w.err = err
		t.done1()
	}
}

// next waits for the call after seen, spinning, then parked; its number.
func (t *Threads) next(seen uint32) uint32 {
	if t.spinUntil(func() bool { return t.call.Load() != seen }) {
		return t.call.Load()
	}
	for {
		t.sleepers.Add(1)
		if t.call.Load() == seen {
			futexWait(&t.call, seen, nil)
		}
		t.sleepers.Add(-1)
		if c := t.call.Load(); c != seen {
			return c
		}
	}
}

// done1 counts one thread finished: the last wakes a parked caller, or,
// where the caller left, releases the threads itself.
func (t *Threads) done1() {
	switch t.pending.Add(-1) {
	case 0:
		t.finished.Add(1)
		if t.waiting.Load() {
			futexWake(&t.finished)
		}
	case callerLeft:
		t.pending.Store(0)
		t.fn, t.graphs, t.streams = nil, nil, nil
		t.release()
	}
}

// The threads and their caller park in the kernel (futex), not on Go
// channels: a goroutine readied through a channel waits in its waker's run
// queue, and one locked to its thread waits further for the scheduler to
// hand it its thread, while the waker spins on. Parked that way, every call
// of nccl-bench -threads' plain loop waited out both sides' spin
// (-threads-spin against -threads-spin 0 shows the cost).

const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// futexWait sleeps while *addr holds val, until woken, for at most timeout
// (nil: none), or spuriously.
func futexWait(addr *atomic.Uint32, val uint32, timeout *unix.Timespec) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitPrivate, uintptr(val),
		uintptr(unsafe.Pointer(timeout)), 0, 0)
}

// futexWake wakes every thread sleeping on addr.
func futexWake(addr *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePrivate, math.MaxInt32, 0, 0, 0)
}
