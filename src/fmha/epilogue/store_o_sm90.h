// SM90 epilogue: O = acc * (out_scale / l) per row, converted and stored straight from
// the wgmma accumulator layout with one predicate per row. Rows at or past the sequence's
// q_len are never written (a TMA store of the whole tile would spill into the next
// sequence of a packed batch), nor columns past dv.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace epilogue {

// o: [1][kNTilesO][4] accumulator of this thread (rows row_g and row_g + 8 relative to
// `gmem`, columns 8*nt + 2*(lane%4) + {0,1}); rows >= valid_rows are skipped, and so are the
// n8 tiles from kNTilesOut on (zero-fill columns past dv).
template <typename Element, int kNTilesOut, int kNTilesO>
FMHA_DEVICE void store_o_rows(const float (&o)[1][kNTilesO][4], const float (&inv)[2], Element* gmem,
                              int64_t row_stride, int row_g, int lane, int valid_rows) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row_g + 8 * h;
        if (row >= valid_rows) continue;
        static_assert(kNTilesOut <= kNTilesO, "stores past the accumulator");
        Element* dst = gmem + row * row_stride + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < kNTilesOut; ++nt) {
            *reinterpret_cast<uint32_t*>(dst + 8 * nt) =
                ElementTraits<Element>::pack(o[0][nt][2 * h] * inv[h], o[0][nt][2 * h + 1] * inv[h]);
        }
    }
}

}  // namespace epilogue
}  // namespace fmha
