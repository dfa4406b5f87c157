// Masks as a visible key range per query row, [begin(r), end(r)), applied to the f32 scores
// of the key blocks that straddle a range boundary before the softmax. The main loops know
// which blocks those are (mask::blocks) and run every other block without a compare, and
// skip the blocks no row of the tile sees (causal: above the diagonal; local: also below
// the window or the chunk).
//
// With p = r + (kv_len - q_len) (bottom-right aligned, MaskType in params.h):
//   kPadding  [0, kv_len)
//   kCausal   [0, min(kv_len, p + 1))
//   kLocal    [max(0, p - left, floor(p / chunk) * chunk), min(kv_len, p + 1 + right))
//     sliding window W:        left = W - 1, right = 0,     no chunk
//     bidirectional window W:  left = W - 1, right = W - 1, no chunk
//     chunked C:               no left limit, right = 0,    chunk C
// begin and end never decrease with r, so a tile's first and last rows bound its range.
#pragma once

#include <math_constants.h>

#include <type_traits>

#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace mask {

// The compile-time mask of a kernel instantiation (kernel::with_mask picks it).
enum class Kind : int { kPadding = 0, kCausal = 1, kLocal = 2 };

// kCustom: the padding kind's blocks, its bits a score modifier (softmax/score_tensor.h).
FMHA_HOST_DEVICE constexpr Kind kind_of(MaskType m) {
    return m == MaskType::kPadding || m == MaskType::kCustom ? Kind::kPadding
           : m == MaskType::kCausal                          ? Kind::kCausal
                                                             : Kind::kLocal;
}

// The visible key range of the query rows of one sequence.
template <Kind K>
struct Rows {
    int kv_len;
    int shift;        // kv_len - q_len: row r sits at key position r + shift
    int left, right;  // kLocal: keys before / after the position a row may see
    int chunk_log2;   // kLocal: chunk size log2; 31 is no chunk (p >> 31 == 0 for p >= 0)

    FMHA_HOST_DEVICE static Rows make(const Params& p, int q_len, int kv_len) {
        Rows m;
        m.kv_len = kv_len;
        m.shift = kv_len - q_len;
        m.left = m.right = 0;
        m.chunk_log2 = 31;
        if constexpr (K == Kind::kLocal) {  // the other kinds read nothing more of Params
            m.left = p.mask == MaskType::kChunked ? kv_len : p.window - 1;
            m.right = p.mask == MaskType::kBidirectionalWindow ? p.window - 1 : 0;
            if (p.mask == MaskType::kChunked) {
                m.chunk_log2 = 0;
                while ((1 << m.chunk_log2) < p.chunk && m.chunk_log2 < 30) ++m.chunk_log2;
            }
        }
        return m;
    }

    // One past the last key row r sees (<= begin(r): the row sees nothing).
    FMHA_HOST_DEVICE int end(int r) const {
        if constexpr (K == Kind::kPadding) return kv_len;
        if constexpr (K == Kind::kCausal) return min_int(kv_len, r + shift + 1);
        return min_int(kv_len, r + shift + 1 + right);
    }
    // The first key row r sees (>= 0).
    FMHA_HOST_DEVICE int begin(int r) const {
        if constexpr (K != Kind::kLocal) return 0;
        const int pos = r + shift;
        return max_int(max_int(0, pos - left), pos < 0 ? 0 : (pos >> chunk_log2) << chunk_log2);
    }
};

// The keys some query row of a sequence sees, [first, last) (first >= last: none): what a
// kernel that splits a sequence's keys across CTAs (decode) divides. Run-time mask.
struct KeyRange {
    int first, last;
};
template <Kind K>
FMHA_HOST_DEVICE KeyRange sequence_keys(const Params& p, int q_len, int kv_len) {
    if (K != Kind::kLocal || q_len < 1) return KeyRange{0, kv_len};
    const auto rows = Rows<Kind::kLocal>::make(p, q_len, kv_len);
    return KeyRange{rows.begin(0), rows.end(q_len - 1)};
}
// The same for a run-time mask.
FMHA_HOST_DEVICE KeyRange sequence_keys(const Params& p, int q_len, int kv_len) {
    return kind_of(p.mask) == Kind::kLocal ? sequence_keys<Kind::kLocal>(p, q_len, kv_len) : KeyRange{0, kv_len};
}

// An upper bound of sequence_keys' length over the sequences of a problem: s_kv_max, or
// for a local mask the s_q_max rows' window (W - 1 keys before the first row's position;
// the bidirectional one sees no further than kv_len) or chunk (C - 1 keys before it).
FMHA_HOST_DEVICE int key_span_max(const Params& p) {
    if (kind_of(p.mask) != Kind::kLocal) return p.s_kv_max;
    const int64_t before = p.mask == MaskType::kChunked ? int64_t(p.chunk) - 1 : int64_t(p.window) - 1;
    const int64_t span = int64_t(p.s_q_max) + before;
    return span < p.s_kv_max ? static_cast<int>(span) : p.s_kv_max;
}

// The key blocks (kBlockN keys each) a tile of rows [r_first, r_last] visits, [begin, end),
// and of those the ones every row sees whole, [full_begin, full_end) (full_begin ==
// full_end: none). Every visited block outside the full ones needs the mask.
struct Blocks {
    int begin, end, full_begin, full_end;
    FMHA_HOST_DEVICE int count() const { return end - begin; }
    FMHA_HOST_DEVICE bool masked(int nb) const { return nb >= full_end || nb < full_begin; }
};

template <Kind K>
FMHA_HOST_DEVICE Blocks blocks(const Rows<K>& rows, int r_first, int r_last, int block_n) {
    Blocks b;
    const int key_begin = rows.begin(r_first), key_end = rows.end(r_last);
    if (key_end <= key_begin) return Blocks{0, 0, 0, 0};
    b.begin = key_begin / block_n;
    b.end = ceil_div(key_end, block_n);
    b.full_begin = max_int(b.begin, ceil_div(rows.begin(r_last), block_n));
    b.full_end = min_int(b.end, max_int(0, rows.end(r_first)) / block_n);
    if (b.full_end <= b.full_begin) b.full_begin = b.full_end = b.begin;  // none: all masked
    return b;
}

// s: [kMmaM][kNTiles] C fragments of a key block. row0: query row (within the sequence)
// of this lane's first row, m-tile 0 (rows row0 + 16*mi + 8*h); col0: key index of this
// lane's first column, n-tile 0 (columns col0 + 8*ni + e).
template <Kind K, int kMmaM, int kNTiles>
FMHA_DEVICE void apply(float (&s)[kMmaM][kNTiles][4], const Rows<K>& rows, int row0, int col0) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row0 + mi * 16 + h * 8;
            const int hi = rows.end(r) - col0;
            const int lo = rows.begin(r) - col0;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int c = ni * 8 + e;
                    if (c >= hi || (K == Kind::kLocal && c < lo)) s[mi][ni][2 * h + e] = -CUDART_INF_F;
                }
            }
        }
    }
}

}  // namespace mask
}  // namespace fmha
