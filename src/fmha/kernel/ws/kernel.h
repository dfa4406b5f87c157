// The ws kernel: warpgroup 0 produces (producer.h); every other one walks the CTA's tiles:
// per tile, its 64 rows' S = Q K^T, softmax and O += P V over the tile's key blocks from the
// last one down (the masked ones first), then O normalised and stored, and the LSE.
// The per-tile loop is written out here rather than called as a function: the PTX is then
// identical to the one-function kernel's, while a call (same instructions, other virtual
// register numbers) moved ptxas' schedule and cost d = 64 2.5 % (bench/NOTES.md §39, §40).
#pragma once

#include <type_traits>

#include "fmha/descale.h"
#include "fmha/dropout.h"
#include "fmha/epilogue/store_o_sm90.h"
#include "fmha/kernel/ws/consumer.h"
#include "fmha/kernel/ws/producer.h"
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
#include "params.h"

namespace fmha {
namespace ws {

// kPagedOnly (Traits::kSeparatePaged tiles only): the producer serves a paged KV cache and
// nothing else; without it, token storage only. Other tiles ignore it and pick at run time.
// kDropout (Traits::kHasDropout, kMod == kNone): P V takes the probabilities fmha/dropout.h
// keeps, the row sums and the LSE all of them, O the rescale.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone, bool kPagedOnly = false,
          bool kDropout = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    fwd_kernel(const __grid_constant__ Params p, const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Tr::Element;
    using OutElement = typename Tr::OutElement;  // O's type (e4m3 inputs: bf16)
    using Softmax = softmax::OnlineSoftmaxScaled<Tr::kPOffset, Tr::kExactMax>;
    constexpr int S = Tr::kStages;
    extern __shared__ char smem_raw[];
    const Smem<Tr> smem(smem_raw);
    constexpr bool kStageOverV = Tr::template kOInVFor<kMod>;
    // e4m3: the softmax in two steps around the wait for the previous block's P V, so that
    // P's conversion to e4m3 interleaves with the exp2s (bench/NOTES.md §89).
    constexpr bool kSplitSoftmax = Tr::kFp8 && (kMask != mask::Kind::kPadding || Tr::kSplitPadding);
    // 16-bit: the rows' softmax overlapped and P packed in the exp2s' shadow (rows_step), at
    // dv = 128 (1-3 % faster) and on the short problems' siblings (d = 64 causal to 1k: 3 %);
    // not on d = 64's 192-row tile (1-2 % slower from 8k), nor at dv = 256, where it spilled
    // (bench/NOTES.md §107).
    constexpr bool kRowsSoftmax = !Tr::kFp8 && (Tr::kDimV == 128 || Tr::Config::kIsShort);
    constexpr bool kPacked = kSplitSoftmax || kRowsSoftmax;  // softmax_block leaves P in p_frag
    const Schedule sched = schedule<Tr>(p);
    const int tid = threadIdx.x;
    const int warpgroup = __shfl_sync(0xffffffffu, tid / kWarpgroupThreads, 0);
    if (tid == 0) smem.init_barriers();
    __syncthreads();

    if (warpgroup == 0) {
        producer<Tr, kMask, kStageOverV, kPagedOnly>(p, maps, smem, sched, tid);
        return;
    }

    setmaxnreg_inc<Tr::kConsumerRegs>();
    const ConsumerThread<Tr> th(tid, warpgroup);
    const Consumer<Tr, kMask, kMod> c(p, smem, th);
    const int lane = th.lane, row_g = th.row_g;

    int kv_iter = 0, q_iter = 0;
    c.start();
    for (int tile_iter = 0;; ++tile_iter) {
        TileWork w;
        if (next_tile<Tr, kMask>(p, smem, sched, tile_iter, w) >= sched.num_tiles) break;
        if (!w.active) continue;
        const int n_blocks = w.n_blocks;
        const int wg_row0 = w.m0 + th.consumer * kWarpgroupRows;  // first query row of this warpgroup
        // The blocks every row of this warpgroup sees whole run without the mask.
        const auto rows = mask::Rows<kMask>::make(p, w.q_len, w.kv_len);
        const mask::Blocks wg_blk = mask::blocks(rows, wg_row0, wg_row0 + kWarpgroupRows - 1, Tr::kBlockN);
        // e4m3: the tile's (batch, KV head) descales fold into the scale of raw scores and O's.
        // (The selects at the uses are constant: the 16-bit kernels read the parameters there as
        // they did before, and compile to the same SASS.)
        // (kLeanProducer reads V's descale again where O's scale is made, through an opaque
        // index: held through the key loop, its 240 registers spilled it.)
        float fp8_qk = 1.f, fp8_v = 1.f;
        if constexpr (Tr::kFp8) {
            fp8_qk = descale(p.q_descale, p, w.batch, w.kv_head) * descale(p.k_descale, p, w.batch, w.kv_head);
            if constexpr (!Tr::kLeanProducer) fp8_v = descale(p.v_descale, p, w.batch, w.kv_head);
        }

        // ALiBi: the tile's head's slope in raw-score units (the softmax scales by scale_bmm1).
        const float alibi_slope =
            kMod == softmax::ScoreMod::kAlibi
                ? __fdividef(p.alibi_slopes[w.head], Tr::kFp8 ? p.scale_bmm1 * fp8_qk : p.scale_bmm1)
                : 0.f;

        float acc_o[1][Tr::kNTilesO][4];  // [64 rows, dv in whole panels] f32 of this warpgroup
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][nt][e] = 0.f;
        }
        uint32_t p_frag[1][Tr::kKSlicesPV][4];  // P of the previous block as wgmma A, [64 rows, kBlockN]
        Softmax softmax;
        softmax.init();

