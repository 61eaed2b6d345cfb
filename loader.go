package nccl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/ccall"
	"golang.org/x/sys/unix"
)

// This file finds and opens shared libraries: one search routine serves libnccl
// and libcudart, each described by a libSpec. The order is documented in the
// README ("Where gonccl looks") and tested in loader_test.go.
//
// Every candidate file is checked before anything opens it for the loader: a
// FIFO or a device would block dlopen's open(2) forever, so only regular files
// are opened (checkRegular), and the ELF headers of a file must describe no
// more than the file holds, or dlopen's mapping of it kills the process with
// SIGBUS (elfcheck.go). A stat-then-dlopen race remains: a file swapped for a
// FIFO between the check and dlopen still blocks. Swapping it takes write
// access to the folder, which is enough to plant any library anyway.

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
	path := showPath(a.Path)
	if a.Err == nil {
		return fmt.Sprintf("%s: %s: loaded", a.Via, path)
	}
	// Errors about a file name it (a *FileError, a *VersionError): say it once.
	return fmt.Sprintf("%s: %s: %s", a.Via, path, strings.TrimPrefix(a.Err.Error(), path+": "))
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
	// ErrNotRegular: a candidate is a FIFO, a socket, a device or a folder,
	// which gonccl never opens (opening a FIFO blocks until a writer comes).
	ErrNotRegular = errors.New("not a regular file")
	// ErrCorruptELF: a candidate's ELF headers describe more than the file
	// holds (a truncated copy, a damaged download); dlopen would crash on it.
	ErrCorruptELF = errors.New("truncated or corrupt ELF file")
	// ErrBadVersion: ncclGetVersion answers a code no NCCL release reports.
	ErrBadVersion = errors.New("implausible NCCL version")
)

// FileError is a candidate file the search could not examine (a permission
// problem: errors.Is(err, fs.ErrPermission)) or refused before dlopen: Err
// wraps ErrNotRegular, ErrCorruptELF, ErrNotELF, ErrWrongArch, ErrNotFound,
// the system's error, or the *Error of a failed ncclGetVersion.
type FileError struct {
	Path string // the file
	Err  error
}

func (e *FileError) Error() string { return showPath(e.Path) + ": " + e.Err.Error() }

func (e *FileError) Unwrap() error { return e.Err }

// fileError names path in err; a *fs.PathError gives up its own naming of the
// path, whose text is not bounded.
func fileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &FileError{Path: path, Err: err}
}

// VersionError is a library whose ncclGetVersion answers a code that decodes
// to no NCCL release: not positive, or a major version other than 2 or 3 (the
// code 99999999 would read as 9999.99.99). It matches ErrBadVersion.
type VersionError struct {
	Path string // the library file
	Code int32  // the raw code ncclGetVersion wrote
}

func (e *VersionError) Error() string {
	decoded := ""
	if e.Code > 0 {
		decoded = " (" + abi.DecodeVersion(int(e.Code)).String() + ")"
	}
	return fmt.Sprintf("%s: ncclGetVersion reports version code %d%s, which is no NCCL release (NCCL's codes decode to 2.x or 3.x: 2.28.3 is 22803)",
		showPath(e.Path), e.Code, decoded)
}

