// One CTA per (query-row block, head, sequence). Each warp owns kRowsPerWarp query rows.
// Keys stream through shared memory kKeysPerTile at a time:
//   1. the K tile is staged as fp32; lane j computes the scores of key j for its rows,
//   2. online softmax per row: running max m, running sum l, rescale the accumulator,
//   3. the V tile replaces K in shared memory; each lane accumulates its own output
//      columns (lane, lane + 32, ...) over the tile's keys.
// Two roundings that every tensor-core kernel (and the unfused path, which stores P) makes
// too: the inputs are fp16/bf16, and the probabilities that multiply V are rounded to the
// input type (the row sum uses them unrounded). Without the second one, rows that average a
// handful of nearly cancelling values would fail bf16's relative check on the rounding of P
// alone. P is exp2(log2(e) * S - M) with M the running max rounded up to an integer:
// rounding commutes with powers of two, so the rounded P does not depend on which keys the
// running max had seen (nor on any kernel's tiling).
// The scores, the softmax and P are float64 (the products of two fp16/bf16 inputs are exact
// in fp32, their sums are not): a P that lies within fp32 noise of a rounding edge of the
// input type then rounds as the exact value does. In fp32 such a P rounded to the other side
// now and then, one input-type ulp off in a weight of P V, which on a row of two visible keys
// moved an output by 5 % (measured, bench/NOTES.md §10). The P V sums are fp32.
// A kernel computes P in fp32 and so cannot decide the rounding of a P that close to an
// edge either: with o_amb the reference also returns, per output element, how far such P
// could move it, sum over the row's keys of |round(P(1 + a)) - round(P(1 - a))| * |v| / l
// with a = kAmbiguity, well above fp32's noise in P; the check accepts a kernel's output
// anywhere in [o_ref - o_amb, o_ref + o_amb] before it applies epsilon (check.cpp). For e4m3
// a also covers the QGMMA's own error in S (mma::kQgmmaSumError times the sum of |q_c k_c|):
// one e4m3 P rounded the other way moved an output of a row with a few keys by 15-30 %.
// e4m3 also replays the kernels' order (run_reference's p_block_keys): their M is the exact
// running max of the key blocks visited so far, last block first, and a P is rounded on its
// own block's grid; a then also covers the S of the key that set M.
// The LSE is as inexact as the S it sums: lse_amb bounds how far the QGMMA's error moves it,
// kQgmmaSumError x |scale_bmm1| x sum_j P_j size_j / l (dLSE = sum_j P_j dS_j / l; size_j: key
// j's sum of |q_c k_c|), which check_lse adds to its tolerance (bench/NOTES.md §102).
#include "reference/reference.h"

#include "fmha/dropout.h"
#include "fmha/mma/fp8_sm90.h"
#include "fmha/seq_lens.h"
#include "reference/mask_rule.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <type_traits>

