package nccl_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// Tests against NVIDIA's own libnccl with no GPU, run by scripts/test-real-nccl.sh
// (Debian 13's NCCL 2.22.3 through its own loader). Skipped otherwise.

func openRealNoGPU(t *testing.T) *nccl.Library {
	t.Helper()
	if os.Getenv("GONCCL_REAL_NCCL") != "1" {
		t.Skip("set by scripts/test-real-nccl.sh")
	}
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRealNCCLLoads(t *testing.T) {
	l := openRealNoGPU(t)
	if l.Via != "GONCCL_NCCL_LIB" || !strings.HasSuffix(l.Path, "libnccl.so.2.22.3") {
		t.Errorf("loaded %s via %s", l.Path, l.Via)
	}
	if l.Version() != abi.V(2, 22, 3) {
		t.Errorf("version %v, want 2.22.3", l.Version())
	}
	for name, want := range map[string]bool{"ncclCommSplit": true, "ncclCommRegister": true, "ncclMemAlloc": true,
		"ncclAlltoAll": false, "ncclGather": false, "ncclScatter": false, "ncclAlltoAllv": false,
		"ncclCommWindowRegister": false, "ncclCommInitRankScalable": false} {
		if l.Has(name) != want {
			t.Errorf("Has(%s) = %v, want %v", name, l.Has(name), want)
		}
	}
	if !l.SupportsType(abi.Bfloat16) || l.SupportsType(abi.Float8e4m3) {
		t.Error("2.22 supports bfloat16 and not fp8")
	}
}

func TestRealNCCLUniqueID(t *testing.T) {
	l := openRealNoGPU(t)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if id == (nccl.UniqueID{}) {
		t.Fatal("all-zero id")
	}
	back, err := nccl.ParseUniqueID(id.String())
	if err != nil || back != id {
		t.Fatalf("text round trip: %v", err)
	}
}

func TestRealNCCLErrorStrings(t *testing.T) {
	l := openRealNoGPU(t)
	for r, want := range map[abi.Result]string{
		abi.Success:            "no error",
		abi.UnhandledCudaError: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
		abi.InvalidArgument:    "invalid argument (run with NCCL_DEBUG=WARN for details)",
		abi.InvalidUsage:       "invalid usage (run with NCCL_DEBUG=WARN for details)",
	} {
		if got := l.ErrorString(r); got != want {
			t.Errorf("ErrorString(%v) = %q, want %q", r, got, want)
		}
	}
}

// TestRealNCCLNoGPU: the runtime reports the missing driver as a typed error,
// and creating a communicator fails with it before NCCL is reached; NCCL's
// own initialisation without a GPU fails with an unhandled CUDA error and its
// last-error text (InitAll calls it without gonccl selecting a device).
func TestRealNCCLNoGPU(t *testing.T) {
	l := openRealNoGPU(t)
	_, err := l.CUDA().DeviceCount()
	var ce *nccl.CUDAError
	if !errors.Is(err, nccl.ErrNoDevice) || !errors.As(err, &ce) || ce.Code != abi.CudaErrorInsufficientDriver {
		t.Fatalf("DeviceCount = %v", err)
	}
	id, _ := l.GetUniqueID()
	if _, err := l.InitRank(0, id, 1, 0); !errors.Is(err, nccl.ErrNoDevice) {
		t.Errorf("InitRank = %v, want ErrNoDevice from the runtime", err)
	}
	_, err = l.InitAll([]int{0})
	var ne *nccl.Error
	if !errors.Is(err, nccl.ErrUnhandledCuda) || !errors.As(err, &ne) || ne.Op != "ncclCommInitAll" {
		t.Fatalf("InitAll = %v, want ncclUnhandledCudaError", err)
	}
	if !strings.Contains(ne.Msg, "Cuda failure") || !strings.Contains(l.LastError(), "Cuda failure") {
		t.Errorf("last error %q lacks NCCL's CUDA failure text", ne.Msg)
	}
}