func (e *VersionError) Is(target error) bool { return target == ErrBadVersion }

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
	// accept, if set, vets a library once it is open (path names the file
	// mapped); a refused one counts as a failed candidate.
	accept func(h uintptr, path string) error
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
	hint:   "set GONCCL_NCCL_LIB to libnccl.so.2 or its folder (NCCL_HOME, NUMBA_NCCLLIB and an active virtualenv with nvidia-nccl-cu12/cu13 work too)",
	accept: checkNCCLVersion,
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
	// take records a candidate that dlopen answered (h, err) and says whether
	// it is the one: opened, and accepted by the spec.
	take := func(via, p string, h uintptr, err error) (LibraryFile, bool) {
		if err == nil && spec.accept != nil {
			if err = spec.accept(h, mappedPathOr(h, p)); err != nil {
				mappedPaths.Lock()
				delete(mappedPaths.m, h)
				mappedPaths.Unlock()
				purego.Dlclose(h)
			}
		}
		trace = append(trace, Attempt{Via: via, Path: p, Err: err})
		if err != nil {
			return LibraryFile{}, false
		}
		return finish(spec, via, p, h, trace), true
	}
	// tryAll tries the candidates of one source; it returns the first that loads.
	tryAll := func(via string, paths []string) (LibraryFile, bool) {
		for _, p := range paths {
			h, err := openFile(p)
			if f, ok := take(via, p, h, err); ok {
				return f, true
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
			if f, ok := take(via, val, h, nil); ok {
				return f, nil
			}
			return fail(envError(via, val, trace[len(trace)-1].Err))
		}
		paths, err := candidates(spec, val)
		if err != nil {
			trace = append(trace, Attempt{Via: via, Path: val, Err: err})
			return fail(envError(via, val, err))
		}
		if f, ok := tryAll(via, paths); ok {
			return f, nil
		}
		return fail(envError(via, val, trace[len(trace)-1].Err))
	}

	homes := func(list []homeDir) (LibraryFile, bool, error) {
		for _, h := range list {
			val := getenv(h.env)
			if val == "" {
				continue
			}
			paths, err := homePaths(spec, h, val)
			if len(paths) == 0 {
				if err == nil {
					err = fmt.Errorf("no %s there: %w", strings.Join(spec.sonames, ", "), ErrNotFound)
				}
				trace = append(trace, Attempt{Via: h.env, Path: val, Err: err})
				if h.strict {
					return LibraryFile{}, false, envError(h.env, val, err)
				}
				continue
			}
			n := len(trace)
			if f, ok := tryAll(h.env, paths); ok {
				return f, true, nil
			}
			if h.strict {
				return LibraryFile{}, false, envError(h.env, val, trace[n].Err)
			}
		}
		return LibraryFile{}, false, nil
	}
	if f, ok, err := homes(spec.dirs); err != nil {
		return fail(err)
	} else if ok {
		return f, nil
	}

	// Asked for a bare soname, even with RTLD_NOLOAD, the dynamic loader opens
	// the files of that name in LD_LIBRARY_PATH's folders unchecked.
	hazard := map[string]error{}
	for _, so := range spec.sonames {
		hazard[so] = loaderPathHazard(so, getenv("LD_LIBRARY_PATH"))
	}
	for _, via := range []string{ViaAlreadyLoaded, ViaSystemLoader} {
		mode := purego.RTLD_NOW | purego.RTLD_GLOBAL
		if via == ViaAlreadyLoaded {
			mode |= rtldNoload
		}
		for _, so := range spec.sonames {
			if err := hazard[so]; err != nil {
				trace = append(trace, Attempt{Via: via, Path: so, Err: fmt.Errorf("not asked: LD_LIBRARY_PATH holds %w", err)})
				continue
			}
			h, err := dlopen(so, mode)
			if err != nil && via == ViaAlreadyLoaded {
				err = errors.New("not loaded")
			}
			if f, ok := take(via, so, h, err); ok {
				return f, nil
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

// envError says which variable (or option) held val, quoted and bounded.
func envError(name, val string, err error) error {
	return fmt.Errorf("%s=%s: %w", name, quoteValue(val), err)
}

// finish fills in the mapped path of a loaded library.
func finish(spec libSpec, via, tried string, h uintptr, trace []Attempt) LibraryFile {
	return LibraryFile{Path: mappedPathOr(h, tried), Via: via, Trace: trace, handle: h}
}

// mappedPathOr is the path of the file mapped for h, or tried when it cannot
// be found: the library is loaded, so say what was asked for rather than fail.
func mappedPathOr(h uintptr, tried string) string {
	if path, err := mappedPath(h); err == nil {
		return path
	}
	return tried
}

// candidates expands an explicit value: a file is itself; a folder yields the
// sonames present in it. Relative paths are made absolute against nothing: they
// are refused, so the working directory is never searched implicitly.
func candidates(spec libSpec, val string) ([]string, error) {
	if !filepath.IsAbs(val) {
		return nil, fmt.Errorf("%s is not an absolute path", quoteValue(val))
	}
	st, err := os.Stat(val)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no such file or directory: %w", ErrNotFound)
		}
		return nil, fileError(val, err)
	}
	if !st.IsDir() {
		return []string{val}, nil
	}
	out := namesIn(spec, val)
	if len(out) == 0 {
		return nil, fmt.Errorf("folder has no %s: %w", strings.Join(spec.sonames, ", "), ErrNotFound)
	}
	return out, nil
}

// homePaths lists the sonames present below one conventional home. A folder
// that cannot be read is an error, not an empty place: a permission problem is
// reported as one.
func homePaths(spec libSpec, h homeDir, val string) ([]string, error) {
	if !filepath.IsAbs(val) {
		return nil, fmt.Errorf("%s is not an absolute path", quoteValue(val))
	}
	var out []string
	var firstErr error
	for _, sub := range h.subs {
		dirs, err := expandSub(val, sub)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, d := range dirs {
			out = append(out, namesIn(spec, d)...)
		}
	}
	return out, firstErr
}

// namesIn lists the sonames present in dir. Present means anything by that
// name that is there or cannot be looked at (a folder without search
// permission): the checks before dlopen then say what is wrong with it.
func namesIn(spec libSpec, dir string) []string {
	var out []string
	for _, so := range spec.sonames {
		if p := filepath.Join(dir, so); present(p) {
			out = append(out, p)
		}
	}
	return out
}

// present: p names something, or stat cannot tell (EACCES, ELOOP, ...): not
// absent. A dangling link and a missing folder on the way are absent.
func present(p string) bool {
	_, err := os.Stat(p)
	return err == nil || !(errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR))
}

// expandSub lists the folders sub names below val: one, or with one "*"
// component (lib/python3*/site-packages), every match, newest Python first.
// Only sub's "*" is a pattern; val is taken literally.
func expandSub(val, sub string) ([]string, error) {
	star := strings.IndexByte(sub, '*')
	if star < 0 {
		return []string{filepath.Join(val, sub)}, nil
	}
	start := strings.LastIndexByte(sub[:star], '/') + 1
	end := len(sub)
	if i := strings.IndexByte(sub[star:], '/'); i >= 0 {
		end = star + i
	}
	parent, pattern, rest := filepath.Join(val, sub[:start]), sub[start:end], strings.TrimPrefix(sub[end:], "/")
	entries, err := os.ReadDir(parent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil
		}
		return nil, fileError(parent, err)
	}
	var dirs []string
	for _, e := range entries {
		if ok, _ := filepath.Match(pattern, e.Name()); ok {
			dirs = append(dirs, filepath.Join(parent, e.Name(), rest))
		}
	}
	// Newest Python first: python3.12 before python3.9.
	sort.SliceStable(dirs, func(i, j int) bool { return pyVersion(dirs[i]) > pyVersion(dirs[j]) })
	return dirs, nil
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

// openFile opens the file at path. A file the process has mapped already is
// taken as it is: the dynamic loader validated it when it mapped it. Another is
// first checked (checkCandidate), which turns dlopen's terse words, its hangs
// and its crashes into typed errors.
func openFile(path string) (uintptr, error) {
	if h := loaded(path); h != 0 {
		return h, nil
	}
	if err := checkCandidate(path); err != nil {
		return 0, err
	}
	return dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// loaded opens path only if the process has that file mapped already
// (RTLD_NOLOAD), as dlopen would, and returns its handle; 0 if it has not. A
// bare name is never looked up: it would match any library of that soname.
// Nor is anything but a regular file: dlopen opens the file even with
// RTLD_NOLOAD, to compare it with those mapped, and opening a FIFO blocks.
func loaded(path string) uintptr {
	if !filepath.IsAbs(path) || checkRegular(path) != nil {
		return 0
	}
	h, _ := dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL|rtldNoload)
	return h
}

// checkRegular refuses, without opening it, a path that is not a regular file
// once symbolic links are followed.
func checkRegular(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fileError(path, fmt.Errorf("no such file: %w", ErrNotFound))
		}
		return fileError(path, err)
	}
	return regularFile(path, st.Mode())
}

