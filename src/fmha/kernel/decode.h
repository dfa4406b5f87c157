// The "decode" family: attention for a few query rows per sequence (s_q <= kMaxSq) against a
// KV cache of any length, at the memory-bandwidth limit. Portable (SM80 and newer). Both
// paths pack the rows that read one KV head g into one unit: the G = h / h_kv query heads
// sharing it times the sequence's q_len positions (row r: head g*G + r % G, position r / G),
// so K and V are read once per KV head (GQA/MQA packing). The kernel's tile picks the path
// (Traits below picks the struct):
//
// Warp path (kWarpsN == 1; WarpTraits), for caches under 64 keys: CUDA-core FMAs on
// 16-byte register loads, no shared memory. Work unit = one warp = (sequence b, KV head g,
// tile of kRows rows, key split); keys first + [split * keys_per_split, ...), where [first,
// last) are the keys the sequence's rows see (mask::sequence_keys: all of them unless a
// local mask's window or chunk leaves some unseen, which are then never read) (flash-decoding, the
// split count from the problem and the SM count: choose_splits_warp). kLanesPerKey = d / 8
// lanes hold one key row as 16-byte chunks; the warp covers kKeysPerPass keys per pass and
// kUnroll passes per step (all loads of a step issued before any use); Q K^T is a dot
// product per lane reduced over the key's lanes with shuffles; each key group keeps its own
// online softmax (m, l, O slice), merged with shuffles at the end. A 1-2 key cache (one
// split) runs decode_short_kernel instead: persistent warps in which every lane group works
// a unit of its own and loads the next one before the current one's math.
//
// Tensor-core path (kWarpsN == 4; MmaTraits), for caches of 64 keys or more (dispatch:
// KernelMeta::min_s_kv). Work unit = one CTA = (b, group of kHeads KV heads, 16-row tile of
// each, key split): kHeads = 128 / d below d = 128 (2 at d = 64, 4 at d = 32), so a CTA reads
// 256 contiguous bytes of a token, each head with its own m-tile; where the one-head units
// fit one wave the launch runs MmaTraits::OneHead instead (one_head_fits), and at d = 64
// where they fill half to three quarters of a wave of four CTAs an SM over at most 8k keys,
// MmaTraits::Quad: one head in 16 KB stages of 64 keys, four CTAs an SM (quad_fits). K and
// V stream through a kStages-deep cp.async ring of blocks of kBlockN keys of every head (32 KB
// of K and V a block: 64 keys, or 8192 / d of one head; d = 256: 64 keys, 64 KB), up to 96 KB, so
// two CTAs can share an SM (pair_up says when they do); each warp takes a quarter of every
// block's keys: S = Q K^T and O += P V on mma.sync m16n8k16 (rows past the
// tile's real rows are zeros: the tensor cores have throughput to spare, where the
// CUDA-core path spends ~150 instructions per KB of K/V), with its own online softmax; the
// warps' (max, sum, O) are merged through shared memory. Splits fill one wave of resident
// CTAs (choose_splits_mma), so every CTA streams the same number of keys, and the last CTA
// of a tile merges the splits (arrival counters in Params::workspace; d = 256: combine_kernel).
// Beyond one wave of CTAs, or in a nearly full wave of whole units two to an SM (SM90), the
// launch is a dependent one (depend_on_previous): the next grid's CTAs start while this one
// drains and wait for it before touching memory.
//
// Numerics (both paths) match the tensor-core families and the reference: scores in fp32
// scaled by scale_bmm1 * log2(e), running max rounded up to an integer, P = exp2(score - max)
// summed unrounded and rounded to the input type before it multiplies V.
// One split writes O directly; several write fp32 partials (O unnormalised, max, sum) to
// Params::workspace, merged LSE-weighted.
//
// What an instantiation supports (static_asserted in the Traits; launch checks the rest):
//   Element        __half or __nv_bfloat16, fp32 accumulation (kAccFp16 == false)
//   kHeadDim       32, 64, 128 or 256 (d / 8 lanes per key must divide a warp), dv == d
//   warp path      kBlockM = kRows, query rows per warp unit: 1, 4 or 8; kBlockN keys per warp
//                  step, a multiple of 256 / d; kWarpsM 1..8 independent warps, kWarpsN 1
//   mma path       kBlockM 16 x kHeads (rows per CTA: 16 per KV head; kHeads 1 or 128 / d),
//                  kBlockN keys per stage (kBlockN x kHeads = 8192 / d, 64 at d = 256;
//                  Quad 4096 / d),
//                  kWarpsM 1, kWarpsN 4
//   run time       s_q <= kMaxSq; every MaskType (bottom-right aligned); var-len q and kv
//                  lengths; GQA/MQA; every layout (strides multiples of 8 elements); under
//                  2^31 units and 2^31 query rows x 16-byte chunks
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fmha/kernel/cluster_launch.h"
#include "fmha/kernel/dependent_launch.h"
#include "fmha/kernel/launch_checks.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/cluster_sm90.h"
#include "fmha/memory/gmem_tile.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/softmax/online_softmax.h"
#include "fmha/softmax/sinks.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/softcap.h"
#include "fmha/softmax/stats.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

constexpr int kMaxSq = 16;            // query rows per sequence the family serves
constexpr int kMaxSplits = 128;       // key splits per unit at most
constexpr int kMinKeysPerSplit = 128; // fewer keys per warp do not pay for the partial write
constexpr int kMmaMinKeysPerSplit = 256;  // a CTA's pipeline fill is worth it
// Beyond one wave of CTAs, at least this share (in eighths) of the slots of the waves the CTAs
// take are busy: a last wave that leaves most SMs idle for a whole unit is split finer.
constexpr int kMmaMinWaveEighths = 7;
// ... but no such split under this many keys (H100: 24 x 8 units of 4096 keys ran 3.5 % slower
// as two 2048-key splits; bench/NOTES.md §26).
constexpr int kMmaMinKeysPerWaveSplit = 4096;
// Beyond one wave, CTAs of at most this many keys share an SM two at a time (pair_up).
constexpr int kMmaPairMaxKeys = 4096;
// Splits of at most this many keys merge in a cluster (cluster_splits): b = 8 at 4k, 2 splits
// of 2048 keys, gains 3-5 %. Longer splits gain nothing measurable (the merge is a small share
// of them) and streamed 0.5-1 % slower in clusters (b = 8, d = 64: 2 splits of 8192 keys on
// the H100, of 32768 on the H200; bench/NOTES.md §31).
constexpr int kMmaClusterMaxKeys = 4096;
// ... and a wave's splits are cut to fewer that merge in clusters (cluster_fallback) only where
// those are at most this many keys.
constexpr int kMmaFallbackMaxKeys = 1024;
// d = 64: the four-an-SM Quad runs where its one-head units fill more than half and at most
// kMmaQuadMaxFillQuarters quarters of its wave, over at most kMmaQuadMaxKeys keys. Fuller
// waves even out the two-head tile's pairs (b = 56-64: Quad 0-5 % slower); over longer keys
// an SM left with one two-head CTA streams at nearly two CTAs' rate, and the two-head tile
// is as fast or faster (b = 48 at 16k: Quad 1 % faster on the H200, 2 % slower on the H100;
// at 32k / 64k 1-4 % slower on the H200; bench/NOTES.md §35).
constexpr int kMmaQuadMaxFillQuarters = 3;
constexpr int kMmaQuadMaxKeys = 8192;

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_,
          int kWarpsN_, bool kAccFp16_>
struct WarpTraits {
    using Element = Element_;
    static constexpr bool kMma = false;
    static constexpr bool kFusedMerge = false;  // splits merge in combine_kernel
    static constexpr bool kBf16 = ElementTraits<Element>::kIsBf16;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kRows = kBlockM_;
    static constexpr int kHeads = 1;  // KV heads per unit
    static constexpr bool kHasQuad = false;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarps = kWarpsM_;
    static constexpr int kThreads = kWarps * kWarpSize;
    static constexpr int kLanesPerKey = kHeadDim / kElemsPerChunk;
    static constexpr int kKeysPerPass = kWarpSize / kLanesPerKey;
    static constexpr int kUnroll = kBlockN / kKeysPerPass;
    // CTAs per SM the register budget is cut for (__launch_bounds__): few rows leave room for
    // more warps in flight, which a bandwidth-bound kernel needs.
    static constexpr int kMinBlocks = kRows == 1 ? 8 : 1;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(!kAccFp16_, "decode: fp32 accumulation only");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                  "decode: d in {32, 64, 128, 256}");
    static_assert(kHeadDimV == kHeadDim, "decode: dv == d");
    static_assert(kRows == 1 || kRows == 4 || kRows == 8, "decode: kBlockM (rows per warp) in {1, 4, 8}");
    static_assert(kBlockN % kKeysPerPass == 0 && kUnroll >= 1 && kUnroll <= 8, "decode: kBlockN = (256 / d) * 1..8");
    static_assert(kWarpsN_ == 1 && kWarps >= 1 && kWarps <= 8, "decode: 1..8 independent warps");
};

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_,
          int kWarpsN_, bool kAccFp16_>
