package nccl

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gonccl/nccl/abi"
)

// configBuffer holds an encoded ncclConfig_t and its strings in memory of its
// own (an anonymous mapping, outside Go's heap): NCCL may read the config for
// the communicator's life, and memory the garbage collector never sees needs
// no pinning, so a communicator that is dropped unclosed leaks a page instead
// of tripping the runtime's check for leaked pins.
type configBuffer struct {
	mem []byte // the mapping: the config at 0, the strings after configSpace
}

const configSpace = 256 // more than any ncclConfig_t (96 bytes in 2.30)

// encodeConfig lays cfg out for library version v; nil gives a NULL config.
func encodeConfig(op string, cfg *Config, v abi.Version) (*configBuffer, uintptr, error) {
	if cfg == nil {
		return nil, 0, nil
	}
	// First pass: the room the strings need.
	need := configSpace
	if _, err := abi.EncodeConfig(make([]byte, configSpace), cfg, v, func(s string) uintptr {
		need += len(s) + 1
		return 0
	}); err != nil {
		return nil, 0, &Error{Op: op, Code: abi.InvalidArgument, Msg: err.Error()}
	}
	mem, err := unix.Mmap(-1, 0, need, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, 0, &Error{Op: op, Code: abi.SystemError, Msg: "config memory: " + err.Error()}
	}
	b := &configBuffer{mem: mem}
	next := configSpace
	cstr := func(s string) uintptr {
		p := uintptr(unsafe.Pointer(&mem[next]))
		next += copy(mem[next:], s) + 1 // the mapping is zeroed: the NUL is there
		return p
	}
	if _, err := abi.EncodeConfig(mem[:configSpace], cfg, v, cstr); err != nil {
		b.free()
		return nil, 0, &Error{Op: op, Code: abi.InvalidArgument, Msg: err.Error()}
	}
	return b, uintptr(unsafe.Pointer(&mem[0])), nil
}

func (b *configBuffer) free() {
	if b != nil && b.mem != nil {
		unix.Munmap(b.mem)
		b.mem = nil
	}
}
