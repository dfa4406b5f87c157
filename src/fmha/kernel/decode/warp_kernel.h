// The warp path (kWarpsN == 1, WarpTraits), for caches under 64 keys: CUDA-core FMAs on
// 16-byte register loads, no shared memory, one warp a unit (warp_unit.h). Q K^T is a dot
// product per lane reduced over the key's lanes with shuffles; each key group of the warp
// keeps its own online softmax, merged with shuffles at the end. Split units write fp32
// partials that combine_kernel (merge.h) merges.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "fmha/kernel/decode/shape.h"
#include "fmha/kernel/decode/store.h"
#include "fmha/kernel/decode/warp_unit.h"
#include "fmha/mask/mask.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/sinks.h"
#include "fmha/softmax/softcap.h"
#include "fmha/softmax/stats.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// P rounded to the input type before it multiplies V, as the tensor-core paths round it.
template <typename Element>
FMHA_DEVICE float round_to_element(float x) {
    if constexpr (ElementTraits<Element>::kIsBf16) {
        return __bfloat162float(__float2bfloat16_rn(x));
    } else {
        return __half2float(__float2half_rn(x));
    }
}

// The running state of one warp unit: Q rows scaled into log2 units, and per key group of
// the warp the online softmax (m, l) and this lane's O slice.
template <class Tr>
struct WarpState {
    float q[Tr::kRows][kElemsPerChunk];
    float m[Tr::kRows], l[Tr::kRows], o[Tr::kRows][kElemsPerChunk];

    FMHA_DEVICE void init(const uint4 (&q_raw)[Tr::kRows], float scale_log2) {
#pragma unroll
        for (int r = 0; r < Tr::kRows; ++r) {
            to_float(q[r], q_raw[r], Tr::kBf16);
#pragma unroll
            for (int e = 0; e < kElemsPerChunk; ++e) q[r][e] *= scale_log2;
            m[r] = -INFINITY;
            l[r] = 0.f;
#pragma unroll
            for (int e = 0; e < kElemsPerChunk; ++e) o[r][e] = 0.f;
        }
    }

