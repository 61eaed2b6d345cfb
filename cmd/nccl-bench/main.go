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
//	RANK=… WORLD_SIZE=… LOCAL_RANK=… MASTER_ADDR=… MASTER_PORT=… nccl-bench …  # torchrun's variables
//	nccl-bench -np 2 -op all_reduce                                      # starts 2 local processes itself
//
// Process p drives GPUs p·g … p·g+g-1 of its node (its local rank picks p) and
// holds ranks p·g … p·g+g-1. The ranks meet through NCCL_COMM_ID (or
// MASTER_ADDR:MASTER_PORT), or a shared file with -idfile; rank 0 prints.
//
// Time is taken as nccl-tests takes it: the host clock around -n iterations
// (after -w warm-up ones) and a polling synchronisation of every stream, each
// iteration at a new offset in buffers sized for -e (nccl-tests' shift, so
// that a small operation does not run from a warm cache); the times of the
// processes are averaged (nccl-tests' default -a 1). -c checks one extra run
// against a CPU reference on every rank; wrong elements are summed over ranks.
// -I 1 also records a CUDA event on every stream around each iteration, as
// nccl-tests' -I does, and prints the iterations' min, max, p99 and cv% (each
// iteration the slowest GPU of the job); -json carries every iteration.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
	"github.com/gonccl/nccl/internal/launch"
)

type opSpec struct {
	busFactor func(n float64) float64
	// bytes counted per rank for algbw: nccl-tests counts count·size·n for
	// all_gather, reduce_scatter, alltoall, gather and scatter.
	timesN bool
	reduce bool
	rooted bool
}

var opSpecs = map[string]opSpec{
	"all_reduce":     {func(n float64) float64 { return 2 * (n - 1) / n }, false, true, false},
	"all_gather":     {func(n float64) float64 { return (n - 1) / n }, true, false, false},
	"reduce_scatter": {func(n float64) float64 { return (n - 1) / n }, true, true, false},
	"alltoall":       {func(n float64) float64 { return (n - 1) / n }, true, false, false},
	"gather":         {func(n float64) float64 { return (n - 1) / n }, true, false, true},
	"scatter":        {func(n float64) float64 { return (n - 1) / n }, true, false, true},
	"broadcast":      {func(n float64) float64 { return 1 }, false, false, true},
	"reduce":         {func(n float64) float64 { return 1 }, false, true, true},
	"sendrecv":       {func(n float64) float64 { return 1 }, false, false, false},
	"alltoallv":      {func(n float64) float64 { return (n - 1) / n }, true, false, false},
}

// peerBytes is nccl-tests' generated alltoallv pattern (alltoallv.cu, the
// default spread 1.0): rank i sends to j bytes in proportion to their distance.
func peerBytes(i, j, n, total int) int {
	if n == 1 {
		return total &^ 15
	}
	dist := (j - i + n) % n
	sum := n * (n - 1) / 2
	return int(float64(dist)*float64(total)/float64(sum)) &^ 15
}

