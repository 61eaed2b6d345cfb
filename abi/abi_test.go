package abi

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// The numbers in this file are read off nccl.h (src/nccl.h.in) of each release
// and driver_types.h; none is computed from the package under test.

// cField is one ncclConfig_t field as nccl.h declares it.
type cField struct {
	name   string
	goName string // the Config member that sets it
	offset uintptr
	since  Version // first release whose header has it
	ptr    bool
}

var cFields = []cField{
	{"blocking", "Blocking", 16, V(2, 14, 0), false},
	{"cgaClusterSize", "CGAClusterSize", 20, V(2, 17, 0), false},
	{"minCTAs", "MinCTAs", 24, V(2, 17, 0), false},
	{"maxCTAs", "MaxCTAs", 28, V(2, 17, 0), false},
	{"netName", "NetName", 32, V(2, 17, 0), true},
	{"splitShare", "SplitShare", 40, V(2, 18, 0), false},
	{"trafficClass", "TrafficClass", 44, V(2, 26, 0), false},
	{"commName", "CommName", 48, V(2, 27, 0), true},
	{"collnetEnable", "CollnetEnable", 56, V(2, 27, 0), false},
	{"CTAPolicy", "CTAPolicy", 60, V(2, 27, 0), false},
	{"shrinkShare", "ShrinkShare", 64, V(2, 27, 0), false},
	{"nvlsCTAs", "NvlsCTAs", 68, V(2, 27, 0), false},
	{"nChannelsPerNetPeer", "NChannelsPerNetPeer", 72, V(2, 28, 0), false},
	{"nvlinkCentricSched", "NvlinkCentricSched", 76, V(2, 28, 0), false},
	{"graphUsageMode", "GraphUsageMode", 80, V(2, 29, 0), false},
	{"numRmaCtx", "NumRmaCtx", 84, V(2, 29, 0), false},
	{"maxP2pPeers", "MaxP2pPeers", 88, V(2, 30, 0), false},
	// 2.30.3 and 2.30.4 lack it; init.cc honours it from config version 2.30.5.
	{"graphStreamOrdering", "GraphStreamOrdering", 92, V(2, 30, 5), false},
}

// cConfig230 is ncclConfig_t of 2.30.7 spelled in Go; on LP64 targets Go lays it
// out as C does, which cross-checks the hand-written offsets.
type cConfig230 struct {
	Size                                                        uint64
	Magic, Version                                              uint32
	Blocking, CGAClusterSize, MinCTAs, MaxCTAs                  int32
	NetName                                                     uintptr
	SplitShare, TrafficClass                                    int32
	CommName                                                    uintptr
	CollnetEnable, CTAPolicy, ShrinkShare, NvlsCTAs             int32
	NChannelsPerNetPeer, NvlinkCentricSched                     int32
	GraphUsageMode, NumRmaCtx, MaxP2pPeers, GraphStreamOrdering int32
}

// layoutRows: sizeof(ncclConfig_t) and its last field for releases, including
// the first and last patch of each change.
var layoutRows = []struct {
	v    Version
	size uintptr
	last string
}{
	{V(2, 14, 3), 24, "blocking"},
	{V(2, 16, 5), 24, "blocking"},
	{V(2, 17, 1), 40, "netName"},
	{V(2, 18, 1), 48, "splitShare"},
	{V(2, 22, 3), 48, "splitShare"},
	{V(2, 25, 1), 48, "splitShare"},
	{V(2, 26, 2), 48, "trafficClass"},
	{V(2, 26, 6), 48, "trafficClass"},
	{V(2, 27, 3), 72, "nvlsCTAs"},
	{V(2, 27, 7), 72, "nvlsCTAs"},
	{V(2, 28, 3), 80, "nvlinkCentricSched"},
	{V(2, 28, 9), 80, "nvlinkCentricSched"},
	{V(2, 29, 2), 88, "numRmaCtx"},
	{V(2, 29, 7), 88, "numRmaCtx"},
	{V(2, 30, 3), 96, "maxP2pPeers"},
	{V(2, 30, 4), 96, "maxP2pPeers"},
	{V(2, 30, 7), 96, "graphStreamOrdering"},
	{V(2, 31, 0), 96, "graphStreamOrdering"},
	{V(3, 0, 0), 96, "graphStreamOrdering"},
}

