// Command nccl-bench measures NCCL operations through gonccl the way nccl-tests
// does, with its flags, its table and its bus-bandwidth factors, so the two can
// be run side by side on the same GPUs:
//
//	nccl-bench -op all_reduce -b 8 -e 1G -f 2 -g 2
//	all_reduce_perf            -b 8 -e 1G -f 2 -g 2
//
// One process drives -g GPUs from one goroutine, every operation of an
// iteration in one NCCL group (nccl-tests' -g). Time is taken as nccl-tests
// takes it: the host clock around -n iterations (after -w warm-up ones) and the
// synchronisation of every stream; -c checks one extra run against a CPU
// reference.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/collectives"
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
	Size, Count int
	Type, Op    string
	Root        int
	OutTimeUs   float64 `json:"out_of_place_time_us"`
	OutAlgBW    float64 `json:"out_of_place_algbw"`
	OutBusBW    float64 `json:"out_of_place_busbw"`
	OutWrong    int     `json:"out_of_place_wrong"`
	InTimeUs    float64 `json:"in_place_time_us"`
	InAlgBW     float64 `json:"in_place_algbw"`
	InBusBW     float64 `json:"in_place_busbw"`
	InWrong     int     `json:"in_place_wrong"`
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
	ngpu := flag.Int("g", 0, "GPUs driven by this process (default: all)")
	grouped := flag.Bool("grouped", false, "alltoall, gather, scatter through grouped send/recv instead of the native call")
	asJSON := flag.Bool("json", false, "print JSON instead of the table")
	plot := flag.String("plot", "", "draw busbw against size into this SVG file")
	overlay := flag.String("overlay", "", "with -plot: a saved nccl-tests output to draw beside")
	flag.Parse()

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
	lib, err := nccl.Open()
	if err != nil {
		log.Fatal(err)
	}
	cu := lib.CUDA()
	if *ngpu == 0 {
		if *ngpu, err = cu.DeviceCount(); err != nil {
			log.Fatal(err)
		}
	}
	n := *ngpu
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	comms, err := lib.InitAll(devs)
	if err != nil {
		log.Fatal(err)
	}
	b := newBench(lib, comms, dt, red, *root, spec, *opName, *grouped)
	b.maxBytes = hi
	if !*asJSON {
		fmt.Printf("# nccl-bench (gonccl) %s, NCCL %s from %s\n", *opName, lib.Version(), lib.Path)
		fmt.Printf("# nGpus %d, iters %d, warmup %d, check %d\n", n, *iters, *warm, *check)
		fmt.Printf("#\n#%12s %12s %8s %6s %6s   %9s %8s %8s %6s   %9s %8s %8s %6s\n", "size", "count", "type", "redop", "root",
			"time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
		fmt.Printf("#%12s %12s %8s %6s %6s   %9s %8s %8s %6s   %9s %8s %8s %6s\n", "(B)", "(elements)", "", "", "",
			"(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	}
	var rows []row
	var busSum float64
	for size := lo; size <= hi; {
		count := size / dt.Size()
		if spec.timesN {
			count /= n
		}
		if *opName == "alltoallv" { // nccl-tests aligns the per-peer count to 16 bytes
			count &^= max(16/dt.Size(), 1) - 1
		}
		if count > 0 {
			r := row{Size: count * dt.Size() * map[bool]int{true: n, false: 1}[spec.timesN], Count: count, Type: *dtName, Op: *redName, Root: *root}
			if !spec.reduce {
				r.Op = "none"
			}
			if !spec.rooted {
				r.Root = -1
			}
			for _, inPlace := range []bool{false, true} {
				t, wrong := b.run(count, inPlace, *warm, *iters, *check == 1)
				alg := float64(r.Size) / t / 1e3 // bytes / µs → GB/s
				bus := alg * spec.busFactor(float64(n))
				if inPlace {
					r.InTimeUs, r.InAlgBW, r.InBusBW, r.InWrong = t, alg, bus, wrong
				} else {
					r.OutTimeUs, r.OutAlgBW, r.OutBusBW, r.OutWrong = t, alg, bus, wrong
				}
			}
			busSum += (r.OutBusBW + r.InBusBW) / 2
			rows = append(rows, r)
			if !*asJSON {
				fmt.Printf(" %12d %12d %8s %6s %6d   %9.2f %8.2f %8.2f %6s   %9.2f %8.2f %8.2f %6s\n", r.Size, r.Count, r.Type, r.Op, r.Root,
					r.OutTimeUs, r.OutAlgBW, r.OutBusBW, wrongText(r.OutWrong), r.InTimeUs, r.InAlgBW, r.InBusBW, wrongText(r.InWrong))
			}
		}
		if *step != "" {
			inc, err := parseSize(*step)
			if err != nil || inc <= 0 {
				log.Fatal("bad -i")
			}
			size += inc
		} else {
			size *= *factor
		}
	}
	avg := busSum / math.Max(1, float64(len(rows)))
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"op": *opName, "nccl": lib.Version().String(), "gpus": n, "rows": rows, "avg_busbw": avg})
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
	for _, c := range comms {
		c.Destroy()
	}
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

// bench holds one buffer pair and stream per GPU, sized for the largest run.
type bench struct {
	lib     *nccl.Library
	comms   []*nccl.Comm
	streams []nccl.Stream
	send    []collectives.Buffer[uint8]
	recv    []collectives.Buffer[uint8]
	dt      abi.DataType
	red     abi.RedOp
	root    int
	spec    opSpec
	op      string
	grouped bool
	cap     int

	matrices map[int][4][]uint64
	maxBytes int // the largest buffer a run needs (-e)
}

func newBench(lib *nccl.Library, comms []*nccl.Comm, dt abi.DataType, red abi.RedOp, root int, spec opSpec, op string, grouped bool) *bench {
	b := &bench{lib: lib, comms: comms, dt: dt, red: red, root: root, spec: spec, op: op, grouped: grouped}
	cu := lib.CUDA()
	for i := range comms {
		s, err := cu.StreamCreate(i, abi.StreamNonBlocking)
		if err != nil {
			log.Fatal(err)
		}
		b.streams = append(b.streams, s)
	}
	return b
}

func (b *bench) ensure(bytes int) {
	if bytes <= b.cap {
		return
	}
	cu := b.lib.CUDA()
	if b.native() { // symmetric windows, once, at the largest size
		// Registering a symmetric window is collective: one goroutine per
		// communicator, or the first registration would wait for the others.
		bytes = b.maxBytes
		b.send = make([]collectives.Buffer[uint8], len(b.comms))
		b.recv = make([]collectives.Buffer[uint8], len(b.comms))
		var wg sync.WaitGroup
		for i, c := range b.comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				b.send[i], err = collectives.AllocSymmetric[uint8](c, bytes)
				must(err)
				b.recv[i], err = collectives.AllocSymmetric[uint8](c, bytes)
				must(err)
			}()
		}
		wg.Wait()
		b.cap = bytes
		return
	}
	for i := range b.comms {
		if b.cap > 0 {
			b.send[i].Free(cu)
			b.recv[i].Free(cu)
		}
	}
	b.send, b.recv = b.send[:0], b.recv[:0]
	for i := range b.comms {
		s, err := collectives.Alloc[uint8](cu, i, bytes)
		if err != nil {
			log.Fatal(err)
		}
		r, err := collectives.Alloc[uint8](cu, i, bytes)
		if err != nil {
			log.Fatal(err)
		}
		b.send, b.recv = append(b.send, s), append(b.recv, r)
	}
	b.cap = bytes
}

