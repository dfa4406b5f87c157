// The backward pass's GPU reference (issue #33): dQ, dK and dV in fp32 from float64
// sums, for the checks of fmha.exe -bwd. Two kernels, one warp per item:
//   rows: one query row of one head: its LSE (over the visible keys, in float64: no input
//         from the forward's kernel; sinks included), D = rowsum(dO * O) with O as the kernel
//         wrote it (the backward kernel's input), and dQ = scale sum_j dS_j k_j with P_j =
//         exp(x_j - LSE), dP_j = dO . v_j, dS_j = P_j (dP_j - D) x_j' (x the logit: scaled,
//         softcapped, ALiBi's penalty; x' its derivative in the scaled score); each key's two
//         dot products are warp sums;
//   keys: one key of one KV head: dV = sum over its query heads' rows of P dO, dK = scale
//         sum of dS q, with those rows' LSE and D from the rows kernel.
// Each output also gets its magnitude: the same sum over the terms' absolute values, with dS's
// difference dP - D taken as |dP| + |D| (summed squares a tensor, in the scratch's first three
// doubles). Where the terms cancel (one key: P = 1 and dP = D exactly, so dS = 0), the
// reference is rounding noise, and the checks measure the error against the magnitude instead
// (reference_bwd_magnitudes).
// Every mask but the custom one (bottom-right aligned), softcap, ALiBi, sinks, dropout (the
// forward's mask, fmha/dropout.h), GQA, var-len
// (what the backward kernels serve).
#include "reference/reference_bwd.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "fmha/dropout.h"
#include "fmha/seq_lens.h"
#include "reference/mask_rule.h"

