//go:build linux

#include "textflag.h"

// CALL_FRAME calls the function of the frame at R9 (fn at 0, a1..a8 from 8)
// with a1..a8 in R0..R7, its stack arguments already placed.
#define CALL_FRAME \
	MOVD 8(R9), R0 \
	MOVD 16(R9), R1 \
	MOVD 24(R9), R2 \
	MOVD 32(R9), R3 \
	MOVD 40(R9), R4 \
	MOVD 48(R9), R5 \
	MOVD 56(R9), R6 \
	MOVD 64(R9), R7 \
	MOVD 0(R9), R10 \
	BL   (R10)

// trampoline runs on the system stack, called by runtime.asmcgocall with the C
// calling convention and R0 pointing at a frame (ccall.go): fn at 0, a1..a24 from 8,
// result at 200. AAPCS64: a1..a8 in R0..R7, the rest on the stack from 0(RSP),
// 8 bytes each; RSP stays 16-byte aligned.
#define STACK_SIZE 144
#define PTR_ADDRESS (STACK_SIZE - 8)

GLOBL ·trampolineABI0(SB), NOPTR|RODATA, $8
DATA ·trampolineABI0(SB)/8, $trampoline(SB)
TEXT trampoline(SB), NOSPLIT, $0
	SUB  $STACK_SIZE, RSP
	MOVD R0, PTR_ADDRESS(RSP)
	MOVD R0, R9

	MOVD 72(R9), R10
	MOVD R10, 0(RSP)
	MOVD 80(R9), R10
	MOVD R10, 8(RSP)
	MOVD 88(R9), R10
	MOVD R10, 16(RSP)
	MOVD 96(R9), R10
	MOVD R10, 24(RSP)
	MOVD 104(R9), R10
	MOVD R10, 32(RSP)
	MOVD 112(R9), R10
	MOVD R10, 40(RSP)
	MOVD 120(R9), R10
	MOVD R10, 48(RSP)
	MOVD 128(R9), R10
	MOVD R10, 56(RSP)
	MOVD 136(R9), R10
	MOVD R10, 64(RSP)
	MOVD 144(R9), R10
	MOVD R10, 72(RSP)
	MOVD 152(R9), R10
	MOVD R10, 80(RSP)
	MOVD 160(R9), R10
	MOVD R10, 88(RSP)
	MOVD 168(R9), R10
	MOVD R10, 96(RSP)
	MOVD 176(R9), R10
	MOVD R10, 104(RSP)
	MOVD 184(R9), R10
	MOVD R10, 112(RSP)
	MOVD 192(R9), R10
	MOVD R10, 120(RSP)

	CALL_FRAME

	MOVD PTR_ADDRESS(RSP), R2
	ADD  $STACK_SIZE, RSP
	MOVD R0, 200(R2)
	RET

// trampoline8 is trampoline for a short frame (ccall.go, frame8): fn at 0,
// a1..a8 from 8 into R0..R7, result at 72. The frame pointer is kept at
// 8(RSP).
GLOBL ·trampoline8ABI0(SB), NOPTR|RODATA, $8
DATA ·trampoline8ABI0(SB)/8, $trampoline8(SB)
TEXT trampoline8(SB), NOSPLIT, $0
	SUB  $16, RSP
	MOVD R0, 8(RSP)
	MOVD R0, R9
	CALL_FRAME

	MOVD 8(RSP), R2
	ADD  $16, RSP
	MOVD R0, 72(R2)
	RET

// guardTrampoline runs a call on a thread with a current CUDA device
// (guard.go), R0 pointing at a guard frame: the trampoline that makes the
// call at 0, get at 8, set at 16, the device at 24, the current device at 32,
// the guard's result at 40, pthread_getspecific at 48 (0: no mark),
// pthread_setspecific at 56, the key at 64, then the call's frame at 72. A
// thread whose mark is set goes straight to the call. Otherwise it calls
// get(&cur) and, where cur is 0, set(dev); a failing one's result goes to 40
// and ends it; then it sets the thread's mark and the trampoline at 0 runs on
// the frame at 72. The guard frame's pointer is kept at 8(RSP); RSP stays
// 16-byte aligned.
#define GUARD_STACK 16

