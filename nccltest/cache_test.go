package nccltest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// wrapper is a C compiler that logs each invocation to log and reports
// version as its --version, compiling with the real one.
func wrapper(t *testing.T, version string) (cc, log string) {
	t.Helper()
	real, err := compiler("")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "log")
	cc = filepath.Join(dir, "cc")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >>%q\nif [ \"$1\" = --version ]; then echo %q; exit 0; fi\nexec %q \"$@\"\n", log, version, real)
	if err := os.WriteFile(cc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return cc, log
}

// compiles counts the compilations the wrapper logged.
func compiles(t *testing.T, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "-shared")
}

// TestCacheBuildsOnce: processes (here goroutines, each with its own lock
// file descriptor) asking for a missing build wait while one compiles; a
// build in the cache is used without compiling; a build missing a library is
// compiled again; nothing temporary is left.
func TestCacheBuildsOnce(t *testing.T) {
	cc, log := wrapper(t, "cc 1")
	cache := t.TempDir()
	key, err := cacheKey(cc)
	if err != nil {
		t.Fatal(err)
	}
	per := 1 + len(variants) // cudart and each variant
	var wg sync.WaitGroup
	dirs := make([]Dir, 3)
	errs := make([]error, 3)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = cached(cache, key, cc)
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if dirs[i] != dirs[0] || !complete(string(dirs[i])) {
			t.Fatalf("callers got %q and %q (complete: %v)", dirs[0], dirs[i], complete(string(dirs[i])))
		}
	}
	if n := compiles(t, log); n != per {
		t.Fatalf("three callers at once compiled %d times, want %d (one build)", n, per)
	}
	if _, err := cached(cache, key, cc); err != nil {
		t.Fatal(err)
	}
	if n := compiles(t, log); n != per {
		t.Fatalf("a build in the cache compiled again: %d compilations, want %d", n, per)
	}
	if err := os.Remove(filepath.Join(string(dirs[0]), "v230", "libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	if d, err := cached(cache, key, cc); err != nil || !complete(string(d)) {
		t.Fatalf("after a library was removed: %q, %v", d, err)
	}
	if n := compiles(t, log); n != 2*per {
		t.Fatalf("a build missing a library: %d compilations in all, want %d", n, 2*per)
	}
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if e.Name() != key && e.Name() != key+".lock" {
			t.Errorf("left in the cache: %s", e.Name())
		}
	}
}

// TestCacheKey: the key is the same for the same compiler and sources, and
// another compiler version makes another key.
func TestCacheKey(t *testing.T) {
	cc1, _ := wrapper(t, "cc 1")
	cc2, _ := wrapper(t, "cc 2")
	k1, err := cacheKey(cc1)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := cacheKey(cc1)
	if k1 != again {
		t.Fatalf("one compiler, two keys: %s, %s", k1, again)
	}
	// The wrappers' paths differ too; the version alone must change the key.
	v2 := filepath.Join(filepath.Dir(cc1), "cc")
	if err := os.WriteFile(v2, []byte(strings.Replace(mustRead(t, cc1), "cc 1", "cc 2", 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	k2, _ := cacheKey(v2)
	if k2 == k1 {
		t.Fatalf("compiler versions 1 and 2 share key %s", k1)
	}
	if k3, _ := cacheKey(cc2); k3 == k1 {
		t.Fatalf("two compilers share key %s", k1)
	}
	if _, err := cacheKey(filepath.Join(t.TempDir(), "no-such-cc")); err == nil {
		t.Fatal("a missing compiler made a key")
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBuildIntoRefusesMissingCompiler: a compiler that is not there is a
// clear error, before anything is written.
func TestBuildIntoRefusesMissingCompiler(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	err := BuildInto(dir, "no-such-compiler-gonccl")
	if err == nil || !strings.Contains(err.Error(), "no C compiler") {
		t.Fatalf("BuildInto with a missing compiler: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("BuildInto wrote %s before failing", dir)
	}
}
