// ws family: a consumer warpgroup's end of a tile. O is normalised, the LSE stored, and O
// leaves one of two ways (Traits::kStoreOTma):
//   staged: stmatrix into the [kBlockM, dv] buffer (its 64-row slab), one thread stores the
//     slab with TMA. Where the buffer lies over the V ring (kStageOverV), every consumer's last
//     P V of the tile must have read the ring first (a barrier of all consumers), and the
//     producer's next V loads wait for the stores to have read it (the O-free mbarrier).
//   from registers: one predicated store per row; for a slab with rows past its sequence's
//     end (a TMA store would write the next sequence's rows) and the three-consumer tiles.
#pragma once

#include <cstdint>

#include "fmha/epilogue/store_o_sm90.h"
#include "fmha/kernel/ws/consumer.h"
#include "fmha/kernel/ws/tile_work.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/kernel/ws/warpgroup.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/softmax/online_softmax_sm90.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace ws {

// The warpgroup's 64-row slab (rows row0.. of the sequence, all inside it) through shared
// memory and one TMA store; o_in_v: the buffer is over the V ring, handed back on o_free once
// the store has read it.
template <class Tr>
FMHA_DEVICE void store_o_staged(const float (&acc_o)[1][Tr::kNTilesO][4], const float (&inv)[2],
                                const TmaMaps& maps, const ConsumerThread<Tr>& c, const TileWork& w, int row0,
                                bool o_in_v) {
    // The slab's buffer is free once the last store from it has read it.
    const uint32_t slab = c.smem.o + c.consumer * (Tr::kSmemO / Tr::kConsumerWarpgroups);
    if (Tr::kOBeside && c.wg_tid == 0) memory::bulk_wait_read<0>();
    if constexpr (Tr::kOBeside) warpgroup_barrier(c.consumer);
    epilogue::stage_o_rows<typename Tr::Element>(acc_o, inv, slab, c.wg_tid / kWarpSize);
    memory::fence_proxy_async_smem();
    warpgroup_barrier(c.consumer);
    if (c.wg_tid == 0) {
        memory::tma_store_head_tile<Tr::kHeadDimV, Tr::kPanelBytesO>(slab, &maps.o, w.q_off + row0, w.head);
        memory::bulk_commit();
        if (o_in_v) {
            memory::bulk_wait_read<0>();
            memory::mbar_arrive(c.smem.o_free());
        }
    }
}

// Normalise O, store the LSE and O. n_blocks == 0: O is zeros, kept in registers (a tile
// without key blocks loaded nothing into the V ring).
template <class Tr, bool kStageOverV>
FMHA_DEVICE void store_tile(const float (&acc_o)[1][Tr::kNTilesO][4], softmax::OnlineSoftmaxSm90& softmax,
                            const Params& p, const TmaMaps& maps, const ConsumerThread<Tr>& c, const TileWork& w,
                            int row0) {
    using Element = typename Tr::Element;
    float inv[2];
    softmax.finalize(inv, p.scale_softmax * p.scale_bmm2, p, w.head);
    softmax.store_lse(p, w.batch, w.head, row0 + c.row_g, w.q_len, c.lane);
    const bool o_in_v = kStageOverV && w.n_blocks > 0;
    if (o_in_v) consumers_barrier<Tr::kConsumerWarpgroups>();
    if ((Tr::kOBeside || o_in_v) && row0 + kWarpgroupRows <= w.q_len) {
        store_o_staged<Tr>(acc_o, inv, maps, c, w, row0, o_in_v);
    } else {
        Element* o = static_cast<Element*>(p.o) + static_cast<int64_t>(w.q_off + row0) * p.o_row_stride +
                     static_cast<int64_t>(w.head) * p.o_head_stride;
        epilogue::store_o_rows<Element, Tr::kNTilesOut>(acc_o, inv, o, p.o_row_stride, c.row_g, c.lane,
                                                        w.q_len - row0);
        if (o_in_v && c.wg_tid == 0) memory::mbar_arrive(c.smem.o_free());
    }
}

// After the last tile: the shared memory outlives the TMA stores from it.
template <class Tr, bool kStageOverV>
FMHA_DEVICE void drain_stores(const ConsumerThread<Tr>& c) {
    if ((Tr::kOBeside || kStageOverV) && c.wg_tid == 0) memory::bulk_wait<0>();
}

}  // namespace ws
}  // namespace fmha
