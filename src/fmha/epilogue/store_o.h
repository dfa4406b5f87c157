// Epilogue: O = acc * (out_scale / l) per row, converted to the element type, staged
// through shared memory (the main loop's tiles are dead by then) so that global stores are
// coalesced 16-byte vectors. Only rows < valid_rows and columns < dv are written: rows
// past the sequence and the zero padding of dv never reach global memory.
#pragma once

#include "fmha/memory/smem_layout.h"
#include "fmha/utils.h"

namespace fmha {
namespace epilogue {

// Layout: SmemLayout of the [kBlockM, dv padded] staging tile at `smem`.
// kValidChunks: dv / 8. Contains the two barriers it needs (all threads must call it).
template <class Layout, int kValidChunks, int kThreads, typename Element, int kMmaM, int kNTilesO>
FMHA_DEVICE void store_o(const float (&o)[kMmaM][kNTilesO][4], const float (&inv)[kMmaM][2], char* smem,
                         int warp_row0, int lane, Element* gmem, int64_t row_stride, int valid_rows,
                         int tid) {
    static_assert(Layout::kChunks == kNTilesO, "one 16-byte chunk per 8-column n-tile");
    __syncthreads();  // every warp is done reading the main loop's tiles
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = warp_row0 + mi * 16 + h * 8 + lane / 4;
#pragma unroll
            for (int nt = 0; nt < kNTilesO; ++nt) {
                const uint32_t v = ElementTraits<Element>::pack(o[mi][nt][2 * h] * inv[mi][h],
                                                                o[mi][nt][2 * h + 1] * inv[mi][h]);
                *reinterpret_cast<uint32_t*>(smem + Layout::offset(row, nt) + (lane % 4) * 4) = v;
            }
        }
    }
    __syncthreads();
    constexpr int kTotal = Layout::kRows * Layout::kChunks;
#pragma unroll
    for (int it = 0; it < ceil_div(kTotal, kThreads); ++it) {
        const int idx = tid + it * kThreads;
        const int row = idx / Layout::kChunks;
        const int chunk = idx % Layout::kChunks;
        if ((kTotal % kThreads == 0 || idx < kTotal) && row < valid_rows && chunk < kValidChunks) {
            const uint4 v = *reinterpret_cast<const uint4*>(smem + Layout::offset(row, chunk));
            *reinterpret_cast<uint4*>(gmem + row * row_stride + chunk * kElemsPerChunk) = v;
        }
    }
}

}  // namespace epilogue
}  // namespace fmha
