package launch

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gonccl/nccl"
)

// Via is a way for the ranks of a job to share NCCL's unique id.
type Via int

const (
	// ViaAuto chooses from the job (see UniqueID).
	ViaAuto Via = iota
	// ViaCommID uses NCCL's own bootstrap: NCCL_COMM_ID=host:port on every
	// rank makes every rank's ncclGetUniqueId return the same id, and rank
	// 0's NCCL binds that address. Nothing travels before InitRank.
	ViaCommID
	// ViaFile passes the id through a file every rank can read: rank 0
	// writes it, the others wait for it.
	ViaFile
	// ViaStore passes the id through a PyTorch TCPStore, torchrun's by
	// default: rank 0 sets a key, the others wait for it and get it.
	ViaStore
)

var viaNames = []string{"auto", "commid", "file", "store"}

// String returns the name ParseVia reads: auto, commid, file or store.
func (v Via) String() string {
	if v >= 0 && int(v) < len(viaNames) {
		return viaNames[v]
	}
	return "Via(" + strconv.Itoa(int(v)) + ")"
}

// ParseVia reads auto, commid, file or store.
func ParseVia(s string) (Via, error) {
	for i, n := range viaNames {
		if s == n {
			return Via(i), nil
		}
	}
	return 0, fmt.Errorf("launch: %s is not a way to share the unique id (auto, commid, file or store)", quote(s))
}

// Share says how the ranks share the unique id. The zero value chooses from
// the job.
type Share struct {
	Via  Via    // ViaAuto: see UniqueID
	File string // the id file (ViaFile; a File also makes ViaAuto choose ViaFile)
	// Store is the TCPStore's host:port for ViaStore; "" means the job's
	// (Job.StoreAddr: torchrun's).
	Store string
	// Name tells a communicator's id from another's in the same job: the store
	// key carries it (see IDKey). "" means "default".
	Name string

	badVia string // an -idvia value ParseVia refused, for Choose to name
}

// UniqueID returns the id every rank of job passes to Library.InitRank. lib
// is needed on rank 0 only (and on every rank with ViaCommID); other ranks
// may pass nil. A nil lib where one is needed is an error.
//
// ViaAuto takes, in this order: ViaFile when s.File is set; ViaCommID when
// job.CommID is (NCCL_COMM_ID, or MASTER_ADDR:MASTER_PORT where no store
// listens, or under srun the step's first node and SlurmPort); ViaStore when
// job.StoreAddr is (under torchrun); an error that says what to set
// otherwise. A job of one rank shares nothing.
//
// Every wait ends with ctx: give it a deadline. Errors say which way was
// taken and what failed; a wait that ctx ended wraps ctx.Err().
//
// ViaStore: rank 0 calls lib.GetUniqueID and sets IDKey(job, s.Name) to the
// 128 bytes; the others Get it. Rank 0 refuses a key that is already set (two
// communicators under one name). Python reads the same bytes with
// TCPStore(host, port, is_master=False).get(key).
//
// ViaFile: rank 0 writes the id with the job's RunID and the time, atomically
// (a temporary file, then rename), replacing a stale file (one of another run,
// or written before rank 0 started); it refuses a file this run wrote since it
// started (two communicators sharing the file). The others wait until the
// file holds an id of their run: same RunID, and, where the launcher gives no
// RunID that tells runs apart (none, or torchrun's default "none"), written no
// earlier than a minute before the reader started. A stale file is not an
// error until ctx ends, since rank 0 replaces it. Rank 0 removes the file with
// Cleanup.
//
// ViaCommID: NCCL_COMM_ID is set from job.CommID when unset (for the whole
// process: every later GetUniqueID returns the same id), then every rank
// calls lib.GetUniqueID. It serves one communicator: a Share.Name other than
// the default is refused. Under torchrun, MASTER_PORT is the agent's store: an
// NCCL_COMM_ID naming job.StoreAddr is refused (NCCL could not bind it).
func UniqueID(ctx context.Context, lib *nccl.Library, job Job, s Share) (nccl.UniqueID, error) {
	via, err := Choose(job, s)
	if err != nil {
		return nccl.UniqueID{}, err
	}
	if lib == nil && (via == ViaAuto || via == ViaCommID || job.Rank == 0) {
		return nccl.UniqueID{}, fmt.Errorf("launch: unique id via %s (%s rank %d of %d): no library: rank 0, and every rank with NCCL_COMM_ID, calls GetUniqueID",
			via, job.Launcher, job.Rank, job.Size)
	}
	var id nccl.UniqueID
	switch via {
	case ViaAuto: // a job of one
		id, err = lib.GetUniqueID()
	case ViaCommID:
		id, err = viaCommID(lib, job, s.Name)
	case ViaFile:
		id, err = viaFile(ctx, lib, job, s.File)
	case ViaStore:
		id, err = viaStore(ctx, lib, job, s)
	}
	if err != nil {
		return nccl.UniqueID{}, fmt.Errorf("launch: unique id via %s (%s rank %d of %d): %w", via, job.Launcher, job.Rank, job.Size, err)
	}
	return id, nil
}