        // Bias: this thread's first row's entries.
        const Element* bias_tile = kMod == softmax::ScoreMod::kBias
                                       ? softmax::bias_row<Element>(p, w.batch, w.head, wg_row0 + row_g)
                                       : nullptr;
        // Score modifier, mask (boundary blocks only) and softmax of block nb; alpha: the O
        // rescale it needs.
        // after_max: what must happen before the exp2s (kSplitSoftmax), before row 1's
        // (kRowsSoftmax) or after the softmax.
        const auto softmax_block = [&](float (&acc_s)[1][Tr::kNTilesS][4], int nb, float (&alpha)[2],
                                       auto&& after_max) {
            if constexpr (kMod == softmax::ScoreMod::kSoftcap) {
                softmax::apply_softcap(acc_s, softmax::Softcap::for_raw_scores(
                                                  p.softcap, Tr::kFp8 ? p.scale_bmm1 * fp8_qk : p.scale_bmm1));
            }
            if constexpr (kMod == softmax::ScoreMod::kAlibi) {
                softmax::apply_alibi(acc_s, alibi_slope,
                                     wg_row0 + row_g + rows.shift - (nb * Tr::kBlockN + 2 * (lane % 4)));
            }
            if constexpr (kMod == softmax::ScoreMod::kBias) {
                softmax::apply_bias<Element>(
                    acc_s,
                    [&](int, int h) {
                        const int r = wg_row0 + row_g + 8 * h;
                        return r < w.q_len ? bias_tile + int64_t(8 * h) * p.bias_row_stride : nullptr;
                    },
                    nb * Tr::kBlockN + 2 * (lane % 4), w.kv_len,
                    __frcp_rn(Tr::kFp8 ? p.scale_bmm1 * fp8_qk : p.scale_bmm1));
            }
            if constexpr (kMod == softmax::ScoreMod::kCustomMask) {
                softmax::apply_custom_mask(
                    acc_s,
                    [&](int, int h) {
                        const int r = wg_row0 + row_g + 8 * h;
                        return r < w.q_len ? softmax::custom_mask_row(p, w.batch, r) : nullptr;
                    },
                    nb * Tr::kBlockN + 2 * (lane % 4), w.kv_len);
            }
            // A custom mask may hide any key: every block takes the masked path.
            if constexpr (kSplitSoftmax) {
                const bool masked = softmax::hides_keys(kMod) || wg_blk.masked(nb);
                if (masked) mask::apply(acc_s, rows, wg_row0 + row_g, nb * Tr::kBlockN + 2 * (lane % 4));
                float bias[2];
                if (masked) softmax.template max_step<true>(acc_s, alpha, bias, c.scale_log2 * fp8_qk);
                else softmax.template max_step<false>(acc_s, alpha, bias, c.scale_log2 * fp8_qk);
                after_max();
                softmax.exp_step_packed(acc_s, p_frag[0], alpha, bias, c.scale_log2 * fp8_qk, mma::p_slice_to_e4m3);
            } else if constexpr (kRowsSoftmax) {
                float bias1, sum0;
                if (softmax::hides_keys(kMod) || wg_blk.masked(nb)) {
                    mask::apply(acc_s, rows, wg_row0 + row_g, nb * Tr::kBlockN + 2 * (lane % 4));
                    softmax.template rows_step<true>(acc_s, alpha, bias1, sum0, c.scale_log2);
                } else {
                    softmax.template rows_step<false>(acc_s, alpha, bias1, sum0, c.scale_log2);
                }
                after_max();
                softmax.rows_step_packed(acc_s, p_frag[0], alpha, bias1, sum0, c.scale_log2,
                                         mma::s_slice_to_p<Element>);
            } else {
                if (softmax::hides_keys(kMod) || wg_blk.masked(nb)) {
                    mask::apply(acc_s, rows, wg_row0 + row_g, nb * Tr::kBlockN + 2 * (lane % 4));
                    softmax.template scale<true>(acc_s, alpha, Tr::kFp8 ? c.scale_log2 * fp8_qk : c.scale_log2);
                } else {
                    softmax.template scale<false>(acc_s, alpha, Tr::kFp8 ? c.scale_log2 * fp8_qk : c.scale_log2);
                }
                after_max();
            }
        };
        // Dropout: P of block nb as wgmma A, less what the mask drops. Rows row_g + {0, 8} and
        // keys 2 (lane % 4) + {0, 1, 8, 9} of a k16 slice are one group: one Philox call each.
        const auto drop_block = [&](int nb) {
            if constexpr (kDropout) {
                const uint32_t bh = uint32_t(w.batch) * uint32_t(p.h) + uint32_t(w.head);
#pragma unroll
                for (int kk = 0; kk < Tr::kKSlicesPV; ++kk)
                    dropout::drop_fragment(p_frag[0][kk], p.dropout, bh, wg_row0 + row_g,
                                           nb * Tr::kBlockN + 16 * kk + 2 * (lane % 4));
            }
        };

