package nccl

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// Communicator creation. Every form takes a context, which bounds the init in
// both modes (see Comm). A non-blocking init returns at once inside NCCL and
// gonccl waits for it outside, so the context's end aborts it, frees what it
// took and returns an error wrapping ctx.Err(). A blocking init cannot be
// reached inside NCCL: it runs on a goroutine of its own, and the context's
// end returns that error while the init goes on, its communicator aborted once
// NCCL returns (see bounded). A rank that never arrives then costs the others
// their deadline, not their process.

// blockingFor decides a new communicator's mode: NCCL_COMM_BLOCKING if it is
// 0 or 1 (NCCL's parseCommConfig lets it override the config, so gonccl must
// agree with it), else Config.Blocking if set, else blocking, NCCL's default
// (see Comm).
func blockingFor(cfg *Config) bool {
	switch os.Getenv("NCCL_COMM_BLOCKING") {
	case "0":
		return false
	case "1":
		return true
	}
	if cfg != nil && cfg.Blocking != nil {
		return *cfg.Blocking
	}
	return true
}

// withBlocking is cfg with Blocking set, so NCCL gets the mode decided here.
func withBlocking(cfg *Config, blocking bool) *Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Blocking = &blocking
	return &c
}

// InitRank creates rank's communicator among nranks ranks on CUDA device dev
// (ncclCommInitRankConfig). Every rank calls it with the same id. cfg may be
// nil. It returns once every rank has joined, an error if NCCL fails, or an
// error wrapping ctx.Err() when ctx ends first (see Comm for what each mode
// does then).
func (l *Library) InitRank(ctx context.Context, dev int, id UniqueID, nranks, rank int, cfg *Config) (_ *Comm, err error) {
	defer func() { err = inMethod("InitRank", err) }()
	if l == nil {
		return nil, nilLibrary("InitRank")
	}
	if ctx == nil {
		return nil, nilContext("InitRank")
	}
	const op = "ncclCommInitRankConfig"
	if err := checkInitArgs(op, dev, nranks, rank); err != nil {
		return nil, err
	}
	return l.initComm(ctx, op, dev, nranks, rank, cfg, cliqueKey(&id), func(h *uintptr, cfgPtr uintptr) error {
		return l.nc.CommInitRankConfig(h, nranks, (*abi.UniqueID)(&id), rank, cfgPtr)
	})
}

// InitRankScalable is InitRank with the bootstrap spread over several roots,
// one per id (ncclCommInitRankScalable, NCCL >= 2.23).
func (l *Library) InitRankScalable(ctx context.Context, dev int, ids []UniqueID, nranks, rank int, cfg *Config) (_ *Comm, err error) {
	defer func() { err = inMethod("InitRankScalable", err) }()
	if l == nil {
		return nil, nilLibrary("InitRankScalable")
	}
	if ctx == nil {
		return nil, nilContext("InitRankScalable")
	}
	const op = "ncclCommInitRankScalable"
	if l.nc.Fn[capi.FnCommInitRankScalable] == 0 {
		return nil, l.unsupported(capi.FnCommInitRankScalable)
	}
	if err := checkInitArgs(op, dev, nranks, rank); err != nil {
		return nil, err
	}
	if len(ids) == 0 || len(ids) > nranks {
		return nil, argError(op, "%d ids for %d ranks: want 1 to nranks", len(ids), nranks)
	}
	return l.initComm(ctx, op, dev, nranks, rank, cfg, cliqueKey(&ids[0]), func(h *uintptr, cfgPtr uintptr) error {
		return l.nc.CommInitRankScalable(h, nranks, rank, len(ids), (*abi.UniqueID)(&ids[0]), cfgPtr)
	})
}

func checkInitArgs(op string, dev, nranks, rank int) error {
	if err := checkDevice(op, dev); err != nil {
		return err
	}
	if err := checkInt32(op, "nranks", nranks, 1); err != nil {
		return err
	}
	return checkRank(op, "rank", rank, nranks)
}

// initComm runs one init call on a locked thread with dev current (NCCL binds
// the communicator to the calling thread's device), then waits for a
// non-blocking one outside NCCL; a blocking one whose context can end runs on
// a goroutine of its own (see bounded). Inside a Group the call joins NCCL's
// group (see Group), and the communicator, of either mode, is ready when the
// group ends: the Group waits for a non-blocking one then.
// key is the communicator's clique (see clique).
func (l *Library) initComm(ctx context.Context, op string, dev, nranks, rank int, cfg *Config, key uint64,
	call func(h *uintptr, cfgPtr uintptr) error) (*Comm, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	blocking := blockingFor(cfg)
	if blocking && ctx.Done() != nil && l.recording() == nil {
		comms, err := l.bounded(ctx, op, func() ([]*Comm, error) {
			c, err := l.makeComm(op, dev, nranks, rank, cfg, blocking, key, call)
			if err != nil {
				return nil, err
			}
			return []*Comm{c}, nil
		})
		if err != nil {
			return nil, err
		}
		comms[0].q.claim()
		return comms[0], nil
	}
	c, err := l.makeComm(op, dev, nranks, rank, cfg, blocking, key, call)
	if err != nil {
		return nil, err
	}
	c.q.claim()
	if g := l.recording(); g != nil {
		// Inside a Group NCCL joins the communicator at ncclGroupEnd: the
		// Group waits for it there, and aborts it if the Group fails (see
		// groupEnd).
		g.inits = append(g.inits, pendingInit{c, ctx, op})
		return c, nil
	}
	if err := c.ready(ctx, op); err != nil {
		return nil, err
	}
	return c, nil
}