namespace fmha {
namespace {

constexpr double kLog2eD = 1.4426950408889634074;
constexpr double kLn2D = 0.6931471805599453094;
constexpr int kKeysPerTile = kWarpSize;  // one key per lane in the score step
constexpr int kRowsPerWarp = 4;          // query rows that share each K/V smem read
constexpr int kMaxWarps = 8;
constexpr int kVec = 4;                  // float4 reads of Q and K in shared memory
constexpr int kMaxColChunks = 16;        // output columns per lane: dv <= 16 * 32 = 512
// Relative distance from a rounding edge of the input type within which a kernel's fp32 P
// (dot-product order, exp2 approximations: ~1e-6 relative) may round either way.
constexpr double kAmbiguity = 1.0 / 65536;

// A float64 P rounded once, to nearest even, to the input type.
template <class T> __device__ inline float round_to(double x);
template <> __device__ inline float round_to<__half>(double x) { return __half2float(__double2half(x)); }
template <> __device__ inline float round_to<__nv_bfloat16>(double x) {
    return __bfloat162float(__double2bfloat16(x));
}
// e4m3 P at the scale 2^8 (P <= 1 here, against the running max), as the e4m3 kernels round
// it: their largest P is 2^8 (bench/NOTES.md §53, §56).
template <> __device__ inline float round_to<__nv_fp8_e4m3>(double x) {
    return static_cast<float>(__nv_fp8_e4m3(static_cast<float>(x * 256.0))) / 256.f;
}

template <class T> __device__ inline float load(const T* p);
template <> __device__ inline float load<__half>(const __half* p) { return __half2float(*p); }
template <> __device__ inline float load<__nv_bfloat16>(const __nv_bfloat16* p) {
    return __bfloat162float(*p);
}
template <> __device__ inline float load<__nv_fp8_e4m3>(const __nv_fp8_e4m3* p) { return static_cast<float>(*p); }

__device__ inline double warp_max(double x) {
    for (int o = kWarpSize / 2; o > 0; o /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ inline double warp_sum(double x) {
    for (int o = kWarpSize / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Shared-memory geometry, shared by the host (size) and the kernel (carving).
struct Smem {
    int rows;       // query rows per CTA
    int d_pad;      // d rounded up to kVec; Q and K columns past d are zero
    int k_stride;   // K tile row stride: a multiple of kVec with k_stride / kVec odd, so
                    // the float4 reads of 8 lanes (one quarter warp) hit distinct banks
    int kv_stride;  // floats per key row of the shared K/V tile
    __host__ __device__ size_t bytes() const {
        return sizeof(float) *
               (size_t(rows) * d_pad + size_t(kKeysPerTile) * kv_stride + 2 * size_t(rows) * kKeysPerTile);
    }
};

Smem make_smem(int warps, int d, int dv) {
    Smem s;
    s.rows = warps * kRowsPerWarp;
    s.d_pad = (d + kVec - 1) / kVec * kVec;
    s.k_stride = (s.d_pad / kVec) % 2 == 1 ? s.d_pad : s.d_pad + kVec;
    s.kv_stride = s.k_stride > dv ? s.k_stride : dv;
    return s;
}

// kColChunks: columns per lane, ceil(dv / 32) rounded up to a power of two. T: Q's (and the
// bias's) type, TKV: K and V's, TP: what P is rounded to (T, or f16 over an e4m3 cache under
// 16-bit queries: the decode kernels' P there, decode/kv_e4m3.h).
template <class T, class TKV, class TP, int kColChunks>
__global__ void __launch_bounds__(kMaxWarps * kWarpSize)
reference_kernel(Params p, Smem geo, int p_block_keys, float* o_ref, float* o_amb, float* lse, float* lse_amb) {
    constexpr bool kE4m3 = std::is_same<T, __nv_fp8_e4m3>::value;  // e4m3 Q too: the QGMMA kernels' rules
    const int seq = blockIdx.z, head = blockIdx.y;
    const int q_len = seq_q_len(p, seq), kv_len = seq_kv_len(p, seq);
    const int row0 = blockIdx.x * geo.rows;
    if (row0 >= q_len) return;  // whole CTA: no barrier is skipped by part of it

    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int kv_head = head / (p.h / p.h_kv);
    const int shift = kv_len - q_len;  // row r sits at key position r + shift

    // Keys any row of this CTA may see: [0, key_end) (the masks below never reach further
    // right than the last row's position + window).
    const int last_row = min(row0 + geo.rows, q_len) - 1;
    const int64_t reach = p.mask == MaskType::kPadding || p.mask == MaskType::kCustom ? kv_len
                          : p.mask == MaskType::kBidirectionalWindow ? int64_t(last_row) + shift + p.window
                                                                     : int64_t(last_row) + shift + 1;
    const int key_end = int(reach < kv_len ? reach : kv_len);

    const T* q = static_cast<const T*>(p.q) + int64_t(seq_q_offset(p, seq)) * p.q_row_stride +
                 int64_t(head) * p.q_head_stride;
    const TKV* k = static_cast<const TKV*>(p.k) + int64_t(seq_kv_offset(p, seq)) * p.k_row_stride +
                   int64_t(kv_head) * p.k_head_stride;
    const TKV* v = static_cast<const TKV*>(p.v) + int64_t(seq_kv_offset(p, seq)) * p.v_row_stride +
                   int64_t(kv_head) * p.v_head_stride;

    extern __shared__ float4 smem4[];
    float* q_s = reinterpret_cast<float*>(smem4);     // [rows, d_pad]
    float* kv_s = q_s + geo.rows * geo.d_pad;         // [kKeysPerTile, kv_stride]: K tile, then V tile
    float* p_s = kv_s + kKeysPerTile * geo.kv_stride; // [rows, kKeysPerTile] probabilities
    float* amb_s = p_s + geo.rows * kKeysPerTile;     // [rows, kKeysPerTile] their rounding ambiguity

    for (int r = warp; r < geo.rows; r += warps)
        for (int c = lane; c < geo.d_pad; c += kWarpSize)
            q_s[r * geo.d_pad + c] =
                (row0 + r < q_len && c < p.d) ? load(q + int64_t(row0 + r) * p.q_row_stride + c) : 0.f;

    const int my_row = warp * kRowsPerWarp;  // first of this warp's rows, CTA-local
    double m[kRowsPerWarp], l[kRowsPerWarp];
    double l_size[kRowsPerWarp];  // e4m3 with lse_amb: sum_j P_j size_j on l's scale
    // e4m3: the QGMMA's error in a raw S per unit of its |q_c k_c| sum, in scaled-score units
    // (made where it is used: held through the key loop it cost the kernels stack).
    const auto s_err = [&] { return mma::kQgmmaSumError * fabs(double(p.scale_bmm1)); };
    float acc[kRowsPerWarp][kColChunks], amb[kRowsPerWarp][kColChunks];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        m[i] = -INFINITY;
        l[i] = l_size[i] = 0.0;
#pragma unroll
        for (int c = 0; c < kColChunks; ++c) acc[i][c] = amb[i][c] = 0.f;
    }

    // The scores of keys [tile, tile + 32) against this warp's rows, lane j holding key
    // tile + j: log2 units, -inf where hidden. e4m3: size, the sum of the products'
    // magnitudes, bounds how far a QGMMA's S may be off.
    double score[kRowsPerWarp], size[kRowsPerWarp];
    const auto tile_scores = [&](int tile) {
        __syncthreads();  // the previous tile's K or V is consumed (and Q is staged)
        for (int j = warp; j < kKeysPerTile; j += warps)
            for (int c = lane; c < geo.d_pad; c += kWarpSize)
                kv_s[j * geo.k_stride + c] =
                    (tile + j < kv_len && c < p.d) ? load(k + int64_t(tile + j) * p.k_row_stride + c) : 0.f;
        __syncthreads();
        // (each product exact in fp32, the sum in float64)
        double dot[kRowsPerWarp] = {};
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) size[i] = 0.0;
        const float4* k_row = reinterpret_cast<const float4*>(kv_s + lane * geo.k_stride);
        for (int c = 0; c < geo.d_pad / kVec; ++c) {
            const float4 kk = k_row[c];
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
                const float4 qq = reinterpret_cast<const float4*>(q_s + (my_row + i) * geo.d_pad)[c];
                dot[i] += double(qq.x * kk.x) + double(qq.y * kk.y) + double(qq.z * kk.z) + double(qq.w * kk.w);
                if (kE4m3)
                    size[i] += fabs(double(qq.x * kk.x)) + fabs(double(qq.y * kk.y)) + fabs(double(qq.z * kk.z)) +
                               fabs(double(qq.w * kk.w));
            }
        }
        const int key = tile + lane;
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
            const int r = row0 + my_row + i;
            const bool visible = r < q_len && key < kv_len && key_visible(p, seq, r, key, r + shift);
            double logit = fmha::logit(p, head, r + shift, key, dot[i]).x;
            if (p.attention_bias != nullptr && visible)
                logit += load(static_cast<const T*>(p.attention_bias) + seq * p.bias_batch_stride +
                              head * p.bias_head_stride + int64_t(r) * p.bias_row_stride + key);
            score[i] = visible ? logit * kLog2eD : -INFINITY;
        }
    };
    // O and l times alpha: the running max rose (alpha = 1 where nothing is visible yet).
    const auto rescale = [&](int i, double m_new) {
        const double alpha = m_new == -INFINITY ? 1.0 : exp2(m[i] - m_new);
        l[i] *= alpha;
        l_size[i] *= alpha;
#pragma unroll
        for (int c = 0; c < kColChunks; ++c) {
            acc[i][c] *= static_cast<float>(alpha);
            amb[i][c] *= static_cast<float>(alpha);
        }
        m[i] = m_new;
    };
    // P of the scores against the running max m, rounded as the kernel rounds it, and its
    // rounding ambiguity; `m_size`: the size of the key that set m (e4m3: its S is as inexact).
    // Dropout: the row sum takes every P, P V only the kept ones (the rescale comes at the end).
    const dropout::Dropout& drop = p.dropout;
    const uint32_t bh = uint32_t(seq) * uint32_t(p.h) + uint32_t(head);
    const auto probabilities = [&](const double (&m_size)[kRowsPerWarp], int tile) {
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
            // m == -inf: nothing visible yet, keep everything at zero.
            double prob = m[i] == -INFINITY ? 0.0 : exp2(score[i] - m[i]);
            l[i] += warp_sum(prob);
            if (kE4m3 && lse_amb != nullptr) l_size[i] += warp_sum(prob * size[i]);  // (uniform: a kernel argument)
            if (drop.threshold != 0 && !dropout::keep(drop, bh, uint32_t(row0 + my_row + i), uint32_t(tile + lane)))
                prob = 0.0;
            p_s[(my_row + i) * kKeysPerTile + lane] = round_to<TP>(prob);
            // |dP| / P = |dS| scale_bmm1 to first order (softcap's tanh only shrinks it).
            const double a =
                kE4m3 ? fmax(kAmbiguity, s_err() * (size[i] + m_size[i])) : kAmbiguity;
            amb_s[(my_row + i) * kKeysPerTile + lane] = round_to<TP>(prob * (1.0 + a)) - round_to<TP>(prob * (1.0 - a));
        }
    };
    // O += P V over keys [tile, tile + 32).
    const auto accumulate = [&](int tile) {
        __syncthreads();  // every warp is done with the K tile
        for (int j = warp; j < kKeysPerTile; j += warps)
            for (int c = lane; c < p.dv; c += kWarpSize)
                kv_s[j * p.dv + c] =
                    tile + j < kv_len ? load(v + int64_t(tile + j) * p.v_row_stride + c) : 0.f;
        __syncthreads();

        for (int j = 0; j < kKeysPerTile; j += kVec) {
            float4 pr[kRowsPerWarp], ar[kRowsPerWarp];
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
                pr[i] = *reinterpret_cast<const float4*>(p_s + (my_row + i) * kKeysPerTile + j);
                ar[i] = *reinterpret_cast<const float4*>(amb_s + (my_row + i) * kKeysPerTile + j);
            }
#pragma unroll
            for (int jj = 0; jj < kVec; ++jj) {
                const float* v_row = kv_s + (j + jj) * p.dv;
#pragma unroll
                for (int c = 0; c < kColChunks; ++c) {
                    const int col = lane + c * kWarpSize;
                    const float vv = col < p.dv ? v_row[col] : 0.f;
#pragma unroll
                    for (int i = 0; i < kRowsPerWarp; ++i) {
                        acc[i][c] += reinterpret_cast<const float*>(&pr[i])[jj] * vv;
                        amb[i][c] += reinterpret_cast<const float*>(&ar[i])[jj] * fabsf(vv);
                    }
                }
            }
        }
    };

