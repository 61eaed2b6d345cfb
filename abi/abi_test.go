package abi

import (
	"encoding/binary"
	"strings"
	"testing"
	"unsafe"
)

// The numbers below are read off nccl.h of each release (see FACTS.md).
func TestConfigLayouts(t *testing.T) {
	sizes := []struct {
		v    Version
		size uintptr
		last string
	}{
		{V(2, 14, 3), 24, "blocking"},
		{V(2, 17, 1), 40, "netName"},
		{V(2, 18, 5), 48, "splitShare"},
		{V(2, 22, 3), 48, "splitShare"},
		{V(2, 26, 6), 48, "trafficClass"},
		{V(2, 27, 3), 72, "nvlsCTAs"},
		{V(2, 28, 3), 80, "nvlinkCentricSched"},
		{V(2, 29, 2), 88, "numRmaCtx"},
		{V(2, 30, 7), 96, "graphStreamOrdering"},
	}
	for _, c := range sizes {
		size, fields, ok := ConfigLayout(c.v)
		if !ok || size != c.size || fields[len(fields)-1].Name != c.last {
			t.Errorf("%v: sizeof %d, last field %s; want %d, %s", c.v, size, fields[len(fields)-1].Name, c.size, c.last)
		}
	}
	if _, _, ok := ConfigLayout(V(2, 13, 4)); ok {
		t.Error("2.13 has no ncclConfig_t")
	}
	offsets := map[string]uintptr{"blocking": 16, "cgaClusterSize": 20, "minCTAs": 24, "maxCTAs": 28, "netName": 32,
		"splitShare": 40, "trafficClass": 44, "commName": 48, "collnetEnable": 56, "CTAPolicy": 60, "shrinkShare": 64,
		"nvlsCTAs": 68, "nChannelsPerNetPeer": 72, "nvlinkCentricSched": 76, "graphUsageMode": 80, "numRmaCtx": 84,
		"maxP2pPeers": 88, "graphStreamOrdering": 92}
	_, fields, _ := ConfigLayout(V(2, 30, 0))
	if len(fields) != len(offsets) {
		t.Fatalf("%d fields in 2.30, want %d", len(fields), len(offsets))
	}
	for _, f := range fields {
		if offsets[f.Name] != f.Offset {
			t.Errorf("%s at %d, want %d", f.Name, f.Offset, offsets[f.Name])
		}
	}
}

func TestEncodeConfig(t *testing.T) {
	i := func(v int32) *int32 { return &v }
	no := false
	c := &Config{Blocking: &no, CGAClusterSize: i(4), NetName: "IB", SplitShare: i(1), CommName: "trainer", NvlsCTAs: i(16)}
	strs := map[uintptr]string{}
	cstr := func(s string) uintptr { p := uintptr(0x1000 + len(strs)*16); strs[p] = s; return p }
	buf := make([]byte, 128)
	size, err := EncodeConfig(buf, c, V(2, 28, 3), cstr)
	if err != nil || size != 80 {
		t.Fatalf("EncodeConfig = %d, %v", size, err)
	}
	ne := binary.NativeEndian
	i32 := func(off int) int32 { return int32(ne.Uint32(buf[off:])) }
	ptr := func(off int) string { return strs[uintptr(ne.Uint64(buf[off:]))] }
	if ne.Uint64(buf) != 80 || ne.Uint32(buf[8:]) != ConfigMagic || ne.Uint32(buf[12:]) != 22803 {
		t.Errorf("header: size %d magic %#x version %d", ne.Uint64(buf), ne.Uint32(buf[8:]), ne.Uint32(buf[12:]))
	}
	for off, want := range map[int]int32{16: 0, 20: 4, 24: Undefined, 28: Undefined, 40: 1, 44: Undefined,
		56: Undefined, 60: Undefined, 64: Undefined, 68: 16, 72: Undefined, 76: Undefined} {
		if got := i32(off); got != want {
			t.Errorf("int at %d = %d, want %d", off, got, want)
		}
	}
	if ptr(32) != "IB" || ptr(48) != "trainer" {
		t.Errorf("strings: netName %q commName %q", ptr(32), ptr(48))
	}
	for _, b := range buf[80:] {
		if b != 0 {
			t.Fatal("wrote past sizeof")
		}
	}
	// A field the release lacks is refused with the version that added it.
	_, err = EncodeConfig(buf, c, V(2, 18, 1), cstr)
	if err == nil || !strings.Contains(err.Error(), "commName requires NCCL >= 2.27 (loaded 2.18.1)") {
		t.Errorf("commName on 2.18: %v", err)
	}
	// Nothing set: everything undefined, NULL pointers.
	size, err = EncodeConfig(buf, &Config{}, V(2, 17, 1), cstr)
	if err != nil || size != 40 || i32(16) != Undefined || ne.Uint64(buf[32:]) != 0 {
		t.Errorf("empty config on 2.17: %d %v", size, err)
	}
	if _, err := EncodeConfig(make([]byte, 20), &Config{}, V(2, 14, 0), cstr); err == nil {
		t.Error("short buffer accepted")
	}
}

