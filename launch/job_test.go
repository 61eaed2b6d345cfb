package launch

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// envOf makes a Getenv from a map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func detectEnv(m map[string]string) (Job, error) {
	return DetectWith(Options{Getenv: envOf(m)})
}

// TestDetectLaunchers: each launcher's variables as it really sets them.
func TestDetectLaunchers(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want Job
	}{
		{"torchrun static", map[string]string{ // local_elastic_agent.py _start_workers
			"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
			"ROLE_RANK": "3", "ROLE_NAME": "default", "GROUP_WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "4",
			"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "2",
			"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True"},
			Job{Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2, Node: 1, RootHost: "node0", Launcher: Torchrun,
				RunID: "none", Restart: 2, StoreAddr: "node0:29500"}},
		{"torchrun c10d, shared store", map[string]string{ // dynamic_rendezvous.py: the store rank 0's agent starts
			"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
			"MASTER_ADDR": "gpu-a1.example", "MASTER_PORT": "41234", "TORCHELASTIC_RUN_ID": "job7",
			"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"},
			Job{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2, Node: 0, RootHost: "gpu-a1.example", Launcher: Torchrun,
				RunID: "job7", StoreAddr: "gpu-a1.example:41234"}},
		{"torchrun without the agent store", map[string]string{ // TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: a free port
			"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "::1", "MASTER_PORT": "5000",
			"TORCHELASTIC_RUN_ID": "r", "TORCHELASTIC_USE_AGENT_STORE": "False"},
			Job{Rank: 1, Size: 2, LocalRank: 1, Node: -1, RootHost: "::1", Launcher: Torchrun, RunID: "r", CommID: "[::1]:5000"}},
		{"torchrun's variables by hand", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512"},
			Job{Rank: 1, Size: 2, LocalRank: 1, Node: -1, RootHost: "127.0.0.1", Launcher: Torchrun, CommID: "127.0.0.1:29512"}},
		{"self-launched", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"GONCCL_LAUNCHER": "self", "GONCCL_RUN_ID": "self-1-2", "NCCL_COMM_ID": "127.0.0.1:29777"},
			Job{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Node: -1, Launcher: Self, RunID: "self-1-2", CommID: "127.0.0.1:29777"}},
		{"Open MPI", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "prterun-host-123@1", "NCCL_COMM_ID": "host:1"},
			Job{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Node: -1, Launcher: OpenMPI, RunID: "prterun-host-123@1", CommID: "host:1"}},
		{"MPICH", map[string]string{"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"},
			Job{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Node: -1, Launcher: MPICH}},
		{"MPICH, no local rank", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2"},
			Job{Rank: 1, Size: 2, LocalRank: 1, Node: -1, Launcher: MPICH}},
		{"srun, 2 nodes", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_STEP_NUM_TASKS": "6",
			"SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_NODELIST": "gpu[07-09]",
			"SLURM_STEP_TASKS_PER_NODE": "4,2", "SLURMD_NODENAME": "gpu08", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"},
			Job{Rank: 5, Size: 6, LocalRank: 1, LocalSize: 2, Node: 1, NodeName: "gpu08", Nodes: []string{"gpu07", "gpu08"},
				RootHost: "gpu07", Launcher: Slurm, RunID: "4242.0", CommID: "gpu07:18936"}},
		{"srun, no local id", map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"},
			Job{Rank: 1, Size: 2, LocalRank: 1, Node: -1, Launcher: Slurm}},
		{"a Slurm batch script, outside srun", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"},
			Job{Size: 1, Node: -1, Launcher: Alone}},
		{"nothing", map[string]string{}, Job{Size: 1, Node: -1, Launcher: Alone}},
		{"GONCCL_RUN_ID over the launcher's", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", "GONCCL_RUN_ID": "mine"},
			Job{Size: 1, Node: -1, Launcher: MPICH, RunID: "mine"}},
	} {
		got, err := detectEnv(c.env)
		if c.want.NodeName == "" {
			got.NodeName = "" // the host name
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v, %v\nwant %+v", c.name, got, err, c.want)
		}
	}
}

