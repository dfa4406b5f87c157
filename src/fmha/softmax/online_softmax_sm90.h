// Online softmax for the SM90 kernels, split in two so that the O rescale can wait for
// the P.V wgmma still in flight: scale() turns one key block's scores into unnormalised
// probabilities and returns the per-row rescale factors; rescale() applies them to O
// once that wgmma has completed.
//
// The arithmetic is online_softmax.h's: exp2 with scale*log2(e) folded in, the subtracted
// max rounded up to an integer in log2 units (so every rescale is an exact power of two and
// the P rounded to 16 bits does not depend on the tiling, like the reference), per-lane
// partial row sums reduced once in finalize(). A thread holds two rows of a warpgroup's 64
// (wgmma D layout: rows g and g + 8 of its warp's 16).
//
// One rule differs: the subtracted max M is not raised while a block's max stays within
// kMaxSlack (log2 units) of it, so P <= 2^kMaxSlack, and O is rescaled only when some row of
// the warp raised its M. After a row's first blocks that is rare, and the rescale (dv / 2
// multiplies per thread and block) and its exp2 drop out of the softmax that the other
// warpgroup's GEMMs must hide (bench/NOTES.md §25: +2.5-8 %). M stays an integer, so O, l and
// the LSE are what the exact max gives, up to where fp32 sums round.
#pragma once

#include <math_constants.h>

#include "fmha/softmax/online_softmax.h"
#include "fmha/utils.h"

namespace fmha {
namespace softmax {

// kPOffset: P comes out scaled by 2^kPOffset (e4m3 P keeps its small values out of the
// subnormals; bench/NOTES.md §53), and the slack shrinks by as much, so P <= 256 either way.
// The scale cancels in O = P V / l; the sinks' term and the LSE take it out.
// kExactMax (e4m3, FA3's rule): M is the exact running max, not rounded up, and raised by any
// larger block max, so the largest P of the block that set M is 2^8 exactly, which e4m3 holds
// without error; rounded up, that P lay anywhere in (2^7, 2^8] and lost up to 2^-4 of its
// weight where one key dominates a row (bench/NOTES.md §54, §56). The rescales are then no
// powers of two, and which e4m3 grid a P is rounded on depends on the blocks before it (the
// driver's reference replays the kernel's block order: reference.cu).
template <int kPOffset, bool kExactMax = false>
struct OnlineSoftmaxScaled {
    static_assert(kPOffset >= 0 && kPOffset <= 8, "P <= 2^8");
    static_assert(!kExactMax || kPOffset == 8, "the exact max leaves no slack: P's top is 2^8");
    static constexpr float kMaxSlack = 8.f - kPOffset;  // P <= 256: far from overflow in fp16, bf16 and f32 sums

    // M in the exponent P carries (M - kPOffset), and back; written out so that kPOffset = 0
    // compiles to exactly what it did before the offset existed (0 - x is not -x in IEEE).
    FMHA_DEVICE static float minus_max(float max_scaled) {
        if constexpr (kPOffset == 0) return -max_scaled;
        else return float(kPOffset) - max_scaled;
    }
    FMHA_DEVICE static float true_max(float row_max) {
        if constexpr (kPOffset == 0) return row_max;
        else return row_max - float(kPOffset);
    }
    float row_max[2];  // running M per row: an integer, at most kMaxSlack below ceil(scale_log2 * max S)
                       // (kExactMax: scale_log2 * max S itself)
    float row_sum[2];  // this lane's partial running sum

    FMHA_DEVICE void init() {
        row_max[0] = row_max[1] = -CUDART_INF_F;
        row_sum[0] = row_sum[1] = 0.f;
    }

