package launch

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Launcher names what started the process.
type Launcher string

// The launchers Detect knows, in its order of precedence after Options.
const (
	Explicit Launcher = "options"  // Options (or the flags of Register) placed the process
	Torchrun Launcher = "torchrun" // torchrun (torch.distributed.run), or its variables set by hand
	Self     Launcher = "self"     // SelfLaunch
	OpenMPI  Launcher = "openmpi"  // Open MPI's mpirun or mpiexec
	MPICH    Launcher = "mpich"    // MPICH's (Hydra's) mpiexec, or a PMI-1 launcher
	Slurm    Launcher = "srun"     // a task of a Slurm job step
	LWS      Launcher = "lws"      // a pod of a Kubernetes LeaderWorkerSet group, one rank per pod
	Alone    Launcher = "none"     // nothing: a job of one
)

// Job is this process's place in a job of processes, one per GPU: what the
// launcher that started it says, checked.
type Job struct {
	Rank int // global rank, in [0, Size)
	Size int // number of ranks in the job

	// LocalRank is the rank among the job's processes on this node: the CUDA
	// device to use when each process sees all the node's GPUs. Launchers that
	// give each process one GPU (torchrun --virtual-local-rank, some Slurm
	// setups) make it 0 or set CUDA_VISIBLE_DEVICES to one device. A launcher
	// that gives no local rank (torchrun's variables set by hand without
	// LOCAL_RANK) leaves the global rank here: right on one node.
	LocalRank int
	// LocalSize is the number of the job's processes on this node; 0 when the
	// launcher does not say.
	LocalSize int

	// Node is this node's index among the job's nodes (torchrun's GROUP_RANK,
	// SLURM_NODEID), -1 when the launcher does not say.
	Node int
	// NodeName is this node's name: SLURMD_NODENAME under Slurm, else the host
	// name.
	NodeName string
	// Nodes are the job step's nodes, in Slurm's order (SLURM_STEP_NODELIST
	// expanded), nil under other launchers.
	Nodes []string
	// RootHost is the host of rank 0 where the launcher tells it: MASTER_ADDR
	// under torchrun, the step's first node under Slurm (where srun places task
	// 0); "" when unknown.
	RootHost string

	// Launcher is what placed the process.
	Launcher Launcher

	// RunID names this run of the job, the same on every rank: torchrun's
	// TORCHELASTIC_RUN_ID, Slurm's SLURM_JOB_ID.SLURM_STEP_ID, Open MPI's
	// PMIX_NAMESPACE or job id, SelfLaunch's; GONCCL_RUN_ID when set overrides
	// them. "" when unknown. Id files and store keys carry it.
	RunID string
	// Restart counts torchrun's restarts of the workers
	// (TORCHELASTIC_RESTART_COUNT): store keys carry it.
	Restart int

	// StoreAddr is the host:port of a PyTorch TCPStore that is already
	// serving every rank: torchrun's, when its workers are told to use the
	// agent's store (TORCHELASTIC_USE_AGENT_STORE=True, with the default static
	// rendezvous and with --rdzv-backend=c10d). "" otherwise.
	StoreAddr string
	// CommID is where NCCL's own bootstrap can meet: NCCL_COMM_ID, or
	// MASTER_ADDR:MASTER_PORT when no store serves there, or under srun the
	// step's first node (where task 0 runs) with a port derived from the
	// job and step ids (SlurmPort). "" when none of them.
	CommID string

	// SharedGPUs is whether NCCL may place several ranks on one GPU
	// (NCCL_MULTI_RANK_GPU_ENABLE=1, honoured by NCCL 2.30 and later): Device
	// then shares the visible GPUs among more local ranks than there are.
	SharedGPUs bool
}

// Options place the process explicitly and say where Detect reads the
// environment. The zero value reads everything from the environment.
type Options struct {
	// Size, when positive, places the process: Rank, LocalRank and LocalSize
	// are then taken from here and no launcher's variables are read for them
	// (RunID, the store and NCCL_COMM_ID still are).
	Size      int
	Rank      int
	LocalRank int // the rank on this node: the GPU
	LocalSize int // 0 when unknown

	// Getenv reads a variable; nil means os.Getenv. Tests, and programs that
	// place ranks from elsewhere, pass their own.
	Getenv func(key string) string
}

