// The block of query rows one CTA of the SM80-style forward kernels (flash_sm80, qmma) works
// on: (sequence, head, m block) from the static grid, and the lengths and offsets the kernels
// read for it.
#pragma once

#include <cstdint>

#include "fmha/sched/tile_scheduler.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace kernel {

struct RowTile {
    sched::Tile tile;  // batch, head, m_block
    int q_len;         // the sequence's query rows
    int m0;            // the tile's first query row; at or past q_len: the tile holds none
    // Set by locate(), once the tile holds rows:
    int kv_len;        // the sequence's keys
    int q_off;         // the sequence's first row of Q and O
    int kv_head;
    int q_rows;        // the tile's rows in the sequence

    // The rest of a tile that holds rows (m0 < q_len). Apart from row_tile so that a tile
    // without rows returns before these loads.
    template <int kBlockM>
    FMHA_DEVICE void locate(const Params& p) {
        kv_len = seq_kv_len(p, tile.batch);
        q_off = seq_q_offset(p, tile.batch);
        kv_head = tile.head / (p.h / p.h_kv);
        q_rows = min_int(q_len - m0, kBlockM);
    }

    // The tile's first row of Q.
    template <typename Element>
    FMHA_DEVICE const Element* q(const Params& p) const {
        return static_cast<const Element*>(p.q) + static_cast<int64_t>(q_off + m0) * p.q_row_stride +
               static_cast<int64_t>(tile.head) * p.q_head_stride;
    }
};

// This CTA's tile of kBlockM rows: the kernel returns where m0 >= q_len, else calls locate().
template <int kBlockM, bool kCausal>
FMHA_DEVICE RowTile row_tile(const Params& p) {
    RowTile t;
    t.tile = sched::static_tile<kCausal>();
    t.q_len = seq_q_len(p, t.tile.batch);
    t.m0 = t.tile.m_block * kBlockM;
    return t;
}

}  // namespace kernel
}  // namespace fmha
