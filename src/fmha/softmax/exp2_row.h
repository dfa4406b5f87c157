// Logits beyond fp32's integers: P = exp2(scale_log2 * s - M) stays finite.
//
// M is an integer, the running max rounded up (online_softmax.h). The softmax's FFMA
// subtracts M from the exact product, so a row's largest P is 2^(exact max - M): close to 1
// while M is within a unit of the exact product, which holds below 2^24, where fp32 has
// every integer. Beyond that (a huge -scale-bmm1, or huge inputs) M may lie half an ulp of
// the product away from every exact product, and P overflows to inf or underflows to 0 (NaN
// or 0 rows where the reference is finite). There the scores are first replaced by their
// rounded products, so M is the rounded max itself, the largest P exactly 1, and the same
// FFMA runs with a scale of 1. The check needs every row's max before the first exp2, which
// costs the ws family 1.5-4 % (bench/NOTES.md §38): ws leaves such problems to flash
// (Params::wide_logits).
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace softmax {

constexpr float kExactLogitLimit = 0x1p24f;  // |M| below this: every integer M is exact

FMHA_DEVICE bool is_huge(float m) { return fabsf(m) >= kExactLogitLimit; }

// at(i) -> float&: the i-th of this thread's kN scores of the block. huge: some row's M is
// beyond kExactLogitLimit. Returns the scale for the FFMA. Every lane of the warp calls it.
template <int kN, class At>
FMHA_DEVICE float exact_scale(At&& at, float scale_log2, bool huge) {
    // A warp vote: a uniform branch needs no convergence barrier around the hot path.
    if (!__any_sync(0xffffffffu, huge)) return scale_log2;
#pragma unroll
    for (int i = 0; i < kN; ++i) at(i) = __fmul_rn(at(i), scale_log2);  // __fmul_rn: never an FFMA
    return 1.f;
}

}  // namespace softmax
}  // namespace fmha
