package nccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gonccl/nccl/internal/dl"
	"github.com/gonccl/nccl/internal/fakes"
	"github.com/gonccl/nccl/internal/load"
)

// envMap is a getenv for search that sees only the given variables, so tests do
// not depend on the machine's NCCL_HOME or CONDA_PREFIX.
func envMap(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// copyLib copies a fake libnccl.so.2 into dir (created), so each location in a
// test is a distinct file.
func copyLib(t *testing.T, variant, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(FakeNCCL(t, variant), "libnccl.so.2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "libnccl.so.2")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSearchOrder(t *testing.T) {
	root := t.TempDir()
	opt := copyLib(t, "default", filepath.Join(root, "opt"))
	over := copyLib(t, "default", filepath.Join(root, "override"))
	numba := copyLib(t, "default", filepath.Join(root, "numba"))
	home := copyLib(t, "default", filepath.Join(root, "home", "lib"))
	venv := copyLib(t, "default", filepath.Join(root, "venv", "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib"))
	copyLib(t, "default", filepath.Join(root, "venv", "lib", "python3.9", "site-packages", "nvidia", "nccl", "lib"))
	conda := copyLib(t, "default", filepath.Join(root, "conda", "lib"))

	all := []string{
		"GONCCL_NCCL_LIB", filepath.Dir(over),
		"NUMBA_NCCLLIB", filepath.Dir(numba),
		"NCCL_HOME", filepath.Join(root, "home"),
		"VIRTUAL_ENV", filepath.Join(root, "venv"),
		"CONDA_PREFIX", filepath.Join(root, "conda"),
	}
	cases := []struct {
		name     string
		explicit string
		drop     int // how many leading variable pairs of all to leave out
		via      string
		path     string
	}{
		{"option file beats all", opt, 0, ViaOption, opt},
		{"option folder", filepath.Dir(opt), 0, ViaOption, opt},
		{"GONCCL_NCCL_LIB", "", 0, "GONCCL_NCCL_LIB", over},
		{"NUMBA_NCCLLIB", "", 1, "NUMBA_NCCLLIB", numba},
		{"NCCL_HOME", "", 2, "NCCL_HOME", home},
		{"VIRTUAL_ENV wheel, newest python first", "", 3, "VIRTUAL_ENV", venv},
		{"CONDA_PREFIX", "", 4, "CONDA_PREFIX", conda},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := search(ncclSpec, c.explicit, envMap(all[2*c.drop:]...))
			if err != nil {
				t.Fatal(err)
			}
			if f.Via != c.via || f.Path != c.path {
				t.Fatalf("found %s via %q, want %s via %q", f.Path, f.Via, c.path, c.via)
			}
			last := f.Trace[len(f.Trace)-1]
			if last.Err != nil || last.Via != c.via {
				t.Fatalf("trace ends with %v", last)
			}
		})
	}
}

func TestSetButUnresolvedIsAnError(t *testing.T) {
	root := t.TempDir()
	copyLib(t, "default", filepath.Join(root, "home", "lib"))
	empty := filepath.Join(root, "empty")
	os.Mkdir(empty, 0o755)
	for _, c := range []struct {
		name string
		env  []string
		opt  string
		want error
	}{
		{"override missing file", []string{"GONCCL_NCCL_LIB", filepath.Join(root, "nope.so"), "NCCL_HOME", filepath.Join(root, "home")}, "", ErrNotFound},
		{"override empty folder", []string{"GONCCL_NCCL_LIB", empty, "NCCL_HOME", filepath.Join(root, "home")}, "", ErrNotFound},
		{"override relative", []string{"GONCCL_NCCL_LIB", "lib/libnccl.so.2", "NCCL_HOME", filepath.Join(root, "home")}, "", nil},
		{"option missing", []string{"NCCL_HOME", filepath.Join(root, "home")}, filepath.Join(root, "nope"), ErrNotFound},
		{"NUMBA_NCCLLIB empty folder", []string{"NUMBA_NCCLLIB", empty, "NCCL_HOME", filepath.Join(root, "home")}, "", ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := search(ncclSpec, c.opt, envMap(c.env...))
			if err == nil {
				t.Fatalf("loaded %s via %s; want an error, not a fall-through", f.Path, f.Via)
			}
			var le *LoadError
			if !errors.As(err, &le) || len(le.Trace) == 0 {
				t.Fatalf("error %v is not a *LoadError with a trace", err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v does not match %v", err, c.want)
			}
			if !strings.Contains(err.Error(), "GONCCL_NCCL_LIB") {
				t.Fatalf("error does not say what to set: %v", err)
			}
		})
	}
}

