package nccl_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/ccall"
)

func TestProperties(t *testing.T) {
	l := open(t, "v230")
	ranks := initRanks(t, l, 3)
	for r, rk := range ranks {
		p, err := rk.comm.Properties()
		if err != nil {
			t.Fatal(err)
		}
		want := nccl.Properties{Rank: r, Size: 3, CUDADevice: rk.dev, NVMLDevice: rk.dev, DeviceAPI: true,
			GinType: nccl.GinNone, LsaTeams: 1, HostRMA: true, RailedGinType: nccl.GinNone}
		if p != want {
			t.Errorf("rank %d: %+v, want %+v", r, p, want)
		}
	}
	// The fake reads the struct as its version declares it: a 2.29.2 caller's
	// 40 bytes, nothing past them.
	q := fakeFn(t, l, "ncclCommQueryProperties")
	buf := make([]byte, 64)
	for i := range buf {
		buf[i] = 0xee
	}
	*(*uint64)(unsafe.Pointer(&buf[0])) = 40
	*(*uint32)(unsafe.Pointer(&buf[8])) = 0xcafebeef
	*(*uint32)(unsafe.Pointer(&buf[12])) = 22902
	if r := int32(ccall.CallPtr(q, ranks[1].comm.Handle(), uintptr(unsafe.Pointer(&buf[0])))); r != 0 {
		t.Fatalf("2.29.2 layout: result %d: %s", r, l.LastError())
	}
	if got := *(*int32)(unsafe.Pointer(&buf[16])); got != 1 {
		t.Errorf("2.29.2 layout: rank %d", got)
	}
	for i := 40; i < len(buf); i++ {
		if buf[i] != 0xee {
			t.Fatalf("byte %d past a 2.29.2 ncclCommProperties_t written", i)
		}
	}
	*(*uint32)(unsafe.Pointer(&buf[8])) = 0 // no NCCL_COMM_PROPERTIES_INITIALIZER
	if r := int32(ccall.CallPtr(q, ranks[1].comm.Handle(), uintptr(unsafe.Pointer(&buf[0])))); r != 5 {
		t.Errorf("without the magic: result %d, want ncclInvalidUsage", r)
	}

	old := initRanks(t, open(t, "default"), 1)[0].comm
	if _, err := old.Properties(); !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "requires >= 2.29.2)") {
		t.Errorf("Properties on 2.28.3: %v", err)
	}
}
