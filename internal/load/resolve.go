package load

import (
	"runtime"

	"github.com/gonccl/nccl/internal/capi"
	"github.com/gonccl/nccl/internal/dl"
)

// Resolve fills fn from table's rows, keeping rows already filled. Rows for
// which required reports true must resolve; the first missing one is
// returned as a *MissingSymbolError naming path.
func Resolve(h uintptr, path string, table []capi.Symbol, fn []uintptr, required func(*capi.Symbol) bool) error {
	// dlsym's error state is per thread: one lock for the whole table.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range table {
		s := &table[i]
		if fn[i] != 0 {
			continue
		}
		p := dl.SymLocked(h, s.CName)
		if p == 0 && s.CAlt != nil {
			p = dl.SymLocked(h, s.CAlt)
		}
		fn[i] = p
		if p == 0 && required(s) {
			return &MissingSymbolError{Symbol: s.Name, Path: path}
		}
	}
	return nil
}

// Sym is the address of the function name (NUL-terminated) in h, 0 if
// missing.
func Sym(h uintptr, name *byte) uintptr { return dl.Sym(h, name) }