struct MmaTraits {
    using Element = Element_;
    static constexpr bool kMma = true;
    // The tile's last CTA merges the splits (no combine launch). Not at d = 256, where the
    // merge's live values pushed the 255-register main loop into spills: combine_kernel.
    static constexpr bool kFusedMerge = kHeadDimV_ <= 128;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    // KV heads per CTA, each with its own 16-row m-tile of packed query rows (kRows), so the
    // CTA reads kHeads * d contiguous columns of a token where its heads are adjacent: 256
    // bytes from d = 32 to 128 (kBlockM = 16 * kHeads). One head's 128 or 64 bytes a token,
    // the other heads' read by other CTAs at other times, cost d = 64 3-4 % of its
    // bandwidth (H100, bench/NOTES.md §30). But where the (sequence, KV head) tiles fit one
    // wave, fewer units mean more splits, which cost more (b = 1 and 8: 3-22 %): there the
    // launch runs OneHead, the same 32 KB stages of one head (with_sibling).
    static constexpr int kHeads = kBlockM_ / 16;
    using OneHead = MmaTraits<Element_, kHeadDim_, kHeadDimV_, 16, kBlockN_ * kHeads, kWarpsM_, kWarpsN_, kAccFp16_>;
    // d = 64: also one head in 16 KB stages (64 keys), four CTAs to an SM, as cuDNN runs d = 64
    // (bench/NOTES.md §30, §34, §35), where the one-head units fill half to three quarters of a
    // wave of those (quad_fits, with_sibling).
    static constexpr bool kHasQuad = kHeads > 1 && kHeadDim_ == 64;
    using Quad = MmaTraits<Element_, kHeadDim_, kHeadDimV_, 16, 4096 / kHeadDim_, kWarpsM_, kWarpsN_, kAccFp16_>;
    static constexpr int kRows = 16;           // packed query rows per head: one m-tile
    static constexpr int kBlockN = kBlockN_;   // keys per pipeline stage
    static constexpr int kWarps = kWarpsN_;    // each takes kWarpKeys keys of every stage
    static constexpr int kThreads = kWarps * kWarpSize;
    static constexpr int kWarpKeys = kBlockN / kWarps;
    static constexpr int kKSlices = kHeadDim / 16;     // k16 steps of Q K^T
    static constexpr int kNTilesS = kWarpKeys / 8;     // 8-key n-tiles of a warp's S
    static constexpr int kNTilesO = kHeadDimV / 8;     // 8-column n-tiles of O
    // Skip the O rescale when no row max grew (as flash_sm80): pays from 128 O registers.
    static constexpr bool kSkipRescale = kHeads * kNTilesO * 4 >= 128;

    using LayoutQ = memory::SmemLayout<kRows, kHeadDim>;
    using LayoutK = memory::SmemLayout<kBlockN, kHeadDim>;
    using LayoutV = memory::SmemLayout<kBlockN, kHeadDimV>;
    using LoaderK = memory::TileLoader<LayoutK, kHeadDim / kElemsPerChunk, kThreads, kHeads>;
    using LoaderV = memory::TileLoader<LayoutV, kHeadDimV / kElemsPerChunk, kThreads, kHeads>;
    // Per stage (and Q): kHeads head tiles, one after the other.
    static constexpr int kSmemQ = kHeads * LayoutQ::kBytes;
    static constexpr int kSmemK = kHeads * LayoutK::kBytes;
    static constexpr int kSmemV = kHeads * LayoutV::kBytes;
    // Stages: three, a 96 KB ring of 32 KB blocks (d = 256: 192 KB of 64 KB blocks), so two
    // CTAs fit on an SM up to d = 128. A launch runs them two to an SM only where its CTAs are
    // more than one wave and short (kMmaPairMaxKeys); elsewhere it asks for kSoloSmemBytes, a
    // footprint that leaves room for one (as the 128 KB ring did), and the rest is unused.
    // Measured at d = 128 (bench/NOTES.md §8, §27): 3 x 32 KB at one CTA per SM reads at least
    // as fast as 4 x 32 KB did (0-2 %), and two to an SM faster still where the CTAs are short
    // and several waves.
    static constexpr int kStageBytes = kSmemK + kSmemV;
    static constexpr int kStages = 3;
    // The quarter footprint (Quad): 16 KB stages, four CTAs to an SM at most 128 registers.
    static constexpr bool kQuad = kStageBytes == 16 * 1024;
    static constexpr int kMinCtas = kQuad ? 4 : 1;
    // The warps' merge reuses the ring: [kWarps][kHeads * kRows][kMergePitch] O, then
    // [kWarps][kHeads * kRows][2].
    static constexpr int kMergePitch = kHeadDimV + 4;  // floats; staggers the rows' banks
    static constexpr int kSmemMerge = kWarps * kHeads * kRows * (kMergePitch + 2) * 4;
    // Clustered splits (SM90) leave the CTA's partial after it: [kHeads * kRows][dv] O, then
    // [kHeads * kRows] (max, sum), for the cluster's merge to read.
    static constexpr int kSmemPartial = kHeads * kRows * (kHeadDimV + 2) * 4;
    static constexpr int kSmemBytes = max_int(kSmemQ + kStages * kStageBytes, kSmemMerge + kSmemPartial);
    // One CTA per SM: more than half an SM's 228 KB less the 1 KB each CTA holds back.
    static constexpr int kSoloSmemBytes = kQuad ? kSmemBytes : max_int(kSmemBytes, 115 * 1024);
    static constexpr int kMaxSmemBytes = 227 * 1024;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(!kAccFp16_, "decode: fp32 accumulation only");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                  "decode: d in {32, 64, 128, 256}");
    static_assert(kHeadDimV == kHeadDim, "decode: dv == d");
    static_assert(kBlockM_ == 16 * kHeads && (kHeads == 1 || kHeads == 128 / kHeadDim) && kWarpsM_ == 1,
                  "decode mma: kBlockM 16 rows per KV head, 1 or 128 / d heads; kWarpsM 1");
    // Keys per stage: a 32 KB block of K and V (d = 256: 64 keys, 64 KB). Less, as the 64 keys
    // of one head at d = 64 and 32 once were, leaves a CTA's per-block cost (wait, barrier,
    // softmax) on half or a quarter of the bytes (bench/NOTES.md §29).
    static_assert(kWarps == 4 && (kBlockN * kHeads == (kHeadDim == 256 ? 64 : 8192 / kHeadDim) ||
                                  (kHeads == 1 && kBlockN * kHeadDim == 4096)),
                  "decode mma: kWarpsN 4, kBlockN * heads = 8192 / d keys (64 at d = 256), or one head's 4096 / d");
    static_assert(kSoloSmemBytes <= kMaxSmemBytes, "decode mma: ring exceeds shared memory");
    static_assert(kSmemMerge % 16 == 0, "decode mma: the partial's float4s are 16-byte aligned");
};

// The generated kernels name one Traits; the tile says which path it is.
template <typename Element, int kHeadDim, int kHeadDimV, int kBlockM, int kBlockN, int kWarpsM, int kWarpsN,
          bool kAccFp16>
using Traits = std::conditional_t<
    (kWarpsN > 1), MmaTraits<Element, kHeadDim, kHeadDimV, kBlockM, kBlockN, kWarpsM, kWarpsN, kAccFp16>,
    WarpTraits<Element, kHeadDim, kHeadDimV, kBlockM, kBlockN, kWarpsM, kWarpsN, kAccFp16>>;

// Rows of one (b, g) item and the unit grid, the same on host and device.
struct Shape {
    int group;      // query heads per KV head, G
    int rows_max;   // G * s_q_max
    int row_tiles;  // ceil(rows_max / kRows)
    int head_groups;  // ceil(h_kv / kHeads): the units' KV heads g = group * kHeads + 0 .. kHeads - 1
    int splits;     // key splits
    int keys_per_split;
    int64_t units;  // b * head_groups * row_tiles * splits
};