        if (n_blocks > 0) {
            // Ring positions; e4m3: unsigned, so that their stage and phase are a mask and a
            // shift (bench/NOTES.md §96; the 16-bit kernels keep the signed form they measured).
            using Ring = std::conditional_t<Tr::kFp8, uint32_t, int>;
            const Ring g0 = kv_iter;  // ring position of this tile's first block
            memory::mbar_wait(smem.q_full(), q_iter & 1);
            {
                float acc_s[1][Tr::kNTilesS][4];
                float alpha[2];
                const int st = g0 % S;
                memory::mbar_wait(smem.k_full(st), (g0 / S) & 1);
                c.my_turn();
                c.issue_qk(acc_s, st);
                c.your_turn();
                mma::wgmma_wait<0>();
                mma::fence_operands(acc_s);
                c.release(smem.k_empty(st));
                if (n_blocks == 1) c.release(smem.q_empty());
                softmax_block(acc_s, w.blk_end - 1, alpha, [] {});  // O is still zero: alpha unused
                if constexpr (!kPacked) {  // (else softmax_block packed P already)
                    if constexpr (Tr::kFp8) mma::p_to_e4m3<Tr::kNTilesS>(p_frag[0], acc_s);
                    else mma::s_to_p<Element>(p_frag, acc_s);
                }
                drop_block(w.blk_end - 1);
            }
            for (int it = 1; it < n_blocks; ++it) {
                const Ring g = g0 + it;
                const int st = g % S, prev = (g - 1) % S;
                float acc_s[1][Tr::kNTilesS][4];
                float alpha[2];
                memory::mbar_wait(smem.k_full(st), (g / S) & 1);
                memory::mbar_wait(smem.pv_full(prev), ((g - 1) / S) & 1);
                c.my_turn();
                c.issue_qk(acc_s, st);
                mma::fence_operands(acc_o);
                c.issue_pv(acc_o, p_frag, prev);
                c.your_turn();
                mma::wgmma_wait<1>();  // S done, P.V may still run
                mma::fence_operands(acc_s);
                c.release(smem.k_empty(st));
                if (it == n_blocks - 1) c.release(smem.q_empty());  // the tile's last read of Q
                softmax_block(acc_s, w.blk_end - 1 - it, alpha, [&] {
                    mma::wgmma_wait<0>();
                    mma::fence_operands(acc_o);
                    mma::fence_operands(p_frag);
                    c.release(smem.pv_empty(prev));
                });
                Softmax::rescale(acc_o, alpha);
                if constexpr (!kPacked) {  // (else softmax_block packed P already)
                    if constexpr (Tr::kFp8) mma::p_to_e4m3<Tr::kNTilesS>(p_frag[0], acc_s);
                    else mma::s_to_p<Element>(p_frag, acc_s);
                }
                drop_block(w.blk_end - 1 - it);
            }
            const Ring g_last = g0 + n_blocks - 1;
            const int last = g_last % S;
            memory::mbar_wait(smem.pv_full(last), (g_last / S) & 1);
            mma::fence_operands(acc_o);
            c.my_turn();
            c.issue_pv(acc_o, p_frag, last);
            c.your_turn();
            mma::wgmma_wait<0>();
            mma::fence_operands(acc_o);
            c.release(smem.pv_empty(last));
            kv_iter += n_blocks;
            ++q_iter;
        }

