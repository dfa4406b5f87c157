// P = exp2(scale_log2 * s - M) over one row's scores of a key block, and their sum.
//
// M is an integer, the running max rounded up (online_softmax.h). The FFMA form subtracts M
// from the exact product, so the row's largest P is 2^(exact max - M): close to 1 while M
// is within a unit of the exact product, which holds below 2^24, where fp32 has every
// integer. Beyond that (a huge -scale-bmm1, or huge inputs) M may lie half an ulp of the
// product from every exact product and P overflows to inf or underflows to 0 (NaN or 0 rows
// where the reference is finite). There the scores are first replaced by their rounded
// products, so M is the rounded max itself and the largest P exactly 1; the same FFMA loop
// then runs with a scale of 1. One compare per row and block on the hot path.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace softmax {

constexpr float kExactLogitLimit = 0x1p24f;  // |M| below this: every integer M is exact

// at(i) -> float&: the i-th score of the row (i < kN), replaced by its P. m: the row's M
// (0 for a row that has seen no key). Sums in index order.
template <int kN, class At>
FMHA_DEVICE float exp2_row(At&& at, float scale_log2, float m) {
    if (fabsf(m) >= kExactLogitLimit) {
#pragma unroll
        for (int i = 0; i < kN; ++i) at(i) = __fmul_rn(at(i), scale_log2);  // never contracted to an FFMA
        scale_log2 = 1.f;
    }
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
        float& x = at(i);
        x = fast_exp2(fmaf(x, scale_log2, -m));
        sum += x;
    }
    return sum;
}

}  // namespace softmax
}  // namespace fmha
