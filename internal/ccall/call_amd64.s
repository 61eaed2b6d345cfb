//go:build linux

#include "textflag.h"

// CALL_FRAME calls the function of the frame at R11 (fn at 0, a1..a6 from 8)
// with a1..a6 in DI, SI, DX, CX, R8, R9, its stack arguments already placed.
#define CALL_FRAME \
	MOVQ 8(R11), DI \
	MOVQ 16(R11), SI \
	MOVQ 24(R11), DX \
	MOVQ 32(R11), CX \
	MOVQ 40(R11), R8 \
	MOVQ 48(R11), R9 \
	XORL AX, AX \
	MOVQ 0(R11), R10 \
	CALL R10

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

	CALL_FRAME

	MOVQ 152(SP), DI
	MOVQ AX, 200(DI)
	RET

// trampoline8 is trampoline for a short frame (ccall.go, frame8): fn at 0,
// a1..a8 from 8, result at 72; a7 and a8 go on the stack. $32 keeps SP
// 16-byte aligned at the CALL; the frame pointer is kept at 24(SP).
GLOBL ·trampoline8ABI0(SB), NOPTR|RODATA, $8
DATA ·trampoline8ABI0(SB)/8, $trampoline8(SB)
TEXT trampoline8(SB), NOSPLIT, $32
	MOVQ DI, 24(SP)
	MOVQ DI, R11
	MOVQ 56(R11), R12
	MOVQ R12, 0(SP)
	MOVQ 64(R11), R12
	MOVQ R12, 8(SP)
	CALL_FRAME

	MOVQ 24(SP), DI
	MOVQ AX, 72(DI)
	RET

// guardTrampoline runs a call on a thread with a current CUDA device
// (guard.go), DI pointing at a guard frame: the trampoline that makes the
// call at 0, get at 8, set at 16, the device at 24, the current device at 32,
// the guard's result at 40, pthread_getspecific at 48 (0: no mark),
// pthread_setspecific at 56, the key at 64, then the call's frame at 72. A
// thread whose mark is set goes straight to the call. Otherwise it calls
// get(&cur) and, where cur is 0, set(dev); a failing one's result goes to 40
// and ends it; then it sets the thread's mark and the trampoline at 0 runs on
// the frame at 72. The guard frame's pointer is kept at 0(SP); $16 keeps SP
// 16-byte aligned at each CALL.
GLOBL ·guardABI0(SB), NOPTR|RODATA, $8
DATA ·guardABI0(SB)/8, $guardTrampoline(SB)
TEXT guardTrampoline(SB), NOSPLIT, $16
	MOVQ  DI, 0(SP)
	MOVQ  48(DI), R10
	TESTQ R10, R10
	JZ    ask
	MOVQ  64(DI), DI
	XORL  AX, AX
	CALL  R10
	MOVQ  0(SP), DI
	TESTQ AX, AX
	JNZ   call

ask:
	MOVQ  8(DI), R10
	LEAQ  32(DI), DI
	XORL  AX, AX
	CALL  R10
	MOVQ  0(SP), DI
	MOVL  AX, AX // the C int, zero-extended
	MOVQ  AX, 40(DI)
	TESTL AX, AX
	JNZ   out
	MOVL  32(DI), AX
	TESTL AX, AX
	JNZ   mark
	MOVQ  16(DI), R10
	MOVL  24(DI), DI
	XORL  AX, AX
	CALL  R10
	MOVQ  0(SP), DI
	MOVL  AX, AX
	MOVQ  AX, 40(DI)
	TESTL AX, AX
	JNZ   out

mark:
	MOVQ  56(DI), R10
	TESTQ R10, R10
	JZ    call
	MOVQ  64(DI), DI
	MOVL  $1, SI
	XORL  AX, AX
	CALL  R10
	MOVQ  0(SP), DI

call:
	MOVQ 0(DI), R10
	LEAQ 72(DI), DI
	CALL R10

out:
	RET

// batchTrampoline runs the entries of a batch (batch.go) on the system stack,
// DI pointing at its frame: entries at 0, count at 8, the second success value
// at 16. An entry (104 bytes): fn at 0, a1..a11 from 8, result at 96. It stops
// after the first entry whose result is neither 0 nor the second success
// value. The loop's state lives in registers the callees preserve (BX the
// entry, R13 the count left, R15 the second success value), saved for our
// caller. Frame: a7..a11 at 0..39, then the saved registers; $112 keeps SP
// 16-byte aligned at the CALL.
GLOBL ·batchABI0(SB), NOPTR|RODATA, $8
DATA ·batchABI0(SB)/8, $batchTrampoline(SB)
TEXT batchTrampoline(SB), NOSPLIT, $112
	MOVQ BX, 48(SP)
	MOVQ R12, 56(SP)
	MOVQ R13, 64(SP)
	MOVQ R15, 72(SP)
	MOVQ 0(DI), BX
	MOVQ 8(DI), R13
	MOVQ 16(DI), R15

loop:
	TESTQ R13, R13
	JZ    done
	MOVQ  56(BX), R12
	MOVQ  R12, 0(SP)
	MOVQ  64(BX), R12
	MOVQ  R12, 8(SP)
	MOVQ  72(BX), R12
	MOVQ  R12, 16(SP)
	MOVQ  80(BX), R12
	MOVQ  R12, 24(SP)
	MOVQ  88(BX), R12
	MOVQ  R12, 32(SP)
	MOVQ  8(BX), DI
	MOVQ  16(BX), SI
	MOVQ  24(BX), DX
	MOVQ  32(BX), CX
	MOVQ  40(BX), R8
	MOVQ  48(BX), R9
	XORL  AX, AX
	MOVQ  0(BX), R10
	CALL  R10
	MOVL  AX, AX // the C int, zero-extended
	MOVQ  AX, 96(BX)
	TESTL AX, AX
	JZ    next
	CMPL  AX, R15
	JNE   done

next:
	ADDQ $104, BX
	DECQ R13
	JMP  loop

done:
	MOVQ 48(SP), BX
	MOVQ 56(SP), R12
	MOVQ 64(SP), R13
	MOVQ 72(SP), R15
	RET
