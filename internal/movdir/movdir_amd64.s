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

// func enqcmd(dst unsafe.Pointer, src *[64]byte) bool
// ENQCMD (DX), AX: F2 0F 38 F8 /r with ModRM 0x02, the portal address in
// AX and the 64-byte command at DX. The device answers through ZF: clear
// when the shared WQ accepted the command, set when it refused it (full,
// or not taking commands): retry.
TEXT ·enqcmd(SB), NOSPLIT, $0-17
	MOVQ dst+0(FP), AX
	MOVQ src+8(FP), DX
	SFENCE
	BYTE $0xF2; BYTE $0x0F; BYTE $0x38; BYTE $0xF8; BYTE $0x02
	SETNE ret+16(FP)
	RET