template <class Tr>
FMHA_HOST_DEVICE Shape make_shape(const Params& p, int splits) {
    Shape s;
    s.group = p.h / p.h_kv;
    s.rows_max = s.group * p.s_q_max;
    s.row_tiles = ceil_div(s.rows_max, Tr::kRows);
    s.head_groups = ceil_div(p.h_kv, Tr::kHeads);
    s.splits = splits;
    s.keys_per_split = round_up(ceil_div(max_int(mask::key_span_max(p), 1), splits), Tr::kBlockN);
    s.units = int64_t(p.b) * s.head_groups * s.row_tiles * splits;
    return s;
}

// Workspace layout. The mma path first keeps one arrival counter per (item, row tile)
// (the CTA that completes a tile's splits merges them; the driver hands the workspace over
// zeroed and that CTA puts its counter back to 0), padded to 256 bytes. Then the fp32
// partials of a split: [item_row][split][dv] for O, [item_row][split][2] for (max, sum),
// item_row = (b * h_kv + g) * row_tiles * kRows + row.
template <class Tr>
FMHA_HOST_DEVICE size_t counter_bytes(const Params& p, const Shape& s) {
    return Tr::kMma ? (size_t(p.b) * p.h_kv * s.row_tiles * sizeof(int) + 255) / 256 * 256 : 0;
}

template <class Tr>
inline size_t partial_bytes(const Params& p, int splits) {
    const Shape s = make_shape<Tr>(p, splits);
    const size_t item_rows = size_t(p.b) * p.h_kv * s.row_tiles * Tr::kRows;
    return counter_bytes<Tr>(p, s) + item_rows * splits * (size_t(Tr::kHeadDimV) + 2) * sizeof(float);
}

template <class Tr>
FMHA_DEVICE float* partials(const Params& p, const Shape& s) {
    return reinterpret_cast<float*>(static_cast<char*>(p.workspace) + counter_bytes<Tr>(p, s));
}

// Splits that start inside a sequence's keys (mask::sequence_keys); 0 when it has none.
FMHA_DEVICE int live_splits(const Shape& shape, const mask::KeyRange& keys) {
    return ceil_div(max_int(0, keys.last - keys.first), shape.keys_per_split);
}

FMHA_DEVICE int live_splits(const Params& p, const Shape& shape, int b) {
    return live_splits(shape, mask::sequence_keys(p, p.q_lens[b], p.kv_lens[b]));
}

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
    l_all += softmax::sink_term(p, head, m_all);
    const float inv = l_all > 0.f ? p.scale_softmax * p.scale_bmm2 / l_all : 0.f;
    uint32_t packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) packed[i] = ElementTraits<Element>::pack(acc[2 * i] * inv, acc[2 * i + 1] * inv);
    const int pos = row / shape.group;
    if (chunk == 0) softmax::store_lse(p, b, head, pos, m_all, l_all);
    Element* dst = static_cast<Element*>(p.o) + int64_t(q_off + pos) * p.o_row_stride +
                   int64_t(head) * p.o_head_stride + chunk * kElemsPerChunk;
    *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
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

// Warp path: enough warps for the memory system (about 64 per SM in flight), and no split
// shorter than kMinKeysPerSplit keys; at most what `workspace_bytes` holds (0: one split).
template <class Tr>
inline int choose_splits_warp(const Params& p, int num_sms, size_t workspace_bytes) {
    const Shape one = make_shape<Tr>(p, 1);
    const int64_t target = int64_t(std::max(num_sms, 1)) * 64;
    int splits = static_cast<int>(std::min<int64_t>(kMaxSplits, (target + one.units - 1) / one.units));
    splits = std::min(splits, std::max(1, mask::key_span_max(p) / kMinKeysPerSplit));
    while (splits > 1 && partial_bytes<Tr>(p, splits) > workspace_bytes) --splits;
    return std::max(splits, 1);
}

// Mma path: CTAs resident at once, one wave, on num_sms SMs of ctas_per_sm each (at least one
// of each, where the device or the kernel cannot say).
inline int64_t wave_slots(int num_sms, int ctas_per_sm) {
    return int64_t(std::max(num_sms, 1)) * std::max(ctas_per_sm, 1);
}

// Mma path: as many splits as fit the CTAs into one wave of resident CTAs (num_sms *
// ctas_per_sm) without exceeding it, so no CTA streams alone at the end; none shorter than
// kMmaMinKeysPerSplit keys; at most what `workspace_bytes` holds. Problems with more units
// than one wave holds take the fewest splits (often none) that keep kMmaMinWaveEighths of
// their waves' slots busy (192 units on 132 slots: 2 splits, 384 CTAs in 3 waves, not 1.45),
// none shorter than kMmaMinKeysPerWaveSplit keys.
template <class Tr>
inline int choose_splits_mma(const Params& p, int num_sms, int ctas_per_sm, size_t workspace_bytes) {
    const Shape one = make_shape<Tr>(p, 1);
    const int64_t slots = wave_slots(num_sms, ctas_per_sm);
    const int span = mask::key_span_max(p);
    int splits = static_cast<int>(std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, slots / one.units)));
    if (one.units > slots) {
        const auto busy_enough = [&](int s) {
            const int64_t ctas = one.units * s;
            return ctas * 8 >= (ctas + slots - 1) / slots * slots * kMmaMinWaveEighths;
        };
        const int most = std::min(kMaxSplits, std::max(1, span / kMmaMinKeysPerWaveSplit));
        while (splits < most && !busy_enough(splits)) ++splits;
    }
    splits = std::min(splits, std::max(1, span / kMmaMinKeysPerSplit));
    while (splits > 1 && partial_bytes<Tr>(p, splits) > workspace_bytes) --splits;
    return std::max(splits, 1);
}

// Mma path: whether the launch asks for kSmemBytes, which lets two CTAs share an SM, rather
// than kSoloSmemBytes. Where the CTAs are more than one wave at ctas_per_sm (kSoloSmemBytes')
// and read at most kMmaPairMaxKeys keys each, an SM's CTAs hand over often, all at once (the
// units are alike): paired, one streams while the other starts or ends. Longer CTAs stream
// faster alone.
template <class Tr>
inline bool pair_up(const Params& p, int splits, int num_sms, int ctas_per_sm) {
    const Shape s = make_shape<Tr>(p, splits);
    return s.units > wave_slots(num_sms, ctas_per_sm) && s.keys_per_split <= kMmaPairMaxKeys;
}

// Mma path, several KV heads a CTA (kHeads > 1): whether the launch runs Tr::OneHead instead,
// where the problem's one-head units (b * h_kv * row tiles) fit one wave of OneHead's
// resident CTAs: then the wave is filled by key splits, and twice the units of one head split
// half as often (b = 8: 2 splits, not 4; b = 1 at 4k: 128 CTAs of 256 keys, not 64).
template <class Tr>
inline bool one_head_fits(const Params& p, int num_sms, int ctas_per_sm) {
    return make_shape<typename Tr::OneHead>(p, 1).units <= wave_slots(num_sms, ctas_per_sm);
}

// Mma path, d = 64 (Tr::kHasQuad): whether the launch runs Tr::Quad, where the one-head units
// do not fit a wave of OneHead, fill more than half and at most three quarters of a wave of
// Quad's resident CTAs (quad_ctas_per_sm an SM) without a split, and read at most
// kMmaQuadMaxKeys keys: b = 34 to 49 at h_kv = 8, s_q = 1 (132 SMs, four an SM), to 8k keys.
template <class Tr>
inline bool quad_fits(const Params& p, int num_sms, int one_head_ctas_per_sm, int quad_ctas_per_sm) {
    const int64_t units = make_shape<typename Tr::OneHead>(p, 1).units;
    const int64_t slots = wave_slots(num_sms, quad_ctas_per_sm);
    return !one_head_fits<Tr>(p, num_sms, one_head_ctas_per_sm) && 2 * units > slots &&
           4 * units <= kMmaQuadMaxFillQuarters * slots && mask::key_span_max(p) <= kMmaQuadMaxKeys;
}

