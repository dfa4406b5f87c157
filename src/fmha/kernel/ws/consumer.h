// ws family: a consumer warpgroup's main loop (setmaxnreg up to Traits::kConsumerRegs). Each
// consumer owns 64 query rows of the tile and keeps S, P and O in registers. Per key block j,
// walked from the last one down (the masked blocks, key tail and causal diagonal, come first,
// as in flash_sm80):
//   issue S[j] = Q K[j]^T (wgmma SS); issue O += P[j+1] V[j+1] (wgmma RS, P from registers);
//   wait for S[j] -> release K[j], mask, softmax; wait for the P.V -> release V[j+1],
//   rescale O; pack P[j].
// Softmax of one block thus runs while the tensor cores do the other block's P.V (FA3's
// intra-warpgroup overlap), and with ping-pong (warpgroup.h) while another consumer's GEMMs
// run. Causal and local masks: the key blocks no row of the tile sees were never loaded
// (mask::blocks); the blocks every row of this warpgroup sees whole skip the mask.
#pragma once

#include <cstdint>

#include "fmha/kernel/ws/smem.h"
#include "fmha/kernel/ws/tile_work.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/kernel/ws/warpgroup.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/mma/wgmma_sm90.h"
#include "fmha/softmax/online_softmax_sm90.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/softcap.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace ws {

// Steps through the SW128 operands: descriptors advance by (bytes >> 4).
constexpr int kSliceBytesK = 16 * 2;                          // k16 inside a 128-byte row
constexpr int kSliceBytesV = 16 * memory::kTmaPanelRowBytes;  // 16 key rows
constexpr int kSlicesPerPanel = memory::kTmaPanelCols / 16;   // k16 steps per 64-column panel

// A consumer thread's place in the CTA and its wgmma descriptors, the same for every tile.
template <class Tr>
struct ConsumerThread {
    Smem<Tr> smem;
    PingPong<Tr> turns;
    int consumer;  // its warpgroup - 1: rows [64 consumer, 64 consumer + 64) of each tile
    int lane;
    int row_g;     // this thread's first row in its warpgroup (wgmma D: rows g and g + 8 of the warp's 16)
    int wg_tid;    // thread in its warpgroup
    uint64_t desc_q, desc_k, desc_v;  // at stage 0 / k-slice 0; slices and stages add (bytes >> 4)
    float scale_log2;

    FMHA_DEVICE ConsumerThread(const Params& p, const Smem<Tr>& s, int tid, int warpgroup) : smem(s) {
        lane = tid % kWarpSize;
        consumer = warpgroup - 1;
        turns = PingPong<Tr>{consumer};
        row_g = (tid / kWarpSize) % 4 * 16 + lane / 4;
        wg_tid = tid % kWarpgroupThreads;
        desc_q = mma::make_smem_desc_sw128(s.q + consumer * kWarpgroupRows * Tr::kRowBytes, 16, mma::kSw128AtomBytes);
        desc_k = mma::make_smem_desc_sw128(s.k, 16, mma::kSw128AtomBytes);
        desc_v = mma::make_smem_desc_sw128(s.v, Tr::kPanelBytesKV, mma::kSw128AtomBytes);
        scale_log2 = p.scale_bmm1 * kLog2e;
    }

    // This warp is done with a stage: one arrival on its "empty" barrier.
    FMHA_DEVICE void release(uint32_t bar) const {
        __syncwarp();
        if (lane == 0) memory::mbar_arrive(bar);
    }
};

// A persistent consumer's next tile from tile slot tile_iter & 1; its index, or one past the
// end when the producer has no more.
template <class Tr>
FMHA_DEVICE int take_tile(const Smem<Tr>& smem, int tile_iter, TileWork& w) {
    const int slot = tile_iter & 1;
    memory::mbar_wait(smem.tile_full(slot), (tile_iter >> 1) & 1);
    const int t = load_tile_slot(smem.tile_slot(slot), w);
    // Every thread that read the slot arrives (not one per warp after __syncwarp): the
    // producer's next write is then ordered after each read by the mbarrier itself.
    memory::mbar_arrive(smem.tile_empty(slot));
    return t;
}