// fieldsOf is the prefix of cFields that release v has.
func fieldsOf(v Version) []cField {
	n := 0
	for n < len(cFields) && v.AtLeast(cFields[n].since) {
		n++
	}
	return cFields[:n]
}

func TestConfigLayout(t *testing.T) {
	for _, row := range layoutRows {
		size, fields, ok := ConfigLayout(row.v)
		if !ok {
			t.Errorf("%v: no layout", row.v)
			continue
		}
		want := fieldsOf(row.v)
		if size != row.size || len(fields) != len(want) || want[len(want)-1].name != row.last {
			t.Errorf("%v: sizeof %d with %d fields; want %d ending with %s", row.v, size, len(fields), row.size, row.last)
			continue
		}
		for i, f := range fields {
			w := want[i]
			if f != (Field{w.name, w.offset, w.since, w.ptr}) {
				t.Errorf("%v: field %d is %+v, want %+v", row.v, i, f, w)
			}
		}
	}
	for _, v := range []Version{{}, V(2, 13, 4), V(2, 3, 7), V(1, 99, 0)} {
		if size, fields, ok := ConfigLayout(v); ok || size != 0 || fields != nil {
			t.Errorf("%v has no ncclConfig_t, got %d %v %v", v, size, fields, ok)
		}
	}
	// The returned slice is the caller's.
	_, fields, _ := ConfigLayout(V(2, 30, 7))
	fields[0].Offset = 99
	if _, again, _ := ConfigLayout(V(2, 30, 7)); again[0].Offset != 16 {
		t.Error("ConfigLayout shares its table")
	}

	var c cConfig230
	if s := unsafe.Sizeof(c); s != 96 {
		t.Errorf("Go mirror of ncclConfig_t is %d bytes, want 96", s)
	}
	typ := reflect.TypeOf(c)
	for _, f := range cFields {
		sf, ok := typ.FieldByName(f.goName)
		if !ok || sf.Offset != f.offset {
			t.Errorf("%s: Go places it at %d, nccl.h at %d", f.name, sf.Offset, f.offset)
		}
		if want := map[bool]uintptr{false: 4, true: 8}[f.ptr]; sf.Type.Size() != want {
			t.Errorf("%s: %d bytes", f.name, sf.Type.Size())
		}
	}
	if unsafe.Offsetof(c.Magic) != 8 || unsafe.Offsetof(c.Version) != 12 {
		t.Error("header offsets")
	}
}

// decoded is one field read back from an encoded ncclConfig_t.
type decoded struct {
	i   int32
	ptr uint64
}

// decodeConfig reads buf by the nccl.h offsets, not by ConfigLayout.
func decodeConfig(buf []byte, v Version) (size uint64, magic, version uint32, fields map[string]decoded) {
	ne := binary.NativeEndian
	fields = map[string]decoded{}
	for _, f := range fieldsOf(v) {
		if f.ptr {
			fields[f.name] = decoded{ptr: ne.Uint64(buf[f.offset:])}
		} else {
			fields[f.name] = decoded{i: int32(ne.Uint32(buf[f.offset:]))}
		}
	}
	return ne.Uint64(buf), ne.Uint32(buf[8:]), ne.Uint32(buf[12:]), fields
}

// setField sets the Config member for C field f to a value derived from n.
func setField(c *Config, f cField, n int32) {
	m := reflect.ValueOf(c).Elem().FieldByName(f.goName)
	switch m.Kind() {
	case reflect.String:
		m.SetString(fmt.Sprintf("%s-%d", f.name, n))
	case reflect.Pointer:
		if m.Type().Elem().Kind() == reflect.Bool {
			b := n%2 != 0
			m.Set(reflect.ValueOf(&b))
		} else {
			m.Set(reflect.ValueOf(&n))
		}
	default:
		panic(f.goName)
	}
}

// cstrings hands out fake C addresses and remembers their strings.
type cstrings map[uintptr]string

func (m cstrings) cstr(s string) uintptr {
	p := uintptr(0x7f0000001000 + len(m)*64)
	m[p] = s
	return p
}