FMHA_DEVICE uint4 load_raw(const void* src, bool valid) {
    return valid ? __ldg(static_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
}

FMHA_DEVICE void to_float(float (&x)[kElemsPerChunk], uint4 raw, bool bf16) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f;
        if (bf16) {
            __nv_bfloat162 b;
            memcpy(&b, &w[i], 4);
            f = __bfloat1622float2(b);
        } else {
            __half2 h;
            memcpy(&h, &w[i], 4);
            f = __half22float2(h);
        }
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}

template <typename Element>
FMHA_DEVICE float round_to_element(float x) {
    if constexpr (ElementTraits<Element>::kIsBf16) {
        return __bfloat162float(__float2bfloat16_rn(x));
    } else {
        return __half2float(__float2half_rn(x));
    }
}

// ---- Warp path ----

// Where a warp unit sits; the same for both warp kernels.
struct WarpUnit {
    int b, g, split;
    int64_t item;
    int q_len, kv_len, rows, row0;
    int key_begin, key_end;  // this split's keys: a slice of mask::sequence_keys
    int q_off, kv_off;
    bool live;  // false: the tile is past the sequence's rows, or the split past its keys
};

// The warp path's divisors, built on the host (FastDiv: the unit -> (b, g, row tile, split)
// and row -> (head, position) decompositions run once or twice per unit, and a division is
// a ~20-instruction sequence where the tiny caches leave ~300 instructions per unit).
struct UnitDivs {
    FastDiv splits, row_tiles, h_kv, group;
};

inline UnitDivs unit_divs(const Params& p, const Shape& s) {
    return UnitDivs{FastDiv(s.splits), FastDiv(s.row_tiles), FastDiv(p.h_kv), FastDiv(s.group)};
}

// unit < 2^31 (the launch checks the unit count).
template <class Tr, mask::Kind kMask>
FMHA_DEVICE WarpUnit warp_unit(const Params& p, const Shape& shape, const UnitDivs& dv, int unit) {
    WarpUnit u;
    const int item_tile = dv.splits.div(unit);
    u.split = dv.splits.mod(unit, item_tile);
    const int item = dv.row_tiles.div(item_tile);
    const int row_tile = dv.row_tiles.mod(item_tile, item);
    u.item = item;
    u.b = dv.h_kv.div(item);
    u.g = dv.h_kv.mod(item, u.b);
    u.q_len = p.q_lens[u.b];
    u.kv_len = p.kv_lens[u.b];
    u.rows = shape.group * u.q_len;
    u.row0 = row_tile * Tr::kRows;
    const mask::KeyRange keys = mask::sequence_keys<kMask>(p, u.q_len, u.kv_len);
    u.key_begin = keys.first + u.split * shape.keys_per_split;
    u.key_end = min_int(keys.last, u.key_begin + shape.keys_per_split);
    u.q_off = p.q_offsets[u.b];
    u.kv_off = p.kv_block_table != nullptr ? 0 : p.kv_offsets[u.b];  // paged: not read
    // A split past the sequence's keys writes nothing; the combine reads only live splits.
    // (With one split the unit always runs: a sequence without keys gets zero rows.)
    u.live = u.row0 < u.rows && !(shape.splits > 1 && u.key_begin >= keys.last);
    return u;
}

// One warp unit's loads in flight: this lane's 16-byte chunk of its Q rows and of one
// step's K and V rows (kPasses passes), unconverted (4 registers a chunk).
template <class Tr, int kPasses>
struct WarpLoads {
    uint4 q[Tr::kRows];
    uint4 k[kPasses];
    uint4 v[kPasses];
};

template <class Tr>
FMHA_DEVICE void load_q(uint4 (&q)[Tr::kRows], const Params& p, const Shape& shape, const FastDiv& group,
                        const WarpUnit& u, int sub) {
    using Element = typename Tr::Element;
#pragma unroll
    for (int r = 0; r < Tr::kRows; ++r) {
        const int row = u.row0 + r;
        const bool valid = row < u.rows;
        const int pos = valid ? group.div(row) : 0;
        const int head = u.g * shape.group + (valid ? group.mod(row, pos) : 0);
        q[r] = load_raw(static_cast<const Element*>(p.q) + int64_t(u.q_off + pos) * p.q_row_stride +
                            int64_t(head) * p.q_head_stride + sub * kElemsPerChunk,
                        valid);
    }
}

// The key a lane holds in pass i of the step at k0: the warp's key groups interleave
// (k0 + i * kKeysPerPass + grp), or, kPerGroup (every lane group works a unit of its own),
// the group walks the keys alone (k0 + i).
template <class Tr, bool kPerGroup>
FMHA_DEVICE int pass_key(int k0, int i, int grp) {
    return kPerGroup ? k0 + i : k0 + i * Tr::kKeysPerPass + grp;
}