namespace fmha {
namespace {

template <class T> __device__ inline double value(const T* p);
template <> __device__ inline double value<__half>(const __half* p) { return __half2float(*p); }
template <> __device__ inline double value<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

__device__ inline double warp_sum(double x) {
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// a . b over n columns, the lanes taking every 32nd, summed over the warp.
template <class T>
__device__ inline double dot(const T* a, const T* b, int n, int lane) {
    double s = 0;
    for (int c = lane; c < n; c += 32) s += value(a + c) * value(b + c);
    return warp_sum(s);
}

constexpr int kMaxCols = 256 / 32;  // head-size columns a lane holds
constexpr size_t kMagFloats = 3 * sizeof(double) / sizeof(float);  // the scratch's magnitude sums

// Adds this warp's sum of squares to *total (lane 0).
__device__ inline void add_squares(double* total, double x) {
    x = warp_sum(x);
    if (threadIdx.x == 0) atomicAdd(total, x);
}

template <class T>
__global__ void __launch_bounds__(32) rows_kernel(Params p, const T* d_o, float* dq_ref, float* lse_out,
                                                  float* d_out, double* mag2) {
    const int r = blockIdx.x, head = blockIdx.y, seq = blockIdx.z, lane = threadIdx.x;
    const int q_len = seq_q_len(p, seq), kv_len = seq_kv_len(p, seq);
    if (r >= q_len) return;
    const int shift = kv_len - q_len, kv_head = head / (p.h / p.h_kv);
    const int64_t token = seq_q_offset(p, seq) + r;
    const T* q = static_cast<const T*>(p.q) + token * p.q_row_stride + int64_t(head) * p.q_head_stride;
    const T* o = static_cast<const T*>(p.o) + token * p.o_row_stride + int64_t(head) * p.o_head_stride;
    const T* g = d_o + token * p.o_row_stride + int64_t(head) * p.o_head_stride;
    const T* k0 = static_cast<const T*>(p.k) + int64_t(seq_kv_offset(p, seq)) * p.k_row_stride +
                  int64_t(kv_head) * p.k_head_stride;
    const T* v0 = static_cast<const T*>(p.v) + int64_t(seq_kv_offset(p, seq)) * p.v_row_stride +
                  int64_t(kv_head) * p.v_head_stride;
    const double scale = p.scale_bmm1;

    const int pos = r + shift;
    const double sink = p.sinks != nullptr ? double(p.sinks[head]) : -INFINITY;
    double m = sink;
    for (int j = 0; j < kv_len; ++j)
        if (key_visible(p, seq, r, j, pos))
            m = fmax(m, logit(p, head, pos, j, dot(q, k0 + j * p.k_row_stride, p.d, lane)).x);
    double l = p.sinks != nullptr ? exp(sink - m) : 0.0;
    for (int j = 0; j < kv_len; ++j)
        if (key_visible(p, seq, r, j, pos))
            l += exp(logit(p, head, pos, j, dot(q, k0 + j * p.k_row_stride, p.d, lane)).x - m);
    const double lse = l > 0 ? m + log(l) : -INFINITY;
    const double big_d = dot(g, o, p.dv, lane);

    const dropout::Dropout& drop = p.dropout;
    const uint32_t bh = uint32_t(seq) * uint32_t(p.h) + uint32_t(head);
    double dq[kMaxCols] = {}, dq_mag[kMaxCols] = {};
    if (l > 0) {
        for (int j = 0; j < kv_len; ++j) {
            if (!key_visible(p, seq, r, j, pos)) continue;
            const T* k = k0 + j * p.k_row_stride;
            const Logit x = logit(p, head, pos, j, dot(q, k, p.d, lane));
            // Dropout: dP of a kept P is dO . v / (1 - p), of a dropped one 0 (D holds as it is).
            const double z = drop.threshold == 0 ? 1.0 : dropout::keep(drop, bh, r, j) ? drop.rescale : 0.0;
            const double pj = exp(x.x - lse), dp = z * dot(g, v0 + j * p.v_row_stride, p.dv, lane);
            const double ds = pj * (dp - big_d) * x.slope, ds_mag = pj * (fabs(dp) + fabs(big_d)) * fabs(x.slope);
#pragma unroll
            for (int i = 0; i < kMaxCols; ++i) {
                const int c = lane + 32 * i;
                if (c < p.d) dq[i] += ds * value(k + c), dq_mag[i] += ds_mag * fabs(value(k + c));
            }
        }
    }
    double squares = 0;
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) {
        const int c = lane + 32 * i;
        if (c < p.d) dq_ref[(token * p.h + head) * p.d + c] = static_cast<float>(scale * dq[i]);
        squares += scale * dq_mag[i] * scale * dq_mag[i];
    }
    add_squares(&mag2[0], squares);
    if (lane == 0) {
        const int64_t at = (int64_t(seq) * p.h + head) * p.s_q_max + r;
        lse_out[at] = static_cast<float>(lse);
        d_out[at] = static_cast<float>(big_d);
    }
}

template <class T>
__global__ void __launch_bounds__(32) keys_kernel(Params p, const T* d_o, const float* lse_in, const float* d_in,
                                                  float* dk_ref, float* dv_ref, double* mag2) {
    const int j = blockIdx.x, kv_head = blockIdx.y, seq = blockIdx.z, lane = threadIdx.x;
    const int q_len = seq_q_len(p, seq), kv_len = seq_kv_len(p, seq);
    if (j >= kv_len) return;
    const int shift = kv_len - q_len, group = p.h / p.h_kv;
    const int64_t key = seq_kv_offset(p, seq) + j;
    const T* k = static_cast<const T*>(p.k) + key * p.k_row_stride + int64_t(kv_head) * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + key * p.v_row_stride + int64_t(kv_head) * p.v_head_stride;
    const double scale = p.scale_bmm1;
    const dropout::Dropout& drop = p.dropout;
    double dk[kMaxCols] = {}, dv[kMaxCols] = {}, dk_mag[kMaxCols] = {}, dv_mag[kMaxCols] = {};
    for (int g = 0; g < group; ++g) {
        const int head = kv_head * group + g;
        const uint32_t bh = uint32_t(seq) * uint32_t(p.h) + uint32_t(head);
        for (int r = 0; r < q_len; ++r) {
            if (!key_visible(p, seq, r, j, r + shift)) continue;
            const int64_t at = (int64_t(seq) * p.h + head) * p.s_q_max + r;
            const double lse = lse_in[at];
            if (lse == -INFINITY) continue;
            const int64_t token = seq_q_offset(p, seq) + r;
            const T* q = static_cast<const T*>(p.q) + token * p.q_row_stride + int64_t(head) * p.q_head_stride;
            const T* gr = d_o + token * p.o_row_stride + int64_t(head) * p.o_head_stride;
            const Logit x = logit(p, head, r + shift, j, dot(q, k, p.d, lane));
            const double z = drop.threshold == 0 ? 1.0 : dropout::keep(drop, bh, r, j) ? drop.rescale : 0.0;
            const double pj = exp(x.x - lse), dp = z * dot(gr, v, p.dv, lane), big_d = d_in[at];
            const double ds = pj * (dp - big_d) * x.slope, ds_mag = pj * (fabs(dp) + fabs(big_d)) * fabs(x.slope);
#pragma unroll
            for (int i = 0; i < kMaxCols; ++i) {
                const int c = lane + 32 * i;
                if (c < p.d) dk[i] += ds * value(q + c), dk_mag[i] += ds_mag * fabs(value(q + c));
                if (c < p.dv) dv[i] += z * pj * value(gr + c), dv_mag[i] += z * pj * fabs(value(gr + c));
            }
        }
    }
    double squares_k = 0, squares_v = 0;
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) {
        const int c = lane + 32 * i;
        if (c < p.d) dk_ref[(key * p.h_kv + kv_head) * p.d + c] = static_cast<float>(scale * dk[i]);
        if (c < p.dv) dv_ref[(key * p.h_kv + kv_head) * p.dv + c] = static_cast<float>(dv[i]);
        squares_k += scale * dk_mag[i] * scale * dk_mag[i], squares_v += dv_mag[i] * dv_mag[i];
    }
    add_squares(&mag2[1], squares_k);
    add_squares(&mag2[2], squares_v);
}

template <class T>
cudaError_t run(const Params& p, const void* d_o, float* dq_ref, float* dk_ref, float* dv_ref, float* scratch,
                cudaStream_t stream) {
    double* mag2 = reinterpret_cast<double*>(scratch);
    float* lse = scratch + kMagFloats;
    float* big_d = lse + size_t(p.b) * p.h * p.s_q_max;
    cudaError_t err = cudaMemsetAsync(mag2, 0, 3 * sizeof(double), stream);
    if (err != cudaSuccess) return err;
    rows_kernel<T><<<dim3(p.s_q_max, p.h, p.b), 32, 0, stream>>>(p, static_cast<const T*>(d_o), dq_ref, lse, big_d,
                                                                   mag2);
    keys_kernel<T><<<dim3(p.s_kv_max, p.h_kv, p.b), 32, 0, stream>>>(p, static_cast<const T*>(d_o), lse, big_d, dk_ref,
                                                                       dv_ref, mag2);
    return cudaGetLastError();
}

}  // namespace

