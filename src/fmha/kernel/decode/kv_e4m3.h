// The decode mma path over an e4m3 KV cache (MmaTraits::kKvE4m3): the ring holds K and V as
// they are in memory, one byte an element, and each warp widens its fragments to f16 after
// the ldmatrix, with no conversion pass and no extra shared memory (bench/NOTES.md §78).
//
// An ldmatrix of e4m3 rows reads 16-bit pairs: a lane gets 4 consecutive bytes of a row.
//   K (Q K^T's B operand, k = d): a lane holds d 4t .. 4t + 3 of its key (t = lane % 4) where
//     the m16n8k16 B fragment wants k 2t, 2t + 1 and 2t + 8, 2t + 9. Q K^T sums over d, so
//     Q's columns are permuted once in shared memory instead (slot 2t + e <- d 4t + e, slot
//     8 + 2t + e <- d 4t + 2 + e, within every 16): the lane's 4 bytes are then its b0, b1.
//   V (P V's B operand, k = keys): ldmatrix.trans gives a lane 2 keys x 2 adjacent columns;
//     its even column feeds one n-tile and its odd column another, so O's n-tiles hold
//     columns in the order [even of 0..15, odd of 0..15, even of 16..31, odd of 16..31] per
//     32 (o_column), which only the epilogue's store sees.
// Q is f16 in shared memory: fp16 queries as they are; bf16 ones times a power of two per
// row (the row's largest |q| into [2^14, 2^15)), exact for every element above 2^-32 of that
// largest one, whose inverse scales S back (with FlashAttention-3's k_descale). P is f16.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "fmha/kernel/decode/shape.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/mma/mma_sm80.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {
namespace kv8 {

// Bytes 0, 1 (kHigh: 2, 3) of x, two e4m3, as an f16x2 (exact: every e4m3 is an f16).
template <bool kHigh>
FMHA_DEVICE uint32_t to_f16x2(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t out;
    if constexpr (kHigh) {
        asm("{.reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;}\n" : "=r"(out) : "r"(x));
    } else {
        asm("{.reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;}\n" : "=r"(out) : "r"(x));
    }
    return out;
#else
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(kHigh ? x >> 16 : x & 0xffffu), __NV_E4M3);
    return uint32_t(h.x) | (uint32_t(h.y) << 16);
#endif
}

FMHA_DEVICE void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// O's physical column of n-tile nt's accumulator element e (0..3: rows g, g, g + 8, g + 8;
// columns 2t, 2t + 1) for lane's t: see the header.
FMHA_HOST_DEVICE constexpr int o_column(int nt, int e, int t) {
    return 32 * (nt / 4) + 16 * (nt % 4 / 2) + 4 * t + 2 * (e % 2) + nt % 2;
}

// Q into shared memory as f16 with its columns permuted (see the header), each row's scale
// inverse into q_inv[hs * kRows + r] (1 for fp16 queries and rows past the tile's), zeros
// past `rows` and in slots past `heads`. Plain loads (K and V are already in flight); the
// caller's barrier orders the stores before any read.
template <class Tr, class Tile>
FMHA_DEVICE void load_q_tile(uint32_t smem_q, float* q_inv, const Params& p, const Shape& shape, const Tile& t,
                             int tid) {
    using Element = typename Tr::Element;
    constexpr int R = Tr::kRows;
    constexpr int kGroups = Tr::kHeadDim / 16;  // 16 columns a thread: 32 bytes in, 32 out
    constexpr int kItems = Tr::kHeads * R * kGroups;
    static_assert(kItems % kWarpSize == 0 && kWarpSize % kGroups == 0, "whole rows in a warp, whole warps busy");
#pragma unroll
    for (int i = tid; i < kItems; i += Tr::kThreads) {
        const int hr = i / kGroups;  // hs * R + r
        const int g = i % kGroups;
        const int hs = hr / R;
        const int r = hr % R;
        const int row = t.row0 + r;
        const bool valid = row < t.rows && hs < t.heads;
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (valid) {
            const int head = (t.g0 + hs) * shape.group + row % shape.group;
            const Element* src = static_cast<const Element*>(p.q) + int64_t(t.q_off + row / shape.group) * p.q_row_stride +
                                 int64_t(head) * p.q_head_stride + g * 16;
            lo = __ldg(reinterpret_cast<const uint4*>(src));
            hi = __ldg(reinterpret_cast<const uint4*>(src) + 1);
        }
        uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};  // column pairs 0..7
        float inv = 1.f;
        if constexpr (ElementTraits<Element>::kIsBf16) {
            float amax = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float2 f = ElementTraits<Element>::unpack(w[j]);
                amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
            }
#pragma unroll
            for (int o = 1; o < kGroups; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            // amax = m * 2^e, m in [0.5, 1): the scale 2^(15 - e), its biased exponent clamped so
            // that it and its inverse are normal floats (rows of zeros, or a non-finite |q|, keep
            // 1: their S is what it is).
            int e = 0;
            frexpf(amax, &e);
            const bool scaled = amax > 0.f && amax <= 3.4e38f;
            const int biased = min_int(253, 127 + 15 - e);
            const float scale = scaled ? __int_as_float(biased << 23) : 1.f;
            inv = scaled ? __int_as_float((254 - biased) << 23) : 1.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float2 f = ElementTraits<Element>::unpack(w[j]);
                const __half2 h = __floats2half2_rn(f.x * scale, f.y * scale);
                w[j] = *reinterpret_cast<const uint32_t*>(&h);
            }
        }
        // slot pairs 0..3 <- column pairs 0, 2, 4, 6; slot pairs 4..7 <- 1, 3, 5, 7
        const uint32_t base = smem_q + hs * Tr::LayoutQ::kBytes;
        st_shared_v4(base + Tr::LayoutQ::offset(r, 2 * g), w[0], w[2], w[4], w[6]);
        st_shared_v4(base + Tr::LayoutQ::offset(r, 2 * g + 1), w[1], w[3], w[5], w[7]);
        if (g == 0) q_inv[hr] = inv;
    }
}

