// The masks' rule (params.h) for the references: whether key j is visible to query row r of
// sequence seq, the row at key position pos. Shared by the forward's and the backward's.
#pragma once

#include <cstdint>

#include "params.h"

namespace fmha {

__device__ inline bool key_visible(const Params& p, int seq, int r, int j, int pos) {
    switch (p.mask) {
        case MaskType::kPadding: return true;
        case MaskType::kCustom:
            return (p.custom_mask[(int64_t(seq) * p.s_q_max + r) * p.custom_mask_row_words + j / 32] >> (j % 32)) & 1u;
        case MaskType::kCausal: return j <= pos;
        case MaskType::kSlidingWindow: return j <= pos && pos - j < p.window;
        case MaskType::kBidirectionalWindow: return pos - j < p.window && j - pos < p.window;
        case MaskType::kChunked: return j <= pos && j / p.chunk == pos / p.chunk;
    }
    return false;
}

}  // namespace fmha