// makeComm makes the init call on dev's locked thread and wraps its handle.
func (l *Library) makeComm(op string, dev, nranks, rank int, cfg *Config, blocking bool, key uint64,
	call func(h *uintptr, cfgPtr uintptr) error) (*Comm, error) {
	var c *Comm
	err := l.onDevice(op, dev, func() error {
		buf, ptr, err := l.encodeConfig(op, withBlocking(cfg, blocking))
		if err != nil {
			return err
		}
		if err := l.joinNCCLGroup(); err != nil {
			buf.free()
			return err
		}
		var h uintptr
		if err = call(&h, ptr); err != nil && !isInProgress(err) {
			if h != 0 { // NCCL made the communicator before failing: free it
				l.nc.CommAbort(h)
			}
			buf.free()
			return err
		}
		c = l.newComm(h, dev, rank, nranks, blocking, buf, key)
		return nil
	})
	return c, err
}

// newComm wraps a handle NCCL returned and counts it open in the library, in
// the clique of key (see clique).
func (l *Library) newComm(h uintptr, dev, rank, nranks int, blocking bool, cfg *configBuffer, key uint64) *Comm {
	c := &Comm{lib: l, h: h, dev: dev, rank: rank, nranks: nranks, blocking: blocking, cfg: cfg, done: make(chan struct{})}
	c.lastStream.Store(noStream)
	l.joinClique(c, key)
	l.track()
	return c
}

// bounded runs init, blocking inits that no context can reach inside NCCL
// (NCCL aborts only a non-blocking init: ncclCommAbort of a blocking one
// would free it under the call), on a goroutine of its own, and returns what
// it returns, or, when ctx ends first, an error wrapping ctx.Err(). The init
// then goes on until NCCL returns; what it made is aborted then, and until
// then Library.Close refuses. A peer that never comes can keep that goroutine
// and its thread for good: a communicator that must give up cleanly is a
// non-blocking one (Config.Blocking).
func (l *Library) bounded(ctx context.Context, op string, init func() ([]*Comm, error)) ([]*Comm, error) {
	type result struct {
		comms []*Comm
		err   error
	}
	done := make(chan result, 1)
	go func() {
		comms, err := init()
		done <- result{comms, err}
	}()
	select {
	case r := <-done:
		return r.comms, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-done: // it finished as ctx ended
		return r.comms, r.err
	default:
	}
	l.givenUp.Add(1)
	go func() {
		r := <-done
		for _, c := range r.comms {
			c.Abort()
		}
		l.givenUp.Add(-1)
	}()
	return nil, fmt.Errorf("%s: %w (a blocking init cannot be stopped inside NCCL: it goes on, and its communicator is aborted when NCCL returns; Config.Blocking = false makes inits abortable)", op, ctx.Err())
}

// checkInitAllDevices refuses what ncclCommInitAll refuses, for both of
// InitAll's paths: a device this process does not see (ErrInvalidArgument)
// and a device listed twice (ErrInvalidUsage), unless NCCL_MULTI_RANK_GPU_ENABLE=1
// lets ranks share a GPU (NCCL >= 2.30).
func (l *Library) checkInitAllDevices(op string, devs []int) error {
	n := -1
	if l.cuda != nil {
		if c, err := l.cuda.DeviceCount(); err == nil {
			n = c
		}
	}
	shared := os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE") == "1" && l.version.AtLeast(abi.V(2, 30, 0))
	for i, d := range devs {
		if err := checkDevice(op, d); err != nil {
			return err
		}
		if n >= 0 && d >= n {
			return argError(op, "device %d: this process sees %d CUDA devices (CUDA_VISIBLE_DEVICES decides which)", d, n)
		}
		if !shared && slices.Contains(devs[:i], d) {
			return &Error{Op: op, Code: abi.InvalidUsage, Msg: fmt.Sprintf("device %d listed twice: one rank per GPU (NCCL_MULTI_RANK_GPU_ENABLE=1 lets ranks share one from NCCL 2.30)", d)}
		}
	}
	return nil
}