// S (f32 [m16 x 8 keys] n-tiles) += Q K^T of one head slot over the block's e4m3 K: per 32
// columns of d, two k16 slices of Q (permuted) against one ldmatrix.x4 of 16 keys.
template <int kNTiles, int kHeadDim, class LayoutQ, class LayoutK>
FMHA_DEVICE void gemm_qk(float (&s)[kNTiles][4], const memory::LdsmAddr<LayoutQ>& q_addr,
                         const memory::LdsmAddr<LayoutK>& k_addr) {
    static_assert(kNTiles % 2 == 0, "K is read 16 keys at a time");
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 32; ++kk) {
        uint32_t a0[4], a1[4];  // Q's k16 slices 2kk, 2kk + 1 (16-bit chunks 4kk .. 4kk + 3)
        mma::ldmatrix_x4(a0, q_addr(0, 4 * kk));
        mma::ldmatrix_x4(a1, q_addr(0, 4 * kk + 2));
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
            uint32_t b[4];  // keys 0-7 | 8-15 of the pair x bytes 32kk .. +15 | +16 .. +31
            mma::ldmatrix_x4(b, k_addr(np * 16, 2 * kk));
            const uint32_t b00[2] = {to_f16x2<false>(b[0]), to_f16x2<true>(b[0])};
            const uint32_t b01[2] = {to_f16x2<false>(b[1]), to_f16x2<true>(b[1])};
            const uint32_t b10[2] = {to_f16x2<false>(b[2]), to_f16x2<true>(b[2])};
            const uint32_t b11[2] = {to_f16x2<false>(b[3]), to_f16x2<true>(b[3])};
            mma::mma_16816<__half>(s[2 * np], a0, b00);
            mma::mma_16816<__half>(s[2 * np], a1, b01);
            mma::mma_16816<__half>(s[2 * np + 1], a0, b10);
            mma::mma_16816<__half>(s[2 * np + 1], a1, b11);
        }
    }
}

// O (f32 n-tiles in o_column order) += P V of one head slot over the block's e4m3 V, P as f16
// A fragments (k16 slices of the warp's keys).
template <int kKSlices, int kNTilesO, class LayoutV>
FMHA_DEVICE void gemm_pv(float (&o)[kNTilesO][4], const uint32_t (&p)[kKSlices][4],
                         const memory::LdsmAddr<LayoutV>& v_addr) {
    static_assert(kNTilesO % 4 == 0, "V is read 32 columns at a time");
#pragma unroll
    for (int dp = 0; dp < kNTilesO / 4; ++dp) {
#pragma unroll
        for (int kk = 0; kk < kKSlices; ++kk) {
            uint32_t b[4];  // keys 0-7 | 8-15 of the slice x columns 32dp .. +15 | +16 .. +31
            mma::ldmatrix_x4_trans(b, v_addr(kk * 16, 2 * dp));
            // bytes (key 2t: columns c, c + 1; key 2t + 1: c, c + 1) -> (even column's keys, odd's)
            uint32_t even[4], odd[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t x = __byte_perm(b[i], 0, 0x3120);
                even[i] = to_f16x2<false>(x);
                odd[i] = to_f16x2<true>(x);
            }
            const uint32_t e0[2] = {even[0], even[1]}, o0[2] = {odd[0], odd[1]};
            const uint32_t e1[2] = {even[2], even[3]}, o1[2] = {odd[2], odd[3]};
            mma::mma_16816<__half>(o[4 * dp], p[kk], e0);
            mma::mma_16816<__half>(o[4 * dp + 1], p[kk], o0);
            mma::mma_16816<__half>(o[4 * dp + 2], p[kk], e1);
            mma::mma_16816<__half>(o[4 * dp + 3], p[kk], o1);
        }
    }
}

}  // namespace kv8
}  // namespace decode
}  // namespace fmha