// regularFile is the refusal of a file of mode m that is not regular, naming
// what it is.
func regularFile(path string, m fs.FileMode) error {
	if m.IsRegular() {
		return nil
	}
	what := "special file"
	switch {
	case m&fs.ModeNamedPipe != 0:
		what = "FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		what = "socket"
	case m&fs.ModeCharDevice != 0:
		what = "character device"
	case m&fs.ModeDevice != 0:
		what = "block device"
	case m.IsDir():
		what = "folder"
	}
	return &FileError{Path: path, Err: fmt.Errorf("%w: it is a %s", ErrNotRegular, what)}
}

// checkCandidate is every check of a file before dlopen may see it: a regular
// file (looked at before it is opened, and opened without blocking, then
// looked at again through the descriptor, in case it was swapped), an ELF
// shared object for this architecture whose headers fit in the file.
func checkCandidate(path string) error {
	if err := checkRegular(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fileError(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileError(path, err)
	}
	if err := regularFile(path, st.Mode()); err != nil {
		return err
	}
	if err := checkELFImage(f, st.Size()); err != nil {
		return &FileError{Path: path, Err: err}
	}
	return nil
}

// loaderPathHazard looks where the dynamic loader will look for soname in
// LD_LIBRARY_PATH (each folder's glibc-hwcaps subfolders, then the folder; an
// empty entry is the working directory, as for the loader) and returns the
// refusal of a file there that would hang or crash it: not regular, or a
// corrupt ELF file. A file the loader refuses cleanly (another architecture,
// not ELF, not readable) is passed over, as the loader passes it over; the
// first good one ends the look, as it ends the loader's. Subfolders for CPU
// levels this machine lacks are checked too: the look errs toward refusing.
func loaderPathHazard(soname, ldLibraryPath string) error {
	if ldLibraryPath == "" {
		return nil
	}
	for _, dir := range strings.Split(strings.ReplaceAll(ldLibraryPath, ";", ":"), ":") {
		if dir == "" {
			dir = "."
		}
		good := false
		for _, p := range loaderPathFiles(dir, soname) {
			err := checkCandidate(p)
			if errors.Is(err, ErrNotRegular) || errors.Is(err, ErrCorruptELF) {
				return err
			}
			good = good || err == nil
		}
		if good {
			return nil
		}
	}
	return nil
}

// loaderPathFiles lists the files named soname the loader may open for one
// LD_LIBRARY_PATH folder: in glibc-hwcaps/*/ (highest level first), then in it.
func loaderPathFiles(dir, soname string) []string {
	var out []string
	levels, _ := os.ReadDir(filepath.Join(dir, "glibc-hwcaps"))
	for i := len(levels) - 1; i >= 0; i-- {
		if p := filepath.Join(dir, "glibc-hwcaps", levels[i].Name(), soname); present(p) {
			out = append(out, p)
		}
	}
	if p := filepath.Join(dir, soname); present(p) {
		out = append(out, p)
	}
	return out
}

// checkNCCLVersion refuses a library whose ncclGetVersion fails or answers a
// code no NCCL release reports, naming the file. A library without the
// function passes: Open reports the missing symbol.
func checkNCCLVersion(h uintptr, path string) error {
	fn := dlsym(h, ncclSymbols[fnGetVersion].cname)
	if fn == 0 {
		return nil
	}
	var code int32
	if r := abi.Result(int32(ccall.CallPtr(fn, uintptr(unsafe.Pointer(&code))))); r != abi.Success {
		return &FileError{Path: path, Err: &Error{Op: "ncclGetVersion", Code: r}}
	}
	if !plausibleVersion(code) {
		return &VersionError{Path: path, Code: code}
	}
	return nil
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

// maxShown bounds how much of an outside string (an environment value, a path
// built from one) an error message repeats: a 100 KB value must not make a
// 400 KB message.
const maxShown = 200

// quoteValue renders s for an error message: quoted with Go's escapes, so that
// newlines and control bytes stay on one line, and cut after maxShown bytes
// with the full length noted.
func quoteValue(s string) string {
	if len(s) <= maxShown {
		return strconv.Quote(s)
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// showPath renders a path for an error message: as it is when it is short and
// plain (printable, no quote or backslash), quoteValue's way otherwise.
func showPath(p string) string {
	if len(p) <= maxShown && isPlain(p) {
		return p
	}
	return quoteValue(p)
}

func isPlain(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
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
		return 0, fmt.Errorf("%w: %s holds a NUL byte", ErrDlopen, quoteValue(path))
	}
	d := libdl()
	if d.open == 0 || d.errstr == 0 {
		h, err := purego.Dlopen(path, mode)
		if err != nil {
			return 0, fmt.Errorf("%w: %s", ErrDlopen, strings.Replace(err.Error(), path, showPath(path), 1))
		}
		return h, nil
	}
	if h := ccall.CallPtr(d.open, uintptr(unsafe.Pointer(cString(path))), uintptr(mode)); h != 0 {
		return h, nil
	}
	// dlerror repeats the path, which may be long or hold newlines: shown bounded.
	return 0, fmt.Errorf("%w: %s", ErrDlopen, strings.Replace(ccall.GoString(ccall.Call(d.errstr)), path, showPath(path), 1))
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
