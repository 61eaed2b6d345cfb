package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gonccl/nccl/launch"
)

// TestJobReport: nccl-info names the launcher, the rank and size, and the way
// the unique id would travel, or what is wrong, for each launcher's variables.
func TestJobReport(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // lines of the text report, in order
	}{
		{"alone", nil, []string{"launcher  none: rank 0 of 1, local rank 0", "unique id via auto: none needed: a job of one"}},
		{"torchrun's store", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1",
			"MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "job7"},
			[]string{"launcher  torchrun: rank 1 of 2, local rank 1",
				"unique id via store: the TCPStore at 10.0.0.1:29500, key gonccl/job7/0/default/unique_id"}},
		{"mpirun with NCCL_COMM_ID", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "NCCL_COMM_ID": "10.0.0.2:29600"},
			[]string{"launcher  openmpi: rank 0 of 4, local rank 0", "unique id via commid: NCCL's bootstrap at 10.0.0.2:29600"}},
		{"mpirun without a way", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"},
			[]string{"launcher  openmpi: rank 0 of 4", "unique id NO WAY: ", "mpirun -x NCCL_COMM_ID="}},
		{"a bad variable", map[string]string{"RANK": "2", "WORLD_SIZE": "2"},
			[]string{"NOT PLACED: ", "RANK"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := placeJob(launch.Options{Getenv: func(k string) string { return c.env[k] }})
			var b bytes.Buffer
			writeJob(&b, r)
			out := b.String()
			rest := out
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("report lacks %q (in order):\n%s", w, out)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}
