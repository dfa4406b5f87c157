// Attention sinks (gpt-oss): a learned logit per query head that joins every row's softmax
// denominator and nothing else, so a row can put weight "nowhere":
//   O = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sink)).
// A run-time parameter (Params::sinks, one float per query head; nullptr: off) applied once,
// where a row's sum is final: with the running max M in log2 units (the kernels' exponent
// scale, scale_bmm1 already folded in), the sink adds exp2(sink * log2(e) - M) to the sum.
// A row that saw no key keeps O = 0 (all of its weight is on the sink).
#pragma once

#include <math_constants.h>

#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace softmax {

// The sink's share of a row's denominator for query head `head`, given the row's max M
// (log2 units); 0 without sinks or for a row that saw no key.
FMHA_DEVICE float sink_term(const Params& p, int head, float row_max_log2) {
    if (p.sinks == nullptr || row_max_log2 == -CUDART_INF_F) return 0.f;
    return exp2f(fmaf(p.sinks[head], kLog2e, -row_max_log2));
}

}  // namespace softmax
}  // namespace fmha
