// Softmax statistics (-save-softmax): each query row's log-sum-exp, written where the row's
// sum is final (the same places as the sink term), to Params::softmax_lse. The kernels
// keep a row as (M, l): M the running max in log2 units rounded up to an integer (e4m3: the
// exact running max), l the sum
// of exp2(logit * log2(e) - M), the sink's share included; then
//   LSE = ln(sum_j exp(logit_j)) = (M + log2(l)) * ln(2).
// Only the LSE is stored: (M, l) is one of many pairs with the same LSE (M is rounded, not
// the row's max), so a separate max and sum would not mean what their names say.
// A run-time parameter (nullptr: off) that costs the epilogue one branch, not a variant the
// kernels are compiled for.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace softmax {

// ln(2^M * l); -inf for a row that saw no key (l == 0).
FMHA_DEVICE float row_lse(float row_max_log2, float l) {
    return l > 0.f ? (row_max_log2 + log2f(l)) * kLn2 : -CUDART_INF_F;
}

// Writes row `row` (within its sequence) of (seq, head) when the run asks for the stats.
FMHA_DEVICE void store_lse(const Params& p, int seq, int head, int row, float row_max_log2, float l) {
    if (p.softmax_lse == nullptr) return;
    p.softmax_lse[(int64_t(seq) * p.h + head) * p.s_q_max + row] = row_lse(row_max_log2, l);
}

}  // namespace softmax
}  // namespace fmha
