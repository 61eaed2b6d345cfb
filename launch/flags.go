package launch

import (
	"errors"
	"flag"
	"strconv"
	"strings"
)

// Flags holds the command-line flags Register adds.
type Flags struct {
	// NP, when positive, asks the program to start NP local ranks of itself
	// with SelfLaunch instead of running as a rank (-np).
	NP int
	// IDFile names the file through which rank 0 shares the unique id with
	// the others (-idfile).
	IDFile string
	// Via names the way to share the unique id: auto, commid, file or store
	// (-idvia).
	Via string
	// Store is the host:port of a TCPStore for -idvia store; "" means
	// torchrun's (-store).
	Store string
	// Rank, Size and LocalRank place the process explicitly when Size is
	// positive (-rank, -size, -local-rank); LocalRank -1 means Rank.
	Rank, Size, LocalRank int
}

// Register adds -np, -idfile, -idvia, -store, -rank, -size and -local-rank to
// fs and returns where their values land once fs is parsed.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.IntVar(&f.NP, "np", 0, "start this many local ranks (one process per GPU) and wait for them")
	fs.StringVar(&f.IDFile, "idfile", "", "share the unique id through this file, on storage every rank reads (rank 0 writes it)")
	fs.StringVar(&f.Via, "idvia", "auto", "how the ranks share the unique id: auto, commid (NCCL_COMM_ID), file (-idfile) or store (torchrun's TCPStore, or -store)")
	fs.StringVar(&f.Store, "store", "", "host:port of a PyTorch TCPStore for -idvia store (default: torchrun's, MASTER_ADDR:MASTER_PORT)")
	fs.IntVar(&f.Rank, "rank", 0, "this process's rank, with -size (default: from the launcher)")
	fs.IntVar(&f.Size, "size", 0, "the number of ranks: with it, -rank and -local-rank place the process instead of the launcher")
	fs.IntVar(&f.LocalRank, "local-rank", -1, "this process's rank on its node, its GPU, with -size (default: -rank)")
	return f
}

// Detect places the process from the flags (-size, -rank, -local-rank) or,
// without -size, from the launcher's environment (see DetectWith).
func (f *Flags) Detect() (Job, error) {
	if f.NP < 0 {
		// Not a job of one: a mistyped -np would otherwise run alone.
		return Job{}, &EnvError{Launcher: Explicit, Var: "-np", Value: strconv.Itoa(f.NP), Msg: "want a positive number of ranks to start"}
	}
	if f.Size <= 0 {
		if f.Rank != 0 || f.LocalRank != -1 {
			return Job{}, errors.New("launch: -rank and -local-rank need -size")
		}
		return Detect()
	}
	local := f.LocalRank
	if local == -1 {
		local = f.Rank
	}
	j, err := DetectWith(Options{Size: f.Size, Rank: f.Rank, LocalRank: local})
	var e *EnvError
	if errors.As(err, &e) { // name the flags, not the fields
		names := strings.NewReplacer("Options.LocalRank", "-local-rank", "Options.Rank", "-rank", "Options.Size", "-size")
		e2 := *e
		e2.Var, e2.Msg = names.Replace(e.Var), names.Replace(e.Msg)
		return j, &e2
	}
	return j, err
}

// Share returns the way to share the unique id that -idvia, -idfile and
// -store give. An unknown -idvia makes UniqueID fail, naming it.
func (f *Flags) Share() Share {
	v, err := ParseVia(f.Via)
	if err != nil {
		return Share{Via: Via(-1), File: f.IDFile, Store: f.Store, badVia: f.Via}
	}
	return Share{Via: v, File: f.IDFile, Store: f.Store}
}
