package nccl

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl/internal/ccall"
	"golang.org/x/sys/unix"
)

// This file finds and opens shared libraries: one search routine serves libnccl
// and libcudart, each described by a libSpec. The order is documented in the
// README ("Where gonccl looks") and tested in loader_test.go.

// How a library was found: the values of LibraryFile.Via and Attempt.Via.
const (
	ViaOption        = "option"
	ViaAlreadyLoaded = "already loaded"
	ViaSystemLoader  = "system loader"
)

// rtldNoload is glibc's RTLD_NOLOAD: open only if already mapped.
const rtldNoload = 0x4

// LibraryFile says which shared library was loaded and how it was found.
type LibraryFile struct {
	// Path is the absolute path of the file really mapped into the process, with
	// symbolic links resolved.
	Path string
	// Via names the source that found it: "option", an environment variable such
	// as "GONCCL_NCCL_LIB" or "NCCL_HOME", "already loaded" or "system loader".
	Via string
	// Trace lists every candidate tried, in order, the last one being the file
	// loaded (its Err is nil).
	Trace []Attempt

	handle uintptr
}

// Attempt is one candidate of the search.
type Attempt struct {
	Via  string // the source that proposed it
	Path string // a file, or a bare soname handed to the system loader
	Err  error  // why it was not used; nil for the file loaded
}

func (a Attempt) String() string {
	if a.Err == nil {
		return fmt.Sprintf("%s: %s: loaded", a.Via, a.Path)
	}
	return fmt.Sprintf("%s: %s: %v", a.Via, a.Path, a.Err)
}

// LoadError reports a library that could not be loaded, with the whole search.
type LoadError struct {
	Library string    // "libnccl" or "libcudart"
	Trace   []Attempt // every candidate tried
	Err     error     // the reason: a *dlopen* failure, ErrNotFound, ErrNotELF, ...
	Hint    string    // what to set or install
}

