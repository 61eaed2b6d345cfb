package nccl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/fakes"
	"github.com/gonccl/nccl/internal/load"
	"github.com/gonccl/nccl/nccltest"
	"golang.org/x/sys/unix"
)

// Hostile and broken candidates: FIFOs, sockets, devices, truncated libraries,
// absurd versions, folders the user may not enter, huge environment values.
// The search must answer each with a typed error naming the file, never hang,
// never die of a signal.

// fifos lists the FIFOs the tests made, for unblockFIFOs.
var fifos struct {
	sync.Mutex
	paths []string
}

// mkfifo makes a FIFO at path.
func mkfifo(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	fifos.Lock()
	fifos.paths = append(fifos.paths, path)
	fifos.Unlock()
	return path
}

// unblockFIFOs lets an open of any of the tests' FIFOs that blocks return:
// opening one for writing gives the blocked reader its partner.
func unblockFIFOs() {
	fifos.Lock()
	defer fifos.Unlock()
	for _, p := range fifos.paths {
		if fd, err := unix.Open(p, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}
}

// searchWithin is search that fails the test, rather than hanging it, when
// the search does not return within a few seconds. A search blocked opening a
// FIFO (a regression) is then freed, again and again until it returns: it
// holds the dynamic loader's lock, which every later dlopen needs.
func searchWithin(t *testing.T, spec load.Spec, explicit string, getenv func(string) string) (LibraryFile, error) {
	t.Helper()
	type result struct {
		f   LibraryFile
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := search(spec, explicit, getenv)
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-time.After(20 * time.Second):
	}
	for freed := false; !freed; {
		unblockFIFOs()
		select {
		case <-done:
			freed = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the search did not return within 20s: it blocked opening a candidate")
	return LibraryFile{}, nil
}

// wantFileError checks that err is a *LoadError matching sentinel, whose
// reason names the file path and holds the words.
func wantFileError(t *testing.T, err error, sentinel error, path string, words ...string) {
	t.Helper()
	var le *LoadError
	if !errors.As(err, &le) || !errors.Is(err, sentinel) {
		t.Fatalf("error %v; want a *LoadError matching %v", err, sentinel)
	}
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != path {
		t.Fatalf("error %v; want a *FileError naming %s", err, path)
	}
	for _, w := range append([]string{path}, words...) {
		if !strings.Contains(le.Err.Error(), w) {
			t.Fatalf("reason %q does not say %q", le.Err, w)
		}
	}
}

func TestSearchRefusesNonRegularFiles(t *testing.T) {
	root := t.TempDir()
	fifo := mkfifo(t, filepath.Join(root, "fifo", "libnccl.so.2"))
	sock := filepath.Join(root, "sock", "libnccl.so.2")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	folder := filepath.Join(root, "folder", "libnccl.so.2")
	os.MkdirAll(folder, 0o755)

	for _, c := range []struct {
		name, explicit, env, path, what string
	}{
		{"FIFO given", "", fifo, fifo, "FIFO"},
		{"FIFO in the folder given", "", filepath.Dir(fifo), fifo, "FIFO"},
		{"FIFO as the option", fifo, "", fifo, "FIFO"},
		{"socket", "", sock, sock, "socket"},
		{"character device", "", "/dev/null", "/dev/null", "character device"},
		{"folder named libnccl.so.2", "", filepath.Dir(folder), folder, "folder"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := searchWithin(t, ncclSpec, c.explicit, envMap("GONCCL_NCCL_LIB", c.env))
			wantFileError(t, err, ErrNotRegular, c.path, c.what)
		})
	}

	// Under a conventional home, the FIFO is noted and the search goes on.
	t.Run("FIFO under NCCL_HOME", func(t *testing.T) {
		home := filepath.Join(root, "home")
		homeFIFO := mkfifo(t, filepath.Join(home, "lib", "libnccl.so.2"))
		conda := copyLib(t, "default", filepath.Join(root, "conda", "lib"))
		f, err := searchWithin(t, ncclSpec, "", envMap("NCCL_HOME", home, "CONDA_PREFIX", filepath.Dir(filepath.Dir(conda))))
		if err != nil {
			t.Fatal(err)
		}
		first := f.Trace[0]
		if f.Path != conda || first.Via != "NCCL_HOME" || first.Path != homeFIFO || !errors.Is(first.Err, ErrNotRegular) {
			t.Fatalf("loaded %s, trace %v; want the FIFO refused, then %s", f.Path, f.Trace, conda)
		}
	})
}

func init() {
	// The search of the child's environment fails, or loads HOSTILE_LOADS,
	// and one attempt of its trace is refused with HOSTILE_WANT ("corrupt" or
	// "not regular") naming the file HOSTILE_PATH.
	children["search-hostile"] = func() error {
		f, err := search(ncclSpec, "", os.Getenv)
		trace := f.Trace
		var le *LoadError
		if errors.As(err, &le) {
			trace = le.Trace
		} else if err != nil || f.Path != os.Getenv("HOSTILE_LOADS") {
			return errorf("search: %s, %v; want a *LoadError, or %s loaded", f.Path, err, os.Getenv("HOSTILE_LOADS"))
		}
		want := map[string]error{"corrupt": ErrCorruptELF, "not regular": ErrNotRegular}[os.Getenv("HOSTILE_WANT")]
		for _, a := range trace {
			var fe *FileError
			if errors.Is(a.Err, want) && errors.As(a.Err, &fe) && fe.Path == os.Getenv("HOSTILE_PATH") {
				fmt.Println(a)
				return nil
			}
		}
		return errorf("no attempt refused %s as %v:\n%v", os.Getenv("HOSTILE_PATH"), want, err)
	}
}

// truncatedLib writes the first n bytes of the fake libnccl.so.2 as
// dir/libnccl.so.2.
func truncatedLib(t *testing.T, dir string, n int) string {
	t.Helper()
	b := fakes.LibBytes(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "libnccl.so.2")
	if err := os.WriteFile(p, b[:n], 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Truncated libraries in every place searched, and hostile files where the
// dynamic loader looks by itself (LD_LIBRARY_PATH), each searched in a child
// process: a regression would kill it with SIGBUS or hang it, not the suite.
func TestSearchRefusesHostileFilesInChild(t *testing.T) {
	root := t.TempDir()
	type hostile struct {
		name string
		env  []string
		path string // the file refused
		want string // HOSTILE_WANT
		load string // the file loaded in the end, if any
	}
	var cases []hostile
	add := func(name, want, path, load string, env ...string) {
		cases = append(cases, hostile{name, env, path, want, load})
	}
	p := truncatedLib(t, filepath.Join(root, "override"), 4096)
	add("first 4096 bytes in GONCCL_NCCL_LIB's folder", "corrupt", p, "", "GONCCL_NCCL_LIB="+filepath.Dir(p))
	p = truncatedLib(t, filepath.Join(root, "conda", "lib"), 4096)
	add("first 4096 bytes under CONDA_PREFIX", "corrupt", p, "", "CONDA_PREFIX="+filepath.Join(root, "conda"))
	p = truncatedLib(t, filepath.Join(root, "home", "lib"), fakes.LoadableEnd(t, fakes.LibBytes(t))-1)
	good := copyLib(t, "default", filepath.Join(root, "conda2", "lib"))
	add("all but the last byte of the segments under NCCL_HOME, then a good one", "corrupt", p, good,
		"NCCL_HOME="+filepath.Join(root, "home"), "CONDA_PREFIX="+filepath.Join(root, "conda2"))
	p = truncatedLib(t, filepath.Join(root, "ld", "trunc"), 4096)
	add("first 4096 bytes in LD_LIBRARY_PATH", "corrupt", p, "", "LD_LIBRARY_PATH="+filepath.Dir(p))
	p = mkfifo(t, filepath.Join(root, "ld", "fifo", "libnccl.so.2"))
	add("FIFO in LD_LIBRARY_PATH", "not regular", p, "", "LD_LIBRARY_PATH=/nonexistent:"+filepath.Dir(p))
	p = mkfifo(t, filepath.Join(root, "ld", "hwcaps", "glibc-hwcaps", "x86-64-v3", "libnccl.so.2"))
	add("FIFO in an LD_LIBRARY_PATH folder's glibc-hwcaps", "not regular", p, "", "LD_LIBRARY_PATH="+filepath.Join(root, "ld", "hwcaps"))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := append([]string{"HOSTILE_PATH=" + c.path, "HOSTILE_WANT=" + c.want, "HOSTILE_LOADS=" + c.load}, c.env...)
			out, err := fakes.RunChild(t, 30*time.Second, "search-hostile", env...)
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
		})
	}
}

// The dynamic loader passes over what it refuses cleanly in LD_LIBRARY_PATH,
// and so does the look before it: only files that would hang or crash it stop
// the search there.
func TestLoaderPathHazard(t *testing.T) {
	root := t.TempDir()
	good := copyLib(t, "default", filepath.Join(root, "good"))
	text := filepath.Join(root, "text", "libnccl.so.2")
	os.MkdirAll(filepath.Dir(text), 0o755)
	os.WriteFile(text, []byte("not a library\n"), 0o644)
	trunc := truncatedLib(t, filepath.Join(root, "trunc"), 4096)
	fifo := mkfifo(t, filepath.Join(root, "fifo", "libnccl.so.2"))
	dir := filepath.Dir
	for _, c := range []struct {
		path string
		want error
	}{
		{"", nil},
		{dir(good), nil},
		{dir(text) + ":" + dir(good), nil},
		{"/nonexistent::" + dir(good) + ";" + dir(trunc), nil}, // the good one comes first
		{dir(text) + ":" + dir(trunc), ErrCorruptELF},
		{dir(fifo), ErrNotRegular},
	} {
		err := load.LoaderPathHazard("libnccl.so.2", c.path)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("LD_LIBRARY_PATH=%s: %v, want %v", c.path, err, c.want)
		}
	}
	// In the search: the soname is not asked of the loader, and the trace says why.
	_, err := searchWithin(t, ncclSpec, "", envMap("LD_LIBRARY_PATH", dir(fifo)))
	var le *LoadError
	if !errors.As(err, &le) || !errors.Is(le.Trace[0].Err, ErrNotRegular) || !strings.Contains(le.Trace[0].Err.Error(), fifo) {
		t.Fatalf("error %v; want the FIFO named in LD_LIBRARY_PATH's attempts", err)
	}
}

