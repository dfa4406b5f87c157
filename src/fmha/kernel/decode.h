// The "decode" family: attention for a few query rows per sequence (s_q <= kMaxSq) against a
// KV cache of any length, at the memory-bandwidth limit. Portable (SM80 and newer): CUDA-core
// FMAs on 16-byte loads, no tensor cores; decode moves bytes, it does not multiply matrices.
//
// Work unit = one warp = (sequence b, KV head g, row tile, key split):
//   rows:  every query row that reads KV head g: the G = h / h_kv query heads sharing it times
//          the sequence's q_len positions (row r: head g*G + r % G, position r / G), kRows per
//          row tile, so K and V are read once per KV head (GQA/MQA packing);
//   keys:  [split * keys_per_split, ...) of the sequence (flash-decoding). The split count
//          comes from the problem and the SM count (choose_splits), so a long cache is spread
//          over the whole GPU and a tiny one (s_kv = 2) gets one split: then every warp is an
//          independent (b, g) item and a CTA holds kWarps of them, nothing shared.
// Inside a warp, kLanesPerKey = d / 8 lanes hold one key row as 16-byte chunks (8 elements
// each); the warp covers kKeysPerPass keys per pass and kUnroll passes per step (kBlockN keys,
// all loads of a step issued before any use). Q K^T is a dot product per lane reduced over
// the key's lanes with shuffles; each key group keeps its own online softmax (m, l, O slice),
// and the groups are merged with shuffles at the end.
// Numerics match the tensor-core families and the reference: scores in fp32 scaled by
// scale_bmm1 * log2(e), running max rounded up to an integer, P = exp2(score - max) summed
// unrounded and rounded to the input type before it multiplies V.
// One split writes O directly; several write fp32 partials (O unnormalised, max, sum) to
// Params::workspace and combine_kernel merges them (LSE-weighted).
//
// What an instantiation supports (static_asserted in Traits; launch checks the rest):
//   Element        __half or __nv_bfloat16, fp32 accumulation (kAccFp16 == false)
//   kHeadDim       32, 64, 128 or 256 (d / 8 lanes per key must divide a warp), dv == d
//   kBlockM        kRows, query rows per warp unit: 1, 4 or 8
//   kBlockN        keys per warp step: a multiple of 256 / d
//   kWarpsM        warps per CTA (independent units), kWarpsN 1
//   run time       s_q <= kMaxSq; padding and causal (bottom-right) masks; var-len q and kv
//                  lengths; GQA/MQA; every layout (strides multiples of 8 elements)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "fmha/kernel/launch_checks.h"
#include "fmha/mask/mask.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

constexpr int kMaxSq = 16;            // query rows per sequence the family serves
constexpr int kMaxSplits = 128;       // key splits per unit at most
constexpr int kMinKeysPerSplit = 128; // fewer keys per warp do not pay for the partial write

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_,
          int kWarpsN_, bool kAccFp16_>
