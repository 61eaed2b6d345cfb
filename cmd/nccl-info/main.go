// Command nccl-info says which NCCL and CUDA runtime gonccl finds, how it found
// them, what they can do, and, when something is missing, what to set; and
// where this process stands in a job (launcher, rank, size) and how package
// launch would share the unique id.
//
//	go run ./cmd/nccl-info          # a report for people
//	go run ./cmd/nccl-info -json    # the same as JSON
//
// It exits 1 when NCCL cannot be loaded, 0 otherwise (a missing CUDA runtime or
// GPU is reported, not fatal: the library itself is usable for inspection).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/launch"
)

type attempt struct {
	Via   string `json:"via"`
	Path  string `json:"path"`
	Error string `json:"error,omitempty"`
}

type feature struct {
	Name    string `json:"name"`
	Since   string `json:"since,omitempty"`
	Vendor  string `json:"vendor,omitempty"`
	Present bool   `json:"present"`
}

type libReport struct {
	Loaded bool      `json:"loaded"`
	Path   string    `json:"path,omitempty"`
	Via    string    `json:"via,omitempty"`
	Trace  []attempt `json:"trace"`
	Error  string    `json:"error,omitempty"`
	Hint   string    `json:"hint,omitempty"`
}

type report struct {
	Platform string `json:"platform"`
	NCCL     struct {
		libReport
		Version      string    `json:"version,omitempty"`
		VersionCode  int       `json:"version_code,omitempty"`
		Features     []feature `json:"features,omitempty"`
		AlltoAllvABI int       `json:"alltoallv_abi,omitempty"`
	} `json:"nccl"`
	CUDA struct {
		libReport
		Runtime     string `json:"runtime_version,omitempty"`
		Driver      string `json:"driver_version,omitempty"`
		Devices     int    `json:"devices"`
		DeviceError string `json:"device_error,omitempty"`
	} `json:"cuda"`
	Job jobReport `json:"job"`
}

func main() {
	asJSON := flag.Bool("json", false, "print the report as JSON")
	lib := flag.String("lib", "", "load libnccl from this file or folder (as GONCCL_NCCL_LIB)")
	cudart := flag.String("cudart", "", "load libcudart from this file or folder (as GONCCL_CUDART_LIB)")
	flag.Parse()

	var r report
	r.Platform = runtime.GOOS + "/" + runtime.GOARCH
	l, err := nccl.Open(nccl.WithLibrary(*lib), nccl.WithoutCUDARuntime())
	fill(&r.NCCL.libReport, err, func() nccl.LibraryFile { return l.LibraryFile })
	if err == nil {
		r.NCCL.Version = l.Version().String()
		r.NCCL.VersionCode = l.Version().Code()
		for _, f := range l.Features() {
			ff := feature{Name: f.Name, Vendor: f.Vendor, Present: f.Present}
			if f.Vendor == "" {
				ff.Since = f.Since.String()
			}
			r.NCCL.Features = append(r.NCCL.Features, ff)
		}
		if l.Has("ncclAlltoAllv") {
			r.NCCL.AlltoAllvABI = l.AlltoAllvABI()
		}
	}
	cu, cerr := nccl.OpenCUDA(nccl.WithCUDARuntime(*cudart))
	fill(&r.CUDA.libReport, cerr, func() nccl.LibraryFile { return cu.LibraryFile })
	if cerr == nil {
		if v, err := cu.RuntimeVersion(); err == nil {
			r.CUDA.Runtime = cudaVersion(v)
		}
		if v, err := cu.DriverVersion(); err == nil {
			r.CUDA.Driver = cudaVersion(v)
		}
		n, err := cu.DeviceCount()
		r.CUDA.Devices = n
		if err != nil {
			r.CUDA.DeviceError = err.Error()
		}
	}

	r.Job = placeJob(launch.Options{})

	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
	} else {
		write(os.Stdout, &r)
	}
	if err != nil {
		os.Exit(1)
	}
}

