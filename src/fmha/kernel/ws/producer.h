// The ws kernel's producer warpgroup: per tile Q, then the K and V of its key blocks from the
// last one down (the order the consumers take them) into the kStages ring. The ring position
// (kv_iter) runs on across tiles; a persistent CTA draws its next tile here and hands its
// bounds to the consumers through the tile slots.
#pragma once

#include <type_traits>

#include "fmha/kernel/ws/tile_work.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/kernel/ws/warpgroup.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/mma/fp8_sm90.h"
#include "params.h"

namespace fmha {
namespace ws {

// e4m3: transposing warp `warp`'s share of ring position kv_iter: the V stage that TMA filled
// into its K-major copy (mma/fp8_sm90.h), which the consumers' P V reads; then V's stage is
// free for the next copy.
template <class Tr>
FMHA_DEVICE void transpose_stage(const Smem<Tr>& smem, int kv_iter, int warp, int lane) {
    constexpr int S = Tr::kStages;
    const int st = kv_iter % S;
    const uint32_t phase = (kv_iter / S) & 1;
    memory::mbar_wait(smem.v_full(st), phase);
    memory::mbar_wait(smem.vt_empty(st), phase ^ 1);
    mma::transpose_v_e4m3<Tr::kBlockN, Tr::kDimO, Tr::kTransposeWarps>(smem.v + st * Tr::kSmemV,
                                                                       smem.vt + st * Tr::kSmemVt, warp);
    memory::fence_proxy_async_smem();  // V^T's generic writes before the wgmma reads them
    __syncwarp();
    if (lane == 0) {
        memory::mbar_arrive(smem.vt_full(st));
        memory::mbar_arrive(smem.v_empty(st));
    }
}

// kPaged: a paged KV cache, walked by one warp (lane 0 issues Q's copies, every lane looks up
// one box's block and copies that box); else token storage, walked by one thread. Two loops,
// so that each fits the producer's registers. kStageOverV: O of the last tile may sit in the
// V ring (Traits::kOInVFor) until its stores have read it. Traits::kTmaWarpTransposes: the
// whole warp runs this (lane 0 issues) and transposes its share of each key block once it has
// issued the next block's loads, the tile's last block before the next tile's loads (the
// consumers' epilogue, which O-free and the next Q wait for, needs that V^T).
template <class Tr, mask::Kind kMask, bool kStageOverV, bool kPaged>
FMHA_DEVICE void produce(const Params& p, const TmaMaps& maps, const Smem<Tr>& smem, const Schedule& sched,
                         int lane) {
    constexpr int S = Tr::kStages;
    constexpr bool kWarp = kPaged || Tr::kTmaWarpTransposes;
    const bool leader = !kWarp || lane == 0;
    if (leader) {
        memory::tma_prefetch_map(&maps.q);
        memory::tma_prefetch_map(&maps.k);
        memory::tma_prefetch_map(&maps.v);
    }
    int kv_iter = 0, q_iter = 0;
    int t = blockIdx.x;
    for (int tile_iter = 0;; ++tile_iter) {
        const TileWork w = t < sched.num_tiles ? tile_work<Tr, kMask>(p, t, sched.m_blocks, sched.section)
                                               : Tr::kFp8 ? kNoTileWork : TileWork{};
        if constexpr (Tr::kPersistent) {
            const int slot = tile_iter & 1;
            memory::mbar_wait(smem.tile_empty(slot), ((tile_iter >> 1) & 1) ^ 1);
            if (leader) {
                store_tile_slot(smem.tile_slot(slot), t, w);
                memory::mbar_arrive(smem.tile_full(slot));
            }
            if constexpr (Tr::kTmaWarpTransposes) __syncwarp();  // every lane reads the slot back below
        }
        if (t >= sched.num_tiles) break;
        if (w.n_blocks > 0) {
            memory::mbar_wait(smem.q_empty(), (q_iter & 1) ^ 1);
            if (leader) {
                memory::mbar_arrive_expect_tx(smem.q_full(), Tr::kSmemQ);
                memory::tma_load_head_tile<Tr::kTmaHeadDim, Tr::kPanelBytesQ>(smem.q, &maps.q, smem.q_full(),
                                                                               w.q_off + w.m0, w.head);
            }
            ++q_iter;
            // K and V of each key block into the ring; dim: the tensor's head size.
            // kTmaWarpTransposes: one pass more, whose only work is the last block's transpose.
            constexpr int kFlush = Tr::kTmaWarpTransposes ? 1 : 0;
            for (int it = 0; it < w.n_blocks + kFlush; ++it, ++kv_iter) {
                const bool loads = !Tr::kTmaWarpTransposes || it < w.n_blocks;
                if (loads) {
                    // (kTmaWarpTransposes, persistent: the tile's fields read back from the slot
                    // each block, so that they are not held through the transposes, where they
                    // spilled.)
                    constexpr bool kReload = Tr::kTmaWarpTransposes && Tr::kPersistent;
                    TileWork slot_work;
                    if constexpr (kReload) load_tile_slot(smem.tile_slot(tile_iter & 1), slot_work);
                    const TileWork& wk = kReload ? slot_work : w;
                    const int st = kv_iter % S;
                    const uint32_t phase = (kv_iter / S) & 1;
                    const int key0 = (wk.blk_end - 1 - it) * Tr::kBlockN;
                    const auto load = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, auto dim) {
                        constexpr int kD = decltype(dim)::value;
                        if constexpr (kPaged) {
                            memory::tma_load_paged_box<Tr::kBlockN, kD, kPagedMaxBox<Tr>>(
                                dst, map, bar, p.kv_block_table, uint32_t(wk.batch) * uint32_t(p.kv_table_stride),
                                key0, wk.kv_len, p.tokens_per_block, wk.kv_head, p.kv_pool_blocks, lane);
                        } else if (leader) {
                            memory::tma_load_head_tile<kD, Tr::kPanelBytesKV>(dst, map, bar, wk.kv_off + key0,
                                                                              wk.kv_head);
                        }
                    };
                    memory::mbar_wait(smem.k_empty(st), phase ^ 1);
                    if (leader) memory::mbar_arrive_expect_tx(smem.k_full(st), Tr::kSmemK);
                    load(smem.k + st * Tr::kSmemK, &maps.k, smem.k_full(st),
                         std::integral_constant<int, Tr::kTmaHeadDim>{});
                    // q_iter counts this tile; the consumers cannot be a tile further on, this one
                    // needs these loads.
                    if (kStageOverV && it == 0 && q_iter > 1) memory::mbar_wait(smem.o_free(), q_iter & 1);
                    memory::mbar_wait(smem.v_empty(st), phase ^ 1);
                    if (leader) memory::mbar_arrive_expect_tx(smem.v_full(st), Tr::kSmemV);
                    load(smem.v + st * Tr::kSmemV, &maps.v, smem.v_full(st),
                         std::integral_constant<int, Tr::kTmaHeadDimV>{});
                }
                if constexpr (Tr::kTmaWarpTransposes) {
                    if (it > 0) transpose_stage<Tr>(smem, kv_iter - 1, 0, lane);
                }
            }
            kv_iter -= kFlush;  // (the flush pass loaded nothing)
        }
        if constexpr (Tr::kPersistent) {
            // Every CTA draws until it gets an index past the end: num_tiles - gridDim.x real
            // draws plus one per CTA, so the draw that returns num_tiles - 1 is the launch's
            // last, and the counter is free to go back to 0.
            int drawn = 0;
            if (leader) {
                drawn = atomicAdd(p.tile_counter, 1);
                const bool last = drawn == sched.num_tiles - 1;
                if (last) atomicExch(p.tile_counter, 0);
            }
            if constexpr (kWarp) drawn = __shfl_sync(0xffffffffu, drawn, 0);
            t = static_cast<int>(gridDim.x) + drawn;
        } else {
            t = sched.num_tiles;
        }
    }
}

// e4m3: warp `warp` of the producer warpgroup's transposing ones that do not issue TMA. It
// walks the tiles as the consumers do (the tile slots) and transposes its share of each key
// block (transpose_stage).
template <class Tr, mask::Kind kMask>
FMHA_DEVICE void transpose_v(const Params& p, const Smem<Tr>& smem, int warp, int lane) {
    int kv_iter = 0;
    for (int tile_iter = 0;; ++tile_iter) {
        const int n_blocks = next_tile_blocks<Tr, kMask>(p, smem, tile_iter);
        if (n_blocks < 0) break;
        for (int it = 0; it < n_blocks; ++it, ++kv_iter) transpose_stage<Tr>(smem, kv_iter, warp, lane);
    }
}

// Warpgroup 0: gives its registers up, then one thread or one warp produces (kPagedOnly:
// Traits::kSeparatePaged tiles, whose paged loop is a kernel of its own); e4m3: its other
// warps transpose V (kTmaWarpTransposes: the producing warp takes a share too).
template <class Tr, mask::Kind kMask, bool kStageOverV, bool kPagedOnly>
FMHA_DEVICE void producer(const Params& p, const TmaMaps& maps, const Smem<Tr>& smem, const Schedule& sched,
                          int tid) {
    setmaxnreg_dec<Tr::kProducerRegs>();
    // (kTmaWarpTransposes: the warp index made visibly warp-uniform, so that ptxas may keep the
    // TMA warp's loop state in uniform registers beside its transposes.)
    const int warp = Tr::kTmaWarpTransposes ? __shfl_sync(0xffffffffu, tid / kWarpSize, 0) : tid / kWarpSize;
    if constexpr (Tr::kFp8) {
        if (warp > 0) {
            transpose_v<Tr, kMask>(p, smem, warp - (Tr::kTmaWarpTransposes ? 0 : 1), tid % kWarpSize);
            return;
        }
    }
    if constexpr (Tr::kSeparatePaged) {
        if constexpr (kPagedOnly) {
            if (tid < kWarpSize) produce<Tr, kMask, kStageOverV, true>(p, maps, smem, sched, tid);
        } else if (Tr::kTmaWarpTransposes ? warp == 0 : tid == 0) {
            produce<Tr, kMask, kStageOverV, false>(p, maps, smem, sched, tid);
        }
    } else if (Tr::kHasPaged && p.kv_block_table != nullptr) {
        if constexpr (Tr::kHasPaged) {
            if (tid < kWarpSize) produce<Tr, kMask, kStageOverV, true>(p, maps, smem, sched, tid);
        }
    } else if (Tr::kTmaWarpTransposes ? warp == 0 : tid == 0) {
        produce<Tr, kMask, kStageOverV, false>(p, maps, smem, sched, tid);
    }
}

}  // namespace ws
}  // namespace fmha