    if (kE4m3 && p_block_keys > 0) {
        // The e4m3 kernels' rule: M is the exact running max of the blocks of p_block_keys
        // keys visited so far, last block first, and a P is rounded on the grid of the M of
        // its own block's visit. Each block is read twice: its max, then its P V.
        double m_size[kRowsPerWarp];  // the size of the key that set m
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) m_size[i] = 0.0;
        for (int block = (key_end + p_block_keys - 1) / p_block_keys - 1; block >= 0; --block) {
            const int block_end = min((block + 1) * p_block_keys, key_end);
            double b_max[kRowsPerWarp], b_size[kRowsPerWarp];
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) b_max[i] = -INFINITY, b_size[i] = 0.0;
            for (int tile = block * p_block_keys; tile < block_end; tile += kKeysPerTile) {
                tile_scores(tile);
#pragma unroll
                for (int i = 0; i < kRowsPerWarp; ++i) {
                    const double t_max = warp_max(score[i]);
                    const double t_size = warp_max(score[i] == t_max ? size[i] : 0.0);
                    if (t_max > b_max[i]) b_max[i] = t_max, b_size[i] = t_size;
                }
            }
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i)
                if (b_max[i] > m[i]) rescale(i, b_max[i]), m_size[i] = b_size[i];
            for (int tile = block * p_block_keys; tile < block_end; tile += kKeysPerTile) {
                tile_scores(tile);
                probabilities(m_size, tile);
                accumulate(tile);
            }
        }
    } else {
        // M is the running max rounded up to an integer (a power-of-two rescale): the rounded P
        // does not depend on the order of the keys, which go by in tiles of 32.
        const double no_size[kRowsPerWarp] = {};
        for (int tile = 0; tile < key_end; tile += kKeysPerTile) {
            tile_scores(tile);
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
                const double m_new = fmax(m[i], ceil(warp_max(score[i])));
                if (m_new != m[i]) rescale(i, m_new);
            }
            probabilities(no_size, tile);
            accumulate(tile);
        }
    }

    const float out_scale = p.scale_softmax * p.scale_bmm2 * drop.rescale;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = row0 + my_row + i;
        if (r >= q_len) continue;
        // Attention sinks: one more term of the denominator (none for a row without keys).
        if (p.sinks != nullptr && m[i] != -INFINITY) l[i] += exp2(double(p.sinks[head]) * kLog2eD - m[i]);
        const float inv = l[i] > 0.0 ? static_cast<float>(out_scale / l[i]) : 0.f;
        const int64_t row_off = (int64_t(seq_q_offset(p, seq)) + r) * (int64_t(p.h) * p.dv) + int64_t(head) * p.dv;