// checkEncoded compares an encoded config with what c sets, field by field.
func checkEncoded(t *testing.T, buf []byte, c *Config, v Version, strs cstrings, size uintptr) {
	t.Helper()
	gotSize, magic, version, fields := decodeConfig(buf, v)
	if gotSize != uint64(size) || magic != 0xcafebeef || int(version) != v.Code() {
		t.Errorf("%v: header size %d magic %#x version %d; want %d, 0xcafebeef, %d", v, gotSize, magic, version, size, v.Code())
	}
	cv := reflect.ValueOf(c).Elem()
	for _, f := range fieldsOf(v) {
		got, m := fields[f.name], cv.FieldByName(f.goName)
		switch {
		case f.ptr && m.String() == "":
			if got.ptr != 0 {
				t.Errorf("%v: %s = %#x, want NULL", v, f.name, got.ptr)
			}
		case f.ptr:
			if s, ok := strs[uintptr(got.ptr)]; !ok || s != m.String() {
				t.Errorf("%v: %s points to %q, want %q", v, f.name, s, m.String())
			}
		case m.IsNil():
			if got.i != math.MinInt32 {
				t.Errorf("%v: %s = %d, want INT_MIN", v, f.name, got.i)
			}
		case f.name == "blocking":
			if want := map[bool]int32{false: 0, true: 1}[*c.Blocking]; got.i != want {
				t.Errorf("%v: blocking = %d, want %d", v, got.i, want)
			}
		default:
			if want := int32(m.Elem().Int()); got.i != want {
				t.Errorf("%v: %s = %d, want %d", v, f.name, got.i, want)
			}
		}
	}
	// Padding is zero: trafficClass's slot before 2.26, graphStreamOrdering's
	// before 2.30.5, the 4 bytes after blocking in 2.14.
	covered := make([]bool, size)
	for i := range 16 {
		covered[i] = true
	}
	for _, f := range fieldsOf(v) {
		n := map[bool]uintptr{false: 4, true: 8}[f.ptr]
		for i := f.offset; i < f.offset+n; i++ {
			covered[i] = true
		}
	}
	for i, cov := range covered {
		if !cov && buf[i] != 0 {
			t.Errorf("%v: padding byte %d = %#x", v, i, buf[i])
		}
	}
	for i := size; i < uintptr(len(buf)); i++ {
		if buf[i] != 0xa5 {
			t.Fatalf("%v: wrote byte %d past sizeof %d", v, i, size)
		}
	}
}

func TestEncodeConfig(t *testing.T) {
	for _, row := range layoutRows {
		// Everything the release has, set.
		strs := cstrings{}
		full := &Config{}
		for i, f := range fieldsOf(row.v) {
			setField(full, f, int32(i*7-20))
		}
		buf := make([]byte, 128)
		for i := range buf {
			buf[i] = 0xa5
		}
		size, err := EncodeConfig(buf, full, row.v, strs.cstr)
		if err != nil || size != row.size {
			t.Fatalf("%v: EncodeConfig = %d, %v; want %d", row.v, size, err, row.size)
		}
		checkEncoded(t, buf, full, row.v, strs, size)

		// Nothing set: every field undefined; then an exactly sized buffer.
		for _, c := range []*Config{{}, nil} {
			buf = make([]byte, row.size)
			size, err = EncodeConfig(buf, c, row.v, nil)
			if err != nil || size != row.size {
				t.Fatalf("%v: empty EncodeConfig = %d, %v", row.v, size, err)
			}
			checkEncoded(t, buf, &Config{}, row.v, nil, size)
		}

		// A field the release lacks is refused, naming the release that added it.
		for _, f := range cFields[len(fieldsOf(row.v)):] {
			c := &Config{}
			setField(c, f, 1)
			_, err := EncodeConfig(make([]byte, 128), c, row.v, strs.cstr)
			since := fmt.Sprintf("%d.%d", f.since.Major, f.since.Minor)
			if f.since.Patch != 0 {
				since = f.since.String()
			}
			want := fmt.Sprintf("ncclConfig_t.%s requires NCCL >= %s (loaded %s)", f.name, since, row.v)
			if err == nil || err.Error() != want {
				t.Errorf("%v with %s: %v; want %q", row.v, f.name, err, want)
			}
		}
	}

	strs := cstrings{}
	c := &Config{CommName: "trainer"}
	_, err := EncodeConfig(make([]byte, 128), c, V(2, 18, 1), strs.cstr)
	if err == nil || !strings.Contains(err.Error(), "ncclConfig_t.commName requires NCCL >= 2.27 (loaded 2.18.1)") {
		t.Errorf("commName on 2.18.1: %v", err)
	}
	yes := true
	if _, err := EncodeConfig(make([]byte, 128), &Config{Blocking: &yes}, V(2, 13, 4), strs.cstr); err == nil ||
		err.Error() != "ncclConfig_t.blocking requires NCCL >= 2.14 (loaded 2.13.4)" {
		t.Errorf("blocking on 2.13.4: %v", err)
	}
	if _, err := EncodeConfig(make([]byte, 128), nil, V(2, 13, 4), strs.cstr); err == nil ||
		!strings.Contains(err.Error(), "ncclConfig_t requires NCCL >= 2.14") {
		t.Errorf("config on 2.13.4: %v", err)
	}
	if _, err := EncodeConfig(make([]byte, 79), nil, V(2, 28, 3), strs.cstr); err == nil ||
		!strings.Contains(err.Error(), "80 bytes") {
		t.Errorf("79-byte buffer for 2.28: %v", err)
	}
	if _, err := EncodeConfig(make([]byte, 128), &Config{NetName: "IB"}, V(2, 28, 3), nil); err == nil {
		t.Error("a string with no allocator was accepted")
	}
	// A trafficClass for 2.25 would land in padding that 2.25 never reads.
	tc := int32(3)
	if _, err := EncodeConfig(make([]byte, 128), &Config{TrafficClass: &tc}, V(2, 25, 1), strs.cstr); err == nil {
		t.Error("trafficClass accepted for 2.25.1")
	}
}

