// Command nccl-bench measures NCCL operations through gonccl the way nccl-tests
// does, with its flags, its table and its bus-bandwidth factors, so the two can
// be run side by side on the same GPUs:
//
//	nccl-bench -op all_reduce -b 8 -e 1G -f 2 -g 2
//	all_reduce_perf            -b 8 -e 1G -f 2 -g 2
//
// One process drives -g GPUs (default 1) from one goroutine, the operations of
// an iteration in one NCCL group when there are several (nccl-tests' -g). Run
// under a launcher, every process does so and together they form one job of
// processes × g ranks, as nccl-tests built with MPI:
//
//	mpirun -np 2 -x NCCL_COMM_ID=host:port nccl-bench -op all_reduce   # Open MPI
//	torchrun --no-python --nproc-per-node=2 nccl-bench -op all_reduce   # torchrun's store
//	nccl-bench -np 2 -op all_reduce                                      # starts 2 local processes itself
//
// Process p drives GPUs p·g … p·g+g-1 of its node (its local rank picks p) and
// holds ranks p·g … p·g+g-1. The ranks share the unique id as package launch
// chooses (torchrun's store, NCCL_COMM_ID, a shared file with -idfile; -idvia
// forces one); rank 0 prints.
//
// -t T runs T threads in each process, as nccl-tests' -t: each a goroutine
// locked to an OS thread of its own, driving -g GPUs, so that a process holds
// T·g ranks (threads.go); times are averaged over every thread of every
// process. With graphs, one process driving several GPUs runs faster with a
// thread per GPU (-t N -g 1) than with one for all (-g N), where that one
// thread's graph launches set the time (docs/performance.md).
//
// Every operation is a row of a table (ops.go) over gonccl's public API: its
// buffers, its call, its busbw factor and its expected bytes. Whether
// alltoall, gather, scatter and alltoallv run the library's own call or
// grouped send/recv is the library's routing (-grouped sets it to grouped).
// The communicators are blocking and configured as nccl-tests' (NVLink-centric
// scheduling from NCCL 2.28, which matters from compute capability 10.0).
//
// Time is taken as nccl-tests takes it (timing.go): the host clock around -n
// iterations (after -w warm-up ones) and a polling synchronisation of every
// stream, each iteration at a new offset in buffers sized for -e (nccl-tests'
// shift, so that a small operation does not run from a warm cache); the times
// of the processes are averaged (nccl-tests' default -a 1). -c checks one
// extra run against a CPU reference on every rank; wrong elements are summed
// over ranks, and as in nccl-tests the footer's "Out of bounds values" counts
// the runs that found any (OK or FAILED): then every process exits 1. -I 1
// also records a CUDA event on every stream around each iteration, as
// nccl-tests' -I does, and prints the iterations' min, max, p99
// and cv% (each iteration the slowest GPU of the job); -json carries every
// iteration. -C 1 prints in the time columns the host's time of the
// launches per operation (the clock stopped before the synchronisation:
// nccl-tests' cputime), busbw still from the full time; -json always carries
// both. Where cputime is close to time, the host's launches bound the loop.
// AlltoAll and AlltoAllv do not run in place in gonccl (their buffers must
// not overlap): their in-place columns print N/A.
//
// nccl-tests' two launch modes are here too. -G N captures each size's -n
// timed iterations into a CUDA graph per GPU (thread-local capture, the
// warm-up not captured) and launches the graphs N times: the time per
// operation is the host clock over the launches and the synchronisation,
// divided by n·N; -c then checks a run captured into a graph and launched
// once, after the timing (-I is ignored with -G, as in nccl-tests). -R 1
// registers the send and receive buffers with ncclCommRegister, -R 2 puts
// them in symmetric windows (ncclCommWindowRegister with
// NCCL_WIN_COLL_SYMMETRIC), for NCCL's symmetric kernels; the buffers are
// allocated once for -e with ncclMemAlloc where the library has it, as
// nccl-tests does. A library or runtime lacking what a mode needs stops
// nccl-bench with its *UnsupportedError. The header's parameter line says
// "graph: N local_register: R" and -json carries "graph" and
// "local_register".
//
// The header's first two lines name the NCCL and the CUDA runtime loaded: the
// version, the file and what found it (an option, GONCCL_NCCL_LIB, the system
// loader, ...); -json carries "nccl", "nccl_path", "cudart" and "cudart_path",
// and "program": "nccl-bench" (cmd/nccl-results keeps runs of both programs
// in this schema).
//
// -plot FILE draws the run's out-of-place busbw against size as an SVG
// (-overlay a saved nccl-tests output beside it). -plot FILE -replot
// label=file,... draws saved outputs of either program, on any machine, no
// GPU needed: lines whose labels differ only in a leading "nccl-bench" or
// "nccl-tests" share a colour, nccl-tests' dashed.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/launch"
)

