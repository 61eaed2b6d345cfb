//go:build linux

#include "textflag.h"

// trampoline runs on the system stack, called by runtime.asmcgocall with the C
// calling convention and DI pointing at a frame (ccall.go): fn at 0, a1..a24 from 8,
// result at 200. System V: a1..a6 in DI, SI, DX, CX, R8, R9; the rest on the
// stack from 0(SP); AL holds the number of vector registers used by a variadic
// callee (none). The frame size keeps SP 16-byte aligned at the CALL.
GLOBL ·trampolineABI0(SB), NOPTR|RODATA, $8
DATA ·trampolineABI0(SB)/8, $trampoline(SB)
TEXT trampoline(SB), NOSPLIT, $160
	MOVQ DI, 152(SP)
	MOVQ DI, R11

	MOVQ 56(R11), R12
	MOVQ R12, 0(SP)
	MOVQ 64(R11), R12
	MOVQ R12, 8(SP)
	MOVQ 72(R11), R12
	MOVQ R12, 16(SP)
	MOVQ 80(R11), R12
	MOVQ R12, 24(SP)
	MOVQ 88(R11), R12
	MOVQ R12, 32(SP)
	MOVQ 96(R11), R12
	MOVQ R12, 40(SP)
	MOVQ 104(R11), R12
	MOVQ R12, 48(SP)
	MOVQ 112(R11), R12
	MOVQ R12, 56(SP)
	MOVQ 120(R11), R12
	MOVQ R12, 64(SP)
	MOVQ 128(R11), R12
	MOVQ R12, 72(SP)
	MOVQ 136(R11), R12
	MOVQ R12, 80(SP)
	MOVQ 144(R11), R12
	MOVQ R12, 88(SP)
	MOVQ 152(R11), R12
	MOVQ R12, 96(SP)
	MOVQ 160(R11), R12
	MOVQ R12, 104(SP)
	MOVQ 168(R11), R12
	MOVQ R12, 112(SP)
	MOVQ 176(R11), R12
	MOVQ R12, 120(SP)
	MOVQ 184(R11), R12
	MOVQ R12, 128(SP)
	MOVQ 192(R11), R12
	MOVQ R12, 136(SP)

	MOVQ 8(R11), DI
	MOVQ 16(R11), SI
	MOVQ 24(R11), DX
	MOVQ 32(R11), CX
	MOVQ 40(R11), R8
	MOVQ 48(R11), R9
	XORL AX, AX
	MOVQ 0(R11), R10
	CALL R10

	MOVQ 152(SP), DI
	MOVQ AX, 200(DI)
	RET
