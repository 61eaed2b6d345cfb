package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

const (
	// ConfigMagic is NCCL_API_MAGIC, ncclConfig_t.magic; NCCL rejects a config without it.
	ConfigMagic = 0xcafebeef
	// Undefined is NCCL_CONFIG_UNDEF_INT: "use NCCL's default".
	Undefined = math.MinInt32
)

// Config is the Go-side description of an ncclConfig_t. A nil field or an
// empty string stays undefined (INT_MIN or NULL), so NCCL picks its default.
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

// FieldError is a field of ncclConfig_t set for a release that lacks it (or,
// Field empty, a config for a release before 2.14, which has none): NCCL
// would ignore it silently.
type FieldError struct {
	Field  string  // as in nccl.h; "" for the whole ncclConfig_t
	Since  Version // the first release with it
	Loaded Version
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("ncclConfig_t requires NCCL >= %s (loaded %s)", shortVersion(e.Since), e.Loaded)
	}
	return fmt.Sprintf("ncclConfig_t.%s requires NCCL >= %s (loaded %s)", e.Field, shortVersion(e.Since), e.Loaded)
}

// Field is one field of ncclConfig_t after the header (size, magic, version).
type Field struct {
	Name    string  // as in nccl.h
	Offset  uintptr // byte offset on 64-bit Linux
	Since   Version // the first release whose ncclConfig_t has it
	Pointer bool    // a const char*, 8 bytes; otherwise an int, 4 bytes
}

// configField ties a Field to the Config member that fills it.
type configField struct {
	Field
	get func(c *Config) (i int32, s string, set bool)
}

func intOf(f func(c *Config) *int32) func(*Config) (int32, string, bool) {
	return func(c *Config) (int32, string, bool) {
		if p := f(c); p != nil {
			return *p, "", true
		}
		return 0, "", false
	}
}

func strOf(f func(c *Config) string) func(*Config) (int32, string, bool) {
	return func(c *Config) (int32, string, bool) { s := f(c); return 0, s, s != "" }
}

func boolOf(f func(c *Config) *bool) func(*Config) (int32, string, bool) {
	return func(c *Config) (int32, string, bool) {
		switch p := f(c); {
		case p == nil:
			return 0, "", false
		case *p:
			return 1, "", true
		}
		return 0, "", true
	}
}

// configFields is ncclConfig_t in declaration order. Releases only append, so
// the layout of any release is a prefix of this table; offsets follow the C
// rules (int 4-aligned, pointers 8-aligned).
var configFields = [...]configField{
	{Field{"blocking", 16, V(2, 14, 0), false}, boolOf(func(c *Config) *bool { return c.Blocking })},
	{Field{"cgaClusterSize", 20, V(2, 17, 0), false}, intOf(func(c *Config) *int32 { return c.CGAClusterSize })},
	{Field{"minCTAs", 24, V(2, 17, 0), false}, intOf(func(c *Config) *int32 { return c.MinCTAs })},
	{Field{"maxCTAs", 28, V(2, 17, 0), false}, intOf(func(c *Config) *int32 { return c.MaxCTAs })},
	{Field{"netName", 32, V(2, 17, 0), true}, strOf(func(c *Config) string { return c.NetName })},
	{Field{"splitShare", 40, V(2, 18, 0), false}, intOf(func(c *Config) *int32 { return c.SplitShare })},
	// In the tail padding after splitShare, so sizeof stays 48.
	{Field{"trafficClass", 44, V(2, 26, 0), false}, intOf(func(c *Config) *int32 { return c.TrafficClass })},
	{Field{"commName", 48, V(2, 27, 0), true}, strOf(func(c *Config) string { return c.CommName })},
	{Field{"collnetEnable", 56, V(2, 27, 0), false}, intOf(func(c *Config) *int32 { return c.CollnetEnable })},
	{Field{"CTAPolicy", 60, V(2, 27, 0), false}, intOf(func(c *Config) *int32 { return c.CTAPolicy })},
	{Field{"shrinkShare", 64, V(2, 27, 0), false}, intOf(func(c *Config) *int32 { return c.ShrinkShare })},
	{Field{"nvlsCTAs", 68, V(2, 27, 0), false}, intOf(func(c *Config) *int32 { return c.NvlsCTAs })},
	{Field{"nChannelsPerNetPeer", 72, V(2, 28, 0), false}, intOf(func(c *Config) *int32 { return c.NChannelsPerNetPeer })},
	{Field{"nvlinkCentricSched", 76, V(2, 28, 0), false}, intOf(func(c *Config) *int32 { return c.NvlinkCentricSched })},
	{Field{"graphUsageMode", 80, V(2, 29, 0), false}, intOf(func(c *Config) *int32 { return c.GraphUsageMode })},
	{Field{"numRmaCtx", 84, V(2, 29, 0), false}, intOf(func(c *Config) *int32 { return c.NumRmaCtx })},
	{Field{"maxP2pPeers", 88, V(2, 30, 0), false}, intOf(func(c *Config) *int32 { return c.MaxP2pPeers })},
	// Not in 2.30.3/2.30.4 (it sits in their tail padding); the first release
	// with it is 2.30.7, and the library honours it from config version 2.30.5.
	{Field{"graphStreamOrdering", 92, V(2, 30, 5), false}, intOf(func(c *Config) *int32 { return c.GraphStreamOrdering })},
}