// TestDetectPrecedence: the most specific launcher wins when several set
// their variables.
func TestDetectPrecedence(t *testing.T) {
	slurm := map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
		"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0"}
	for _, c := range []struct {
		name string
		env  map[string]string
		want Launcher
		rank int
	}{
		// srun starts one torchrun agent per node; its workers inherit the
		// agent's Slurm task variables.
		{"torchrun under srun", with(slurm, map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}), Torchrun, 3},
		// mpirun in a Slurm allocation starts its daemons with srun.
		{"Open MPI under Slurm", with(slurm, map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}), OpenMPI, 0},
		{"MPICH under Slurm", with(slurm, map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2"}), MPICH, 1},
		{"Open MPI over PMI", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "PMI_RANK": "0", "PMI_SIZE": "2"}, OpenMPI, 1},
		{"torchrun over Open MPI", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, Torchrun, 0},
		{"Slurm alone", slurm, Slurm, 1},
	} {
		got, err := detectEnv(c.env)
		if err != nil || got.Launcher != c.want || got.Rank != c.rank {
			t.Errorf("%s: %s rank %d, %v; want %s rank %d", c.name, got.Launcher, got.Rank, err, c.want, c.rank)
		}
	}
	// Options over everything.
	j, err := DetectWith(Options{Size: 2, Rank: 1, LocalRank: 0, Getenv: envOf(with(slurm, map[string]string{"RANK": "0", "WORLD_SIZE": "9"}))})
	if err != nil || j.Launcher != Explicit || j.Rank != 1 || j.Size != 2 || j.RunID != "" {
		t.Errorf("Options under torchrun and Slurm: %+v, %v", j, err)
	}
}

// TestDetectErrors: every bad value is an *EnvError naming the variable and
// quoting its value.
func TestDetectErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"RANK": "0"}, `launch: torchrun: WORLD_SIZE: not set`},
		{map[string]string{"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2"}, `launch: torchrun: RANK: not set`},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "two"}, `launch: torchrun: WORLD_SIZE="two": not a decimal number`},
		{map[string]string{"RANK": " 1", "WORLD_SIZE": "2"}, `launch: torchrun: RANK=" 1": not a decimal number`},
		{map[string]string{"RANK": "4", "WORLD_SIZE": "4"}, `launch: torchrun: RANK="4": not below WORLD_SIZE=4`},
		{map[string]string{"RANK": "-1", "WORLD_SIZE": "4"}, `launch: torchrun: RANK="-1": negative`},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, `launch: torchrun: WORLD_SIZE="0": the number of ranks must be at least 1`},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "99999999999999999999"}, `launch: torchrun: WORLD_SIZE="99999999999999999999": out of range`},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2"},
			`launch: torchrun: LOCAL_RANK="2": above RANK=1: a node's ranks are numbered in the order of their global ranks`},
		{map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
			`launch: torchrun: LOCAL_RANK="2": not below LOCAL_WORLD_SIZE=2`},
		{map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "5"}, `launch: torchrun: LOCAL_WORLD_SIZE="5": above WORLD_SIZE=4`},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "gpu0"}, `launch: torchrun: LOCAL_RANK="gpu0": not a decimal number`},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "-2"}, `launch: torchrun: GROUP_RANK="-2": negative`},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1"}, `launch: openmpi: OMPI_COMM_WORLD_SIZE: not set`},
		{map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", "MPI_LOCALNRANKS": "x"}, `launch: mpich: MPI_LOCALNRANKS="x": not a decimal number`},
		{map[string]string{"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "2"}, `launch: srun: SLURM_PROCID="2": not below SLURM_STEP_NUM_TASKS=2`},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "n[1-"},
			`launch: srun: SLURM_STEP_NODELIST="n[1-": a '[' without ']'`},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NODEID": "2", "SLURM_STEP_NODELIST": "n[1-2]"},
			`launch: srun: SLURM_NODEID="2": but SLURM_STEP_NODELIST lists 2 nodes`},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "2"},
			`launch: srun: SLURM_STEP_TASKS_PER_NODE="2": lists 1 nodes, not node 1 (SLURM_NODEID=1)`},
		{map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x4)"},
			`launch: srun: SLURM_LOCALID="1": not below SLURM_STEP_TASKS_PER_NODE=1`},
		{map[string]string{"RANK": strings.Repeat("9", 200), "WORLD_SIZE": "1"},
			`launch: torchrun: RANK="` + strings.Repeat("9", 64) + `"… (200 bytes): out of range`},
	} {
		_, err := detectEnv(c.env)
		var e *EnvError
		if !errors.As(err, &e) || err.Error() != c.want {
			t.Errorf("%v:\n got %v\nwant %s", c.env, err, c.want)
		}
	}
	if _, err := DetectWith(Options{Rank: 1}); err == nil || !strings.Contains(err.Error(), "Options.Size") {
		t.Errorf("Options.Rank without Size: %v", err)
	}
	if _, err := DetectWith(Options{Size: 2, Rank: 0, LocalRank: -1}); err == nil || !strings.Contains(err.Error(), "Options.LocalRank") {
		t.Errorf("Options.LocalRank -1: %v", err)
	}
}

