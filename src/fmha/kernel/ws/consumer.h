// A ws consumer warpgroup's constants and its steps: the wgmma descriptors, the two GEMMs'
// issue (S = Q K^T from shared memory, O += P V with P from registers), the releases of ring
// stages, and the ping-pong turns through which the warpgroups take turns issuing, so that one's
// softmax overlaps another's GEMMs. The loop over a tile's key blocks that composes them is in
// kernel.h (bench/NOTES.md §40 says why it is not a function of its own).
#pragma once

#include "fmha/kernel/ws/tile_work.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/kernel/ws/warpgroup.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/mma/fp8_sm90.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/mma/wgmma_sm90.h"
#include "fmha/softmax/online_softmax_sm90.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/softcap.h"
#include "params.h"

namespace fmha {
namespace ws {

template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
struct Consumer {
    using AccO = float[1][Tr::kNTilesO][4];  // [64 rows, dv in whole panels] f32 of a warpgroup
    using AccS = float[1][Tr::kNTilesS][4];  // [64 rows, kBlockN]
    static constexpr int S = Tr::kStages;
    static constexpr int kLastConsumer = Tr::kConsumerWarpgroups - 1;
    static constexpr int kSliceBytesK = 32;                  // one wgmma k step inside a 128-byte row
    static constexpr int kSliceBytesV = 16 * Tr::kRowBytes;  // 16 key rows (16-bit V, MN-major)
    static constexpr int kSlicesPerPanel = Tr::kRowBytes / kSliceBytesK;
    static constexpr int kPanelBytesVt = Tr::kDimO * Tr::kRowBytes;  // e4m3 V^T: 128 key slots of every row

    const Params& p;
    const Smem<Tr>& smem;
    const ConsumerThread<Tr>& th;
    // Descriptors at stage 0 / k-slice 0; slices and stages add (bytes >> 4).
    uint64_t desc_q, desc_k, desc_v;
    float scale_log2;

    FMHA_DEVICE Consumer(const Params& p_, const Smem<Tr>& smem_, const ConsumerThread<Tr>& th_)
        : p(p_),
          smem(smem_),
          th(th_),
          desc_q(mma::make_smem_desc_sw128(smem_.q + th_.consumer * kWarpgroupRows * Tr::kRowBytes, 16,
                                           mma::kSw128AtomBytes)),
          desc_k(mma::make_smem_desc_sw128(smem_.k, 16, mma::kSw128AtomBytes)),
          desc_v(Tr::kFp8 ? mma::make_smem_desc_sw128(smem_.vt, 16, mma::kSw128AtomBytes)
                          : mma::make_smem_desc_sw128(smem_.v, Tr::kPanelBytesKV, mma::kSw128AtomBytes)),
          scale_log2(p_.scale_bmm1 * kLog2e) {}

    // Turns: n_blocks + 1 issue phases per warpgroup and tile, round robin from consumer 0,
    // running on across tiles: the last consumer's last hand-over of a tile lets consumer 0
    // start the next one while the others still run their last P V and store O. The last
    // consumer arrives once before its first tile (start) and consumer 0 waits once after
    // its last (finish), so every arrival is matched by one wait (bench/NOTES.md §19, §24).
    FMHA_DEVICE void my_turn() const {
        if constexpr (Tr::kPingPong) named_barrier_sync(kPingPongBarrier0 + th.consumer);
    }
    FMHA_DEVICE void your_turn() const {
        if constexpr (Tr::kPingPong) {
            named_barrier_arrive(kPingPongBarrier0 + (th.consumer == kLastConsumer ? 0 : th.consumer + 1));
        }
    }
    FMHA_DEVICE void start() const {
        if (th.consumer == kLastConsumer) your_turn();
    }
    FMHA_DEVICE void finish() const {
        if (th.consumer == 0) my_turn();  // the last consumer's last hand-over
    }

    FMHA_DEVICE void release(uint32_t bar) const {
        __syncwarp();
        if (th.lane == 0) memory::mbar_arrive(bar);
    }

    // e4m3: the stage's descriptors once, then compile-time steps on their low words
    // (mma::desc_advance): the 64-bit adds ptxas emitted for each of a block's wgmmas sat on the
    // path from the K wait to the QK^T (bench/NOTES.md §96). The 16-bit kernels keep the 64-bit
    // adds: with the same change their d = 64 tile measured 2-5 % slower.
    FMHA_DEVICE void issue_qk(AccS& acc_s, int st) const {
        // (e4m3 only: the 16-bit kernels add the stage's offset to the 64-bit descriptor below)
        const uint64_t desc_k_st = Tr::kFp8 ? mma::desc_advance(desc_k, static_cast<uint32_t>(st) * Tr::kSmemK) : 0;
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKSlicesQK; ++kk) {
            const uint32_t off_q = (kk / kSlicesPerPanel) * Tr::kPanelBytesQ + (kk % kSlicesPerPanel) * kSliceBytesK;
            // (within the stage)
            const uint32_t off_k = (kk / kSlicesPerPanel) * Tr::kPanelBytesKV + (kk % kSlicesPerPanel) * kSliceBytesK;
            if constexpr (Tr::kFp8) {
                mma::wgmma_ss_e4m3<Tr::kBlockN>(mma::flat(acc_s), mma::desc_advance(desc_q, off_q),
                                                mma::desc_advance(desc_k_st, off_k), kk > 0);
            } else {
                mma::wgmma_ss<Tr::kBf16, Tr::kBlockN>(mma::flat(acc_s), desc_q + (off_q >> 4),
                                                      desc_k + ((st * Tr::kSmemK + off_k) >> 4), kk > 0);
            }
        }
        mma::wgmma_commit();
    }

    // O += P V of the ring's stage st, P from registers (wgmma RS); e4m3: V^T's stage, K-major,
    // k32 steps along its rows of 128 key slots.
    FMHA_DEVICE void issue_pv(AccO& acc_o, const uint32_t (&p_frag)[1][Tr::kKSlicesPV][4], int st) const {
        const uint64_t desc_v_st = Tr::kFp8 ? mma::desc_advance(desc_v, static_cast<uint32_t>(st) * Tr::kSmemVt) : 0;
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKSlicesPV; ++kk) {
            if constexpr (Tr::kFp8) {
                const uint32_t off_v = (kk / kSlicesPerPanel) * kPanelBytesVt + (kk % kSlicesPerPanel) * kSliceBytesK;
                mma::wgmma_rs_e4m3<Tr::kDimO>(mma::flat(acc_o), p_frag[0][kk], mma::desc_advance(desc_v_st, off_v),
                                              true);
            } else {
                const uint32_t off_v = st * Tr::kSmemV + kk * kSliceBytesV;
                mma::wgmma_rs<Tr::kBf16, Tr::kDimV>(mma::flat(acc_o), p_frag[0][kk], desc_v + (off_v >> 4), true);
            }
        }
        mma::wgmma_commit();
    }
};

}  // namespace ws
}  // namespace fmha