// The keys of the step at k0, kPasses passes (zeros past the unit's keys).
template <class Tr, int kPasses, bool kPerGroup = false>
FMHA_DEVICE void load_kv(uint4 (&k)[kPasses], uint4 (&v)[kPasses], const Params& p, const WarpUnit& u,
                         int k0, int sub, int grp) {
    using Element = typename Tr::Element;
    const Element* k_base = static_cast<const Element*>(p.k) + int64_t(u.g) * p.k_head_stride + sub * kElemsPerChunk;
    const Element* v_base = static_cast<const Element*>(p.v) + int64_t(u.g) * p.v_head_stride + sub * kElemsPerChunk;
    if (p.kv_block_table != nullptr) {  // paged KV cache: each key's block from the table
        const int* table = p.kv_block_table + int64_t(u.b) * p.kv_table_stride;
        const int shift = __ffs(p.tokens_per_block) - 1;
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
            const int key = pass_key<Tr, kPerGroup>(k0, i, grp);
            const bool valid = key < u.key_end;
            const int64_t block = valid ? __ldg(table + (key >> shift)) : 0;
            const int64_t in_block = valid ? key & (p.tokens_per_block - 1) : 0;
            k[i] = load_raw(k_base + block * p.k_block_stride + in_block * p.k_row_stride, valid);
            v[i] = load_raw(v_base + block * p.v_block_stride + in_block * p.v_row_stride, valid);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
        const int key = pass_key<Tr, kPerGroup>(k0, i, grp);
        const bool valid = key < u.key_end;
        const int64_t row = u.kv_off + (valid ? key : 0);
        k[i] = load_raw(k_base + row * p.k_row_stride, valid);
        v[i] = load_raw(v_base + row * p.v_row_stride, valid);
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
                const float inv = l_row > 0.f ? __fdividef(out_scale, l_row) : 0.f;  // as OnlineSoftmax::finalize
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
            float4* dst = reinterpret_cast<float4*>(ws_o + slot * Tr::kHeadDimV + sub * kElemsPerChunk);
            dst[0] = make_float4(o[r][0], o[r][1], o[r][2], o[r][3]);
            dst[1] = make_float4(o[r][4], o[r][5], o[r][6], o[r][7]);
            if (sub == 0) {
                ws_ml[2 * slot] = m[r];
                ws_ml[2 * slot + 1] = l[r];
            }
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
    decode_kernel(const __grid_constant__ Params p, int splits, const UnitDivs dv) {
    const Shape shape = make_shape<Tr>(p, splits);
    const int lane = threadIdx.x % kWarpSize;
    const int unit = blockIdx.x * Tr::kWarps + threadIdx.x / kWarpSize;
    if (unit >= shape.units) return;
    const WarpUnit u = warp_unit<Tr, kMask>(p, shape, dv, unit);
    if (!u.live) return;
    const int sub = lane % Tr::kLanesPerKey;  // this lane's 16-byte chunk of a row
    const int grp = lane / Tr::kLanesPerKey;  // the key of a pass this lane works on

    const auto mrows = mask::Rows<kMask>::make(p, u.q_len, u.kv_len);
    WarpState<Tr> st;
    {
        uint4 q_raw[Tr::kRows];
        load_q<Tr>(q_raw, p, shape, dv.group, u, sub);
        st.init(q_raw, p.scale_bmm1 * kLog2e);
    }
    for (int k0 = u.key_begin; k0 < u.key_end; k0 += Tr::kBlockN) {
        uint4 k_raw[Tr::kUnroll], v_raw[Tr::kUnroll];
        load_kv<Tr, Tr::kUnroll>(k_raw, v_raw, p, u, k0, sub, grp);
        st.template step<kMask, kMod, Tr::kUnroll>(k_raw, v_raw, k0, u, dv.group, grp, p, mrows);
    }
    st.finish(p, shape, dv.group, u, sub, grp);
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
    decode_short_kernel(const __grid_constant__ Params p, const UnitDivs dv) {
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
        if (unit < shape.units) return warp_unit<Tr, kMask>(p, shape, dv, unit);
        WarpUnit none{};
        none.live = false;
        return none;
    };
    const auto load = [&](WarpLoads<Tr, kPasses>& w, const WarpUnit& u) {
        if (u.live) {
            load_q<Tr>(w.q, p, shape, dv.group, u, sub);
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
            st.template step<kMask, kMod, kPasses, true, true>(cur.k, cur.v, u.key_begin, u, dv.group, grp, p,
                                                               mask::Rows<kMask>::make(p, u.q_len, u.kv_len));
        }
        if (u.live) st.template finish<true>(p, shape, dv.group, u, sub, grp);
        if (!more) break;
        first = static_cast<int>(next);
        cur = nxt;
    }
}

// ---- Tensor-core path ----

// One head slot's accumulators (x[hs], an array) as the one-m-tile array the warp GEMMs take.
template <class T>
FMHA_DEVICE T (&one_tile(T& x))[1] {
    return *reinterpret_cast<T(*)[1]>(&x);
}

template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtas)
    decode_mma_kernel(const __grid_constant__ Params p, int splits) {
    using Element = typename Tr::Element;
    constexpr int R = Tr::kRows;
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
    // blockIdx.x = (b, split, head group, row tile), row tiles fastest: the tiles that read
    // one key range run side by side and share it through L2, and the KV head groups of one
    // key range next (rows of one token's K/V heads are adjacent in memory: DRAM pages read
    // together). Launched in clusters of `splits` CTAs (SM90: cluster_splits), a tile's
    // splits are one cluster, split = rank: (b, head group, row tile, split).
    const bool clustered = Tr::kFusedMerge && splits > 1 && memory::cluster_size() > 1;
    const int bx = static_cast<int>(blockIdx.x);  // < 2^31: launch checks the unit count
    const int tile = clustered ? bx / splits : bx;
    const int row_tile = tile % shape.row_tiles;
    const int tile_g = tile / shape.row_tiles;
    const int g0 = tile_g % shape.head_groups * H;  // the CTA's first KV head
    const int rest = tile_g / shape.head_groups;
    const int split = clustered ? bx - tile * splits : rest % splits;
    const int b = clustered ? rest : rest / splits;
    const int heads = min_int(H, p.h_kv - g0);  // the CTA's KV heads g0, g0 + 1, ...: head slots

    // Uniform lengths: from b, so the first copies do not wait on a load.
    const bool uniform = p.uniform_lengths;
    const int q_len = uniform ? p.s_q_max : p.q_lens[b];
    const int kv_len = uniform ? p.s_kv_max : p.kv_lens[b];
    const int rows = shape.group * q_len;
    const int row0 = row_tile * R;
    if (row0 >= rows) return;  // the tile is past this sequence's rows
    const mask::KeyRange keys = mask::sequence_keys<kMask>(p, q_len, kv_len);
    const int key_begin = keys.first + split * shape.keys_per_split;
    const int key_end = min_int(keys.last, key_begin + shape.keys_per_split);
    // A split past the sequence's keys does nothing, except split 0 of a sequence without
    // keys, which stands for all of them (the tile's merge then writes zero rows), and a
    // cluster's CTA, which streams no keys but takes its share of the merge.
    if (splits > 1 && key_begin >= keys.last && split > 0 && !clustered) return;
    const int q_off = uniform ? b * p.s_q_max : p.q_offsets[b];

    const uint32_t smem_q = smem_u32(smem);
    const uint32_t smem_k = smem_q + Tr::kSmemQ;                // kStages x [kBlockN, d]
    const uint32_t smem_v = smem_k + Tr::kStages * Tr::kSmemK;  // kStages x [kBlockN, dv]

    // Q: each head slot's tile of packed rows (slot hs, row r: head (g0 + hs) * G + r % G,
    // position r / G), zeros past `rows` and in slots past `heads`.
    {
        constexpr int kChunks = Tr::kHeadDim / kElemsPerChunk;
        for (int i = tid; i < H * R * kChunks; i += Tr::kThreads) {
            const int hr = i / kChunks;  // hs * R + r
            const int c = i % kChunks;
            const int hs = hr / R;
            const int r = hr % R;
            const int row = row0 + r;
            const bool valid = row < rows && hs < heads;
            const int head = (valid ? g0 + hs : g0) * shape.group + (valid ? row % shape.group : 0);
            const int pos = valid ? row / shape.group : 0;
            const Element* src = static_cast<const Element*>(p.q) + int64_t(q_off + pos) * p.q_row_stride +
                                 int64_t(head) * p.q_head_stride + c * kElemsPerChunk;
            memory::cp_async_16(smem_q + hs * Tr::LayoutQ::kBytes + Tr::LayoutQ::offset(r, c), src, valid);
        }
    }

    const int kv_off = p.kv_block_table != nullptr ? 0 : uniform ? b * p.s_kv_max : p.kv_offsets[b];
    const auto k_rows = memory::kv_rows_from<Element, false>(p, b, g0, kv_off);
    const auto v_rows = memory::kv_rows_from<Element, true>(p, b, g0, kv_off);
    const int n_blocks = key_end > key_begin ? ceil_div(key_end - key_begin, Tr::kBlockN) : 0;
    // Block j into stage j % kStages; keys past the split's end are zero-filled (P == 0
    // times stale shared memory could be NaN).
    const auto load_kv = [&](int j) {
        const int key0 = key_begin + j * Tr::kBlockN;
        const uint32_t stage = static_cast<uint32_t>(j % Tr::kStages);
        Tr::LoaderK::template load_keys<true, memory::PagedCopies::kUnrolled>(smem_k + stage * Tr::kSmemK, p, k_rows, key0,
                                                                              key_end - key0, tid, heads);
        Tr::LoaderV::template load_keys<true, memory::PagedCopies::kUnrolled>(smem_v + stage * Tr::kSmemV, p, v_rows, key0,
                                                                              key_end - key0, tid, heads);
    };
#pragma unroll
    for (int j = 0; j < Tr::kStages - 1; ++j) {
        if (j < n_blocks) load_kv(j);
        memory::cp_async_commit();  // group j (Q rides in group 0); empty groups keep the count
    }

    memory::LdsmAddr<typename Tr::LayoutQ> q_addr;
    memory::LdsmAddr<typename Tr::LayoutK> k_addr;
    memory::LdsmAddr<typename Tr::LayoutV> v_addr;
    q_addr.init(smem_q, mma::lane_row_a(lane), mma::lane_chunk_a(lane));
    k_addr.init(smem_k, warp * Tr::kWarpKeys + mma::lane_row_b(lane), mma::lane_chunk_b(lane));
    v_addr.init(smem_v, warp * Tr::kWarpKeys + mma::lane_row_a(lane), mma::lane_chunk_a(lane));

    // Keys [lo[h], limit[h]) are visible to this lane's rows lane/4 + 8h of every head slot,
    // clipped to the split (a slot past `heads` has zero Q, K and V; its rows are not written).
    // ALiBi: each row's slope (raw-score units) and key position (rows pack several heads).
    // Bias and custom mask: each row's entries (nullptr past `rows`).
    int lo[2], limit[2], key_pos[2];
    float alibi[H][2];
    const Element* bias_rows[H][2] = {};
    const uint32_t* mask_rows[2] = {nullptr, nullptr};
    {
        const auto mrows = mask::Rows<kMask>::make(p, q_len, kv_len);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + lane / 4 + 8 * h;
            const int pos = row / shape.group;  // the row's query position
            limit[h] = row < rows ? min_int(key_end, mrows.end(pos)) : 0;
            lo[h] = row < rows ? mrows.begin(pos) : 0;
            key_pos[h] = pos + mrows.shift;
#pragma unroll
            for (int hs = 0; hs < H; ++hs) {
                const bool valid = row < rows && hs < heads;
                const int head = (g0 + hs) * shape.group + row % shape.group;  // the row's query head
                alibi[hs][h] = kMod == softmax::ScoreMod::kAlibi && valid
                                   ? __fdividef(p.alibi_slopes[head], p.scale_bmm1)
                                   : 0.f;
                if (kMod == softmax::ScoreMod::kBias && valid) bias_rows[hs][h] = softmax::bias_row<Element>(p, b, head, pos);
            }
            if (kMod == softmax::ScoreMod::kCustomMask && row < rows) mask_rows[h] = softmax::custom_mask_row(p, b, pos);
        }
    }
    const int col0 = key_begin + warp * Tr::kWarpKeys + 2 * (lane % 4);  // this lane's first key, block 0

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

    for (int j = 0; j < n_blocks; ++j) {
        memory::cp_async_wait<Tr::kStages - 2>();
        __syncthreads();  // block j landed; every warp is done with block j - 1's stage
        if (j + Tr::kStages - 1 < n_blocks) load_kv(j + Tr::kStages - 1);
        memory::cp_async_commit();
        const uint32_t stage = static_cast<uint32_t>(j % Tr::kStages);

        // S per head slot: its Q tile against its head's K (m-tiles apart: no product
        // mixes two heads, so one head's non-finite K leaves the other's rows alone).
        float acc_s[H][Tr::kNTilesS][4];
#pragma unroll
        for (int hs = 0; hs < H; ++hs) {
#pragma unroll
            for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[hs][ni][e] = 0.f;
            }
            memory::LdsmAddr<typename Tr::LayoutQ> qa = q_addr;
            qa.base += hs * Tr::LayoutQ::kBytes;
            memory::LdsmAddr<typename Tr::LayoutK> ka = k_addr;
            ka.base += stage * Tr::kSmemK + hs * Tr::LayoutK::kBytes;
            mma::gemm_qk<Element, 1, Tr::kNTilesS, Tr::kKSlices>(one_tile(acc_s[hs]), qa, ka);
        }
        const int key0 = col0 + j * Tr::kBlockN;
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
            softmax::apply_bias<Element>(acc_s, [&](int hs, int h) { return bias_rows[hs][h]; }, key0, kv_len,
                                         __frcp_rn(p.scale_bmm1));
        }
        if constexpr (kMod == softmax::ScoreMod::kCustomMask) {
            softmax::apply_custom_mask(acc_s, [&](int, int h) { return mask_rows[h]; }, key0, kv_len);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int key = key0 + ni * 8 + e;
                    if (key >= limit[h] || (kMask == mask::Kind::kLocal && key < lo[h])) {
#pragma unroll
                        for (int hs = 0; hs < H; ++hs) acc_s[hs][ni][2 * h + e] = -INFINITY;
                    }
                }
            }
        }
        softmax.template update<true, Tr::kSkipRescale>(acc_s, acc_o, scale_log2);
        uint32_t p_frag[H][Tr::kNTilesS / 2][4];
        mma::s_to_p<Element>(p_frag, acc_s);