#pragma unroll
        for (int c = 0; c < kColChunks; ++c) {
            const int col = lane + c * kWarpSize;
            if (col >= p.dv) continue;
            o_ref[row_off + col] = acc[i][c] * inv;
            if (o_amb != nullptr) o_amb[row_off + col] = amb[i][c] * fabsf(inv);
        }
        if (lse != nullptr && lane == 0)
            lse[(int64_t(seq) * p.h + head) * p.s_q_max + r] =
                l[i] > 0.0 ? static_cast<float>((m[i] + log2(l[i])) * kLn2D) : -INFINITY;
        if (lse_amb != nullptr && lane == 0)
            lse_amb[(int64_t(seq) * p.h + head) * p.s_q_max + r] =
                l[i] > 0.0 ? static_cast<float>(s_err() * l_size[i] / l[i]) : 0.f;
    }
}

using KernelFn = void (*)(Params, Smem, int, float*, float*, float*, float*);

template <class T, class TKV = T, class TP = T>
KernelFn pick_kernel(int dv) {
    const int chunks = (dv + kWarpSize - 1) / kWarpSize;
    if (chunks <= 1) return reference_kernel<T, TKV, TP, 1>;
    if (chunks <= 2) return reference_kernel<T, TKV, TP, 2>;
    if (chunks <= 4) return reference_kernel<T, TKV, TP, 4>;
    if (chunks <= 8) return reference_kernel<T, TKV, TP, 8>;
    return reference_kernel<T, TKV, TP, kMaxColChunks>;
}

