// SM90 epilogue: O = acc * (out_scale / l) per row, converted to the element type, then
//   stage_o_rows: into shared memory in the head-tile layout (64-column panels, 128-byte
//     swizzle), for a TMA store of a slab whose rows all belong to the sequence;
//   store_o_rows: straight from the wgmma accumulator layout to global memory with one
//     predicate per row, for a slab that ends past the sequence's q_len (a TMA store of the
//     whole slab would spill into the next sequence of a packed batch);
//   store_o_rows_e4m3: the same for e4m3 O, every slab.
// Neither writes columns past dv to global memory.
#pragma once

#include <cuda_fp8.h>

#include "fmha/utils.h"

namespace fmha {
namespace epilogue {

// The pair of this thread's n8 tile nt in row half h (rows row_g, row_g + 8), scaled by the
// row's inv and packed: what both stores write.
template <typename Element, int kNTilesO>
FMHA_DEVICE uint32_t scaled_pair(const float (&o)[1][kNTilesO][4], const float (&inv)[2], int nt, int h) {
    return ElementTraits<Element>::pack(o[0][nt][2 * h] * inv[h], o[0][nt][2 * h + 1] * inv[h]);
}

// o: [1][kNTilesO][4] accumulator of this thread (rows row_g and row_g + 8 relative to
// `gmem`, columns 8*nt + 2*(lane%4) + {0,1}); rows >= valid_rows are skipped, and so are the
// n8 tiles from kNTilesOut on (zero-fill columns past dv).
template <typename Element, int kNTilesOut, int kNTilesO>
FMHA_DEVICE void store_o_rows(const float (&o)[1][kNTilesO][4], const float (&inv)[2], Element* gmem,
                              int64_t row_stride, int row_g, int lane, int valid_rows) {
    static_assert(kNTilesOut <= kNTilesO, "stores past the accumulator");
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row_g + 8 * h;
        if (row >= valid_rows) continue;
        Element* dst = gmem + row * row_stride + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < kNTilesOut; ++nt) {
            *reinterpret_cast<uint32_t*>(dst + 8 * nt) = scaled_pair<Element>(o, inv, nt, h);
        }
    }
}

// store_o_rows for e4m3 O (Params::o_e4m3): rounded to nearest even, saturated at +-448. A
// thread's pairs of two adjacent n8 tiles and its quad partner's (lane ^ 1) make 4 contiguous
// bytes, so a quad stores 16 contiguous bytes of a row per two tiles, 4 bytes a lane: even
// lanes columns 8 nt + 2 t .. + 3, odd lanes 8 nt + 8 + 2 (t - 1) .. + 3. Every lane shuffles
// (rows past valid_rows only skip the store).
template <int kNTilesOut, int kNTilesO>
FMHA_DEVICE void store_o_rows_e4m3(const float (&o)[1][kNTilesO][4], const float (&inv)[2], __nv_fp8_e4m3* gmem,
                                   int64_t row_stride, int row_g, int lane, int valid_rows) {
    static_assert(kNTilesOut <= kNTilesO && kNTilesOut % 2 == 0, "whole pairs of n8 tiles of the accumulator");
    const int t = lane % 4;
    const bool odd = t % 2 != 0;
    const auto pair = [&](int nt, int h) -> uint32_t {
        return __nv_cvt_float2_to_fp8x2(make_float2(o[0][nt][2 * h] * inv[h], o[0][nt][2 * h + 1] * inv[h]),
                                        __NV_SATFINITE, __NV_E4M3);
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row_g + 8 * h;
        __nv_fp8_e4m3* dst = gmem + row * row_stride + (odd ? 8 + 2 * (t - 1) : 2 * t);
#pragma unroll
        for (int nt = 0; nt < kNTilesOut; nt += 2) {
            const uint32_t a = pair(nt, h), b = pair(nt + 1, h);
            const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);  // the pair the partner stores
            const uint32_t word = odd ? (got | (b << 16)) : (a | (got << 16));
            if (row < valid_rows) *reinterpret_cast<uint32_t*>(dst + 8 * nt) = word;
        }
    }
}

// The warpgroup's [64, 8 * kNTilesO] slab into shared memory at `smem` (1024-byte aligned):
// panel c (8 n8 tiles) at smem + c * 64 * 128, row r at + r * 128, its 16-byte chunk k at
// + ((k ^ r % 8) * 16), the SW128 layout a TMA store of a head tile reads. One stmatrix.x4 per
// pair of n8 tiles: matrices (rows 0-7, tile nt), (8-15, nt), (0-7, nt + 1), (8-15, nt + 1) of
// this warp's 16 rows, each lane giving the address of one matrix row.
template <typename Element, int kNTilesO>
FMHA_DEVICE void stage_o_rows(const float (&o)[1][kNTilesO][4], const float (&inv)[2], uint32_t smem, int warp) {
    static_assert(kNTilesO % 8 == 0, "whole 64-column panels");
    // The lane's chunk in the pair (nt even) is nt % 8 + lane / 16, so its swizzled chunk is
    // (nt % 8) ^ swz: four addresses serve every panel (the panel offset is an immediate).
    // The lane index is read here (opaque_lane_id): the addresses are loop-invariant in a
    // persistent kernel, and hoisted out of its tile loop they held 4 registers through the
    // main loop, which spilled at d = 256.
    const int lane_now = opaque_lane_id();
    const int row = warp * 16 + (lane_now / 8 % 2) * 8 + lane_now % 8;  // the matrix row this lane addresses
    const int swz = (lane_now / 16) ^ (lane_now % 8);
    uint32_t addr4[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) addr4[j] = smem + row * 128 + (((2 * j) ^ swz) * 16);
#pragma unroll
    for (int nt = 0; nt < kNTilesO; nt += 2) {
        const uint32_t addr = addr4[nt % 8 / 2] + (nt / 8) * (64 * 128);
        asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                     "r"(scaled_pair<Element>(o, inv, nt, 0)), "r"(scaled_pair<Element>(o, inv, nt, 1)),
                     "r"(scaled_pair<Element>(o, inv, nt + 1, 0)), "r"(scaled_pair<Element>(o, inv, nt + 1, 1))
                     : "memory");
    }
}

}  // namespace epilogue
}  // namespace fmha