// TestDetectProcess: Detect reads the process's environment.
func TestDetectProcess(t *testing.T) {
	for _, k := range []string{"RANK", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "GONCCL_RUN_ID",
		"NCCL_COMM_ID", "MASTER_ADDR", "MASTER_PORT", "GONCCL_LAUNCHER"} {
		t.Setenv(k, "")
	}
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "3")
	j, err := Detect()
	if err != nil || j.Rank != 1 || j.Size != 3 || j.Launcher != Torchrun || j.NodeName == "" {
		t.Errorf("%+v, %v", j, err)
	}
}

// TestJobDevice: a local rank maps to its own GPU; beyond the visible GPUs it
// is a typed error that names the way out, unless NCCL_MULTI_RANK_GPU_ENABLE=1
// lets ranks share GPUs, when the local ranks go round them.
func TestJobDevice(t *testing.T) {
	for _, tc := range []struct {
		local, visible int
		shared         string
		want           int // -1: a *DeviceError
	}{
		{0, 2, "", 0}, {1, 2, "", 1}, {2, 2, "", -1}, {1, 1, "", -1}, {0, 0, "", -1}, {0, 0, "1", -1},
		{1, 1, "1", 0}, {3, 2, "1", 1}, {2, 4, "1", 2}, {1, 1, "0", -1},
	} {
		j, err := DetectWith(Options{Size: 4, Rank: tc.local, LocalRank: tc.local,
			Getenv: envOf(map[string]string{"NCCL_MULTI_RANK_GPU_ENABLE": tc.shared})})
		if err != nil {
			t.Fatal(err)
		}
		if j.SharedGPUs != (tc.shared == "1") {
			t.Errorf("NCCL_MULTI_RANK_GPU_ENABLE=%q: SharedGPUs = %v", tc.shared, j.SharedGPUs)
		}
		got, err := j.Device(tc.visible)
		var de *DeviceError
		switch {
		case tc.want < 0 && !errors.As(err, &de):
			t.Errorf("local rank %d of %d GPUs (shared %q): %d, %v; want a *DeviceError", tc.local, tc.visible, tc.shared, got, err)
		case tc.want < 0:
			if de.LocalRank != tc.local || de.Visible != tc.visible {
				t.Errorf("error %+v for local rank %d, %d visible", de, tc.local, tc.visible)
			}
			if tc.visible > 0 && !strings.Contains(err.Error(), "NCCL_MULTI_RANK_GPU_ENABLE=1") {
				t.Errorf("error %q does not name the way to share GPUs", err)
			}
		case err != nil || got != tc.want:
			t.Errorf("local rank %d of %d GPUs (shared %q): %d, %v; want %d", tc.local, tc.visible, tc.shared, got, err, tc.want)
		}
	}
}