func TestUnsetHomesFallThrough(t *testing.T) {
	// NCCL_HOME pointing at a folder without NCCL is common (set for another
	// build): it is noted in the trace and the search goes on.
	root := t.TempDir()
	conda := copyLib(t, "default", filepath.Join(root, "conda", "lib"))
	f, err := search(ncclSpec, "", envMap("NCCL_HOME", filepath.Join(root, "nothing"), "CONDA_PREFIX", filepath.Join(root, "conda")))
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != conda || f.Trace[0].Via != "NCCL_HOME" || !errors.Is(f.Trace[0].Err, ErrNotFound) {
		t.Fatalf("got %s, trace %v", f.Path, f.Trace)
	}
}

func TestSymlinkResolved(t *testing.T) {
	root := t.TempDir()
	real := copyLib(t, "default", filepath.Join(root, "real"))
	real2 := filepath.Join(filepath.Dir(real), "libnccl.so.2.28.3")
	if err := os.Rename(real, real2); err != nil {
		t.Fatal(err)
	}
	links := filepath.Join(root, "links")
	os.Mkdir(links, 0o755)
	if err := os.Symlink(real2, filepath.Join(links, "libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	f, err := search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", links))
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != real2 {
		t.Fatalf("Path = %s, want the real file %s", f.Path, real2)
	}
}

// A second search of a file already mapped skips the disk (RTLD_NOLOAD, the
// mapped-path cache) and must give the same answer as the first.
func TestWarmSearchSameAnswer(t *testing.T) {
	root := t.TempDir()
	real := copyLib(t, "default", filepath.Join(root, "real"))
	link := filepath.Join(root, "libnccl.so.2")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for i, env := range [][]string{{"GONCCL_NCCL_LIB", root}, {"GONCCL_NCCL_LIB", link}, {"GONCCL_NCCL_LIB", root}} {
		f, err := search(ncclSpec, "", envMap(env...))
		if err != nil {
			t.Fatal(err)
		}
		last := f.Trace[len(f.Trace)-1]
		if f.Path != real || f.Via != "GONCCL_NCCL_LIB" || last.Err != nil || last.Path != link {
			t.Fatalf("search %d: %s via %q, trace %v; want %s via GONCCL_NCCL_LIB, tried %s", i, f.Path, f.Via, f.Trace, real, link)
		}
	}
	// A loaded file's name with anything after a NUL byte is not that file.
	if f, err := search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", link+"\x00junk")); err == nil {
		t.Fatalf("loaded %s from a path holding a NUL byte", f.Path)
	}
}

