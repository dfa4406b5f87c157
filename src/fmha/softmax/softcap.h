// Logit softcapping (Gemma-2 style): a logit t = scale_bmm1 * s becomes cap * tanh(t / cap),
// applied to the f32 scores of a key block before the mask and the online softmax. The
// kernels keep scores unscaled (the softmax folds scale_bmm1 * log2(e) into its exponent),
// so on a raw score s the capped one is (cap / scale) * tanh(s * (scale / cap)); a kernel
// that keeps scores in log2 units u uses cap * log2(e) as the cap. tanh(x) = 1 - 2 / (1 +
// 2^(2x log2 e)) on ex2.approx: absolute error ~2^-21, so a logit moves by cap * 2^-21
// (the approximate tanh instruction's 2^-11 would move it by 0.015 at a cap of 30), and
// fewer registers than tanhf's polynomial.
// A run-time parameter (Params::softcap, 0: off) for which the kernels are compiled both ways
// (kernel::with_score_mod, softmax/score_mod.h): the common kernels carry no tanh and no registers for it.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace softmax {

// Multipliers for raw scores: s' = out * tanh(s * in).
struct Softcap {
    float out, in;

    static FMHA_HOST_DEVICE Softcap for_raw_scores(float cap, float scale) { return {cap / scale, scale / cap}; }
    static FMHA_HOST_DEVICE Softcap for_log2_scores(float cap) { return {cap * kLog2e, 1.f / (cap * kLog2e)}; }

    FMHA_DEVICE float operator()(float s) const {
        const float e = fast_exp2(fminf(2.f * kLog2e * (s * in), 64.f));  // tanh == 1 in fp32 beyond
        return out * (1.f - __fdividef(2.f, 1.f + e));
    }
};

// Every score of a block of C fragments ([kMmaM][kNTiles][4]).
template <int kMmaM, int kNTiles>
FMHA_DEVICE void apply_softcap(float (&s)[kMmaM][kNTiles][4], const Softcap& cap) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][ni][e] = cap(s[mi][ni][e]);
        }
    }
}

}  // namespace softmax
}  // namespace fmha
