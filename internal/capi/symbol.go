// Package capi is gonccl's floor above C: the tables of the C functions it
// calls in NCCL and the CUDA runtime, and one typed Go function per C
// function, its prototype from nccl.h or cuda_runtime_api.h above it.
//
// Nothing here knows a communicator or builds an API error: a call's failure
// goes to the Failures its table was given, and a stream operation is only
// described (Op), for the package above to admit, record or launch. Adding
// an NCCL function is one row in NCCLSymbols, one prototype in nccl.go (or
// an Op constructor in ops.go), then its method above.
package capi

import "github.com/gonccl/nccl/abi"

// Symbol describes one C function.
type Symbol struct {
	Name   string      // C name
	Alt    string      // another exported name for the same function, tried second
	Since  abi.Version // the release that added it
	Vendor string      // non-empty for a fork's extension ("VCCL"); never required

	// CName and CAlt are Name and Alt as C strings, made once per process
	// (init) so that resolving a table builds no string.
	CName, CAlt *byte
}

// Required reports whether loading fails without the function: every
// release from min on has it.
func (s *Symbol) Required(min abi.Version) bool {
	return s.Vendor == "" && min.AtLeast(s.Since)
}

// Requirement says what a library needs to have the function.
func (s *Symbol) Requirement() string {
	if s.Vendor != "" {
		return "requires " + s.Vendor
	}
	return "requires >= " + s.Since.String()
}

func init() {
	for _, t := range [][]Symbol{NCCLSymbols[:], CUDASymbols[:]} {
		for i := range t {
			t[i].CName = cString(t[i].Name)
			if t[i].Alt != "" {
				t[i].CAlt = cString(t[i].Alt)
			}
		}
	}
}

// cString is s with a NUL byte appended. What it returns is kept by a package
// variable or used within one call: Go's heap does not move it.
func cString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// Names lists every C function of both tables: NCCL's, then the CUDA
// runtime's.
func Names() []string {
	var out []string
	for _, t := range [][]Symbol{NCCLSymbols[:], CUDASymbols[:]} {
		for _, s := range t {
			out = append(out, s.Name)
		}
	}
	return out
}

// Failures turns a call's outcome into the error its caller returns; the
// package above gives one to each table.
type Failures interface {
	// Result is C's result r of function sym, other than success.
	Result(sym int, r int32) error
	// Missing is a call of function sym, which the library lacks.
	Missing(sym int) error
	// Guard is a failure r of the thread-device guard's own CUDA call
	// (cudaGetDevice or cudaSetDevice; see ThreadDevice).
	Guard(r int32) error
}