func TestVersions(t *testing.T) {
	for code, want := range map[int]Version{2804: V(2, 8, 4), 2408: V(2, 4, 8), 21403: V(2, 14, 3), 22803: V(2, 28, 3),
		22902: V(2, 29, 2), 23007: V(2, 30, 7), 20900: V(2, 9, 0)} {
		if got := DecodeVersion(code); got != want || got.Code() != code {
			t.Errorf("DecodeVersion(%d) = %v (code %d), want %v", code, got, got.Code(), want)
		}
	}
	if !V(2, 28, 3).AtLeast(V(2, 28, 3)) || V(2, 27, 9).AtLeast(V(2, 28, 0)) || !V(3, 0, 0).AtLeast(V(2, 30, 0)) {
		t.Error("AtLeast")
	}
	if V(2, 28, 9).String() != "2.28.9" {
		t.Error("String")
	}
}

func TestEnums(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Success.String(), "ncclSuccess"}, {InvalidUsage.String(), "ncclInvalidUsage"}, {Timeout.String(), "ncclTimeout"},
		{Result(42).String(), "ncclResult(42)"},
		{Int8.String(), "ncclInt8"}, {Bfloat16.String(), "ncclBfloat16"}, {Float8e5m2.String(), "ncclFloat8e5m2"},
		{DataType(12).String(), "ncclDataType(12)"},
		{Avg.String(), "ncclAvg"}, {RedOp(7).String(), "ncclPreMulSum(7)"}, {RedOp(-1).String(), "ncclRedOp(-1)"},
		{CudaErrorNotReady.String(), "cudaErrorNotReady"}, {CudaError(9999).String(), "cudaError(9999)"},
		{MemcpyDefault.String(), "cudaMemcpyDefault"}, {MemoryTypeDevice.String(), "cudaMemoryTypeDevice"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	sizes := map[DataType]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8, Float16: 2, Float32: 4,
		Float64: 8, Bfloat16: 2, Float8e4m3: 1, Float8e5m2: 1, DataType(12): 0, DataType(-1): 0}
	for dt, want := range sizes {
		if dt.Size() != want {
			t.Errorf("%v size %d, want %d", dt, dt.Size(), want)
		}
	}
	if Float8e4m3.Since() != V(2, 24, 0) || Bfloat16.Since() != V(2, 10, 0) || Avg.Since() != V(2, 10, 0) {
		t.Error("Since")
	}
	if unsafe.Sizeof(UniqueID{}) != 128 || unsafe.Sizeof(PointerAttributes{}) != 24 ||
		unsafe.Offsetof(PointerAttributes{}.DevicePointer) != 8 {
		t.Error("C struct sizes")
	}
	if maj, min := DecodeCudaVersion(12040); maj != 12 || min != 4 {
		t.Errorf("12040 → %d.%d", maj, min)
	}
	if maj, min := DecodeCudaVersion(13000); maj != 13 || min != 0 {
		t.Errorf("13000 → %d.%d", maj, min)
	}
}

func FuzzDecodeVersion(f *testing.F) {
	for _, c := range []int{2804, 21403, 22803, 23007} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, code int) {
		v := DecodeVersion(code)
		// Codes NCCL can produce: the old form for 2.0 to 2.8 (2000..2899), the
		// new one from 2.9 (20900 and up).
		if code < 10000 && (code < 2000 || code >= 2900) || code >= 10000 && (code < 20900 || code >= 100000) {
			return
		}
		if v.Code() != code {
			t.Fatalf("DecodeVersion(%d) = %v, whose code is %d", code, v, v.Code())
		}
	})
}

func FuzzEncodeConfig(f *testing.F) {
	f.Add(int32(1), int32(-5), "x", "y", 14, 1)
	f.Add(int32(Undefined), int32(0), "", "name", 30, 0)
	f.Fuzz(func(t *testing.T, a, b int32, net, name string, minor, blocking int) {
		v := V(2, minor%40, 0)
		bl := blocking%2 == 0
		c := &Config{Blocking: &bl, CGAClusterSize: &a, MaxCTAs: &b, NetName: net, CommName: name}
		buf := make([]byte, 128)
		size, err := EncodeConfig(buf, c, v, func(string) uintptr { return 0xabc })
		want, fields, ok := ConfigLayout(v)
		if !ok || err != nil {
			return
		}
		if size != want || binary.NativeEndian.Uint64(buf) != uint64(size) {
			t.Fatalf("size %d, layout %d", size, want)
		}
		for _, fl := range fields {
			if fl.Name == "maxCTAs" && int32(binary.NativeEndian.Uint32(buf[fl.Offset:])) != b {
				t.Fatalf("maxCTAs did not round-trip")
			}
		}
	})
}
