// FP8 (e4m3) operands of the QGMMA forms (mma/wgmma_sm90.h, sm_90a): P from the f32
// accumulator of S = Q K^T into wgmma A fragments, and V made K-major in shared memory.
//
// P without moving values between lanes. The accumulator's thread (g = lane / 4, t = lane % 4)
// holds, of each 8 keys, keys 2t and 2t + 1 of rows g and g + 8; an e4m3 A fragment of k32
// wants 4 consecutive k per register (k 4t .. 4t + 3, then 16 + 4t ..). Each register takes
// the thread's own keys of two adjacent n8 tiles instead, which fixes the order of the keys
// inside every 16: k slot 4t + j holds key key_of_slot(4t + j), 2t + j for j < 2 and
// 8 + 2t + j - 2 for j >= 2. P V sums over keys, so it is the same product when V^T's k axis is
// written in that order, which costs the transpose below nothing.
//
// V^T. V lands as TMA writes it: [keys, dv] e4m3 in panels of 128 columns (rows of 128 bytes,
// row = key, its 16-byte chunk c at (c ^ key % 8) * 16: SW128; panel p at p * keys * 128).
// The B operand of P V must be K-major: [dv, keys] in panels of 128 key slots (panel q at
// q * dv * 128), SW128 alike. One ldmatrix.x4.trans, reading 16-bit elements (pairs of d),
// gives lane (r = l / 4, c = l % 4) the bytes V[2c][2r], V[2c][2r+1], V[2c+1][2r],
// V[2c+1][2r+1] of an [8 keys, 16 d] block, and the same of the block 8 keys further; two byte
// permutes make the words (V[2c][d], V[2c+1][d], V[8+2c][d], V[9+2c][d]) for d = 2r and
// 2r + 1, which are slots 4c .. 4c + 3 of rows d of V^T, and one stmatrix.x4 puts them there.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "fmha/mma/mma_sm80.h"
#include "fmha/utils.h"

namespace fmha {
namespace mma {

constexpr int kE4m3PanelCols = 128;  // e4m3 elements in one 128-byte SW128 row

// How far a QGMMA's S = Q K^T may be from the exact sum of its (exact) products, relative to
// the sum of their magnitudes: Hopper's FP8 tensor cores keep a limited number of bits of the
// sum (unlike the 16-bit HGMMA's). Measured on random inputs with outlier channels
// (tests/unit/mma/test_wgmma_fp8.cu, bench/NOTES.md §54); the driver's reference and the
// oracle let each score's P lie that far from theirs (src/reference/reference.cu).
constexpr double kQgmmaSumError = 0.001953125;  // 2^-9

// The key that k slot `slot` of a P fragment (and of V^T's rows) holds; a permutation inside
// every 16.
FMHA_HOST_DEVICE constexpr int key_of_slot(int slot) {
    const int t = (slot & 15) >> 2, j = slot & 3;
    return (slot & ~15) + (j < 2 ? 2 * t + j : 8 + 2 * t + j - 2);
}

// Four floats as e4m3 (round to nearest even, saturating at +-448), x0 in the lowest byte.
FMHA_DEVICE uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(x2, x3), __NV_SATFINITE, __NV_E4M3);
    return lo | (hi << 16);
}

// One k32 slice of P: four n8 tiles of the accumulator layout as one e4m3 A fragment.
FMHA_DEVICE void p_slice_to_e4m3(uint32_t (&frag)[4], const float (&t0)[4], const float (&t1)[4],
                                 const float (&t2)[4], const float (&t3)[4]) {
    frag[0] = pack_e4m3x4(t0[0], t0[1], t1[0], t1[1]);  // row g, slots 4t .. 4t + 3
    frag[1] = pack_e4m3x4(t0[2], t0[3], t1[2], t1[3]);  // row g + 8
    frag[2] = pack_e4m3x4(t2[0], t2[1], t3[0], t3[1]);  // row g, slots 16 + 4t ..
    frag[3] = pack_e4m3x4(t2[2], t2[3], t3[2], t3[3]);  // row g + 8
}

// A warpgroup's P [64 rows, 8 * kNTiles keys] (the f32 accumulator layout of S) as e4m3 A
// fragments, one per k32: frag[kk] covers keys 32 kk .. 32 kk + 31 in key_of_slot order.
template <int kNTiles>
FMHA_DEVICE void p_to_e4m3(uint32_t (&frag)[kNTiles / 4][4], const float (&acc)[1][kNTiles][4]) {
    static_assert(kNTiles % 4 == 0, "whole k32 slices of keys");
#pragma unroll
    for (int kk = 0; kk < kNTiles / 4; ++kk)
        p_slice_to_e4m3(frag[kk], acc[0][4 * kk], acc[0][4 * kk + 1], acc[0][4 * kk + 2], acc[0][4 * kk + 3]);
}

FMHA_DEVICE void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

