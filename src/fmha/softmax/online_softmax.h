// Online softmax over key blocks (FlashAttention-2): per query row a running max m and a
// running sum l of exp(scale * (s - m)); when m grows, l and the O accumulator are
// rescaled by exp(scale * (m_old - m_new)). The exponentials are exp2 with scale*log2(e)
// folded into one FFMA per score. Division by l happens once, in the epilogue.
//
// The subtracted max is rounded up to an integer in log2 units (M = ceil(scale_log2 * m)):
// P = exp2(scale_log2 * s - M) still lies in (0, 1], every rescale factor exp2(M_old - M_new)
// is an exact power of two, and, since rounding to fp16/bf16 commutes with powers of two,
// the P fed to P·V rounds to the same bits whatever block the running max came from. The
// reference rounds P the same way, so kernel and reference differ by accumulation order
// only, not by where each happened to see the row's max.
//
// A lane holds 2 rows per 16-row m-tile (mma C layout: rows g and g+8, g = lane / 4);
// the 4 lanes of a quad share those rows, so row reductions are two xor-shuffles. The
// running sum stays a per-lane partial sum until finalize() (sums commute; maxima are
// reduced every block because they enter the exponent).
#pragma once

#include <math_constants.h>

#include <type_traits>

#include "fmha/softmax/exp2_row.h"
#include "fmha/softmax/sinks.h"
#include "fmha/softmax/stats.h"
#include "fmha/utils.h"

namespace fmha {
namespace softmax {

FMHA_DEVICE float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

FMHA_DEVICE float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int kMmaM>
struct OnlineSoftmax {
    float row_max[kMmaM][2];  // running M = ceil(scale_log2 * max S) per row (integer-valued)
    float row_sum[kMmaM][2];  // this lane's partial running sum of exp2(...)

    FMHA_DEVICE void init() {
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                row_max[mi][h] = -CUDART_INF_F;
                row_sum[mi][h] = 0.f;
            }
        }
    }

