// The tensor-core path's pieces before its epilogue: where a CTA sits (MmaTile), its Q tile
// into shared memory, the visible keys and score modifiers of a lane's rows, and one block's
// S = Q K^T and O += P V per head slot. decode_mma_kernel (mma_kernel.h) runs them.
#pragma once

#include <climits>
#include <cstdint>

#include "fmha/kernel/decode/kv_e4m3.h"
#include "fmha/kernel/decode/shape.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/cluster_sm90.h"
#include "fmha/memory/cp_async.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/softcap.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// One head slot's accumulators (x[hs], an array) as the one-m-tile array the warp GEMMs take.
template <class T>
FMHA_DEVICE T (&one_tile(T& x))[1] {
    return *reinterpret_cast<T(*)[1]>(&x);
}

// Where a CTA sits and what it reads: mma_tile fills the coordinates, the kernel the rest
// between its early exits (a tile past its sequence's rows, a split past its keys).
struct MmaTile {
    int row_tile, g0, split, b;
    int heads;       // the CTA's KV heads g0, g0 + 1, ...: head slots (fewer than kHeads at h_kv's end)
    int q_len, kv_len;
    int rows, row0;  // the sequence's packed query rows; the tile's first
    mask::KeyRange keys;     // the sequence's (mask::sequence_keys)
    int key_begin, key_end;  // this split's
    int q_off;       // the sequence's first row of Q and O
};

// blockIdx.x = (b, split, head group, row tile), row tiles fastest: the tiles that read one
// key range run side by side and share it through L2, and the KV head groups of one key range
// next (rows of one token's K/V heads are adjacent in memory: DRAM pages read together).
// Launched in clusters of `splits` CTAs (SM90: cluster_splits), a tile's splits are one
// cluster, split = rank: (b, head group, row tile, split).
template <class Tr>
FMHA_DEVICE MmaTile mma_tile(const Params& p, const Shape& shape, int splits, bool clustered) {
    MmaTile t;
    const int bx = static_cast<int>(blockIdx.x);  // < 2^31: launch checks the unit count
    const int tile = clustered ? bx / splits : bx;
    t.row_tile = tile % shape.row_tiles;
    const int tile_g = tile / shape.row_tiles;
    t.g0 = tile_g % shape.head_groups * Tr::kHeads;  // the CTA's first KV head
    const int rest = tile_g / shape.head_groups;
    t.split = clustered ? bx - tile * splits : rest % splits;
    t.b = clustered ? rest : rest / splits;
    t.heads = min_int(Tr::kHeads, p.h_kv - t.g0);
    return t;
}

// Q: each head slot's tile of packed rows (slot hs, row r: head (g0 + hs) * G + r % G,
// position r / G), zeros past `rows` and in slots past `heads`, by cp.async into smem_q.
template <class Tr>
FMHA_DEVICE void load_q_tile(uint32_t smem_q, const Params& p, const Shape& shape, const MmaTile& t, int tid) {
    using Element = typename Tr::Element;
    constexpr int R = Tr::kRows;
    constexpr int kChunks = Tr::kHeadDim / kElemsPerChunk;
    for (int i = tid; i < Tr::kHeads * R * kChunks; i += Tr::kThreads) {
        const int hr = i / kChunks;  // hs * R + r
        const int c = i % kChunks;
        const int hs = hr / R;
        const int r = hr % R;
        const int row = t.row0 + r;
        const bool valid = row < t.rows && hs < t.heads;
        const int head = (valid ? t.g0 + hs : t.g0) * shape.group + (valid ? row % shape.group : 0);
        const int pos = valid ? row / shape.group : 0;
        const Element* src = static_cast<const Element*>(p.q) + int64_t(t.q_off + pos) * p.q_row_stride +
                             int64_t(head) * p.q_head_stride + c * kElemsPerChunk;
        memory::cp_async_16(smem_q + hs * Tr::LayoutQ::kBytes + Tr::LayoutQ::offset(r, c), src, valid);
    }
}

// What this lane's rows lane / 4 + 8h (h = 0, 1) of every head slot see: keys [lo[h],
// limit[h]), clipped to the split (a slot past `heads` has zero Q, K and V; its rows are not
// written); ALiBi: each row's slope (raw-score units) and key position (rows pack several
// heads); bias and custom mask: each row's entries (nullptr past `rows`).
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
FMHA_DEVICE void row_bounds(int (&lo)[2], int (&limit)[2], int (&key_pos)[2], float (&alibi)[Tr::kHeads][2],
                            const typename Tr::Element* (&bias_rows)[Tr::kHeads][2], const uint32_t* (&mask_rows)[2],
                            const Params& p, const Shape& shape, const MmaTile& t, int lane) {
    const auto mrows = mask::Rows<kMask>::make(p, t.q_len, t.kv_len);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = t.row0 + lane / 4 + 8 * h;
        const int pos = row / shape.group;  // the row's query position
        limit[h] = row < t.rows ? min_int(t.key_end, mrows.end(pos)) : 0;
        lo[h] = row < t.rows ? mrows.begin(pos) : 0;
        key_pos[h] = pos + mrows.shift;
#pragma unroll
        for (int hs = 0; hs < Tr::kHeads; ++hs) {
            const bool valid = row < t.rows && hs < t.heads;
            const int head = (t.g0 + hs) * shape.group + row % shape.group;  // the row's query head
            alibi[hs][h] = kMod == softmax::ScoreMod::kAlibi && valid
                               ? __fdividef(p.alibi_slopes[head], p.scale_bmm1)
                               : 0.f;
            if (kMod == softmax::ScoreMod::kBias && valid) {
                bias_rows[hs][h] = softmax::bias_row<typename Tr::Element>(p, t.b, head, pos);
            }
        }
        if (kMod == softmax::ScoreMod::kCustomMask && row < t.rows) {
            mask_rows[h] = softmax::custom_mask_row(p, t.b, pos);
        }
    }
}