// Four 8 x 8 b16 matrices, each stored transposed: lane l names row l % 8 of matrix l / 8.
FMHA_DEVICE void stmatrix_x4_trans(uint32_t smem_addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.x4.trans.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// Shared-memory address of byte (row, col) of SW128 panels of 128-byte rows, `rows` rows a panel.
FMHA_HOST_DEVICE constexpr uint32_t sw128_offset(int row, int col, int rows) {
    return uint32_t((col / kE4m3PanelCols) * rows * 128 + row * 128 +
                    ((((col % kE4m3PanelCols) / 16) ^ (row & 7)) * 16) + col % 16);
}

// V^T of one stage: raw [kBlockN keys, kDimV] into vt [kDimV, kBlockN slots], slots in
// key_of_slot order (layouts above), shared by kWarps whole warps: warp `warp` takes every
// kWarps-th unit of two 16-key steps of one 32-column block of d. Each warp's units are
// unrolled at compile time, so a step's addresses are a per-lane base, one XOR and an
// immediate: SW128 swizzles a 16-byte chunk by the row's low three bits, and raw and vt are
// 1024-byte aligned, so the swizzled chunk bits (4-6) of a lane's base only ever meet XORs
// and offsets that are whole 128-byte rows. (The runtime unit loop this replaces spent about
// 15 instructions of address arithmetic on each ldmatrix, twice the producer instructions of
// FA3's transpose: bench/NOTES.md §97; recomputing sw128_offset per step cost more, §86.)
// The caller fences (fence.proxy.async) and synchronises before a wgmma reads vt.
template <int kBlockN, int kDimV, int kWarps>
FMHA_DEVICE void transpose_v_e4m3(uint32_t raw, uint32_t vt, int warp) {
    static_assert(kBlockN % 32 == 0 && kDimV % 32 == 0, "whole pairs of 16-key steps, 32-column blocks");
    static_assert(kWarps >= 1 && kWarps <= 4, "one to four transposing warps");
    constexpr int kPairs = kBlockN / 32;  // units of two key steps in one 32-column block
    constexpr int kUnits = kPairs * (kDimV / 32);
    // (opaque_lane_id: the lane's bases are not hoisted into the caller's tile loop, whose
    // 24 registers at d = 256 then spilled its counters.)
    const uint32_t lane = uint32_t(opaque_lane_id());
    const uint32_t m = lane >> 3, r7 = lane & 7;
    // ldmatrix: this lane addresses key 16 kg + 8 (m & 1) + r7 at column 32 db + 16 (m >> 1):
    // chunk 2 (db % 4) + (m >> 1) of its row, swizzled by r7 (the key's low bits). Here db % 4 = 0;
    // a unit XORs its own in (bits 5-6).
    const uint32_t ld_base = raw + (8 * (m & 1) + r7) * 128 + (((m >> 1) ^ r7) << 4);
    // stmatrix: row 32 db + 16 (m >> 1) + 2 r7 + (m & 1) of V^T, chunk kg % 8 swizzled by the
    // row's low bits; here chunk 0, which a step XORs.
    const uint32_t st_row = 16 * (m >> 1) + 2 * r7 + (m & 1);
    const uint32_t st_base = vt + st_row * 128 + ((st_row & 7) << 4);
    const auto run = [&](auto warp_c) {
        constexpr int kW = decltype(warp_c)::value;
#pragma unroll
        for (int u = kW; u < kUnits; u += kWarps) {
            const int db = u / kPairs, kg0 = 2 * (u % kPairs);
            const uint32_t ld = (ld_base ^ uint32_t((db % 4) << 5)) + uint32_t((db / 4) * (kBlockN * 128));
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int kg = kg0 + j;
                uint32_t r[4];
                ldmatrix_x4_trans(r, ld + uint32_t(kg * (16 * 128)));
                // r[0], r[1]: keys 0-7, 8-15 of d 32 db .. + 15; r[2], r[3]: of the next 16 d.
                const uint32_t w0 = __byte_perm(r[0], r[1], 0x6420);  // row 32 db + 2 (lane / 4)
                const uint32_t w1 = __byte_perm(r[0], r[1], 0x7531);  // ... + 1
                const uint32_t w2 = __byte_perm(r[2], r[3], 0x6420);  // row 32 db + 16 + 2 (lane / 4)
                const uint32_t w3 = __byte_perm(r[2], r[3], 0x7531);
                stmatrix_x4((st_base ^ uint32_t((kg % 8) << 4)) + uint32_t(db * (32 * 128) + (kg / 8) * (kDimV * 128)),
                            w0, w1, w2, w3);
            }
        }
    };
    if (warp == 0) run(std::integral_constant<int, 0>{});
    if constexpr (kWarps > 1) if (warp == 1) run(std::integral_constant<int, 1>{});
    if constexpr (kWarps > 2) if (warp == 2) run(std::integral_constant<int, 2>{});
    if constexpr (kWarps > 3) if (warp == 3) run(std::integral_constant<int, 3>{});
}

}  // namespace mma
}  // namespace fmha
