package load

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gonccl/nccl/internal/fakes"
)

// tinyELF builds about the smallest file checkELFImage accepts: an ELF64
// header for this machine, a program header table of one PT_LOAD over the
// whole file and one PT_DYNAMIC inside it, and a dynamic section of one
// DT_NULL. dlopen would refuse it; the checks look at the layout only.
func tinyELF() []byte {
	const phoff, phnum = elf64HeaderSize, 2
	const dynOff = phoff + phnum*elf64PhdrSize
	const size = dynOff + 16
	b := make([]byte, size)
	le := binary.LittleEndian
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS], b[elf.EI_DATA], b[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(elfMachine))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(b[32:], phoff)
	le.PutUint16(b[52:], elf64HeaderSize)
	le.PutUint16(b[54:], elf64PhdrSize)
	le.PutUint16(b[56:], phnum)
	putSegment(b, 0, elf.PT_LOAD, 0, 0, size, size)
	putSegment(b, 1, elf.PT_DYNAMIC, dynOff, dynOff, 16, 16)
	return b
}

// putSegment writes program header i of an ELF64 file whose table is at
// offset 64, as tinyELF lays it out.
func putSegment(b []byte, i int, typ elf.ProgType, off, vaddr, filesz, memsz uint64) {
	ph := b[elf64HeaderSize+i*elf64PhdrSize:]
	le := binary.LittleEndian
	le.PutUint32(ph[0:], uint32(typ))
	le.PutUint32(ph[4:], uint32(elf.PF_R))
	le.PutUint64(ph[8:], off)
	le.PutUint64(ph[16:], vaddr)
	le.PutUint64(ph[24:], vaddr)
	le.PutUint64(ph[32:], filesz)
	le.PutUint64(ph[40:], memsz)
	le.PutUint64(ph[48:], 8)
}

// layoutInside is the fuzz target's oracle, written apart from elf.go
// and with other arithmetic: nil if the program header table and every
// PT_LOAD and PT_DYNAMIC segment's bytes lie inside data, with at least one
// PT_LOAD.
func layoutInside(data []byte) error {
	n := uint64(len(data))
	if n < elf64HeaderSize {
		return errors.New("shorter than an ELF64 header")
	}
	le := binary.LittleEndian
	phoff, phnum := le.Uint64(data[32:]), uint64(le.Uint16(data[56:]))
	if phoff > n || phnum*elf64PhdrSize > n-phoff {
		return errors.New("program header table outside the data")
	}
	loads := 0
	for i := uint64(0); i < phnum; i++ {
		ph := data[phoff+i*elf64PhdrSize:]
		typ := elf.ProgType(le.Uint32(ph))
		if typ != elf.PT_LOAD && typ != elf.PT_DYNAMIC {
			continue
		}
		if typ == elf.PT_LOAD {
			loads++
		}
		off, filesz := le.Uint64(ph[8:]), le.Uint64(ph[32:])
		if off > n || filesz > n-off {
			return fmt.Errorf("segment %d (%s): %d bytes at %d, outside %d bytes of data", i, typ, filesz, off, n)
		}
	}
	if loads == 0 {
		return errors.New("no PT_LOAD segment")
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n int
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += len(p)
	return n, err
}

// maxELFCheckRead is the most the checks may read of any file: the header and
// the largest program header table they accept.
const maxELFCheckRead = elf64HeaderSize + maxPhnum*elf64PhdrSize

// FuzzELFCheck feeds arbitrary bytes to the checks made before dlopen: never a
// panic, never more read than the header and a bounded table, an error of one
// of the search's kinds for what is refused, and for what is accepted, a
// program header table and PT_LOAD and PT_DYNAMIC segments inside the data.
func FuzzELFCheck(f *testing.F) {
	f.Add(tinyELF())
	// A real library cut at several points: its headers and program header
	// table, the report's 4096 bytes, a header cut short. Whole libraries
	// (tens of KiB) would make the fuzzer spend its time minimizing them;
	// TestELFCheckTruncatedLibrary checks those.
	lib := fakes.LibBytes(f)
	table := int(binary.LittleEndian.Uint64(lib[32:])) + int(binary.LittleEndian.Uint16(lib[56:]))*elf64PhdrSize
	for _, n := range []int{table, table - 1, 4096, 63, 20, 4, 0} {
		f.Add(lib[:n])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &countingReader{r: bytes.NewReader(data)}
		err := checkELFImage(r, int64(len(data)))
		if r.n > maxELFCheckRead {
			t.Fatalf("read %d bytes, more than the %d of a header and the largest table", r.n, maxELFCheckRead)
		}
		if err != nil {
			if !errors.Is(err, ErrNotELF) && !errors.Is(err, ErrWrongArch) && !errors.Is(err, ErrCorruptELF) {
				t.Fatalf("refused with an error of no known kind: %v", err)
			}
			return
		}
		if bad := layoutInside(data); bad != nil {
			t.Fatalf("accepted, but %v", bad)
		}
	})
}

