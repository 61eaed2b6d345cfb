package main

import (
	"fmt"
	"io"

	"github.com/gonccl/nccl/launch"
)

// jobReport is this process's place in a job, as package launch reads it
// from the launcher's variables, and the way the unique id would be shared.
type jobReport struct {
	Launcher  string `json:"launcher"`
	Rank      int    `json:"rank"`
	Size      int    `json:"size"`
	LocalRank int    `json:"local_rank"`
	Node      string `json:"node,omitempty"`
	IDVia     string `json:"id_via,omitempty"`
	IDWhere   string `json:"id_where,omitempty"`
	Error     string `json:"error,omitempty"`
}

// placeJob detects the job from o (the environment when o.Getenv is nil)
// and says how launch.UniqueID would share the id without flags.
func placeJob(o launch.Options) jobReport {
	job, err := launch.DetectWith(o)
	if err != nil {
		return jobReport{Error: err.Error()}
	}
	r := jobReport{Launcher: string(job.Launcher), Rank: job.Rank, Size: job.Size, LocalRank: job.LocalRank, Node: job.NodeName}
	via, err := launch.Choose(job, launch.Share{})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.IDVia = via.String()
	switch via {
	case launch.ViaCommID:
		r.IDWhere = "NCCL's bootstrap at " + job.CommID
	case launch.ViaStore:
		r.IDWhere = "the TCPStore at " + job.StoreAddr + ", key " + launch.IDKey(job, "")
	case launch.ViaAuto:
		r.IDWhere = "none needed: a job of one"
	}
	return r
}

func writeJob(w io.Writer, r jobReport) {
	fmt.Fprintln(w, "\nJob (package launch)")
	if r.Launcher == "" {
		fmt.Fprintf(w, "  NOT PLACED: %s\n", r.Error)
		return
	}
	fmt.Fprintf(w, "  launcher  %s: rank %d of %d, local rank %d", r.Launcher, r.Rank, r.Size, r.LocalRank)
	if r.Node != "" {
		fmt.Fprintf(w, ", node %s", r.Node)
	}
	fmt.Fprintln(w)
	if r.Error != "" {
		fmt.Fprintf(w, "  unique id NO WAY: %s\n", r.Error)
		return
	}
	fmt.Fprintf(w, "  unique id via %s: %s\n", r.IDVia, r.IDWhere)
}
