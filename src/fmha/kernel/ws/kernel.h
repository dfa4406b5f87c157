// ws family: the __global__, composed of the producer warpgroup (producer.h) and the
// consumer warpgroups' tile loop: the next tile (tile_work.h), its key blocks (consumer.h)
// and its O (epilogue.h).
#pragma once

#include <cstdint>

#include "fmha/kernel/ws/consumer.h"
#include "fmha/kernel/ws/epilogue.h"
#include "fmha/kernel/ws/producer.h"
#include "fmha/kernel/ws/smem.h"
#include "fmha/kernel/ws/tile_work.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/kernel/ws/warpgroup.h"
#include "fmha/mask/mask.h"
#include "fmha/softmax/online_softmax_sm90.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace ws {

// Warpgroups 1..: each walks the CTA's tiles, taking its 64 rows of each. kv_iter (the ring
// position) and q_iter (tiles with key blocks) run on across tiles, as the producer's do.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
FMHA_DEVICE void consumer_warpgroup(const Params& p, const TmaMaps& maps, const Smem<Tr>& smem,
                                    const TileSpace& tiles, int tid, int warpgroup) {
    setmaxnreg_inc<Tr::kConsumerRegs>();
    const ConsumerThread<Tr> c(p, smem, tid, warpgroup);
    int kv_iter = 0, q_iter = 0;
    int t = blockIdx.x;
    c.turns.start();
    for (int tile_iter = 0;; ++tile_iter) {
        TileWork w;
        if constexpr (Tr::kPersistent) {
            t = take_tile(smem, tile_iter, w);
        } else if (tile_iter > 0) {
            t = tiles.num_tiles;
        }
        if (t >= tiles.num_tiles) break;
        if constexpr (!Tr::kPersistent) w = tile_work<Tr, kMask>(p, t, tiles);
        if (!w.active) continue;
        const WarpgroupTile<Tr, kMask, kMod> wt(p, w, c.consumer, c.row_g);
        float acc_o[1][Tr::kNTilesO][4];  // [64 rows, dv in whole panels] f32 of this warpgroup
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][nt][e] = 0.f;
        }
        uint32_t p_frag[1][Tr::kKSlicesPV][4];  // P of the previous block as wgmma A, [64 rows, kBlockN]
        softmax::OnlineSoftmaxSm90 softmax;
        softmax.init();
        if (w.n_blocks > 0) {
            attend(acc_o, p_frag, softmax, p, w, wt, c, kv_iter, q_iter);
        }
        store_tile<Tr, Tr::template kOInVFor<kMod>>(acc_o, softmax, p, maps, c, w, wt.row0);
    }
    c.turns.finish();
    drain_stores<Tr, Tr::template kOInVFor<kMod>>(c);
}

// kPagedOnly (Traits::kSeparatePaged tiles only): the producer serves a paged KV cache and
// nothing else; without it, token storage only. Other tiles ignore it and pick at run time.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone, bool kPagedOnly = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    fwd_kernel(const __grid_constant__ Params p, const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ char smem_raw[];
    const Smem<Tr> smem(smem_raw);
    const TileSpace tiles = TileSpace::make<Tr>(p);
    const int tid = threadIdx.x;
    const int warpgroup = __shfl_sync(0xffffffffu, tid / kWarpgroupThreads, 0);
    if (tid == 0) smem.init_barriers();
    __syncthreads();
    if (warpgroup == 0) {
        producer_warpgroup<Tr, kMask, Tr::template kOInVFor<kMod>, kPagedOnly>(p, maps, smem, tiles, tid);
    } else {
        consumer_warpgroup<Tr, kMask, kMod>(p, maps, smem, tiles, tid, warpgroup);
    }
#endif
}

}  // namespace ws
}  // namespace fmha
