package launch_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/gonccl/nccl/launch"
)

// A worker of `torchrun --nproc-per-node=2` on the second of two nodes: where
// it stands, and where torchrun's store is.
func ExampleDetectWith() {
	env := map[string]string{
		"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job7",
		"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
	}
	job, err := launch.DetectWith(launch.Options{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		log.Fatal(err)
	}
	via, _ := launch.Choose(job, launch.Share{})
	fmt.Printf("rank %d of %d, GPU %d, node %d (%s)\n", job.Rank, job.Size, job.LocalRank, job.Node, job.Launcher)
	fmt.Printf("store %s, id via %s under %s\n", job.StoreAddr, via, launch.IDKey(job, ""))
	// Output:
	// rank 3 of 4, GPU 1, node 1 (torchrun)
	// store node0:29500, id via store under gonccl/job7/0/default/unique_id
}

// A Go program joins the store of a PyTorch job, where Python ranks run
//
//	store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
//	store.set("config", b"...")
//	store.wait(["go/ready"])
func ExampleDialStore() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := launch.DialStore(ctx, net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	config, err := store.Get(ctx, "config") // waits until Python sets it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("config: %q\n", config)
	if err := store.Set(ctx, "go/ready", []byte("1")); err != nil {
		log.Fatal(err)
	}
}