// InitAll creates one communicator per device of devs from this process:
// comms[i] is rank i on devs[i]. A blocking set with a nil cfg comes from
// ncclCommInitAll; otherwise from ncclGetUniqueId and one
// ncclCommInitRankConfig per device in a group, as ncclCommInitAll does
// inside. ctx bounds it as it bounds InitRank. On failure no communicator is
// left open.
func (l *Library) InitAll(ctx context.Context, devs []int, cfg *Config) (_ []*Comm, err error) {
	defer func() { err = inMethod("InitAll", err) }()
	if l == nil {
		return nil, nilLibrary("InitAll")
	}
	if ctx == nil {
		return nil, nilContext("InitAll")
	}
	const op = "ncclCommInitAll"
	if err := l.live(op); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, argError(op, "no devices")
	}
	if err := checkInt32(op, "number of devices", len(devs), 1); err != nil {
		return nil, err
	}
	if err := l.checkInitAllDevices(op, devs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var comms []*Comm
	if blockingFor(cfg) && ctx.Done() != nil && l.recording() == nil {
		comms, err = l.bounded(ctx, op, func() ([]*Comm, error) { return l.initAll(context.Background(), devs, cfg) })
	} else {
		comms, err = l.initAll(ctx, devs, cfg)
	}
	for _, c := range comms {
		c.q.claim() // made by this goroutine: see arrive
	}
	return comms, err
}

func (l *Library) initAll(ctx context.Context, devs []int, cfg *Config) ([]*Comm, error) {
	if !blockingFor(cfg) || cfg != nil {
		return l.initAllGrouped(ctx, devs, cfg)
	}
	hs := make([]uintptr, len(devs))
	ds := make([]int32, len(devs))
	for i, d := range devs {
		ds[i] = int32(d)
	}
	if err := l.nc.CommInitAll(&hs[0], len(devs), &ds[0]); err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(devs))
	key := soloKey()
	for i, h := range hs {
		comms[i] = l.newComm(h, devs[i], i, len(devs), true, nil, key)
	}
	return comms, nil
}