// cCompiler names a C compiler for this test binary's architecture: GNU's
// compiler named for the target when installed (aarch64-linux-gnu-gcc in the
// emulated arm64 run of scripts/test-arm64.sh), else $CC, else go env CC.
func cCompiler(t *testing.T) string {
	t.Helper()
	gnu := map[string]string{"amd64": "x86_64-linux-gnu-gcc", "arm64": "aarch64-linux-gnu-gcc"}[runtime.GOARCH]
	if _, err := exec.LookPath(gnu); err == nil {
		return gnu
	}
	if cc := os.Getenv("CC"); cc != "" {
		return cc
	}
	out, err := exec.Command("go", "env", "CC").Output()
	if cc := strings.TrimSpace(string(out)); err == nil && cc != "" {
		return cc
	}
	t.Skip("no C compiler to build a test library with")
	return ""
}

// buildLib compiles a shared library libnccl.so.2 into a new folder from the
// compiler arguments and returns its path.
func buildLib(t *testing.T, args ...string) string {
	t.Helper()
	cc := cCompiler(t)
	out := filepath.Join(t.TempDir(), "libnccl.so.2")
	args = append([]string{"-shared", "-fPIC", "-O2", "-Wl,-soname,libnccl.so.2", "-Wl,-Bsymbolic", "-o", out}, args...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	if err := load.CheckCandidate(out); err != nil {
		t.Fatalf("%s built a library this process cannot load: %v", cc, err)
	}
	return out
}

// fakeNCCLWithVersion builds nccltest's fakenccl.c reporting the version code:
// the fake NCCL in every other respect. The variant "absurd" of the fakes
// (-DFAKENCCL_VERSION_CODE=99999999), where nccltest builds it, serves
// instead: prebuilt fakes of emulated runs then have it too.
func fakeNCCLWithVersion(t *testing.T, code int) string {
	t.Helper()
	if code == 99999999 {
		if p := filepath.Join(FakeDir(t), "absurd", "libnccl.so.2"); load.CheckCandidate(p) == nil {
			return p
		}
	}
	cudart := FakeCUDART(t)
	dir := t.TempDir()
	if err := os.CopyFS(dir, nccltest.Sources()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fakenccl.c")
	return buildLib(t, "-pthread", fmt.Sprintf("-DFAKENCCL_VERSION_CODE=%d", code), path,
		"-L"+cudart, "-l:libcudart.so.12", "-Wl,-rpath,"+cudart, "-lm")
}

// libWithGetVersion builds a library whose only function is ncclGetVersion,
// with the given body.
func libWithGetVersion(t *testing.T, body string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "getversion.c")
	if err := os.WriteFile(src, []byte("int ncclGetVersion(int *v) { "+body+" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return buildLib(t, src)
}

func TestSearchRefusesAbsurdVersion(t *testing.T) {
	absurd := fakeNCCLWithVersion(t, 99999999)
	_, err := Open(WithLibrary(absurd), WithoutCUDARuntime())
	var ve *VersionError
	if !errors.Is(err, ErrBadVersion) || !errors.As(err, &ve) {
		t.Fatalf("Open = %v; want a *VersionError matching ErrBadVersion", err)
	}
	if real, _ := filepath.EvalSymlinks(absurd); ve.Code != 99999999 || ve.Path != real || !strings.Contains(err.Error(), absurd) || !strings.Contains(err.Error(), "99999999") {
		t.Fatalf("VersionError{%s, %d}: %v; want the file and the raw code named", ve.Path, ve.Code, err)
	}
	zero := libWithGetVersion(t, "*v = 0; return 0;")
	if _, err := Open(WithLibrary(zero), WithoutCUDARuntime()); !errors.Is(err, ErrBadVersion) || !strings.Contains(err.Error(), zero) {
		t.Fatalf("version code 0: %v; want ErrBadVersion naming %s", err, zero)
	}
	// Under a conventional home, the library is noted and the search goes on.
	root := t.TempDir()
	home := filepath.Join(root, "home")
	os.MkdirAll(filepath.Join(home, "lib"), 0o755)
	if err := os.Symlink(absurd, filepath.Join(home, "lib", "libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	conda := copyLib(t, "default", filepath.Join(root, "conda", "lib"))
	f, err := search(ncclSpec, "", envMap("NCCL_HOME", home, "CONDA_PREFIX", filepath.Join(root, "conda")))
	if err != nil || f.Path != conda || !errors.Is(f.Trace[0].Err, ErrBadVersion) {
		t.Fatalf("loaded %s, %v, trace %v; want the absurd version refused, then %s", f.Path, err, f.Trace, conda)
	}
}

func TestPlausibleVersion(t *testing.T) {
	for code, want := range map[int32]bool{
		-22803: false, -1: false, 0: false, 999: false, 1000: false, 1999: false,
		2000: true, 2304: true, 2804: true, 9999: false, 10000: false, 19999: false,
		20900: true, 21403: true, 22803: true, 23007: true, 30000: true, 39999: true,
		40000: false, 99999999: false, 1<<31 - 1: false,
	} {
		if plausibleVersion(code) != want {
			t.Errorf("plausibleVersion(%d) = %v (%v)", code, !want, abi.DecodeVersion(int(code)))
		}
	}
}

func TestGetVersionFailureNamesTheFile(t *testing.T) {
	lib := libWithGetVersion(t, "*v = 22803; return 3; /* ncclInternalError */")
	_, err := Open(WithLibrary(lib), WithoutCUDARuntime())
	var fe *FileError
	if !errors.Is(err, ErrInternal) || !errors.As(err, &fe) || fe.Path != lib || !strings.Contains(err.Error(), lib) ||
		!strings.Contains(err.Error(), "ncclGetVersion") {
		t.Fatalf("Open = %v; want ncclGetVersion's ncclInternalError naming %s", err, lib)
	}
}

// asNobody runs fn where permission bits deny: as it is for an ordinary user;
// for root, on an OS thread of its own whose effective user is nobody (65534).
// Linux keeps credentials per thread, and setresuid(2) made raw changes the
// caller's alone (Go's syscall.Setuid changes every thread's). The thread is
// never handed back: fn's goroutine exits locked, and the runtime ends the
// thread with it.
func asNobody(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		fn()
		return
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 65534, ^uintptr(0)); e != 0 {
			done <- e
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Skipf("running as root, and cannot drop privileges on a thread: %v", err)
	}
}

func TestPermissionProblemsReported(t *testing.T) {
	root := t.TempDir()
	// nobody must reach root: t.TempDir's folders are root's, mode 0700.
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lib := func(dir string) {
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "libnccl.so.2"), []byte("x"), 0o644)
	}
	locked := filepath.Join(root, "locked") // not searchable: nothing inside can be looked at
	lib(locked)
	home := filepath.Join(root, "home")
	lib(filepath.Join(home, "lib"))
	venv := filepath.Join(root, "venv")
	lib(filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib"))
	unreadable := filepath.Join(venv, "lib") // searchable, not listable: the python3* glob cannot see
	for d, mode := range map[string]fs.FileMode{locked: 0, filepath.Join(home, "lib"): 0, unreadable: 0o111} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(d, 0o755) // for t.TempDir's removal
	}

	var override error
	var homes, wheel []Attempt
	asNobody(t, func() {
		_, override = search(ncclSpec, "", envMap("GONCCL_NCCL_LIB", locked))
		homes = traceOf(search(ncclSpec, "", envMap("NCCL_HOME", home)))
		wheel = traceOf(search(ncclSpec, "", envMap("VIRTUAL_ENV", venv)))
	})
	if !errors.Is(override, fs.ErrPermission) || errors.Is(override, ErrNotFound) || !strings.Contains(override.Error(), locked) {
		t.Errorf("GONCCL_NCCL_LIB=%s (not searchable): %v; want a permission error naming it", locked, override)
	}
	// The homes fall through (to a fake another test loaded, maybe): their
	// attempts say why.
	if len(homes) == 0 || homes[0].Via != "NCCL_HOME" || !errors.Is(homes[0].Err, fs.ErrPermission) {
		t.Errorf("NCCL_HOME with lib not searchable: trace %v; want a permission error first", homes)
	}
	if len(wheel) == 0 || !errors.Is(wheel[0].Err, fs.ErrPermission) || !strings.Contains(wheel[0].Err.Error(), unreadable) {
		t.Errorf("VIRTUAL_ENV with lib not listable: trace %v; want a permission error naming %s", wheel, unreadable)
	}
}

// traceOf is the trace of a search, whether it loaded or failed.
func traceOf(f LibraryFile, err error) []Attempt {
	var le *LoadError
	if errors.As(err, &le) {
		return le.Trace
	}
	return f.Trace
}

// Environment values appear in errors quoted, escaped and cut: a 100 KB value
// with newlines gives a message of a few hundred bytes, one line per attempt.
func TestErrorsQuoteAndBoundValues(t *testing.T) {
	big := "/" + strings.Repeat("x\n", 50_000)
	for _, env := range [][]string{
		{"GONCCL_NCCL_LIB", big},
		{"GONCCL_NCCL_LIB", "relative\npath"},
		{"NUMBA_NCCLLIB", big},
		{"NCCL_HOME", big},
		{"VIRTUAL_ENV", big, "CONDA_PREFIX", "not/absolute\x00"},
	} {
		// The error, or where a home falls through to a fake another test
		// loaded, the trace's lines.
		f, err := search(ncclSpec, "", envMap(env...))
		trace, msg, extra := traceOf(f, err), "", 1
		if err != nil {
			msg = err.Error()
		} else {
			for _, a := range trace {
				msg += a.String() + "\n"
			}
			extra = 0
		}
		if lines := strings.Count(msg, "\n"); len(msg) > 4096 || lines != len(trace)+extra {
			t.Fatalf("%s: a message of %d bytes, %d lines for %d attempts:\n%.2000s", env[0], len(msg), lines+1, len(trace), msg)
		}
		if strings.Contains(env[1], "x\n") && !strings.Contains(msg, `x\nx\n`) || len(env[1]) > load.MaxShown && !strings.Contains(msg, `x"… (100`) {
			t.Fatalf("%s: the value is not shown escaped and with its length:\n%s", env[0], msg)
		}
	}
}

// nccl-info, the command users run first, answers within 5 s with a clear
// error for each hostile library.
func TestNCCLInfoHostileLibraries(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build nccl-info with")
	}
	bin := filepath.Join(t.TempDir(), "nccl-info")
	build := exec.Command("go", "build", "-o", bin, "./cmd/nccl-info")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/nccl-info: %v\n%s", err, out)
	}
	root := t.TempDir()
	fifo := mkfifo(t, filepath.Join(root, "fifo", "libnccl.so.2"))
	trunc := truncatedLib(t, filepath.Join(root, "trunc"), 4096)
	absurd := fakeNCCLWithVersion(t, 99999999)
	limit := 5 * time.Second
	emu := os.Getenv("GONCCL_TEST_EMULATOR")
	if emu != "" {
		limit = 30 * time.Second // qemu starts a Go binary in seconds
	}
	for _, c := range []struct{ name, lib, words string }{
		{"FIFO", filepath.Dir(fifo), fifo + ": not a regular file: it is a FIFO"},
		{"truncated", trunc, trunc + ": truncated or corrupt ELF file"},
		{"absurd version", absurd, absurd + ": ncclGetVersion reports version code 99999999"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			args := []string{bin}
			if emu != "" {
				args = append([]string{emu}, args...)
			}
			cmd := exec.CommandContext(ctx, args[0], args[1:]...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GONCCL_NCCL_LIB=" + c.lib, "QEMU_LD_PREFIX=" + os.Getenv("QEMU_LD_PREFIX")}
			cmd.WaitDelay = time.Second
			start := time.Now()
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("nccl-info after %v: %v (want exit status 1 within %v)\n%s", time.Since(start).Round(time.Millisecond), err, limit, out)
			}
			if !strings.Contains(string(out), "NOT LOADED: GONCCL_NCCL_LIB=") || !strings.Contains(string(out), c.words) {
				t.Fatalf("nccl-info does not say %q:\n%s", c.words, out)
			}
		})
	}
}

