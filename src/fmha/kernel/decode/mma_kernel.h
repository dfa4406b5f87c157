// The tensor-core path (kWarpsN == 4, MmaTraits), for caches of 64 keys or more: one CTA a
// unit (sequence b, kHeads KV heads, 16 packed rows of each, key split). K and V stream
// through a kStages-deep cp.async ring of kBlockN-key blocks of every head; each warp takes a
// quarter of every block's keys, S = Q K^T and O += P V on mma.sync with its own online
// softmax (mma_tile.h); the warps' (max, sum, O) merge through shared memory, and a tile's
// splits in a cluster or in its last CTA (merge.h), or, d = 256, in combine_kernel.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "fmha/descale.h"
#include "fmha/kernel/decode/merge.h"
#include "fmha/kernel/decode/mma_tile.h"
#include "fmha/kernel/decode/shape.h"
#include "fmha/seq_lens.h"
#include "fmha/kernel/decode/store.h"
#include "fmha/kernel/dependent_launch.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/cluster_sm90.h"
#include "fmha/memory/cp_async.h"
#include "fmha/memory/gmem_tile.h"
#include "fmha/softmax/online_softmax.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/sinks.h"
#include "fmha/softmax/stats.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// The warps' merge area, over the ring (free once every warp is past its last block), for
// the CTA's HR = kHeads * kRows rows (head slot hs, row r at hs * kRows + r):
// red_o [kWarps][HR][kMergePitch] O, then red_ml [kWarps][HR][2] (max, sum). Each warp
// writes its (O, max, sum) of every row.
template <class Tr>
FMHA_DEVICE void stage_warp_partials(char* smem, const float (&acc_o)[Tr::kHeads][Tr::kNTilesO][4],
                                     const softmax::OnlineSoftmax<Tr::kHeads>& softmax, int warp, int lane) {
    constexpr int kPitch = Tr::kMergePitch;
    constexpr int HR = Tr::kHeads * Tr::kRows;
    float* red_o = reinterpret_cast<float*>(smem);     // [kWarps][HR][kPitch]
    float* red_ml = red_o + Tr::kWarps * HR * kPitch;  // [kWarps][HR][2]
#pragma unroll
    for (int hs = 0; hs < Tr::kHeads; ++hs) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = hs * Tr::kRows + lane / 4 + 8 * h;
            if constexpr (Tr::kKvE4m3) {  // n-tiles 4i .. 4i + 3 hold 4 adjacent columns twice (kv_e4m3.h)
                float* row = red_o + (warp * HR + r) * kPitch;
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesO; nt += 2) {
                    *reinterpret_cast<float4*>(row + kv8::o_column(nt, 0, lane % 4)) =
                        make_float4(acc_o[hs][nt][2 * h], acc_o[hs][nt + 1][2 * h], acc_o[hs][nt][2 * h + 1],
                                    acc_o[hs][nt + 1][2 * h + 1]);
                }
            } else {
                float* dst = red_o + (warp * HR + r) * kPitch + 2 * (lane % 4);
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
                    *reinterpret_cast<float2*>(dst + nt * 8) =
                        make_float2(acc_o[hs][nt][2 * h], acc_o[hs][nt][2 * h + 1]);
                }
            }
            const float l = softmax::quad_sum(softmax.row_sum[hs][h]);
            if (lane % 4 == 0) {
                red_ml[2 * (warp * HR + r)] = softmax.row_max[hs][h];
                red_ml[2 * (warp * HR + r) + 1] = l;
            }
        }
    }
}

// The clustered splits' partials after the merge area: [HR][dv] O, then [HR] (max, sum).
template <class Tr>
FMHA_DEVICE float* cluster_partial(char* smem) {
    return reinterpret_cast<float*>(smem + Tr::kSmemMerge);
}

