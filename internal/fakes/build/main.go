// Command build compiles the fake libraries of testdata/ into a folder, with any
// C compiler (a cross compiler for emulated runs):
//
//	go run ./internal/fakes/build -cc aarch64-linux-gnu-gcc -o /tmp/fakes
//
// Point GONCCL_FAKE_DIR at the folder to test against them.
package main

import (
	"flag"
	"log"

	"github.com/gonccl/nccl/internal/fakes"
)

func main() {
	cc := flag.String("cc", "", "C compiler (default: $CC, then go env CC)")
	out := flag.String("o", "", "output folder")
	flag.Parse()
	if *out == "" {
		log.Fatal("-o is required")
	}
	if err := fakes.Build(*out, *cc); err != nil {
		log.Fatal(err)
	}
}