func TestVersions(t *testing.T) {
	for _, c := range []struct {
		code int
		v    Version
		s    string
	}{
		{2305, V(2, 3, 5), "2.3.5"}, {2408, V(2, 4, 8), "2.4.8"}, {2804, V(2, 8, 4), "2.8.4"},
		{20900, V(2, 9, 0), "2.9.0"}, {20906, V(2, 9, 6), "2.9.6"}, {21403, V(2, 14, 3), "2.14.3"},
		{22203, V(2, 22, 3), "2.22.3"}, {22803, V(2, 28, 3), "2.28.3"}, {22902, V(2, 29, 2), "2.29.2"},
		{23007, V(2, 30, 7), "2.30.7"}, {30000, V(3, 0, 0), "3.0.0"}, {30102, V(3, 1, 2), "3.1.2"},
	} {
		got := DecodeVersion(c.code)
		if got != c.v || got.Code() != c.code || got.String() != c.s {
			t.Errorf("DecodeVersion(%d) = %v (code %d, %q), want %v", c.code, got, got.Code(), got.String(), c.v)
		}
		if got != (Version{Major: c.v.Major, Minor: c.v.Minor, Patch: c.v.Patch}) {
			t.Errorf("V(%d, %d, %d) = %+v", c.v.Major, c.v.Minor, c.v.Patch, c.v)
		}
	}
	for _, c := range []struct {
		a, b Version
		want bool
	}{
		{V(2, 28, 3), V(2, 28, 3), true}, {V(2, 28, 4), V(2, 28, 3), true}, {V(2, 28, 2), V(2, 28, 3), false},
		{V(2, 27, 9), V(2, 28, 0), false}, {V(2, 29, 0), V(2, 28, 9), true}, {V(3, 0, 0), V(2, 30, 7), true},
		{V(1, 99, 99), V(2, 0, 0), false}, {Version{}, Version{}, true},
	} {
		if c.a.AtLeast(c.b) != c.want {
			t.Errorf("%v.AtLeast(%v) = %v", c.a, c.b, !c.want)
		}
	}
}

// ncclVersion is nccl.h's NCCL_VERSION macro.
func ncclVersion(x, y, z int) int {
	if x <= 2 && y <= 8 {
		return x*1000 + y*100 + z
	}
	return x*10000 + y*100 + z
}

func TestResult(t *testing.T) {
	for r, want := range map[Result]string{
		Success: "ncclSuccess", UnhandledCudaError: "ncclUnhandledCudaError", SystemError: "ncclSystemError",
		InternalError: "ncclInternalError", InvalidArgument: "ncclInvalidArgument", InvalidUsage: "ncclInvalidUsage",
		RemoteError: "ncclRemoteError", InProgress: "ncclInProgress", Timeout: "ncclTimeout",
		9: "ncclResult(9)", 42: "ncclResult(42)", -1: "ncclResult(-1)",
	} {
		if r.String() != want {
			t.Errorf("Result(%d) = %q, want %q", int32(r), r.String(), want)
		}
	}
	for i, r := range []Result{Success, UnhandledCudaError, SystemError, InternalError, InvalidArgument,
		InvalidUsage, RemoteError, InProgress, Timeout} {
		if int32(r) != int32(i) {
			t.Errorf("%v = %d, want %d", r, int32(r), i)
		}
	}
}