func parseSize(s string) (int, error) {
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

var types = map[string]abi.DataType{"int8": abi.Int8, "uint8": abi.Uint8, "int32": abi.Int32, "uint32": abi.Uint32,
	"int64": abi.Int64, "uint64": abi.Uint64, "half": abi.Float16, "float": abi.Float32, "double": abi.Float64,
	"bfloat16": abi.Bfloat16, "f8e4m3": abi.Float8e4m3, "f8e5m2": abi.Float8e5m2}

var redops = map[string]abi.RedOp{"sum": abi.Sum, "prod": abi.Prod, "max": abi.Max, "min": abi.Min, "avg": abi.Avg}

type row struct {
	Size      int        `json:"size"`
	Count     int        `json:"count"`
	Type      string     `json:"type"`
	Op        string     `json:"redop"`
	Root      int        `json:"root"`
	OutTimeUs float64    `json:"out_of_place_time_us"`
	OutAlgBW  float64    `json:"out_of_place_algbw"`
	OutBusBW  float64    `json:"out_of_place_busbw"`
	OutWrong  int        `json:"out_of_place_wrong"`
	OutIter   *iterStats `json:"out_of_place_per_iter,omitempty"`
	InTimeUs  float64    `json:"in_place_time_us"`
	InAlgBW   float64    `json:"in_place_algbw"`
	InBusBW   float64    `json:"in_place_busbw"`
	InWrong   int        `json:"in_place_wrong"`
	InIter    *iterStats `json:"in_place_per_iter,omitempty"`
}

func main() {
	opName := flag.String("op", "all_reduce", "operation: "+strings.Join(sortedKeys(), ", "))
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
	perIter := flag.Int("I", 0, "per-iteration CUDA event timing (0 or 1): min, max, p99 and cv% of the iterations after each block")
	ngpu := flag.Int("g", 1, "GPUs driven by each process")
	grouped := flag.Bool("grouped", false, "alltoall, gather, scatter through grouped send/recv instead of the native call")
	asJSON := flag.Bool("json", false, "print JSON instead of the table")
	plot := flag.String("plot", "", "draw busbw against size into this SVG file")
	overlay := flag.String("overlay", "", "with -plot: a saved nccl-tests output to draw beside")
	lf := launch.Register(flag.CommandLine)
	flag.Parse()

	if lf.NP > 0 {
		if err := launch.SelfLaunch(lf.NP, os.Args[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	spec, ok := opSpecs[*opName]
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
	lo, err1 := parseSize(*minB)
	hi, err2 := parseSize(*maxB)
	if err1 != nil || err2 != nil || lo <= 0 || hi < lo {
		log.Fatalf("bad -b/-e")
	}
	var inc int
	if *step != "" {
		var err error
		if inc, err = parseSize(*step); err != nil || inc <= 0 {
			log.Fatal("bad -i")
		}
	} else if *factor < 2 {
		log.Fatal("bad -f: at least 2")
	}
	if *ngpu < 1 {
		log.Fatal("bad -g: at least 1")
	}
	job, err := launch.Detect()
	if err != nil {
		log.Fatal(err)
	}
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	comms, err := initComms(lib, job, *ngpu, lf.IDFile)
	if err != nil {
		log.Fatalf("rank %d: %v", job.Rank, err)
	}
	n := comms[0].Count()
	if spec.rooted && (*root < 0 || *root >= n) {
		log.Fatalf("bad -r %d: %d ranks", *root, n)
	}
	b := newBench(lib, comms, dt, red, *root, spec, *opName, *grouped, hi)
	b.perIter = *perIter == 1
	show := job.Rank == 0 && !*asJSON
	if show {
		fmt.Printf("# nccl-bench (gonccl) %s, NCCL %s from %s\n", *opName, lib.Version(), lib.Path)
		fmt.Printf("# nranks %d: %d process(es) × %d GPU(s), launcher %s; iters %d, warmup %d, check %d\n",
			n, job.Size, *ngpu, job.Launcher, *iters, *warm, *check)
		it, itu := "", ""
		if b.perIter {
			it, itu = fmt.Sprintf("  %7s  %7s  %7s  %7s", "min", "max", "p99", "cv"), fmt.Sprintf("  %7s  %7s  %7s  %7s", "(us)", "(us)", "(us)", "(%)")
		}
		fmt.Printf("#\n#%12s %12s %8s %6s %6s   %9s %8s %8s %6s%s   %9s %8s %8s %6s%s\n", "size", "count", "type", "redop", "root",
			"time", "algbw", "busbw", "#wrong", it, "time", "algbw", "busbw", "#wrong", it)
		fmt.Printf("#%12s %12s %8s %6s %6s   %9s %8s %8s %6s%s   %9s %8s %8s %6s%s\n", "(B)", "(elements)", "", "", "",
			"(us)", "(GB/s)", "(GB/s)", "", itu, "(us)", "(GB/s)", "(GB/s)", "", itu)
	}
	var rows []row
	var busSum float64
	b.warmUp(lo, hi, *warm)
	for size := lo; size <= hi; {
		if count := b.count(size); count > 0 {
			r := row{Size: count * dt.Size() * map[bool]int{true: n, false: 1}[spec.timesN], Count: count, Type: *dtName, Op: *redName, Root: *root}
			if !spec.reduce {
				r.Op = "none"
			}
			if !spec.rooted {
				r.Root = -1
			}
			for _, inPlace := range []bool{false, true} {
				res := b.run(count, inPlace, *iters, *check == 1)
				alg := float64(r.Size) / res.us / 1e3 // bytes / µs → GB/s
				bus := alg * spec.busFactor(float64(n))
				if inPlace {
					r.InTimeUs, r.InAlgBW, r.InBusBW, r.InWrong, r.InIter = res.us, alg, bus, res.wrong, res.iter
				} else {
					r.OutTimeUs, r.OutAlgBW, r.OutBusBW, r.OutWrong, r.OutIter = res.us, alg, bus, res.wrong, res.iter
				}
			}
			busSum += (r.OutBusBW + r.InBusBW) / 2
			rows = append(rows, r)
			if show {
				fmt.Printf(" %12d %12d %8s %6s %6d   %9.2f %8.2f %8.2f %6s%s   %9.2f %8.2f %8.2f %6s%s\n", r.Size, r.Count, r.Type, r.Op, r.Root,
					r.OutTimeUs, r.OutAlgBW, r.OutBusBW, wrongText(r.OutWrong), iterText(r.OutIter),
					r.InTimeUs, r.InAlgBW, r.InBusBW, wrongText(r.InWrong), iterText(r.InIter))
			}
		}
		if inc > 0 {
			size += inc
		} else {
			size *= *factor
		}
	}
	for _, c := range comms {
		c.Destroy()
	}
	if job.Rank != 0 {
		return
	}
	avg := busSum / math.Max(1, float64(len(rows)))
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"op": *opName, "nccl": lib.Version().String(), "ranks": n,
			"processes": job.Size, "gpus_per_process": *ngpu, "rows": rows, "avg_busbw": avg})
	} else {
		fmt.Printf("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : %g \n#\n", avg)
	}
	if *plot != "" {
		lines := []series{{Name: "nccl-bench (gonccl)", Color: "#1f77b4"}}
		for _, r := range rows {
			lines[0].Points = append(lines[0].Points, [2]float64{float64(r.Size), r.OutBusBW})
		}
		if *overlay != "" {
			pts, err := readNCCLTests(*overlay)
			if err != nil {
				log.Fatal(err)
			}
			lines = append(lines, series{Name: "nccl-tests", Color: "#d62728", Points: pts})
		}
		title := fmt.Sprintf("%s, %d GPUs, NCCL %s: bus bandwidth (out of place)", *opName, n, lib.Version())
		if err := os.WriteFile(*plot, []byte(svg(title, lines)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// initComms creates this process's communicators: g ranks on GPUs
// LocalRank·g … LocalRank·g+g-1. Alone (no launcher), through ncclCommInitAll;
// in a job, every GPU's ncclCommInitRank from its own goroutine, as each
// blocks until all ranks of the job have joined.
func initComms(lib *nccl.Library, job launch.Job, g int, idFile string) ([]*nccl.Comm, error) {
	devs := make([]int, g)
	for i := range devs {
		devs[i] = job.LocalRank*g + i
	}
	if job.Size == 1 {
		return lib.InitAll(devs)
	}
	id, err := launch.UniqueID(lib, job, idFile)
	if err != nil {
		return nil, err
	}
	comms := make([]*nccl.Comm, g)
	errs := make([]error, g)
	var wg sync.WaitGroup
	for i, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[i], errs[i] = lib.InitRank(dev, id, job.Size*g, job.Rank*g+i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	launch.Cleanup(job, idFile)
	return comms, nil
}

// iterText is -I's columns: min, max, p99 and cv% of the iterations.
func iterText(st *iterStats) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("  %7.2f  %7.2f  %7.2f  %7.2f", st.MinUs, st.MaxUs, st.P99Us, st.CVPct)
}

func wrongText(w int) string {
	if w < 0 {
		return "N/A"
	}
	return strconv.Itoa(w)
}

func sortedKeys() []string {
	var k []string
	for name := range opSpecs {
		k = append(k, name)
	}
	return k
}

// bench holds, per local GPU, a stream and one send and one receive buffer
// sized for the largest run (-e), as nccl-tests allocates them.
type bench struct {
	lib     *nccl.Library
	comms   []*nccl.Comm // this process's ranks
	n       int          // ranks in the job
	streams []nccl.Stream
	send    []collectives.Buffer[uint8]
	recv    []collectives.Buffer[uint8]
	scratch []collectives.Buffer[float64] // for reductions over the job (jobReduce)
	perIter bool                          // -I: CUDA events around every iteration
	events  [][]nccl.Event                // per local GPU, iters+1 (with perIter)
	dt      abi.DataType
	red     abi.RedOp
	root    int
	spec    opSpec
	op      string
	grouped bool
	cap     int // bytes of every send and receive buffer

	p2pIter        bool // an iteration is sends and receives: p2p()
	movementNative bool // nativeMovement(), once

	matrices map[int][4][]uint64
}

func newBench(lib *nccl.Library, comms []*nccl.Comm, dt abi.DataType, red abi.RedOp, root int, spec opSpec, op string, grouped bool, maxBytes int) *bench {
	b := &bench{lib: lib, comms: comms, n: comms[0].Count(), dt: dt, red: red, root: root, spec: spec, op: op, grouped: grouped, cap: maxBytes}
	cu := lib.CUDA()
	b.send = make([]collectives.Buffer[uint8], len(comms))
	b.recv = make([]collectives.Buffer[uint8], len(comms))
	for i, c := range comms {
		s, err := cu.StreamCreate(c.Device(), abi.StreamNonBlocking)
		must(err)
		b.streams = append(b.streams, s)
		sc, err := collectives.Alloc[float64](cu, c.Device(), 2)
		must(err)
		b.scratch = append(b.scratch, sc)
		if !b.native() {
			b.send[i], err = collectives.Alloc[uint8](cu, c.Device(), maxBytes)
			must(err)
			b.recv[i], err = collectives.Alloc[uint8](cu, c.Device(), maxBytes)
			must(err)
		}
	}
	b.p2pIter, b.movementNative = b.p2p(), b.nativeMovement()
	if b.native() {
		// VCCL's ncclAlltoAllv wants symmetric windows. Registering one is
		// collective: one goroutine per communicator, or the first
		// registration would wait for the others.
		var wg sync.WaitGroup
		for i, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				b.send[i], err = collectives.AllocSymmetric[uint8](c, maxBytes)
				must(err)
				b.recv[i], err = collectives.AllocSymmetric[uint8](c, maxBytes)
				must(err)
			}()
		}
		wg.Wait()
	}
	return b
}

// p2p says whether an iteration is made of sends and receives, which must
// meet in one group even when the process drives a single GPU.
func (b *bench) p2p() bool {
	switch b.op {
	case "sendrecv":
		return true
	case "alltoallv":
		return !b.native()
	case "alltoall", "gather", "scatter":
		return !b.nativeMovement()
	}
	return false
}

// launch enqueues one iteration on every local GPU, at byte offset shift into
// the buffers: in one group when there are several GPUs or the operation is
// made of sends and receives, as nccl-tests does.
func (b *bench) launch(count int, inPlace bool, shift int) error {
	if len(b.comms) == 1 && !b.p2pIter {
		return b.enqueue(0, count, inPlace, shift)
	}
	return b.lib.Group(func() error {
		for i := range b.comms {
			if err := b.enqueue(i, count, inPlace, shift); err != nil {
				return err
			}
		}
		return nil
	})
}

// enqueue issues the operation of local GPU i.
func (b *bench) enqueue(i, count int, inPlace bool, shift int) error {
	c, s := b.comms[i], b.streams[i]
	me, n, sz := c.Rank(), b.n, b.dt.Size()
	send, recv := b.send[i].Ptr()+nccl.DevicePtr(shift), b.recv[i].Ptr()+nccl.DevicePtr(shift)
	if inPlace {
		switch b.op {
		case "all_gather", "gather":
			send = recv + nccl.DevicePtr(me*count*sz)
		case "reduce_scatter", "scatter":
			send, recv = recv, recv+nccl.DevicePtr(me*count*sz)
		default:
			send = recv
		}
	}
	switch b.op {
	case "all_reduce":
		return c.AllReduce(send, recv, count, b.dt, b.red, s)
	case "all_gather":
		return c.AllGather(send, recv, count, b.dt, s)
	case "reduce_scatter":
		return c.ReduceScatter(send, recv, count, b.dt, b.red, s)
	case "broadcast":
		return c.Broadcast(send, recv, count, b.dt, b.root, s)
	case "reduce":
		return c.Reduce(send, recv, count, b.dt, b.red, b.root, s)
	case "alltoall", "gather", "scatter":
		return b.movement(c, me, send, recv, count, s)
	case "sendrecv":
		if err := c.Send(send, count, b.dt, (me+1)%n, s); err != nil {
			return err
		}
		return c.Recv(recv, count, b.dt, (me+n-1)%n, s)
	case "alltoallv":
		return b.alltoallv(c, me, send, recv, count, s)
	}
	return fmt.Errorf("unknown operation %q", b.op)
}

// alltoallv runs nccl-tests' pattern: grouped Send/Recv as alltoallv_perf does,
// or VCCL's native ncclAlltoAllv when the library has it (buffers then come from
// symmetric windows; -grouped forces the grouped form).
func (b *bench) alltoallv(c *nccl.Comm, me int, send, recv nccl.DevicePtr, count int, s nccl.Stream) error {
	n, sz := b.n, b.dt.Size()
	total := count * n * sz
	if b.native() {
		m := b.matrix(n, total)
		return c.AlltoAllv(send, m[0], m[1], recv, m[2], m[3], 0, 0, b.dt, s)
	}
	var so, ro int
	for p := range n {
		sb, rb := peerBytes(me, p, n, total)/sz, peerBytes(p, me, n, total)/sz
		if sb > 0 {
			if err := c.Send(send+nccl.DevicePtr(so*sz), sb, b.dt, p, s); err != nil {
				return err
			}
			so += sb
		}
		if rb > 0 {
			if err := c.Recv(recv+nccl.DevicePtr(ro*sz), rb, b.dt, p, s); err != nil {
				return err
			}
			ro += rb
		}
	}
	return nil
}

// native says whether alltoallv uses VCCL's ncclAlltoAllv.
func (b *bench) native() bool { return b.op == "alltoallv" && !b.grouped && b.lib.Has("ncclAlltoAllv") }

// nativeMovement says whether alltoall, gather or scatter use NCCL's own call
// (2.28 and later) rather than grouped Send/Recv.
func (b *bench) nativeMovement() bool {
	name, ok := map[string]string{"alltoall": "ncclAlltoAll", "gather": "ncclGather", "scatter": "ncclScatter"}[b.op]
	return ok && !b.grouped && b.lib.Has(name)
}

// matrix is the pattern as VCCL's nranks×nranks counts and displacements,
// kept for the whole run (NCCL reads them until the group ends).
func (b *bench) matrix(n, total int) [4][]uint64 {
	if m, ok := b.matrices[total]; ok {
		return m
	}
	sz := b.dt.Size()
	var m [4][]uint64
	for k := range m {
		m[k] = make([]uint64, n*n)
	}
	for i := range n {
		var so, ro uint64
		for j := range n {
			m[0][i*n+j], m[1][i*n+j] = uint64(peerBytes(i, j, n, total)/sz), so
			so += m[0][i*n+j]
			m[2][i*n+j], m[3][i*n+j] = uint64(peerBytes(j, i, n, total)/sz), ro
			ro += m[2][i*n+j]
		}
	}
	if b.matrices == nil {
		b.matrices = map[int][4][]uint64{}
	}
	b.matrices[total] = m
	return m
}

func (b *bench) movement(c *nccl.Comm, me int, send, recv nccl.DevicePtr, count int, s nccl.Stream) error {
	n, sz, native := b.n, b.dt.Size(), b.movementNative
	switch b.op {
	case "alltoall":
		if native {
			return c.AlltoAll(send, recv, count, b.dt, s)
		}
		for p := range n {
			if err := c.Send(send+nccl.DevicePtr(p*count*sz), count, b.dt, p, s); err != nil {
				return err
			}
			if err := c.Recv(recv+nccl.DevicePtr(p*count*sz), count, b.dt, p, s); err != nil {
				return err
			}
		}
	case "gather":
		if native {
			return c.Gather(send, recv, count, b.dt, b.root, s)
		}
		if me == b.root {
			for p := range n {
				if err := c.Recv(recv+nccl.DevicePtr(p*count*sz), count, b.dt, p, s); err != nil {
					return err
				}
			}
		}
		return c.Send(send, count, b.dt, b.root, s)
	case "scatter":
		if native {
			return c.Scatter(send, recv, count, b.dt, b.root, s)
		}
		if me == b.root {
			for p := range n {
				if err := c.Send(send+nccl.DevicePtr(p*count*sz), count, b.dt, p, s); err != nil {
					return err
				}
			}
		}
		return c.Recv(recv, count, b.dt, b.root, s)
	}
	return nil
}

// count is the element count per rank of a size as nccl-tests prints it.
func (b *bench) count(size int) int {
	count := size / b.dt.Size()
	if b.spec.timesN {
		count /= b.n
	}
	if b.op == "alltoallv" { // nccl-tests aligns the per-peer count to 16 bytes
		count &^= max(16/b.dt.Size(), 1) - 1
	}
	return count
}

// warmUp runs warm iterations at every size from lo to hi, doubling, out of
// place, before anything is timed, as nccl-tests does.
func (b *bench) warmUp(lo, hi, warm int) {
	for size := lo; size <= hi; size *= 2 {
		count := b.count(size)
		if count == 0 {
			continue
		}
		for it := range warm {
			must(b.launch(count, false, b.shift(count, it)))
		}
		b.sync()
	}
}

// shift is the byte offset of iteration it into the buffers: nccl-tests moves
// every iteration to the next slot of the size, so that a small operation
// does not always find its data in cache.
func (b *bench) shift(count, it int) int {
	bytes := count * b.dt.Size()
	if b.spec.timesN {
		bytes *= b.n
	}
	return bytes * (it % max(b.cap/max(bytes, 1), 1))
}

// result is one timed run: µs per iteration averaged over the job's
// processes, the wrong elements of the checked run summed over its ranks (-1:
// not checked) and, with -I, the per-iteration statistics.
type result struct {
	us    float64
	wrong int
	iter  *iterStats
}

// iterStats summarise per-iteration times taken with CUDA events (nccl-tests'
// -I): each iteration's time is the slowest GPU's, over the whole job.
type iterStats struct {
	MinUs   float64   `json:"min_us"`
	MaxUs   float64   `json:"max_us"`
	AvgUs   float64   `json:"avg_us"`
	P50Us   float64   `json:"p50_us"`
	P95Us   float64   `json:"p95_us"`
	P99Us   float64   `json:"p99_us"`
	StdevUs float64   `json:"stdev_us"`
	CVPct   float64   `json:"cv_pct"`
	TimesUs []float64 `json:"times_us"`
}

// stats computes iterStats as nccl-tests' computeIterStats (src/util.cu).
func stats(times []float64) *iterStats {
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	n := len(sorted)
	pct := func(p int) float64 { return sorted[min(n-1, (n*p+99)/100-1)] }
	st := &iterStats{MinUs: sorted[0], MaxUs: sorted[n-1], P50Us: sorted[n/2], P95Us: pct(95), P99Us: pct(99), TimesUs: times}
	for _, t := range sorted {
		st.AvgUs += t
	}
	st.AvgUs /= float64(n)
	for _, t := range sorted {
		st.StdevUs += (t - st.AvgUs) * (t - st.AvgUs)
	}
	st.StdevUs = math.Sqrt(st.StdevUs / float64(n))
	if st.AvgUs > 0 {
		st.CVPct = st.StdevUs / st.AvgUs * 100
	}
	return st
}

// run times iters iterations. Before the timing, one run (the checked one
// with check) and a barrier, as nccl-tests. With perIter, a CUDA event is
// recorded on every stream before each iteration and after the last, as
// nccl-tests' -I 1 does.
func (b *bench) run(count int, inPlace bool, iters int, check bool) result {
	bytes := count * b.dt.Size()
	if b.spec.timesN {
		bytes *= b.n
	}
	if bytes > b.cap {
		log.Fatalf("%d bytes do not fit the %d-byte buffers", bytes, b.cap)
	}
	wrong := -1
	if check {
		wrong = b.check(count, inPlace)
	} else {
		must(b.launch(count, inPlace, 0))
		b.sync()
	}
	if b.perIter {
		b.makeEvents(iters)
	}
	b.barrier()
	// As nccl-tests times: the host clock around the launches and the final
	// synchronisation of every stream, so launch costs count.
	t0 := time.Now()
	for it := range iters {
		if b.perIter {
			b.record(it)
		}
		must(b.launch(count, inPlace, b.shift(count, it)))
	}
	if b.perIter {
		b.record(iters)
	}
	b.sync()
	us := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters)
	r := result{us: b.jobReduce([]float64{us}, abi.Sum)[0] / float64(b.n/len(b.comms)), wrong: wrong}
	if b.perIter {
		r.iter = stats(b.jobReduce(b.iterTimes(iters), abi.Max))
	}
	return r
}

// makeEvents gives every local stream iters+1 timing events.
func (b *bench) makeEvents(iters int) {
	cu := b.lib.CUDA()
	if len(b.events) == len(b.comms) && len(b.events[0]) == iters+1 {
		return
	}
	for _, evs := range b.events {
		for _, e := range evs {
			cu.EventDestroy(e)
		}
	}
	b.events = make([][]nccl.Event, len(b.comms))
	for i, c := range b.comms {
		for range iters + 1 {
			e, err := cu.EventCreate(c.Device(), abi.EventDefault)
			must(err)
			b.events[i] = append(b.events[i], e)
		}
	}
}

// record records event k on every local stream.
func (b *bench) record(k int) {
	cu := b.lib.CUDA()
	for i, s := range b.streams {
		must(cu.EventRecord(b.events[i][k], s))
	}
}

// iterTimes are the µs of each iteration on the slowest local GPU.
func (b *bench) iterTimes(iters int) []float64 {
	cu := b.lib.CUDA()
	t := make([]float64, iters)
	for i := range b.comms {
		for it := range iters {
			d, err := cu.EventElapsed(b.events[i][it], b.events[i][it+1])
			must(err)
			t[it] = max(t[it], float64(d.Nanoseconds())/1e3)
		}
	}
	return t
}

// sync waits for every local stream by polling, as nccl-tests'
// testStreamSynchronize: cudaStreamQuery in a loop, and the communicator's
// asynchronous error while a stream is busy.
func (b *bench) sync() {
	cu := b.lib.CUDA()
	for i, s := range b.streams {
		for {
			done, err := cu.StreamQuery(s)
			must(err)
			if done {
				break
			}
			must(b.comms[i].AsyncError())
		}
	}
}

// local says whether this process holds every rank of the job.
func (b *bench) local() bool { return len(b.comms) == b.n }

// barrier returns once every process has reached it (an all-reduce over the
// job); one process alone has nothing to wait for.
func (b *bench) barrier() {
	if !b.local() {
		b.jobReduce([]float64{0}, abi.Sum)
	}
}

// jobReduce combines v over the job's processes with op (abi.Sum or
// abi.Max): nccl-tests' Allreduce over MPI, here an NCCL all-reduce of
// float64. The process's first rank brings v; its other ranks bring zeros for
// a sum and v again for a maximum, so each process counts once.
func (b *bench) jobReduce(v []float64, op abi.RedOp) []float64 {
	if b.local() {
		return v
	}
	cu := b.lib.CUDA()
	if b.scratch[0].Len() < len(v) {
		for i, c := range b.comms {
			must(b.scratch[i].Free(cu))
			sc, err := collectives.Alloc[float64](cu, c.Device(), len(v))
			must(err)
			b.scratch[i] = sc
		}
	}
	zeros := make([]float64, len(v))
	for i := range b.comms {
		in := v
		if i > 0 && op == abi.Sum {
			in = zeros
		}
		must(b.scratch[i].CopyIn(cu, in))
	}
	must(b.lib.Group(func() error {
		for i, c := range b.comms {
			if err := c.AllReduce(b.scratch[i].Ptr(), b.scratch[i].Ptr(), len(v), abi.Float64, op, b.streams[i]); err != nil {
				return err
			}
		}
		return nil
	}))
	b.sync()
	out := make([]float64, len(v))
	must(b.scratch[0].CopyOut(cu, out))
	return out
}

// check runs the operation once on known bytes and counts the elements that
// differ from the CPU's answer, summed over the job's ranks. It checks
// int8/uint8 data (-d uint8) with sum or no reduction, bit for bit; other cases
// return -1, printed N/A, as do an in-place sendrecv, alltoall and alltoallv,
// whose peers read a buffer while it is overwritten (NCCL's own ncclAlltoAll
// included; timed all the same, as nccl-tests does).
func (b *bench) check(count int, inPlace bool) int {
	if b.dt != abi.Uint8 && b.dt != abi.Int8 || b.spec.reduce && b.red != abi.Sum ||
		inPlace && (b.op == "sendrecv" || b.op == "alltoallv" || b.op == "alltoall") {
		return -1 // not checked: printed N/A
	}
	n := b.n
	cu := b.lib.CUDA()
	total := count
	if b.spec.timesN {
		total *= n
	}
	// Every rank's input, so that each process can work out its own ranks'
	// answers; it writes only its own.
	in := inputs(n, total)
	for i, c := range b.comms {
		dst := b.send[i]
		if inPlace { // the in-place input sits in recv (at the rank's block where the operation says so)
			dst = b.recv[i]
		}
		must(dst.CopyIn(cu, in[c.Rank()]))
	}
	must(b.launch(count, inPlace, 0))
	b.sync()
	wrong := 0
	got := make([]uint8, total)
	for i, c := range b.comms {
		must(b.recv[i].CopyOut(cu, got))
		want := expected(b.op, in, c.Rank(), count, b.root, inPlace)
		for k, w := range want {
			if w >= 0 && int(got[k]) != w {
				wrong++
			}
		}
	}
	return int(b.jobReduce([]float64{float64(wrong)}, abi.Sum)[0])
}

// inputs are the check's data: n ranks' bytes, total each.
func inputs(n, total int) [][]uint8 {
	in := make([][]uint8, n)
	for r := range in {
		in[r] = make([]uint8, total)
		for k := range in[r] {
			in[r][k] = uint8(r*7 + k%13)
		}
	}
	return in
}

// expected is rank me's receive buffer for byte data, -1 where undefined.
func expected(op string, in [][]uint8, me, count, root int, inPlace bool) []int {
	n := len(in)
	out := make([]int, len(in[me]))
	for k := range out {
		out[k] = -1
	}
	blk := func(r, b, k int) int { return int(in[r][b*count+k]) }
	src := func(r, k int) int { // the input of rank r, element k (in place: inside its block)
		if inPlace && (op == "all_gather" || op == "gather") {
			return blk(r, r, k)
		}
		return int(in[r][k])
	}
	switch op {
	case "all_reduce", "reduce", "reduce_scatter":
		if op == "reduce" && me != root {
			return out
		}
		for k := 0; k < count; k++ {
			idx := k
			if op == "reduce_scatter" {
				idx = me*count + k
			}
			s := 0
			for r := range n {
				s += int(in[r][idx])
			}
			pos := k
			if op == "reduce_scatter" && inPlace {
				pos = me*count + k
			}
			out[pos] = s & 0xff
		}
	case "broadcast":
		for k := 0; k < count; k++ {
			out[k] = int(in[root][k])
		}
	case "all_gather", "gather":
		if op == "gather" && me != root {
			return out
		}
		for r := range n {
			for k := 0; k < count; k++ {
				out[r*count+k] = src(r, k)
			}
		}
	case "alltoall":
		for r := range n {
			for k := 0; k < count; k++ {
				out[r*count+k] = blk(r, me, k)
			}
		}
	case "scatter":
		base := 0
		if inPlace {
			base = me * count
		}
		for k := 0; k < count; k++ {
			out[base+k] = blk(root, me, k)
		}
	case "alltoallv": // nccl-tests' pattern, in bytes (one-byte elements)
		total := len(in[me])
		ro := 0
		for p := range n {
			so := 0
			for q := range me {
				so += peerBytes(p, q, n, total)
			}
			for k := range peerBytes(p, me, n, total) {
				out[ro+k] = int(in[p][so+k])
			}
			ro += peerBytes(p, me, n, total)
		}
	case "sendrecv":
		prev := (me + n - 1) % n
		for k := 0; k < count; k++ {
			out[k] = int(in[prev][k])
		}
	}
	return out
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