// launch enqueues one iteration on every GPU, in one group.
func (b *bench) launch(count int, inPlace bool) error {
	n := len(b.comms)
	sz := b.dt.Size()
	return b.lib.Group(func() error {
		for i, c := range b.comms {
			s := b.streams[i]
			send, recv := b.send[i].Ptr(), b.recv[i].Ptr()
			if inPlace {
				send = recv
				switch b.op {
				case "all_gather", "gather":
					send = recv + nccl.DevicePtr(i*count*sz)
				case "reduce_scatter":
					send, recv = b.recv[i].Ptr(), b.recv[i].Ptr()+nccl.DevicePtr(i*count*sz)
				case "scatter":
					send, recv = b.recv[i].Ptr(), b.recv[i].Ptr()+nccl.DevicePtr(i*count*sz)
				}
			}
			var err error
			switch b.op {
			case "all_reduce":
				err = c.AllReduce(send, recv, count, b.dt, b.red, s)
			case "all_gather":
				err = c.AllGather(send, recv, count, b.dt, s)
			case "reduce_scatter":
				err = c.ReduceScatter(send, recv, count, b.dt, b.red, s)
			case "broadcast":
				err = c.Broadcast(send, recv, count, b.dt, b.root, s)
			case "reduce":
				err = c.Reduce(send, recv, count, b.dt, b.red, b.root, s)
			case "alltoall", "gather", "scatter":
				err = b.movement(c, i, send, recv, count, s)
			case "sendrecv":
				if err = c.Send(send, count, b.dt, (i+1)%n, s); err == nil {
					err = c.Recv(recv, count, b.dt, (i+n-1)%n, s)
				}
			case "alltoallv":
				err = b.alltoallv(c, i, send, recv, count, s)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// alltoallv runs nccl-tests' pattern: grouped Send/Recv as alltoallv_perf does,
// or VCCL's native ncclAlltoAllv when the library has it (buffers then come from
// symmetric windows; -grouped forces the grouped form).
func (b *bench) alltoallv(c *nccl.Comm, me int, send, recv nccl.DevicePtr, count int, s nccl.Stream) error {
	n, sz := len(b.comms), b.dt.Size()
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

func (b *bench) native() bool { return b.op == "alltoallv" && !b.grouped && b.lib.Has("ncclAlltoAllv") }

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
	n, sz := len(b.comms), b.dt.Size()
	native := !b.grouped && b.lib.Has("nccl"+map[string]string{"alltoall": "AlltoAll", "gather": "Gather", "scatter": "Scatter"}[b.op])
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

// run times iters iterations after warm-up ones and returns µs per iteration
// (the slowest GPU), and the number of wrong elements of a checked run.
func (b *bench) run(count int, inPlace bool, warm, iters int, check bool) (float64, int) {
	n := len(b.comms)
	bytes := count * b.dt.Size()
	if b.spec.timesN {
		bytes *= n
	}
	b.ensure(bytes)
	cu := b.lib.CUDA()
	wrong := -1
	if check {
		wrong = b.check(count, inPlace)
	}
	for range warm {
		must(b.launch(count, inPlace))
	}
	for i := range b.comms {
		must(cu.StreamSynchronize(b.streams[i]))
	}
	// As nccl-tests times: the host clock around the launches and the final
	// synchronisation of every stream, so launch costs count.
	t0 := time.Now()
	for range iters {
		must(b.launch(count, inPlace))
	}
	for i := range b.comms {
		must(cu.StreamSynchronize(b.streams[i]))
	}
	return float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(iters), wrong
}

// check runs the operation once on known bytes and counts the elements that
// differ from the CPU's answer. It checks int8/uint8 data (-d uint8) with sum
// or no reduction, bit for bit; other cases return -1, printed N/A, as do an
// in-place sendrecv and an in-place grouped alltoall, whose peers read a buffer
// while it is overwritten (timed all the same, as nccl-tests does).
func (b *bench) check(count int, inPlace bool) int {
	if b.dt != abi.Uint8 && b.dt != abi.Int8 || b.spec.reduce && b.red != abi.Sum || b.op == "alltoallv" || inPlace && (b.op == "sendrecv" || b.op == "alltoall" && (b.grouped || !b.lib.Has("ncclAlltoAll"))) {
		return -1 // not checked: printed N/A
	}
	n := len(b.comms)
	cu := b.lib.CUDA()
	total := count
	if b.spec.timesN {
		total *= n
	}
	in := make([][]uint8, n)
	for i := range b.comms {
		in[i] = make([]uint8, total)
		for k := range in[i] {
			in[i][k] = uint8(i*7 + k%13)
		}
		dst := b.send[i]
		if inPlace {
			dst = b.recv[i]
		}
		must(dst.CopyIn(cu, in[i]))
	}
	if inPlace { // the in-place input sits in recv at the rank's block
		for i := range b.comms {
			must(b.recv[i].CopyIn(cu, in[i]))
		}
	}
	must(b.launch(count, inPlace))
	wrong := 0
	for i := range b.comms {
		must(cu.StreamSynchronize(b.streams[i]))
		got := make([]uint8, total)
		must(b.recv[i].CopyOut(cu, got))
		want := expected(b.op, in, i, count, b.root, inPlace)
		for k, w := range want {
			if w >= 0 && int(got[k]) != w {
				wrong++
			}
		}
	}
	return wrong
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
