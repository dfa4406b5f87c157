// wgmma (SM90a warpgroup MMA): shared-memory matrix descriptors for the 128-byte swizzle,
// the async MMA itself (m64nNk16, f16/bf16 inputs, f32 accumulators), and the fence /
// commit / wait that order it against ordinary register use.
//
// A warpgroup (4 consecutive warps, the first at a warp index divisible by 4) issues each
// wgmma together. Accumulator D of m64nN: warp w of the group holds rows 16w..16w+15 in
// the mma.sync C layout, N/8 n-tiles x 4 floats per thread: exactly float[1][N/8][4] of
// the SM80 code, so its masks and P packing (mask/mask.h, mma/warp_gemm.h) apply as is.
// A from registers (RS) takes the mma.sync A layout: 4 f16x2 registers per k16 slice.
//
// Shared-memory operands use the canonical SW128 layouts (tiles written by TMA with
// CU_TENSOR_MAP_SWIZZLE_128B, memory/tma_sm90.h), each tile 1024-byte aligned:
//   K-major (Q as A, K as B of S = Q K^T): [rows, 64] panels of 128-byte rows;
//     SBO = 1024 (next 8 rows), LBO unused; the k16 step inside a panel adds 32 bytes.
//   MN-major (V as B of O = P V, imm-trans-b = 1): the same [keys, 64] panels;
//     SBO = 1024 (next 8 keys), LBO = panel bytes (next 64 columns of N); a k16 step
//     adds 16 keys = 2048 bytes.
#pragma once

#include <cstdint>

#include "fmha/utils.h"

namespace fmha {
namespace mma {

constexpr uint32_t kSw128AtomBytes = 1024;  // 8 rows x 128 bytes: one swizzle period

// Descriptor bits: [0,14) start >> 4, [16,30) LBO >> 4, [32,46) SBO >> 4, [62,64) swizzle
// (1 = 128B). Base offset 0: tiles start 1024-byte aligned.
FMHA_DEVICE uint64_t make_smem_desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    uint64_t desc = static_cast<uint64_t>((smem_addr & 0x3ffff) >> 4);
    desc |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3fff) << 16;
    desc |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3fff) << 32;
    desc |= static_cast<uint64_t>(1) << 62;
    return desc;
}

// `desc` moved on by `bytes` (a multiple of 16) of shared memory. Only the start-address field
// (bits 0-13, the address >> 4) moves, and a shared-memory address keeps it below 2^14, so a
// 32-bit add on the low word is the whole add: ptxas otherwise emits a 64-bit add with its carry
// for every wgmma of a block (bench/NOTES.md §96).
FMHA_DEVICE uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    return (desc & 0xffffffff00000000ull) | (static_cast<uint32_t>(desc) + (bytes >> 4));
}

// Orders earlier register writes (accumulators, A fragments) before the next wgmma.
FMHA_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
FMHA_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
FMHA_DEVICE void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving register reads or writes of `x` across a wgmma issue or
// wait (the hardware reads and writes them asynchronously in between).
FMHA_DEVICE void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
FMHA_DEVICE void fence_operand(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
template <typename T, int kN, int kK>
FMHA_DEVICE void fence_operands(T (&x)[1][kN][kK]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
#pragma unroll
        for (int j = 0; j < kK; ++j) fence_operand(x[0][i][j]);
    }
}

// Accumulator operand lists: "+f" of d[0 .. R-1].
#define FMHA_WGMMA_OP4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FMHA_WGMMA_OP16(d, i) FMHA_WGMMA_OP4(d, i), FMHA_WGMMA_OP4(d, i + 4), FMHA_WGMMA_OP4(d, i + 8), FMHA_WGMMA_OP4(d, i + 12)
#define FMHA_WGMMA_OP32(d, i) FMHA_WGMMA_OP16(d, i), FMHA_WGMMA_OP16(d, i + 16)
#define FMHA_WGMMA_OP64(d, i) FMHA_WGMMA_OP32(d, i), FMHA_WGMMA_OP32(d, i + 32)
#define FMHA_WGMMA_OP96(d, i) FMHA_WGMMA_OP64(d, i), FMHA_WGMMA_OP32(d, i + 64)
#define FMHA_WGMMA_OP128(d, i) FMHA_WGMMA_OP64(d, i), FMHA_WGMMA_OP64(d, i + 64)

// Accumulator placeholders "{%0, ..., %R-1}".
#define FMHA_WGMMA_D32 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
    "}"
#define FMHA_WGMMA_D64 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63" \
    "}"
#define FMHA_WGMMA_D96 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, " \
    "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, " \
    "%87, %88, %89, %90, %91, %92, %93, %94, %95" \
    "}"
#define FMHA_WGMMA_D128 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, " \
    "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, " \
    "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, " \
    "%123, %124, %125, %126, %127" \
    "}"

// SS: D (+)= A[64 x 16] * B[16 x N] in shared memory, A K-major, B K-major (TB "0") or
// MN-major (TB "1", imm-trans-b: the backward's dQ = dS K with K stored [keys, d], bench/
// NOTES.md §65). Operand numbers after the R accumulators: A = %R, B = %R+1, scale-d = %R+2
// (passed as strings).
#define FMHA_WGMMA_SS(N, R, A, B, S, TY, TB)                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " FMHA_WGMMA_D##R \
                 ", %" A ", %" B ", p, 1, 1, 0, " TB ";\n}\n"                                  \
                 : FMHA_WGMMA_OP##R(d, 0)                                                      \
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))

