package nccl

import (
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
	"github.com/gonccl/nccl/internal/load"
)

// Where gonccl looks for libnccl and libcudart: the two search Specs that
// internal/load follows (the order is documented in docs/loading.md and
// tested in loader_test.go), and the check NCCL's candidates pass.
//
// Every candidate file is checked before anything opens it for the loader: a
// FIFO or a device would block dlopen's open(2) forever, so only regular files
// are opened, and the ELF headers of a file must describe no more than the
// file holds, or dlopen's mapping of it kills the process with SIGBUS
// (internal/load).

// How a library was found: the values of LibraryFile.Via and Attempt.Via.
const (
	ViaOption        = load.ViaOption
	ViaAlreadyLoaded = load.ViaAlreadyLoaded
	ViaSystemLoader  = load.ViaSystemLoader
)

// LibraryFile says which shared library was loaded and how it was found:
// Path, the absolute path of the file really mapped, with symbolic links
// resolved; Via, the source that found it ("option", an environment variable
// such as "GONCCL_NCCL_LIB" or "NCCL_HOME", "already loaded" or "system
// loader"); Trace, every candidate tried, in order, the last one being the
// file loaded (its Err is nil).
type LibraryFile = load.File

// Attempt is one candidate of the search: the source that proposed it, the
// file (or a bare soname handed to the system loader), and why it was not
// used (nil for the file loaded).
type Attempt = load.Attempt

var ncclSpec = load.Spec{
	Name:     "libnccl",
	Sonames:  []string{"libnccl.so.2", "libnccl.so"},
	Override: "GONCCL_NCCL_LIB",
	Dirs: []load.Home{
		{Env: "NUMBA_NCCLLIB", Subs: []string{"."}, Strict: true},
		{Env: "NCCL_HOME", Subs: []string{"lib", "lib64"}},
		{Env: "VIRTUAL_ENV", Subs: []string{"lib/python3*/site-packages/nvidia/nccl/lib"}},
		{Env: "CONDA_PREFIX", Subs: []string{"lib"}},
	},
	Hint:   "set GONCCL_NCCL_LIB to libnccl.so.2 or its folder (NCCL_HOME, NUMBA_NCCLLIB and an active virtualenv with nvidia-nccl-cu12/cu13 work too)",
	Accept: checkNCCLVersion,
}

var cudartSpec = load.Spec{
	Name:     "libcudart",
	Sonames:  []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
	Override: "GONCCL_CUDART_LIB",
	Dirs: []load.Home{
		{Env: "VIRTUAL_ENV", Subs: []string{"lib/python3*/site-packages/nvidia/cu13/lib", "lib/python3*/site-packages/nvidia/cuda_runtime/lib"}},
		{Env: "CONDA_PREFIX", Subs: []string{"lib"}},
	},
	After: []load.Home{
		{Env: "CUDA_HOME", Subs: []string{"lib64", "lib"}},
		{Env: "CUDA_PATH", Subs: []string{"lib64", "lib"}},
	},
	Hint: "set GONCCL_CUDART_LIB to libcudart.so.* or its folder (CUDA_HOME and an active virtualenv with nvidia-cuda-runtime work too)",
}

// checkNCCLVersion refuses a library whose ncclGetVersion fails or answers a
// code no NCCL release reports, naming the file, and returns the code: Open
// reads the version once, here. A library without the function passes with
// code 0: Open reports the missing symbol.
func checkNCCLVersion(h uintptr, path string) (int32, error) {
	fn := load.Sym(h, capi.NCCLSymbols[capi.FnGetVersion].CName)
	if fn == 0 {
		return 0, nil
	}
	var code int32
	if r := capi.GetVersion(fn, &code); r != abi.Success {
		return 0, &FileError{Path: path, Err: &Error{Op: "ncclGetVersion", Code: r}}
	}
	if !plausibleVersion(code) {
		return 0, &VersionError{Path: path, Code: code}
	}
	return code, nil
}

// plausibleVersion: a positive code that abi.DecodeVersion reads as NCCL 2.x
// or 3.x (X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z from 2.9).
func plausibleVersion(code int32) bool {
	if code <= 0 {
		return false
	}
	major := abi.DecodeVersion(int(code)).Major
	return major == 2 || major == 3
}