// configHeader is the size, magic and version fields that every release has.
const configHeader = 16

// ConfigLayout is ncclConfig_t as release v declares it: its sizeof and its
// fields after the header, in order. ok is false before 2.14, which has no
// ncclConfig_t.
func ConfigLayout(v Version) (size uintptr, fields []Field, ok bool) {
	n := configFieldCount(v)
	if n == 0 {
		return 0, nil, false
	}
	fields = make([]Field, n)
	end := uintptr(configHeader)
	for i := range fields {
		f := configFields[i].Field
		fields[i] = f
		end = f.Offset + 4
		if f.Pointer {
			end = f.Offset + 8
		}
	}
	// sizeof rounds up to the struct's alignment, 8 (size_t and pointers).
	return (end + 7) &^ 7, fields, true
}

// configFieldCount is how many of configFields release v has.
func configFieldCount(v Version) int {
	n := 0
	for n < len(configFields) && v.AtLeast(configFields[n].Since) {
		n++
	}
	return n
}

// EncodeConfig writes c into buf the way NCCL_CONFIG_INITIALIZER followed by
// field assignments would for library version v: size, magic, version =
// v.Code(), and every field of v's ncclConfig_t undefined (INT_MIN or NULL)
// unless c sets it; the padding is zeroed and nothing past size is written. A
// nil c is an all-default config.
//
// Strings need C memory: cstr returns the address of a NUL-terminated copy that
// the caller keeps alive (and pinned) until NCCL has read the config.
//
// Setting a field that v lacks is an error naming the field and the release
// that added it: NCCL would silently ignore it.
func EncodeConfig(buf []byte, c *Config, v Version, cstr func(string) uintptr) (size uintptr, err error) {
	if c == nil {
		c = &Config{}
	}
	size, _, ok := ConfigLayout(v)
	have := configFieldCount(v)
	for _, f := range configFields[have:] {
		if _, _, set := f.get(c); set {
			return 0, &FieldError{Field: f.Name, Since: f.Since, Loaded: v}
		}
	}
	if !ok {
		return 0, &FieldError{Since: V(2, 14, 0), Loaded: v}
	}
	if uintptr(len(buf)) < size {
		return 0, fmt.Errorf("abi: ncclConfig_t of NCCL %s needs %d bytes, buffer has %d", v, size, len(buf))
	}
	if cstr == nil && (c.NetName != "" || c.CommName != "") {
		return 0, errors.New("abi: a string field of ncclConfig_t is set but no C string allocator was given")
	}
	b := buf[:size]
	clear(b)
	ne := binary.NativeEndian
	ne.PutUint64(b[0:], uint64(size))
	ne.PutUint32(b[8:], ConfigMagic)
	ne.PutUint32(b[12:], uint32(v.Code()))
	for _, f := range configFields[:have] {
		i, s, set := f.get(c)
		switch {
		case f.Pointer && set:
			ne.PutUint64(b[f.Offset:], uint64(cstr(s)))
		case f.Pointer:
			// NULL, already zero.
		default:
			if !set {
				i = Undefined
			}
			ne.PutUint32(b[f.Offset:], uint32(i))
		}
	}
	return size, nil
}

// shortVersion drops a zero patch: fields arrive with minor releases.
func shortVersion(v Version) string {
	if v.Patch == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return v.String()
}
