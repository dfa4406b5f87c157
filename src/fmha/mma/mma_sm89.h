// mma.sync m16n8k32 with e4m3 operands, the instruction of the SM89 FP8 family
// (ENABLE_SM89_QMMA, issue #32): QMMA on sm_89 and sm_120; on sm_90 ptxas lowers it to
// F2FP.F16.E4M3.UNPACK_B conversions and HMMA.16816 (no native QMMA there), which makes
// Hopper a place to test the family's results, not its speed.
//
// Register layouts for lane l (g = l / 4, q = l % 4), from the PTX ISA; each register holds
// 4 consecutive k, the lowest in the lowest byte:
//   A 16x32 (row-major), 4 regs: a0 (g, 4q..4q+3), a1 (g+8, 4q..), a2 (g, 16+4q..), a3 (g+8, 16+4q..)
//   B 32x8  (k x n, "col"), 2 regs: b0 (k=4q..4q+3, n=g), b1 (k=16+4q.., n=g)
//   C 16x8  f32: as m16n8k16's (mma_sm80.h)
// A is the layout of an e4m3 wgmma's A fragment too, so P takes fp8_sm90.h's p_to_e4m3
// (its keys in key_of_slot order) here as well; B's k runs along the rows of a K-major tile,
// which is how K (and V transposed, in the same key order) sit in shared memory.
#pragma once

#include "fmha/mma/mma_sm80.h"
#include "fmha/utils.h"

namespace fmha {
namespace mma {

using FragA8 = uint32_t[4];  // 16x32 e4m3 A operand
using FragB8 = uint32_t[2];  // 32x8 e4m3 B operand

// D = A * B + D, e4m3 inputs, f32 accumulate.
FMHA_DEVICE void mma_e4m3_16832(FragC& d, const FragA8& a, const FragB8& b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap();  // an image for an arch without QMMA: the family is not built for it
#endif
}

}  // namespace mma
}  // namespace fmha