// Choose returns the way UniqueID takes for job and s, or the error it would
// return for having none; ViaAuto for a job of one, which shares nothing.
func Choose(job Job, s Share) (Via, error) {
	if s.badVia != "" {
		return 0, fmt.Errorf("launch: -idvia %s: want auto, commid, file or store", quote(s.badVia))
	}
	if s.Via != ViaAuto {
		if s.Via < ViaAuto || s.Via > ViaStore {
			return 0, fmt.Errorf("launch: %v is not a way to share the unique id", s.Via)
		}
		if s.Via == ViaFile && s.File == "" {
			return 0, errors.New("launch: unique id via file: no file named")
		}
		return s.Via, nil
	}
	switch {
	case job.Size <= 1:
		return ViaAuto, nil
	case s.File != "":
		return ViaFile, nil
	case job.CommID != "":
		return ViaCommID, nil
	case job.StoreAddr != "" || s.Store != "":
		return ViaStore, nil
	}
	return 0, noWay(job)
}

// noWay says what to set for a job with no way to share the id.
func noWay(job Job) error {
	host := job.RootHost
	if host == "" {
		host = "<rank 0's host>"
	}
	set := "NCCL_COMM_ID=" + host + ":<free port> on every rank"
	switch job.Launcher {
	case OpenMPI:
		set = "mpirun -x NCCL_COMM_ID=" + host + ":<free port>"
	case Slurm:
		if job.RootHost != "" {
			set += " (srun runs rank 0 on " + job.RootHost + ", the first node of the step)"
		}
	case Torchrun:
		set = "MASTER_ADDR and MASTER_PORT, or " + set
	}
	return fmt.Errorf("launch: %s started %d ranks but gave no way to share NCCL's unique id: set %s, or pass -idfile with a path every rank can read",
		job.Launcher, job.Size, set)
}

func viaCommID(lib *nccl.Library, job Job, name string) (nccl.UniqueID, error) {
	if name != "" && name != "default" {
		// NCCL_COMM_ID makes every id of the process the same, and NCCL's
		// root at that address serves one communicator at a time.
		return nccl.UniqueID{}, fmt.Errorf("a communicator named %q: NCCL_COMM_ID gives one id per process, for one communicator; share the ids of further communicators another way (-idvia store or file, or over the first communicator)", name)
	}
	cur := os.Getenv("NCCL_COMM_ID")
	if cur == "" {
		if job.CommID == "" {
			return nccl.UniqueID{}, errors.New("NCCL_COMM_ID is not set")
		}
		cur = job.CommID
		os.Setenv("NCCL_COMM_ID", cur)
	}
	if job.StoreAddr != "" && sameAddr(cur, job.StoreAddr) {
		return nccl.UniqueID{}, fmt.Errorf("NCCL_COMM_ID=%s is where torchrun's store listens (MASTER_ADDR:MASTER_PORT): NCCL could not bind it; unset NCCL_COMM_ID and the ranks meet through the store", cur)
	}
	return lib.GetUniqueID()
}

// sameAddr compares host:port forms loosely (brackets, case).
func sameAddr(a, b string) bool {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("[", "", "]", "").Replace(s)) }
	return norm(a) == norm(b)
}

// IDKey returns the store key under which ViaStore shares the id of the
// communicator called name (in Python's spelling, without PyTorch's "/"):
//
//	gonccl/<RunID>/<Restart>/<name>/unique_id
//
// The run and the restart count keep keys of other runs and of earlier
// restarts (torchrun's store outlives them) apart; each part is escaped as a
// URL path segment.
func IDKey(job Job, name string) string {
	if name == "" {
		name = "default"
	}
	run := job.RunID
	if run == "" {
		run = "-"
	}
	return "gonccl/" + url.PathEscape(run) + "/" + strconv.Itoa(job.Restart) + "/" + url.PathEscape(name) + "/unique_id"
}

func viaStore(ctx context.Context, lib *nccl.Library, job Job, s Share) (nccl.UniqueID, error) {
	addr := s.Store
	if addr == "" {
		addr = job.StoreAddr
	}
	if addr == "" {
		return nccl.UniqueID{}, errors.New("no store: the job has none (Job.StoreAddr) and Share.Store is empty")
	}
	st, err := DialStore(ctx, addr)
	if err != nil {
		return nccl.UniqueID{}, err
	}
	defer st.Close()
	key := IDKey(job, s.Name)
	if job.Rank != 0 {
		v, err := st.Get(ctx, key)
		if err != nil {
			return nccl.UniqueID{}, fmt.Errorf("waiting for rank 0 to set it: %w", err)
		}
		var id nccl.UniqueID
		if len(v) != nccl.UniqueIDBytes {
			return id, fmt.Errorf("store %s: key %s holds %d bytes, not an id of %d", addr, quote(key), len(v), nccl.UniqueIDBytes)
		}
		return id, id.UnmarshalBinary(v)
	}
	if set, err := st.Check(ctx, key); err != nil {
		return nccl.UniqueID{}, err
	} else if set {
		return nccl.UniqueID{}, fmt.Errorf("store %s: key %s is already set: give each communicator its own Share.Name", addr, quote(key))
	}
	id, err := lib.GetUniqueID()
	if err != nil {
		return id, err
	}
	if err := st.Set(ctx, key, id.Internal[:]); err != nil {
		return nccl.UniqueID{}, err
	}
	// SET has no reply: a CHECK's answer says the server took it.
	if set, err := st.Check(ctx, key); err != nil {
		return nccl.UniqueID{}, err
	} else if !set {
		return nccl.UniqueID{}, fmt.Errorf("store %s: key %s is not set after setting it", addr, quote(key))
	}
	return id, nil
}

