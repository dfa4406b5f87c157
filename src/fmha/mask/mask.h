// Masks, applied to the f32 scores of one key block before the softmax. Only the blocks
// that straddle a boundary (the key tail, the causal diagonal) call this; the main loop
// knows which ones they are and runs every other block without a single compare.
//
//   padding: key j is allowed iff j < kv_len
//   causal:  additionally j <= r + (kv_len - q_len)   (bottom-right aligned diagonal)
#pragma once

#include <math_constants.h>

#include "fmha/utils.h"

namespace fmha {
namespace mask {

// One past the last key that query row r may see (may be <= 0: the row sees nothing).
template <bool kCausal>
FMHA_HOST_DEVICE int key_limit(int r, int kv_len, int q_len) {
    return kCausal ? min_int(kv_len, r + (kv_len - q_len) + 1) : kv_len;
}

// s: [kMmaM][kNTiles] C fragments of a key block. row0: query row (within the sequence)
// of this lane's first row, m-tile 0 (rows row0 + 16*mi + 8*h); col0: key index of this
// lane's first column, n-tile 0 (columns col0 + 8*ni + e).
template <bool kCausal, int kMmaM, int kNTiles>
FMHA_DEVICE void apply(float (&s)[kMmaM][kNTiles][4], int row0, int col0, int kv_len, int q_len) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int limit = key_limit<kCausal>(row0 + mi * 16 + h * 8, kv_len, q_len) - col0;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (ni * 8 + e >= limit) s[mi][ni][2 * h + e] = -CUDART_INF_F;
                }
            }
        }
    }
}

}  // namespace mask
}  // namespace fmha