func (l *Library) initAllGrouped(ctx context.Context, devs []int, cfg *Config) ([]*Comm, error) {
	id, err := l.GetUniqueID()
	if err != nil {
		return nil, err
	}
	n := len(devs)
	comms := make([]*Comm, 0, n)
	abortAll := func() {
		for _, c := range comms {
			c.Abort()
		}
	}
	blocking := blockingFor(cfg)
	err = l.Group(func() error {
		for i, d := range devs {
			err := l.onDevice("ncclCommInitRankConfig", d, func() error {
				buf, ptr, err := l.encodeConfig("ncclCommInitRankConfig", withBlocking(cfg, blocking))
				if err != nil {
					return err
				}
				if err := l.joinNCCLGroup(); err != nil {
					buf.free()
					return err
				}
				var h uintptr
				err = l.nc.CommInitRankConfig(&h, n, (*abi.UniqueID)(&id), i, ptr)
				if err != nil && !isInProgress(err) {
					buf.free()
					return err
				}
				comms = append(comms, l.newComm(h, d, i, n, blocking, buf, cliqueKey(&id)))
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		abortAll()
		return nil, err
	}
	for _, c := range comms {
		if err := c.ready(ctx, "ncclCommInitAll"); err != nil {
			abortAll()
			return nil, err
		}
	}
	return comms, nil
}

// Split creates a communicator of the ranks of c that pass the same color,
// ordered by key, then by their rank in c (ncclCommSplit, NCCL >= 2.18),
// returning by ctx's end in both modes (then c is aborted too: NCCL cannot
// abandon a split half done; a blocking one is freed once NCCL returns). Every
// rank of c calls it. A rank passing SplitNoColor gets a nil communicator and
// no error. cfg may be nil; the new communicator has c's blocking mode.
func (c *Comm) Split(ctx context.Context, color, key int, cfg *Config) (_ *Comm, err error) {
	defer func() { err = inMethod("Split", err) }()
	if !c.made() {
		var z0 *Comm
		return z0, zeroComm("Split")
	}
	if ctx == nil {
		return nil, nilContext("Split")
	}
	const op = "ncclCommSplit"
	l := c.lib
	if l.nc.Fn[capi.FnCommSplit] == 0 {
		return nil, l.unsupported(capi.FnCommSplit)
	}
	if color != SplitNoColor {
		if err := checkInt32(op, "color", color, 0); err != nil {
			return nil, err
		}
	}
	if key < -1<<31 || key > 1<<31-1 {
		return nil, argError(op, "key %d is not a C int", key)
	}
	return c.derive(ctx, op, cfg, color, color == SplitNoColor, func(h, out, cfgPtr uintptr) error {
		return l.nc.CommSplit(h, color, key, out, cfgPtr)
	})
}

// derive runs one call that makes a communicator from c (Split, Shrink,
// Grow): on c's device, with c's blocking mode. A non-blocking call writes the
// new handle when it finishes, after the call returned: the place it writes to
// lives on the heap, and if the wait for it ends early c keeps it until c is
// freed. A context that ends first aborts c (NCCL cannot abandon the call half
// done) and with it the new communicator. call gets c's handle, where to write
// the new one and the config. none says NCCL may rightly make no communicator
// (Split's SplitNoColor): derive then returns nil and no error.
//
// The ranks of c held in this process that derive together with one color
// make one communicator: its clique's key comes from c's, the derive's
// number on c and color (see clique).
func (c *Comm) derive(ctx context.Context, op string, cfg *Config, color int, none bool, call func(h, out, cfgPtr uintptr) error) (*Comm, error) {
	l := c.lib
	key := derivedKey(c.q.key, c.deriveSeq.Add(1), color)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	blocking := c.blocking
	if cfg != nil && cfg.Blocking != nil && *cfg.Blocking != blocking {
		return nil, argError(op, "Config.Blocking %v differs from the parent's: a derived communicator keeps its parent's mode", *cfg.Blocking)
	}
	out := new(uintptr)
	var buf *configBuffer
	body := func() error {
		var ptr uintptr
		var err error
		if buf, ptr, err = l.encodeConfig(op, withBlocking(cfg, blocking)); err != nil {
			return err
		}
		h, err := c.enter(op, false)
		if err != nil {
			return err
		}
		err = call(h, uintptr(unsafe.Pointer(out)), ptr)
		c.exit()
		return err
	}
	var err error
	if blocking && ctx.Done() != nil {
		// A blocking derive waits inside NCCL for the other ranks (their
		// bootstrap exchange), where no context reaches: it runs on a
		// goroutine of its own, and at ctx's end c is aborted (freed once
		// the call returns, never under it) and so is what it made.
		res := make(chan error, 1)
		go func() { res <- l.onDevice(op, c.dev, body) }()
		select {
		case err = <-res:
		case <-ctx.Done():
			c.Abort()
			l.givenUp.Add(1)
			go func() {
				<-res
				if nh := atomic.LoadUintptr(out); nh != 0 {
					l.nc.CommAbort(nh)
				}
				buf.free()
				l.givenUp.Add(-1)
			}()
			return nil, fmt.Errorf("%s had not returned when the context ended (a blocking communicator's %s waits inside NCCL for the other ranks, where no context reaches); the communicator is aborted, freed when NCCL returns, and what the call makes with it: %w", op, op, ctx.Err())
		}
	} else {
		err = l.onDevice(op, c.dev, body)
	}
	if isInProgress(err) || err == nil && !c.blocking {
		if err = c.waitReady(ctx, op, false); err != nil {
			err = c.abortAfter(err)
		}
	}
	if err != nil {
		c.keep(out)
	}
	nh := atomic.LoadUintptr(out)
	if err != nil || nh == 0 {
		if nh != 0 {
			l.nc.CommAbort(nh)
		}
		buf.free()
		if err == nil && !none {
			err = &Error{Op: op, Code: abi.InternalError, Msg: "NCCL returned no communicator"}
		}
		return nil, err
	}
	nc := l.newComm(nh, c.dev, -1, -1, blocking, buf, key)
	nc.q.claim()
	if err := nc.ready(ctx, op); err != nil {
		return nil, err
	}
	if err := nc.readShape(); err != nil {
		nc.Abort()
		return nil, err
	}
	if err := nc.confirmDevice(op); err != nil {
		nc.Abort()
		return nil, err
	}
	return nc, nil
}

// readShape asks NCCL for the rank and size of a communicator made by Split.
func (c *Comm) readShape() error {
	h, err := c.enter("ncclCommCount", false)
	if err != nil {
		return err
	}
	defer c.exit()
	var n, r int32
	if err := c.lib.nc.CommCount(h, &n); err != nil {
		return err
	}
	if err := c.lib.nc.CommUserRank(h, &r); err != nil {
		return err
	}
	c.nranks, c.rank = int(n), int(r)
	return nil
}

// confirmDevice checks that NCCL bound the communicator to the device gonccl
// records for it (ncclCommCuDevice): Device answers from that record.
func (c *Comm) confirmDevice(op string) error {
	h, err := c.enter("ncclCommCuDevice", false)
	if err != nil {
		return err
	}
	d := new(int32)
	err = c.lib.nc.CommCuDevice(h, d)
	c.exit()
	if err != nil {
		return err
	}
	if int(*d) != c.dev {
		return &Error{Op: op, Code: abi.InternalError, Msg: fmt.Sprintf("NCCL made the communicator on device %d, not %d", *d, c.dev)}
	}
	return nil
}
