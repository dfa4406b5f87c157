// Host code only: a .cu file because it counts with the kernels' own masks
// (fmha/mask/mask.h), which are CUDA code.
#include "metrics.h"

#include <algorithm>

#include "fmha/mask/mask.h"

namespace fmha {
namespace {

constexpr int kBytesPerElement = 2;  // the bias: fp16 and bf16 only

// The mask fields of Params that mask::Rows reads.
Params mask_params(const Problem& p) {
    Params prm;
    prm.mask = p.mask;
    prm.window = p.sliding_window_size;
    prm.chunk = p.chunked_attention_size;
    return prm;
}

// Bytes of the score modifiers' tensors a kernel reads (each entry once): the bias entries
// inside the sequences (a broadcast batch: the largest lengths), the custom mask's words.
double score_tensor_bytes(const Problem& p, const SeqLens& lens) {
    double pairs = 0.0, words = 0.0;
    for (int i = 0; i < p.b; ++i) {
        pairs += double(lens.q_lens[i]) * lens.kv_lens[i];
        words += double(lens.q_lens[i]) * ((lens.kv_lens[i] + 31) / 32);
    }
    double bytes = 0.0;
    if (p.attention_bias) {
        const double plane = p.bias_per_batch ? pairs : double(lens.s_q_max) * lens.s_kv_max;
        bytes += double(kBytesPerElement) * plane * (p.bias_per_head ? p.h : 1);
    }
    if (p.mask == MaskType::kCustom) bytes += double(sizeof(uint32_t)) * words;
    return bytes;
}

}  // namespace

int64_t allowed_pairs(const Problem& p, const SeqLens& lens, const CustomMask* custom) {
    const Params prm = mask_params(p);
    int64_t pairs = 0;
    for (int i = 0; i < p.b; ++i) {
        const int64_t lq = lens.q_lens[i], lk = lens.kv_lens[i];
        if (p.mask == MaskType::kCustom && custom != nullptr) {
            for (int r = 0; r < lens.q_lens[i]; ++r)
                for (int j = 0; j < lens.kv_lens[i]; ++j) pairs += custom->visible(i, r, j);
        } else if (p.mask == MaskType::kPadding || p.mask == MaskType::kCustom) {
            pairs += lq * lk;
        } else if (p.mask == MaskType::kCausal) {
            // Bottom-right aligned: row r sees r + lk - lq + 1 keys (lq <= lk).
            pairs += lq * lk - lq * (lq - 1) / 2;
        } else {  // local masks: row by row
            const auto rows = mask::Rows<mask::Kind::kLocal>::make(prm, lens.q_lens[i], lens.kv_lens[i]);
            for (int r = 0; r < lens.q_lens[i]; ++r) pairs += std::max(0, rows.end(r) - rows.begin(r));
        }
    }
    return pairs;
}

int64_t visible_kv_tokens(const Problem& p, const SeqLens& lens) {
    const Params prm = mask_params(p);
    int64_t tokens = 0;
    for (int i = 0; i < p.b; ++i) {
        const mask::KeyRange keys = mask::sequence_keys(prm, lens.q_lens[i], lens.kv_lens[i]);
        tokens += std::max(0, keys.last - keys.first);
    }
    return tokens;
}

double attention_flops(const Problem& p, const SeqLens& lens, const CustomMask& custom) {
    return double(allowed_pairs(p, lens, &custom)) * p.h * 2.0 * (p.d + p.dv);
}

double attention_bytes(const Problem& p, const SeqLens& lens) {
    const double in = element_bytes(p.dtype), kv = element_bytes(p.kv_dtype), out = element_bytes(p.out_dtype);
    return double(lens.q_total) * p.h * (in * p.d + out * p.dv) +                  // Q read, O written
           kv * double(visible_kv_tokens(p, lens)) * p.h_kv * (p.d + p.dv) +     // K, V once per KV head
           (p.save_softmax ? double(sizeof(float)) * lens.q_total * p.h : 0.0) +  // the LSE written
           score_tensor_bytes(p, lens);
}

}  // namespace fmha