GLOBL ·guardABI0(SB), NOPTR|RODATA, $8
DATA ·guardABI0(SB)/8, $guardTrampoline(SB)
TEXT guardTrampoline(SB), NOSPLIT, $0
	SUB   $GUARD_STACK, RSP
	MOVD  R0, 8(RSP)
	MOVD  R0, R9
	MOVD  48(R9), R10
	CBZ   R10, ask
	MOVD  64(R9), R0
	BL    (R10)
	MOVD  8(RSP), R9
	CBNZ  R0, call

ask:
	MOVD  8(R9), R10
	ADD   $32, R9, R0
	BL    (R10)
	MOVD  8(RSP), R9
	MOVWU R0, R0 // the C int, zero-extended
	MOVD  R0, 40(R9)
	CBNZW R0, out
	MOVWU 32(R9), R1
	CBNZW R1, mark
	MOVD  16(R9), R10
	MOVW  24(R9), R0
	BL    (R10)
	MOVD  8(RSP), R9
	MOVWU R0, R0
	MOVD  R0, 40(R9)
	CBNZW R0, out

mark:
	MOVD 56(R9), R10
	CBZ  R10, call
	MOVD 64(R9), R0
	MOVD $1, R1
	BL   (R10)

call:
	MOVD 8(RSP), R9
	MOVD 0(R9), R10
	ADD  $72, R9, R0
	BL   (R10)

out:
	ADD $GUARD_STACK, RSP
	RET

// batchTrampoline runs the entries of a batch (batch.go) on the system stack,
// R0 pointing at its frame: entries at 0, count at 8, the second success value
// at 16. An entry (104 bytes): fn at 0, a1..a11 from 8, result at 96. It stops
// after the first entry whose result is neither 0 nor the second success
// value. The loop's state lives in registers the callees preserve (R19 the
// entry, R20 the count left, R21 the second success value), saved for our
// caller. Stack: a9..a11 at 0..23, the saved registers from 32; RSP stays
// 16-byte aligned.
#define BATCH_STACK 64

GLOBL ·batchABI0(SB), NOPTR|RODATA, $8
DATA ·batchABI0(SB)/8, $batchTrampoline(SB)
TEXT batchTrampoline(SB), NOSPLIT, $0
	SUB  $BATCH_STACK, RSP
	MOVD R19, 32(RSP)
	MOVD R20, 40(RSP)
	MOVD R21, 48(RSP)
	MOVD 0(R0), R19
	MOVD 8(R0), R20
	MOVD 16(R0), R21

loop:
	CBZ   R20, done
	MOVD  72(R19), R10
	MOVD  R10, 0(RSP)
	MOVD  80(R19), R10
	MOVD  R10, 8(RSP)
	MOVD  88(R19), R10
	MOVD  R10, 16(RSP)
	MOVD  8(R19), R0
	MOVD  16(R19), R1
	MOVD  24(R19), R2
	MOVD  32(R19), R3
	MOVD  40(R19), R4
	MOVD  48(R19), R5
	MOVD  56(R19), R6
	MOVD  64(R19), R7
	MOVD  0(R19), R10
	BL    (R10)
	MOVWU R0, R0 // the C int, zero-extended
	MOVD  R0, 96(R19)
	CBZW  R0, next
	CMPW  R21, R0
	BNE   done

next:
	ADD $104, R19
	SUB $1, R20
	B   loop

done:
	MOVD 32(RSP), R19
	MOVD 40(RSP), R20
	MOVD 48(RSP), R21
	ADD  $BATCH_STACK, RSP
	RET
