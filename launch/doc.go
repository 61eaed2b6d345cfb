// Package launch places a process in a multi-process NCCL job: its rank, the
// number of ranks and the GPU to use, read from whichever launcher started it
// (torchrun, Open MPI's mpirun, Slurm's srun, or the program itself with -np),
// and the NCCL unique id every rank must share, obtained the launcher's way.
//
// A program with one process per GPU:
//
//	lf := launch.Register(flag.CommandLine) // -np and -idfile
//	timeout := flag.Duration("timeout", time.Minute, "deadline for the other ranks to join")
//	flag.Parse()
//	if lf.NP > 0 { // started by hand: start NP local ranks and wait for them
//		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
//			log.Fatal(err)
//		}
//		return
//	}
//	job, err := launch.Detect()
//	...
//	lib, err := nccl.Open()
//	...
//	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
//	defer cancel()
//	id, err := launch.UniqueID(ctx, lib, job, lf.IDFile)
//	...
//	comm, err := lib.InitRank(ctx, job.LocalRank, id, job.Size, job.Rank, nil)
//	...
//	launch.Cleanup(job, lf.IDFile)
//
// A context that can end makes the communicator non-blocking (see nccl.Comm),
// so a rank that never arrives costs the others their deadline: InitRank
// returns an error wrapping context.DeadlineExceeded instead of hanging.
//
// # Launchers
//
// Detect reads, in this order:
//
//	torchrun   RANK, WORLD_SIZE, LOCAL_RANK
//	mpirun     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//	srun       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//
// A process that none of them started is rank 0 of a job of one. SelfLaunch
// starts local ranks with torchrun's variables, so the same program runs under
// any of the launchers or alone.
//
// Job.LocalRank is the CUDA device to use when every process of a node sees all
// of its GPUs. Where the launcher gives each process its own GPU (a
// CUDA_VISIBLE_DEVICES of one device, as some Slurm setups do), use device 0.
//
// # The unique id
//
// UniqueID shares the id in one of two ways:
//
//   - NCCL_COMM_ID=host:port, set on every rank (MASTER_ADDR and MASTER_PORT,
//     as torchrun users set them, are turned into it). NCCL then derives the
//     same id on every rank from the address, and rank 0 hosts the rendezvous
//     there. SelfLaunch sets it to a local port. Nothing travels between the
//     processes before InitRank.
//   - A file on storage every rank can read (PyTorch's file:// init): rank 0
//     creates the id and writes its text form there; the others wait for the
//     file. Rank 0 removes it with Cleanup once the communicator exists.
//
// Detect and SelfLaunch need no NCCL; UniqueID needs the loaded library.
package launch