func TestDataType(t *testing.T) {
	for _, c := range []struct {
		t     DataType
		value int32
		name  string
		size  int
		since Version
	}{
		{Int8, 0, "ncclInt8", 1, V(2, 3, 0)}, {Uint8, 1, "ncclUint8", 1, V(2, 3, 0)},
		{Int32, 2, "ncclInt32", 4, V(2, 3, 0)}, {Uint32, 3, "ncclUint32", 4, V(2, 3, 0)},
		{Int64, 4, "ncclInt64", 8, V(2, 3, 0)}, {Uint64, 5, "ncclUint64", 8, V(2, 3, 0)},
		{Float16, 6, "ncclFloat16", 2, V(2, 3, 0)}, {Float32, 7, "ncclFloat32", 4, V(2, 3, 0)},
		{Float64, 8, "ncclFloat64", 8, V(2, 3, 0)}, {Bfloat16, 9, "ncclBfloat16", 2, V(2, 10, 0)},
		{Float8e4m3, 10, "ncclFloat8e4m3", 1, V(2, 24, 0)}, {Float8e5m2, 11, "ncclFloat8e5m2", 1, V(2, 24, 0)},
		{12, 12, "ncclDataType(12)", 0, Version{}}, {42, 42, "ncclDataType(42)", 0, Version{}},
		{-1, -1, "ncclDataType(-1)", 0, Version{}},
	} {
		valid := c.size != 0
		if int32(c.t) != c.value || c.t.String() != c.name || c.t.Size() != c.size || c.t.Since() != c.since || c.t.Valid() != valid {
			t.Errorf("DataType(%d): %q size %d since %v valid %v; want %d %q %d %v %v", int32(c.t), c.t.String(),
				c.t.Size(), c.t.Since(), c.t.Valid(), c.value, c.name, c.size, c.since, valid)
		}
	}
	if Char != Int8 || Int != Int32 || Half != Float16 || Float != Float32 || Double != Float64 {
		t.Error("aliases")
	}
}

func TestRedOp(t *testing.T) {
	for _, c := range []struct {
		o       RedOp
		value   int32
		name    string
		builtin bool
		since   Version
	}{
		{Sum, 0, "ncclSum", true, V(2, 3, 0)}, {Prod, 1, "ncclProd", true, V(2, 3, 0)},
		{Max, 2, "ncclMax", true, V(2, 3, 0)}, {Min, 3, "ncclMin", true, V(2, 3, 0)},
		{Avg, 4, "ncclAvg", true, V(2, 10, 0)},
		{5, 5, "ncclPreMulSum(5)", false, V(2, 11, 0)}, {1 << 30, 1 << 30, "ncclPreMulSum(1073741824)", false, V(2, 11, 0)},
		{-1, -1, "ncclRedOp(-1)", false, Version{}},
	} {
		if int32(c.o) != c.value || c.o.String() != c.name || c.o.Builtin() != c.builtin || c.o.Since() != c.since {
			t.Errorf("RedOp(%d): %q builtin %v since %v; want %d %q %v %v", int32(c.o), c.o.String(), c.o.Builtin(),
				c.o.Since(), c.value, c.name, c.builtin, c.since)
		}
	}
}

func TestConstants(t *testing.T) {
	if ScalarDevice != 0 || ScalarHostImmediate != 1 || unsafe.Sizeof(ScalarDevice) != 4 {
		t.Error("ncclScalarResidence_t")
	}
	if SplitNoColor != -1 || WinCollSymmetric != 0x01 || WindowAlignment != 4096 {
		t.Error("NCCL_SPLIT_NOCOLOR, NCCL_WIN_COLL_SYMMETRIC, NCCL_WIN_REQUIRED_ALIGNMENT")
	}
	if ConfigMagic != 0xcafebeef || Undefined != -2147483648 {
		t.Error("NCCL_API_MAGIC, NCCL_CONFIG_UNDEF_INT")
	}
	var id UniqueID
	if UniqueIDBytes != 128 || unsafe.Sizeof(id) != 128 || unsafe.Offsetof(id.Internal) != 0 || unsafe.Alignof(id) != 1 {
		t.Error("ncclUniqueId is char[128]")
	}
	for _, s := range []uintptr{unsafe.Sizeof(Result(0)), unsafe.Sizeof(DataType(0)), unsafe.Sizeof(RedOp(0)),
		unsafe.Sizeof(CudaError(0)), unsafe.Sizeof(MemcpyKind(0)), unsafe.Sizeof(MemoryType(0))} {
		if s != 4 {
			t.Error("C enums are 4 bytes")
		}
	}
}

