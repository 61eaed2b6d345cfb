package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

// rankMain runs one rank of TestTorchrunFlow in a child process: it places
// itself from its launcher's variables, gets the id the launcher's way, and
// joins a communicator of the fake NCCL with it (which meets the other
// processes over loopback as NCCL's bootstrap does).
func rankMain() int {
	job, err := Detect()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	lib, err := nccl.Open() // GONCCL_NCCL_LIB, GONCCL_CUDART_LIB: the fakes
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	via, _ := Choose(job, Share{})
	id, err := UniqueID(ctx, lib, job, Share{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	comm, err := lib.InitRank(ctx, job.LocalRank, id, job.Size, job.Rank, nil)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer comm.Close(ctx)
	fmt.Printf("rank %d of %d (%s) via %s: communicator of %d\n", job.Rank, job.Size, job.Launcher, via, comm.Size())
	return 0
}

// TestTorchrunFlow: processes with the variables torchrun's agent gives its
// workers (local_elastic_agent.py), whose MASTER_ADDR:MASTER_PORT is the
// agent's TCPStore (played by the test server), share the id through the
// store and form one communicator; a restart (TORCHELASTIC_RESTART_COUNT)
// does it again on the same store under new keys. NCCL_COMM_ID is unset, as
// under torchrun: NCCL could not bind the store's port.
func TestTorchrunFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := startTestServer(t, false)
	host, port, _ := strings.Cut(srv.addr(), ":")
	const n = 3
	for restart := range 2 {
		var cmds []*exec.Cmd
		var outs []*bytes.Buffer
		for r := range n {
			cmd := fakes.SelfCommand(context.Background(), "-test.run=^$")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.Env = append(os.Environ(), "GONCCL_LAUNCH_TEST_RANK=1", "NCCL_COMM_ID=",
				"GONCCL_NCCL_LIB="+fakes.NCCL(t, "default"), "GONCCL_CUDART_LIB="+fakes.CUDART(t), "FAKECUDA_DEVICES=4",
				fmt.Sprintf("RANK=%d", r), fmt.Sprintf("LOCAL_RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", n),
				fmt.Sprintf("LOCAL_WORLD_SIZE=%d", n), "GROUP_RANK=0", "GROUP_WORLD_SIZE=1", "ROLE_RANK=0", "ROLE_NAME=default",
				"MASTER_ADDR="+host, "MASTER_PORT="+port, fmt.Sprintf("TORCHELASTIC_RESTART_COUNT=%d", restart),
				"TORCHELASTIC_MAX_RESTARTS=1", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_USE_AGENT_STORE=True")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, &out)
		}
		for r, cmd := range cmds {
			err := cmd.Wait()
			want := fmt.Sprintf("rank %d of %d (torchrun) via store: communicator of %d", r, n, n)
			if err != nil || !strings.Contains(outs[r].String(), want) {
				t.Errorf("restart %d, rank %d: %v\n%s", restart, r, err, outs[r])
			}
		}
		if _, ok := srv.value("/" + IDKey(Job{RunID: "none", Restart: restart}, "")); !ok {
			t.Errorf("restart %d: no key %s in the store", restart, IDKey(Job{RunID: "none", Restart: restart}, ""))
		}
	}
}
