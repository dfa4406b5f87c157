// The split merge: one query row's split partials (O unnormalised, max, sum) merged
// LSE-weighted into O, from Params::workspace or from a cluster's shared memory, and the
// combine kernel that runs it after the launches whose tiles do not merge their own splits.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "fmha/kernel/decode/shape.h"
#include "fmha/kernel/decode/store.h"
#include "fmha/memory/cluster_sm90.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// Where one query row's split partials are read from by merge_chunk: Params::workspace
// (fp32 [split][kDv] O and [split] (max, sum), through L2) ...
template <int kDv>
struct GlobalPartials {
    const float* o;    // split 0's O at the chunk's first column; split s at s * kDv
    const float2* ml;  // split 0's (max, sum)
    FMHA_DEVICE float max_of(int s) const { return __ldcg(&ml[s].x); }
    FMHA_DEVICE float2 ml_of(int s) const { return __ldcg(ml + s); }
    FMHA_DEVICE float4 o_of(int s, int half) const {
        return __ldcg(reinterpret_cast<const float4*>(o + int64_t(s) * kDv) + half);
    }
};

// ... or the shared memory of the cluster's CTA of rank s (split s), at the same addresses
// in every CTA (SM90 clusters: decode_mma_kernel's clustered merge).
struct ClusterPartials {
    uint32_t o;   // this CTA's shared address of the row's chunk of O
    uint32_t ml;  // of the row's (max, sum)
    FMHA_DEVICE float max_of(int s) const { return ml_of(s).x; }
    FMHA_DEVICE float2 ml_of(int s) const { return memory::ld_cluster_f2(memory::cluster_map(ml, s)); }
    FMHA_DEVICE float4 o_of(int s, int half) const {
        return memory::ld_cluster_f4(memory::cluster_map(o + half * 16, s));
    }
};

// Merges the `live` splits of one query row's 8 columns (chunk) into O (LSE-weighted), in
// split order wherever the partials are (the same bits from either source).
// item < 2^31: the callers' launches check their grids (32-bit divisions only).
template <class Tr, class Partials>
FMHA_DEVICE void merge_chunk(const Params& p, const Shape& shape, int item, int row, int chunk, int live,
                             int q_off, const Partials& part) {
    using Element = typename Tr::Element;
    // kBatch splits' partials are loaded before any is used, the first batch before the max
    // is known: up to kBatch splits a row's merge waits on its partials once, beyond that
    // about twice (b = 1: 16 splits a row), not twice per split.
    constexpr int kBatch = 8;
    float2 ml[kBatch];  // (max, sum)
    float4 lo[kBatch], hi[kBatch];
    const auto load = [&](int s0) {
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const bool in = s0 + k < live;
            ml[k] = in ? part.ml_of(s0 + k) : make_float2(-INFINITY, 0.f);
            lo[k] = in ? part.o_of(s0 + k, 0) : make_float4(0.f, 0.f, 0.f, 0.f);
            hi[k] = in ? part.o_of(s0 + k, 1) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    load(0);
    float m_all = -INFINITY;
#pragma unroll
    for (int k = 0; k < kBatch; ++k) m_all = fmaxf(m_all, ml[k].x);
    for (int s0 = kBatch; s0 < live; s0 += kBatch) {
        float m[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) m[k] = s0 + k < live ? part.max_of(s0 + k) : -INFINITY;
#pragma unroll
        for (int k = 0; k < kBatch; ++k) m_all = fmaxf(m_all, m[k]);
    }
    float l_all = 0.f, acc[kElemsPerChunk] = {};
    if (m_all != -INFINITY) {
        for (int s0 = 0; s0 < live; s0 += kBatch) {
            if (s0 > 0) load(s0);
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {  // in split order, as one at a time
                if (ml[k].x == -INFINITY) continue;
                const float w = exp2f(ml[k].x - m_all);  // a power of two: the maxima are integers
                l_all += ml[k].y * w;
                const float x[kElemsPerChunk] = {lo[k].x, lo[k].y, lo[k].z, lo[k].w, hi[k].x, hi[k].y, hi[k].z, hi[k].w};
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) acc[e] = fmaf(x[e], w, acc[e]);
            }
        }
    }
    const int b = item / p.h_kv;
    const int g = item - b * p.h_kv;
    const int head = g * shape.group + row % shape.group;
    store_o_chunk<Element>(p, b, head, row, shape.group, q_off, chunk, m_all, l_all, acc,
                           p.scale_softmax * p.scale_bmm2);
}

// merge_chunk from the partials in Params::workspace (q_off: the sequence's first row of Q
// and O).
template <class Tr>
FMHA_DEVICE void combine_chunk(const Params& p, const Shape& shape, int splits, int item, int row, int chunk,
                               int live, int q_off) {
    const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * Tr::kRows;
    const int64_t item_row = int64_t(item) * shape.row_tiles * Tr::kRows + row;
    const float* base = partials<Tr>(p, shape);
    const GlobalPartials<Tr::kHeadDimV> part{base + item_row * splits * Tr::kHeadDimV + chunk * kElemsPerChunk,
                                             reinterpret_cast<const float2*>(base + item_rows * splits * Tr::kHeadDimV) +
                                                 item_row * splits};
    merge_chunk<Tr>(p, shape, item, row, chunk, live, q_off, part);
}

// Tiles that do not merge their own splits (!kFusedMerge): merges the splits of every query
// row, one thread per (row, 8 columns).
template <class Tr>
__global__ void __launch_bounds__(256) combine_kernel(const __grid_constant__ Params p, int splits) {
    constexpr int kChunks = Tr::kHeadDimV / kElemsPerChunk;
    const Shape shape = make_shape<Tr>(p, splits);
    const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * Tr::kRows;
    // 32-bit indices (the launch checks the thread count): a 64-bit division is a call.
    const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= item_rows * kChunks) return;
    const int chunk = t % kChunks;
    const int item_row = t / kChunks;
    const int tile_rows = shape.row_tiles * Tr::kRows;
    const int item = item_row / tile_rows;
    const int row = item_row - item * tile_rows;
    const int b = static_cast<int>(item / p.h_kv);
    if (row >= shape.group * seq_q_len(p, b)) return;
    combine_chunk<Tr>(p, shape, splits, item, row, chunk, live_splits(p, shape, b), seq_q_offset(p, b));  // 0: zero rows
}

}  // namespace decode
}  // namespace fmha