func TestCuda(t *testing.T) {
	for _, c := range []struct {
		e     CudaError
		value int32
		name  string
	}{
		{CudaSuccess, 0, "cudaSuccess"}, {CudaErrorInvalidValue, 1, "cudaErrorInvalidValue"},
		{CudaErrorMemoryAllocation, 2, "cudaErrorMemoryAllocation"},
		{CudaErrorInitializationError, 3, "cudaErrorInitializationError"},
		{CudaErrorInsufficientDriver, 35, "cudaErrorInsufficientDriver"}, {CudaErrorNoDevice, 100, "cudaErrorNoDevice"},
		{CudaErrorInvalidDevice, 101, "cudaErrorInvalidDevice"},
		{CudaErrorInvalidResourceHandle, 400, "cudaErrorInvalidResourceHandle"},
		{CudaErrorNotReady, 600, "cudaErrorNotReady"},
		{42, 42, "cudaError(42)"}, {9999, 9999, "cudaError(9999)"}, {-1, -1, "cudaError(-1)"},
	} {
		if int32(c.e) != c.value || c.e.String() != c.name {
			t.Errorf("CudaError(%d) = %q, want %d %q", int32(c.e), c.e.String(), c.value, c.name)
		}
	}
	for k, want := range map[MemcpyKind]string{MemcpyHostToHost: "cudaMemcpyHostToHost",
		MemcpyHostToDevice: "cudaMemcpyHostToDevice", MemcpyDeviceToHost: "cudaMemcpyDeviceToHost",
		MemcpyDeviceToDevice: "cudaMemcpyDeviceToDevice", MemcpyDefault: "cudaMemcpyDefault",
		5: "cudaMemcpyKind(5)", -1: "cudaMemcpyKind(-1)"} {
		if k.String() != want {
			t.Errorf("MemcpyKind(%d) = %q, want %q", int32(k), k.String(), want)
		}
	}
	if MemcpyHostToHost != 0 || MemcpyHostToDevice != 1 || MemcpyDeviceToHost != 2 || MemcpyDeviceToDevice != 3 || MemcpyDefault != 4 {
		t.Error("cudaMemcpyKind values")
	}
	for m, want := range map[MemoryType]string{MemoryTypeUnregistered: "cudaMemoryTypeUnregistered",
		MemoryTypeHost: "cudaMemoryTypeHost", MemoryTypeDevice: "cudaMemoryTypeDevice",
		MemoryTypeManaged: "cudaMemoryTypeManaged", 4: "cudaMemoryType(4)", -1: "cudaMemoryType(-1)"} {
		if m.String() != want {
			t.Errorf("MemoryType(%d) = %q, want %q", int32(m), m.String(), want)
		}
	}
	if MemoryTypeUnregistered != 0 || MemoryTypeHost != 1 || MemoryTypeDevice != 2 || MemoryTypeManaged != 3 {
		t.Error("cudaMemoryType values")
	}
	if StreamDefault != 0 || StreamNonBlocking != 1 {
		t.Error("stream flags")
	}
	if EventDefault != 0 || EventBlockingSync != 1 || EventDisableTiming != 2 || EventInterprocess != 4 {
		t.Error("event flags")
	}

	// struct cudaPointerAttributes: the CUDA 11/12 fields, then CUDA 13's long reserved[8].
	var a PointerAttributes
	if unsafe.Offsetof(a.Type) != 0 || unsafe.Offsetof(a.Device) != 4 || unsafe.Offsetof(a.DevicePointer) != 8 ||
		unsafe.Offsetof(a.HostPointer) != 16 || unsafe.Offsetof(a.Reserved) != 24 || unsafe.Sizeof(a) != 88 {
		t.Errorf("cudaPointerAttributes: %d bytes, offsets %d %d %d %d %d", unsafe.Sizeof(a), unsafe.Offsetof(a.Type),
			unsafe.Offsetof(a.Device), unsafe.Offsetof(a.DevicePointer), unsafe.Offsetof(a.HostPointer), unsafe.Offsetof(a.Reserved))
	}

	for code, want := range map[int][2]int{11000: {11, 0}, 11080: {11, 8}, 12040: {12, 4}, 12090: {12, 9},
		13000: {13, 0}, 13010: {13, 1}} {
		if maj, min := DecodeCudaVersion(code); maj != want[0] || min != want[1] {
			t.Errorf("DecodeCudaVersion(%d) = %d.%d, want %d.%d", code, maj, min, want[0], want[1])
		}
	}
}

