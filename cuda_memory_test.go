package nccl_test

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/gonccl/nccl"
)

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

func cudaCode(err error) nccl.CUDAErrorCode {
	var e *nccl.CUDAError
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

// TestHostRegister: registered Go memory is page-locked host memory to the
// runtime (and usable by asynchronous copies both ways); overlapping
// registration and unregistering twice get CUDA's codes; flags and empty ranges
// are checked before the call.
func TestHostRegister(t *testing.T) {
	cu := open(t, "default").CUDA()
	mem := make([]byte, 8192)
	if err := cu.HostRegister(mem, nccl.HostRegisterPortable|nccl.HostRegisterMapped); err != nil {
		t.Fatal(err)
	}
	if a, err := cu.PointerAttributes(uintptr(bytesPtr(mem[100:]))); err != nil || a.Type != nccl.MemoryHost {
		t.Errorf("attributes of registered memory: %+v, %v", a, err)
	}
	if err := cu.HostRegister(mem[4096:], 0); cudaCode(err) != nccl.CUDAErrorHostMemoryAlreadyRegistered {
		t.Errorf("overlapping registration: %v", err)
	}
	for name, err := range map[string]error{
		"empty":     cu.HostRegister(nil, 0),
		"bad flags": cu.HostRegister(make([]byte, 8), 16),
		"unreg nil": cu.HostUnregister(nil),
	} {
		if !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A round trip through the device with asynchronous copies.
	s, err := cu.NewStream(0, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	d, err := cu.Alloc(0, nccl.Uint8, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	copy(mem, bytes.Repeat([]byte("gonccl"), 682))
	if err := cu.MemcpyAsync(uintptr(d.Ptr()), uintptr(bytesPtr(mem)), 4096, s); err != nil {
		t.Fatal(err)
	}
	if err := cu.MemcpyAsync(uintptr(bytesPtr(mem[4096:])), uintptr(d.Ptr()), 4096, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[:4096], mem[4096:]) {
		t.Error("round trip through registered memory")
	}
	if err := cu.HostUnregister(mem); err != nil {
		t.Fatal(err)
	}
	if err := cu.HostUnregister(mem); cudaCode(err) != nccl.CUDAErrorHostMemoryNotRegistered {
		t.Errorf("second unregister: %v", err)
	}
	if a, err := cu.PointerAttributes(uintptr(bytesPtr(mem))); err != nil || a.Type != nccl.MemoryUnregistered {
		t.Errorf("attributes after unregistering: %+v, %v", a, err)
	}
}

// TestDeviceAttributes: the fake devices are H100s (9.0, 132 SMs); an unknown
// attribute and an absent device get CUDA's codes, a negative device is refused.
func TestDeviceAttributes(t *testing.T) {
	cu := open(t, "default").CUDA()
	if maj, min, err := cu.ComputeCapability(1); err != nil || maj != 9 || min != 0 {
		t.Errorf("ComputeCapability = %d.%d, %v", maj, min, err)
	}
	if n, err := cu.MultiProcessorCount(0); err != nil || n != 132 {
		t.Errorf("MultiProcessorCount = %d, %v", n, err)
	}
	if v, err := cu.DeviceAttribute(0, nccl.DevAttrMemoryPoolsSupported); err != nil || v != 1 {
		t.Errorf("MemoryPoolsSupported = %d, %v", v, err)
	}
	if _, err := cu.DeviceAttribute(0, 9999); cudaCode(err) != 1 {
		t.Errorf("unknown attribute: %v", err)
	}
	if _, err := cu.DeviceAttribute(64, nccl.DevAttrWarpSize); cudaCode(err) != 101 {
		t.Errorf("absent device: %v", err)
	}
	if _, err := cu.DeviceAttribute(-1, nccl.DevAttrWarpSize); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("negative device: %v", err)
	}
}

// TestPeerAccess: enabling twice succeeds (CUDA's "already enabled" is taken
// as success), disabling twice gets CUDA's "not enabled"; a device is not its
// own peer.
func TestPeerAccess(t *testing.T) {
	cu := open(t, "default").CUDA()
	if can, err := cu.CanAccessPeer(0, 1); err != nil || !can {
		t.Errorf("CanAccessPeer(0, 1) = %v, %v", can, err)
	}
	if can, err := cu.CanAccessPeer(2, 2); err != nil || can {
		t.Errorf("CanAccessPeer(2, 2) = %v, %v", can, err)
	}
	for range 2 {
		if err := cu.EnablePeerAccess(2, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := cu.DisablePeerAccess(2, 3); err != nil {
		t.Fatal(err)
	}
	if err := cu.DisablePeerAccess(2, 3); cudaCode(err) != nccl.CUDAErrorPeerAccessNotEnabled {
		t.Errorf("disabling twice: %v", err)
	}
	for name, err := range map[string]error{
		"self":          cu.EnablePeerAccess(1, 1),
		"negative peer": cu.EnablePeerAccess(0, -1),
		"huge peer":     cu.DisablePeerAccess(0, math.MaxInt32+1),
		"can negative":  func() error { _, err := cu.CanAccessPeer(-1, 0); return err }(),
	} {
		if !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := cu.EnablePeerAccess(0, 64); cudaCode(err) != 101 {
		t.Errorf("absent peer: %v", err)
	}
}

// TestStreamPriority: the range is an H100's, a priority is kept and one
// outside the range clamped, as CUDA does; one that is no C int is refused.
func TestStreamPriority(t *testing.T) {
	cu := open(t, "default").CUDA()
	least, greatest, err := cu.StreamPriorityRange(0)
	if err != nil || least != 0 || greatest != -5 {
		t.Fatalf("range %d..%d, %v", least, greatest, err)
	}
	for _, c := range [][2]int{{-3, -3}, {-100, -5}, {7, 0}} {
		s, err := cu.NewStreamWithPriority(1, nccl.StreamNonBlocking, c[0])
		if err != nil {
			t.Fatal(err)
		}
		if p, err := s.Priority(); err != nil || p != c[1] {
			t.Errorf("priority %d: stream has %d, %v; want %d", c[0], p, err, c[1])
		}
		if s.Device() != 1 {
			t.Errorf("device %d", s.Device())
		}
		s.Destroy()
	}
	if _, err := cu.NewStreamWithPriority(0, 0, math.MinInt32-1); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("priority beyond a C int: %v", err)
	}
}

// TestMallocAsync: stream-ordered memory works on its stream; Free is
// stream-ordered (the memory goes when the stream reaches it, not before);
// FreeAsync checks kind, device and double frees.
func TestMallocAsync(t *testing.T) {
	cu := open(t, "default").CUDA()
	s, err := cu.NewStream(1, nccl.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	b, err := cu.MallocAsync(nccl.Float32, 1024, s)
	if err != nil {
		t.Fatal(err)
	}
	if b.Device() != 1 || b.Len() != 1024 || b.Type() != nccl.Float32 {
		t.Errorf("buffer %v %v %v", b.Device(), b.Len(), b.Type())
	}
	if a, err := cu.PointerAttributes(uintptr(b.Ptr())); err != nil || a.Type != nccl.MemoryDevice || a.Device != 1 {
		t.Errorf("attributes %+v, %v", a, err)
	}
	if err := b.MemsetAsync(0x3f, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := nccl.CopyOut(got, b); err != nil {
		t.Fatal(err)
	}
	if got[3] != math.Float32frombits(0x3f3f3f3f) {
		t.Errorf("memset: %v", got)
	}
	// Free is stream-ordered: behind 20 queued memsets (200 µs each on the
	// fake) it has returned, and the memory is still there, still in use.
	for range 20 {
		if err := b.MemsetAsync(1, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if a, err := cu.PointerAttributes(uintptr(b.Ptr())); err != nil || a.Type != nccl.MemoryDevice {
		t.Errorf("freed before the stream reached the free: %+v, %v", a, err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if a, err := cu.PointerAttributes(uintptr(b.Ptr())); err != nil || a.Type != nccl.MemoryUnregistered {
		t.Errorf("after the stream reached the free: %+v, %v", a, err)
	}
	if err := b.Free(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("double free: %v", err)
	}
	// FreeAsync on another stream of the device, the legacy one.
	c, err := cu.MallocAsync(nccl.Uint8, 10, cu.DefaultStream(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FreeAsync(s); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("FreeAsync on another device's stream: %v", err)
	}
	if err := c.Slice(1, 2).FreeAsync(cu.DefaultStream(2)); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("FreeAsync of a slice: %v", err)
	}
	if err := c.FreeAsync(cu.DefaultStream(2)); err != nil {
		t.Fatal(err)
	}
	d, err := cu.Alloc(1, nccl.Uint8, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if err := d.FreeAsync(s); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("FreeAsync of cudaMalloc memory: %v", err)
	}
	if _, err := cu.MallocAsync(nccl.Uint8, -1, s); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("negative count: %v", err)
	}
	if _, err := cu.MallocAsync(nccl.Uint8, 1, nccl.Stream{}); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("zero stream: %v", err)
	}
	cu.DeviceSynchronize(2)
}
