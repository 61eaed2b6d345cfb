package nccl

import (
	"runtime"
	"unsafe"

	"github.com/gonccl/nccl/abi"
)

// configBuffer holds an encoded ncclConfig_t and its strings in pinned Go memory.
type configBuffer struct {
	pin  runtime.Pinner
	mem  []byte
	strs [][]byte
}

// encodeConfig lays cfg out for library version v; nil gives a NULL config.
func encodeConfig(op string, cfg *Config, v abi.Version) (*configBuffer, uintptr, error) {
	if cfg == nil {
		return nil, 0, nil
	}
	b := &configBuffer{mem: make([]byte, 256)}
	b.pin.Pin(&b.mem[0])
	cstr := func(s string) uintptr {
		z := append([]byte(s), 0)
		b.strs = append(b.strs, z)
		b.pin.Pin(&z[0])
		return uintptr(unsafe.Pointer(&z[0]))
	}
	if _, err := abi.EncodeConfig(b.mem, cfg, v, cstr); err != nil {
		b.free()
		return nil, 0, &Error{Op: op, Code: abi.InvalidArgument, Msg: err.Error()}
	}
	return b, uintptr(unsafe.Pointer(&b.mem[0])), nil
}

func (b *configBuffer) free() {
	if b != nil {
		b.pin.Unpin()
	}
}