func fill(lr *libReport, err error, file func() nccl.LibraryFile) {
	var trace []nccl.Attempt
	if err != nil {
		lr.Error = err.Error()
		var le *nccl.LoadError
		if errors.As(err, &le) {
			trace = le.Trace
			lr.Error = le.Err.Error()
			lr.Hint = le.Hint
		}
	} else {
		f := file()
		lr.Loaded, lr.Path, lr.Via, trace = true, f.Path, f.Via, f.Trace
	}
	lr.Trace = []attempt{}
	for _, a := range trace {
		at := attempt{Via: a.Via, Path: a.Path}
		if a.Err != nil {
			at.Error = a.Err.Error()
		}
		lr.Trace = append(lr.Trace, at)
	}
}

func cudaVersion(code int) string {
	if code == 0 {
		return "none"
	}
	major, minor := abi.DecodeCudaVersion(code)
	return fmt.Sprintf("%d.%d", major, minor)
}

func write(w io.Writer, r *report) {
	fmt.Fprintf(w, "platform  %s\n\n", r.Platform)
	fmt.Fprintln(w, "NCCL")
	if r.NCCL.Loaded {
		fmt.Fprintf(w, "  file      %s\n  found by  %s\n  version   %s (code %d)\n", r.NCCL.Path, r.NCCL.Via, r.NCCL.Version, r.NCCL.VersionCode)
		fmt.Fprintln(w, "  optional functions")
		for _, f := range r.NCCL.Features {
			mark, from := "absent ", f.Since
			if f.Present {
				mark = "present"
			}
			if f.Vendor != "" {
				from = f.Vendor
			}
			fmt.Fprintf(w, "    %s  %-26s (%s)\n", mark, f.Name, from)
		}
		if r.NCCL.AlltoAllvABI != 0 {
			fmt.Fprintf(w, "  ncclAlltoAllv ABI: %d arguments (set GONCCL_ALLTOALLV_ABI=10 or 11 to choose)\n", r.NCCL.AlltoAllvABI)
			fmt.Fprint(w, "  ncclAlltoAllv: native on symmetric buffers; grouped under a CUDA graph capture (VCCL aborts there);\n"+
				"    the peers' puts wait for no receiver: see Comm.AlltoAllv (docs/loading.md)\n")
		}
	} else {
		fmt.Fprintf(w, "  NOT LOADED: %s\n", r.NCCL.Error)
		if r.NCCL.Hint != "" {
			fmt.Fprintf(w, "  %s\n", r.NCCL.Hint)
		}
	}
	writeTrace(w, r.NCCL.Trace)

	fmt.Fprintln(w, "\nCUDA runtime")
	if r.CUDA.Loaded {
		fmt.Fprintf(w, "  file      %s\n  found by  %s\n  runtime   %s\n  driver    %s\n", r.CUDA.Path, r.CUDA.Via, r.CUDA.Runtime, r.CUDA.Driver)
		if r.CUDA.DeviceError != "" {
			fmt.Fprintf(w, "  devices   none: %s\n", r.CUDA.DeviceError)
		} else {
			fmt.Fprintf(w, "  devices   %d\n", r.CUDA.Devices)
		}
	} else {
		fmt.Fprintf(w, "  NOT LOADED: %s\n", r.CUDA.Error)
		if r.CUDA.Hint != "" {
			fmt.Fprintf(w, "  %s\n", r.CUDA.Hint)
		}
	}
	writeTrace(w, r.CUDA.Trace)
	writeJob(w, r.Job)
}

func writeTrace(w io.Writer, trace []attempt) {
	fmt.Fprintln(w, "  search")
	for _, a := range trace {
		path, res := shown(a.Path), "loaded"
		if a.Error != "" {
			// An error about the file names it: say it once.
			res = strings.TrimPrefix(a.Error, path+": ")
		}
		fmt.Fprintf(w, "    %-16s %s: %s\n", a.Via, path, res)
	}
}

// shown is a path as it is when short and plain, otherwise quoted and cut: a
// path built from an environment value may be huge or hold newlines. The
// library's own error texts are bounded the same way.
func shown(p string) string {
	const max = 200
	plain := len(p) <= max && utf8.ValidString(p) && strings.IndexFunc(p, func(r rune) bool {
		return r == '"' || r == '\\' || !unicode.IsPrint(r)
	}) < 0
	if plain {
		return p
	}
	if len(p) <= max {
		return strconv.Quote(p)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(p[:cut]), len(p))
}