// Cleanup removes the id file of s.File on rank 0 (every rank has read it
// once the communicator exists); it does nothing for other ways or ranks.
// Store keys stay: the store ends with the job.
func Cleanup(job Job, s Share) {
	if job.Rank == 0 && s.File != "" {
		os.Remove(s.File)
	}
}

// processStart approximates when this process started: the package's
// initialisation.
var processStart = time.Now()

// staleSkew is how much earlier than a reader's start a file of a run
// without a distinctive RunID may have been written.
const staleSkew = time.Minute

// idFile is the content of an id file:
//
//	gonccl unique id 1
//	run <RunID, URL-escaped; - when unknown>
//	time <when rank 0 wrote it, RFC 3339 with nanoseconds>
//	id <256 hex digits>
type idFile struct {
	run     string
	written time.Time
	id      nccl.UniqueID
}

const idFileMagic = "gonccl unique id 1"

func (f idFile) encode() []byte {
	run := f.run
	if run == "" {
		run = "-"
	} else {
		run = url.PathEscape(run)
	}
	return fmt.Appendf(nil, "%s\nrun %s\ntime %s\nid %s\n", idFileMagic, run, f.written.UTC().Format(time.RFC3339Nano), f.id)
}

func parseIDFile(b []byte) (idFile, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 4 || lines[0] != idFileMagic {
		return idFile{}, errors.New("not an id file of this gonccl (an older format, or another file)")
	}
	var f idFile
	var ok [3]bool
	var run, when, id string
	run, ok[0] = strings.CutPrefix(lines[1], "run ")
	when, ok[1] = strings.CutPrefix(lines[2], "time ")
	id, ok[2] = strings.CutPrefix(lines[3], "id ")
	if !ok[0] || !ok[1] || !ok[2] {
		return f, errors.New("malformed id file")
	}
	var err error
	if run != "-" {
		if f.run, err = url.PathUnescape(run); err != nil {
			return f, fmt.Errorf("malformed run: %v", err)
		}
	}
	if f.written, err = time.Parse(time.RFC3339Nano, when); err != nil {
		return f, fmt.Errorf("malformed time: %v", err)
	}
	if f.id, err = nccl.ParseUniqueID(id); err != nil {
		return f, err
	}
	return f, nil
}

// weakRun reports whether a RunID may repeat across runs: none at all, or
// torchrun's default run id.
func weakRun(job Job) bool {
	return job.RunID == "" || job.RunID == "none"
}

// stale says why f is not this run's id file, or "".
func stale(f idFile, job Job, start time.Time) string {
	if f.run != job.RunID {
		return fmt.Sprintf("it is run %s's, this is run %s", quote(f.run), quote(job.RunID))
	}
	if weakRun(job) && f.written.Before(start.Add(-staleSkew)) {
		return fmt.Sprintf("written at %s, %v before this process started: a file of an earlier run",
			f.written.Format(time.RFC3339), start.Sub(f.written).Round(time.Second))
	}
	return ""
}

func viaFile(ctx context.Context, lib *nccl.Library, job Job, path string) (nccl.UniqueID, error) {
	if job.Rank == 0 {
		return writeIDFile(lib, job, path)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	why := "it does not exist yet"
	for {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			f, perr := parseIDFile(b)
			if perr != nil {
				why = perr.Error()
			} else if why = stale(f, job, processStart); why == "" {
				return f.id, nil
			}
		case !errors.Is(err, os.ErrNotExist):
			why = err.Error()
		}
		select {
		case <-ctx.Done():
			return nccl.UniqueID{}, fmt.Errorf("waiting for rank 0 to write %s (the last look: %s): %w", path, why, ctx.Err())
		case <-tick.C:
		}
	}
}

func writeIDFile(lib *nccl.Library, job Job, path string) (nccl.UniqueID, error) {
	if b, err := os.ReadFile(path); err == nil {
		if f, err := parseIDFile(b); err == nil && f.run == job.RunID && !f.written.Before(processStart) {
			return nccl.UniqueID{}, fmt.Errorf("%s holds an id this run wrote at %s: give each communicator its own file", path, f.written.Format(time.RFC3339Nano))
		}
	}
	id, err := lib.GetUniqueID()
	if err != nil {
		return id, err
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	if err := os.WriteFile(tmp, idFile{job.RunID, time.Now(), id}.encode(), 0o600); err != nil {
		return nccl.UniqueID{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nccl.UniqueID{}, err
	}
	return id, nil
}
