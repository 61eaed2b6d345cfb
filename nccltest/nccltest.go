// Package nccltest builds the fake NCCL and CUDA runtime that gonccl itself is
// tested on, so that a program using gonccl can run its own tests on a machine
// without a GPU, with nothing but a C compiler:
//
//	func TestTrain(t *testing.T) {
//		nccltest.Setenv(t, "default", 4) // NCCL 2.28.3 on 4 fake GPUs
//		lib, err := nccl.Open()          // finds the fakes as a program would
//		...
//	}
//
// The fakes are C libraries (csrc/, embedded here; the fake NCCL's parts in
// csrc/fakenccl/) with NCCL's and the CUDA
// runtime's ABI: fake GPUs whose memory is host memory, ranks that meet across
// goroutines and processes (over loopback TCP, at NCCL_COMM_ID as NCCL does),
// every collective computed for real, and NCCL's failure behaviour (a failed
// group, an abort, a dead peer) as NCCL 2.28 to 2.30 show it. Variants stand in
// for other builds: an NCCL 2.14 without the newer functions, 2.30.7 with
// revoke, grow and one-sided puts, VCCL with its native ncclAlltoAllv.
//
// Build compiles them once per version of their sources and C compiler into a
// cache (os.UserCacheDir()/gonccl/fakes/KEY, or $GONCCL_FAKE_CACHE), so that a
// second test run takes none of the compile. From a shell, the same is
//
//	go run github.com/gonccl/nccl/cmd/nccl-fakes            # prints the variables to set
//	go run github.com/gonccl/nccl/cmd/nccl-fakes -o DIR -cc aarch64-linux-gnu-gcc
//
// Layout of a folder of fakes: DIR/cudart/libcudart.so.12 and, per variant,
// DIR/VARIANT/libnccl.so.2 (which finds cudart through $ORIGIN, so the folder
// can move).
package nccltest

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

//go:embed csrc
var csrc embed.FS

// Sources returns the C sources of the fakes: fakenccl.c (which includes the
// parts in fakenccl/) and fakecudart.c.
func Sources() fs.FS {
	sub, _ := fs.Sub(csrc, "csrc")
	return sub
}

// A Variant is one build of the fake NCCL.
type Variant struct {
	Name    string   // its folder: GONCCL_NCCL_LIB=DIR/Name
	Stands  string   // the library it stands in for
	Defines []string // its preprocessor symbols for fakenccl.c
}

var variants = []Variant{
	{"default", "NCCL 2.28.3", nil},
	{"old", "NCCL 2.14.3: no Split, Register, AlltoAll, window or fault-tolerance functions", []string{"-DFAKENCCL_OLD"}},
	{"v230", "NCCL 2.30.7: revoke, shrink, grow, one-sided puts and signals, suspend", []string{"-DFAKENCCL_230"}},
	{"vccl11", "VCCL 2.29.2 with the 11-argument ncclAlltoAllv", []string{"-DFAKENCCL_VCCL=11"}},
	{"vccl10", "VCCL 2.29.2 with the 10-argument ncclAlltoAllv", []string{"-DFAKENCCL_VCCL=10"}},
	{"broken", "a library without ncclCommInitRank", []string{"-DFAKENCCL_BROKEN"}},
	{"ancient", "NCCL 2.12.3, older than gonccl supports", []string{"-DFAKENCCL_VERSION_CODE=21203"}},
	{"absurd", "a version code no NCCL release has", []string{"-DFAKENCCL_VERSION_CODE=99999999"}},
}

// Variants lists the builds of the fake NCCL that Build makes.
func Variants() []Variant {
	out := make([]Variant, len(variants))
	for i, v := range variants {
		out[i] = v
		out[i].Defines = append([]string(nil), v.Defines...)
	}
	return out
}

// Dir is a folder of built fakes.
type Dir string

// NCCL is the folder of a variant's libnccl.so.2, for GONCCL_NCCL_LIB or
// nccl.WithLibrary.
func (d Dir) NCCL(variant string) string { return filepath.Join(string(d), variant) }

