package fakes

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// LibBytes is the fake libnccl.so.2: a real shared library, built for this
// architecture at test time.
func LibBytes(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(NCCL(tb, "default"), "libnccl.so.2"))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// LoadableEnd is where the last byte that a trusted library's program header
// table, PT_LOAD or PT_DYNAMIC segments name ends: a copy cut shorter cannot
// be loaded.
func LoadableEnd(tb testing.TB, lib []byte) int {
	tb.Helper()
	ef, err := elf.NewFile(bytes.NewReader(lib))
	if err != nil {
		tb.Fatal(err)
	}
	const phdrSize = 56 // an ELF64 program header
	end := int(binary.LittleEndian.Uint64(lib[32:])) + len(ef.Progs)*phdrSize
	for _, p := range ef.Progs {
		if e := int(p.Off + p.Filesz); (p.Type == elf.PT_LOAD || p.Type == elf.PT_DYNAMIC) && e > end {
			end = e
		}
	}
	return end
}
