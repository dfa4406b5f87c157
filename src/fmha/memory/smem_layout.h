// Shared-memory tile layout: a row-major [kRows, kCols] tile of 16-bit elements stored as
// 16-byte chunks, arranged so that ldmatrix (8 consecutive rows, one chunk column) and
// cp.async (consecutive chunks of a row) are both free of bank conflicts.
//
// Chunks per row C = kCols / 8. The 8 rows an ldmatrix phase reads must land in 8
// different 16-byte bank groups of a 128-byte line:
//   C % 8 == 0  -> chunk ^= row & 7           (XOR swizzle inside each 8-chunk group)
//   C == 4      -> chunk ^= (row >> 1) & 3    (two rows share a 128-byte line)
//   C == 2      -> chunk ^= (row >> 2) & 1    (four rows share a line)
//   otherwise   -> no swizzle, row pitch padded to an odd number of chunks (C | 1)
// Every swizzle above depends only on (row mod 8), so tiles addressed from row bases that
// are multiples of 8 see the same per-lane pattern; the helpers below rely on that.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace memory {

template <int kRows_, int kCols_>
struct SmemLayout {
    static constexpr int kRows = kRows_;
    static constexpr int kCols = kCols_;
    static constexpr int kChunks = kCols / kElemsPerChunk;  // logical chunks per row
    static_assert(kCols % kElemsPerChunk == 0, "rows are whole 16-byte chunks");
    static_assert(kRows % 8 == 0, "ldmatrix reads rows in groups of 8");

    // Swizzle group: how many chunks are permuted among themselves (1 = none).
    static constexpr int kGroup = kChunks % 8 == 0 ? 8 : (kChunks == 4 ? 4 : (kChunks == 2 ? 2 : 1));
    static constexpr int kShift = kGroup == 8 ? 0 : (kGroup == 4 ? 1 : (kGroup == 2 ? 2 : 0));
    static constexpr int kPitch = kGroup > 1 ? kChunks : (kChunks | 1);  // chunks per smem row
    static constexpr int kRowBytes = kPitch * kChunkBytes;
    static constexpr int kBytes = kRows * kRowBytes;

    static FMHA_HOST_DEVICE int xor_mask(int row) { return (row >> kShift) & (kGroup - 1); }

    // Byte offset of logical (row, chunk).
    static FMHA_HOST_DEVICE uint32_t offset(int row, int chunk) {
        return static_cast<uint32_t>(row * kRowBytes + (chunk ^ xor_mask(row)) * kChunkBytes);
    }
};

// Per-lane address helper for ldmatrix.x4 over 16x16 blocks of a SmemLayout.
//
// Lane l supplies the address of row (r0 + lane_row), chunk (c0 + lane_chunk) with r0 a
// multiple of 8 and c0 even, both compile-time in the unrolled loops. Splitting c0 into
// its swizzle-group part (a plain add) and its in-group part (an XOR with a per-lane
// constant) leaves one XOR per address; the rest folds into ldmatrix's immediate:
//   phys_chunk = (c0 & ~(G-1)) + ((c0 & (G-1)) ^ (lane_chunk ^ xor_mask(lane_row)))
// Two registers per operand (the per-variant addresses cost G/2 each and spill at d=128).
template <class Layout>
struct LdsmAddr {
    uint32_t base;  // smem base + lane_row's byte offset
    uint32_t z16;   // (lane_chunk ^ xor_mask(lane_row)) * 16

    FMHA_DEVICE void init(uint32_t smem_base, int lane_row, int lane_chunk) {
        base = smem_base + static_cast<uint32_t>(lane_row * Layout::kRowBytes);
        z16 = static_cast<uint32_t>((lane_chunk ^ Layout::xor_mask(lane_row)) * kChunkBytes);
    }

    // Shared address for the 16x16 block at logical row r0, chunk c0.
    FMHA_DEVICE uint32_t operator()(int r0, int c0) const {
        constexpr int kG = Layout::kGroup;
        const int in_group = kG > 1 ? (c0 & (kG - 1)) : 0;
        const int group_base = c0 - in_group;
        return base + ((static_cast<uint32_t>(in_group * kChunkBytes)) ^ z16) +
               static_cast<uint32_t>(r0 * Layout::kRowBytes + group_base * kChunkBytes);
    }
};

}  // namespace memory
}  // namespace fmha
