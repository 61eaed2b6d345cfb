package load

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"runtime"
)

// This file checks a candidate library's ELF header and program headers before
// dlopen sees it. glibc's loader trusts them: it maps every PT_LOAD segment
// over the file and reads PT_DYNAMIC through that mapping, so a segment that
// ends past the end of a truncated file is touched as a page with no file
// behind it, and the process dies of SIGBUS inside dlopen. The checks here
// turn that into an error. They read only the 64-byte header and the program
// header table (at most maxPhnum entries), never the whole file.
//
// They catch truncation and damaged headers, not malice: a library crafted to
// harm can do anything from its constructors once loaded.

// ELF64 sizes and limits.
const (
	elf64HeaderSize = 64
	elf64PhdrSize   = 56
	// maxPhnum bounds the program header table gonccl reads (229 KiB). Linkers
	// write a dozen entries, patchelf a few more; a count in the thousands is
	// damage. 0xffff (PN_XNUM) would defer the count to a section header,
	// which glibc's loader does not read either.
	maxPhnum = 4096
)

// elfMachine is the ELF machine of this process.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// checkELFImage checks the file r of size bytes: an ELF shared object for this
// architecture (ErrNotELF, ErrWrongArch otherwise, which turns dlopen's terse
// words into typed errors) whose program headers stay inside the file
// (ErrCorruptELF otherwise, which dlopen would answer with a signal).
func checkELFImage(r io.ReaderAt, size int64) error {
	var h [elf64HeaderSize]byte
	n, _ := r.ReadAt(h[:], 0)
	if err := checkELFHeader(h[:n]); err != nil {
		return err
	}
	return checkELFLayout(r, size, h[:])
}

// checkELFHeader checks the first bytes of a file, up to the 64 of an ELF64
// header: an ELF shared object (ET_DYN) for this process's architecture.
func checkELFHeader(h []byte) error {
	if len(h) < 4 || string(h[:4]) != elf.ELFMAG {
		return fmt.Errorf("%w (no ELF magic)", ErrNotELF)
	}
	if len(h) < 20 {
		return fmt.Errorf("%w: the ELF header is cut short at %d bytes", ErrCorruptELF, len(h))
	}
	class, data := elf.Class(h[elf.EI_CLASS]), elf.Data(h[elf.EI_DATA])
	if data != elf.ELFDATA2LSB {
		return fmt.Errorf("%w: %s, this process is %s", ErrWrongArch, data, runtime.GOARCH)
	}
	machine := elf.Machine(binary.LittleEndian.Uint16(h[18:]))
	if machine != elfMachine || class != elf.ELFCLASS64 {
		return fmt.Errorf("%w: %s %s, this process is %s", ErrWrongArch, class, machine, runtime.GOARCH)
	}
	if len(h) < elf64HeaderSize {
		return fmt.Errorf("%w: the ELF header is cut short at %d of %d bytes", ErrCorruptELF, len(h), elf64HeaderSize)
	}
	if typ := elf.Type(binary.LittleEndian.Uint16(h[16:])); typ != elf.ET_DYN {
		return fmt.Errorf("%w: ELF type %s", ErrNotELF, typ)
	}
	return nil
}

// checkELFLayout checks the program headers that the little-endian ELF64
// header h of the file r (size bytes) describes, whatever its machine.
func checkELFLayout(r io.ReaderAt, size int64, h []byte) error {
	table, err := readProgramHeaders(r, size, h)
	if err != nil {
		return err
	}
	return checkSegments(table, size)
}

// readProgramHeaders reads the program header table the ELF64 header h
// describes, after checking that its entry size and count are sane and that it
// lies inside the file.
func readProgramHeaders(r io.ReaderAt, size int64, h []byte) ([]byte, error) {
	phoff := binary.LittleEndian.Uint64(h[32:])
	phentsize := binary.LittleEndian.Uint16(h[54:])
	phnum := binary.LittleEndian.Uint16(h[56:])
	if phentsize != elf64PhdrSize {
		return nil, fmt.Errorf("%w: program header entries of %d bytes, not %d", ErrCorruptELF, phentsize, elf64PhdrSize)
	}
	if phnum == 0 || phnum > maxPhnum {
		return nil, fmt.Errorf("%w: %d program headers", ErrCorruptELF, phnum)
	}
	tableSize := uint64(phnum) * elf64PhdrSize
	if end, ok := addNoOverflow(phoff, tableSize); !ok || end > uint64(size) {
		return nil, fmt.Errorf("%w: the program header table (%d bytes at offset %d) ends past the end of the file (%d bytes)",
			ErrCorruptELF, tableSize, phoff, size)
	}
	table := make([]byte, tableSize)
	if _, err := r.ReadAt(table, int64(phoff)); err != nil {
		return nil, fmt.Errorf("%w: reading the program headers: %v", ErrCorruptELF, err)
	}
	return table, nil
}

