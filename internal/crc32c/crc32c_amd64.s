#include "textflag.h"

// func update(crc uint32, p []byte) uint32
// The CRC-32C of p continued from crc, one chain of SSE 4.2 CRC32
// instructions: 8 bytes at a time, then the last 4, 2 and 1. Unaligned
// loads cost nothing extra here.
TEXT ·update(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	NOTL AX
	CMPQ CX, $8
	JB   tail

loop8:
	CRC32Q (SI), AX
	ADDQ   $8, SI
	SUBQ   $8, CX
	CMPQ   CX, $8
	JAE    loop8

tail:
	TESTQ $4, CX
	JZ    two
	CRC32L (SI), AX
	ADDQ   $4, SI

two:
	TESTQ $2, CX
	JZ    one
	CRC32W (SI), AX
	ADDQ   $2, SI

one:
	TESTQ $1, CX
	JZ    done
	CRC32B (SI), AX

done:
	NOTL AX
	MOVL AX, ret+32(FP)
	RET
