package load

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gonccl/nccl/internal/dl"
	"golang.org/x/sys/unix"
)

// This file finds and opens shared libraries: one search routine serves libnccl
// and libcudart, each described by a Spec. The order is documented in the
// README ("Where gonccl looks") and tested in loader_test.go.
//
// Every candidate file is checked before anything opens it for the loader: a
// FIFO or a device would block dlopen's open(2) forever, so only regular files
// are opened (checkRegular), and the ELF headers of a file must describe no
// more than the file holds, or dlopen's mapping of it kills the process with
// SIGBUS (elf.go). A stat-then-dlopen race remains: a file swapped for a
// FIFO between the check and dlopen still blocks. Swapping it takes write
// access to the folder, which is enough to plant any library anyway.

// How a library was found: the values of File.Via and Attempt.Via.
const (
	ViaOption        = "option"
	ViaAlreadyLoaded = "already loaded"
	ViaSystemLoader  = "system loader"
)

// File says which shared library was loaded and how it was found.
type File struct {
	// Path is the absolute path of the file really mapped into the process, with
	// symbolic links resolved.
	Path string
	// Via names the source that found it: "option", an environment variable such
	// as "GONCCL_NCCL_LIB" or "NCCL_HOME", "already loaded" or "system loader".
	Via string
	// Trace lists every candidate tried, in order, the last one being the file
	// loaded (its Err is nil).
	Trace []Attempt
}

// Found is a library the search loaded: the File, its dlopen handle and
// what the Spec's Accept read from it.
type Found struct {
	File
	Handle  uintptr
	Version int32 // Accept's answer (NCCL's version code), 0 without Accept
}

// Attempt is one candidate of the search.
type Attempt struct {
	Via  string // the source that proposed it
	Path string // a file, or a bare soname handed to the system loader
	Err  error  // why it was not used; nil for the file loaded
}

func (a Attempt) String() string {
	path := ShowPath(a.Path)
	if a.Err == nil {
		return fmt.Sprintf("%s: %s: loaded", a.Via, path)
	}
	// Errors about a file name it (a *FileError, a *VersionError): say it once.
	return fmt.Sprintf("%s: %s: %s", a.Via, path, strings.TrimPrefix(a.Err.Error(), path+": "))
}

// Spec describes one library to search for.
type Spec struct {
	Name     string   // "libnccl"
	Sonames  []string // tried in order in every directory, then by the system loader
	Override string   // GONCCL_..._LIB: a file or a directory; set but unresolved is an error
	// Dirs lists the conventional homes, in order, after the override.
	Dirs []Home
	// After lists homes tried after the system loader.
	After []Home
	Hint  string
	// Accept, if set, vets a library once it is open (path names the file
	// mapped) and reads its version; a refused one counts as a failed
	// candidate.
	Accept func(h uintptr, path string) (version int32, err error)
}

// Home is a conventional place: an environment variable and the folders below it.
type Home struct {
	Env  string
	Subs []string // relative to the variable's value; may hold one "*" glob level
	// Strict: a set variable that yields nothing is an error (pynccl's NUMBA_NCCLLIB).
	Strict bool
}

// Search finds and opens a library: the explicit option (file or folder), the
// override variable, the conventional homes, a copy already loaded, the system
// loader, then the late homes. The option and the override never fall through:
// if they are given and do not load, that is the answer.
func Search(spec Spec, explicit string, getenv func(string) string) (Found, error) {
	s := &searcher{spec: spec, getenv: getenv}
	// 1. The option, else the override variable: set, it is the answer,
	// found or not.
	via, val := ViaOption, explicit
	if val == "" {
		via, val = spec.Override, getenv(spec.Override)
	}
	if val != "" {
		return s.explicit(via, val)
	}
	// 2. The conventional homes; 3. the dynamic loader (mapped already, then
	// its own search); 4. the homes looked at after it.
	for _, step := range []func() (Found, bool, error){
		func() (Found, bool, error) { return s.homes(spec.Dirs) },
		s.loader,
		func() (Found, bool, error) { return s.homes(spec.After) },
	} {
		if f, ok, err := step(); err != nil {
			return s.fail(err)
		} else if ok {
			return f, nil
		}
	}
	return s.fail(fmt.Errorf("no %s in any place searched: %w", strings.Join(spec.Sonames, " or "), ErrNotFound))
}

// searcher is one search: the spec, the environment, and the trace of every
// candidate tried.
type searcher struct {
	spec   Spec
	getenv func(string) string
	trace  []Attempt
}

func (s *searcher) fail(err error) (Found, error) {
	return Found{}, &LoadError{Library: s.spec.Name, Trace: s.trace, Err: err, Hint: s.spec.Hint}
}

// lastErr is the error of the last candidate tried.
func (s *searcher) lastErr() error { return s.trace[len(s.trace)-1].Err }