// elfFixture is the absolute path of testdata/elf/name (testdata/README.md
// says what each file is): the search takes absolute paths only.
func elfFixture(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "elf", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// headerFixtures are testdata/elf's two ELF64 headers of a shared object,
// both claiming two program headers that the 64-byte file does not hold:
// this architecture's (a truncated library) and the other one's (a library
// for another architecture).
func headerFixtures(t *testing.T) (native, foreign string) {
	t.Helper()
	x86, arm := elfFixture(t, "header-x86-64.so"), elfFixture(t, "header-aarch64.so")
	switch runtime.GOARCH {
	case "amd64":
		return x86, arm
	case "arm64":
		return arm, x86
	}
	t.Skipf("no ELF fixture for %s", runtime.GOARCH)
	return "", ""
}

func TestNotELF(t *testing.T) {
	p := elfFixture(t, "not-elf.so")
	_, err := search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", p))
	if !errors.Is(err, ErrNotELF) {
		t.Fatalf("error = %v, want ErrNotELF", err)
	}
}

// TestWrongArchitecture: the header for the other architecture is refused as
// such, before its missing program headers are looked at; the same header
// for this architecture is not (its verdict is the truncation).
func TestWrongArchitecture(t *testing.T) {
	native, foreign := headerFixtures(t)
	_, err := search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", foreign))
	if !errors.Is(err, ErrWrongArch) {
		t.Fatalf("%s: error = %v, want ErrWrongArch", filepath.Base(foreign), err)
	}
	_, err = search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", native))
	if errors.Is(err, ErrWrongArch) || !errors.Is(err, ErrCorruptELF) {
		t.Fatalf("%s: error = %v, want ErrCorruptELF (this architecture's header)", filepath.Base(native), err)
	}
}

// TestOpenRefusesBrokenELF: Open(WithLibrary(path)) of each broken file of
// testdata/elf fails with the search's typed error naming the file and saying
// what is wrong, from the checks before dlopen (whose words would be terse,
// and which would touch the missing program headers).
func TestOpenRefusesBrokenELF(t *testing.T) {
	native, foreign := headerFixtures(t)
	for _, c := range []struct {
		name, path string
		want       error
		words      []string
	}{
		{"not ELF", elfFixture(t, "not-elf.so"), ErrNotELF, []string{"no ELF magic"}},
		{"other architecture", foreign, ErrWrongArch, []string{runtime.GOARCH}},
		{"truncated", native, ErrCorruptELF, []string{"program header table", "ends past the end of the file (64 bytes)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := Open(WithLibrary(c.path), WithoutCUDARuntime())
			if err == nil {
				l.Close()
				t.Fatalf("Open(WithLibrary(%s)) succeeded", c.path)
			}
			if errors.Is(err, ErrDlopen) {
				t.Fatalf("%s reached dlopen: %v", c.path, err)
			}
			wantFileError(t, err, c.want, c.path, c.words...)
		})
	}
}

func TestNotFoundExplains(t *testing.T) {
	out, err := fakes.RunChild(t, 0, "open-nothing")
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func init() {
	// With no variable set and nothing on the loader path, Open fails with a
	// *LoadError whose trace shows the system loader and which names the variable.
	children["open-nothing"] = func() error {
		_, err := Open()
		var le *LoadError
		if !errors.As(err, &le) || !errors.Is(err, ErrNotFound) {
			return errorf("Open() = %v, want a *LoadError matching ErrNotFound", err)
		}
		sawLoader := false
		for _, a := range le.Trace {
			if a.Via == ViaSystemLoader {
				sawLoader = true
				if !errors.Is(a.Err, ErrDlopen) || !strings.Contains(a.Err.Error(), "libnccl.so") {
					return errorf("system loader attempt lacks dlerror's words: %v", a.Err)
				}
			}
		}
		if !sawLoader || !strings.Contains(err.Error(), "GONCCL_NCCL_LIB") {
			return errorf("error does not show the system loader or the variable to set:\n%v", err)
		}
		return nil
	}
	// LD_LIBRARY_PATH is read by the dynamic loader when the process starts: a
	// child started with it finds the fake through the system loader.
	children["system-loader"] = func() error {
		l, err := Open()
		if err != nil {
			return err
		}
		want := os.Getenv("WANT_PATH")
		// The fake NCCL links the fake runtime, so the runtime is found mapped.
		cudaVia := l.CUDA().Via
		if l.Via != ViaSystemLoader || l.Path != want || (cudaVia != ViaSystemLoader && cudaVia != ViaAlreadyLoaded) {
			return errorf("NCCL %s via %q, CUDA via %q; want %s via the system loader", l.Path, l.Via, l.CUDA().Via, want)
		}
		return nil
	}
	// A library the process has already mapped is reused, not loaded twice.
	children["already-loaded"] = func() error {
		if _, err := dl.Open(os.Getenv("PRELOAD"), dl.Now); err != nil {
			return err
		}
		f, err := search(ncclSpec, "", envMap())
		if err != nil {
			return err
		}
		if f.Via != ViaAlreadyLoaded || f.Path != os.Getenv("PRELOAD") {
			return errorf("found %s via %q, want the preloaded copy", f.Path, f.Via)
		}
		return nil
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func TestSystemLoader(t *testing.T) {
	nccl := filepath.Join(FakeNCCL(t, "default"), "libnccl.so.2")
	out, err := fakes.RunChild(t, 0, "system-loader",
		"LD_LIBRARY_PATH="+FakeNCCL(t, "default")+":"+FakeCUDART(t), "WANT_PATH="+nccl)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestAlreadyLoaded(t *testing.T) {
	nccl := filepath.Join(FakeNCCL(t, "old"), "libnccl.so.2")
	out, err := fakes.RunChild(t, 0, "already-loaded", "PRELOAD="+nccl)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestCUDARuntimeSearch(t *testing.T) {
	root := t.TempDir()
	b, err := os.ReadFile(filepath.Join(FakeCUDART(t), "libcudart.so.12"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(dir, name string) string {
		os.MkdirAll(dir, 0o755)
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o755)
		return p
	}
	wheel := put(filepath.Join(root, "venv", "lib", "python3.11", "site-packages", "nvidia", "cuda_runtime", "lib"), "libcudart.so.12")
	put(filepath.Join(root, "cuda", "lib64"), "libcudart.so.12")
	f, err := load.Search(cudartSpec, "", envMap("VIRTUAL_ENV", filepath.Join(root, "venv"), "CUDA_HOME", filepath.Join(root, "cuda")))
	if err != nil {
		t.Fatal(err)
	}
	// The copy is a second fake runtime, mapped RTLD_GLOBAL: left loaded, the
	// fake NCCL of later tests could bind to its symbols and its state.
	dl.Close(f.Handle)
	if f.Path != wheel || f.Via != "VIRTUAL_ENV" {
		t.Fatalf("got %s via %s, want the wheel", f.Path, f.Via)
	}
}

// FuzzSearchValue feeds arbitrary values to the search variables: never a panic,
// never a relative path tried, a set override that does not resolve is an
// error, not a fall-through, and the error repeats the value quoted and cut: a
// few KiB at most, one line per attempt whatever newlines the value holds.
func FuzzSearchValue(f *testing.F) {
	for _, s := range []string{"", "/", "lib", "./libnccl.so.2", "/nonexistent/libnccl.so.2", "/dev/null", "/proc", "\x00", "/tmp/../tmp",
		"/dev/zero", "/proc/self/fd/0", "/nonexistent\n/libnccl.so.2", "/" + strings.Repeat("long/", 1000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, val string) {
		if val == "" {
			return
		}
		f, err := search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", val))
		for _, a := range f.Trace {
			if !filepath.IsAbs(a.Path) && a.Via == "GONCCL_NCCL_LIB" && a.Err == nil {
				t.Fatalf("loaded a relative path %q", a.Path)
			}
		}
		if err == nil && f.Via != "GONCCL_NCCL_LIB" {
			t.Fatalf("GONCCL_NCCL_LIB=%q fell through to %s", val, f.Via)
		}
		var le *LoadError
		if errors.As(err, &le) {
			msg := err.Error()
			if len(msg) > 8192 || strings.Count(msg, "\n") != len(le.Trace)+1 {
				t.Fatalf("GONCCL_NCCL_LIB=%q: a message of %d bytes, %d lines for %d attempts:\n%.3000s",
					val, len(msg), strings.Count(msg, "\n")+1, len(le.Trace), msg)
			}
		}
	})
}

// search is the search Open makes, its answer as the library's File.
func search(spec load.Spec, explicit string, getenv func(string) string) (LibraryFile, error) {
	f, err := load.Search(spec, explicit, getenv)
	return f.File, err
}