// A truncated copy of a real library is accepted exactly when it still holds
// every byte its program headers name; the first 4096 bytes of it (the
// report's crash: SIGBUS inside dlopen) are refused as corrupt.
func TestELFCheckTruncatedLibrary(t *testing.T) {
	lib := fakes.LibBytes(t)
	need := fakes.LoadableEnd(t, lib)
	if need <= 4096 {
		t.Fatalf("the fake library's segments end at %d: too small to show a 4096-byte truncation", need)
	}
	sizes := []int{0, 3, 4, 19, 20, 63, 64, 4096, need - 1, need, len(lib)}
	for n := 0; n < len(lib); n += 61 {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		err := checkELFImage(bytes.NewReader(lib[:n]), int64(n))
		switch {
		case n >= need && err != nil:
			t.Fatalf("%d of %d bytes (all the segments): %v", n, len(lib), err)
		case n < 4 && !errors.Is(err, ErrNotELF):
			t.Fatalf("%d bytes: %v, want ErrNotELF", n, err)
		case n >= 4 && n < need && !errors.Is(err, ErrCorruptELF):
			t.Fatalf("%d of %d bytes (segments end at %d): %v, want ErrCorruptELF", n, len(lib), need, err)
		}
	}
	err := checkELFImage(bytes.NewReader(lib[:4096]), 4096)
	if !strings.Contains(fmt.Sprint(err), "past the end of the file (4096 bytes)") {
		t.Fatalf("4096 bytes: %v; want the segment and the file's size named", err)
	}
}

// Damaged program headers, each refused with the right kind of error.
func TestELFCheckDamagedHeaders(t *testing.T) {
	le := binary.LittleEndian
	const dynOff = elf64HeaderSize + 2*elf64PhdrSize
	size := uint64(len(tinyELF()))
	for _, c := range []struct {
		name   string
		damage func(b []byte)
		want   error
	}{
		{"intact", func(b []byte) {}, nil},
		{"entry size 32", func(b []byte) { le.PutUint16(b[54:], 32) }, ErrCorruptELF},
		{"no program headers", func(b []byte) { le.PutUint16(b[56:], 0) }, ErrCorruptELF},
		{"PN_XNUM program headers", func(b []byte) { le.PutUint16(b[56:], 0xffff) }, ErrCorruptELF},
		{"table past the end", func(b []byte) { le.PutUint16(b[56:], 3) }, ErrCorruptELF},
		{"table offset wraps", func(b []byte) { le.PutUint64(b[32:], ^uint64(0)-8) }, ErrCorruptELF},
		{"PT_LOAD past the end", func(b []byte) { putSegment(b, 0, elf.PT_LOAD, 0, 0, size+1, size+1) }, ErrCorruptELF},
		{"PT_LOAD offset wraps", func(b []byte) { putSegment(b, 0, elf.PT_LOAD, ^uint64(0), 0, 2, 2) }, ErrCorruptELF},
		{"PT_LOAD file larger than memory", func(b []byte) { putSegment(b, 0, elf.PT_LOAD, 0, 0, size, size-1) }, ErrCorruptELF},
		{"PT_LOAD addresses wrap", func(b []byte) { putSegment(b, 0, elf.PT_LOAD, 0, ^uint64(0)-4, size, size) }, ErrCorruptELF},
		{"PT_DYNAMIC past the end", func(b []byte) { putSegment(b, 1, elf.PT_DYNAMIC, dynOff, dynOff, 17, 17) }, ErrCorruptELF},
		{"PT_DYNAMIC outside the loaded addresses", func(b []byte) { putSegment(b, 1, elf.PT_DYNAMIC, dynOff, 1<<20, 16, 16) }, ErrCorruptELF},
		{"PT_DYNAMIC in the memory-only part", func(b []byte) {
			putSegment(b, 0, elf.PT_LOAD, 0, 0, dynOff, size)
		}, ErrCorruptELF},
		{"no PT_DYNAMIC", func(b []byte) { putSegment(b, 1, elf.PT_NOTE, dynOff, dynOff, 16, 16) }, ErrNotELF},
		{"no PT_LOAD", func(b []byte) { putSegment(b, 0, elf.PT_NOTE, 0, 0, size, size) }, ErrNotELF},
		{"an executable", func(b []byte) { le.PutUint16(b[16:], uint16(elf.ET_EXEC)) }, ErrNotELF},
		{"big-endian", func(b []byte) { b[elf.EI_DATA] = byte(elf.ELFDATA2MSB) }, ErrWrongArch},
		{"32-bit", func(b []byte) { b[elf.EI_CLASS] = byte(elf.ELFCLASS32) }, ErrWrongArch},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := tinyELF()
			c.damage(b)
			err := checkELFImage(bytes.NewReader(b), int64(len(b)))
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
}

// The layout checks accept every shared library installed on this machine,
// whatever its architecture: no false alarms on what linkers and patchelf
// really write.
func TestELFCheckAcceptsInstalledLibraries(t *testing.T) {
	checked := 0
	for _, root := range []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || checked >= 1000 {
				return nil
			}
			// Libraries lie near the top; the depths hold toolchains and data.
			if d.IsDir() && strings.Count(p[len(root):], "/") >= 3 {
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() || !strings.Contains(d.Name(), ".so") {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return nil
			}
			var h [elf64HeaderSize]byte
			if n, _ := f.ReadAt(h[:], 0); n < elf64HeaderSize || string(h[:4]) != elf.ELFMAG ||
				elf.Class(h[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(h[elf.EI_DATA]) != elf.ELFDATA2LSB ||
				elf.Type(binary.LittleEndian.Uint16(h[16:])) != elf.ET_DYN {
				return nil
			}
			checked++
			if err := checkELFLayout(f, st.Size(), h[:]); err != nil {
				t.Errorf("%s: %v", p, err)
			}
			return nil
		})
	}
	t.Logf("%d installed shared libraries checked", checked)
}