// A consumer warpgroup's share of one tile: what the mask and the score modifier need.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
struct WarpgroupTile {
    using Element = typename Tr::Element;
    int row0;                 // this warpgroup's first query row
    mask::Rows<kMask> rows;
    mask::Blocks blk;         // the blocks every row of this warpgroup sees whole run without the mask
    float alibi_slope;        // kAlibi: the head's slope in raw-score units (the softmax scales by scale_bmm1)
    const Element* bias_row;  // kBias: this thread's first row's entries

    FMHA_DEVICE WarpgroupTile(const Params& p, const TileWork& w, int consumer, int row_g) {
        row0 = w.m0 + consumer * kWarpgroupRows;
        rows = mask::Rows<kMask>::make(p, w.q_len, w.kv_len);
        blk = mask::blocks(rows, row0, row0 + kWarpgroupRows - 1, Tr::kBlockN);
        alibi_slope = kMod == softmax::ScoreMod::kAlibi ? __fdividef(p.alibi_slopes[w.head], p.scale_bmm1) : 0.f;
        bias_row = kMod == softmax::ScoreMod::kBias ? softmax::bias_row<Element>(p, w.batch, w.head, row0 + row_g)
                                                    : nullptr;
    }
};

template <class Tr>
FMHA_DEVICE void issue_qk(float (&acc_s)[1][Tr::kNTilesS][4], const ConsumerThread<Tr>& c, int st) {
    mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::kKSlicesQK; ++kk) {
        const uint32_t off_q = (kk / kSlicesPerPanel) * Tr::kPanelBytesQ + (kk % kSlicesPerPanel) * kSliceBytesK;
        const uint32_t off_k =
            st * Tr::kSmemK + (kk / kSlicesPerPanel) * Tr::kPanelBytesKV + (kk % kSlicesPerPanel) * kSliceBytesK;
        mma::wgmma_ss<Tr::kBf16, Tr::kBlockN>(mma::flat(acc_s), c.desc_q + (off_q >> 4), c.desc_k + (off_k >> 4),
                                              kk > 0);
    }
    mma::wgmma_commit();
}

template <class Tr>
FMHA_DEVICE void issue_pv(float (&acc_o)[1][Tr::kNTilesO][4], const uint32_t (&p_frag)[1][Tr::kKSlicesPV][4],
                          const ConsumerThread<Tr>& c, int st) {
    mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::kKSlicesPV; ++kk) {
        const uint32_t off_v = st * Tr::kSmemV + kk * kSliceBytesV;
        mma::wgmma_rs<Tr::kBf16, Tr::kDimV>(mma::flat(acc_o), p_frag[0][kk], c.desc_v + (off_v >> 4), true);
    }
    mma::wgmma_commit();
}

// Score modifier, mask (boundary blocks only) and softmax of key block nb; alpha: the O
// rescale it needs.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
FMHA_DEVICE void softmax_block(float (&acc_s)[1][Tr::kNTilesS][4], int nb, float (&alpha)[2],
                               softmax::OnlineSoftmaxSm90& softmax, const Params& p, const TileWork& w,
                               const WarpgroupTile<Tr, kMask, kMod>& t, const ConsumerThread<Tr>& c) {
    if constexpr (kMod == softmax::ScoreMod::kSoftcap) {
        softmax::apply_softcap(acc_s, softmax::Softcap::for_raw_scores(p.softcap, p.scale_bmm1));
    }
    if constexpr (kMod == softmax::ScoreMod::kAlibi) {
        softmax::apply_alibi(acc_s, t.alibi_slope,
                             t.row0 + c.row_g + t.rows.shift - (nb * Tr::kBlockN + 2 * (c.lane % 4)));
    }
    if constexpr (kMod == softmax::ScoreMod::kBias) {
        softmax::apply_bias<typename Tr::Element>(
            acc_s,
            [&](int, int h) {
                const int r = t.row0 + c.row_g + 8 * h;
                return r < w.q_len ? t.bias_row + int64_t(8 * h) * p.bias_row_stride : nullptr;
            },
            nb * Tr::kBlockN + 2 * (c.lane % 4), w.kv_len, __frcp_rn(p.scale_bmm1));
    }
    if constexpr (kMod == softmax::ScoreMod::kCustomMask) {
        softmax::apply_custom_mask(
            acc_s,
            [&](int, int h) {
                const int r = t.row0 + c.row_g + 8 * h;
                return r < w.q_len ? softmax::custom_mask_row(p, w.batch, r) : nullptr;
            },
            nb * Tr::kBlockN + 2 * (c.lane % 4), w.kv_len);
    }
    // A custom mask may hide any key: every block takes the masked path.
    if (softmax::hides_keys(kMod) || t.blk.masked(nb)) {
        mask::apply(acc_s, t.rows, t.row0 + c.row_g, nb * Tr::kBlockN + 2 * (c.lane % 4));
        softmax.template scale<true>(acc_s, alpha, c.scale_log2);
    } else {
        softmax.template scale<false>(acc_s, alpha, c.scale_log2);
    }
}

