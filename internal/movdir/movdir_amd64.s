#include "textflag.h"

// func cpuid7ECX() uint32
TEXT ·cpuid7ECX(SB), NOSPLIT, $0-4
	MOVL $0, AX
	MOVL $0, CX
	CPUID
	CMPL AX, $7
	JCS  none
	MOVL $7, AX
	MOVL $0, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET
none:
	MOVL $0, ret+0(FP)
	RET

// func store64B(dst unsafe.Pointer, src *[64]byte)
// MOVDIR64B (DX), AX: the destination address in AX, the 64-byte source
// at DX (66 0F 38 F8 /r with ModRM 0x02). Go's assembler has no mnemonic
// for it.
TEXT ·store64B(SB), NOSPLIT, $0-16
	MOVQ dst+0(FP), AX
	MOVQ src+8(FP), DX
	SFENCE
	BYTE $0x66; BYTE $0x0F; BYTE $0x38; BYTE $0xF8; BYTE $0x02
	RET
