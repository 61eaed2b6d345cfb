// Package dl calls the dynamic loader (dlopen, dlsym, dlinfo) through
// gonccl's own call path, and finds the file a loaded library came from. Its
// errors are plain; the root package wraps them in its own types.
//
// purego's Dlopen and Dlsym go through reflection, which costs more than the
// loader's own work; they serve only where the libc lacks a function, and
// /proc/self/maps where it lacks dlinfo.
package dl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl/internal/ccall"
)

// dlopen modes (glibc's values).
const (
	Lazy   = 0x1   // RTLD_LAZY
	Now    = 0x2   // RTLD_NOW
	NoLoad = 0x4   // RTLD_NOLOAD: only a library already mapped
	Global = 0x100 // RTLD_GLOBAL
)

type funcs struct{ open, sym, info, errstr uintptr }

// libdl is the loader's functions; a zero address is one the libc lacks.
var libdl = sync.OnceValue(func() funcs {
	addr := func(name string) uintptr {
		p, _ := purego.Dlsym(purego.RTLD_DEFAULT, name)
		return p
	}
	return funcs{open: addr("dlopen"), sym: addr("dlsym"), info: addr("dlinfo"), errstr: addr("dlerror")}
})

// Open is dlopen(path, mode); the error is dlerror's words. dlerror's state
// is per thread, so the thread is locked around both calls. A path holding a
// NUL byte is refused.
func Open(path string, mode int) (uintptr, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return 0, errors.New("the path holds a NUL byte")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := libdl()
	if d.open == 0 || d.errstr == 0 {
		return purego.Dlopen(path, mode)
	}
	b := append([]byte(path), 0)
	if h := ccall.CallPtr(d.open, uintptr(unsafe.Pointer(&b[0])), uintptr(mode)); h != 0 {
		return h, nil
	}
	return 0, errors.New(ccall.GoString(ccall.Call(d.errstr)))
}

// Sym is dlsym(h, name), 0 for a missing symbol; name is NUL-terminated and
// must stay in place during the call.
func Sym(h uintptr, name *byte) uintptr {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return SymLocked(h, name)
}

// SymLocked is Sym for a caller that holds its OS thread (dlsym's error state
// is per thread: one lock serves a whole table of lookups).
func SymLocked(h uintptr, name *byte) uintptr {
	fn := libdl().sym
	if fn == 0 {
		p, err := purego.Dlsym(h, ccall.GoString(uintptr(unsafe.Pointer(name))))
		if err != nil {
			return 0
		}
		return p
	}
	return ccall.Call(fn, h, uintptr(unsafe.Pointer(name)))
}

// mappedPaths remembers MappedPath's answers by handle. gonccl never closes a
// library, so a handle names the same mapped file for the life of the process:
// the answer cannot change, and a second Open of a file looks at neither the
// link map nor the disk again.
var mappedPaths struct {
	sync.Mutex
	m map[uintptr]string
}

// MappedPath finds the file that backs the library behind handle h: the name
// the dynamic loader recorded for it (dlinfo's link map), with symbolic links
// resolved; where dlinfo is unavailable, the mapping of /proc/self/maps that
// holds the first of the symbols probes that h has, which the kernel names
// after every link.
func MappedPath(h uintptr, probes ...*byte) (string, error) {
	mappedPaths.Lock()
	defer mappedPaths.Unlock()
	if p, ok := mappedPaths.m[h]; ok {
		return p, nil
	}
	p, err := findMappedPath(h, probes)
	if err != nil {
		return "", err
	}
	if mappedPaths.m == nil {
		mappedPaths.m = make(map[uintptr]string)
	}
	mappedPaths.m[h] = p
	return p, nil
}

func findMappedPath(h uintptr, probes []*byte) (string, error) {
	if p := linkMapName(h); filepath.IsAbs(p) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real, nil
		}
	}
	var addr uintptr
	for _, s := range probes {
		if addr = Sym(h, s); addr != 0 {
			break
		}
	}
	if addr == 0 {
		return "", errors.New("no known symbol to locate the library")
	}
	return mappingOf(addr)
}

// rtldDILinkmap is glibc's RTLD_DI_LINKMAP request to dlinfo.
const rtldDILinkmap = 2

// linkMapName is l_name of the loader's struct link_map for handle h (the
// second pointer of the struct), or "".
func linkMapName(h uintptr) string {
	fn := libdl().info
	if fn == 0 {
		return ""
	}
	var lm *[2]uintptr
	if r := ccall.CallPtr(fn, h, rtldDILinkmap, uintptr(unsafe.Pointer(&lm))); int32(r) != 0 || lm == nil {
		return ""
	}
	return ccall.GoString(lm[1])
}

// mappingOf names the file mapped at addr, from /proc/self/maps.
func mappingOf(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 7f12c0000000-7f12c0021000 r-xp 00000000 08:01 1234   /usr/lib/libnccl.so.2.28.3
		line := sc.Bytes()
		dash := bytes.IndexByte(line, '-')
		sp := bytes.IndexByte(line, ' ')
		if dash < 0 || sp < dash {
			continue
		}
		l, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
		u, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
		if err1 != nil || err2 != nil || uint64(addr) < l || uint64(addr) >= u {
			continue
		}
		if slash := bytes.IndexByte(line, '/'); slash >= 0 {
			return string(line[slash:]), nil
		}
		return "", fmt.Errorf("address %#x is in an anonymous mapping", addr)
	}
	return "", fmt.Errorf("address %#x not in /proc/self/maps", addr)
}

// Close is dlclose(h), forgetting what MappedPath knew of h: the loader may
// reuse the handle for another library.
func Close(h uintptr) {
	mappedPaths.Lock()
	delete(mappedPaths.m, h)
	mappedPaths.Unlock()
	purego.Dlclose(h)
}
