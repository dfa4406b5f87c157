// The backward's launches around its main kernel (flash_bwd_sm80.h; the wgmma backward's
// too): preprocess (D = rowsum(dO * O) - dLSE and the LSE in log2 units a query row, the dQ
// accumulator zeroed) and postprocess (dQ to the input dtype, dK and dV summed over each KV
// head's query heads), and their host-side launches, prepare and finish.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fmha/kernel/flash_bwd/traits.h"
#include "fmha/kernel/flash_bwd_params.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace flash_bwd {

// Row `row` of (batch, head) in the workspace: D (d, the row's rowsum(dO * O)) less dLSE, and
// the LSE in log2 units, +inf past q_len or where no key is visible.
FMHA_DEVICE void store_rows(const BwdParams& bp, int batch, int head, int row, int q_len, float d) {
    const Params& p = bp.p;
    const int64_t at = (int64_t(batch) * p.h + head) * p.s_q_max + row;
    // The LSE's gradient adds dLSE P to dS = P (dP - D): the same as D - dLSE for D.
    if (bp.d_lse != nullptr && row < q_len) d -= bp.d_lse[at];
    const int64_t at2 = (int64_t(batch) * p.h + head) * rows_pitch(p) + row;
    bp.d_sum[at2] = d;
    const float lse = row < q_len ? bp.lse[at] : -INFINITY;
    bp.lse2[at2] = lse != -INFINITY ? lse * kLog2e : INFINITY;
}

// Row `row` (< q_len) of query head `head` of sequence `batch`: where it sits in O and in dO.
template <typename Element>
struct ODoRow {
    const Element* o;
    const Element* d_o;
};
template <typename Element>
FMHA_DEVICE ODoRow<Element> o_do_row(const BwdParams& bp, int batch, int head, int row) {
    const Params& p = bp.p;
    const int64_t token = seq_q_offset(p, batch) + row;
    return {static_cast<const Element*>(p.o) + token * p.o_row_stride + int64_t(head) * p.o_head_stride,
            static_cast<const Element*>(bp.d_o) + token * bp.do_row_stride + int64_t(head) * bp.do_head_stride};
}

// D = rowsum(dO * O) - dLSE and the LSE in log2 units per (batch, head, row), rows_pitch rows:
// past q_len, and where no key is visible (LSE -inf), the LSE reads +inf, so that
// exp2(logit - LSE) is 0 without a test. A warp a row (lane l reads columns l, l + 32, ...: a
// load instruction reads 64 contiguous bytes); grid (ceil(rows_pitch / 4), h, b), 128 threads.
// (The launch zeroes the dQ accumulator before it.)
constexpr int kPreRows = 4;  // rows (warps) a preprocess block
template <class Tr>
__global__ void __launch_bounds__(kPreRows * kWarpSize) preprocess_kernel(const __grid_constant__ BwdParams bp) {
    using Element = typename Tr::Element;
    const Params& p = bp.p;
    const int lane = threadIdx.x % kWarpSize;
    const int batch = blockIdx.z, head = blockIdx.y, row = blockIdx.x * kPreRows + threadIdx.x / kWarpSize;
    if (row >= rows_pitch(p)) return;
    const int q_len = seq_q_len(p, batch);
    float d = 0.f;
    if (row < q_len) {
        const ODoRow<Element> r = o_do_row<Element>(bp, batch, head, row);
        for (int c = lane; c < p.dv; c += kWarpSize) d += to_f32(r.o[c]) * to_f32(r.d_o[c]);
#pragma unroll
        for (int m = kWarpSize / 2; m > 0; m /= 2) d += __shfl_xor_sync(0xffffffffu, d, m);
    }
    if (lane == 0) store_rows(bp, batch, head, row, q_len, d);
}
inline dim3 preprocess_grid(const Params& p) {
    return dim3(unsigned((rows_pitch(p) + kPreRows - 1) / kPreRows), unsigned(p.h), unsigned(p.b));
}

// The sum of eight products of two 16-byte chunks of 16-bit elements.
template <typename Element>
FMHA_DEVICE float dot8(uint4 a, uint4 b) {
    const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 u, v;
        if constexpr (ElementTraits<Element>::kIsBf16) {
            u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x[i]));
            v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&y[i]));
        } else {
            u = __half22float2(*reinterpret_cast<const __half2*>(&x[i]));
            v = __half22float2(*reinterpret_cast<const __half2*>(&y[i]));
        }
        s = fmaf(u.x, v.x, s), s = fmaf(u.y, v.y, s);
    }
    return s;
}

