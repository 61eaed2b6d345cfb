package nccl

import (
	"fmt"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// The symbol tables (internal/capi) drive loading (required rows must
// resolve, optional ones are probed), feature queries (Library.Has,
// Library.Features) and the "not supported ... requires >= x" errors.

// MinVersion is the oldest NCCL gonccl loads: the first with ncclConfig_t,
// ncclCommFinalize and non-blocking communicators.
var MinVersion = abi.V(2, 14, 0)

// Feature is one optional NCCL function and whether the loaded library has it.
type Feature struct {
	Name    string      // C name, e.g. "ncclCommSplit"
	Since   abi.Version // the NCCL release that added it (zero for a fork's extension)
	Vendor  string      // "VCCL" for a fork's extension
	Present bool
}

func (f Feature) String() string {
	mark := "-"
	if f.Present {
		mark = "+"
	}
	if f.Vendor != "" {
		return fmt.Sprintf("%s%s (%s)", mark, f.Name, f.Vendor)
	}
	return fmt.Sprintf("%s%s (%s)", mark, f.Name, f.Since)
}

// Symbols lists every C function gonccl resolves when it opens the libraries:
// NCCL's, then the CUDA runtime's.
func Symbols() []string { return capi.Names() }
