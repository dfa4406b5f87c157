// A sequence's first token and length, from Params' arrays where given (fmha.exe's, or
// cu_seqlens / seqused_k straight from the C API's caller) and from its index where not: no
// kernel has to write them first, so a call is one launch. See Params::q_offsets.
#pragma once

#include "fmha/utils.h"
#include "params.h"

namespace fmha {

FMHA_HOST_DEVICE int seq_q_offset(const Params& p, int b) { return p.q_offsets != nullptr ? p.q_offsets[b] : b * p.q_step; }

FMHA_HOST_DEVICE int seq_q_len(const Params& p, int b) {
    return p.q_lens != nullptr ? p.q_lens[b] : p.q_offsets != nullptr ? p.q_offsets[b + 1] - p.q_offsets[b] : p.s_q_max;
}

// 0 for a paged cache (its tokens are found through the block table).
FMHA_HOST_DEVICE int seq_kv_offset(const Params& p, int b) {
    return p.kv_block_table != nullptr ? 0 : p.kv_offsets != nullptr ? p.kv_offsets[b] : b * p.kv_step;
}

FMHA_HOST_DEVICE int seq_kv_len(const Params& p, int b) {
    return p.kv_lens != nullptr      ? p.kv_lens[b]
           : p.kv_offsets != nullptr ? p.kv_offsets[b + 1] - p.kv_offsets[b]
                                     : p.s_kv_max;
}

}  // namespace fmha