    // Row h's new M from one key block's scores, and alpha[h]; returns the max that the
    // block's exp2s subtract (scale_log2 units, 0 for a row that saw no allowed key yet).
    template <bool kCheckInf, int kNTiles>
    FMHA_DEVICE float new_max(const float (&s)[1][kNTiles][4], int h, float (&alpha)[2], float scale_log2) {
        float mx = -CUDART_INF_F;
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni) mx = fmaxf(mx, fmaxf(s[0][ni][2 * h], s[0][ni][2 * h + 1]));
        return quad_new_max<kCheckInf>(mx, h, alpha, scale_log2);
    }
    // new_max from this lane's max of row h's raw scores.
    template <bool kCheckInf>
    FMHA_DEVICE float quad_new_max(float mx, int h, float (&alpha)[2], float scale_log2) {
        mx = quad_max(mx) * scale_log2;
        if constexpr (!kExactMax) mx = ceilf(mx);
        mx = mx > row_max[h] + kMaxSlack ? mx : row_max[h];  // -inf + slack: the first block sets it
        const float max_scaled = (kCheckInf && mx == -CUDART_INF_F) ? 0.f : mx;
        alpha[h] = mx != row_max[h] ? fast_exp2(row_max[h] - max_scaled) : 1.f;
        row_max[h] = mx;
        return max_scaled;
    }

    // exp2(scale_log2 * x + bias), also added to sum: every step's one exp2.
    FMHA_DEVICE static float exp2_add(float x, float scale_log2, float bias, float& sum) {
        const float pv = fast_exp2(fmaf(x, scale_log2, bias));
        sum += pv;
        return pv;
    }

    // s: [1][kNTiles][4] scores of one key block -> exp2(scale_log2 * s - M).
    // alpha: per row, the factor O must be multiplied by before this block's P.V.
    // kCheckInf: a row may still have seen no allowed key (masked blocks).
    template <bool kCheckInf, int kNTiles>
    FMHA_DEVICE void scale(float (&s)[1][kNTiles][4], float (&alpha)[2], float scale_log2) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float max_scaled = new_max<kCheckInf>(s, h, alpha, scale_log2);
            float sum = 0.f;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) s[0][ni][2 * h + e] = exp2_add(s[0][ni][2 * h + e], scale_log2, minus_max(max_scaled), sum);
            }
            row_sum[h] = row_sum[h] * alpha[h] + sum;
        }
    }

    // scale() in two steps, for a caller that waits for its P V between them, so that P's
    // conversion to wgmma A fragments interleaves with the exp2s (bench/NOTES.md §89).
    // max_step: both rows' new M and alpha, and the bias exp_step_packed subtracts.
    template <bool kCheckInf, int kNTiles>
    FMHA_DEVICE void max_step(const float (&s)[1][kNTiles][4], float (&alpha)[2], float (&bias)[2],
                              float scale_log2) {
#pragma unroll
        for (int h = 0; h < 2; ++h) bias[h] = minus_max(new_max<kCheckInf>(s, h, alpha, scale_log2));
    }
    // exp_step_packed: P = exp2(scale_log2 * s + bias), the row sums, and P packed k32 slice by
    // slice as its exp2s come out (pack: four n8 tiles -> one slice's A fragment).
    template <int kNTiles, class Pack>
    FMHA_DEVICE void exp_step_packed(float (&s)[1][kNTiles][4], uint32_t (&frag)[kNTiles / 4][4],
                                     const float (&alpha)[2], const float (&bias)[2], float scale_log2,
                                     Pack&& pack) {
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < kNTiles / 4; ++kk) {
#pragma unroll
            for (int t = 0; t < 4; ++t) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[0][4 * kk + t][e] = exp2_add(s[0][4 * kk + t][e], scale_log2, bias[e / 2], sum[e / 2]);
            }
            pack(frag[kk], s[0][4 * kk], s[0][4 * kk + 1], s[0][4 * kk + 2], s[0][4 * kk + 3]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * alpha[h] + sum[h];
    }

    // This lane's max of row h's raw scores, as a tree (depth log2 of the count, not the count).
    template <int kNTiles>
    FMHA_DEVICE static float tree_max(const float (&s)[1][kNTiles][4], int h) {
        float m[kNTiles];
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni) m[ni] = fmaxf(s[0][ni][2 * h], s[0][ni][2 * h + 1]);
        static_assert((kNTiles & (kNTiles - 1)) == 0, "a power of two");
