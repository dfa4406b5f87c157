// The tensors of the attention variants beyond Q, K, V and the mask's kind: the attention
// sinks, ALiBi slopes, the additive bias and the custom mask's bits, drawn from -seed.
#pragma once

#include <cstdint>
#include <vector>

#include "cli.h"
#include "device_buffer.h"
#include "layouts.h"
#include "params.h"

namespace fmha {

// -custom-mask on the host: bit j % 32 of bits[(seq * s_q_max + r) * row_words + j / 32]
// (Params::custom_mask's layout), random from the seed, half of them set.
struct CustomMask {
    std::vector<uint32_t> bits;
    int row_words = 0;
    int s_q_max = 0;
    bool visible(int seq, int r, int j) const {
        return (bits[(size_t(seq) * s_q_max + r) * row_words + j / 32] >> (j % 32)) & 1u;
    }
};
CustomMask make_custom_mask(const Problem& p, const SeqLens& lens);

// ALiBi slopes of h query heads as the ALiBi paper defines them (Press et al. 2022, and its
// code for head counts that are not a power of two): with n = 2^floor(log2 h), heads 0..n-1
// get 2^(-8 (i + 1) / n), the others the odd-numbered slopes of 2n heads, 2^(-4 (2 k + 1) / n).
std::vector<float> alibi_slopes(int h);

// -use-attention-sinks: one logit per query head, uniform in [-1, 3] (from negligible to
// most of a short row's weight).
std::vector<float> sink_logits(const Problem& p);

// The variants' tensors of one run; each is empty unless its flag is given.
struct VariantTensors {
    std::vector<float> sinks_host;   // -use-attention-sinks
    DeviceBuffer<float> sinks;       // Params::sinks
    DeviceBuffer<float> alibi;       // -alibi: Params::alibi_slopes, alibi_slopes(h)
    DeviceBuffer<uint16_t> bias;     // -attention-bias: Params::attention_bias, [b|1, h|1, s_q_max, s_kv_max]
    CustomMask custom_mask_host;     // -custom-mask
    DeviceBuffer<uint32_t> custom_mask;  // Params::custom_mask
};

// Allocates and fills the problem's variant tensors and points prm's fields at them.
VariantTensors make_variants(const Problem& p, const SeqLens& lens, Params& prm);

}  // namespace fmha