#pragma unroll
        for (int hs = 0; hs < H; ++hs) {
            memory::LdsmAddr<typename Tr::LayoutV> va = v_addr;
            va.base += stage * Tr::kSmemV + hs * Tr::LayoutV::kBytes;
            mma::gemm_pv<Element, false>(one_tile(acc_o[hs]), one_tile(p_frag[hs]), va);
        }
    }

    // Merge the warps' key ranges through shared memory (the ring is free once every
    // warp is past its last block).
    memory::cp_async_wait<0>();
    __syncthreads();
    constexpr int kPitch = Tr::kMergePitch;
    constexpr int HR = H * R;  // rows of the CTA: head slot hs, row r at hs * R + r
    float* red_o = reinterpret_cast<float*>(smem);              // [kWarps][HR][kPitch]
    float* red_ml = red_o + Tr::kWarps * HR * kPitch;           // [kWarps][HR][2]
#pragma unroll
    for (int hs = 0; hs < H; ++hs) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = hs * R + lane / 4 + 8 * h;
            float* dst = red_o + (warp * HR + r) * kPitch + 2 * (lane % 4);
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
                *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(acc_o[hs][nt][2 * h], acc_o[hs][nt][2 * h + 1]);
            }
            const float l = softmax::quad_sum(softmax.row_sum[hs][h]);
            if (lane % 4 == 0) {
                red_ml[2 * (warp * HR + r)] = softmax.row_max[hs][h];
                red_ml[2 * (warp * HR + r) + 1] = l;
            }
        }
    }
    __syncthreads();

    constexpr int kChunksV = Tr::kHeadDimV / kElemsPerChunk;
    const float out_scale = p.scale_softmax * p.scale_bmm2;
    const int item0 = b * p.h_kv + g0;  // slot hs is item item0 + hs (< 2^31: the launch checks)
    float* ws_o = partials<Tr>(p, shape);
    const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * R;
    float* ws_ml = ws_o + item_rows * splits * Tr::kHeadDimV;
    float* part_o = reinterpret_cast<float*>(smem + Tr::kSmemMerge);  // [HR][dv], clustered
    float* part_ml = part_o + HR * Tr::kHeadDimV;                      // [HR][2]
    for (int i = tid; i < HR * kChunksV; i += Tr::kThreads) {
        const int hr = i / kChunksV;
        const int c = i % kChunksV;
        const int hs = hr / R;
        const int row = row0 + hr % R;
        if (row >= rows || hs >= heads) continue;
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
            const int head = (g0 + hs) * shape.group + row % shape.group;
            l_all += softmax::sink_term(p, head, m_all);
            const float inv = l_all > 0.f ? out_scale / l_all : 0.f;
            uint32_t packed[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) packed[k] = ElementTraits<Element>::pack(acc[2 * k] * inv, acc[2 * k + 1] * inv);
            const int pos = row / shape.group;
            if (c == 0) softmax::store_lse(p, b, head, pos, m_all, l_all);
            Element* dst = static_cast<Element*>(p.o) + int64_t(q_off + pos) * p.o_row_stride +
                           int64_t(head) * p.o_head_stride + c * kElemsPerChunk;
            *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        } else if (clustered) {  // into this CTA's shared memory, read by the cluster's merge
            float4* dst = reinterpret_cast<float4*>(part_o + hr * Tr::kHeadDimV + c * kElemsPerChunk);
            dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            if (c == 0) reinterpret_cast<float2*>(part_ml)[hr] = make_float2(m_all, l_all);
        } else {
            const int64_t slot = (int64_t(item0 + hs) * shape.row_tiles * R + row) * splits + split;
            float4* dst = reinterpret_cast<float4*>(ws_o + slot * Tr::kHeadDimV + c * kElemsPerChunk);
            dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            if (c == 0) {
                ws_ml[2 * slot] = m_all;
                ws_ml[2 * slot + 1] = l_all;
            }
        }
    }
    if (splits == 1 || !Tr::kFusedMerge) return;

    if (clustered) {  // every CTA merges a share of the (row, chunk)s from the cluster's partials
        memory::cluster_sync();  // every split's partials are in its shared memory
        const int live = max_int(1, live_splits(shape, keys));
        const uint32_t o_base = smem_u32(part_o), ml_base = smem_u32(part_ml);
        for (int i = split + splits * tid; i < HR * kChunksV; i += splits * Tr::kThreads) {
            const int hr = i / kChunksV;
            const int c = i % kChunksV;
            const int hs = hr / R;
            const int row = row0 + hr % R;
            if (row >= rows || hs >= heads) continue;
            const ClusterPartials part{o_base + (hr * Tr::kHeadDimV + c * kElemsPerChunk) * 4u, ml_base + hr * 8u};
            merge_chunk<Tr>(p, shape, item0 + hs, row, c, live, q_off, part);
        }
        // No CTA leaves while another reads its shared memory; each has used the values it
        // read, so the barrier orders nothing else (its O stores need not be out first).
        memory::cluster_sync_relaxed();
        return;
    }

    // The tile's last split to arrive merges all of them (no combine launch): partials
    // published (fence), then one arrival per CTA on the tile's counter.
    __shared__ int last;
    __threadfence();
    __syncthreads();
    // CTAs of this tile that write, from the key range (a load here would wait on L2 at
    // the tile's end) (split 0 of a sequence without keys writes its empty rows: at least one)
    const int live = max_int(1, live_splits(shape, keys));
    if (tid == 0) {  // the tile's counter: its first head's
        int* counter = static_cast<int*>(p.workspace) + int64_t(item0) * shape.row_tiles + row_tile;
        last = atomicAdd(counter, 1) == live - 1;
        if (last) *counter = 0;  // every other arrival is in: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other CTAs' partials, read through L2 (__ldcg)
    for (int i = tid; i < HR * kChunksV; i += Tr::kThreads) {
        const int hs = i / kChunksV / R;
        const int row = row0 + i / kChunksV % R;
        if (row < rows && hs < heads) combine_chunk<Tr>(p, shape, splits, item0 + hs, row, i % kChunksV, live, q_off);
    }
}