func (e *LoadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gonccl: cannot load %s: %v", e.Library, e.Err)
	for _, a := range e.Trace {
		b.WriteString("\n  tried ")
		b.WriteString(a.String())
	}
	if e.Hint != "" {
		b.WriteString("\n  ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

func (e *LoadError) Unwrap() error { return e.Err }

// Errors of the search. A *LoadError wraps one of them; each Attempt's Err may too.
var (
	ErrNotFound  = errors.New("not found")
	ErrNotELF    = errors.New("not an ELF shared library")
	ErrWrongArch = errors.New("ELF file for another architecture")
	ErrDlopen    = errors.New("dlopen failed")
)

// libSpec describes one library to search for.
type libSpec struct {
	name     string   // "libnccl"
	sonames  []string // tried in order in every directory, then by the system loader
	override string   // GONCCL_..._LIB: a file or a directory; set but unresolved is an error
	// dirs lists the conventional homes, in order, after the override.
	dirs []homeDir
	// after lists homes tried after the system loader.
	after []homeDir
	hint  string
}

// homeDir is a conventional place: an environment variable and the folders below it.
type homeDir struct {
	env  string
	subs []string // relative to the variable's value; may hold one "*" glob level
	// strict: a set variable that yields nothing is an error (pynccl's NUMBA_NCCLLIB).
	strict bool
}

var ncclSpec = libSpec{
	name:     "libnccl",
	sonames:  []string{"libnccl.so.2", "libnccl.so"},
	override: "GONCCL_NCCL_LIB",
	dirs: []homeDir{
		{env: "NUMBA_NCCLLIB", subs: []string{"."}, strict: true},
		{env: "NCCL_HOME", subs: []string{"lib", "lib64"}},
		{env: "VIRTUAL_ENV", subs: []string{"lib/python3*/site-packages/nvidia/nccl/lib"}},
		{env: "CONDA_PREFIX", subs: []string{"lib"}},
	},
	hint: "set GONCCL_NCCL_LIB to libnccl.so.2 or its folder (NCCL_HOME, NUMBA_NCCLLIB and an active virtualenv with nvidia-nccl-cu12/cu13 work too)",
}

var cudartSpec = libSpec{
	name:     "libcudart",
	sonames:  []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
	override: "GONCCL_CUDART_LIB",
	dirs: []homeDir{
		{env: "VIRTUAL_ENV", subs: []string{"lib/python3*/site-packages/nvidia/cu13/lib", "lib/python3*/site-packages/nvidia/cuda_runtime/lib"}},
		{env: "CONDA_PREFIX", subs: []string{"lib"}},
	},
	after: []homeDir{
		{env: "CUDA_HOME", subs: []string{"lib64", "lib"}},
		{env: "CUDA_PATH", subs: []string{"lib64", "lib"}},
	},
	hint: "set GONCCL_CUDART_LIB to libcudart.so.* or its folder (CUDA_HOME and an active virtualenv with nvidia-cuda-runtime work too)",
}

// search finds and opens a library: the explicit option (file or folder), the
// override variable, the conventional homes, a copy already loaded, the system
// loader, then the late homes. The option and the override never fall through:
// if they are given and do not load, that is the answer.
func search(spec libSpec, explicit string, getenv func(string) string) (LibraryFile, error) {
	var trace []Attempt
	fail := func(err error) (LibraryFile, error) {
		return LibraryFile{}, &LoadError{Library: spec.name, Trace: trace, Err: err, Hint: spec.hint}
	}
	// tryAll tries the candidates of one source; it returns the first that loads.
	tryAll := func(via string, paths []string) (LibraryFile, bool) {
		for _, p := range paths {
			h, err := openFile(p)
			trace = append(trace, Attempt{Via: via, Path: p, Err: err})
			if err == nil {
				return finish(spec, via, p, h, trace), true
			}
		}
		return LibraryFile{}, false
	}

	via, val := ViaOption, explicit
	if val == "" {
		via, val = spec.override, getenv(spec.override)
	}
	if val != "" {
		// A file the process has mapped already (the warm case: a second Open)
		// needs no look at the disk.
		if h := loaded(val); h != 0 {
			trace = append(trace, Attempt{Via: via, Path: val})
			return finish(spec, via, val, h, trace), nil
		}
		paths, err := candidates(spec, val)
		if err != nil {
			trace = append(trace, Attempt{Via: via, Path: val, Err: err})
			return fail(fmt.Errorf("%s=%s: %w", via, val, err))
		}
		if f, ok := tryAll(via, paths); ok {
			return f, nil
		}
		return fail(fmt.Errorf("%s=%s: %w", via, val, trace[len(trace)-1].Err))
	}

	homes := func(list []homeDir) (LibraryFile, bool, error) {
		for _, h := range list {
			val := getenv(h.env)
			if val == "" {
				continue
			}
			paths := homePaths(spec, h, val)
			if len(paths) == 0 {
				trace = append(trace, Attempt{Via: h.env, Path: val, Err: fmt.Errorf("no %s there: %w", strings.Join(spec.sonames, ", "), ErrNotFound)})
				if h.strict {
					return LibraryFile{}, false, fmt.Errorf("%s=%s: %w", h.env, val, ErrNotFound)
				}
				continue
			}
			n := len(trace)
			if f, ok := tryAll(h.env, paths); ok {
				return f, true, nil
			}
			if h.strict {
				return LibraryFile{}, false, fmt.Errorf("%s=%s: %w", h.env, val, trace[n].Err)
			}
		}
		return LibraryFile{}, false, nil
	}
	if f, ok, err := homes(spec.dirs); err != nil {
		return fail(err)
	} else if ok {
		return f, nil
	}

	for _, via := range []string{ViaAlreadyLoaded, ViaSystemLoader} {
		mode := purego.RTLD_NOW | purego.RTLD_GLOBAL
		if via == ViaAlreadyLoaded {
			mode |= rtldNoload
		}
		for _, so := range spec.sonames {
			h, err := dlopen(so, mode)
			if err != nil && via == ViaAlreadyLoaded {
				err = errors.New("not loaded")
			}
			trace = append(trace, Attempt{Via: via, Path: so, Err: err})
			if err == nil {
				return finish(spec, via, so, h, trace), nil
			}
		}
	}

	if f, ok, err := homes(spec.after); err != nil {
		return fail(err)
	} else if ok {
		return f, nil
	}
	return fail(fmt.Errorf("no %s in any place searched: %w", strings.Join(spec.sonames, " or "), ErrNotFound))
}

// finish fills in the mapped path of a loaded library.
func finish(spec libSpec, via, tried string, h uintptr, trace []Attempt) LibraryFile {
	path, err := mappedPath(h)
	if err != nil {
		// The library is loaded; say what was asked for rather than fail.
		path = tried
	}
	return LibraryFile{Path: path, Via: via, Trace: trace, handle: h}
}

// candidates expands an explicit value: a file is itself; a folder yields the
// sonames present in it. Relative paths are made absolute against nothing: they
// are refused, so the working directory is never searched implicitly.
func candidates(spec libSpec, val string) ([]string, error) {
	if !filepath.IsAbs(val) {
		return nil, fmt.Errorf("%q is not an absolute path", val)
	}
	st, err := os.Stat(val)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no such file or directory: %w", ErrNotFound)
		}
		return nil, err
	}
	if !st.IsDir() {
		return []string{val}, nil
	}
	var out []string
	for _, so := range spec.sonames {
		if p := filepath.Join(val, so); isFile(p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("folder has no %s: %w", strings.Join(spec.sonames, ", "), ErrNotFound)
	}
	return out, nil
}

// homePaths lists the sonames present below one conventional home.
func homePaths(spec libSpec, h homeDir, val string) []string {
	if !filepath.IsAbs(val) {
		return nil
	}
	var out []string
	for _, sub := range h.subs {
		dirs := []string{filepath.Join(val, sub)}
		if strings.Contains(sub, "*") {
			dirs, _ = filepath.Glob(filepath.Join(val, sub))
			// Newest Python first: python3.12 before python3.9.
			sort.Slice(dirs, func(i, j int) bool { return pyVersion(dirs[i]) > pyVersion(dirs[j]) })
		}
		for _, d := range dirs {
			for _, so := range spec.sonames {
				if p := filepath.Join(d, so); isFile(p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func pyVersion(dir string) int {
	i := strings.Index(dir, "python3.")
	if i < 0 {
		return 0
	}
	rest := dir[i+len("python3."):]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	n, _ := strconv.Atoi(rest)
	return n
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// openFile opens the file at path. A file the process has mapped already is
// taken as it is: the dynamic loader validated it when it mapped it. Another is
// first checked to be an ELF shared object for this architecture, which turns
// dlopen's terse words into typed errors.
func openFile(path string) (uintptr, error) {
	if h := loaded(path); h != 0 {
		return h, nil
	}
	if err := checkELF(path); err != nil {
		return 0, err
	}
	return dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// loaded opens path only if the process has that file mapped already
// (RTLD_NOLOAD), as dlopen would, and returns its handle; 0 if it has not. A
// bare name is never looked up: it would match any library of that soname.
func loaded(path string) uintptr {
	if !filepath.IsAbs(path) {
		return 0
	}
	h, _ := dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL|rtldNoload)
	return h
}

// elfMachine is the ELF machine of this process.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// checkELF reads the ELF header (64 bytes, nothing more: the loader parses the
// rest) and refuses what dlopen would refuse with less helpful words.
func checkELF(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return fmt.Errorf("no such file: %w", ErrNotFound)
		}
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var h [64]byte
	n, _ := unix.Pread(fd, h[:], 0)
	if n < 20 || string(h[:4]) != elf.ELFMAG {
		return fmt.Errorf("%w (no ELF magic)", ErrNotELF)
	}
	class, data := elf.Class(h[elf.EI_CLASS]), elf.Data(h[elf.EI_DATA])
	if data != elf.ELFDATA2LSB {
		return fmt.Errorf("%w: %s, this process is %s", ErrWrongArch, data, runtime.GOARCH)
	}
	machine := elf.Machine(binary.LittleEndian.Uint16(h[18:]))
	if machine != elfMachine || class != elf.ELFCLASS64 {
		return fmt.Errorf("%w: %s %s, this process is %s", ErrWrongArch, class, machine, runtime.GOARCH)
	}
	if typ := elf.Type(binary.LittleEndian.Uint16(h[16:])); typ != elf.ET_DYN {
		return fmt.Errorf("%w: ELF type %s", ErrNotELF, typ)
	}
	return nil
}

// The dynamic loader's functions, called through gonccl's own call path:
// purego's Dlopen and Dlsym go through reflection, which cost more than the
// loader's own work. A zero address (a libc without the function) falls back to
// purego, or for dlinfo to /proc/self/maps.
type dlFuncs struct{ open, sym, info, errstr uintptr }

var libdl = sync.OnceValue(func() dlFuncs {
	addr := func(name string) uintptr {
		p, _ := purego.Dlsym(purego.RTLD_DEFAULT, name)
		return p
	}
	return dlFuncs{open: addr("dlopen"), sym: addr("dlsym"), info: addr("dlinfo"), errstr: addr("dlerror")}
})

// dlopen keeps dlerror's words: dlerror's state is per thread, so the thread is
// locked around both calls.
func dlopen(path string, mode int) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if strings.IndexByte(path, 0) >= 0 {
		return 0, fmt.Errorf("%w: %q holds a NUL byte", ErrDlopen, path)
	}
	d := libdl()
	if d.open == 0 || d.errstr == 0 {
		h, err := purego.Dlopen(path, mode)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrDlopen, err)
		}
		return h, nil
	}
	if h := ccall.CallPtr(d.open, uintptr(unsafe.Pointer(cString(path))), uintptr(mode)); h != 0 {
		return h, nil
	}
	return 0, fmt.Errorf("%w: %s", ErrDlopen, ccall.GoString(ccall.Call(d.errstr)))
}

// dlsym returns 0 for a missing symbol; name is NUL-terminated (symbol.cname).
func dlsym(h uintptr, name *byte) uintptr {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return dlsymLocked(h, name)
}

// dlsymLocked is dlsym for a caller that holds its OS thread.
func dlsymLocked(h uintptr, name *byte) uintptr {
	fn := libdl().sym
	if fn == 0 {
		p, err := purego.Dlsym(h, goString(name))
		if err != nil {
			return 0
		}
		return p
	}
	// name is kept alive and in place by the symbol table that holds it.
	return ccall.Call(fn, h, uintptr(unsafe.Pointer(name)))
}

func goString(p *byte) string { return ccall.GoString(uintptr(unsafe.Pointer(p))) }

// mappedPaths remembers mappedPath's answers by handle. gonccl never closes a
// library, so a handle names the same mapped file for the life of the process:
// the answer cannot change, and a second Open of a file looks at neither the
// link map nor the disk again.
var mappedPaths struct {
	sync.Mutex
	m map[uintptr]string
}

// mappedPath finds the file that backs the library behind handle h: the name
// the dynamic loader recorded for it (dlinfo's link map), with symbolic links
// resolved; where dlinfo is unavailable, the mapping of /proc/self/maps that
// holds one of its symbols, which the kernel names after every link.
func mappedPath(h uintptr) (string, error) {
	mappedPaths.Lock()
	defer mappedPaths.Unlock()
	if p, ok := mappedPaths.m[h]; ok {
		return p, nil
	}
	p, err := findMappedPath(h)
	if err != nil {
		return "", err
	}
	if mappedPaths.m == nil {
		mappedPaths.m = make(map[uintptr]string)
	}
	mappedPaths.m[h] = p
	return p, nil
}

func findMappedPath(h uintptr) (string, error) {
	if p := linkMapName(h); filepath.IsAbs(p) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real, nil
		}
	}
	var addr uintptr
	for _, s := range []*byte{ncclSymbols[fnGetVersion].cname, cudaSymbols[cuRuntimeGetVersion].cname} {
		if addr = dlsym(h, s); addr != 0 {
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
