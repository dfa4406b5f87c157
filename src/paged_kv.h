// -paged-kv: the KV cache as a pool of blocks and a block table per sequence (Params's
// kv_block_table), built from the logical K and V in token storage.
#pragma once

#include <cstdint>
#include <vector>

#include "cli.h"
#include "device_buffer.h"
#include "layouts.h"
#include "params.h"

namespace fmha {

// The pool on the host: every sequence's keys in ceil(kv_len / tokens_per_block) blocks, the
// blocks of all sequences plus a quarter more (spares nobody owns, poisoned) placed in a
// random order from the seed. table[seq * table_stride + i]: the pool block holding keys
// i * tokens_per_block .. of sequence seq; -1 past the sequence's blocks.
struct PagedKv {
    int tokens_per_block = 0;
    int table_stride = 0;  // blocks of the longest sequence
    int pool_blocks = 0;
    std::vector<int> table;
    // Per pool block: the sequence that owns it and which of its blocks it is (-1: a spare).
    std::vector<int> block_seq, block_index;
};
PagedKv make_paged_kv(const Problem& p, const SeqLens& lens);

// The pool on the device, [block][K: h_kv, tokens_per_block, d][V: h_kv, tokens_per_block, dv]
// (TensorRT-LLM's layout), and the block table. Rows of a sequence's last block past its
// length hold finite noise (a kernel reads them and must mask them), the spare blocks
// kPoisonBits (e4m3: kPoisonBitsE4m3). Bytes: element_bytes(dtype) an element.
struct PagedKvTensors {
    PagedKv host;
    DeviceBuffer<uint8_t> pool;
    DeviceBuffer<int> block_table;
};

// Builds the pool from `storage`'s K and V (kv_offsets / kv_lens: device arrays) and points
// prm's K, V and block table at it.
PagedKvTensors make_paged_pool(const Problem& p, const SeqLens& lens, const QkvStorage& storage,
                               const int* kv_offsets, const int* kv_lens, Params& prm);

}  // namespace fmha
