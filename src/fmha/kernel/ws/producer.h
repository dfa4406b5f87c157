// ws family: the producer warpgroup (setmaxnreg down to Traits::kProducerRegs). Per tile it
// issues TMA loads of Q once, then K[j] and V[j] for every key block into a kStages-deep ring,
// from the last block down, the order the consumers take them; "full" mbarriers complete on
// the TMA bytes, "empty" ones on one arrival per consumer warp. Q has its own full/empty pair,
// so the next tile's Q loads as soon as every consumer has issued its last Q K^T of this one.
// Token storage: one thread walks the tiles and issues the copies. A paged KV cache: one warp
// walks them; lane 0 issues Q's copies, and every lane looks up one box's block and copies
// that box. Two loops, so that each fits the producer's registers.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "fmha/kernel/ws/smem.h"
#include "fmha/kernel/ws/tile_work.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/kernel/ws/warpgroup.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace ws {

// The tile's K and V blocks into the ring from position kv_iter (it runs on across tiles);
// returns the position after them. q_iter counts the tiles with key blocks so far, this one
// included.
template <class Tr, bool kStageOverV, bool kPaged>
FMHA_DEVICE int load_kv_blocks(const Params& p, const TmaMaps& maps, const Smem<Tr>& smem, const TileWork& w,
                               int kv_iter, int q_iter, bool leader, int lane) {
    constexpr int S = Tr::kStages;
    for (int it = 0; it < w.n_blocks; ++it, ++kv_iter) {
        const int st = kv_iter % S;
        const uint32_t phase = (kv_iter / S) & 1;
        const int key0 = (w.blk_end - 1 - it) * Tr::kBlockN;
        // One block's K or V (dim: the tensor's head size) into the ring stage at dst: a head
        // tile of token storage, or this lane's box of a paged KV cache.
        const auto load = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, auto dim) {
            constexpr int kD = decltype(dim)::value;
            if constexpr (kPaged) {
                memory::tma_load_paged_box<Tr::kBlockN, kD, kPagedMaxBox<Tr>>(
                    dst, map, bar, p.kv_block_table, uint32_t(w.batch) * uint32_t(p.kv_table_stride), key0,
                    w.kv_len, p.tokens_per_block, w.kv_head, p.kv_pool_blocks, lane);
            } else {
                memory::tma_load_head_tile<kD, Tr::kPanelBytesKV>(dst, map, bar, w.kv_off + key0, w.kv_head);
            }
        };
        memory::mbar_wait(smem.k_empty(st), phase ^ 1);
        if (leader) memory::mbar_arrive_expect_tx(smem.k_full(st), Tr::kSmemK);
        load(smem.k + st * Tr::kSmemK, &maps.k, smem.k_full(st), std::integral_constant<int, Tr::kHeadDim>{});
        // kStageOverV: the last tile's O may be in the V ring until its stores read it (the
        // consumers cannot be a tile further on, this one needs these loads).
        if (kStageOverV && it == 0 && q_iter > 1) memory::mbar_wait(smem.o_free(), q_iter & 1);
        memory::mbar_wait(smem.v_empty(st), phase ^ 1);
        if (leader) memory::mbar_arrive_expect_tx(smem.v_full(st), Tr::kSmemV);
        load(smem.v + st * Tr::kSmemV, &maps.v, smem.v_full(st), std::integral_constant<int, Tr::kHeadDimV>{});
    }
    return kv_iter;
}

// The tile loop of one producer thread (token storage) or warp (kPaged; lane: its lane).
template <class Tr, mask::Kind kMask, bool kStageOverV, bool kPaged>
FMHA_DEVICE void produce(const Params& p, const TmaMaps& maps, const Smem<Tr>& smem, const TileSpace& tiles,
                         int lane) {
    const bool leader = !kPaged || lane == 0;
    if (leader) {
        memory::tma_prefetch_map(&maps.q);
        memory::tma_prefetch_map(&maps.k);
        memory::tma_prefetch_map(&maps.v);
    }
    int kv_iter = 0, q_iter = 0;
    int t = blockIdx.x;
    for (int tile_iter = 0;; ++tile_iter) {
        const TileWork w = t < tiles.num_tiles ? tile_work<Tr, kMask>(p, t, tiles) : TileWork{};
        if constexpr (Tr::kPersistent) {  // hand the tile to the consumers, or the end (t >= num_tiles)
            const int slot = tile_iter & 1;
            memory::mbar_wait(smem.tile_empty(slot), ((tile_iter >> 1) & 1) ^ 1);
            if (leader) {
                store_tile_slot(smem.tile_slot(slot), t, w);
                memory::mbar_arrive(smem.tile_full(slot));
            }
        }
        if (t >= tiles.num_tiles) break;
        if (w.n_blocks > 0) {
            memory::mbar_wait(smem.q_empty(), (q_iter & 1) ^ 1);
            if (leader) {
                memory::mbar_arrive_expect_tx(smem.q_full(), Tr::kSmemQ);
                memory::tma_load_head_tile<Tr::kHeadDim, Tr::kPanelBytesQ>(smem.q, &maps.q, smem.q_full(),
                                                                            w.q_off + w.m0, w.head);
            }
            ++q_iter;
            kv_iter = load_kv_blocks<Tr, kStageOverV, kPaged>(p, maps, smem, w, kv_iter, q_iter, leader, lane);
        }
        if constexpr (Tr::kPersistent) {
            t = next_tile<kPaged>(p, tiles.num_tiles, leader);
        } else {
            t = tiles.num_tiles;
        }
    }
}

// Warpgroup 0. kPagedOnly (Traits::kSeparatePaged tiles only): this kernel serves a paged KV
// cache and nothing else; without it, token storage only. Other tiles pick at run time.
template <class Tr, mask::Kind kMask, bool kStageOverV, bool kPagedOnly>
FMHA_DEVICE void producer_warpgroup(const Params& p, const TmaMaps& maps, const Smem<Tr>& smem,
                                    const TileSpace& tiles, int tid) {
    setmaxnreg_dec<Tr::kProducerRegs>();
    if constexpr (Tr::kSeparatePaged) {
        if constexpr (kPagedOnly) {
            if (tid < kWarpSize) produce<Tr, kMask, kStageOverV, true>(p, maps, smem, tiles, tid);
        } else if (tid == 0) {
            produce<Tr, kMask, kStageOverV, false>(p, maps, smem, tiles, tid);
        }
    } else if (p.kv_block_table != nullptr) {
        if (tid < kWarpSize) produce<Tr, kMask, kStageOverV, true>(p, maps, smem, tiles, tid);
    } else if (tid == 0) {
        produce<Tr, kMask, kStageOverV, false>(p, maps, smem, tiles, tid);
    }
}

}  // namespace ws
}  // namespace fmha