var types = map[string]nccl.DataType{"int8": nccl.Int8, "uint8": nccl.Uint8, "int32": nccl.Int32, "uint32": nccl.Uint32,
	"int64": nccl.Int64, "uint64": nccl.Uint64, "half": nccl.Float16, "float": nccl.Float32, "double": nccl.Float64,
	"bfloat16": nccl.Bfloat16, "f8e4m3": nccl.Float8e4m3, "f8e5m2": nccl.Float8e5m2}

var redops = map[string]nccl.RedOp{"sum": nccl.Sum, "prod": nccl.Prod, "max": nccl.Max, "min": nccl.Min, "avg": nccl.Avg}

func main() {
	opName := flag.String("op", "all_reduce", "operation: "+operationNames())
	minB := flag.String("b", "32M", "minimum size in bytes (K, M, G suffixes)")
	maxB := flag.String("e", "32M", "maximum size in bytes")
	factor := flag.Int("f", 2, "size multiplication factor")
	step := flag.String("i", "", "size increment instead of a factor")
	iters := flag.Int("n", 20, "timed iterations")
	warm := flag.Int("w", 1, "warm-up iterations")
	check := flag.Int("c", 1, "check results (0 or 1)")
	dtName := flag.String("d", "float", "data type")
	redName := flag.String("o", "sum", "reduction op")
	root := flag.Int("r", 0, "root rank")
	cpuTime := flag.Int("C", 0, "report the host's time of the launches (cputime) in the time columns, as nccl-tests' -C 1; busbw stays from the full time")
	perIter := flag.Int("I", 0, "per-iteration CUDA event timing (0 or 1): min, max, p99 and cv% of the iterations after each block")
	ngpu := flag.Int("g", 1, "GPUs driven by each thread (-t): with one thread, by each process")
	gpuThreads := flag.Bool("threads", false, "with -g > 1: each GPU's launches (its operations, its capture, its graph's) from a thread of its own that nccl.Threads keeps, one call from the process's goroutine for all; without, one thread makes them all in turn, as nccl-tests' -g")
	threadSpin := flag.Duration("threads-spin", nccl.DefaultThreadSpin, "with -threads: how long the threads spin for the next call, and the caller for them, before parking (Threads.SetSpin)")
	nthreads := flag.Int("t", 1, "threads per process, each driving -g GPUs from a goroutine locked to its own OS thread (nccl-tests' -t)")
	graphs := flag.Int("G", 0, "CUDA graph launches: each size's -n iterations captured into a graph per GPU, launched this many times (0: no graph)")
	graphDot := flag.String("graph-dot", "", "with -G: write each size's captured graph of every local GPU into this folder (made if missing) as Graphviz DOT, with each node's parameters (Graph.WriteDot)")
	register := flag.Int("R", 0, "buffer registration: 0 none, 1 ncclCommRegister (local), 2 symmetric windows (ncclMemAlloc + ncclCommWindowRegister)")
	grouped := flag.Bool("grouped", false, "alltoall, gather, scatter, alltoallv through grouped send/recv instead of the native call")
	asJSON := flag.Bool("json", false, "print JSON instead of the table")
	plot := flag.String("plot", "", "draw busbw against size into this SVG file")
	overlay := flag.String("overlay", "", "with -plot: a saved nccl-tests output to draw beside")
	replotSpec := flag.String("replot", "", "with -plot: draw saved outputs (label=file,...; nccl-bench's or nccl-tests') instead of running; labels starting \"nccl-tests\" dashed")
	title := flag.String("title", "saved runs: bus bandwidth (out of place)", "with -replot: the chart's title")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()

	if *replotSpec != "" {
		if *plot == "" {
			log.Fatal("-replot needs -plot FILE")
		}
		if err := replot(*plot, *title, *replotSpec); err != nil {
			log.Fatal(err)
		}
		return
	}

	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	op, ok := lookup(*opName)
	if !ok {
		log.Fatalf("unknown -op %q", *opName)
	}
	dt, ok := types[*dtName]
	if !ok {
		log.Fatalf("unknown -d %q", *dtName)
	}
	red, ok := redops[*redName]
	if !ok {
		log.Fatalf("unknown -o %q", *redName)
	}
	sizes, hi, err := sizeList(*minB, *maxB, *factor, *step)
	if err != nil {
		log.Fatal(err)
	}
	if *ngpu < 1 {
		log.Fatal("bad -g: at least 1")
	}
	if *nthreads < 1 {
		log.Fatal("bad -t: at least 1")
	}
	if *graphs < 0 {
		log.Fatal("bad -G: 0 (no graph) or more launches")
	}
	if *register < registerNone || *register > registerSymmetric {
		log.Fatalf("bad -R %d: 0, 1 or 2", *register)
	}
	if *cpuTime != 0 && *cpuTime != 1 {
		log.Fatalf("bad -C %d: 0 or 1", *cpuTime)
	}
	if *graphDot != "" {
		if *graphs < 1 {
			log.Fatal("-graph-dot needs -G: it writes the captured graphs")
		}
		if err := os.MkdirAll(*graphDot, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	if *perIter == 1 && *graphs >= 1 {
		fmt.Fprintln(os.Stderr, "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.")
		*perIter = 0
	}
	job, err := lf.Detect()
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	comms, err := initJob(lib, job, *nthreads**ngpu, lf.Share())
	if err != nil {
		log.Fatalf("rank %d: %v", job.Rank, err)
	}
	n := comms[0].Size()
	if op.rooted && (*root < 0 || *root >= n) {
		log.Fatalf("bad -r %d: %d ranks", *root, n)
	}
	lo := sizes[0]
	benches, err := newBenches(lib, comms, *nthreads, *ngpu, settings{op: op, dt: dt, red: red, root: *root, grouped: *grouped, maxBytes: hi,
		perIter: *perIter == 1, graphs: *graphs, register: *register, graphDot: *graphDot, threads: *gpuThreads, threadSpin: *threadSpin})
	if err != nil {
		log.Fatalf("rank %d: %v", job.Rank, err)
	}
	b := benches[0]
	rep := &report{w: os.Stdout, op: op.name, lib: lib, ranks: n, job: job, threads: *nthreads, gpus: *ngpu, gpuThreads: *gpuThreads && *ngpu > 1, iters: *iters, warm: *warm,
		check: *check, perIter: b.perIter, cpuTime: *cpuTime == 1, graphs: *graphs, register: *register, alloc: b.alloc, json: *asJSON, show: job.Rank == 0}
	if op.path != "" {
		rep.path = comms[0].PathOf(op.path).String()
		if *graphs > 0 && op.path == "AlltoAllv" {
			rep.path = "grouped" // captured: VCCL's native call cannot be (Comm.AlltoAllv)
		}
	}
	rep.header()
	eachThread(benches, func(b *bench, first bool) {
		// A barrier before the warm-up, where nccl-tests calls MPI_Barrier:
		// the barrier's first all-reduce connects NCCL's paths for it here,
		// not at the first size (docs/performance.md).
		b.barrier()
		b.warmUp(lo, hi, *warm)
		for _, size := range sizes {
			count := b.count(size)
			if count == 0 {
				continue
			}
			r := row{Size: b.elems(count) * dt.Size(), Count: count, Type: *dtName, Op: *redName, Root: *root}
			if !op.reduce {
				r.Op = "none"
			}
			if !op.rooted {
				r.Root = -1
			}
			for _, inPlace := range []bool{false, true} {
				r.set(inPlace, b.run(count, inPlace, *iters, *check == 1), op.busFactor(float64(n)))
			}
			if first { // the job-wide results: every thread has the same
				rep.add(r)
			}
		}
		if first {
			must(rep.end())
			if *plot != "" {
				must(rep.plot(*plot, *overlay))
			}
		}
		// No rank ends before rank 0 has printed: a launcher stops the
		// others once one exits with an error.
		b.barrier()
		must(b.close())
	})
	must(closeComms(comms))
	if rep.failed > 0 {
		log.Fatalf("rank %d: %d checked runs found wrong elements (the #wrong columns)", job.Rank, rep.failed)
	}
}

// sizeList is the sizes from -b to -e: times -f, or plus -i when given; and
// -e, which the buffers are sized for.
func sizeList(minB, maxB string, factor int, step string) ([]int, int, error) {
	lo, err1 := parseSize(minB)
	hi, err2 := parseSize(maxB)
	if err1 != nil || err2 != nil || lo <= 0 || hi < lo {
		return nil, 0, fmt.Errorf("bad -b/-e")
	}
	next := func(s int) int { return s * factor }
	if step != "" {
		inc, err := parseSize(step)
		if err != nil || inc <= 0 {
			return nil, 0, fmt.Errorf("bad -i")
		}
		next = func(s int) int { return s + inc }
	} else if factor < 2 {
		return nil, 0, fmt.Errorf("bad -f: at least 2")
	}
	var sizes []int
	for s := lo; s <= hi; s = next(s) {
		sizes = append(sizes, s)
	}
	return sizes, hi, nil
}

func parseSize(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := 1
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.Atoi(s)
	return v * mult, err
}