struct Traits {
    using Element = Element_;
    static constexpr bool kBf16 = ElementTraits<Element>::kIsBf16;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kRows = kBlockM_;
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

// Rows of one (b, g) item and the unit grid, the same on host and device.
struct Shape {
    int group;      // query heads per KV head, G
    int rows_max;   // G * s_q_max
    int row_tiles;  // ceil(rows_max / kRows)
    int splits;     // key splits
    int keys_per_split;
    int64_t units;  // b * h_kv * row_tiles * splits
};

template <class Tr>
FMHA_HOST_DEVICE Shape make_shape(const Params& p, int splits) {
    Shape s;
    s.group = p.h / p.h_kv;
    s.rows_max = s.group * p.s_q_max;
    s.row_tiles = ceil_div(s.rows_max, Tr::kRows);
    s.splits = splits;
    s.keys_per_split = round_up(ceil_div(max_int(p.s_kv_max, 1), splits), Tr::kBlockN);
    s.units = int64_t(p.b) * p.h_kv * s.row_tiles * splits;
    return s;
}

// fp32 partials of a split: [item_row][split][dv] for O, [item_row][split][2] for (max, sum),
// item_row = (b * h_kv + g) * row_tiles * kRows + row.
template <class Tr>
inline size_t partial_bytes(const Params& p, int splits) {
    const Shape s = make_shape<Tr>(p, splits);
    const size_t item_rows = size_t(p.b) * p.h_kv * s.row_tiles * Tr::kRows;
    return item_rows * splits * (size_t(Tr::kHeadDimV) + 2) * sizeof(float);
}

// Enough warps for the memory system (about 64 per SM in flight), and no split shorter than
// kMinKeysPerSplit keys; at most what `workspace_bytes` holds (0: one split).
template <class Tr>
inline int choose_splits(const Params& p, int num_sms, size_t workspace_bytes) {
    const Shape one = make_shape<Tr>(p, 1);
    const int64_t target = int64_t(std::max(num_sms, 1)) * 64;
    int splits = static_cast<int>(std::min<int64_t>(kMaxSplits, (target + one.units - 1) / one.units));
    splits = std::min(splits, std::max(1, p.s_kv_max / kMinKeysPerSplit));
    while (splits > 1 && partial_bytes<Tr>(p, splits) > workspace_bytes) --splits;
    return std::max(splits, 1);
}

FMHA_DEVICE void load_chunk(float (&x)[kElemsPerChunk], const void* src, bool valid, bool bf16) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (valid) raw = __ldg(static_cast<const uint4*>(src));
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

template <class Tr, bool kCausal>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) decode_kernel(const __grid_constant__ Params p, int splits) {
    using Element = typename Tr::Element;
    constexpr int R = Tr::kRows;
    constexpr int LK = Tr::kLanesPerKey;
    const Shape shape = make_shape<Tr>(p, splits);
    const int lane = threadIdx.x % kWarpSize;
    const int64_t unit = int64_t(blockIdx.x) * Tr::kWarps + threadIdx.x / kWarpSize;
    if (unit >= shape.units) return;
    const int split = static_cast<int>(unit % splits);
    const int64_t item_tile = unit / splits;
    const int row_tile = static_cast<int>(item_tile % shape.row_tiles);
    const int64_t item = item_tile / shape.row_tiles;
    const int g = static_cast<int>(item % p.h_kv);
    const int b = static_cast<int>(item / p.h_kv);

    const int q_len = p.q_lens[b];
    const int kv_len = p.kv_lens[b];
    const int rows = shape.group * q_len;
    const int row0 = row_tile * R;
    if (row0 >= rows) return;  // the tile is past this sequence's rows
    const int key_begin = split * shape.keys_per_split;
    const int key_end = min_int(kv_len, key_begin + shape.keys_per_split);
    // A split past the sequence's keys writes nothing; the combine reads only live splits.
    // (With one split the unit always runs: a sequence without keys gets zero rows.)
    if (splits > 1 && key_begin >= kv_len) return;

    const int sub = lane % LK;  // this lane's 16-byte chunk of a row
    const int grp = lane / LK;  // the key of a pass this lane works on
    const int q_off = p.q_offsets[b];
    const int kv_off = p.kv_offsets[b];

    // Q rows (scaled into log2 units), this lane's chunk; rows past `rows` stay zero.
    const float scale_log2 = p.scale_bmm1 * kLog2e;
    float q[R][kElemsPerChunk];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int row = row0 + r;
        const bool valid = row < rows;
        const int head = g * shape.group + (valid ? row % shape.group : 0);
        const int pos = valid ? row / shape.group : 0;
        const Element* src = static_cast<const Element*>(p.q) + int64_t(q_off + pos) * p.q_row_stride +
                             int64_t(head) * p.q_head_stride + sub * kElemsPerChunk;
        load_chunk(q[r], src, valid, Tr::kBf16);
#pragma unroll
        for (int e = 0; e < kElemsPerChunk; ++e) q[r][e] *= scale_log2;
    }
    // Keys visible to row r: [0, limit) (padding: kv_len; causal: bottom-right aligned).
    const auto key_limit = [&](int r) {
        const int row = row0 + r;
        return row < rows ? mask::key_limit<kCausal>(row / shape.group, kv_len, q_len) : 0;
    };

    float m[R], l[R], o[R][kElemsPerChunk];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int e = 0; e < kElemsPerChunk; ++e) o[r][e] = 0.f;
    }

    const Element* k_base = static_cast<const Element*>(p.k) + int64_t(g) * p.k_head_stride + sub * kElemsPerChunk;
    const Element* v_base = static_cast<const Element*>(p.v) + int64_t(g) * p.v_head_stride + sub * kElemsPerChunk;
    for (int k0 = key_begin; k0 < key_end; k0 += Tr::kBlockN) {
        // Every load of the step first, then the math.
        float kx[Tr::kUnroll][kElemsPerChunk], vx[Tr::kUnroll][kElemsPerChunk];
#pragma unroll
        for (int u = 0; u < Tr::kUnroll; ++u) {
            const int key = k0 + u * Tr::kKeysPerPass + grp;
            const bool valid = key < key_end;
            const int64_t row = kv_off + (valid ? key : 0);
            load_chunk(kx[u], k_base + row * p.k_row_stride, valid, Tr::kBf16);
            load_chunk(vx[u], v_base + row * p.v_row_stride, valid, Tr::kBf16);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int limit = min_int(key_end, key_limit(r));
            float s[Tr::kUnroll];
            float step_max = -INFINITY;
#pragma unroll
            for (int u = 0; u < Tr::kUnroll; ++u) {
                float dot = 0.f;
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) dot = fmaf(q[r][e], kx[u][e], dot);
#pragma unroll
                for (int off = LK / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
                const int key = k0 + u * Tr::kKeysPerPass + grp;
                s[u] = key < limit ? dot : -INFINITY;
                step_max = fmaxf(step_max, s[u]);
            }
            const float m_new = fmaxf(m[r], ceilf(step_max));
            if (m_new == -INFINITY) continue;  // nothing visible yet: state unchanged
            const float alpha = exp2f(m[r] - m_new);  // exp2(-inf) == 0 on the first visible step
            l[r] *= alpha;
#pragma unroll
            for (int e = 0; e < kElemsPerChunk; ++e) o[r][e] *= alpha;
#pragma unroll
            for (int u = 0; u < Tr::kUnroll; ++u) {
                const float prob = exp2f(s[u] - m_new);
                l[r] += prob;
                const float pr = round_to_element<Element>(prob);
#pragma unroll
                for (int e = 0; e < kElemsPerChunk; ++e) o[r][e] = fmaf(pr, vx[u][e], o[r][e]);
            }
            m[r] = m_new;
        }
    }

    // Merge the key groups of the warp: lanes with the same chunk, different keys.