// The CTA's rows after the warps' merge: O itself with one split, else the split's partial
// into this CTA's shared memory for the cluster's merge (clustered) or into Params::workspace.
template <class Tr>
FMHA_DEVICE void store_rows(const Params& p, const Shape& shape, const MmaTile& t, float out_scale, int item0,
                           int splits, bool clustered, char* smem, int tid) {
    constexpr int R = Tr::kRows;
    constexpr int HR = Tr::kHeads * R;
    using Element = typename Tr::Element;
    constexpr int kChunksV = Tr::kHeadDimV / kElemsPerChunk;
    float* ws_o = partials<Tr>(p, shape);
    const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * R;
    float* ws_ml = ws_o + item_rows * splits * Tr::kHeadDimV;
    constexpr int kPitch = Tr::kMergePitch;
    const float* red_o = reinterpret_cast<const float*>(smem);  // [kWarps][HR][kPitch]
    const float* red_ml = red_o + Tr::kWarps * HR * kPitch;     // [kWarps][HR][2]
    float* part_o = cluster_partial<Tr>(smem);    // [HR][dv], clustered
    float* part_ml = part_o + HR * Tr::kHeadDimV;  // [HR][2]
    for (int i = tid; i < HR * kChunksV; i += Tr::kThreads) {
        const int hr = i / kChunksV;
        const int c = i % kChunksV;
        const int hs = hr / R;
        const int row = t.row0 + hr % R;
        if (row >= t.rows || hs >= t.heads) continue;
        float m_all = -INFINITY;
#pragma unroll
        for (int w = 0; w < Tr::kWarps; ++w) m_all = fmaxf(m_all, red_ml[2 * (w * HR + hr)]);
        float l_all = 0.f, acc[kElemsPerChunk] = {};
        if (m_all != -INFINITY) {
#pragma unroll
            for (int w = 0; w < Tr::kWarps; ++w) {
                const float m_w = red_ml[2 * (w * HR + hr)];
                if (m_w == -INFINITY) continue;
                const float wgt = exp2f(m_w - m_all);  // a power of two: the maxima are integers
                l_all += red_ml[2 * (w * HR + hr) + 1] * wgt;
                const float4* src = reinterpret_cast<const float4*>(red_o + (w * HR + hr) * kPitch + c * kElemsPerChunk);
                const float4 a = src[0], d = src[1];
                const float x[kElemsPerChunk] = {a.x, a.y, a.z, a.w, d.x, d.y, d.z, d.w};
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) acc[e] = fmaf(x[e], wgt, acc[e]);
            }
        }
        if (splits == 1) {
            const int head = (t.g0 + hs) * shape.group + row % shape.group;
            store_o_chunk<Element>(p, t.b, head, row, shape.group, t.q_off, c, m_all, l_all, acc, out_scale);
        } else if (clustered) {  // read by the cluster's merge
            float4* dst = reinterpret_cast<float4*>(part_o + hr * Tr::kHeadDimV + c * kElemsPerChunk);
            dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            if (c == 0) reinterpret_cast<float2*>(part_ml)[hr] = make_float2(m_all, l_all);
        } else {
            const int64_t slot = (int64_t(item0 + hs) * shape.row_tiles * R + row) * splits + t.split;
            store_partial_chunk<Tr::kHeadDimV>(ws_o, ws_ml, slot, c, m_all, l_all, acc);
        }
    }
}

// Clustered splits: every CTA merges a share of the (row, chunk)s from the cluster's partials.
template <class Tr>
FMHA_DEVICE void merge_cluster(const Params& p, const Shape& shape, const MmaTile& t, int item0, int splits, char* smem,
                              int tid) {
    constexpr int R = Tr::kRows;
    constexpr int HR = Tr::kHeads * R;
    constexpr int kChunksV = Tr::kHeadDimV / kElemsPerChunk;
    const float* part_o = cluster_partial<Tr>(smem);
    const float* part_ml = part_o + HR * Tr::kHeadDimV;
    memory::cluster_sync();  // every split's partials are in its shared memory
    const int live = max_int(1, live_splits(shape, t.keys));
    const uint32_t o_base = smem_u32(part_o), ml_base = smem_u32(part_ml);
    for (int i = t.split + splits * tid; i < HR * kChunksV; i += splits * Tr::kThreads) {
        const int hr = i / kChunksV;
        const int c = i % kChunksV;
        const int hs = hr / R;
        const int row = t.row0 + hr % R;
        if (row >= t.rows || hs >= t.heads) continue;
        const ClusterPartials part{o_base + (hr * Tr::kHeadDimV + c * kElemsPerChunk) * 4u, ml_base + hr * 8u};
        merge_chunk<Tr>(p, shape, item0 + hs, row, c, live, t.q_off, part);
    }
    // No CTA leaves while another reads its shared memory; each has used the values it
    // read, so the barrier orders nothing else (its O stores need not be out first).
    memory::cluster_sync_relaxed();
}

