// FlashAttention-3's FP8 dequantisation factors: Params::q_descale, k_descale or v_descale of
// (sequence b, KV head g), at [b * h_kv + g]; nullptr reads 1.
#pragma once

#include <cstdint>

#include "fmha/utils.h"
#include "params.h"

namespace fmha {

FMHA_DEVICE float descale(const float* d, const Params& p, int b, int g) {
    return d != nullptr ? __ldg(d + int64_t(b) * p.h_kv + g) : 1.f;
}

}  // namespace fmha
