// Score modifiers: what a kernel does to a key block's f32 scores between Q K^T and the mask.
// One per kernel instantiation (a template parameter), chosen at launch from Params by
// kernel::with_score_mod, so that the common kernels carry no code and no registers for any:
//   kNone     the scores as they are
//   kSoftcap  logit softcapping, cap * tanh(logit / cap) (softmax/softcap.h; Params::softcap)
//   kAlibi    ALiBi: logit - slope_h * |p - j| for query head h at key position p and key j
//             (Params::alibi_slopes). With the causal masks (j <= p) this is the paper's
//             slope * (j - p); on keys past p (padding, bidirectional window) the bias grows
//             with the distance on that side too, as FlashAttention's alibi_slopes does.
//   kBias     an additive bias tensor per (query head, row, key) (Params::attention_bias;
//             softmax/score_tensor.h)
//   kCustomMask  a bit per (row, key) (MaskType::kCustom, Params::custom_mask;
//             softmax/score_tensor.h): a mask that no key range describes, so every block
//             it visits is a masked one (a row may see no key of a block)
// They do not combine: a problem with two is refused (kernel::params_fit), and kCustomMask
// runs with the padding kind's blocks only (kernel::variant_exists).
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace softmax {

enum class ScoreMod : int { kNone = 0, kSoftcap = 1, kAlibi = 2, kBias = 3, kCustomMask = 4 };

// Whether a modifier can hide keys: then no block is mask-free for the softmax (a row may
// have nothing visible in it), so the families run every block down the masked path.
FMHA_HOST_DEVICE constexpr bool hides_keys(ScoreMod m) { return m == ScoreMod::kCustomMask; }

// ALiBi on C fragments ([kMmaM][kNTiles][4], mma/wgmma accumulator layout: rows 16*mi + 8*h
// past this lane's first, columns 8*ni + e past its first). slope[mi][h]: the row's slope in
// the scores' units (raw Q K^T scores: slope_h / scale_bmm1); pos[mi][h]: the row's key
// position minus this lane's first column (key index) in the block. |pos - c| is exact in
// fp32 below 2^24 keys.
template <int kMmaM, int kNTiles>
FMHA_DEVICE void apply_alibi(float (&s)[kMmaM][kNTiles][4], const float (&slope)[kMmaM][2],
                             const int (&pos)[kMmaM][2]) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float p = static_cast<float>(pos[mi][h]);
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float& x = s[mi][ni][2 * h + e];
                    x = fmaf(-slope[mi][h], fabsf(p - static_cast<float>(8 * ni + e)), x);
                }
            }
        }
    }
}

// The same for a fragment whose rows all share one slope and sit at consecutive positions
// (one query head per tile): pos0 is the first row's key position minus the first column.
template <int kMmaM, int kNTiles>
FMHA_DEVICE void apply_alibi(float (&s)[kMmaM][kNTiles][4], float slope, int pos0) {
    float slopes[kMmaM][2];
    int pos[kMmaM][2];
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            slopes[mi][h] = slope;
            pos[mi][h] = pos0 + 16 * mi + 8 * h;
        }
    }
    apply_alibi(s, slopes, pos);
}

}  // namespace softmax
}  // namespace fmha
