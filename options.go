package nccl

import "time"

// The options of Open and OpenCUDA.

// Option configures Open.
type Option func(*options)

type options struct {
	nccl, cudart string
	a2avABI      int
	noCUDA       bool
	arrivalGrace *time.Duration
}

// WithLibrary loads libnccl from path, a file or a folder, before any search.
func WithLibrary(path string) Option { return func(o *options) { o.nccl = path } }

// WithCUDARuntime loads libcudart from path, a file or a folder, before any search.
func WithCUDARuntime(path string) Option { return func(o *options) { o.cudart = path } }

// WithoutCUDARuntime loads NCCL alone. Calls that must make a device current
// (communicator creation, MemAlloc) then fail; the rest work.
func WithoutCUDARuntime() Option { return func(o *options) { o.noCUDA = true } }

// WithAlltoAllvABI chooses the form of VCCL's ncclAlltoAllv: 11 arguments (the
// current one, with relaycount; the default) or 10 (the January 2026 form). Both
// report version 2.29.2, so no symbol tells them apart. GONCCL_ALLTOALLV_ABI sets
// the same when this option is absent.
func WithAlltoAllvABI(nargs int) Option { return func(o *options) { o.a2avABI = nargs } }

// ArrivalGrace is how long, by default, the goroutine that made the ranks of
// a communicator held in this process (InitAll, a Group of InitRanks) waits,
// at a rank's first operation outside a Group, for the other ranks' first
// operations from other goroutines before it is refused (see Comm and
// WithArrivalGrace).
const ArrivalGrace = 3 * time.Second

// WithArrivalGrace sets how long the goroutine that made the ranks of a
// communicator held in this process (InitAll, a Group of InitRanks) waits, at
// a rank's first operation outside a Group, for the other ranks' first
// operations from other goroutines before it is refused (ArrivalGrace by
// default; see Comm). 0 never refuses: the maker then waits as NCCL would,
// until the other ranks come or the communicator is aborted or closed.
func WithArrivalGrace(d time.Duration) Option {
	return func(o *options) { o.arrivalGrace = &d }
}
