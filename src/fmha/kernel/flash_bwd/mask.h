// The backward's masks as compiled kinds, which keys a query sees, and the walk over query
// blocks that follows from them (flash_bwd_sm80.h and the wgmma backward's kernels).
#pragma once

#include "fmha/kernel/flash_bwd_params.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace flash_bwd {

// The masks as compiled kinds: none, causal, and the local ones (sliding and bidirectional
// windows, chunks: p.mask at run time).
enum class BwdMask { kNone, kCausal, kLocal };

// Whether key j is visible to the query at key position pos (params.h's rule).
template <BwdMask kMask>
FMHA_DEVICE bool bwd_visible(const Params& p, int pos, int j) {
    if constexpr (kMask == BwdMask::kNone) return true;
    else if constexpr (kMask == BwdMask::kCausal) return j <= pos;
    else {
        if (p.mask == MaskType::kBidirectionalWindow) return pos - j < p.window && j - pos < p.window;
        if (p.mask == MaskType::kSlidingWindow) return j <= pos && pos - j < p.window;
        return j <= pos && (j ^ pos) < p.chunk;  // kChunked: the same chunk (a power of two; pos >= j >= 0)
    }
}

// The query blocks [*m_lo, *m_hi) that hold a row seeing one of the keys [n0, n1] (n1 <
// kv_len): the rows' positions pos = r + shift bounded by the mask. Both bounds grow with
// the key block, which the deterministic order relies on.
template <BwdMask kMask, int kBlockM>
FMHA_DEVICE void bwd_query_blocks(const Params& p, int n0, int n1, int shift, int q_len, int* m_lo, int* m_hi) {
    int lo = 0, hi = q_len - 1;  // rows
    if constexpr (kMask == BwdMask::kCausal) {
        lo = n0 - shift;
    } else if constexpr (kMask == BwdMask::kLocal) {
        if (p.mask == MaskType::kBidirectionalWindow) {
            lo = n0 - p.window + 1 - shift, hi = n1 + p.window - 1 - shift;
        } else if (p.mask == MaskType::kSlidingWindow) {
            lo = n0 - shift, hi = n1 + p.window - 1 - shift;
        } else {  // kChunked: up to the end of n1's chunk
            lo = n0 - shift, hi = (n1 / p.chunk + 1) * p.chunk - 1 - shift;
        }
    }
    lo = max(lo, 0), hi = min(hi, q_len - 1);
    *m_lo = lo <= hi ? lo / kBlockM : 0;
    *m_hi = lo <= hi ? hi / kBlockM + 1 : 0;
}

// Deterministic order: key block n_block's place among the key blocks that see query block
// m_block, counted from the last of them (the highest; bwd_query_blocks' bounds grow with the
// key block, so they are a range and a binary search finds its top).
template <BwdMask kMask, int kBlockM, int kBlockN>
FMHA_DEVICE int dq_turn(const Params& p, int n_block, int m_block, int kv_len, int q_len, int shift) {
    int lo = n_block, hi = ceil_div(kv_len, kBlockN) - 1;
    if constexpr (kMask == BwdMask::kNone) {
        return hi - lo;  // every key block sees every row
    } else {
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2, mid0 = mid * kBlockN;
            int m_lo, m_hi;
            bwd_query_blocks<kMask, kBlockM>(p, mid0, min(mid0 + kBlockN, kv_len) - 1, shift, q_len, &m_lo, &m_hi);
            if (m_lo <= m_block) lo = mid;
            else hi = mid - 1;
        }
        return lo - n_block;
    }
}

}  // namespace flash_bwd
}  // namespace fmha