    // One step: the kPasses passes of keys at k0 (k_raw, v_raw as load_kv loaded them).
    // kOnly: the unit's only step, on a fresh state (nothing to rescale). kPerGroup: as load_kv.
    // kMod: the score modifier (softmax/score_mod.h, from Params); the scores here are in log2 units.
    template <mask::Kind kMask, softmax::ScoreMod kMod, int kPasses, bool kOnly = false, bool kPerGroup = false>
    FMHA_DEVICE void step(const uint4 (&k_raw)[kPasses], const uint4 (&v_raw)[kPasses], int k0,
                          const WarpUnit& u, const FastDiv& group, int grp, const Params& p,
                          const mask::Rows<kMask>& mrows) {
        using Element = typename Tr::Element;
        constexpr int LK = Tr::kLanesPerKey;
        float kx[kPasses][kElemsPerChunk], vx[kPasses][kElemsPerChunk];
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
            to_float(kx[i], k_raw[i], Tr::kBf16);
            to_float(vx[i], v_raw[i], Tr::kBf16);
        }
#pragma unroll
        for (int r = 0; r < Tr::kRows; ++r) {
            // Keys visible to row r: [lo, limit), clipped to the split (loads past it are 0).
            const int row = u.row0 + r;
            constexpr bool kAlibi = kMod == softmax::ScoreMod::kAlibi;
            constexpr bool kBias = kMod == softmax::ScoreMod::kBias;
            constexpr bool kCustom = kMod == softmax::ScoreMod::kCustomMask;
            constexpr bool kNeedsPos = kMask != mask::Kind::kPadding || kAlibi || kBias || kCustom;
            const int pos = kNeedsPos && row < u.rows ? group.div(row) : 0;
            const int head = u.g * static_cast<int>(group.d) + group.mod(row, pos);
            const int limit = row < u.rows ? min_int(u.key_end, mrows.end(pos)) : 0;
            const int lo = mrows.begin(pos);
            // ALiBi: the row's head's slope in log2 units, and its key position.
            const float alibi = kAlibi && row < u.rows ? p.alibi_slopes[head] * kLog2e : 0.f;
            const float key_pos = static_cast<float>(pos + mrows.shift);
            // Bias and custom mask: the row's entries (read only for keys below limit).
            const Element* bias = kBias ? softmax::bias_row<Element>(p, u.b, head, pos) : nullptr;
            const uint32_t* bits = kCustom ? softmax::custom_mask_row(p, u.b, pos) : nullptr;
            float s[kPasses];
            float step_max = -INFINITY;
#pragma unroll
            for (int i = 0; i < kPasses; ++i) {
                float dot = 0.f;
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) dot = fmaf(q[r][e], kx[i][e], dot);
#pragma unroll
                for (int off = LK / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
                if constexpr (kMod == softmax::ScoreMod::kSoftcap) dot = softmax::Softcap::for_log2_scores(p.softcap)(dot);
                const int key = pass_key<Tr, kPerGroup>(k0, i, grp);
                if constexpr (kAlibi) dot = fmaf(-alibi, fabsf(key_pos - static_cast<float>(key)), dot);
                bool visible = key < limit && (kMask != mask::Kind::kLocal || key >= lo);
                if constexpr (kBias) {
                    if (visible) dot = fmaf(kLog2e, softmax::bias_at(bias, key), dot);
                }
                if constexpr (kCustom) visible = visible && softmax::mask_visible(bits, key);
                s[i] = visible ? dot : -INFINITY;
                step_max = fmaxf(step_max, s[i]);
            }
            const float m_new = fmaxf(m[r], ceilf(step_max));
            if (m_new == -INFINITY) continue;  // nothing visible yet: state unchanged
            if constexpr (!kOnly) {
                const float alpha = exp2f(m[r] - m_new);  // exp2(-inf) == 0 on the first visible step
                l[r] *= alpha;
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) o[r][e] *= alpha;
            }
#pragma unroll
            for (int i = 0; i < kPasses; ++i) {
                const float prob = exp2f(s[i] - m_new);
                l[r] += prob;
                const float pr = round_to_element<Element>(prob);
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) o[r][e] = fmaf(pr, vx[i][e], o[r][e]);
            }
            m[r] = m_new;
        }
    }

    // Merges the key groups of the warp (lanes with the same chunk, different keys), then
    // the first group writes: O itself with one split, else the split's fp32 partials.
    // kPerGroup: no merge, every group writes its own unit.
    template <bool kPerGroup = false>
    FMHA_DEVICE void finish(const Params& p, const Shape& shape, const FastDiv& group, const WarpUnit& u, int sub,
                            int grp) {
        const int splits = shape.splits;
        using Element = typename Tr::Element;
        constexpr int R = Tr::kRows;
#pragma unroll
        for (int off = Tr::kLanesPerKey; off < (kPerGroup ? 0 : kWarpSize); off *= 2) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float m_o = __shfl_xor_sync(0xffffffffu, m[r], off);
                const float l_o = __shfl_xor_sync(0xffffffffu, l[r], off);
                const float m_new = fmaxf(m[r], m_o);
                const float a = m[r] == -INFINITY ? 0.f : exp2f(m[r] - m_new);
                const float c = m_o == -INFINITY ? 0.f : exp2f(m_o - m_new);
                l[r] = l[r] * a + l_o * c;
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) {
                    const float o_o = __shfl_xor_sync(0xffffffffu, o[r][e], off);
                    o[r][e] = o[r][e] * a + o_o * c;
                }
                m[r] = m_new;
            }
        }
        if (!kPerGroup && grp != 0) return;

        if (splits == 1) {
            const float out_scale = p.scale_softmax * p.scale_bmm2;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int row = u.row0 + r;
                if (row >= u.rows) continue;
                const int pos = group.div(row);
                const int head = u.g * shape.group + group.mod(row, pos);
                const float l_row = l[r] + softmax::sink_term(p, head, m[r]);
                // Not store_o_chunk: __fdividef, as OnlineSoftmax::finalize, and the LSE before the
                // packing (store_o_chunk's order changes this kernel's schedule).
                const float inv = l_row > 0.f ? __fdividef(out_scale, l_row) : 0.f;
                if (sub == 0) softmax::store_lse(p, u.b, head, pos, m[r], l_row);
                uint32_t packed[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    packed[i] = ElementTraits<Element>::pack(o[r][2 * i] * inv, o[r][2 * i + 1] * inv);
                }
                Element* dst = static_cast<Element*>(p.o) + int64_t(u.q_off + pos) * p.o_row_stride +
                               int64_t(head) * p.o_head_stride + sub * kElemsPerChunk;
                *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
            }
            return;
        }
        float* ws_o = partials<Tr>(p, shape);
        const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * R;
        float* ws_ml = ws_o + item_rows * splits * Tr::kHeadDimV;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = u.row0 + r;
            if (row >= u.rows) continue;
            const int64_t slot = (u.item * shape.row_tiles * R + row) * splits + u.split;
            store_partial_chunk<Tr::kHeadDimV>(ws_o, ws_ml, slot, sub, m[r], l[r], o[r]);
        }
    }
};

// Warp path: the CTAs an SM the registers are cut for. A score modifier's registers, or a
// local mask's window bounds (64 registers at eight CTAs an SM spilled 4-8 bytes on sm_90a),
// take a share of them.
template <mask::Kind kMask, softmax::ScoreMod kMod>
constexpr int warp_min_blocks(int min_blocks) {
    return kMod != softmax::ScoreMod::kNone ? max_int(1, min_blocks * 3 / 4)
           : kMask == mask::Kind::kLocal    ? max_int(1, min_blocks * 7 / 8)
                                            : min_blocks;
}

