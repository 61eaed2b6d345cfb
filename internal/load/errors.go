package load

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gonccl/nccl/abi"
)

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
	// ErrMissingSymbol: the library lacks a function every supported release has.
	ErrMissingSymbol = errors.New("required symbol missing")
	// ErrInvalidArgument: a relative path, which would make the library
	// depend on the working directory (the root's ErrInvalidArgument).
	ErrInvalidArgument = errors.New("invalid argument")
	ErrNotFound        = errors.New("not found")
	ErrNotELF          = errors.New("not an ELF shared library")
	ErrWrongArch       = errors.New("ELF file for another architecture")
	ErrDlopen          = errors.New("dlopen failed")
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

func (e *FileError) Error() string { return ShowPath(e.Path) + ": " + e.Err.Error() }

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
		ShowPath(e.Path), e.Code, decoded)
}

func (e *VersionError) Is(target error) bool { return target == ErrBadVersion }

// MaxShown bounds how much of an outside string (an environment value, a path
// built from one) an error message repeats: a 100 KB value must not make a
// 400 KB message.
const MaxShown = 200

// Quote renders s for an error message: quoted with Go's escapes, so that
// newlines and control bytes stay on one line, and cut after MaxShown bytes
// with the full length noted.
func Quote(s string) string {
	if len(s) <= MaxShown {
		return strconv.Quote(s)
	}
	cut := MaxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// ShowPath renders a path for an error message: as it is when it is short and
// plain (printable, no quote or backslash), Quote's way otherwise.
func ShowPath(p string) string {
	if len(p) <= MaxShown && isPlain(p) {
		return p
	}
	return Quote(p)
}

func isPlain(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// MissingSymbolError is a required function absent from the library file.
type MissingSymbolError struct {
	Symbol string
	Path   string
}

func (e *MissingSymbolError) Error() string {
	return fmt.Sprintf("%s lacks %s, which every supported release exports: not a usable build", e.Path, e.Symbol)
}

func (e *MissingSymbolError) Is(target error) bool { return target == ErrMissingSymbol }