#pragma unroll
    for (int off = LK; off < kWarpSize; off *= 2) {
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
    if (grp != 0) return;

    if (splits == 1) {
        const float out_scale = p.scale_softmax * p.scale_bmm2;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = row0 + r;
            if (row >= rows) continue;
            const int head = g * shape.group + row % shape.group;
            const int pos = row / shape.group;
            const float inv = l[r] > 0.f ? out_scale / l[r] : 0.f;
            uint32_t packed[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                packed[i] = ElementTraits<Element>::pack(o[r][2 * i] * inv, o[r][2 * i + 1] * inv);
            }
            Element* dst = static_cast<Element*>(p.o) + int64_t(q_off + pos) * p.o_row_stride +
                           int64_t(head) * p.o_head_stride + sub * kElemsPerChunk;
            *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
        return;
    }
    float* ws_o = static_cast<float*>(p.workspace);
    const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * R;
    float* ws_ml = ws_o + item_rows * splits * Tr::kHeadDimV;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int row = row0 + r;
        if (row >= rows) continue;
        const int64_t slot = (item * shape.row_tiles * R + row) * splits + split;
        float4* dst = reinterpret_cast<float4*>(ws_o + slot * Tr::kHeadDimV + sub * kElemsPerChunk);
        dst[0] = make_float4(o[r][0], o[r][1], o[r][2], o[r][3]);
        dst[1] = make_float4(o[r][4], o[r][5], o[r][6], o[r][7]);
        if (sub == 0) {
            ws_ml[2 * slot] = m[r];
            ws_ml[2 * slot + 1] = l[r];
        }
    }
}

