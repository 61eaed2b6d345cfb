package nccl

import (
	"runtime"
	"unsafe"

	"github.com/gonccl/nccl/internal/capi"
	"github.com/gonccl/nccl/internal/ccall"
)

// NCCL's parameters (NCCL_* settings) as the loaded library sees them
// (NCCL >= 2.30.4). 2.30.4 declares ncclParamHandle_t as a struct and passes
// ncclParamHandle_t*; 2.30.7 makes ncclParamHandle_t the pointer. Both pass
// one pointer, so one binding serves both.

// ParamHandle is a parameter bound with Library.BindParam (ncclParamHandle_t):
// read it with ParamValue or Str.
type ParamHandle struct {
	lib *Library
	h   uintptr
	key string
}

// ParamInt is the Go types of NCCL's integer parameters.
type ParamInt interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64
}

// BindParam looks up the parameter key ("NCCL_DEBUG_SUBSYS") (ncclParamBind).
// NCCL 2.30 registers only the parameters of its new parameter system (the
// debug settings and NCCL_SET_THREAD_NAME in 2.30.7); the older NCCL_*
// settings (NCCL_BUFFSIZE, NCCL_NVLS_ENABLE, ...) are not found.
// An unknown key is an error matching ErrInvalidArgument.
func (l *Library) BindParam(key string) (ParamHandle, error) {
	if l == nil {
		return ParamHandle{}, nilLibrary("BindParam")
	}
	if l.nc.Fn[capi.FnParamBind] == 0 {
		return ParamHandle{}, l.unsupported(capi.FnParamBind)
	}
	k := append([]byte(key), 0)
	h := new(uintptr)
	if err := l.nc.ParamBind(h, &k[0]); err != nil {
		return ParamHandle{}, err
	}
	return ParamHandle{lib: l, h: *h, key: key}, nil
}

// Key is the parameter's name.
func (p ParamHandle) Key() string { return p.key }

// ParamValue reads an integer parameter as T (ncclParamGetI8 ... GetU64). T
// must be the parameter's own type: another is an error matching
// ErrInvalidArgument.
func ParamValue[T ParamInt](p ParamHandle) (T, error) {
	var sym int
	var v T
	switch any(v).(type) {
	case int8:
		sym = capi.FnParamGetI8
	case int16:
		sym = capi.FnParamGetI16
	case int32:
		sym = capi.FnParamGetI32
	case int64:
		sym = capi.FnParamGetI64
	case uint8:
		sym = capi.FnParamGetU8
	case uint16:
		sym = capi.FnParamGetU16
	case uint32:
		sym = capi.FnParamGetU32
	default:
		sym = capi.FnParamGetU64
	}
	if p.lib == nil {
		return v, argError(capi.NCCLSymbols[sym].Name, "unbound parameter")
	}
	out := new(T)
	err := p.lib.nc.ParamGetInt(sym, p.h, unsafe.Pointer(out))
	return *out, err
}

// Str reads a string parameter (ncclParamGetStr).
func (p ParamHandle) Str() (string, error) {
	const op = "ncclParamGetStr"
	if p.lib == nil {
		return "", argError(op, "unbound parameter")
	}
	if p.lib.nc.Fn[capi.FnParamGetStr] == 0 {
		return "", p.lib.unsupported(capi.FnParamGetStr)
	}
	// The string lives in a per-thread buffer until the thread's next call.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := new(uintptr)
	if err := p.lib.nc.ParamGetStr(p.h, s); err != nil {
		return "", err
	}
	return ccall.GoString(*s), nil
}

// Param is the value of any parameter as text (ncclParamGetParameter).
func (l *Library) Param(key string) (string, error) {
	if l == nil {
		return "", nilLibrary("Param")
	}
	if l.nc.Fn[capi.FnParamGetParameter] == 0 {
		return "", l.unsupported(capi.FnParamGetParameter)
	}
	k := append([]byte(key), 0)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	v := new(uintptr)
	n := new(int32)
	if err := l.nc.ParamGetParameter(&k[0], v, n); err != nil {
		return "", err
	}
	return ccall.GoString(*v), nil
}

// ParamKeys lists the parameters NCCL documents (all of them with
// NCCL_PARAM_DUMP_ALL=true) (ncclParamGetAllParameterKeys).
func (l *Library) ParamKeys() ([]string, error) {
	if l == nil {
		return nil, nilLibrary("ParamKeys")
	}
	if l.nc.Fn[capi.FnParamGetAllParameterKeys] == 0 {
		return nil, l.unsupported(capi.FnParamGetAllParameterKeys)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	table := new(uintptr)
	n := new(int32)
	if err := l.nc.ParamGetAllParameterKeys(table, n); err != nil {
		return nil, err
	}
	if *table == 0 || *n <= 0 {
		return nil, nil
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(table)) // C memory: the GC does not move it
	keys := make([]string, *n)
	for i, p := range unsafe.Slice((*uintptr)(ptr), *n) {
		keys[i] = ccall.GoString(p)
	}
	return keys, nil
}
