// A sequence's lengths and first tokens. With Params::uniform_lengths they follow from the
// sequence's index, so the C API launches no kernel to write them; otherwise they are read
// from Params' arrays (var-len, seqused_k, sequences not back to back).
#pragma once

#include "fmha/utils.h"
#include "params.h"

namespace fmha {

FMHA_DEVICE int seq_q_len(const Params& p, int b) { return p.uniform_lengths ? p.s_q_max : p.q_lens[b]; }

FMHA_DEVICE int seq_kv_len(const Params& p, int b) { return p.uniform_lengths ? p.s_kv_max : p.kv_lens[b]; }

FMHA_DEVICE int seq_q_offset(const Params& p, int b) { return p.uniform_lengths ? b * p.s_q_max : p.q_offsets[b]; }

// 0 for a paged cache (its tokens are found through the block table).
FMHA_DEVICE int seq_kv_offset(const Params& p, int b) {
    return p.kv_block_table != nullptr ? 0 : p.uniform_lengths ? b * p.s_kv_max : p.kv_offsets[b];
}

}  // namespace fmha