// CUDART is the folder of the fake libcudart.so.12, for GONCCL_CUDART_LIB or
// nccl.WithCUDARuntime.
func (d Dir) CUDART() string { return filepath.Join(string(d), "cudart") }

var built struct {
	once sync.Once
	dir  Dir
	err  error
}

// Build returns the folder of the fakes built from these sources by the C
// compiler ($CC, else the Go toolchain's `go env CC`, else cc), compiling them
// only when the cache has no such build. $GONCCL_FAKE_DIR, when set, names a
// folder built before (BuildInto) and is used as it is; $GONCCL_FAKE_CACHE
// names the cache (off: a fresh temporary folder each process). The result
// is computed once per process.
func Build() (Dir, error) {
	built.once.Do(func() { built.dir, built.err = build() })
	return built.dir, built.err
}

// Setenv builds the fakes (Build) and points gonccl at them for the rest of
// the test, as a user's environment would: GONCCL_NCCL_LIB at the variant,
// GONCCL_CUDART_LIB at the fake CUDA runtime, FAKECUDA_DEVICES at the number
// of fake GPUs, and NCCL_COMM_ID cleared. Like tb.Setenv, it cannot be used in
// parallel tests. A failure to build ends the test.
func Setenv(tb testing.TB, variant string, devices int) Dir {
	tb.Helper()
	d, err := Build()
	if err != nil {
		tb.Fatalf("nccltest: %v", err)
	}
	if !known(variant) {
		tb.Fatalf("nccltest: no variant %q (Variants lists them)", variant)
	}
	tb.Setenv("GONCCL_NCCL_LIB", d.NCCL(variant))
	tb.Setenv("GONCCL_CUDART_LIB", d.CUDART())
	tb.Setenv("FAKECUDA_DEVICES", strconv.Itoa(devices))
	tb.Setenv("NCCL_COMM_ID", "")
	return d
}

func known(variant string) bool {
	for _, v := range variants {
		if v.Name == variant {
			return true
		}
	}
	return false
}

func build() (Dir, error) {
	if d := os.Getenv("GONCCL_FAKE_DIR"); d != "" {
		return Dir(d), nil
	}
	cc, err := compiler("")
	if err != nil {
		return "", err
	}
	cache := os.Getenv("GONCCL_FAKE_CACHE")
	if cache == "" {
		if base, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(base, "gonccl", "fakes")
		} else {
			cache = filepath.Join(os.TempDir(), fmt.Sprintf("gonccl-fakes-%d", os.Getuid()))
		}
	}
	if cache == "off" {
		tmp, err := os.MkdirTemp("", "gonccl-fakes-")
		if err != nil {
			return "", err
		}
		return Dir(tmp), BuildInto(tmp, cc)
	}
	key, err := cacheKey(cc)
	if err != nil {
		return "", err
	}
	return cached(cache, key, cc)
}

// cached returns cache/key, building it first when it is missing. One
// process builds while the others wait on a lock; the build goes to a
// temporary folder renamed into place, so a folder under its key is whole.
func cached(cache, key, cc string) (Dir, error) {
	final := filepath.Join(cache, key)
	if complete(final) {
		return Dir(final), nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("the fakes' cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cache, key+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("the fakes' cache: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("the fakes' cache: locking %s: %w", lock.Name(), err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if complete(final) { // another process built it while this one waited
		return Dir(final), nil
	}
	os.RemoveAll(final) // an incomplete folder: a file of it was removed by hand
	tmp, err := os.MkdirTemp(cache, key+".tmp-")
	if err != nil {
		return "", fmt.Errorf("the fakes' cache: %w", err)
	}
	if err := buildInto(tmp, final, cc); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("the fakes' cache: %w", err)
	}
	return Dir(final), nil
}

// complete says whether dir holds every library of a build.
func complete(dir string) bool {
	libs := []string{filepath.Join(dir, "cudart", "libcudart.so.12")}
	for _, v := range variants {
		libs = append(libs, filepath.Join(dir, v.Name, "libnccl.so.2"))
	}
	for _, l := range libs {
		if st, err := os.Stat(l); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			return false
		}
	}
	return true
}

