package nccl_test

import (
	"context"
	"testing"

	"github.com/gonccl/nccl"
)

// TestFakeFreeWaitsForTheDevice: the fake cudaFree synchronizes as CUDA's
// does, so memory freed while a collective on it is still queued is given back
// only after the collective ran. A program that frees its buffers, destroys
// its streams and closes its communicators without a synchronize is correct
// on a GPU, and must be on the fakes too (before, the fake's stream workers
// wrote into freed memory).
func TestFakeFreeWaitsForTheDevice(t *testing.T) {
	l := open(t, "default")
	cu := l.CUDA()
	for round := range 20 {
		comms := initComms(t, l, 2, context.Background(), nil)
		var streams [2]nccl.Stream
		var bufs [2]nccl.Buffer
		for r := range 2 {
			var err error
			if streams[r], err = cu.NewStream(r, nccl.StreamNonBlocking); err != nil {
				t.Fatal(err)
			}
			if bufs[r], err = cu.Alloc(r, nccl.Float32, 1<<16); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Group(func() error {
			for r := range 2 {
				if err := comms[r].AllReduce(bufs[r], bufs[r], nccl.Sum, streams[r]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			if err := bufs[r].Free(); err != nil {
				t.Fatal(err)
			}
			// cudaFree waited for the device: nothing is left on the stream.
			if done, err := streams[r].Query(); err != nil || !done {
				t.Fatalf("round %d, rank %d: stream still busy after cudaFree (done %v, %v)", round, r, done, err)
			}
			if err := streams[r].Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range comms {
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}
