// Package fakes builds the fake libnccl and libcudart of testdata/ for tests.
//
// The libraries are compiled once per test binary with the Go toolchain's C
// compiler (go env CC, or $CC) into a temporary folder, or taken prebuilt from
// GONCCL_FAKE_DIR (for targets without a compiler, such as an emulated arm64
// run). Layout: DIR/cudart/libcudart.so.12 and DIR/<variant>/libnccl.so.2.
package fakes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Variants of the fake NCCL, by the preprocessor symbols of testdata/fakenccl.c.
var Variants = map[string][]string{
	"default": nil,                                  // NCCL 2.28.3
	"old":     {"-DFAKENCCL_OLD"},                   // NCCL 2.14.3: no Split, Register, AlltoAll, ...
	"v230":    {"-DFAKENCCL_230"},                   // NCCL 2.30.7: revoke, grow, RMA, suspend, ...
	"vccl11":  {"-DFAKENCCL_VCCL=11"},               // VCCL 2.29.2, 11-argument ncclAlltoAllv
	"vccl10":  {"-DFAKENCCL_VCCL=10"},               // VCCL 2.29.2, 10-argument ncclAlltoAllv
	"broken":  {"-DFAKENCCL_BROKEN"},                // lacks ncclCommInitRank
	"ancient": {"-DFAKENCCL_VERSION_CODE=21203"},    // reports 2.12.3, older than gonccl supports
	"absurd":  {"-DFAKENCCL_VERSION_CODE=99999999"}, // reports a code no NCCL release has
}

var built struct {
	once sync.Once
	dir  string
	tmp  string
	err  error
}

// Dir returns the folder holding the fake libraries, building them if needed.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := Built()
	if err != nil {
		tb.Fatalf("building the fake libraries: %v", err)
	}
	return dir
}

// Built is Dir for callers without a testing.TB (TestMain).
func Built() (string, error) {
	built.once.Do(func() {
		if d := os.Getenv("GONCCL_FAKE_DIR"); d != "" {
			built.dir = d
			return
		}
		if built.tmp, built.err = os.MkdirTemp("", "gonccl-fakes-"); built.err == nil {
			built.dir = built.tmp
			built.err = Build(built.dir, "")
		}
	})
	return built.dir, built.err
}

// Cleanup removes the folder Dir built, if it built one; call it from TestMain.
func Cleanup() {
	if built.tmp != "" {
		os.RemoveAll(built.tmp)
	}
}

// NCCL is the folder of one variant's libnccl.so.2.
func NCCL(tb testing.TB, variant string) string { return filepath.Join(Dir(tb), variant) }

// CUDART is the folder of the fake libcudart.so.12.
func CUDART(tb testing.TB) string { return filepath.Join(Dir(tb), "cudart") }

// Source is the folder of the C sources (the module's testdata/).
func Source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata")
}

// Build compiles the fakes into dir with cc (default: $CC, then go env CC).
func Build(dir, cc string) error {
	if cc == "" {
		cc = os.Getenv("CC")
	}
	if cc == "" {
		out, err := exec.Command("go", "env", "CC").Output()
		if err != nil {
			return fmt.Errorf("go env CC: %v", err)
		}
		cc = strings.TrimSpace(string(out))
	}
	src := Source()
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
	errs := make(chan error, len(Variants))
	for name, defs := range Variants {
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

// SelfCommand is exec.CommandContext for a fresh copy of the running test
// binary with args. Under emulation without binfmt_misc (scripts/test-arm64.sh)
// a binary cannot start itself: GONCCL_TEST_EMULATOR then names the emulator
// to start it with.
func SelfCommand(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{os.Args[0]}, args...)
	if emu := os.Getenv("GONCCL_TEST_EMULATOR"); emu != "" {
		argv = append([]string{emu}, argv...)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}