// cacheKey hashes everything a build depends on: the sources, the variants,
// the flags, and the compiler (its path, target and version).
func cacheKey(cc string) (string, error) {
	h := sha256.New()
	var names []string
	fs.WalkDir(csrc, "csrc", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	sort.Strings(names)
	for _, n := range names {
		b, _ := csrc.ReadFile(n)
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	for _, v := range variants {
		fmt.Fprintf(h, "variant %s %q\n", v.Name, v.Defines)
	}
	fmt.Fprintf(h, "flags %q\nlink %s\n", commonFlags, linkForm)
	path, err := exec.LookPath(cc)
	if err != nil {
		return "", fmt.Errorf("the C compiler %q: %w", cc, err)
	}
	machine, err := exec.Command(path, "-dumpmachine").Output()
	if err != nil {
		return "", fmt.Errorf("%s -dumpmachine: %w", cc, err)
	}
	version, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", cc, err)
	}
	fmt.Fprintf(h, "cc %s\n%s\n%s", path, machine, version)
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// compiler is cc, else $CC, else go env CC, else cc.
func compiler(cc string) (string, error) {
	if cc == "" {
		cc = os.Getenv("CC")
	}
	if cc == "" {
		if out, err := exec.Command("go", "env", "CC").Output(); err == nil {
			cc = strings.TrimSpace(string(out))
		}
	}
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("no C compiler to build the fakes (%q: %v); install gcc or set CC", cc, err)
	}
	return cc, nil
}

// linkForm names how buildInto links the variants; it is part of the cache
// key, so a change to the linking (not to the sources or flags) is a new key.
// Change it with the linking.
const linkForm = "soname libnccl.so.2; -Bsymbolic; rpath $ORIGIN/../cudart:HOME/cudart; cudart -Bsymbolic"

var commonFlags = []string{"-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Wno-unused-parameter"}

// BuildInto compiles the fakes into dir with the C compiler cc ("" for the
// one Build would use): a cross compiler builds them for another target, as
// for an emulated arm64 run.
func BuildInto(dir, cc string) error { return buildInto(dir, dir, cc) }

// buildInto compiles into dir the fakes that will live in home: each variant
// finds the fake cudart beside it ($ORIGIN/../cudart, wherever the folder
// moves) and, for a copy of it placed elsewhere (the loader's tests copy
// libraries into folders of their own), in home.
func buildInto(dir, home, cc string) error {
	home, err := filepath.Abs(home)
	if err != nil {
		return err
	}
	cc, err = compiler(cc)
	if err != nil {
		return err
	}
	src, err := os.MkdirTemp("", "gonccl-fakes-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.CopyFS(src, Sources()); err != nil {
		return err
	}
	d := Dir(dir)
	if err := os.MkdirAll(d.CUDART(), 0o755); err != nil {
		return err
	}
	run := func(args ...string) error {
		out, err := exec.Command(cc, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("building the fakes: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
		return nil
	}
	// -Bsymbolic: the fake cudart's calls to its own exported functions
	// (fakecuda_ptr_device, ...) stay inside it even when another copy of it
	// was loaded first into the process (the loader's tests load copies).
	if err := run(append(commonFlags, "-Wl,-soname,libcudart.so.12", "-Wl,-Bsymbolic", "-o", filepath.Join(d.CUDART(), "libcudart.so.12"),
		filepath.Join(src, "fakecudart.c"))...); err != nil {
		return err
	}
	errs := make([]error, len(variants))
	var wg sync.WaitGroup
	for i, v := range variants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = os.MkdirAll(d.NCCL(v.Name), 0o755); errs[i] != nil {
				return
			}
			args := append(append([]string{}, commonFlags...), v.Defines...)
			// -Bsymbolic: each variant calls its own functions even when
			// several variants are loaded in one process.
			args = append(args, "-Wl,-soname,libnccl.so.2", "-Wl,-Bsymbolic", "-o", filepath.Join(d.NCCL(v.Name), "libnccl.so.2"),
				filepath.Join(src, "fakenccl.c"), "-L"+d.CUDART(), "-l:libcudart.so.12",
				"-Wl,-rpath,$ORIGIN/../cudart:"+Dir(home).CUDART(), "-lm")
			errs[i] = run(args...)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
