// Small helpers shared by every layer of the kernel headers: element traits, integer
// arithmetic, named constants and the fast math the softmax relies on.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#define FMHA_DEVICE __device__ __forceinline__
#define FMHA_HOST_DEVICE __host__ __device__ __forceinline__

namespace fmha {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) == exp2(x * kLog2e)
constexpr float kLn2 = 0.6931471805599453f;    // ln(2): log(x) == log2(x) * kLn2
constexpr int kWarpSize = 32;
constexpr int kChunkBytes = 16;                // one cp.async / ldmatrix row / vector store
constexpr int kElemsPerChunk = 8;              // 16-bit elements in one chunk
// Dynamic shared memory one CTA may opt into on SM90 (SM80: 163 KB, SM89/SM120: 99 KB): the
// guard of the C++ tiles' static_asserts; the ws generator's SMEM_LIMIT is the same number.
constexpr int kMaxSmemPerCta = 227 * 1024;

FMHA_HOST_DEVICE constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
FMHA_HOST_DEVICE constexpr int round_up(int a, int b) { return ceil_div(a, b) * b; }
FMHA_HOST_DEVICE constexpr int min_int(int a, int b) { return a < b ? a : b; }
FMHA_HOST_DEVICE constexpr int max_int(int a, int b) { return a > b ? a : b; }

// n / d and n % d for 0 <= n < 2^31 by a fixed d >= 1 without a division instruction
// sequence (Granlund and Montgomery): with l = ceil(log2 d) and m = ceil(2^(31+l) / d) (fits
// 32 bits), n / d == umulhi(n, m) >> (l - 1); the rounding error n * (m - 2^(31+l)/d) /
// 2^(31+l) < 2^-l <= 1/d never carries past the next integer. d == 1 is the identity.
// Built on the host, passed to kernels by value.
struct FastDiv {
    uint32_t d = 1, mul = 0, shift = 0;

    FastDiv() = default;
    explicit FastDiv(int divisor) : d(static_cast<uint32_t>(divisor)) {
        if (d <= 1) return;
        uint32_t l = 0;
        while ((1ull << l) < d) ++l;
        mul = static_cast<uint32_t>(((1ull << (31 + l)) + d - 1) / d);
        shift = l - 1;
    }

    FMHA_HOST_DEVICE int div(int n) const {
        if (d == 1) return n;
#ifdef __CUDA_ARCH__
        return static_cast<int>(__umulhi(static_cast<uint32_t>(n), mul) >> shift);
#else
        return static_cast<int>(((uint64_t(static_cast<uint32_t>(n)) * mul) >> 32) >> shift);
#endif
    }
    FMHA_HOST_DEVICE int mod(int n, int q) const { return n - q * static_cast<int>(d); }  // q = div(n)
};

// Element traits: the 16-bit input types the mma.sync kernels take.
template <typename T>
struct ElementTraits;

template <>
struct ElementTraits<__half> {
    static constexpr bool kIsBf16 = false;
    // Two floats -> one register holding {lo, hi} as f16x2 (round to nearest).
    static FMHA_DEVICE uint32_t pack(float lo, float hi) {
        uint32_t r;
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
        return r;
    }
    // pack's inverse: {lo, hi} as two floats.
    static FMHA_DEVICE float2 unpack(uint32_t v);
};

template <>
struct ElementTraits<__nv_bfloat16> {
    static constexpr bool kIsBf16 = true;
    static FMHA_DEVICE uint32_t pack(float lo, float hi) {
        uint32_t r;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
        return r;
    }
    // pack's inverse: a bf16 is a float's upper half.
    static FMHA_DEVICE float2 unpack(uint32_t v) {
        return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
    }
};

template <typename T>
constexpr bool kIsSupportedElement =
    std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;

// The lane index, opaque to the compiler: values derived from it are computed where they are
// used instead of hoisted out of a persistent kernel's loops, where they held registers that a
// tight budget then spilled (epilogue/store_o_sm90.h, mma/fp8_sm90.h).
FMHA_DEVICE int opaque_lane_id() {
    int lane;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
    return lane;
}

// x, which the compiler must treat as a new value where this is called: what it derives from
// x is then not hoisted out of the enclosing loop (register budgets of a few dozen).
FMHA_DEVICE int opaque_int(int x) {
    asm volatile("" : "+r"(x));
    return x;
}

// exp2 on the special-function unit; ex2.approx(-inf) == +0, which the softmax uses
// for masked scores and for the very first rescale.
FMHA_DEVICE float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Unpack an f16x2 register (e.g. an fp16 mma accumulator) into two floats.
FMHA_DEVICE float2 unpack_half2(uint32_t v) {
    __half2 h;
    static_assert(sizeof(h) == sizeof(v), "f16x2 is one register");
    memcpy(&h, &v, sizeof(v));
    return __half22float2(h);
}

FMHA_DEVICE float2 ElementTraits<__half>::unpack(uint32_t v) { return unpack_half2(v); }

FMHA_DEVICE uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

}  // namespace fmha
