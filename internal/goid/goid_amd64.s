//go:build linux

#include "textflag.h"

// func Current() uintptr: the g pointer, which the Go assembler reaches
// through the TLS pseudo-register on linux/amd64.
TEXT ·Current(SB), NOSPLIT, $0-8
	MOVQ (TLS), AX
	MOVQ AX, ret+0(FP)
	RET