// RS: D (+)= A[64 x 16] (registers) * B[16 x N] (shared memory, MN-major: imm-trans-b 1).
// Operands after the accumulators: A = %R..%R+3, B = %R+4, scale-d = %R+5.
#define FMHA_WGMMA_RS(N, R, A0, A1, A2, A3, B, S, TY)                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " FMHA_WGMMA_D##R \
                 ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B ", p, 1, 1, 1;\n}\n"           \
                 : FMHA_WGMMA_OP##R(d, 0)                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)))

// d: the m64nN accumulator as N/2 floats. N in {64, 128, 192, 256}. kTransB: B MN-major
// (k16 steps move it by 16 of its rows), else K-major.
template <bool kBf16, int N, bool kTransB = false>
FMHA_DEVICE void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma_ss: N in {64, 128, 192, 256}");
#define FMHA_WGMMA_SS_N(N, R, A, B, S)                                          \
    if constexpr (kBf16 && kTransB) FMHA_WGMMA_SS(N, R, A, B, S, "bf16", "1"); \
    else if constexpr (kBf16) FMHA_WGMMA_SS(N, R, A, B, S, "bf16", "0");       \
    else if constexpr (kTransB) FMHA_WGMMA_SS(N, R, A, B, S, "f16", "1");      \
    else FMHA_WGMMA_SS(N, R, A, B, S, "f16", "0");
    if constexpr (N == 64) {
        FMHA_WGMMA_SS_N(64, 32, "32", "33", "34")
    } else if constexpr (N == 128) {
        FMHA_WGMMA_SS_N(128, 64, "64", "65", "66")
    } else if constexpr (N == 192) {
        FMHA_WGMMA_SS_N(192, 96, "96", "97", "98")
    } else {
        FMHA_WGMMA_SS_N(256, 128, "128", "129", "130")
    }
#undef FMHA_WGMMA_SS_N
}

template <bool kBf16, int N>
FMHA_DEVICE void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma_rs: N in {64, 128, 192, 256}");
    if constexpr (N == 64) {
        if constexpr (kBf16) FMHA_WGMMA_RS(64, 32, "32", "33", "34", "35", "36", "37", "bf16");
        else FMHA_WGMMA_RS(64, 32, "32", "33", "34", "35", "36", "37", "f16");
    } else if constexpr (N == 128) {
        if constexpr (kBf16) FMHA_WGMMA_RS(128, 64, "64", "65", "66", "67", "68", "69", "bf16");
        else FMHA_WGMMA_RS(128, 64, "64", "65", "66", "67", "68", "69", "f16");
    } else if constexpr (N == 192) {
        if constexpr (kBf16) FMHA_WGMMA_RS(192, 96, "96", "97", "98", "99", "100", "101", "bf16");
        else FMHA_WGMMA_RS(192, 96, "96", "97", "98", "99", "100", "101", "f16");
    } else {
        if constexpr (kBf16) FMHA_WGMMA_RS(256, 128, "128", "129", "130", "131", "132", "133", "bf16");
        else FMHA_WGMMA_RS(256, 128, "128", "129", "130", "131", "132", "133", "f16");
    }
}

#undef FMHA_WGMMA_SS
#undef FMHA_WGMMA_RS

// e4m3 (QGMMA): k32 per instruction, both shared operands K-major (the fp8 forms have no
// transpose immediates: V must be made K-major first, mma/fp8_sm90.h). A K-major SW128 row is
// 128 e4m3, so a k32 step adds 32 bytes, as a k16 step of the 16-bit forms does.
#define FMHA_QGMMA_SS(N, R, A, B, S)                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 " FMHA_WGMMA_D##R          \
                 ", %" A ", %" B ", p, 1, 1;\n}\n"                                                \
                 : FMHA_WGMMA_OP##R(d, 0)                                                         \
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))

// A from registers: 4 registers of 4 e4m3 each, the mma.sync m16n8k32 A layout per warp.
#define FMHA_QGMMA_RS(N, R, A0, A1, A2, A3, B, S)                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 " FMHA_WGMMA_D##R          \
                 ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B ", p, 1, 1;\n}\n"                   \
                 : FMHA_WGMMA_OP##R(d, 0)                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)))

template <int N>
FMHA_DEVICE void wgmma_ss_e4m3(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma_ss_e4m3: N in {64, 128, 192, 256}");
    if constexpr (N == 64) FMHA_QGMMA_SS(64, 32, "32", "33", "34");
    else if constexpr (N == 128) FMHA_QGMMA_SS(128, 64, "64", "65", "66");
    else if constexpr (N == 192) FMHA_QGMMA_SS(192, 96, "96", "97", "98");
    else FMHA_QGMMA_SS(256, 128, "128", "129", "130");
}

template <int N>
FMHA_DEVICE void wgmma_rs_e4m3(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma_rs_e4m3: N in {64, 128, 192, 256}");
    if constexpr (N == 64) FMHA_QGMMA_RS(64, 32, "32", "33", "34", "35", "36", "37");
    else if constexpr (N == 128) FMHA_QGMMA_RS(128, 64, "64", "65", "66", "67", "68", "69");
    else if constexpr (N == 192) FMHA_QGMMA_RS(192, 96, "96", "97", "98", "99", "100", "101");
    else FMHA_QGMMA_RS(256, 128, "128", "129", "130", "131", "132", "133");
}

#undef FMHA_QGMMA_SS
#undef FMHA_QGMMA_RS

// Flat view of a [1][N/8][4] accumulator as the N/2 floats wgmma takes.
template <int kNTiles>
FMHA_DEVICE float (&flat(float (&acc)[1][kNTiles][4]))[kNTiles * 4] {
    return reinterpret_cast<float(&)[kNTiles * 4]>(acc);
}

}  // namespace mma
}  // namespace fmha