// EnvError is a launcher's variable (or an option) that is missing,
// malformed or inconsistent with another.
type EnvError struct {
	Launcher Launcher
	Var      string // the variable at fault, or the Options field
	Value    string // its value; "" when missing
	Msg      string // what is wrong
}

func (e *EnvError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("launch: %s: %s: %s", e.Launcher, e.Var, e.Msg)
	}
	return fmt.Sprintf("launch: %s: %s=%s: %s", e.Launcher, e.Var, quote(e.Value), e.Msg)
}

// Detect reads the process's place from its launcher's environment; see
// DetectWith.
func Detect() (Job, error) { return DetectWith(Options{}) }

// DetectWith places the process from o, or else from the first launcher whose
// variables are present, in this order:
//
//	Options    o.Size > 0
//	torchrun   RANK (or TORCHELASTIC_RUN_ID): WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK
//	           (SelfLaunch sets the same variables, and GONCCL_LAUNCHER=self)
//	Open MPI   OMPI_COMM_WORLD_RANK: OMPI_COMM_WORLD_SIZE, _LOCAL_RANK, _LOCAL_SIZE
//	MPICH      PMI_RANK: PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//	Slurm      SLURM_PROCID with SLURM_STEP_NUM_TASKS (an srun task): SLURM_LOCALID,
//	           SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST, SLURMD_NODENAME
//	LWS        LWS_WORKER_INDEX (a pod of a Kubernetes LeaderWorkerSet): LWS_GROUP_SIZE,
//	           LWS_LEADER_ADDRESS; one rank per pod
//
// The most specific launcher wins: torchrun run by srun, or mpirun inside a
// Slurm allocation, leaves Slurm's variables (which describe the agent or the
// allocation) behind its own. A Slurm batch script outside srun has
// SLURM_PROCID but no step: it is not a task of a step. A process none of them
// started is rank 0 of a job of one.
//
// Every variable read is checked: a size variable missing beside its rank, a
// value that is not a decimal number, a negative one, a rank not below the
// size, a local rank not below the local size or above the rank, a local size
// above the size, a node list that does not parse or does not hold SLURM_NODEID
// are errors (*EnvError) that name the variable and quote its value.
func DetectWith(o Options) (Job, error) {
	env := o.Getenv
	if env == nil {
		env = os.Getenv
	}
	j := Job{Node: -1}
	var err error
	switch {
	case o.Size > 0 || o.Rank != 0 || o.LocalRank != 0 || o.LocalSize != 0:
		err = j.fromOptions(o)
	case env("RANK") != "" || env("TORCHELASTIC_RUN_ID") != "":
		err = j.fromTorchrun(env)
	case env("OMPI_COMM_WORLD_RANK") != "":
		err = j.fromMPI(env, OpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
		j.RunID = first(env, "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid")
	case env("PMI_RANK") != "":
		err = j.fromMPI(env, MPICH, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	case env("SLURM_PROCID") != "" && env("SLURM_STEP_NUM_TASKS") != "":
		err = j.fromSlurm(env)
	case env("LWS_WORKER_INDEX") != "":
		err = j.fromLWS(env)
	default:
		j.Size, j.Launcher = 1, Alone
	}
	if err != nil {
		return Job{}, err
	}
	if err := j.check(); err != nil {
		return Job{}, err
	}
	if j.NodeName == "" {
		j.NodeName, _ = os.Hostname()
	}
	if id := env("GONCCL_RUN_ID"); id != "" {
		j.RunID = id
	}
	derivedCommID := ""
	switch {
	case j.Launcher == Slurm && j.RootHost != "":
		if port, ok := SlurmPort(env("SLURM_JOB_ID"), first(env, "SLURM_STEP_ID", "SLURM_STEPID")); ok {
			derivedCommID = net.JoinHostPort(j.RootHost, strconv.Itoa(port))
		}
	case j.Launcher == LWS && j.RootHost != "":
		derivedCommID = net.JoinHostPort(j.RootHost, strconv.Itoa(DefaultPort))
	}
	j.CommID = env("NCCL_COMM_ID")
	j.SharedGPUs = env("NCCL_MULTI_RANK_GPU_ENABLE") == "1"
	addr, port := env("MASTER_ADDR"), env("MASTER_PORT")
	if addr != "" && port != "" {
		if j.RootHost == "" {
			j.RootHost = addr
		}
		hp := net.JoinHostPort(strings.Trim(addr, "[]"), port)
		if env("TORCHELASTIC_USE_AGENT_STORE") == "True" { // as torch.distributed.rendezvous reads it
			j.StoreAddr = hp
		} else if j.CommID == "" {
			j.CommID = hp
		}
	}
	if j.CommID == "" {
		j.CommID = derivedCommID
	}
	return j, nil
}

// DefaultPort is where a LeaderWorkerSet group's pods meet at the leader
// when nothing names a port (NCCL_COMM_ID, or MASTER_ADDR with MASTER_PORT):
// torch.distributed's default MASTER_PORT.
const DefaultPort = 29500

// fromLWS reads the variables the LeaderWorkerSet controller sets in every
// pod of a group (LWS 0.6 and later): LWS_WORKER_INDEX (0 for the leader),
// LWS_GROUP_SIZE and LWS_LEADER_ADDRESS, the leader pod's stable DNS name.
// One rank per pod: a pod that runs several processes starts them with
// torchrun or mpirun, whose variables win.
func (j *Job) fromLWS(env func(string) string) error {
	j.Launcher = LWS
	v := reader{env: env, l: LWS}
	j.Rank = v.need("LWS_WORKER_INDEX")
	j.Size = v.need("LWS_GROUP_SIZE")
	j.LocalRank, j.LocalSize, j.Node = 0, 1, j.Rank
	j.RootHost = env("LWS_LEADER_ADDRESS")
	return v.err
}

// SlurmPort is the port an srun step's ranks meet at when nothing else names
// one: 15000 to 24999, below Linux's ephemeral ports (32768 and up), from
// the job id and the step id, so that the steps of one job (up to 8 at once)
// and jobs with other ids on the same node do not collide. PyTorch
// Lightning's Slurm environment derives its MASTER_PORT from the job id the
// same way. ok is false where either id is not a decimal number (a batch
// script's "batch" step).
func SlurmPort(jobID, stepID string) (port int, ok bool) {
	job, err1 := strconv.ParseUint(jobID, 10, 64)
	step, err2 := strconv.ParseUint(stepID, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return 15000 + int((job%1250)*8+step%8), true
}

func (j *Job) fromOptions(o Options) error {
	j.Launcher = Explicit
	j.Rank, j.Size, j.LocalRank, j.LocalSize = o.Rank, o.Size, o.LocalRank, o.LocalSize
	if o.Size <= 0 {
		return &EnvError{Explicit, "Options.Size", strconv.Itoa(o.Size), "must be positive when Rank, LocalRank or LocalSize is given"}
	}
	return nil
}

func (j *Job) fromTorchrun(env func(string) string) error {
	j.Launcher = Torchrun
	if env("GONCCL_LAUNCHER") == string(Self) {
		j.Launcher = Self
	}
	v := reader{env: env, l: j.Launcher}
	j.Rank = v.need("RANK")
	j.Size = v.need("WORLD_SIZE")
	j.LocalRank = v.opt("LOCAL_RANK", j.Rank)
	j.LocalSize = v.opt("LOCAL_WORLD_SIZE", 0)
	j.Node = v.opt("GROUP_RANK", -1)
	j.Restart = v.opt("TORCHELASTIC_RESTART_COUNT", 0)
	j.RunID = env("TORCHELASTIC_RUN_ID")
	return v.err
}

func (j *Job) fromMPI(env func(string) string, l Launcher, rank, size, local, localSize string) error {
	j.Launcher = l
	v := reader{env: env, l: l}
	j.Rank = v.need(rank)
	j.Size = v.need(size)
	j.LocalRank = v.opt(local, j.Rank)
	j.LocalSize = v.opt(localSize, 0)
	return v.err
}

func (j *Job) fromSlurm(env func(string) string) error {
	j.Launcher = Slurm
	v := reader{env: env, l: Slurm}
	j.Rank = v.need("SLURM_PROCID")
	j.Size = v.need("SLURM_STEP_NUM_TASKS")
	j.LocalRank = v.opt("SLURM_LOCALID", j.Rank)
	j.Node = v.opt("SLURM_NODEID", -1)
	if v.err != nil {
		return v.err
	}
	j.NodeName = env("SLURMD_NODENAME")
	if job := env("SLURM_JOB_ID"); job != "" {
		j.RunID = job + "." + first(env, "SLURM_STEP_ID", "SLURM_STEPID")
	}
	listVar := "SLURM_STEP_NODELIST"
	list := env(listVar)
	if list == "" {
		listVar = "SLURM_JOB_NODELIST"
		list = env(listVar)
	}
	if list != "" {
		nodes, err := ParseNodelist(list)
		if err != nil {
			return &EnvError{Slurm, listVar, list, strings.TrimPrefix(err.Error(), "launch: node list "+quote(list)+": ")}
		}
		if j.Node >= len(nodes) {
			return &EnvError{Slurm, "SLURM_NODEID", strconv.Itoa(j.Node), fmt.Sprintf("but %s lists %d nodes", listVar, len(nodes))}
		}
		j.Nodes, j.RootHost = nodes, nodes[0]
	}
	if tpn := env("SLURM_STEP_TASKS_PER_NODE"); tpn != "" && j.Node >= 0 {
		n, err := tasksOnNode(tpn, j.Node)
		if err != nil {
			return &EnvError{Slurm, "SLURM_STEP_TASKS_PER_NODE", tpn, fmt.Sprintf("%v (SLURM_NODEID=%d)", err, j.Node)}
		}
		j.LocalSize = n
	}
	return nil
}

// check holds the rules every launcher's numbers obey.
func (j *Job) check() error {
	l := j.Launcher
	names := varNames[l]
	bad := func(i int, val int, msg string) error {
		return &EnvError{l, names[i], strconv.Itoa(val), msg}
	}
	switch {
	case j.Size < 1:
		return bad(1, j.Size, "the number of ranks must be at least 1")
	case j.Rank < 0:
		return bad(0, j.Rank, "negative")
	case j.Rank >= j.Size:
		return bad(0, j.Rank, fmt.Sprintf("not below %s=%d", names[1], j.Size))
	case j.LocalRank < 0:
		return bad(2, j.LocalRank, "negative")
	case j.LocalRank > j.Rank:
		return bad(2, j.LocalRank, fmt.Sprintf("above %s=%d: a node's ranks are numbered in the order of their global ranks", names[0], j.Rank))
	case j.LocalSize < 0:
		return bad(3, j.LocalSize, "negative")
	case j.LocalSize > j.Size:
		return bad(3, j.LocalSize, fmt.Sprintf("above %s=%d", names[1], j.Size))
	case j.LocalSize > 0 && j.LocalRank >= j.LocalSize:
		return bad(2, j.LocalRank, fmt.Sprintf("not below %s=%d", names[3], j.LocalSize))
	}
	return nil
}

// varNames are the names of rank, size, local rank and local size in each
// launcher's errors.
var varNames = map[Launcher][4]string{
	Explicit: {"Options.Rank", "Options.Size", "Options.LocalRank", "Options.LocalSize"},
	Torchrun: {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	Self:     {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	OpenMPI:  {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	MPICH:    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	Slurm:    {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"},
	LWS:      {"LWS_WORKER_INDEX", "LWS_GROUP_SIZE", "local rank", "local size"},
	Alone:    {"rank", "size", "local rank", "local size"},
}

// reader reads a launcher's numeric variables, keeping the first error.
type reader struct {
	env func(string) string
	l   Launcher
	err error
}

// need reads a variable that must be set.
func (r *reader) need(name string) int {
	s := r.env(name)
	if s == "" {
		if r.err == nil {
			r.err = &EnvError{r.l, name, "", "not set"}
		}
		return 0
	}
	return r.parse(name, s)
}

// opt reads a variable that may be unset (def then).
func (r *reader) opt(name string, def int) int {
	s := r.env(name)
	if s == "" {
		return def
	}
	return r.parse(name, s)
}

func (r *reader) parse(name, s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		if r.err == nil {
			msg := "not a decimal number"
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				msg = "out of range"
			}
			r.err = &EnvError{r.l, name, s, msg}
		}
		return 0
	}
	if v < 0 && r.err == nil {
		r.err = &EnvError{r.l, name, s, "negative"}
	}
	return v
}

// first returns the first of the variables that is set.
func first(env func(string) string, names ...string) string {
	for _, n := range names {
		if v := env(n); v != "" {
			return v
		}
	}
	return ""
}