// Splits through Params::workspace: the tile's last split to arrive merges all of them (no
// combine launch): partials published (fence), then one arrival per CTA on the tile's counter.
template <class Tr>
FMHA_DEVICE void merge_last_split(const Params& p, const Shape& shape, const MmaTile& t, int item0, int splits,
                                 int tid) {
    constexpr int R = Tr::kRows;
    constexpr int HR = Tr::kHeads * R;
    constexpr int kChunksV = Tr::kHeadDimV / kElemsPerChunk;
    __shared__ int last;
    __threadfence();
    __syncthreads();
    // CTAs of this tile that write, from the key range (a load here would wait on L2 at
    // the tile's end) (split 0 of a sequence without keys writes its empty rows: at least one)
    const int live = max_int(1, live_splits(shape, t.keys));
    if (tid == 0) {  // the tile's counter: its first head's
        int* counter = static_cast<int*>(p.workspace) + int64_t(item0) * shape.row_tiles + t.row_tile;
        last = atomicAdd(counter, 1) == live - 1;
        if (last) *counter = 0;  // every other arrival is in: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other CTAs' partials, read through L2 (__ldcg)
    for (int i = tid; i < HR * kChunksV; i += Tr::kThreads) {
        const int hs = i / kChunksV / R;
        const int row = t.row0 + i / kChunksV % R;
        if (row < t.rows && hs < t.heads) {
            combine_chunk<Tr>(p, shape, splits, item0 + hs, row, i % kChunksV, live, t.q_off);
        }
    }
}

// kHalf: every tile has at most 8 query rows (half_rows, plan.h), so each lane's second row (g + 8)
// is padding and its softmax is skipped.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone, bool kHalf = false>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtas)
    decode_mma_kernel(const __grid_constant__ Params p, int splits) {
    using Element = typename Tr::Element;
    constexpr int H = Tr::kHeads;
    extern __shared__ __align__(128) char smem[];
    // A dependent launch (depend_on_previous): nothing global before the grid ahead is done;
    // the grid behind may launch once every CTA has started.
    kernel::wait_for_prerequisites();
    kernel::allow_dependents();
    const Shape shape = make_shape<Tr>(p, splits);
    const int tid = threadIdx.x;
    const int lane = tid % kWarpSize;
    const int warp = tid / kWarpSize;
    const bool clustered = Tr::kFusedMerge && splits > 1 && memory::cluster_size() > 1;
    MmaTile t = mma_tile<Tr>(p, shape, splits, clustered);

    // Full, back-to-back sequences: from b, so the first copies do not wait on a load.
    t.q_len = seq_q_len(p, t.b);
    t.kv_len = seq_kv_len(p, t.b);
    t.rows = shape.group * t.q_len;
    t.row0 = t.row_tile * Tr::kRows;
    if (t.row0 >= t.rows) return;  // the tile is past this sequence's rows
    t.keys = mask::sequence_keys<kMask>(p, t.q_len, t.kv_len);
    t.key_begin = t.keys.first + t.split * shape.keys_per_split;
    t.key_end = min_int(t.keys.last, t.key_begin + shape.keys_per_split);
    // A split past the sequence's keys does nothing, except split 0 of a sequence without
    // keys, which stands for all of them (the tile's merge then writes zero rows), and a
    // cluster's CTA, which streams no keys but takes its share of the merge.
    if (splits > 1 && t.key_begin >= t.keys.last && t.split > 0 && !clustered) return;
    t.q_off = seq_q_offset(p, t.b);

    const uint32_t smem_q = smem_u32(smem);
    const uint32_t smem_k = smem_q + Tr::kSmemQ;                // kStages x [kBlockN, d]
    const uint32_t smem_v = smem_k + Tr::kStages * Tr::kSmemK;  // kStages x [kBlockN, dv]
    if constexpr (!Tr::kKvE4m3) load_q_tile<Tr>(smem_q, p, shape, t, tid);  // e4m3: below, after K and V

    const int kv_off = seq_kv_offset(p, t.b);
    using KvElement = typename Tr::KvElement;
    const auto k_rows = memory::kv_rows_from<KvElement, false>(p, t.b, t.g0, kv_off);
    const auto v_rows = memory::kv_rows_from<KvElement, true>(p, t.b, t.g0, kv_off);
    const int n_blocks = t.key_end > t.key_begin ? ceil_div(t.key_end - t.key_begin, Tr::kBlockN) : 0;
    // Block j into stage j % kStages; keys past the split's end are zero-filled (P == 0
    // times stale shared memory could be NaN).
    const auto load_kv = [&](int j) {
        const int key0 = t.key_begin + j * Tr::kBlockN;
        const uint32_t stage = static_cast<uint32_t>(j % Tr::kStages);
        Tr::LoaderK::template load_keys<true, memory::PagedCopies::kUnrolled>(smem_k + stage * Tr::kSmemK, p, k_rows, key0,
                                                                              t.key_end - key0, tid, t.heads);
        Tr::LoaderV::template load_keys<true, memory::PagedCopies::kUnrolled>(smem_v + stage * Tr::kSmemV, p, v_rows, key0,
                                                                              t.key_end - key0, tid, t.heads);
    };
#pragma unroll
    for (int j = 0; j < Tr::kStages - 1; ++j) {
        if (j < n_blocks) load_kv(j);
        memory::cp_async_commit();  // group j (Q rides in group 0); empty groups keep the count
    }

    // e4m3 K: S of head slot hs, row half h, times row_scale[hs][h] (Q's row scale inverse and
    // k_descale) before the score modifiers, which take raw scores.
    [[maybe_unused]] float row_scale[H][2];
    if constexpr (Tr::kKvE4m3) {
        float* q_inv = reinterpret_cast<float*>(smem + H * Tr::LayoutQ::kBytes);
        kv8::load_q_tile<Tr>(smem_q, q_inv, p, shape, t, tid);
        __syncthreads();  // q_inv (and the Q tiles, which the loop's first barrier would order too)
#pragma unroll
        for (int hs = 0; hs < H; ++hs) {
            const float kd = hs < t.heads ? descale(p.k_descale, p, t.b, t.g0 + hs) : 1.f;
            row_scale[hs][0] = q_inv[hs * Tr::kRows + lane / 4] * kd;
            row_scale[hs][1] = q_inv[hs * Tr::kRows + lane / 4 + 8] * kd;
        }
    }

    MmaOperands<Tr> ops;
    ops.q.init(smem_q, mma::lane_row_a(lane), mma::lane_chunk_a(lane));
    ops.k.init(smem_k, warp * Tr::kWarpKeys + mma::lane_row_b(lane), mma::lane_chunk_b(lane));
    ops.v.init(smem_v, warp * Tr::kWarpKeys + mma::lane_row_a(lane), mma::lane_chunk_a(lane));
    int lo[2], limit[2], key_pos[2];
    float alibi[H][2];
    const Element* bias_rows[H][2] = {};
    const uint32_t* mask_rows[2] = {nullptr, nullptr};
    row_bounds<Tr, kMask, kMod>(lo, limit, key_pos, alibi, bias_rows, mask_rows, p, shape, t, lane);
    const MaskEdge edge = mask_edge(lo, limit, t, lane);
    const int col0 = t.key_begin + warp * Tr::kWarpKeys + 2 * (lane % 4);  // this lane's first key, block 0

    float acc_o[H][Tr::kNTilesO][4];
#pragma unroll
    for (int hs = 0; hs < H; ++hs) {
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[hs][nt][e] = 0.f;
        }
    }
    softmax::OnlineSoftmax<H> softmax;
    softmax.init();
    const float scale_log2 = p.scale_bmm1 * kLog2e;
    // e4m3 K without a score modifier: each row's scale goes into its softmax scale (one FMUL
    // a score less; the modifiers take raw scores, so with one S is scaled first).
    constexpr bool kFoldRowScale = Tr::kKvE4m3 && kMod == softmax::ScoreMod::kNone;
    [[maybe_unused]] float row_scale_log2[H][2];
    if constexpr (kFoldRowScale) {
#pragma unroll
        for (int hs = 0; hs < H; ++hs) {
            row_scale_log2[hs][0] = scale_log2 * row_scale[hs][0];
            row_scale_log2[hs][1] = scale_log2 * row_scale[hs][1];
        }
    }

    for (int j = 0; j < n_blocks; ++j) {
        memory::cp_async_wait<Tr::kStages - 2>();
        __syncthreads();  // block j landed; every warp is done with block j - 1's stage
        if (j + Tr::kStages - 1 < n_blocks) load_kv(j + Tr::kStages - 1);
        memory::cp_async_commit();
        const uint32_t stage = static_cast<uint32_t>(j % Tr::kStages);
        float acc_s[H][Tr::kNTilesS][4];
        qk_block<Tr>(acc_s, ops, stage);
        if constexpr (Tr::kKvE4m3 && !kFoldRowScale) {
#pragma unroll
            for (int hs = 0; hs < H; ++hs) {
#pragma unroll
                for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_s[hs][ni][e] *= row_scale[hs][e / 2];
                }
            }
        }
        const int key0 = col0 + j * Tr::kBlockN;
        // The score modifier stays inline, and the row bounds in the kernel's own arrays: a
        // helper's local arrays (rel, the lambdas), which the inliner hoists ahead of the
        // kernel's, reorder the loop's registers in the 255-register d = 256 kernels.
        if constexpr (kMod == softmax::ScoreMod::kSoftcap) {
            softmax::apply_softcap(acc_s, softmax::Softcap::for_raw_scores(p.softcap, p.scale_bmm1));
        }
        if constexpr (kMod == softmax::ScoreMod::kAlibi) {
            int rel[H][2];
#pragma unroll
            for (int hs = 0; hs < H; ++hs) rel[hs][0] = key_pos[0] - key0, rel[hs][1] = key_pos[1] - key0;
            softmax::apply_alibi(acc_s, alibi, rel);
        }
        if constexpr (kMod == softmax::ScoreMod::kBias) {
            softmax::apply_bias<Element>(acc_s, [&](int hs, int h) { return bias_rows[hs][h]; }, key0, t.kv_len,
                                         __frcp_rn(p.scale_bmm1));
        }
        if constexpr (kMod == softmax::ScoreMod::kCustomMask) {
            softmax::apply_custom_mask(acc_s, [&](int, int h) { return mask_rows[h]; }, key0, t.kv_len);
        }
        constexpr int kHalves = kHalf ? 1 : 2;
        if (block_needs_mask<Tr, kMask>(edge, key0)) mask_keys<Tr, kMask, kHalves>(acc_s, lo, limit, key0);
        if constexpr (kFoldRowScale) {
            softmax.template update<true, Tr::kSkipRescale, Tr::kNTilesS, Tr::kNTilesO, false, kHalves>(acc_s, acc_o,
                                                                                                      row_scale_log2);
        } else {
            softmax.template update<true, Tr::kSkipRescale, Tr::kNTilesS, Tr::kNTilesO, false, kHalves>(acc_s, acc_o,
                                                                                                      scale_log2);
        }
        pv_block<Tr>(acc_o, acc_s, ops, stage);
    }

    if constexpr (Tr::kKvE4m3) {  // v_descale of each head slot
#pragma unroll
        for (int hs = 0; hs < H; ++hs) {
            const float vd = hs < t.heads ? descale(p.v_descale, p, t.b, t.g0 + hs) : 1.f;
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_o[hs][nt][e] *= vd;
            }
        }
    }
    memory::cp_async_wait<0>();
    __syncthreads();
    stage_warp_partials<Tr>(smem, acc_o, softmax, warp, lane);
    __syncthreads();
    const float out_scale = p.scale_softmax * p.scale_bmm2;
    const int item0 = t.b * p.h_kv + t.g0;  // slot hs is item item0 + hs (< 2^31: the launch checks)
    store_rows<Tr>(p, shape, t, out_scale, item0, splits, clustered, smem, tid);
    if (splits == 1 || !Tr::kFusedMerge) return;
    if (clustered) {
        merge_cluster<Tr>(p, shape, t, item0, splits, smem, tid);
    } else {
        merge_last_split<Tr>(p, shape, t, item0, splits, tid);
    }
}

}  // namespace decode
}  // namespace fmha
