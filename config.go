package nccl

import (
	"errors"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"golang.org/x/sys/unix"
)

// Config is ncclConfig_t: how NCCL builds a communicator (InitRank, InitAll,
// Split, Shrink, Grow). A nil field, or an empty string, keeps NCCL's default.
// gonccl lays it out as the loaded release declares it (abi.ConfigLayout); a
// field set that the release lacks is an error naming it and the release that
// added it. The NCCL_* variable named with a field, when set, overrides the
// field in NCCL (ncclCommInitRankConfig's parseCommConfig), and NCCL logs the
// override under NCCL_DEBUG=INFO.
type Config struct {
	// Blocking chooses the mode (2.14). nil: blocking, NCCL's default (see
	// Comm). A derived communicator (Split, Shrink) keeps its parent's mode.
	// NCCL_COMM_BLOCKING=0 or 1 in the environment overrides both, in NCCL
	// and so in gonccl (a value NCCL reads from nccl.conf instead is not
	// seen by gonccl: set it in the environment).
	Blocking *bool
	// CGAClusterSize is the CUDA thread-block cluster size of NCCL's kernels,
	// 0 to 8, on sm_90 and later (2.17). NCCL_CGA_CLUSTER_SIZE.
	CGAClusterSize *int32
	// MinCTAs and MaxCTAs bound the CTAs (channels) NCCL's kernels use, at
	// least 1 (2.17). NCCL_MIN_CTAS, NCCL_MAX_CTAS.
	MinCTAs *int32
	MaxCTAs *int32
	// NetName names the network plugin or transport, such as "IB" or "Socket"
	// (2.17). NCCL_NET.
	NetName string
	// SplitShare, 1, lets communicators split from this one share its
	// resources (2.18). NCCL_COMM_SPLIT_SHARE_RESOURCES.
	SplitShare *int32
	// TrafficClass is the network traffic class of its operations (2.26).
	TrafficClass *int32
	// CommName names the communicator in NCCL's logs and profiler (2.27).
	CommName string
	// CollnetEnable, 1, enables CollNet (2.27). NCCL_COLLNET_ENABLE.
	CollnetEnable *int32
	// CTAPolicy is NCCL_CTA_POLICY_DEFAULT (0), _EFFICIENCY (1) or _ZERO (2)
	// (2.27). NCCL_CTA_POLICY.
	CTAPolicy *int32
	// ShrinkShare, 1, lets communicators shrunk from this one share its
	// resources (2.27). NCCL_COMM_SHRINK_SHARE_RESOURCES.
	ShrinkShare *int32
	// NvlsCTAs is the number of CTAs of NVLink SHARP operations (2.27).
	// NCCL_NVLS_NCHANNELS.
	NvlsCTAs *int32
	// NChannelsPerNetPeer is the channels per network peer of all-to-all and
	// send/receive traffic (2.28). NCCL_NCHANNELS_PER_NET_PEER.
	NChannelsPerNetPeer *int32
	// NvlinkCentricSched, 1, schedules for NVLink utilisation (2.28).
	// NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE.
	NvlinkCentricSched *int32
	// GraphUsageMode says how its operations meet CUDA graphs: 0 never
	// captured, 1 one graph, 2 graphs mixed with plain launches (2.29).
	// NCCL_GRAPH_MIXING_SUPPORT (1 sets 2, 0 sets 0).
	GraphUsageMode *int32
	// NumRmaCtx is the number of one-sided (RMA) contexts (2.29).
	// NCCL_NUM_RMA_CTX.
	NumRmaCtx *int32
	// MaxP2pPeers caps the peers of one rank's send/receive operations,
	// capped in turn at the communicator's size (2.30). NCCL_P2P_MAX_PEERS.
	MaxP2pPeers *int32
	// GraphStreamOrdering, 1 (NCCL's default where unset), has NCCL
	// serialise the kernels of operations captured into a graph; 0 leaves
	// their order to the capturing streams (2.30.5; the field is in 2.30.7's
	// header, not 2.30.3's or 2.30.4's). NCCL_GRAPH_STREAM_ORDERING.
	GraphStreamOrdering *int32
}

// abiConfig is cfg as package abi encodes it: the same fields, so the
// conversion fails to compile when the two drift apart.
func abiConfig(cfg *Config) *abi.Config {
	c := abi.Config(*cfg)
	return &c
}

// configBuffer holds an encoded ncclConfig_t and its strings in memory of its
// own (an anonymous mapping, outside Go's heap): NCCL may read the config for
// the communicator's life, and memory the garbage collector never sees needs
// no pinning, so a communicator that is dropped unclosed leaks a page instead
// of tripping the runtime's check for leaked pins.
type configBuffer struct {
	mem []byte // the mapping: the config at 0, the strings after configSpace
}

const configSpace = 256 // more than any ncclConfig_t (96 bytes in 2.30)

// encodeConfig lays cfg out for the loaded release; nil gives a NULL config.
// A field the release lacks is an *UnsupportedError (ErrNotSupported), so
// that a program can fall back as it does for a missing function.
func (l *Library) encodeConfig(op string, cfg *Config) (*configBuffer, uintptr, error) {
	if cfg == nil {
		return nil, 0, nil
	}
	v := l.version
	ac := abiConfig(cfg)
	// First pass: the room the strings need.
	need := configSpace
	if _, err := abi.EncodeConfig(make([]byte, configSpace), ac, v, func(s string) uintptr {
		need += len(s) + 1
		return 0
	}); err != nil {
		var fe *abi.FieldError
		if errors.As(err, &fe) {
			name := "ncclConfig_t"
			if fe.Field != "" {
				name += "." + fe.Field
			}
			return nil, 0, &UnsupportedError{Name: name, Path: l.Path, Version: v, Requires: ">= " + shortVersion(fe.Since)}
		}
		return nil, 0, &Error{Op: op, Code: abi.InvalidArgument, Msg: err.Error()}
	}
	mem, err := unix.Mmap(-1, 0, need, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, 0, &Error{Op: op, Code: abi.SystemError, Msg: "config memory: " + err.Error()}
	}
	b := &configBuffer{mem: mem}
	next := configSpace
	cstr := func(s string) uintptr {
		p := uintptr(unsafe.Pointer(&mem[next]))
		next += copy(mem[next:], s) + 1 // the mapping is zeroed: the NUL is there
		return p
	}
	if _, err := abi.EncodeConfig(mem[:configSpace], ac, v, cstr); err != nil {
		b.free()
		return nil, 0, &Error{Op: op, Code: abi.InvalidArgument, Msg: err.Error()}
	}
	return b, uintptr(unsafe.Pointer(&mem[0])), nil
}

func (b *configBuffer) free() {
	if b != nil && b.mem != nil {
		unix.Munmap(b.mem)
		b.mem = nil
	}
}
