package abi

import (
	"encoding/binary"
	"fmt"
	"math"
)

const (
	// ConfigMagic is ncclConfig_t.magic.
	ConfigMagic = 0xcafebeef
	// Undefined is NCCL_CONFIG_UNDEF_INT: "use NCCL's default".
	Undefined = math.MinInt32
)

// Config describes an ncclConfig_t; nil fields and empty strings stay
// undefined, so NCCL picks its defaults.
type Config struct {
	Blocking            *bool
	CGAClusterSize      *int32
	MinCTAs             *int32
	MaxCTAs             *int32
	NetName             string
	SplitShare          *int32
	TrafficClass        *int32
	CommName            string
	CollnetEnable       *int32
	CTAPolicy           *int32
	ShrinkShare         *int32
	NvlsCTAs            *int32
	NChannelsPerNetPeer *int32
	NvlinkCentricSched  *int32
	GraphUsageMode      *int32
	NumRmaCtx           *int32
	MaxP2pPeers         *int32
	GraphStreamOrdering *int32
}

// Field is one field of ncclConfig_t after the header (size, magic, version).
type Field struct {
	Name    string  // as in nccl.h
	Offset  uintptr // on 64-bit Linux
	Since   Version // the release that added it
	Pointer bool    // a char*
}

// configFields is ncclConfig_t in field order; each release appends.
var configFields = []Field{
	{"blocking", 16, V(2, 14, 0), false},
	{"cgaClusterSize", 20, V(2, 17, 0), false},
	{"minCTAs", 24, V(2, 17, 0), false},
	{"maxCTAs", 28, V(2, 17, 0), false},
	{"netName", 32, V(2, 17, 0), true},
	{"splitShare", 40, V(2, 18, 0), false},
	{"trafficClass", 44, V(2, 26, 0), false}, // fits in the padding after splitShare
	{"commName", 48, V(2, 27, 0), true},
	{"collnetEnable", 56, V(2, 27, 0), false},
	{"CTAPolicy", 60, V(2, 27, 0), false},
	{"shrinkShare", 64, V(2, 27, 0), false},
	{"nvlsCTAs", 68, V(2, 27, 0), false},
	{"nChannelsPerNetPeer", 72, V(2, 28, 0), false},
	{"nvlinkCentricSched", 76, V(2, 28, 0), false},
	{"graphUsageMode", 80, V(2, 29, 0), false},
	{"numRmaCtx", 84, V(2, 29, 0), false},
	{"maxP2pPeers", 88, V(2, 30, 0), false},
	{"graphStreamOrdering", 92, V(2, 30, 0), false},
}

// ConfigLayout is ncclConfig_t as release v defines it: its sizeof and its
// fields. ok is false before 2.14, which has no ncclConfig_t.
func ConfigLayout(v Version) (size uintptr, fields []Field, ok bool) {
	if !v.AtLeast(V(2, 14, 0)) {
		return 0, nil, false
	}
	var end uintptr
	for _, f := range configFields {
		if !v.AtLeast(f.Since) {
			break
		}
		fields = append(fields, f)
		w := uintptr(4)
		if f.Pointer {
			w = 8
		}
		end = f.Offset + w
	}
	// sizeof rounds up to the struct's alignment: 8, for size_t and pointers.
	return (end + 7) &^ 7, fields, true
}

// value is the Config field named name: its integer or string, and whether set.
func (c *Config) value(name string) (i int32, s string, set bool) {
	ip := func(p *int32) (int32, string, bool) {
		if p == nil {
			return 0, "", false
		}
		return *p, "", true
	}
	switch name {
	case "blocking":
		if c.Blocking == nil {
			return 0, "", false
		}
		if *c.Blocking {
			return 1, "", true
		}
		return 0, "", true
	case "cgaClusterSize":
		return ip(c.CGAClusterSize)
	case "minCTAs":
		return ip(c.MinCTAs)
	case "maxCTAs":
		return ip(c.MaxCTAs)
	case "netName":
		return 0, c.NetName, c.NetName != ""
	case "splitShare":
		return ip(c.SplitShare)
	case "trafficClass":
		return ip(c.TrafficClass)
	case "commName":
		return 0, c.CommName, c.CommName != ""
	case "collnetEnable":
		return ip(c.CollnetEnable)
	case "CTAPolicy":
		return ip(c.CTAPolicy)
	case "shrinkShare":
		return ip(c.ShrinkShare)
	case "nvlsCTAs":
		return ip(c.NvlsCTAs)
	case "nChannelsPerNetPeer":
		return ip(c.NChannelsPerNetPeer)
	case "nvlinkCentricSched":
		return ip(c.NvlinkCentricSched)
	case "graphUsageMode":
		return ip(c.GraphUsageMode)
	case "numRmaCtx":
		return ip(c.NumRmaCtx)
	case "maxP2pPeers":
		return ip(c.MaxP2pPeers)
	case "graphStreamOrdering":
		return ip(c.GraphStreamOrdering)
	}
	panic("abi: unknown config field " + name)
}

// EncodeConfig writes c into buf as NCCL_CONFIG_INITIALIZER followed by the
// field assignments would for release v: size, magic, version = v.Code(), every
// field of v undefined unless c sets it. cstr returns the address of a
// NUL-terminated copy of a string that the caller keeps alive. A field that v
// lacks but c sets is an error naming the release that added it.
func EncodeConfig(buf []byte, c *Config, v Version, cstr func(string) uintptr) (uintptr, error) {
	size, fields, ok := ConfigLayout(v)
	if !ok {
		return 0, fmt.Errorf("ncclConfig_t requires NCCL >= 2.14 (loaded %s)", v)
	}
	if uintptr(len(buf)) < size {
		return 0, fmt.Errorf("abi: config buffer of %d bytes, need %d", len(buf), size)
	}
	for _, f := range configFields[len(fields):] {
		if _, _, set := c.value(f.Name); set {
			return 0, fmt.Errorf("ncclConfig_t.%s requires NCCL >= %d.%d (loaded %s)", f.Name, f.Since.Major, f.Since.Minor, v)
		}
	}
	clear(buf[:size])
	ne := binary.NativeEndian
	ne.PutUint64(buf[0:], uint64(size))
	ne.PutUint32(buf[8:], ConfigMagic)
	ne.PutUint32(buf[12:], uint32(v.Code()))
	for _, f := range fields {
		i, s, set := c.value(f.Name)
		switch {
		case f.Pointer && set:
			ne.PutUint64(buf[f.Offset:], uint64(cstr(s)))
		case f.Pointer:
			ne.PutUint64(buf[f.Offset:], 0)
		case set:
			ne.PutUint32(buf[f.Offset:], uint32(i))
		default:
			ne.PutUint32(buf[f.Offset:], uint32(Undefined&0xffffffff))
		}
	}
	return size, nil
}
