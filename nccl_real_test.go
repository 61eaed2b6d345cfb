package nccl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
)

// Tests against NVIDIA's own libnccl on a machine with no GPU, run by
// scripts/test-real-nccl.sh: Debian 13's libnccl2 (NCCL 2.22.3) and libcudart12
// (CUDA 12.4), through the dynamic loader of the glibc they were built for.
// Skipped unless GONCCL_REAL_NCCL=1. Every expected value below was read off that
// build.

const (
	// The CUDA runtime's words for cudaErrorInsufficientDriver, which it returns
	// for every device call when no driver is installed.
	realNoDriverText = "CUDA driver version is insufficient for CUDA runtime version"
	// NCCL's CUDACHECK failure, as ncclGetLastError reports it.
	realCudaFailure = "Cuda failure '" + realNoDriverText + "'"
)

func openRealNoGPU(t *testing.T) *nccl.Library {
	t.Helper()
	if os.Getenv("GONCCL_REAL_NCCL") != "1" {
		t.Skip("needs NVIDIA's libnccl: run scripts/test-real-nccl.sh")
	}
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// realFn resolves a function of the loaded real libnccl directly, for calls
// gonccl's API does not make on its own.
func realFn(t *testing.T, l *nccl.Library, name string) uintptr {
	t.Helper()
	h, err := purego.Dlopen(l.Path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, name)
	if err != nil || p == 0 {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// TestRealNCCLLoads: found through GONCCL_NCCL_LIB, the file really mapped is the
// versioned one, the version and the optional functions are 2.22.3's.
func TestRealNCCLLoads(t *testing.T) {
	l := openRealNoGPU(t)
	if l.Via != "GONCCL_NCCL_LIB" || !strings.HasSuffix(l.Path, "/libnccl.so.2.22.3") {
		t.Errorf("NCCL: %s via %q, want libnccl.so.2.22.3 via GONCCL_NCCL_LIB", l.Path, l.Via)
	}
	if want := os.Getenv("GONCCL_NCCL_LIB"); len(l.Trace) != 1 || l.Trace[0].Via != "GONCCL_NCCL_LIB" ||
		l.Trace[0].Path != want || l.Trace[0].Err != nil {
		t.Errorf("trace %v, want one loaded attempt of %s", l.Trace, want)
	}
	if v := l.Version(); v != abi.V(2, 22, 3) || v.Code() != 22203 || v.String() != "2.22.3" {
		t.Errorf("version %v (code %d), want 2.22.3 (22203)", v, v.Code())
	}
	want := map[string]bool{
		"ncclCommSplit": true, "ncclCommRegister": true, "ncclCommDeregister": true,
		"ncclMemAlloc": true, "ncclMemFree": true,
		"ncclAlltoAll": false, "ncclGather": false, "ncclScatter": false, "ncclAlltoAllv": false,
		"ncclCommWindowRegister": false, "ncclCommWindowDeregister": false, "ncclCommInitRankScalable": false,
		"ncclGroupSimulateEnd": true,
		"ncclCommShrink":       false, "ncclCommRevoke": false, "ncclCommGetUniqueId": false, "ncclCommGrow": false,
		"ncclPutSignal": false, "ncclSignal": false, "ncclWaitSignal": false, "ncclWinGetUserPtr": false,
		"ncclCommQueryProperties": false, "ncclCommSuspend": false, "ncclCommResume": false, "ncclCommMemStats": false,
		"ncclParamBind": false, "ncclParamGetI8": false, "ncclParamGetI16": false, "ncclParamGetI32": false,
		"ncclParamGetI64": false, "ncclParamGetU8": false, "ncclParamGetU16": false, "ncclParamGetU32": false,
		"ncclParamGetU64": false, "ncclParamGetStr": false, "ncclParamGetParameter": false,
		"ncclParamGetAllParameterKeys": false,
	}
	for name, present := range want {
		if l.Has(name) != present {
			t.Errorf("Has(%s) = %v, want %v", name, l.Has(name), present)
		}
	}
	// Features lists exactly the optional functions, each as Has says.
	seen := map[string]bool{}
	for _, f := range l.Features() {
		seen[f.Name] = true
		if p, ok := want[f.Name]; !ok || f.Present != p || f.Present != l.Has(f.Name) {
			t.Errorf("feature %+v, want present=%v (listed: %v)", f, p, ok)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("Features lists %d functions, want %d: %v", len(seen), len(want), seen)
	}
	// An absent function is refused before any C call, naming the requirement.
	_, err := l.InitRankScalable(context.Background(), 0, []nccl.UniqueID{{}}, 1, 0, nil)
	var ue *nccl.UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, nccl.ErrNotSupported) || ue.Name != "ncclCommInitRankScalable" ||
		ue.Path != l.Path || ue.Version != abi.V(2, 22, 3) || ue.Requires != ">= 2.23" {
		t.Errorf("InitRankScalable = %v, want ncclCommInitRankScalable not supported (requires >= 2.23)", err)
	}
	if !l.SupportsType(abi.Bfloat16) || !l.SupportsType(abi.Float64) || l.SupportsType(abi.Float8e4m3) || l.SupportsType(abi.Float8e5m2) {
		t.Error("2.22 supports bfloat16 and not the fp8 types")
	}
	if l.AlltoAllvABI() != 11 {
		t.Errorf("AlltoAllvABI = %d, want the default 11", l.AlltoAllvABI())
	}
}

// TestRealNCCLCUDARuntime: the runtime is found through GONCCL_CUDART_LIB and,
// with no driver at all, answers version queries and reports every device call
// as cudaErrorInsufficientDriver, a typed error matching ErrNoDevice.
func TestRealNCCLCUDARuntime(t *testing.T) {
	l := openRealNoGPU(t)
	cu := l.CUDA()
	if cu == nil {
		t.Fatal("no CUDA runtime loaded")
	}
	if cu.Via != "GONCCL_CUDART_LIB" || !strings.HasSuffix(cu.Path, "/libcudart.so.12.4.127") {
		t.Errorf("CUDA runtime: %s via %q, want libcudart.so.12.4.127 via GONCCL_CUDART_LIB", cu.Path, cu.Via)
	}
	if v, err := cu.RuntimeVersion(); err != nil || v != 12040 {
		t.Errorf("RuntimeVersion = %d, %v; want 12040", v, err)
	}
	if v, err := cu.DriverVersion(); err != nil || v != 0 {
		t.Errorf("DriverVersion = %d, %v; want 0 (no driver)", v, err)
	}
	if s := cu.ErrorName(abi.CudaErrorInsufficientDriver); s != "cudaErrorInsufficientDriver" {
		t.Errorf("ErrorName(35) = %q", s)
	}
	if s := cu.ErrorString(abi.CudaErrorNoDevice); s != "no CUDA-capable device is detected" {
		t.Errorf("ErrorString(100) = %q", s)
	}

	n, err := cu.DeviceCount()
	checkNoDriver(t, "DeviceCount", err, "cudaGetDeviceCount")
	if n != 0 {
		t.Errorf("DeviceCount = %d, want 0", n)
	}
	// Calls that select the device first fail at cudaGetDevice, before their own
	// call (or fn) runs.
	ran := false
	err = cu.OnDevice(0, func() error { ran = true; return nil })
	checkNoDriver(t, "OnDevice", err, "cudaGetDevice")
	if ran {
		t.Error("OnDevice ran fn without a device")
	}
	_, err = cu.Alloc(0, nccl.Uint8, 1024)
	checkNoDriver(t, "Alloc", err, "cudaGetDevice")
	_, err = cu.NewStream(0, nccl.StreamNonBlocking)
	checkNoDriver(t, "NewStream", err, "cudaGetDevice")
	_, err = cu.NewEvent(0, nccl.EventDisableTiming)
	checkNoDriver(t, "NewEvent", err, "cudaGetDevice")
	err = cu.DeviceSynchronize(0)
	checkNoDriver(t, "DeviceSynchronize", err, "cudaGetDevice")
}

// checkNoDriver asserts err is the runtime's no-driver answer from op.
func checkNoDriver(t *testing.T, call string, err error, op string) {
	t.Helper()
	var ce *nccl.CUDAError
	if !errors.As(err, &ce) {
		t.Errorf("%s = %v, want a *nccl.CUDAError", call, err)
		return
	}
	if ce.Op != op || ce.Code != abi.CudaErrorInsufficientDriver || ce.Msg != realNoDriverText ||
		!errors.Is(err, nccl.ErrNoDevice) || !errors.Is(err, nccl.ErrCUDA) {
		t.Errorf("%s = %#v, want %s: cudaErrorInsufficientDriver (%q), matching ErrNoDevice and ErrCUDA", call, ce, op, realNoDriverText)
	}
}

// TestRealNCCLUniqueID: NCCL writes its bootstrap handle into the id gonccl
// passes (magic, then a socket address with the port its root listens on, then
// zeros), and the id survives its text and binary forms.
func TestRealNCCLUniqueID(t *testing.T) {
	l := openRealNoGPU(t)
	t.Setenv("NCCL_COMM_ID", "")
	os.Unsetenv("NCCL_COMM_ID")
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	b := id.Internal[:]
	family := binary.LittleEndian.Uint16(b[8:])
	port := binary.BigEndian.Uint16(b[10:])
	if binary.LittleEndian.Uint64(b) == 0 || (family != 2 && family != 10) || port == 0 {
		t.Errorf("id %s: magic %#x, family %d, port %d; want a random magic and an AF_INET or AF_INET6 address with a port",
			id, binary.LittleEndian.Uint64(b), family, port)
	}
	// struct ncclBootstrapHandle is 40 bytes; NCCL zeroes the rest of the 128.
	for i, c := range b[40:] {
		if c != 0 {
			t.Errorf("id byte %d = %#x, want 0 past the bootstrap handle", 40+i, c)
			break
		}
	}
	// Each call starts another root: another magic and port.
	if id2, err := l.GetUniqueID(); err != nil || id2 == id {
		t.Errorf("second id %v, %v: want a different id", id2, err)
	}

	s := id.String()
	if len(s) != 256 || strings.Trim(s, "0123456789abcdef") != "" {
		t.Errorf("text form %q: want 256 lowercase hex digits", s)
	}
	back, err := nccl.ParseUniqueID(" " + s + "\n")
	if err != nil || back != id {
		t.Errorf("ParseUniqueID(String()) = %v, %v; want the id", back, err)
	}
	var viaText nccl.UniqueID
	if txt, _ := id.MarshalText(); viaText.UnmarshalText(txt) != nil || viaText != id {
		t.Error("MarshalText/UnmarshalText lost the id")
	}
	var viaBin nccl.UniqueID
	if raw, _ := id.MarshalBinary(); viaBin.UnmarshalBinary(raw) != nil || viaBin != id {
		t.Error("MarshalBinary/UnmarshalBinary lost the id")
	}
}

// TestRealNCCLCommID: with NCCL_COMM_ID, NCCL builds the id from the address
// alone, identical on every call: its fixed magic, AF_INET, the port and the
// address, in network order.
func TestRealNCCLCommID(t *testing.T) {
	l := openRealNoGPU(t)
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:29517")
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	var want nccl.UniqueID
	binary.LittleEndian.PutUint64(want.Internal[0:], 0x0280028002800280) // NCCL_MAGIC
	binary.LittleEndian.PutUint16(want.Internal[8:], 2)                  // AF_INET
	binary.BigEndian.PutUint16(want.Internal[10:], 29517)
	copy(want.Internal[12:], net.IPv4(127, 0, 0, 1).To4())
	if id != want {
		t.Errorf("id from NCCL_COMM_ID\n got %s\nwant %s", id, want)
	}
	if id2, err := l.GetUniqueID(); err != nil || id2 != id {
		t.Errorf("second id %v, %v: want the same id", id2, err)
	}

	// A malformed address is NCCL's invalid argument, with its own words.
	t.Setenv("NCCL_COMM_ID", "no-port-here")
	_, err = l.GetUniqueID()
	var ne *nccl.Error
	if !errors.As(err, &ne) || !errors.Is(err, nccl.ErrInvalidArgument) || ne.Op != "ncclGetUniqueId" ||
		ne.Code != abi.InvalidArgument || !strings.HasPrefix(ne.Msg, "Invalid NCCL_COMM_ID") {
		t.Errorf("GetUniqueID with a bad NCCL_COMM_ID = %#v (%v), want ncclGetUniqueId: ncclInvalidArgument: Invalid NCCL_COMM_ID...", ne, err)
	}
}

// TestRealNCCLErrorStrings: ncclGetErrorString's texts for every result 2.22 knows.
func TestRealNCCLErrorStrings(t *testing.T) {
	l := openRealNoGPU(t)
	for r, want := range map[abi.Result]string{
		abi.Success:            "no error",
		abi.UnhandledCudaError: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
		abi.SystemError:        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
		abi.InternalError:      "internal error - please report this issue to the NCCL developers",
		abi.InvalidArgument:    "invalid argument (run with NCCL_DEBUG=WARN for details)",
		abi.InvalidUsage:       "invalid usage (run with NCCL_DEBUG=WARN for details)",
		abi.RemoteError:        "remote process exited or there was a network error",
		abi.InProgress:         "NCCL operation in progress",
		abi.Timeout:            "unknown result code", // 2.30.3's ncclTimeout is unknown to 2.22
	} {
		if got := l.ErrorString(r); got != want {
			t.Errorf("ErrorString(%v) = %q, want %q", r, got, want)
		}
	}
}

// TestRealNCCLNoGPU: how creating a communicator fails without a GPU.
//
// gonccl's InitRank first makes the device current through the CUDA runtime, so
// the runtime's cudaGetDevice fails before NCCL is reached: a *CUDAError matching
// ErrNoDevice. gonccl has no way to call ncclCommInitRank without selecting a
// device, so NCCL's own path is checked two ways: ncclCommInitRank called
// directly, through the same by-value call InitRank makes, and InitAll (which
// reaches ncclCommInitAll without selecting a device). Both fail inside NCCL
// with ncclUnhandledCudaError and NCCL's last-error text.
func TestRealNCCLNoGPU(t *testing.T) {
	l := openRealNoGPU(t)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}

	// Blocking (a context that cannot end) and non-blocking (one that can) alike.
	deadline, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ce *nccl.CUDAError
	for _, ctx := range []context.Context{context.Background(), deadline} {
		c, err := l.InitRank(ctx, 0, id, 1, 0, modeOf(ctx, nil))
		if c != nil || !errors.As(err, &ce) || !errors.Is(err, nccl.ErrNoDevice) || ce.Op != "cudaGetDevice" ||
			ce.Code != abi.CudaErrorInsufficientDriver || ce.Msg != realNoDriverText {
			t.Errorf("InitRank (can end: %v) = %v, %v; want cudaGetDevice: cudaErrorInsufficientDriver matching ErrNoDevice", ctx.Done() != nil, c, err)
		}
		_, err = l.InitRank(ctx, 0, id, 2, 1, &nccl.Config{})
		if !errors.As(err, &ce) || ce.Op != "cudaGetDevice" || !errors.Is(err, nccl.ErrNoDevice) {
			t.Errorf("InitRank with a Config (can end: %v) = %v; want cudaGetDevice's ErrNoDevice", ctx.Done() != nil, err)
		}
	}
	_, err = l.MemAlloc(0, nccl.Uint8, 4096)
	if !errors.As(err, &ce) || ce.Op != "cudaGetDevice" || !errors.Is(err, nccl.ErrNoDevice) {
		t.Errorf("MemAlloc = %v; want cudaGetDevice's ErrNoDevice", err)
	}

	// ncclCommInitRank itself, with the id by value as InitRank passes it. A
	// different failure is provoked first, so the last-error text checked after
	// the call is the one this call left.
	provokeOtherLastError(t, l)
	// The out-parameter lives on the heap, which never moves: CallStruct128 does
	// not keep a stack address valid the way go:uintptrescapes does.
	comm := new(uintptr)
	*comm = 0xdead
	r := abi.Result(int32(ccall.CallStruct128(realFn(t, l, "ncclCommInitRank"), 2, &id.Internal,
		uintptr(unsafe.Pointer(comm)), 1, 0)))
	runtime.KeepAlive(comm)
	if r != abi.UnhandledCudaError {
		t.Errorf("ncclCommInitRank = %v, want ncclUnhandledCudaError", r)
	}
	if got := l.LastError(); got != realCudaFailure {
		t.Errorf("LastError after ncclCommInitRank = %q, want %q", got, realCudaFailure)
	}
	if *comm != 0xdead {
		t.Errorf("ncclCommInitRank wrote communicator %#x on failure", *comm)
	}

	provokeOtherLastError(t, l)
	comms, err := l.InitAll(context.Background(), []int{0}, nil)
	var ne *nccl.Error
	if comms != nil || !errors.As(err, &ne) || !errors.Is(err, nccl.ErrUnhandledCuda) || ne.Op != "ncclCommInitAll" ||
		ne.Code != abi.UnhandledCudaError || ne.Msg != realCudaFailure {
		t.Errorf("InitAll = %v, %#v; want InitAll: ncclCommInitAll: ncclUnhandledCudaError: %s", comms, err, realCudaFailure)
	}
	if got := l.LastError(); got != realCudaFailure {
		t.Errorf("LastError after InitAll = %q, want %q", got, realCudaFailure)
	}
	want := "InitAll: ncclCommInitAll: ncclUnhandledCudaError: " + realCudaFailure // the Go method, then the C function
	if err == nil || err.Error() != want {
		t.Errorf("InitAll error text %q, want %q", err, want)
	}
}

// provokeOtherLastError leaves NCCL's last-error buffer holding a text other
// than the CUDA failure: that of a malformed NCCL_COMM_ID.
func provokeOtherLastError(t *testing.T, l *nccl.Library) {
	t.Helper()
	t.Setenv("NCCL_COMM_ID", "no-port-here")
	defer os.Unsetenv("NCCL_COMM_ID")
	if _, err := l.GetUniqueID(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Fatalf("GetUniqueID with a bad NCCL_COMM_ID = %v, want ErrInvalidArgument", err)
	}
	if got := l.LastError(); !strings.HasPrefix(got, "Invalid NCCL_COMM_ID") {
		t.Fatalf("LastError = %q, want NCCL's words on NCCL_COMM_ID", got)
	}
}

// TestRealNCCLGroup: an empty group starts and ends cleanly on the real library.
func TestRealNCCLGroup(t *testing.T) {
	l := openRealNoGPU(t)
	calls := 0
	if err := l.Group(func() error {
		calls++
		return l.Group(func() error { calls++; return nil })
	}); err != nil || calls != 2 {
		t.Errorf("nested empty groups: %v after %d calls, want nil after 2", err, calls)
	}
	// A failed group reaches NCCL not at all (see Group): NCCL's last error
	// is still the one provoked before it.
	provokeOtherLastError(t, l)
	sentinel := errors.New("stop")
	if err := l.Group(func() error { return sentinel }); err != sentinel {
		t.Errorf("Group returned %v, want the function's error unchanged", err)
	}
	if msg := l.LastError(); !strings.HasPrefix(msg, "Invalid NCCL_COMM_ID") {
		t.Errorf("after a failed group NCCL's last error is %q: the group reached NCCL", msg)
	}
	// A panicking group leaves the thread out of any group: the next groups
	// start and end cleanly on the same thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	func() {
		defer func() { recover() }()
		l.Group(func() error { panic("boom") })
	}()
	for i := range 3 {
		if err := l.Group(func() error { return nil }); err != nil {
			t.Errorf("group %d after the panic: %v", i, err)
		}
	}
}
