#include "variants.h"

#include <cmath>

#include "inputs.h"
#include "rng.h"

namespace fmha {
namespace {

// Bias entries uniform in [-kBiasRange, kBiasRange] (normal with that std under -randn).
constexpr float kBiasRange = 2.f;
constexpr float kSinkLow = -1.f, kSinkHigh = 3.f;

}  // namespace

CustomMask make_custom_mask(const Problem& p, const SeqLens& lens) {
    CustomMask m;
    m.row_words = (lens.s_kv_max + 31) / 32;
    m.s_q_max = lens.s_q_max;
    m.bits.resize(size_t(p.b) * m.s_q_max * m.row_words);
    for (size_t i = 0; i < m.bits.size(); ++i) m.bits[i] = static_cast<uint32_t>(hash(p.seed, kStreamMask, i) >> 32);
    return m;
}

std::vector<float> alibi_slopes(int h) {
    int n = 1;
    while (2 * n <= h) n *= 2;
    std::vector<float> slopes;
    for (int i = 0; i < h; ++i) {
        const double exponent = i < n ? -8.0 * (i + 1) / n : -4.0 * (2 * (i - n) + 1) / n;
        slopes.push_back(static_cast<float>(std::exp2(exponent)));
    }
    return slopes;
}

std::vector<float> sink_logits(const Problem& p) {
    std::vector<float> sinks;
    for (int head = 0; head < p.h; ++head)
        sinks.push_back(kSinkLow + (kSinkHigh - kSinkLow) * unit_float(hash(p.seed, kStreamSinks, head)));
    return sinks;
}

VariantTensors make_variants(const Problem& p, const SeqLens& lens, Params& prm) {
    VariantTensors t;
    if (p.attention_sinks) {
        t.sinks_host = sink_logits(p);
        t.sinks = to_device(t.sinks_host);
        prm.sinks = t.sinks.get();
    }
    if (p.alibi) {
        t.alibi = to_device(alibi_slopes(p.h));
        prm.alibi_slopes = t.alibi.get();
    }
    if (p.attention_bias) {  // [b|1, h|1, s_q_max, s_kv_max]
        const int64_t row = lens.s_kv_max;
        const int64_t plane = int64_t(lens.s_q_max) * row;
        const int64_t heads = p.bias_per_head ? p.h : 1;
        const int64_t n = (p.bias_per_batch ? p.b : 1) * heads * plane;
        t.bias = DeviceBuffer<uint16_t>(static_cast<size_t>(n));
        fill_flat(p.dtype, t.bias.get(), n, FillSpec{p.seed, kStreamBias, kBiasRange, 1.f, false, p.randn});
        prm.attention_bias = t.bias.get();
        prm.bias_row_stride = row;
        prm.bias_head_stride = p.bias_per_head ? plane : 0;
        prm.bias_batch_stride = p.bias_per_batch ? heads * plane : 0;
    }
    if (p.mask == MaskType::kCustom) {
        t.custom_mask_host = make_custom_mask(p, lens);
        t.custom_mask = to_device(t.custom_mask_host.bits);
        prm.custom_mask = t.custom_mask.get();
        prm.custom_mask_row_words = t.custom_mask_host.row_words;
    }
    return t;
}

}  // namespace fmha