size_t reference_bwd_scratch_floats(const Params& p) { return kMagFloats + 2 * size_t(p.b) * p.h * p.s_q_max; }

cudaError_t reference_bwd_magnitudes(const float* scratch, double rms[3], int64_t counts[3]) {
    double squares[3];
    const cudaError_t err = cudaMemcpy(squares, scratch, sizeof(squares), cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) return err;
    for (int t = 0; t < 3; ++t) rms[t] = counts[t] > 0 ? std::sqrt(squares[t] / double(counts[t])) : 0.0;
    return cudaSuccess;
}

cudaError_t run_reference_bwd(const Params& p, DataType dtype, const void* d_o, float* dq_ref, float* dk_ref,
                              float* dv_ref, float* scratch, cudaStream_t stream) {
    if (p.d > 32 * kMaxCols || p.dv > 32 * kMaxCols || p.h_kv <= 0 || p.h % p.h_kv != 0) return cudaErrorInvalidValue;
    if (p.mask == MaskType::kCustom || p.attention_bias != nullptr) return cudaErrorInvalidValue;
    if (dtype == DataType::kBf16) return run<__nv_bfloat16>(p, d_o, dq_ref, dk_ref, dv_ref, scratch, stream);
    if (dtype == DataType::kFp16) return run<__half>(p, d_o, dq_ref, dk_ref, dv_ref, scratch, stream);
    return cudaErrorInvalidValue;
}

}  // namespace fmha