func init() {
	// The search of the child's environment must load HOSTILE_LOADS.
	children["search-loads"] = func() error {
		f, err := search(ncclSpec, "", os.Getenv)
		if err != nil || f.Path != os.Getenv("HOSTILE_LOADS") {
			return errorf("search: %s, %v; want %s loaded\ntrace: %v", f.Path, err, os.Getenv("HOSTILE_LOADS"), f.Trace)
		}
		return nil
	}
}

// TestRefusedLibraryIsUnloaded: a library refused after dlopen (here for an
// absurd version, under NCCL_HOME) is closed again. Left mapped, the dynamic
// loader would hand it back for the soname, and the good library on
// LD_LIBRARY_PATH would never load.
func TestRefusedLibraryIsUnloaded(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := os.MkdirAll(filepath.Join(home, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	absurd := filepath.Join(FakeDir(t), "absurd", "libnccl.so.2")
	if err := os.Symlink(absurd, filepath.Join(home, "lib", "libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(FakeDir(t), "default")
	loads, err := filepath.EvalSymlinks(filepath.Join(good, "libnccl.so.2"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := fakes.RunChild(t, time.Minute, "search-loads", "NCCL_HOME="+home, "LD_LIBRARY_PATH="+good, "HOSTILE_LOADS="+loads)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
