// The work of one launch, for the Elapsed line's Tflop/s and GB/s: the (query, key) pairs the
// mask leaves and the bytes a kernel must move at the least.
#pragma once

#include <cstdint>

#include "cli.h"
#include "layouts.h"
#include "variants.h"

namespace fmha {

// (query, key) pairs the mask leaves, summed over sequences (for Tflop/s); `custom` is the
// mask's bits when p.mask is kCustom.
int64_t allowed_pairs(const Problem& p, const SeqLens& lens, const CustomMask* custom = nullptr);

// Keys some query row of its sequence sees, summed over sequences: the K/V rows a kernel
// reads once per KV head (GB/s). kv_total unless a local mask leaves keys unseen.
int64_t visible_kv_tokens(const Problem& p, const SeqLens& lens);

// Floating-point operations of the two matmuls over the allowed pairs.
double attention_flops(const Problem& p, const SeqLens& lens, const CustomMask& custom);

// Bytes read and written once each: Q and O, K and V once per KV head over the visible keys,
// the LSE (-save-softmax), the bias and the custom mask's words.
double attention_bytes(const Problem& p, const SeqLens& lens);

}  // namespace fmha