// Merges the splits of every query row: one thread per (row, 8 columns).
template <class Tr>
__global__ void __launch_bounds__(256) combine_kernel(const __grid_constant__ Params p, int splits) {
    using Element = typename Tr::Element;
    constexpr int R = Tr::kRows;
    constexpr int kChunks = Tr::kHeadDimV / kElemsPerChunk;
    const Shape shape = make_shape<Tr>(p, splits);
    const int64_t item_rows = int64_t(p.b) * p.h_kv * shape.row_tiles * R;
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= item_rows * kChunks) return;
    const int chunk = static_cast<int>(t % kChunks);
    const int64_t item_row = t / kChunks;
    const int row = static_cast<int>(item_row % (int64_t(shape.row_tiles) * R));
    const int64_t item = item_row / (int64_t(shape.row_tiles) * R);
    const int g = static_cast<int>(item % p.h_kv);
    const int b = static_cast<int>(item / p.h_kv);
    const int q_len = p.q_lens[b];
    if (row >= shape.group * q_len) return;
    const int kv_len = p.kv_lens[b];
    const int live = kv_len > 0 ? ceil_div(kv_len, shape.keys_per_split) : 0;  // splits that ran

    const float* ws_o = static_cast<const float*>(p.workspace);
    const float* ws_ml = ws_o + item_rows * splits * Tr::kHeadDimV;
    float m_all = -INFINITY;
    for (int s = 0; s < live; ++s) m_all = fmaxf(m_all, ws_ml[2 * (item_row * splits + s)]);
    float l_all = 0.f, acc[kElemsPerChunk] = {};
    if (m_all != -INFINITY) {
        for (int s = 0; s < live; ++s) {
            const int64_t slot = item_row * splits + s;
            const float m_s = ws_ml[2 * slot];
            if (m_s == -INFINITY) continue;
            const float w = exp2f(m_s - m_all);
            l_all += ws_ml[2 * slot + 1] * w;
            const float4* src = reinterpret_cast<const float4*>(ws_o + slot * Tr::kHeadDimV + chunk * kElemsPerChunk);
            const float4 a = src[0], c = src[1];
            const float x[kElemsPerChunk] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
            for (int e = 0; e < kElemsPerChunk; ++e) acc[e] = fmaf(x[e], w, acc[e]);
        }
    }
    const float inv = l_all > 0.f ? p.scale_softmax * p.scale_bmm2 / l_all : 0.f;
    uint32_t packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) packed[i] = ElementTraits<Element>::pack(acc[2 * i] * inv, acc[2 * i + 1] * inv);
    const int head = g * shape.group + row % shape.group;
    const int pos = row / shape.group;
    Element* dst = static_cast<Element*>(p.o) + int64_t(p.q_offsets[b] + pos) * p.o_row_stride +
                   int64_t(head) * p.o_head_stride + chunk * kElemsPerChunk;
    *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// The __global__ for a mask, as the registry's EntryFn returns it.
template <class Tr>
const void* entry(MaskType m) {
    switch (m) {
        case MaskType::kPadding: return reinterpret_cast<const void*>(&decode_kernel<Tr, false>);
        case MaskType::kCausal: return reinterpret_cast<const void*>(&decode_kernel<Tr, true>);
    }
    return nullptr;
}

// The registry's WorkspaceFn: bytes of Params::workspace the launch uses for this problem
// at most (0 when it runs one split). Launch with less and it runs fewer splits.
template <class Tr>
size_t workspace_bytes(const Params& p) {
    int sms = 1;
    if (kernel::sm_count(p, &sms) != cudaSuccess) {  // the launch reports it; size for one SM
        cudaGetLastError();
        sms = 1;
    }
    const int splits = choose_splits<Tr>(p, sms, SIZE_MAX);
    return splits > 1 ? partial_bytes<Tr>(p, splits) : 0;
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit this
// instantiation (d, dv, b, h, h_kv, alignment and strides as the other families; s_q_max
// <= kMaxSq; rows per KV head <= kRows unless kRows is 8, the tiled case).
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV)) return cudaErrorInvalidValue;
    if (p.s_q_max > kMaxSq) return cudaErrorInvalidValue;
    if ((p.h / p.h_kv) * p.s_q_max > Tr::kRows && Tr::kRows != 8) return cudaErrorInvalidValue;
    if (p.mask != MaskType::kPadding && p.mask != MaskType::kCausal) return cudaErrorInvalidValue;
    int sms = 0;
    const cudaError_t err = kernel::sm_count(p, &sms);
    if (err != cudaSuccess) return err;
    const int splits = choose_splits<Tr>(p, sms, p.workspace != nullptr ? p.workspace_bytes : 0);
    const Shape shape = make_shape<Tr>(p, splits);
    const int64_t blocks = (shape.units + Tr::kWarps - 1) / Tr::kWarps;
    if (blocks > INT32_MAX) return cudaErrorInvalidValue;
    if (p.mask == MaskType::kCausal) {
        decode_kernel<Tr, true><<<static_cast<unsigned>(blocks), Tr::kThreads, 0, stream>>>(p, splits);
    } else {
        decode_kernel<Tr, false><<<static_cast<unsigned>(blocks), Tr::kThreads, 0, stream>>>(p, splits);
    }
    if (splits > 1) {
        const int64_t threads = int64_t(p.b) * p.h_kv * shape.row_tiles * Tr::kRows * (Tr::kHeadDimV / kElemsPerChunk);
        combine_kernel<Tr><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(p, splits);
    }
    return cudaGetLastError();
}

}  // namespace decode
}  // namespace fmha