    // Half h of an m-tile's scores -> P = exp2(scale * s - max_scaled), and the row's running
    // sum rescaled by alpha plus their sum.
    template <int kNTilesS>
    FMHA_DEVICE static void exp_row(float (&s)[kNTilesS][4], int h, float scale, float max_scaled, float alpha,
                                    float& row_sum) {
        float sum = 0.f;
#pragma unroll
        for (int ni = 0; ni < kNTilesS; ++ni) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float pv = fast_exp2(fmaf(s[ni][2 * h + e], scale, -max_scaled));
                s[ni][2 * h + e] = pv;
                sum += pv;
            }
        }
        row_sum = row_sum * alpha + sum;
    }

    // s: [kMmaM][kNTilesS] f32 scores of one key block, replaced by the unnormalised
    // probabilities; o: [kMmaM][kNTilesO] the f32 output accumulator, rescaled.
    // kCheckInf: a row may have no allowed key yet (masked blocks), so its max may be
    // -inf; exponentials are then taken against 0 so that they give 0, never NaN.
    // scale_log2 = scale_bmm1 * log2(e) > 0.
    // kSkipRescale: once the running max settles (long rows) most blocks change no row's
    // max; a warp vote then skips the O rescale, one multiply per accumulator register.
    // Worth it for large accumulators only (the vote and branch cost ~10 instructions).
    // kWideLogits: logits may reach 2^24 in log2 units (softmax/exp2_row.h): every row's max
    // first, then the exp2s, with a rarely taken pre-pass between (0.6 % on the H200's flash
    // kernels, NOTES §38). Without it, each row's exp2s follow its max (the rows interleave).
    // scale_log2: one for every row, or one a row ([kMmaM][2]: the e4m3-cache decode's row
    // dequantisation folded in); positive either way.
    FMHA_DEVICE static float row_scale(float scale_log2, int, int) { return scale_log2; }
    FMHA_DEVICE static float row_scale(const float (&scale_log2)[kMmaM][2], int mi, int h) { return scale_log2[mi][h]; }

    // kHalves 1: the rows g + 8 of every m-tile are padding (a decode tile of at most 8 query
    // rows): their P is 0 and nothing else of them is computed (their max stays -inf, their sum 0).
    template <bool kCheckInf, bool kSkipRescale, int kNTilesS, int kNTilesO, bool kWideLogits = false,
              int kHalves = 2, class Scale = float>
    FMHA_DEVICE void update(float (&s)[kMmaM][kNTilesS][4], float (&o)[kMmaM][kNTilesO][4],
                            const Scale& scale_log2) {
        static_assert(!kWideLogits || std::is_same<Scale, float>::value, "kWideLogits: one scale for every row");
        static_assert(kHalves == 2 || (kHalves == 1 && !kWideLogits), "kHalves: 2, or 1 without kWideLogits");
        float alpha[kMmaM][2];       // per row: exp2(scale * (m_old - m_new)), 1 when the max held
        float max_scaled[kMmaM][2];  // per row: the M its P subtracts (0 for a row without keys)
        bool grew = false, huge = false;
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (h >= kHalves) {
                    alpha[mi][h] = 1.f;
#pragma unroll
                    for (int ni = 0; ni < kNTilesS; ++ni) s[mi][ni][2 * h] = s[mi][ni][2 * h + 1] = 0.f;
                    continue;
                }
                float mx = -CUDART_INF_F;
#pragma unroll
                for (int ni = 0; ni < kNTilesS; ++ni) {
                    mx = fmaxf(mx, fmaxf(s[mi][ni][2 * h], s[mi][ni][2 * h + 1]));
                }
                // The scale is > 0, so ceil(scale * max) == max of the ceilings.
                mx = fmaxf(row_max[mi][h], ceilf(quad_max(mx) * row_scale(scale_log2, mi, h)));
                max_scaled[mi][h] = (kCheckInf && mx == -CUDART_INF_F) ? 0.f : mx;
                // exp2(-inf) == 0: the first block (row_max == -inf) rescales nothing.
                const bool row_grew = mx != row_max[mi][h];
                alpha[mi][h] = row_grew ? fast_exp2(row_max[mi][h] - max_scaled[mi][h]) : 1.f;
                grew |= row_grew;
                huge |= is_huge(max_scaled[mi][h]);
                row_max[mi][h] = mx;
                if constexpr (!kWideLogits) {
                    exp_row(s[mi], h, row_scale(scale_log2, mi, h), max_scaled[mi][h], alpha[mi][h], row_sum[mi][h]);
                }
            }
        }
        if constexpr (kWideLogits) {
            const float scale = exact_scale<kMmaM * kNTilesS * 4>(
                [&](int i) -> float& { return s[i / (kNTilesS * 4)][i / 4 % kNTilesS][i % 4]; }, scale_log2, huge);
#pragma unroll
            for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
                for (int h = 0; h < 2; ++h) exp_row(s[mi], h, scale, max_scaled[mi][h], alpha[mi][h], row_sum[mi][h]);
            }
        }
        if (!kSkipRescale || __any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
                for (int nd = 0; nd < kNTilesO; ++nd) {
                    o[mi][nd][0] *= alpha[mi][0];
                    o[mi][nd][1] *= alpha[mi][0];
                    o[mi][nd][2] *= alpha[mi][1];
                    o[mi][nd][3] *= alpha[mi][1];
                }
            }
        }
    }

    // Per row: the factor the epilogue multiplies O by, out_scale / l, or 0 for a row
    // that saw no allowed key (l == 0), whose output is defined as 0.
    // sinks: Params::sinks (nullptr: none) and the rows' query head (softmax/sinks.h).
    // Afterwards row_sum holds each row's whole sum l (every lane of the quad), sink included.
    FMHA_DEVICE void finalize(float (&inv)[kMmaM][2], float out_scale, const Params& p, int head) {
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float l = quad_sum(row_sum[mi][h]) + sink_term(p, head, row_max[mi][h]);
                row_sum[mi][h] = l;
                inv[mi][h] = l > 0.f ? __fdividef(out_scale, l) : 0.f;
            }
        }
    }

    // After finalize: the rows' LSE to Params::softmax_lse (softmax/stats.h), from the first
    // lane of each quad. row0: this lane's first row within the sequence (rows row0 + 16*mi +
    // 8*h); rows at or past q_len are not written.
    FMHA_DEVICE void store_lse(const Params& p, int seq, int head, int row0, int q_len, int lane) const {
        if (p.softmax_lse == nullptr || lane % 4 != 0) return;
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + 16 * mi + 8 * h;
                if (r < q_len) softmax::store_lse(p, seq, head, r, row_max[mi][h], row_sum[mi][h]);
            }
        }
    }
};

}  // namespace softmax
}  // namespace fmha
