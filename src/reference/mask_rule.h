// The references' rules (params.h), shared by the forward's and the backward's: whether key
// j is visible to query row r of sequence seq, the row at key position pos; and the logit a
// score becomes (scale, softcap, ALiBi).
#pragma once

#include <cmath>
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

// The logit of score qk (q . k) of query head `head` at key position pos and key j, and its
// derivative in the scaled score (the backward's: softcap's 1 - tanh^2).
struct Logit {
    double x, slope;
};
__device__ inline Logit logit(const Params& p, int head, int pos, int j, double qk) {
    Logit l{qk * p.scale_bmm1, 1.0};
    if (p.softcap > 0.f) {
        const double t = tanh(l.x / p.softcap);
        l.x = p.softcap * t, l.slope = 1.0 - t * t;
    }
    if (p.alibi_slopes != nullptr) l.x -= double(p.alibi_slopes[head]) * fabs(double(pos - j));
    return l;
}

}  // namespace fmha
