// Command nccl-fakes builds the fake NCCL and CUDA runtime of package
// nccltest, for tests on a machine without a GPU, and prints the variables
// that point gonccl at them:
//
//	eval "$(go run github.com/gonccl/nccl/cmd/nccl-fakes)"            # the cached build, variant default
//	go run github.com/gonccl/nccl/cmd/nccl-fakes -variant v230 -gpus 2
//	go run github.com/gonccl/nccl/cmd/nccl-fakes -o /tmp/fakes -cc aarch64-linux-gnu-gcc
//	go run github.com/gonccl/nccl/cmd/nccl-fakes -list
//
// Without -o it uses nccltest.Build (compiled once per version of the sources
// and compiler, into the cache); with -o it compiles into that folder.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/gonccl/nccl/nccltest"
)

func main() {
	out := flag.String("o", "", "compile into this folder instead of the cache")
	cc := flag.String("cc", "", "C compiler, with -o (default: $CC, then go env CC, then cc)")
	variant := flag.String("variant", "default", "the variant GONCCL_NCCL_LIB names (-list shows them)")
	gpus := flag.Int("gpus", 4, "fake GPUs (FAKECUDA_DEVICES)")
	list := flag.Bool("list", false, "list the variants and exit")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("nccl-fakes: ")
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments %q", flag.Args())
	}
	if *list {
		for _, v := range nccltest.Variants() {
			fmt.Printf("%-8s %s\n", v.Name, v.Stands)
		}
		return
	}
	found := false
	for _, v := range nccltest.Variants() {
		found = found || v.Name == *variant
	}
	if !found {
		log.Fatalf("no variant %q (-list shows them)", *variant)
	}
	if *gpus < 1 {
		log.Fatalf("-gpus %d: want at least 1", *gpus)
	}
	var dir nccltest.Dir
	if *out != "" {
		if err := nccltest.BuildInto(*out, *cc); err != nil {
			log.Fatal(err)
		}
		dir = nccltest.Dir(*out)
	} else {
		if *cc != "" {
			os.Setenv("CC", *cc)
		}
		d, err := nccltest.Build()
		if err != nil {
			log.Fatal(err)
		}
		dir = d
	}
	fmt.Printf("export GONCCL_NCCL_LIB=%s GONCCL_CUDART_LIB=%s FAKECUDA_DEVICES=%d\n", dir.NCCL(*variant), dir.CUDART(), *gpus)
}