template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
const void* mma_fn() {
    return reinterpret_cast<const void*>(&decode_mma_kernel<Tr, kMask, kMod>);
}

// The mma path's per-process setup, once per instantiation: shared memory beyond 48 KB
// for the mask x score modifier variants and the resident CTAs per SM that choose_splits_mma
// fills (at kSoloSmemBytes).
struct MmaSetup {
    cudaError_t err;
    int ctas_per_sm;
    int paired_ctas_per_sm;  // at kSmemBytes
    // Clusters of n CTAs resident at once, solo ([0]: kSoloSmemBytes) and paired ([1]:
    // kSmemBytes); all 0 where the kernel's code has no clusters (before SM90).
    int clusters[2][kernel::kMaxCluster + 1];
    bool sm90;  // the kernel's code is SM90's: programmatic dependent launch is real

    // CTAs resident at once on `sms` SMs, paired (kSmemBytes) or solo (kSoloSmemBytes).
    int64_t resident(int sms, bool paired) const {
        return wave_slots(sms, paired ? paired_ctas_per_sm : ctas_per_sm);
    }
};

template <class Tr>
const MmaSetup& mma_setup() {
    static const MmaSetup setup = [] {
        MmaSetup s{cudaSuccess, 1, 1, {}, false};
        const void* padding = mma_fn<Tr, mask::Kind::kPadding, softmax::ScoreMod::kNone>();
        s.sm90 = kernel::compiled_for_sm90(padding);
        const bool clusters = Tr::kFusedMerge && s.sm90;
        kernel::for_each_variant([&](auto kind, auto mod) {
            const void* fn = mma_fn<Tr, decltype(kind)::value, decltype(mod)::value>();
            if (s.err == cudaSuccess && Tr::kSoloSmemBytes > 48 * 1024)
                s.err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSoloSmemBytes);
            if (s.err == cudaSuccess)
                s.err = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared);
        });
        if (s.err == cudaSuccess)
            s.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.ctas_per_sm, padding, Tr::kThreads, Tr::kSoloSmemBytes);
        if (s.err == cudaSuccess)
            s.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.paired_ctas_per_sm, padding, Tr::kThreads,
                                                                  Tr::kSmemBytes);
        s.ctas_per_sm = std::max(s.ctas_per_sm, 1);
        s.paired_ctas_per_sm = std::max(s.paired_ctas_per_sm, 1);
        for (int n = 2; clusters && s.err == cudaSuccess && n <= kernel::kMaxCluster; ++n) {
            s.clusters[0][n] = kernel::max_active_clusters(padding, Tr::kThreads, Tr::kSoloSmemBytes, n);
            s.clusters[1][n] = kernel::max_active_clusters(padding, Tr::kThreads, Tr::kSmemBytes, n);
        }
        return s;
    }();
    return setup;
}

// Mma path with fused merging: whether the launch groups each tile's splits into one
// cluster (SM90), which merges them through distributed shared memory: no partials through
// L2, no fence, no arrival counter (a split CTA took 3.7 us from its last key to leaving
// the SM that way; bench/NOTES.md §29, §31). Only for a launch of one wave whose clusters
// the device holds all at once (a GPC holds a cluster whole; beyond one wave a cluster would
// wait for SMs of one GPC to free together: not measured), and splits short enough for the
// merge to count (kMmaClusterMaxKeys).
template <class Tr>
inline bool cluster_splits(const Params& p, const MmaSetup& setup, int splits, bool paired, int sms) {
    if (!Tr::kFusedMerge || splits < 2 || splits > kernel::kMaxCluster) return false;
    const Shape shape = make_shape<Tr>(p, splits);
    if (shape.keys_per_split > kMmaClusterMaxKeys) return false;
    return shape.units <= setup.resident(sms, paired) &&
           int64_t(setup.clusters[paired ? 1 : 0][splits]) * splits >= shape.units;
}

// Mma path: where a wave's splits cannot merge in clusters (more than a cluster holds, or
// the clusters do not fit), the most splits below that count, down to half of it, that can,
// of at most kMmaFallbackMaxKeys keys each. b = 1 at 4k: 8 splits of 512 keys merged in
// clusters of 8 (64 CTAs) ran 14-17 % faster than 16 merged through L2 (128 CTAs) on the
// H100, 5 % on the H200. At 16k (2048 keys) the H100 gained 5 % and the H200 lost 7 %: half
// the CTAs cannot draw its bandwidth (bench/NOTES.md §31). Fewer than half: not measured.
template <class Tr>
inline int cluster_fallback(const Params& p, const MmaSetup& setup, int splits, int sms) {
    if constexpr (Tr::kFusedMerge) {  // (else no clusters; a plain `if` leaves the loop unreachable: a warning)
        if (splits < 2 || cluster_splits<Tr>(p, setup, splits, false, sms)) return splits;
        for (int s = std::min(splits - 1, kernel::kMaxCluster); s >= std::max(2, (splits + 1) / 2); --s) {
            if (make_shape<Tr>(p, s).keys_per_split > kMmaFallbackMaxKeys) break;  // fewer splits: longer
            if (cluster_splits<Tr>(p, setup, s, false, sms)) return s;
        }
    }
    return splits;
}

// Resident CTAs per SM of the warp path's persistent kernel (decode_short_kernel), once.
template <class Tr, int kPasses>
cudaError_t short_ctas_per_sm(int* ctas) {
    static int cached = 0;
    static cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &cached, &decode_short_kernel<Tr, mask::Kind::kPadding, kPasses>, Tr::kThreads, 0);
    *ctas = std::max(cached, 1);
    return err;
}

// The persistent one-step launch for kPasses passes of keys.
template <class Tr, int kPasses>
cudaError_t launch_short(const Params& p, const Shape& shape, cudaStream_t stream) {
    int sms = 0, ctas_per_sm = 0;
    cudaError_t err = kernel::sm_count(p, &sms);
    if (err == cudaSuccess) err = short_ctas_per_sm<Tr, kPasses>(&ctas_per_sm);
    if (err != cudaSuccess) return err;
    const int64_t units_per_cta = int64_t(Tr::kWarps) * Tr::kKeysPerPass;  // a unit per lane group
    const int64_t blocks = std::min<int64_t>((shape.units + units_per_cta - 1) / units_per_cta, int64_t(sms) * ctas_per_sm);
    const UnitDivs dv = unit_divs(p, shape);
    kernel::with_variant(
        p,
        [&](auto kind, auto mod) {
            decode_short_kernel<Tr, decltype(kind)::value, kPasses, decltype(mod)::value>
                <<<static_cast<unsigned>(blocks), Tr::kThreads, 0, stream>>>(p, dv);
            return 0;
        },
        0);
    return cudaSuccess;
}

// Mma path: whether the launch is a dependent one (kernel::launch_dependent; SM90 code).
// Every CTA allows the grid behind at its start, so the next grid's CTAs take the slots this
// one frees and wait there: its launch and start overlap this grid's drain. Two cases:
// - more than one wave of resident CTAs: once the last wave has started (H200, b = 64 at
//   4k: -0.9 %; b = 128 at 4k, 64 at 2k and 16k: -0.4, -1.0, -0.1 %; bench/NOTES.md §33);
// - one wave of whole units (no split, `whole`) two to an SM (`paired`) with at most a
//   sixteenth of its slots free: d = 64, b = 62-66 and d = 128, b = 31-33 at 1k-4k, 0-3.6 %
//   faster on the H200 and the H100 (§36). One CTA an SM (d = 256, b = 16: 128 CTAs on 132
//   slots) ran 0.9-1.7 % slower with it. With more free slots the next grid's first CTAs
//   take them from the start and its later ones land two to an SM where a fresh launch
//   spreads them (b = 56 and 60 at 4k, 224 and 240 CTAs on 264 slots: 1-7 % slower; b = 20
//   and 24: 13-35 %). A split launch stays plain: its last CTAs merge the tile, and b = 8 at
//   64k ran 0.8-1.7 % slower with the next grid's CTAs waiting beside them (H200, §36).
inline bool depend_on_previous(int64_t ctas, int64_t resident, bool sm90, bool whole, bool paired) {
    return sm90 && (ctas > resident || (whole && paired && 16 * ctas >= 15 * resident));
}