struct Launch {
    KernelFn fn;
    Smem geo;
    int warps;
};

// The largest CTA (most rows sharing each K/V tile) whose shared memory fits.
cudaError_t plan(const Params& p, DataType dtype, DataType kv_dtype, Launch* out) {
    if (dtype != DataType::kFp16 && dtype != DataType::kBf16 && dtype != DataType::kE4m3) return cudaErrorInvalidValue;
    // K and V in the inputs' type, or e4m3 under fp16/bf16 queries.
    if (kv_dtype != dtype && !(kv_dtype == DataType::kE4m3 && dtype != DataType::kE4m3)) return cudaErrorInvalidValue;
    const bool kv8 = kv_dtype != dtype;
    if (p.dv > kMaxColChunks * kWarpSize || p.h_kv <= 0 || p.h % p.h_kv != 0) return cudaErrorInvalidValue;
    int device = 0, smem_max = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) return err;

    out->fn = dtype == DataType::kBf16   ? (kv8 ? pick_kernel<__nv_bfloat16, __nv_fp8_e4m3, __half>(p.dv)
                                                 : pick_kernel<__nv_bfloat16>(p.dv))
              : dtype == DataType::kE4m3 ? pick_kernel<__nv_fp8_e4m3>(p.dv)
              : kv8                      ? pick_kernel<__half, __nv_fp8_e4m3>(p.dv)
                                         : pick_kernel<__half>(p.dv);
    for (int warps = kMaxWarps; warps >= 1; warps /= 2) {
        out->geo = make_smem(warps, p.d, p.dv);
        out->warps = warps;
        if (out->geo.bytes() <= size_t(smem_max))
            return cudaFuncSetAttribute(out->fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(out->geo.bytes()));
    }
    return cudaErrorInvalidConfiguration;  // d, dv too large for this device's shared memory
}

}  // namespace

cudaError_t prepare_reference(const Params& p, DataType dtype, DataType kv_dtype) {
    Launch l;
    return plan(p, dtype, kv_dtype, &l);
}

cudaError_t run_reference(const Params& p, DataType dtype, DataType kv_dtype, int p_block_keys, float* o_ref,
                          float* o_amb, float* lse, float* lse_amb, cudaStream_t stream) {
    Launch l;
    cudaError_t err = plan(p, dtype, kv_dtype, &l);
    if (err != cudaSuccess) return err;
    const dim3 grid((p.s_q_max + l.geo.rows - 1) / l.geo.rows, p.h, p.b);
    l.fn<<<grid, l.warps * kWarpSize, l.geo.bytes(), stream>>>(p, l.geo, p_block_keys, o_ref, o_amb, lse, lse_amb);
    return cudaGetLastError();
}

}  // namespace fmha