func FuzzDecodeVersion(f *testing.F) {
	for _, c := range []int{0, 2000, 2304, 2804, 2899, 2900, 9999, 10000, 10900, 20899, 20900, 21403, 22803, 23007, 30000} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, code int) {
		if code < 0 || code > 1<<40 {
			return
		}
		v := DecodeVersion(code)
		if v.Major < 0 || v.Minor < 0 || v.Minor > 99 || v.Patch < 0 || v.Patch > 99 {
			t.Fatalf("DecodeVersion(%d) = %+v", code, v)
		}
		// Code agrees with nccl.h's macro on everything DecodeVersion yields.
		if v.Code() != ncclVersion(v.Major, v.Minor, v.Patch) {
			t.Fatalf("%v: Code %d, NCCL_VERSION %d", v, v.Code(), ncclVersion(v.Major, v.Minor, v.Patch))
		}
		// Codes the macro can produce round-trip: the old form below 2.9 (so
		// never a hundreds digit of 9), the new form for the rest. 2.9.x in the
		// old form or 2.0-2.8 in the new are not NCCL's.
		old := code < 2900 && code%1000 < 900
		nw := code >= 10000 && !(code/10000 <= 2 && code%10000/100 <= 8)
		if (old || nw) && v.Code() != code {
			t.Fatalf("DecodeVersion(%d) = %v, whose code is %d", code, v, v.Code())
		}
	})
}

func FuzzEncodeConfig(f *testing.F) {
	f.Add(2, 14, 3, uint32(1), int32(0), int32(1), "", "")
	f.Add(2, 17, 1, uint32(0x1f), int32(-5), int32(3), "IB", "")
	f.Add(2, 26, 2, uint32(0x7f), int32(math.MinInt32), int32(0), "Socket", "x")
	f.Add(2, 30, 4, uint32(1)<<17, int32(1), int32(1), "", "")
	f.Add(2, 30, 7, uint32(0x3ffff), int32(math.MaxInt32), int32(-1), "net", "comm")
	f.Add(2, 13, 4, uint32(0), int32(0), int32(0), "", "")
	f.Fuzz(func(t *testing.T, major, minor, patch int, mask uint32, a, b int32, net, name string) {
		v := V(int(uint(major)%4), int(uint(minor)%40), int(uint(patch)%12))
		c := &Config{}
		var newest Version
		for i, fl := range cFields {
			if mask&(1<<i) == 0 {
				continue
			}
			setField(c, fl, a+int32(i)*b)
			if fl.since.AtLeast(newest) {
				newest = fl.since
			}
		}
		// Strings from the fuzzer, but an empty one would unset the field.
		if c.NetName != "" && net != "" {
			c.NetName = net
		}
		if c.CommName != "" && name != "" {
			c.CommName = name
		}
		strs := cstrings{}
		buf := make([]byte, 112)
		for i := range buf {
			buf[i] = 0xa5
		}
		size, err := EncodeConfig(buf, c, v, strs.cstr)
		switch {
		case mask&(1<<len(cFields)-1) != 0 && !v.AtLeast(newest):
			if err == nil || !strings.Contains(err.Error(), "requires NCCL >=") {
				t.Fatalf("%v with fields since %v: %v", v, newest, err)
			}
		case !v.AtLeast(V(2, 14, 0)):
			if err == nil {
				t.Fatalf("%v has no ncclConfig_t, but encoded", v)
			}
		case err != nil:
			t.Fatalf("%v: %v", v, err)
		default:
			checkEncoded(t, buf, c, v, strs, size)
		}
	})
}