// TestSlurmCommID: under srun with a node list and numeric job and step ids,
// the ranks meet at the step's first node on a port of the ids (SlurmPort),
// with nothing set by hand; NCCL_COMM_ID and MASTER_ADDR:MASTER_PORT win
// where set; without a usable id or node list there is none.
func TestSlurmCommID(t *testing.T) {
	step := map[string]string{"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
		"SLURM_STEP_NODELIST": "gpu[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURMD_NODENAME": "gpu2",
		"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"srun -N 2", step, "gpu1:15619"},
		{"Slurm's older SLURM_STEPID", with(step, map[string]string{"SLURM_STEP_ID": "", "SLURM_STEPID": "3"}), "gpu1:15619"},
		{"NCCL_COMM_ID wins", with(step, map[string]string{"NCCL_COMM_ID": "10.0.0.1:4000"}), "10.0.0.1:4000"},
		{"MASTER_ADDR:MASTER_PORT win", with(step, map[string]string{"MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "4001"}), "10.0.0.2:4001"},
		{"a step that is no number", with(step, map[string]string{"SLURM_STEP_ID": "batch"}), ""},
		{"no job id", with(step, map[string]string{"SLURM_JOB_ID": ""}), ""},
		{"no node list", with(step, map[string]string{"SLURM_STEP_NODELIST": "", "SLURM_NODEID": ""}), ""},
	} {
		j, err := detectEnv(c.env)
		if err != nil || j.CommID != c.want {
			t.Errorf("%s: CommID %q, %v; want %q", c.name, j.CommID, err, c.want)
		}
	}
	seen := map[int]string{}
	for job := range 3000 {
		for s := range 8 {
			p, ok := SlurmPort(strconv.Itoa(job), strconv.Itoa(s))
			if !ok || p < 15000 || p >= 25000 {
				t.Fatalf("SlurmPort(%d, %d) = %d, %v; want 15000 to 24999", job, s, p, ok)
			}
			if prev, dup := seen[p]; dup && job < 1250 {
				t.Fatalf("SlurmPort(%d, %d) = %d, as %s", job, s, p, prev)
			}
			seen[p] = fmt.Sprint(job, ".", s)
		}
	}
	if _, ok := SlurmPort("12", "batch"); ok {
		t.Error(`SlurmPort("12", "batch") is ok`)
	}
}

// with is m with extra's variables set over it.
func with(m map[string]string, extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// TestLeaderWorkerSet: a pod of a LeaderWorkerSet group (the variables the
// LWS controller sets, LWS 0.6 and later; the leader address as LWS writes
// it, <lws>-<group>.<lws>.<namespace>) is one rank per pod, meeting at the
// leader on DefaultPort; NCCL_COMM_ID and MASTER_ADDR:MASTER_PORT win; torchrun
// run inside the pod wins over the pod's variables; a bad index is an error
// naming its variable.
func TestLeaderWorkerSet(t *testing.T) {
	pod := map[string]string{"LWS_LEADER_ADDRESS": "trainer-0.trainer.default", "LWS_GROUP_SIZE": "4",
		"LWS_WORKER_INDEX": "2", "HOSTNAME": "trainer-0-2"}
	j, err := detectEnv(pod)
	want := Job{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 1, Node: 2, RootHost: "trainer-0.trainer.default",
		Launcher: LWS, CommID: "trainer-0.trainer.default:29500"}
	j.NodeName = ""
	if err != nil || !reflect.DeepEqual(j, want) {
		t.Fatalf("LWS pod:\n got %+v, %v\nwant %+v", j, err, want)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"NCCL_COMM_ID wins", with(pod, map[string]string{"NCCL_COMM_ID": "10.0.0.1:4000"}), "10.0.0.1:4000"},
		{"MASTER_ADDR:MASTER_PORT win", with(pod, map[string]string{"MASTER_ADDR": "trainer-0.trainer.default", "MASTER_PORT": "23456"}), "trainer-0.trainer.default:23456"},
		{"no leader address", with(pod, map[string]string{"LWS_LEADER_ADDRESS": ""}), ""},
	} {
		if j, err := detectEnv(c.env); err != nil || j.CommID != c.want {
			t.Errorf("%s: CommID %q, %v; want %q", c.name, j.CommID, err, c.want)
		}
	}
	inner := with(pod, map[string]string{"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "trainer-0.trainer.default", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "x"})
	if j, err := detectEnv(inner); err != nil || j.Launcher != Torchrun || j.Rank != 9 || j.Size != 16 {
		t.Errorf("torchrun inside an LWS pod: %+v, %v", j, err)
	}
	for _, bad := range []map[string]string{
		with(pod, map[string]string{"LWS_WORKER_INDEX": "4"}),
		with(pod, map[string]string{"LWS_GROUP_SIZE": ""}),
		with(pod, map[string]string{"LWS_WORKER_INDEX": "x"}),
	} {
		var ee *EnvError
		if _, err := detectEnv(bad); !errors.As(err, &ee) || !strings.HasPrefix(ee.Var, "LWS_") {
			t.Errorf("%v: %v; want an *EnvError naming an LWS variable", bad, err)
		}
	}
}

// TestIndexedJobManifest: examples/allreduce/kubernetes/indexed-job.yaml's variables
// (the literal ones read from the manifest; RANK, from the completion index
// annotation, set here) place each pod and make pod 0's DNS name where the
// ranks meet.
func TestIndexedJobManifest(t *testing.T) {
	text, err := os.ReadFile("../examples/allreduce/kubernetes/indexed-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	lines := strings.Split(string(text), "\n")
	for i := 0; i+1 < len(lines); i++ {
		name, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "- name: ")
		value, ok2 := strings.CutPrefix(strings.TrimSpace(lines[i+1]), "value: ")
		if ok && ok2 {
			env[name] = strings.Trim(value, `"`)
		}
	}
	for index := range 2 {
		env["RANK"] = strconv.Itoa(index)
		j, err := detectEnv(env)
		if err != nil || j.Rank != index || j.Size != 2 || j.CommID != "allreduce-0.allreduce:29500" {
			t.Errorf("pod %d of the manifest (%v): %+v, %v", index, env, j, err)
		}
	}
}
