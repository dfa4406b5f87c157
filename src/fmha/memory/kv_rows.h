// Where the key rows of one (sequence, KV head) live: token storage, one row every
// row_stride elements from the sequence's first token, or a paged KV cache, rows in blocks
// of a pool found through the sequence's row of the block table (params.h,
// Params::kv_block_table). The loaders (memory/gmem_tile.h TileLoader::load_keys) take the
// rows' base and, when paged, the sequence's table row from KvRows: token storage is the
// plain pointer arithmetic it always was.
//
// KvRows keeps a pointer and the sequence index in registers and reads strides, the table
// and the block size from the kernel's __grid_constant__ Params, passed to each call (so they
// stay constant-bank operands, not registers or loads): the loaders run inside the kernels'
// main loops.
#pragma once

#include <cstdint>

#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace memory {

// kIsV: V's rows (v, v_*), else K's. The Params passed to the methods must be the ones the
// rows came from (kv_rows).
template <typename Element, bool kIsV>
struct KvRows {
    const Element* base;  // token storage: key 0 of the sequence; paged: the pool; head applied
    int batch;

    static FMHA_DEVICE bool paged(const Params& p) { return p.kv_block_table != nullptr; }
    static FMHA_DEVICE int64_t row_stride(const Params& p) { return kIsV ? p.v_row_stride : p.k_row_stride; }
    static FMHA_DEVICE int64_t head_stride(const Params& p) { return kIsV ? p.v_head_stride : p.k_head_stride; }
    // Paged: elements between two blocks of the pool, and the sequence's block-table row.
    static FMHA_DEVICE int64_t block_stride(const Params& p) { return kIsV ? p.v_block_stride : p.k_block_stride; }
    FMHA_DEVICE const int* table_row(const Params& p) const {
        return p.kv_block_table + int64_t(batch) * p.kv_table_stride;
    }
};

// K's (kIsV false) or V's rows of sequence `batch`, KV head `kv_head`.
template <typename Element, bool kIsV>
FMHA_DEVICE KvRows<Element, kIsV> kv_rows(const Params& p, int batch, int kv_head) {
    const Element* t = static_cast<const Element*>(kIsV ? p.v : p.k);
    const int64_t head = int64_t(kv_head) * (kIsV ? p.v_head_stride : p.k_head_stride);
    // (the arithmetic of kv_rows_from, kept apart: the flash family's SASS stays as it was)
    const int64_t first =
        int64_t(seq_kv_offset(p, batch)) * (kIsV ? p.v_row_stride : p.k_row_stride);
    return KvRows<Element, kIsV>{t + first + head, batch};
}

// As kv_rows, the sequence's first token given (Params::kv_offsets[batch], or what the
// caller knows it to be; not used when paged).
template <typename Element, bool kIsV>
FMHA_DEVICE KvRows<Element, kIsV> kv_rows_from(const Params& p, int batch, int kv_head, int kv_offset) {
    const Element* t = static_cast<const Element*>(kIsV ? p.v : p.k);
    const int64_t head = int64_t(kv_head) * (kIsV ? p.v_head_stride : p.k_head_stride);
    const int64_t first = p.kv_block_table != nullptr ? 0 : int64_t(kv_offset) * (kIsV ? p.v_row_stride : p.k_row_stride);
    return KvRows<Element, kIsV>{t + first + head, batch};
}

template <typename Element>
FMHA_DEVICE KvRows<Element, false> key_rows(const Params& p, int batch, int kv_head) {
    return kv_rows<Element, false>(p, batch, kv_head);
}

template <typename Element>
FMHA_DEVICE KvRows<Element, true> value_rows(const Params& p, int batch, int kv_head) {
    return kv_rows<Element, true>(p, batch, kv_head);
}

}  // namespace memory
}  // namespace fmha
