package nccltest_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
	"github.com/gonccl/nccl/nccltest"
)

// allReduce sums random vectors across ranks on the library's fake GPUs and
// checks every element against a sum computed here.
func allReduce(t *testing.T, lib *nccl.Library, ranks, n int) {
	t.Helper()
	devs := make([]int, ranks)
	for i := range devs {
		devs[i] = i
	}
	comms, err := lib.InitAll(context.Background(), devs, nil)
	if err != nil {
		t.Fatal(err)
	}
	cu := lib.CUDA()
	want := make([]int32, n)
	bufs := make([]nccl.Buffer, ranks)
	streams := make([]nccl.Stream, ranks)
	for r, c := range comms {
		host := make([]int32, n)
		for i := range host {
			host[i] = rand.Int32N(1 << 20)
			want[i] += host[i]
		}
		if bufs[r], err = cu.Alloc(c.Device(), nccl.Int32, n); err != nil {
			t.Fatal(err)
		}
		if err := nccl.CopyIn(bufs[r], host); err != nil {
			t.Fatal(err)
		}
		if streams[r], err = cu.NewStream(c.Device(), nccl.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
	}
	if err := lib.Group(func() error {
		for r, c := range comms {
			if err := c.AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		if err := streams[r].Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]int32, n)
		if err := nccl.CopyOut(got, bufs[r]); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("rank %d element %d = %d, want %d", r, i, got[i], want[i])
			}
		}
		bufs[r].Free()
		streams[r].Destroy()
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSetenv: a test that calls Setenv finds the fakes through nccl.Open
// alone, as a program would, with the variant and number of GPUs asked for.
func TestSetenv(t *testing.T) {
	for _, tc := range []struct {
		variant, version string
		gpus             int
	}{{"default", "2.28.3", 3}, {"v230", "2.30.7", 2}, {"old", "2.14.3", 4}} {
		t.Run(tc.variant, func(t *testing.T) {
			nccltest.Setenv(t, tc.variant, tc.gpus)
			lib, err := nccl.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer lib.Close()
			if v := lib.Version().String(); v != tc.version {
				t.Fatalf("variant %s reports NCCL %s, want %s", tc.variant, v, tc.version)
			}
			if n, err := lib.CUDA().DeviceCount(); err != nil || n != tc.gpus {
				t.Fatalf("DeviceCount = %d, %v; want %d", n, err, tc.gpus)
			}
			allReduce(t, lib, tc.gpus, 1000)
		})
	}
}

// TestBuildIntoMovable: a folder BuildInto filled still works after it is
// moved (each variant finds the fake cudart through $ORIGIN), and every
// variant of Variants is in it. The moved libraries run in a fresh process:
// in this one, the cached build's cudart, loaded first, would answer to the
// soname the moved NCCL asks for.
func TestBuildIntoMovable(t *testing.T) {
	if dir := os.Getenv("NCCLTEST_MOVED"); dir != "" { // the fresh process
		d := nccltest.Dir(dir)
		lib, err := nccl.Open(nccl.WithLibrary(d.NCCL("vccl11")), nccl.WithCUDARuntime(d.CUDART()))
		if err != nil {
			t.Fatal(err)
		}
		defer lib.Close()
		if got := lib.Path; got != filepath.Join(d.NCCL("vccl11"), "libnccl.so.2") {
			t.Fatalf("loaded %s", got)
		}
		allReduce(t, lib, 2, 4096)
		return
	}
	if testing.Short() {
		t.Skip("compiles the fakes")
	}
	tmp := t.TempDir()
	if err := nccltest.BuildInto(filepath.Join(tmp, "a"), ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "a"), filepath.Join(tmp, "b")); err != nil {
		t.Fatal(err)
	}
	d := nccltest.Dir(filepath.Join(tmp, "b"))
	for _, v := range nccltest.Variants() {
		if _, err := os.Stat(filepath.Join(d.NCCL(v.Name), "libnccl.so.2")); err != nil {
			t.Errorf("variant %s (%s): %v", v.Name, v.Stands, err)
		}
	}
	cmd := fakes.SelfCommand(context.Background(), "-test.run=^TestBuildIntoMovable$", "-test.v")
	cmd.Env = append(os.Environ(), "NCCLTEST_MOVED="+string(d), "FAKECUDA_DEVICES=2", "GONCCL_NCCL_LIB=", "GONCCL_CUDART_LIB=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestBuildIntoMovable") {
		t.Fatalf("the moved fakes in a fresh process: %v\n%s", err, out)
	}
}

func ExampleBuild() {
	d, err := nccltest.Build() // compiled once, then from the cache
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open(nccl.WithLibrary(d.NCCL("v230")), nccl.WithCUDARuntime(d.CUDART()))
	if err != nil {
		log.Fatal(err)
	}
	defer lib.Close()
	fmt.Println("NCCL", lib.Version())
	// Output: NCCL 2.30.7
}
