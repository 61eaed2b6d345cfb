package nccl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The fake libraries (testdata/fakenccl.c, testdata/fakecudart.c) are built once
// per test binary with the Go toolchain's C compiler, into a temporary folder, or
// taken prebuilt from GONCCL_FAKE_DIR (for targets without a compiler, such as an
// emulated arm64 run). Layout: DIR/cudart/libcudart.so.12 and DIR/<variant>/libnccl.so.2.

// Variants of the fake NCCL, by the preprocessor symbols of fakenccl.c.
var fakeVariants = map[string][]string{
	"default": nil,                               // NCCL 2.28.3
	"old":     {"-DFAKENCCL_OLD"},                // NCCL 2.14.3: no Split, Register, AlltoAll, ...
	"vccl11":  {"-DFAKENCCL_VCCL=11"},            // VCCL 2.29.2, 11-argument ncclAlltoAllv
	"vccl10":  {"-DFAKENCCL_VCCL=10"},            // VCCL 2.29.2, 10-argument ncclAlltoAllv
	"broken":  {"-DFAKENCCL_BROKEN"},             // lacks ncclCommInitRank
	"ancient": {"-DFAKENCCL_VERSION_CODE=21203"}, // reports 2.12.3, older than MinVersion
}

var fakes struct {
	once sync.Once
	dir  string
	err  error
	tmp  string
}

// FakeDir returns the folder holding the fake libraries, building them if needed.
func FakeDir(tb testing.TB) string {
	tb.Helper()
	fakes.once.Do(func() {
		if d := os.Getenv("GONCCL_FAKE_DIR"); d != "" {
			fakes.dir = d
			return
		}
		fakes.tmp, fakes.err = os.MkdirTemp("", "gonccl-fakes-")
		if fakes.err != nil {
			return
		}
		fakes.dir = fakes.tmp
		fakes.err = buildFakes(fakes.dir)
	})
	if fakes.err != nil {
		tb.Fatalf("building the fake libraries: %v", fakes.err)
	}
	return fakes.dir
}

// FakeNCCL is the folder of one variant's libnccl.so.2.
func FakeNCCL(tb testing.TB, variant string) string {
	return filepath.Join(FakeDir(tb), variant)
}

// FakeCUDART is the folder of the fake libcudart.so.12.
func FakeCUDART(tb testing.TB) string {
	return filepath.Join(FakeDir(tb), "cudart")
}

func compiler() (string, error) {
	if cc := os.Getenv("CC"); cc != "" {
		return cc, nil
	}
	out, err := exec.Command("go", "env", "CC").Output()
	if err != nil {
		return "", fmt.Errorf("go env CC: %v", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func buildFakes(dir string) error {
	cc, err := compiler()
	if err != nil {
		return err
	}
	src, err := filepath.Abs("testdata")
	if err != nil {
		return err
	}
	cudart := filepath.Join(dir, "cudart")
	if err := os.MkdirAll(cudart, 0o755); err != nil {
		return err
	}
	common := []string{"-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Wno-unused-parameter"}
	run := func(args ...string) error {
		out, err := exec.Command(cc, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run(append(common, "-Wl,-soname,libcudart.so.12", "-o", filepath.Join(cudart, "libcudart.so.12"),
		filepath.Join(src, "fakecudart.c"))...); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(fakeVariants))
	for name, defs := range fakeVariants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := filepath.Join(dir, name)
			if err := os.MkdirAll(out, 0o755); err != nil {
				errs <- err
				return
			}
			args := append(append([]string{}, common...), defs...)
			// -Bsymbolic: each variant calls its own functions even when several
			// variants are loaded in one test process.
			args = append(args, "-Wl,-soname,libnccl.so.2", "-Wl,-Bsymbolic", "-o", filepath.Join(out, "libnccl.so.2"),
				filepath.Join(src, "fakenccl.c"), "-L"+cudart, "-l:libcudart.so.12", "-Wl,-rpath,"+cudart, "-lm")
			errs <- run(args...)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Child processes: a test that needs a fresh process (the system loader reads
// LD_LIBRARY_PATH at start; a library once loaded stays loaded) re-executes the
// test binary with GONCCL_TEST_CHILD naming one of these.
var children = map[string]func() error{}

// Children lets the external test package add child processes.
var Children = children

func TestMain(m *testing.M) {
	if name := os.Getenv("GONCCL_TEST_CHILD"); name != "" {
		fn, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(2)
		}
		if err := fn(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if fakes.tmp != "" {
		os.RemoveAll(fakes.tmp)
	}
	os.Exit(code)
}

// runChild runs children[name] in a fresh copy of the test binary with env added
// to a clean environment (the fakes already built are passed on), and returns its
// combined output.
func runChild(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{"GONCCL_TEST_CHILD=" + name, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"GONCCL_FAKE_DIR=" + FakeDir(t)}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// RunChild is runChild for the external test package.
var RunChild = runChild
