// Package launch places a process in a multi-process NCCL job and gives the
// job's ranks the NCCL unique id they must share: its rank, the number of
// ranks, its GPU and its node, read from whichever launcher started it
// (torchrun, Open MPI's mpirun, MPICH's mpiexec, Slurm's srun, the program
// itself with -np, or explicit flags), and the id passed the launcher's way.
//
// A program with one process per GPU:
//
//	lf := launch.Register(flag.CommandLine) // -np, -idfile, -idvia, -store, -rank, -size, -local-rank
//	timeout := flag.Duration("timeout", time.Minute, "deadline for the other ranks to join")
//	flag.Parse()
//	if lf.NP > 0 { // started by hand: start NP local ranks and wait for them
//		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
//			log.Fatal(err)
//		}
//		return
//	}
//	job, err := lf.Detect() // the flags, else the launcher's variables
//	...
//	lib, err := nccl.Open()
//	...
//	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
//	defer cancel()
//	id, err := launch.UniqueID(ctx, lib, job, lf.Share())
//	...
//	comm, err := lib.InitRank(ctx, job.LocalRank, id, job.Size, job.Rank, nil)
//	launch.Cleanup(job, lf.Share()) // rank 0 removes an id file
//	...
//
// The same program then runs as
//
//	torchrun --no-python --nproc-per-node=2 ./prog                        # the store torchrun runs
//	torchrun --no-python --nproc-per-node=2 --rdzv-backend=c10d ./prog    # likewise
//	mpirun -np 2 -x NCCL_COMM_ID=host:port ./prog                         # NCCL's bootstrap
//	srun -n 8 ./prog -idfile /shared/job.id                               # a file on shared storage
//	./prog -np 2                                                          # local ranks, started by itself
//
// The context bounds the wait for the other ranks: a rank that never arrives
// costs the others their deadline, as UniqueID and InitRank return an error
// wrapping context.DeadlineExceeded instead of hanging (see nccl.Comm).
//
// # Launchers
//
// DetectWith reads explicit Options first, then the first launcher whose
// variables are present: torchrun (RANK), Open MPI (OMPI_COMM_WORLD_RANK),
// MPICH (PMI_RANK), a Slurm step (SLURM_PROCID with SLURM_STEP_NUM_TASKS). The
// most specific wins: under torchrun run by srun, or mpirun in a Slurm
// allocation, the Slurm variables describe the agent or the allocation, not
// the process. Every value is checked; a bad one is an *EnvError naming the
// variable and quoting its value. A process none of them started is rank 0 of
// a job of one.
//
// Job.LocalRank is the CUDA device to use when every process of a node sees
// all of its GPUs. Where the launcher gives each process its own GPU (a
// CUDA_VISIBLE_DEVICES of one device, torchrun --virtual-local-rank), it is 0.
//
// # The unique id
//
// UniqueID shares the id in one of three ways (Via), chosen from the job
// unless Share says (-idvia):
//
//   - ViaFile, with -idfile: a file on storage every rank can read (as
//     PyTorch's file:// init). Rank 0 writes the id with the run's identity
//     and the time; the others wait for a file of their run, so a file left
//     by a crashed run is never read as this run's (see UniqueID).
//   - ViaCommID, with NCCL_COMM_ID=host:port on every rank, or MASTER_ADDR
//     and MASTER_PORT where no store listens there (set by hand, or torchrun
//     with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1): NCCL derives the same id on
//     every rank and rank 0's NCCL binds the address. SelfLaunch sets it to a
//     local port. Nothing travels between the processes before InitRank.
//   - ViaStore, under torchrun: its agent already serves a c10d TCPStore at
//     MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, with the
//     static rendezvous and with --rdzv-backend=c10d), so NCCL could not bind
//     that port; rank 0 sets a key there (IDKey), the others get it. No flag,
//     no extra port.
//
// Under mpirun or srun without either, UniqueID says what to set.
//
// # PyTorch's store
//
// Store is a client of PyTorch's TCPStore protocol (DialStore): Set, Get,
// Wait, Add, Check, each under a context. A Go program can join a PyTorch
// job's store with it, and Go and Python ranks can share one NCCL id: Python
// reads the 128 bytes with torch.distributed.TCPStore(host, port,
// is_master=False).get(launch.IDKey(job, name)). It speaks the protocol of
// PyTorch 2.x (VALIDATE first; the libuv server that is the default since
// 2.4) and that of older servers such as PyTorch 1.13's, telling them apart
// when it connects.
//
// Detect and SelfLaunch need no NCCL; UniqueID needs the loaded library on
// rank 0 (on every rank with NCCL_COMM_ID).
package launch