// The same rows as preprocess_kernel, kT threads a row (16-byte loads: kT x 16 bytes of O and
// of dO a step, 256 / kT rows a block), where O and dO are 16-byte aligned (bench/NOTES.md
// §73: a warp a row read 2- or 4-byte pieces and ran at a third of the bandwidth). It also
// zeroes the dQ accumulator, a grid-stride share of its float4s a thread (all q_tokens rows,
// those of no sequence too), so no memset pass runs before it. Grid (rows_pitch / (256 /
// kT), h, b), 256 threads.
template <typename Element, int kT>
__global__ void __launch_bounds__(256) preprocess_vec_kernel(const __grid_constant__ BwdParams bp) {
    const Params& p = bp.p;
    {
        float4* dq = reinterpret_cast<float4*>(bp.dq_accum);
        const int64_t n = int64_t(p.q_tokens) * p.h * p.d / 4, step = int64_t(gridDim.x) * gridDim.y * gridDim.z * 256;
        for (int64_t i = ((int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * 256 + threadIdx.x;
             i < n; i += step)
            dq[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    constexpr int kRows = 256 / kT;
    const int t = threadIdx.x % kT;
    const int batch = blockIdx.z, head = blockIdx.y, row = blockIdx.x * kRows + threadIdx.x / kT;  // < rows_pitch
    const int q_len = seq_q_len(p, batch);
    float d = 0.f;
    if (row < q_len) {
        const ODoRow<Element> r = o_do_row<Element>(bp, batch, head, row);
        for (int c = 8 * t; c < p.dv; c += 8 * kT)
            d += dot8<Element>(*reinterpret_cast<const uint4*>(r.o + c), *reinterpret_cast<const uint4*>(r.d_o + c));
    }
#pragma unroll
    for (int m = kT / 2; m > 0; m /= 2) d += __shfl_xor_sync(0xffffffffu, d, m);  // a row's kT lanes
    if (t == 0) store_rows(bp, batch, head, row, q_len, d);
}

// dQ (scaled) to the input dtype, and (unless the main kernel stored them) dK, dV summed over
// each KV head's query heads; eight columns a thread (two 16-byte loads of each accumulator,
// one 16-byte store where the output is 16-byte aligned, bench/NOTES.md §73; d and dv are
// whole 8-element chunks). Grid (postprocess_blocks), 256 threads: thread i takes columns
// 8 i .. of each of the three [rows, heads, d or dv] storages it reaches.
template <typename Element>
FMHA_DEVICE void store8(Element* out, float4 lo, float4 hi, float scale, bool vec) {
    if (vec) {
        *reinterpret_cast<uint4*>(out) = make_uint4(ElementTraits<Element>::pack(lo.x * scale, lo.y * scale),
                                                    ElementTraits<Element>::pack(lo.z * scale, lo.w * scale),
                                                    ElementTraits<Element>::pack(hi.x * scale, hi.y * scale),
                                                    ElementTraits<Element>::pack(hi.z * scale, hi.w * scale));
        return;
    }
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = from_f32<Element>(v[k] * scale);
}
FMHA_HOST_DEVICE bool aligned16(const void* ptr, int64_t row_stride, int64_t head_stride) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && row_stride % 8 == 0 && head_stride % 8 == 0;
}
template <class Tr>
__global__ void __launch_bounds__(256) postprocess_kernel(const __grid_constant__ BwdParams bp) {
    using Element = typename Tr::Element;
    const Params& p = bp.p;
    const int64_t i = (int64_t(blockIdx.x) * 256 + threadIdx.x) * 8;  // the first of eight columns
    const int group = p.h / p.h_kv;
    if (i < p.q_tokens * p.h * p.d) {  // dQ[token, head, c .. c + 7]
        const int64_t token = i / (int64_t(p.h) * p.d);
        const int head = int(i / p.d % p.h), c = int(i % p.d);
        const float4* x = reinterpret_cast<const float4*>(bp.dq_accum + i);
        store8(static_cast<Element*>(bp.dq) + token * bp.dq_row_stride + int64_t(head) * bp.dq_head_stride + c, x[0],
               x[1], p.scale_bmm1, aligned16(bp.dq, bp.dq_row_stride, bp.dq_head_stride));
    }
    if (bp.dkv_direct) return;
    // dK (d columns) and dV (dv columns) [token, kv head, c .. c + 7], each the sum of its
    // group's rows [token, head, c].
    const auto sum_group = [&](const float* accum, int d, void* out, int64_t row_stride, int64_t head_stride) {
        if (i >= p.kv_tokens * p.h_kv * d) return;
        const int64_t token = i / (int64_t(p.h_kv) * d);
        const int kv_head = int(i / d % p.h_kv), c = int(i % d);
        float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
        for (int g = 0; g < group; ++g) {
            const float4* a = reinterpret_cast<const float4*>(accum + (token * p.h + kv_head * group + g) * d + c);
            const float4 x = a[0], y = a[1];
            lo.x += x.x, lo.y += x.y, lo.z += x.z, lo.w += x.w;
            hi.x += y.x, hi.y += y.y, hi.z += y.z, hi.w += y.w;
        }
        store8(static_cast<Element*>(out) + token * row_stride + int64_t(kv_head) * head_stride + c, lo, hi, 1.f,
               aligned16(out, row_stride, head_stride));
    };
    sum_group(bp.dk_accum, p.d, bp.dk, bp.dk_row_stride, bp.dk_head_stride);
    sum_group(bp.dv_accum, p.dv, bp.dv, bp.dv_row_stride, bp.dv_head_stride);
}
inline unsigned postprocess_blocks(const BwdParams& bp) {
    const Params& p = bp.p;
    int64_t elems = int64_t(p.q_tokens) * p.h * p.d;
    if (!bp.dkv_direct) elems = std::max(elems, int64_t(p.kv_tokens) * p.h_kv * std::max(p.d, p.dv));
    return unsigned((elems / 8 + 255) / 256);
}
// Before the main kernel: D and the LSE in log2 units (preprocess), the dQ accumulator and
// the order counters at zero; the rest of the workspace (dK, dV rows of every valid key) is
// written whole before it is read. The vectorised preprocess (O and dO 16-byte aligned) zeroes
// dQ itself; else a memset does.
template <class Tr>
cudaError_t prepare(const BwdParams& bp, cudaStream_t stream) {
    using Element = typename Tr::Element;
    const Params& p = bp.p;
    const size_t before = size_t(reinterpret_cast<const char*>(bp.dq_order) - reinterpret_cast<const char*>(bp.dq_accum));
    cudaError_t err = cudaMemsetAsync(bp.dq_order, 0, workspace_bytes(p) - before, stream);
    if (err != cudaSuccess) return err;
    if (aligned16(p.o, p.o_row_stride, p.o_head_stride) && aligned16(bp.d_o, bp.do_row_stride, bp.do_head_stride)) {
        const auto run = [&](auto threads) {
            constexpr int kT = decltype(threads)::value;
            const dim3 grid(unsigned(rows_pitch(p) / (256 / kT)), unsigned(p.h), unsigned(p.b));
            preprocess_vec_kernel<Element, kT><<<grid, 256, 0, stream>>>(bp);
        };
        if (p.dv <= 64) run(std::integral_constant<int, 8>{});
        else if (p.dv <= 128) run(std::integral_constant<int, 16>{});
        else run(std::integral_constant<int, 32>{});
        return cudaGetLastError();
    }
    err = cudaMemsetAsync(bp.dq_accum, 0, size_t(p.q_tokens) * p.h * p.d * sizeof(float), stream);
    if (err != cudaSuccess) return err;
    preprocess_kernel<Tr><<<preprocess_grid(p), kPreRows * kWarpSize, 0, stream>>>(bp);
    return cudaGetLastError();
}

// After the main kernel: dQ (and dK, dV unless stored) to the outputs.
template <class Tr>
cudaError_t finish(const BwdParams& bp, cudaStream_t stream) {
    postprocess_kernel<Tr><<<postprocess_blocks(bp), 256, 0, stream>>>(bp);
    return cudaGetLastError();
}

}  // namespace flash_bwd
}  // namespace fmha