#pragma unroll
        for (int w = 1; w < kNTiles; w *= 2) {
#pragma unroll
            for (int i = 0; i < kNTiles; i += 2 * w) m[i] = fmaxf(m[i], m[i + w]);
        }
        return fmaxf(m[0], -CUDART_INF_F);  // new_max's start: a row of NaN scores reads -inf alike
    }

    // scale() and P's 16-bit packing by rows, in two steps around the wait for the previous
    // block's P V (which reads the fragments), after FA3's compiled schedule (bench/NOTES.md
    // §106-§107): rows_step: both rows' maxes (trees), row 0's exp2s (row 1's quad reduce
    // lands among them); rows_step_packed: row 1's exp2s, each k16 slice packed as soon as its
    // last exp2 is out, in the MUFU's shadow. The caller puts the wait between them after a
    // branch (masked or not): in one basic block ptxas hoisted it above the whole softmax.
    // The row sums add in scale()'s order and the maxes are exact: scale()'s bits.
    template <bool kCheckInf, int kNTiles>
    FMHA_DEVICE void rows_step(float (&s)[1][kNTiles][4], float (&alpha)[2], float& bias1, float& sum0,
                               float scale_log2) {
        const float bias0 = minus_max(quad_new_max<kCheckInf>(tree_max(s, 0), 0, alpha, scale_log2));
        const float mx1 = tree_max(s, 1);
        sum0 = 0.f;
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
            for (int e = 0; e < 2; ++e) s[0][ni][e] = exp2_add(s[0][ni][e], scale_log2, bias0, sum0);
        }
        bias1 = minus_max(quad_new_max<kCheckInf>(mx1, 1, alpha, scale_log2));
    }
    // (pack: two n8 tiles -> one k16 slice's A fragment, mma::s_slice_to_p.)
    template <int kNTiles, class Pack>
    FMHA_DEVICE void rows_step_packed(float (&s)[1][kNTiles][4], uint32_t (&frag)[kNTiles / 2][4],
                                      const float (&alpha)[2], float bias1, float sum0, float scale_log2,
                                      Pack&& pack) {
        float sum1 = 0.f;
#pragma unroll
        for (int kk = 0; kk < kNTiles / 2; ++kk) {
#pragma unroll
            for (int t = 0; t < 2; ++t) {
#pragma unroll
                for (int e = 2; e < 4; ++e) s[0][2 * kk + t][e] = exp2_add(s[0][2 * kk + t][e], scale_log2, bias1, sum1);
            }
            pack(frag[kk], s[0][2 * kk], s[0][2 * kk + 1]);
        }
        row_sum[0] = row_sum[0] * alpha[0] + sum0;
        row_sum[1] = row_sum[1] * alpha[1] + sum1;
    }

    // Skipped, warp-uniformly, when no row of the warp raised its M.
    template <int kNTilesO>
    FMHA_DEVICE static void rescale(float (&o)[1][kNTilesO][4], const float (&alpha)[2]) {
        if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
        for (int nd = 0; nd < kNTilesO; ++nd) {
            o[0][nd][0] *= alpha[0];
            o[0][nd][1] *= alpha[0];
            o[0][nd][2] *= alpha[1];
            o[0][nd][3] *= alpha[1];
        }
    }

    // Per row: out_scale / l, or 0 for a row that saw no allowed key.
    // sinks: Params::sinks (nullptr: none) and the rows' query head (softmax/sinks.h).
    // Afterwards row_sum holds each row's whole sum l, sink included.
    FMHA_DEVICE void finalize(float (&inv)[2], float out_scale, const Params& p, int head) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(row_sum[h]) + sink_term(p, head, true_max(row_max[h]));
            row_sum[h] = l;
            inv[h] = l > 0.f ? __fdividef(out_scale, l) : 0.f;
        }
    }

    // After finalize: the rows' LSE (softmax/stats.h) from the first lane of each quad;
    // row0 is this thread's first row within the sequence (rows row0, row0 + 8).
    FMHA_DEVICE void store_lse(const Params& p, int seq, int head, int row0, int q_len, int lane) const {
        if (p.softmax_lse == nullptr || lane % 4 != 0) return;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (row0 + 8 * h < q_len) {
                softmax::store_lse(p, seq, head, row0 + 8 * h, true_max(row_max[h]), row_sum[h]);
            }
        }
    }
};

using OnlineSoftmaxSm90 = OnlineSoftmaxScaled<0>;

}  // namespace softmax
}  // namespace fmha
