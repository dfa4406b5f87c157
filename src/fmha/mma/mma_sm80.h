// mma.sync m16n8k16 and ldmatrix wrappers (SM80+), with the fragment types they use.
//
// Register layouts for lane l (g = l / 4, q = l % 4), from the PTX ISA:
//   A 16x16 (row-major), 4 regs of 2 elements: a0 (g, 2q..), a1 (g+8, 2q..),
//                                                a2 (g, 8+2q..), a3 (g+8, 8+2q..)
//   B 16x8  (k x n, "col"), 2 regs:              b0 (k=2q.., n=g), b1 (k=8+2q.., n=g)
//   C 16x8  f32, 4 regs:                         c0,c1 (g, 2q..), c2,c3 (g+8, 2q..)
//   C 16x8  f16, 2 regs of f16x2:                c0 (g, 2q..),    c1 (g+8, 2q..)
// The C layout of two adjacent n-tiles is the A layout of one k16 slice, which is what
// lets S = Q K^T become the A operand of P V without touching shared memory.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace mma {

using FragA = uint32_t[4];   // 16x16 A operand, packed pairs
using FragB = uint32_t[2];   // 16x8 B operand, packed pairs
using FragC = float[4];      // 16x8 f32 accumulator
using FragC16 = uint32_t[2]; // 16x8 f16 accumulator, packed pairs

// The mma wrappers are pure (no memory effects), so the compiler may schedule them freely;
// ldmatrix is volatile so it stays between the barriers that guard its shared tile.

// D = A * B + D, f32 accumulate; Element selects f16 or bf16 inputs.
template <typename Element>
FMHA_DEVICE void mma_16816(FragC& d, const FragA& a, const FragB& b) {
    if constexpr (ElementTraits<Element>::kIsBf16) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// D = A * B + D, f16 inputs and f16 accumulate (half the accumulator registers).
FMHA_DEVICE void mma_16816_f16acc(FragC16& d, const FragA& a, const FragB& b) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
        "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
        : "+r"(d[0]), "+r"(d[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 matrices; lanes 8i..8i+7 give the row addresses of matrix i, r[i] receives
// this lane's pair of it (row l/4, columns 2*(l%4)..).
FMHA_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

// Same, transposed: r[i] holds this lane's pair of the transposed matrix i, i.e. the
// elements (rows 2*(l%4).., column l/4) of what the addresses point at.
FMHA_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

}  // namespace mma
}  // namespace fmha