// Any number of steps per unit: one unit per warp, every load of a step issued before use.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone>
__global__ void __launch_bounds__(Tr::kThreads, (warp_min_blocks<kMask, kMod>(Tr::kMinBlocks)))
    decode_kernel(const __grid_constant__ Params p, int splits, const UnitDivs divs) {
    const Shape shape = make_shape<Tr>(p, splits);
    const int lane = threadIdx.x % kWarpSize;
    const int unit = blockIdx.x * Tr::kWarps + threadIdx.x / kWarpSize;
    if (unit >= shape.units) return;
    const WarpUnit u = warp_unit<Tr, kMask>(p, shape, divs, unit);
    if (!u.live) return;
    const int sub = lane % Tr::kLanesPerKey;  // this lane's 16-byte chunk of a row
    const int grp = lane / Tr::kLanesPerKey;  // the key of a pass this lane works on

    const auto mrows = mask::Rows<kMask>::make(p, u.q_len, u.kv_len);
    WarpState<Tr> st;
    {
        uint4 q_raw[Tr::kRows];
        load_q<Tr>(q_raw, p, shape, divs.group, u, sub);
        st.init(q_raw, p.scale_bmm1 * kLog2e);
    }
    for (int k0 = u.key_begin; k0 < u.key_end; k0 += Tr::kBlockN) {
        uint4 k_raw[Tr::kUnroll], v_raw[Tr::kUnroll];
        load_kv<Tr, Tr::kUnroll>(k_raw, v_raw, p, u, k0, sub, grp);
        st.template step<kMask, kMod, Tr::kUnroll>(k_raw, v_raw, k0, u, divs.group, grp, p, mrows);
    }
    st.finish(p, shape, divs.group, u, sub, grp);
}

// One step per unit (one split, s_kv_max <= kPasses: the tiny caches): every lane group
// of kLanesPerKey lanes (32 / kLanesPerKey groups per warp) works a unit of its own, its keys
// one per pass, so a warp carries several units per instruction (no key-group merge); the
// warps are persistent, walking units by the grid's width, and issue the next units' loads
// (Q, K, V) before the current ones' math, so two units per group are in flight and no CTA
// is launched per handful of units. A unit's coordinates are recomputed where used rather
// than carried (registers: 7-8 CTAs per SM at 1 row per warp).
template <class Tr, int kPasses>
constexpr int kShortMinBlocks = Tr::kRows == 1 && kPasses == 2 ? 7 : Tr::kMinBlocks;

template <class Tr, mask::Kind kMask, int kPasses, softmax::ScoreMod kMod = softmax::ScoreMod::kNone>
__global__ void __launch_bounds__(Tr::kThreads, (kShortMinBlocks<Tr, kPasses>))
    decode_short_kernel(const __grid_constant__ Params p, const UnitDivs divs) {
    constexpr int kGroups = Tr::kKeysPerPass;  // lane groups per warp, one unit each
    const Shape shape = make_shape<Tr>(p, 1);
    const int lane = threadIdx.x % kWarpSize;
    const int sub = lane % Tr::kLanesPerKey;
    const int grp = lane / Tr::kLanesPerKey;
    const int stride = gridDim.x * Tr::kWarps * kGroups;  // the grid is a few CTAs per SM
    int first = (blockIdx.x * Tr::kWarps + threadIdx.x / kWarpSize) * kGroups;  // the warp's group 0
    if (first >= shape.units) return;
    // A group past the last unit runs along (the warp's shuffles need every lane) as a unit
    // with no rows: no loads, no writes.
    const auto unit_at = [&](int first_unit) {
        const int unit = first_unit + grp;
        if (unit < shape.units) return warp_unit<Tr, kMask>(p, shape, divs, unit);
        WarpUnit none{};
        none.live = false;
        return none;
    };
    const auto load = [&](WarpLoads<Tr, kPasses>& w, const WarpUnit& u) {
        if (u.live) {
            load_q<Tr>(w.q, p, shape, divs.group, u, sub);
            load_kv<Tr, kPasses, true>(w.k, w.v, p, u, u.key_begin, sub, grp);
        } else {
            w = WarpLoads<Tr, kPasses>{};
        }
    };
    WarpLoads<Tr, kPasses> cur;
    load(cur, unit_at(first));
    const float scale_log2 = p.scale_bmm1 * kLog2e;
    while (true) {
        const int64_t next = int64_t(first) + stride;
        const bool more = next < shape.units;  // warp-uniform
        WarpLoads<Tr, kPasses> nxt;
        if (more) load(nxt, unit_at(static_cast<int>(next)));
        const WarpUnit u = unit_at(first);
        WarpState<Tr> st;
        st.init(cur.q, scale_log2);
        if (__any_sync(0xffffffffu, u.key_begin < u.key_end)) {
            st.template step<kMask, kMod, kPasses, true, true>(cur.k, cur.v, u.key_begin, u, divs.group, grp, p,
                                                               mask::Rows<kMask>::make(p, u.q_len, u.kv_len));
        }
        if (u.live) st.template finish<true>(p, shape, divs.group, u, sub, grp);
        if (!more) break;
        first = static_cast<int>(next);
        cur = nxt;
    }
}

}  // namespace decode
}  // namespace fmha
