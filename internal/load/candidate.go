package load

import (
	"errors"
	"fmt"
	"github.com/gonccl/nccl/internal/capi"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gonccl/nccl/internal/dl"
	"golang.org/x/sys/unix"
)

// What a candidate library file must pass before dlopen may see it, and the
// calls into the dynamic loader (internal/dl) with their errors made gonccl's.

// openFile opens the file at path. A file the process has mapped already is
// taken as it is: the dynamic loader validated it when it mapped it. Another is
// first checked (CheckCandidate), which turns dlopen's terse words, its hangs
// and its crashes into typed errors.
func openFile(path string) (uintptr, error) {
	if h := loaded(path); h != 0 {
		return h, nil
	}
	if err := CheckCandidate(path); err != nil {
		return 0, err
	}
	return dlopen(path, dl.Now|dl.Global)
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
	h, _ := dlopen(path, dl.Now|dl.Global|dl.NoLoad)
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

// CheckCandidate is every check of a file before dlopen may see it: a regular
// file (looked at before it is opened, and opened without blocking, then
// looked at again through the descriptor, in case it was swapped), an ELF
// shared object for this architecture whose headers fit in the file.
func CheckCandidate(path string) error {
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

// LoaderPathHazard looks where the dynamic loader will look for soname in
// LD_LIBRARY_PATH (each folder's glibc-hwcaps subfolders, then the folder; an
// empty entry is the working directory, as for the loader) and returns the
// refusal of a file there that would hang or crash it: not regular, or a
// corrupt ELF file. A file the loader refuses cleanly (another architecture,
// not ELF, not readable) is passed over, as the loader passes it over; the
// first good one ends the look, as it ends the loader's. Subfolders for CPU
// levels this machine lacks are checked too: the look errs toward refusing.
func LoaderPathHazard(soname, ldLibraryPath string) error {
	if ldLibraryPath == "" {
		return nil
	}
	for _, dir := range strings.Split(strings.ReplaceAll(ldLibraryPath, ";", ":"), ":") {
		if dir == "" {
			dir = "."
		}
		good := false
		for _, p := range loaderPathFiles(dir, soname) {
			err := CheckCandidate(p)
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

// dlopen is dl.Open with its error wrapped in ErrDlopen, the path in dlerror's
// words shown bounded (it may be long or hold newlines).
func dlopen(path string, mode int) (uintptr, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return 0, fmt.Errorf("%w: %s holds a NUL byte", ErrDlopen, Quote(path))
	}
	h, err := dl.Open(path, mode)
	if err != nil {
		return 0, fmt.Errorf("%w: %s", ErrDlopen, strings.Replace(err.Error(), path, ShowPath(path), 1))
	}
	return h, nil
}

// mappedPath is the file behind handle h (see dl.MappedPath), located by
// ncclGetVersion or cudaRuntimeGetVersion where dlinfo is missing.
func mappedPath(h uintptr) (string, error) {
	return dl.MappedPath(h, capi.NCCLSymbols[capi.FnGetVersion].CName, capi.CUDASymbols[capi.CuRuntimeGetVersion].CName)
}
