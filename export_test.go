package nccl

import "github.com/gonccl/nccl/internal/fakes"

// What the external test package (nccl_test) reaches inside package nccl.

// FakeDir, FakeNCCL and FakeCUDART give the fake libraries (package nccltest)
// to this package's tests, external ones included.
var (
	FakeDir    = fakes.Dir
	FakeNCCL   = fakes.NCCL
	FakeCUDART = fakes.CUDART
)

// Children lets the external test package add child processes (see
// TestMain); fakes.RunChild runs one.
var Children = children
