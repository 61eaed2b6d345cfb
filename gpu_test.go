//go:build gpu

package nccl_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// GPU tests run against the real NCCL and CUDA runtime that the search finds
// (GONCCL_NCCL_LIB and friends choose): cross-compile with
//
//	CGO_ENABLED=0 go test -tags gpu -c -o nccl-gpu.test .
//
// and run the binary on a machine with GPUs (scripts/gpu-check.sh).

func openReal(t *testing.T) (*nccl.Library, int) {
	t.Helper()
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.CUDA().DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %s from %s (%s); %d GPUs", l.Version(), l.Path, l.Via, n)
	return l, n
}

// TestGPUAllReduceFloat32 is the smallest proof: one goroutine per GPU, the id
// by value, a float32 sum checked element by element.
func TestGPUAllReduceFloat32(t *testing.T) {
	l, n := openReal(t)
	if n < 2 {
		t.Skip("needs 2 GPUs")
	}
	ranks := initRanks(t, l, n)
	cu := l.CUDA()
	const elems = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([][]float32, n)
	want := make([]float32, elems)
	for r := range in {
		in[r] = make([]float32, elems)
		for i := range in[r] {
			in[r][i] = float32(rng.IntN(2001) - 1000) // exact sums in float32
			want[i] += in[r][i]
		}
	}
	bufs := make([]nccl.DevicePtr, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host := make([]byte, 4*elems)
			for i, v := range in[r] {
				binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(v))
			}
			var err error
			if bufs[r], err = cu.Malloc(rk.dev, 4*elems); err != nil {
				errs[r] = err
				return
			}
			if err = cu.CopyToDevice(bufs[r], host); err != nil {
				errs[r] = err
				return
			}
			if err = rk.comm.AllReduce(bufs[r], bufs[r], elems, abi.Float32, abi.Sum, rk.s); err != nil {
				errs[r] = err
				return
			}
			if err = cu.StreamSynchronize(rk.s); err != nil {
				errs[r] = err
				return
			}
			errs[r] = cu.CopyFromDevice(host, bufs[r])
			for i := range elems {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:])); got != want[i] {
					t.Errorf("rank %d element %d = %v, want %v", r, i, got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		cu.Free(bufs[r])
	}
}

// TestGPUCollectives runs the fake-library suite's cases on the real library:
// every collective it has, every type, every reduction, in place and not; one
// goroutine per GPU, each with its own InitRank.
func TestGPUCollectives(t *testing.T) {
	l, n := openReal(t)
	ranks := initRanks(t, l, n)
	before := checked.cases.Load()
	runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 7)))
	t.Logf("%d rank-results checked, %d elements", checked.cases.Load()-before, checked.elements.Load())
}

// TestGPUCollectivesInitAll is the same from communicators made by one
// ncclCommInitAll call in one process.
func TestGPUCollectivesInitAll(t *testing.T) {
	l, n := openReal(t)
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	comms, err := l.InitAll(devs)
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]rank, n)
	for i, c := range comms {
		s, err := l.CUDA().StreamCreate(i, abi.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		ranks[i] = rank{comm: c, s: s, dev: i}
	}
	defer func() {
		for _, rk := range ranks {
			rk.comm.Destroy()
			l.CUDA().StreamDestroy(rk.s)
		}
	}()
	before := checked.cases.Load()
	runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 8)))
	t.Logf("%d rank-results checked", checked.cases.Load()-before)
}

// TestGPUCollectivesMultiProcess runs the cases with one process per GPU: the
// test binary starts itself once per rank (TestGPUChildRank), the ranks meet
// through NCCL_COMM_ID, and each checks its own results against inputs it
// regenerates for every rank from the shared seed.
func TestGPUCollectivesMultiProcess(t *testing.T) {
	_, n := openReal(t)
	port := 29000 + os.Getpid()%900
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGPUChildRank$", "-test.v", "-test.timeout=240s")
		cmd.Env = append(os.Environ(), fmt.Sprintf("GONCCL_GPU_RANK=%d", r), fmt.Sprintf("GONCCL_GPU_WORLD=%d", n),
			fmt.Sprintf("NCCL_COMM_ID=127.0.0.1:%d", port))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		t.Logf("rank %d process:\n%s", r, lastLines(outs[r].String(), 4))
		if err != nil {
			t.Errorf("rank %d process: %v", r, err)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestGPUChildRank is one rank of TestGPUCollectivesMultiProcess.
func TestGPUChildRank(t *testing.T) {
	me, err1 := strconv.Atoi(os.Getenv("GONCCL_GPU_RANK"))
	n, err2 := strconv.Atoi(os.Getenv("GONCCL_GPU_WORLD"))
	if err1 != nil || err2 != nil {
		t.Skip("run by TestGPUCollectivesMultiProcess")
	}
	l, err := nccl.Open()
	if err != nil {
		t.Fatal(err)
	}
	id, err := l.GetUniqueID() // from NCCL_COMM_ID: the same on every rank
	if err != nil {
		t.Fatal(err)
	}
	comm, err := l.InitRank(me, id, n, me)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	s, err := l.CUDA().StreamCreate(me, abi.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]rank, n)
	ranks[me] = rank{comm: comm, s: s, dev: me}
	runAllCases(t, l, ranks, rand.New(rand.NewPCG(uint64(n), 9)))
	t.Logf("rank %d of %d (pid %d): %d results checked, %d elements", me, n, os.Getpid(), checked.cases.Load(), checked.elements.Load())
}

// TestGPUCopyToDeviceComplete: CopyToDevice is documented as synchronous, so
// work a non-blocking stream starts right after it (which CUDA does not order
// after the legacy stream's copy) must see the new bytes. CUDA returns from a
// pageable host-to-device cudaMemcpy once the data is staged, before its DMA
// lands; each size is tried many times with fresh bytes.
func TestGPUCopyToDeviceComplete(t *testing.T) {
	l, _ := openReal(t)
	cu := l.CUDA()
	s, err := cu.StreamCreate(0, abi.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer cu.StreamDestroy(s)
	const most = 4 << 20
	a, _ := cu.Malloc(0, most)
	b, _ := cu.Malloc(0, most)
	defer cu.Free(a)
	defer cu.Free(b)
	host, got := make([]byte, most), make([]byte, most)
	for _, size := range []int{256, 8192, 65536, 1 << 20, most} {
		stale := 0
		for it := range 200 {
			for k := range host[:size] {
				host[k] = byte(it*31 + k%251)
			}
			if err := cu.CopyToDevice(a, host[:size]); err != nil {
				t.Fatal(err)
			}
			if err := cu.MemcpyAsync(uintptr(b), uintptr(a), size, abi.MemcpyDeviceToDevice, s); err != nil {
				t.Fatal(err)
			}
			if err := cu.StreamSynchronize(s); err != nil {
				t.Fatal(err)
			}
			if err := cu.CopyFromDevice(got[:size], b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:size], host[:size]) {
				stale++
			}
		}
		if stale > 0 {
			t.Errorf("%d bytes: %d of 200 copies not complete when CopyToDevice returned", size, stale)
		} else {
			t.Logf("%d bytes: 200 of 200 copies complete", size)
		}
	}
}