// segment is the part of an ELF64 program header the checks need.
type segment struct {
	typ                       elf.ProgType
	off, vaddr, filesz, memsz uint64
}

func parseSegment(b []byte) segment {
	le := binary.LittleEndian
	return segment{
		typ:    elf.ProgType(le.Uint32(b[0:])),
		off:    le.Uint64(b[8:]),
		vaddr:  le.Uint64(b[16:]),
		filesz: le.Uint64(b[32:]),
		memsz:  le.Uint64(b[40:]),
	}
}

// checkSegments requires what the loader touches without checking: every
// PT_LOAD segment's file contents inside the file, and PT_DYNAMIC inside the
// file and inside the file-backed part of a PT_LOAD segment (the loader reads
// it through the mapping, first thing after mapping). A shared object without
// either kind of segment is refused as not one.
func checkSegments(table []byte, size int64) error {
	var loads []segment
	var dynamics []int
	for i := 0; i < len(table)/elf64PhdrSize; i++ {
		s := parseSegment(table[i*elf64PhdrSize:])
		switch s.typ {
		case elf.PT_LOAD:
			if err := checkLoadSegment(i, s, size); err != nil {
				return err
			}
			loads = append(loads, s)
		case elf.PT_DYNAMIC:
			if err := checkFileRange(i, s, size); err != nil {
				return err
			}
			dynamics = append(dynamics, i)
		}
	}
	if len(loads) == 0 {
		return fmt.Errorf("%w: no PT_LOAD segment", ErrNotELF)
	}
	if len(dynamics) == 0 {
		return fmt.Errorf("%w: no PT_DYNAMIC segment", ErrNotELF)
	}
	for _, i := range dynamics {
		if !insideLoadedFile(parseSegment(table[i*elf64PhdrSize:]), loads) {
			return fmt.Errorf("%w: segment %d (PT_DYNAMIC) lies outside the file contents of every PT_LOAD segment", ErrCorruptELF, i)
		}
	}
	return nil
}

// checkLoadSegment: the file part inside the file, no larger than the memory
// part, and an address range that does not wrap.
func checkLoadSegment(i int, s segment, size int64) error {
	if s.filesz > s.memsz {
		return fmt.Errorf("%w: segment %d (PT_LOAD) has %d bytes in the file but %d in memory", ErrCorruptELF, i, s.filesz, s.memsz)
	}
	if _, ok := addNoOverflow(s.vaddr, s.memsz); !ok {
		return fmt.Errorf("%w: segment %d (PT_LOAD) wraps the address space", ErrCorruptELF, i)
	}
	return checkFileRange(i, s, size)
}

// checkFileRange: bytes off to off+filesz of the segment lie inside the file.
func checkFileRange(i int, s segment, size int64) error {
	if end, ok := addNoOverflow(s.off, s.filesz); !ok || end > uint64(size) {
		return fmt.Errorf("%w: segment %d (%s) needs %d bytes at offset %d, past the end of the file (%d bytes)",
			ErrCorruptELF, i, s.typ, s.filesz, s.off, size)
	}
	return nil
}

// insideLoadedFile reports whether s's addresses fall inside the file-backed
// addresses of one of the loads.
func insideLoadedFile(s segment, loads []segment) bool {
	end, ok := addNoOverflow(s.vaddr, s.filesz)
	if !ok {
		return false
	}
	for _, l := range loads {
		if s.vaddr >= l.vaddr && end <= l.vaddr+l.filesz { // no wrap: filesz <= memsz, checked
			return true
		}
	}
	return false
}

func addNoOverflow(a, b uint64) (uint64, bool) {
	sum, carry := bits.Add64(a, b, 0)
	return sum, carry == 0
}