        if constexpr (Tr::kLeanProducer) fp8_v = descale(p.v_descale, p, opaque_int(w.batch), w.kv_head);
        float inv[2];
        softmax.finalize(inv,
                         Tr::kLeanProducer ? fp8_v * p.scale_softmax * p.scale_bmm2  // (no invariant product held)
                         : Tr::kFp8        ? p.scale_softmax * p.scale_bmm2 * fp8_v
                         : kDropout ? p.scale_softmax * p.scale_bmm2 * p.dropout.rescale
                                    : p.scale_softmax * p.scale_bmm2,
                         p, w.head);
        softmax.store_lse(p, w.batch, w.head, wg_row0 + row_g, w.q_len, lane);
        // kStageOverV: the V ring is free of every P V that reads it (Traits::kOverPvOperand)
        // before any O lands there. A tile without key blocks loaded nothing there; its O
        // (zeros) goes from registers.
        const bool o_in_v = kStageOverV && n_blocks > 0;
        if (o_in_v && Tr::kOverPvOperand) th.consumers_barrier();
        if (Tr::kFp8 && p.o_e4m3) {  // e4m3 O: from registers (the V ring is free at once)
            if constexpr (Tr::kFp8) {  // (instantiated for the e4m3 kernels only)
                auto* o = static_cast<__nv_fp8_e4m3*>(p.o) +
                          static_cast<int64_t>(w.q_off + wg_row0) * p.o_row_stride +
                          static_cast<int64_t>(w.head) * p.o_head_stride;
                epilogue::store_o_rows_e4m3<Tr::kNTilesOut>(acc_o, inv, o, p.o_row_stride, row_g, lane,
                                                            w.q_len - wg_row0);
                if (o_in_v && th.wg_tid == 0) memory::mbar_arrive(smem.o_free());
            }
        } else if ((Tr::kOBeside || o_in_v) && wg_row0 + kWarpgroupRows <= w.q_len) {
            // The slab's rows are all this sequence's: stage it in shared memory, one thread
            // stores it with TMA. The slab's buffer is free once the last store has read it.
            const uint32_t slab = smem.o + th.consumer * (Tr::kSmemO / Tr::kConsumerWarpgroups);
            if (Tr::kOBeside && th.wg_tid == 0) memory::bulk_wait_read<0>();
            if constexpr (Tr::kOBeside) th.wg_barrier();
            epilogue::stage_o_rows<OutElement>(acc_o, inv, slab, th.wg_tid / kWarpSize);
            memory::fence_proxy_async_smem();
            th.wg_barrier();
            if (th.wg_tid == 0) {
                memory::tma_store_head_tile<Tr::kHeadDimV, Tr::kPanelBytesO>(slab, &maps.o, w.q_off + wg_row0,
                                                                             w.head);
                memory::bulk_commit();
                if (o_in_v) {
                    memory::bulk_wait_read<0>();
                    memory::mbar_arrive(smem.o_free());
                }
            }
        } else {
            OutElement* o = static_cast<OutElement*>(p.o) +
                            static_cast<int64_t>(w.q_off + wg_row0) * p.o_row_stride +
                            static_cast<int64_t>(w.head) * p.o_head_stride;
            epilogue::store_o_rows<OutElement, Tr::kNTilesOut>(acc_o, inv, o, p.o_row_stride, row_g, lane,
                                                               w.q_len - wg_row0);
            if (o_in_v && th.wg_tid == 0) memory::mbar_arrive(smem.o_free());
        }
    }
    c.finish();
    if ((Tr::kOBeside || kStageOverV) && th.wg_tid == 0) memory::bulk_wait<0>();  // the shared memory outlives the stores
#endif
}

}  // namespace ws
}  // namespace fmha