// take records a candidate that dlopen answered (h, err) and says whether it
// is the one: opened, and accepted by the spec.
func (s *searcher) take(via, p string, h uintptr, err error) (Found, bool) {
	var version int32
	if err == nil && s.spec.Accept != nil {
		if version, err = s.spec.Accept(h, mappedPathOr(h, p)); err != nil {
			dl.Close(h)
		}
	}
	s.trace = append(s.trace, Attempt{Via: via, Path: p, Err: err})
	if err != nil {
		return Found{}, false
	}
	return Found{File: File{Path: mappedPathOr(h, p), Via: via, Trace: s.trace}, Handle: h, Version: version}, true
}

// tryAll tries the candidates of one source; it returns the first that loads.
func (s *searcher) tryAll(via string, paths []string) (Found, bool) {
	for _, p := range paths {
		h, err := openFile(p)
		if f, ok := s.take(via, p, h, err); ok {
			return f, true
		}
	}
	return Found{}, false
}

// explicit loads what an option or the override variable names, a file or a
// folder; failing, the search ends with that failure.
func (s *searcher) explicit(via, val string) (Found, error) {
	// A file the process has mapped already (the warm case: a second Open)
	// needs no look at the disk.
	if h := loaded(val); h != 0 {
		if f, ok := s.take(via, val, h, nil); ok {
			return f, nil
		}
		return s.fail(envError(via, val, s.lastErr()))
	}
	paths, err := candidates(s.spec, val)
	if err != nil {
		s.trace = append(s.trace, Attempt{Via: via, Path: val, Err: err})
		return s.fail(envError(via, val, err))
	}
	if f, ok := s.tryAll(via, paths); ok {
		return f, nil
	}
	return s.fail(envError(via, val, s.lastErr()))
}

// homes tries the homes of list whose variable is set, in order. A strict
// home that is set but yields nothing ends the search with an error.
func (s *searcher) homes(list []Home) (Found, bool, error) {
	for _, h := range list {
		val := s.getenv(h.Env)
		if val == "" {
			continue
		}
		paths, err := homePaths(s.spec, h, val)
		if len(paths) == 0 {
			if err == nil {
				err = fmt.Errorf("no %s there: %w", strings.Join(s.spec.Sonames, ", "), ErrNotFound)
			}
			s.trace = append(s.trace, Attempt{Via: h.Env, Path: val, Err: err})
			if h.Strict {
				return Found{}, false, envError(h.Env, val, err)
			}
			continue
		}
		n := len(s.trace)
		if f, ok := s.tryAll(h.Env, paths); ok {
			return f, true, nil
		}
		if h.Strict {
			return Found{}, false, envError(h.Env, val, s.trace[n].Err)
		}
	}
	return Found{}, false, nil
}

// loader asks the dynamic loader for each soname: first among the libraries
// already mapped (RTLD_NOLOAD), then by its own search. Asked for a bare
// soname, even with RTLD_NOLOAD, it opens the files of that name in
// LD_LIBRARY_PATH's folders unchecked: a soname whose file there fails the
// checks is not asked for.
func (s *searcher) loader() (Found, bool, error) {
	hazard := map[string]error{}
	for _, so := range s.spec.Sonames {
		hazard[so] = LoaderPathHazard(so, s.getenv("LD_LIBRARY_PATH"))
	}
	for _, via := range []string{ViaAlreadyLoaded, ViaSystemLoader} {
		mode := dl.Now | dl.Global
		if via == ViaAlreadyLoaded {
			mode |= dl.NoLoad
		}
		for _, so := range s.spec.Sonames {
			if err := hazard[so]; err != nil {
				s.trace = append(s.trace, Attempt{Via: via, Path: so, Err: fmt.Errorf("not asked: LD_LIBRARY_PATH holds %w", err)})
				continue
			}
			h, err := dlopen(so, mode)
			if err != nil && via == ViaAlreadyLoaded {
				err = errNotMapped
			}
			if f, ok := s.take(via, so, h, err); ok {
				return f, true, nil
			}
		}
	}
	return Found{}, false, nil
}

// errNotMapped is the answer of the look among the libraries already mapped
// that finds none of the name: the file was not found there.
var errNotMapped = fmt.Errorf("%w among the libraries already mapped", ErrNotFound)

// relativePath refuses a relative path, which would make the library depend
// on the working directory.
func relativePath(val string) error {
	return fmt.Errorf("%w: %s is not an absolute path", ErrInvalidArgument, Quote(val))
}

// envError says which variable (or option) held val, quoted and bounded.
func envError(name, val string, err error) error {
	return fmt.Errorf("%s=%s: %w", name, Quote(val), err)
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
func candidates(spec Spec, val string) ([]string, error) {
	if !filepath.IsAbs(val) {
		return nil, relativePath(val)
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
		return nil, fmt.Errorf("folder has no %s: %w", strings.Join(spec.Sonames, ", "), ErrNotFound)
	}
	return out, nil
}

// homePaths lists the sonames present below one conventional home. A folder
// that cannot be read is an error, not an empty place: a permission problem is
// reported as one.
func homePaths(spec Spec, h Home, val string) ([]string, error) {
	if !filepath.IsAbs(val) {
		return nil, relativePath(val)
	}
	var out []string
	var firstErr error
	for _, sub := range h.Subs {
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
func namesIn(spec Spec, dir string) []string {
	var out []string
	for _, so := range spec.Sonames {
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
