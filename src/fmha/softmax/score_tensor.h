// The score modifiers that read a tensor by (query row, key): the attention bias
// (ScoreMod::kBias, Params::attention_bias) and the custom mask (ScoreMod::kCustomMask,
// Params::custom_mask). Rows are a query row's index within its sequence; keys a key's.
//
// The fragment helpers take the C fragments of a key block ([kMmaM][kNTiles][4], the
// mma/wgmma accumulator layout: rows 16*mi + 8*h past this lane's first, columns 8*ni + e
// past its first, key0) and, per (mi, h), the row's pointer into the tensor (nullptr: a
// row outside the sequence, left alone: its output is never stored). Each family says
// where its rows are: one query head per tile (flash, ws) or heads packed into the rows
// (decode). Keys at or past kv_len are left alone too (the padding mask owns them).
// Reads go through the read-only path (__ldg): the bias is read once per (row, key) from
// L2 or memory, the mask's words by the 8 lanes that share them from L1.
#pragma once

#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace softmax {

// The bias row of query row `row` of sequence `batch`, head `head` (Params::attention_bias).
template <class Element>
FMHA_DEVICE const Element* bias_row(const Params& p, int batch, int head, int row) {
    return static_cast<const Element*>(p.attention_bias) + batch * p.bias_batch_stride + head * p.bias_head_stride +
           int64_t(row) * p.bias_row_stride;
}

// One key's bias.
template <class Element>
FMHA_DEVICE float bias_at(const Element* row, int key) {
    const Element x = __ldg(row + key);
    if constexpr (ElementTraits<Element>::kIsBf16) {
        return __bfloat162float(x);
    } else {
        return __half2float(x);
    }
}

// The mask bits of query row `row` of sequence `batch` (Params::custom_mask).
FMHA_DEVICE const uint32_t* custom_mask_row(const Params& p, int batch, int row) {
    return p.custom_mask + (int64_t(batch) * p.s_q_max + row) * p.custom_mask_row_words;
}

// Bit `key` of a mask row, and the word holding it shifted so that bit 0 is `key`.
FMHA_DEVICE uint32_t mask_bits_from(const uint32_t* row, int key) { return __ldg(row + (key >> 5)) >> (key & 31); }
FMHA_DEVICE bool mask_visible(const uint32_t* row, int key) { return (mask_bits_from(row, key) & 1u) != 0; }

// Walks this thread's score pairs row by row: f(row, key, s_even, s_odd) for every n8 tile of
// each of its rows whose row_of(mi, h) is not null (null: a row past the sequence), key the
// pair's first key (key0 + 8 * ni).
template <int kMmaM, int kNTiles, class RowFn, class F>
FMHA_DEVICE void for_each_row_pair(float (&s)[kMmaM][kNTiles][4], RowFn&& row_of, int key0, F&& f) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const auto row = row_of(mi, h);
            if (row == nullptr) continue;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) f(row, key0 + 8 * ni, s[mi][ni][2 * h], s[mi][ni][2 * h + 1]);
        }
    }
}

// s += mul * bias for keys below kv_len (mul: the units of s per logit unit, 1 / scale_bmm1
// for raw Q K^T scores). key0: this lane's first key.
template <class Element, int kMmaM, int kNTiles, class RowFn>
FMHA_DEVICE void apply_bias(float (&s)[kMmaM][kNTiles][4], RowFn&& row_of, int key0, int kv_len, float mul) {
    for_each_row_pair(s, row_of, key0, [&](const Element* row, int key, float& s0, float& s1) {
        if (key < kv_len) s0 = fmaf(mul, bias_at(row, key), s0);
        if (key + 1 < kv_len) s1 = fmaf(mul, bias_at(row, key + 1), s1);
    });
}

// s = -inf where the mask bit is clear, for keys below kv_len. key0 even: a lane's key pair
// shares one word (the custom mask runs with the padding kind's blocks, which start at
// multiples of the block size in every family).
template <int kMmaM, int kNTiles, class RowFn>
FMHA_DEVICE void apply_custom_mask(float (&s)[kMmaM][kNTiles][4], RowFn&& row_of, int key0, int kv_len) {
    for_each_row_pair(s, row_of, key0, [&](const uint32_t* row, int key, float& s0, float& s1) {
        if (key >= kv_len) return;
        const uint32_t bits = mask_bits_from(row, key);
        if (!(bits & 1u)) s0 = -INFINITY;
        if (!(bits & 2u)) s1 = -INFINITY;
    });
}

}  // namespace softmax
}  // namespace fmha