// -inf for the keys outside [lo[h], limit[h]) of this lane's rows (row_bounds), on one
// block's S (this lane's first key key0).
template <class Tr, mask::Kind kMask, int kHalves = 2>
FMHA_DEVICE void mask_keys(float (&acc_s)[Tr::kHeads][Tr::kNTilesS][4], const int (&lo)[2], const int (&limit)[2],
                           int key0) {
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
        for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = key0 + ni * 8 + e;
                if (key >= limit[h] || (kMask == mask::Kind::kLocal && key < lo[h])) {
#pragma unroll
                    for (int hs = 0; hs < Tr::kHeads; ++hs) acc_s[hs][ni][2 * h + e] = -INFINITY;
                }
            }
        }
    }
}

// Where this lane's rows start needing mask_keys: keys at or past `from` (their smallest
// limit) or, local masks, before `below` (their largest start). Rows past the sequence's
// (zero Q, never stored) are left out, so a block inside every real row's keys skips the mask.
struct MaskEdge {
    int from, below;
};

FMHA_DEVICE MaskEdge mask_edge(const int (&lo)[2], const int (&limit)[2], const MmaTile& t, int lane) {
    MaskEdge e{INT_MAX, INT_MIN};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (t.row0 + lane / 4 + 8 * h < t.rows) e.from = min_int(e.from, limit[h]), e.below = max_int(e.below, lo[h]);
    }
    return e;
}

// Whether any lane of the warp has a real row that masks one of its keys of this block (its
// first key key0): the mask's compares and selects then run for the whole warp, else none.
template <class Tr, mask::Kind kMask>
FMHA_DEVICE bool block_needs_mask(const MaskEdge& e, int key0) {
    const bool edge = key0 + 8 * (Tr::kNTilesS - 1) + 1 >= e.from || (kMask == mask::Kind::kLocal && key0 < e.below);
    return __any_sync(0xffffffffu, edge);
}

// This warp's ldmatrix addresses of Q and of stage 0's K and V.
template <class Tr>
struct MmaOperands {
    memory::LdsmAddr<typename Tr::LayoutQ> q;
    memory::LdsmAddr<typename Tr::LayoutK> k;
    memory::LdsmAddr<typename Tr::LayoutV> v;
};

// S per head slot of the block in `stage`: its Q tile against its head's K (m-tiles apart:
// no product mixes two heads, so one head's non-finite K leaves the other's rows alone).
template <class Tr>
FMHA_DEVICE void qk_block(float (&acc_s)[Tr::kHeads][Tr::kNTilesS][4], const MmaOperands<Tr>& ops, uint32_t stage) {
#pragma unroll
    for (int hs = 0; hs < Tr::kHeads; ++hs) {
#pragma unroll
        for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_s[hs][ni][e] = 0.f;
        }
        memory::LdsmAddr<typename Tr::LayoutQ> qa = ops.q;
        qa.base += hs * Tr::LayoutQ::kBytes;
        memory::LdsmAddr<typename Tr::LayoutK> ka = ops.k;
        ka.base += stage * Tr::kSmemK + hs * Tr::LayoutK::kBytes;
        if constexpr (Tr::kKvE4m3) {
            kv8::gemm_qk<Tr::kNTilesS, Tr::kHeadDim>(acc_s[hs], qa, ka);
        } else {
            mma::gemm_qk<typename Tr::Element, 1, Tr::kNTilesS, Tr::kKSlices>(one_tile(acc_s[hs]), qa, ka);
        }
    }
}

// O += P V per head slot of the block in `stage`, P the softmax's probabilities in acc_s.
template <class Tr>
FMHA_DEVICE void pv_block(float (&acc_o)[Tr::kHeads][Tr::kNTilesO][4],
                          const float (&acc_s)[Tr::kHeads][Tr::kNTilesS][4], const MmaOperands<Tr>& ops,
                          uint32_t stage) {
    uint32_t p_frag[Tr::kHeads][Tr::kNTilesS / 2][4];
    mma::s_to_p<typename Tr::MmaElement>(p_frag, acc_s);
#pragma unroll
    for (int hs = 0; hs < Tr::kHeads; ++hs) {
        memory::LdsmAddr<typename Tr::LayoutV> va = ops.v;
        va.base += stage * Tr::kSmemV + hs * Tr::LayoutV::kBytes;
        if constexpr (Tr::kKvE4m3) {
            kv8::gemm_pv(acc_o[hs], p_frag[hs], va);
        } else {
            mma::gemm_pv<typename Tr::Element, false>(one_tile(acc_o[hs]), one_tile(p_frag[hs]), va);
        }
    }
}

}  // namespace decode
}  // namespace fmha