// How a launch runs this problem on this device: the key splits of either path within
// workspace_bytes and, on the mma path, whether two CTAs share an SM (pair_up), whether a
// tile's splits form a cluster (cluster_splits) and whether the launch overlaps the grid
// ahead (depend_on_previous), decided once from one SM count and setup.
struct LaunchPlan {
    int splits = 1;
    bool paired = false;
    bool clustered = false;
    bool dependent = false;
};

template <class Tr>
inline cudaError_t plan_launch(const Params& p, size_t workspace_bytes, LaunchPlan* plan) {
    int sms = 0;
    cudaError_t err = kernel::sm_count(p, &sms);
    if (err != cudaSuccess) return err;
    if constexpr (Tr::kMma) {
        const MmaSetup& setup = mma_setup<Tr>();
        if (setup.err != cudaSuccess) return setup.err;
        plan->splits =
            cluster_fallback<Tr>(p, setup, choose_splits_mma<Tr>(p, sms, setup.ctas_per_sm, workspace_bytes), sms);
        plan->paired = pair_up<Tr>(p, plan->splits, sms, setup.ctas_per_sm);
        plan->clustered = cluster_splits<Tr>(p, setup, plan->splits, plan->paired, sms);
        plan->dependent = !plan->clustered && depend_on_previous(make_shape<Tr>(p, plan->splits).units,
                                                                 setup.resident(sms, plan->paired), setup.sm90,
                                                                 plan->splits == 1, plan->paired);
    } else {
        plan->splits = choose_splits_warp<Tr>(p, sms, workspace_bytes);
    }
    return cudaSuccess;
}

// Warp path: merges the splits of every query row, one thread per (row, 8 columns).
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
    if (row >= shape.group * p.q_lens[b]) return;
    combine_chunk<Tr>(p, shape, splits, item, row, chunk, live_splits(p, shape, b), p.q_offsets[b]);  // 0: zero rows
}

// The __global__ for a mask, as the registry's EntryFn returns it.
template <class Tr>
const void* entry(MaskType m) {
    return kernel::with_mask(
        m,
        [](auto kind) {
            constexpr mask::Kind kMask = decltype(kind)::value;
            if constexpr (Tr::kMma) return reinterpret_cast<const void*>(&decode_mma_kernel<Tr, kMask>);
            else return reinterpret_cast<const void*>(&decode_kernel<Tr, kMask>);
        },
        static_cast<const void*>(nullptr));
}

// A tile traits type as a value, for with_sibling's callback.
template <class T>
struct TileTag {
    using type = T;
};

// Calls f(TileTag<X>{}) with the tile this problem runs on and returns what f returns: on
// the mma path with kHeads > 1, Tr::OneHead where one_head_fits, else at d = 64 Tr::Quad
// where quad_fits (on this device); otherwise, or when the device cannot say (the launch
// then reports it), Tr itself. launch() and workspace_bytes() both choose through it, so
// the workspace is sized for the tile that runs.
template <class Tr, class F>
auto with_sibling(const Params& p, F&& f) {
    if constexpr (Tr::kMma && Tr::kHeads > 1) {
        int sms = 0;
        const MmaSetup& one = mma_setup<typename Tr::OneHead>();
        const bool known = kernel::sm_count(p, &sms) == cudaSuccess && one.err == cudaSuccess;
        if (known && one_head_fits<Tr>(p, sms, one.ctas_per_sm)) return f(TileTag<typename Tr::OneHead>{});
        if constexpr (Tr::kHasQuad) {
            const MmaSetup& quad = mma_setup<typename Tr::Quad>();
            if (known && quad.err == cudaSuccess && quad_fits<Tr>(p, sms, one.ctas_per_sm, quad.ctas_per_sm)) {
                return f(TileTag<typename Tr::Quad>{});
            }
        }
    }
    return f(TileTag<Tr>{});
}

// workspace_bytes for the tile that runs (with_sibling chose it).
template <class Tr>
size_t tile_workspace_bytes(const Params& p) {
    LaunchPlan plan;
    if (plan_launch<Tr>(p, SIZE_MAX, &plan) != cudaSuccess) {  // the launch reports it
        cudaGetLastError();
        return 0;
    }
    return plan.splits > 1 ? partial_bytes<Tr>(p, plan.splits) : 0;
}

// The registry's WorkspaceFn: bytes of Params::workspace the launch uses for this problem
// at most (0 when it runs one split). Launch with less and it runs fewer splits.
template <class Tr>
size_t workspace_bytes(const Params& p) {
    return with_sibling<Tr>(p, [&](auto tile) { return tile_workspace_bytes<typename decltype(tile)::type>(p); });
}

// launch() for the tile that runs (with_sibling chose it; launch() checked the problem).
template <class Tr>
cudaError_t launch_tile(const Params& p, cudaStream_t stream) {
    LaunchPlan plan;
    const cudaError_t err = plan_launch<Tr>(p, p.workspace != nullptr ? p.workspace_bytes : 0, &plan);
    if (err != cudaSuccess) return err;
    const int splits = plan.splits;
    const Shape shape = make_shape<Tr>(p, splits);
    const int64_t combine_threads =
        int64_t(p.b) * p.h_kv * shape.row_tiles * Tr::kRows * (Tr::kHeadDimV / kElemsPerChunk);
    // 32-bit indices: the units (CTAs or warps) and the merge's rows x chunks.
    if (combine_threads > INT32_MAX || shape.units > INT32_MAX) return cudaErrorInvalidValue;
    if constexpr (Tr::kMma) {
        const auto blocks = static_cast<unsigned>(shape.units);
        const int smem = plan.paired ? Tr::kSmemBytes : Tr::kSoloSmemBytes;
        const cudaError_t e = kernel::with_variant(
            p,
            [&](auto kind, auto mod) {
                constexpr mask::Kind kKind = decltype(kind)::value;
                constexpr softmax::ScoreMod kMod = decltype(mod)::value;
                if (plan.clustered) {
                    return kernel::launch_clusters(&decode_mma_kernel<Tr, kKind, kMod>, blocks, Tr::kThreads, smem,
                                                   splits, stream, p, splits);
                }
                if (plan.dependent) {
                    return kernel::launch_dependent(&decode_mma_kernel<Tr, kKind, kMod>, blocks, Tr::kThreads, smem,
                                                    stream, p, splits);
                }
                decode_mma_kernel<Tr, kKind, kMod><<<blocks, Tr::kThreads, smem, stream>>>(p, splits);
                return cudaSuccess;
            },
            cudaSuccess);
        if (e != cudaSuccess) return e;
    } else if (splits == 1 && mask::key_span_max(p) <= 1) {  // one step per unit: persistent warps
        const cudaError_t e = launch_short<Tr, 1>(p, shape, stream);
        if (e != cudaSuccess) return e;
    } else if (splits == 1 && mask::key_span_max(p) <= 2) {
        const cudaError_t e = launch_short<Tr, 2>(p, shape, stream);
        if (e != cudaSuccess) return e;
    } else {
        const int64_t blocks = (shape.units + Tr::kWarps - 1) / Tr::kWarps;
        const UnitDivs dv = unit_divs(p, shape);
        kernel::with_variant(
            p,
            [&](auto kind, auto mod) {
                decode_kernel<Tr, decltype(kind)::value, decltype(mod)::value>
                    <<<static_cast<unsigned>(blocks), Tr::kThreads, 0, stream>>>(p, splits, dv);
                return 0;
            },
            0);
    }
    if (splits > 1 && !Tr::kFusedMerge) {  // else the last CTA per tile merged them
        combine_kernel<Tr><<<static_cast<unsigned>((combine_threads + 255) / 256), 256, 0, stream>>>(p, splits);
    }
    return cudaGetLastError();
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit this
// instantiation (d, dv, b, h, h_kv, alignment and strides as the other families; s_q_max
// <= kMaxSq; warp path: rows per KV head <= kRows unless kRows is 8, the tiled case; under
// 2^31 units and query rows x 16-byte chunks, the 32-bit indices).
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV)) return cudaErrorInvalidValue;
    if (p.s_q_max > kMaxSq) return cudaErrorInvalidValue;
    if (!Tr::kMma && (p.h / p.h_kv) * p.s_q_max > Tr::kRows && Tr::kRows != 8) return cudaErrorInvalidValue;
    if (entry<Tr>(p.mask) == nullptr) return cudaErrorInvalidValue;  // a mask the family does not implement
    return with_sibling<Tr>(p, [&](auto tile) { return launch_tile<typename decltype(tile)::type>(p, stream); });
}

}  // namespace decode
}  // namespace fmha