// The tile's key blocks (w.n_blocks > 0): O accumulates in acc_o, unnormalised; p_frag holds
// P of the block before as wgmma A. kv_iter (the ring position) and q_iter (tiles with key
// blocks) advance past the tile.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
FMHA_DEVICE void attend(float (&acc_o)[1][Tr::kNTilesO][4], uint32_t (&p_frag)[1][Tr::kKSlicesPV][4],
                        softmax::OnlineSoftmaxSm90& softmax, const Params& p, const TileWork& w,
                        const WarpgroupTile<Tr, kMask, kMod>& t, const ConsumerThread<Tr>& c, int& kv_iter,
                        int& q_iter) {
    constexpr int S = Tr::kStages;
    const Smem<Tr>& smem = c.smem;
    const int n_blocks = w.n_blocks;
    const int g0 = kv_iter;  // ring position of this tile's first block
    memory::mbar_wait(smem.q_full(), q_iter & 1);
    {  // the first block: no P.V to overlap yet
        float acc_s[1][Tr::kNTilesS][4];
        float alpha[2];
        const int st = g0 % S;
        memory::mbar_wait(smem.k_full(st), (g0 / S) & 1);
        c.turns.my_turn();
        issue_qk(acc_s, c, st);
        c.turns.your_turn();
        mma::wgmma_wait<0>();
        mma::fence_operands(acc_s);
        c.release(smem.k_empty(st));
        if (n_blocks == 1) c.release(smem.q_empty());
        softmax_block(acc_s, w.blk_end - 1, alpha, softmax, p, w, t, c);  // O is still zero: alpha unused
        mma::s_to_p<typename Tr::Element>(p_frag, acc_s);
    }
    for (int it = 1; it < n_blocks; ++it) {  // S of block it beside P.V of block it - 1
        const int g = g0 + it;
        const int st = g % S, prev = (g - 1) % S;
        float acc_s[1][Tr::kNTilesS][4];
        float alpha[2];
        memory::mbar_wait(smem.k_full(st), (g / S) & 1);
        memory::mbar_wait(smem.v_full(prev), ((g - 1) / S) & 1);
        c.turns.my_turn();
        issue_qk(acc_s, c, st);
        mma::fence_operands(acc_o);
        issue_pv(acc_o, p_frag, c, prev);
        c.turns.your_turn();
        mma::wgmma_wait<1>();  // S done, P.V may still run
        mma::fence_operands(acc_s);
        c.release(smem.k_empty(st));
        if (it == n_blocks - 1) c.release(smem.q_empty());  // the tile's last read of Q
        softmax_block(acc_s, w.blk_end - 1 - it, alpha, softmax, p, w, t, c);
        mma::wgmma_wait<0>();
        mma::fence_operands(acc_o);
        mma::fence_operands(p_frag);
        c.release(smem.v_empty(prev));
        softmax::OnlineSoftmaxSm90::rescale(acc_o, alpha);
        mma::s_to_p<typename Tr::Element>(p_frag, acc_s);
    }
    const int g_last = g0 + n_blocks - 1;  // the last block's P.V
    const int last = g_last % S;
    memory::mbar_wait(smem.v_full(last), (g_last / S) & 1);
    mma::fence_operands(acc_o);
    c.turns.my_turn();
    issue_pv(acc_o, p_frag, c, last);
    c.turns.your_turn();
    mma::wgmma_wait<0>();
    mma::fence_operands(acc_o);
    c.release(smem.v_empty(last));
    kv_iter += n_blocks;
    ++q_iter;
}

}  // namespace ws
}  // namespace fmha
