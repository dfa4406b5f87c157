// The "flash" family: FlashAttention-2 forward on SM80+ tensor cores (mma.sync m16n8k16).
//
// One CTA owns kBlockM query rows of one (batch, head); each warp owns kBlockM / kWarpsM
// of them for the whole main loop, so softmax statistics never leave a warp. The CTA walks
// the key blocks its rows see (mask::blocks: none above the causal diagonal, none outside
// a local mask's window or chunk) from the last one down: the blocks that need a mask (the
// key tail, the diagonal, a window's right edge) come first, then the mask-free ones, then
// (local masks) those on the window's left edge. Q stays in shared memory and is re-read
// with ldmatrix each block (registers go to the accumulators).
//
// Two pipelines, chosen by kStages (auto: 2 while two CTAs of that size fit on an SM80):
//   kStages == 2: K and V double-buffered; one barrier per key block j:
//       wait, barrier; cp.async K[j-1], V[j-1] into the other buffers
//       S = Q K[j]^T; mask; softmax -> P in registers; O += P V[j]
//   kStages == 1: single K and V buffers (FA2's schedule), two barriers per block:
//       wait, barrier; cp.async V[j]        (overlaps S = Q K[j]^T)
//       S = Q K[j]^T; mask; wait, barrier; cp.async K[j-1]  (overlaps softmax, P V[j])
//
// What the template parameters allow (static_asserted in Traits):
//   Element        __half or __nv_bfloat16
//   kAccFp16       P V partials of 32 keys in f16 registers (mma::kF16Slices); __half only
//   kHeadDim(V)    multiples of 8 in [16, 256]; padded to 16 in shared memory with zeros
//   kBlockM        kWarpsM * 16 * kMmaM (each warp owns whole 16-row m-tiles)
//   kBlockN        multiple of 16
//   kWarpsN        1 (warps split only the query rows: no cross-warp softmax reductions)
//   kStages        0 (auto), 1 or 2; not part of the generated kernel name
//   resources      shared memory <= 227 KB; O + S accumulators <= 192 f32 registers per
//                  thread, beyond which ptxas spills
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "fmha/dropout.h"
#include "fmha/epilogue/store_o.h"
#include "fmha/kernel/launch_checks.h"
#include "fmha/kernel/row_tile.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/gmem_tile.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/sched/tile_scheduler.h"
#include "fmha/seq_lens.h"
#include "fmha/softmax/online_softmax.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/softcap.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace flash_sm80 {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_,
          int kWarpsN_, bool kAccFp16_, int kStages_ = 0>
struct Traits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarpsM = kWarpsM_;
    static constexpr int kWarpsN = kWarpsN_;
    static constexpr bool kAccFp16 = kAccFp16_;

    static constexpr int kThreads = kWarpsM * kWarpsN * kWarpSize;
    static constexpr int kWarpRows = kBlockM / kWarpsM;  // query rows per warp
    static constexpr int kMmaM = kWarpRows / 16;         // 16-row m-tiles per warp
    static constexpr int kHeadDimPad = round_up(kHeadDim, 16);
    static constexpr int kHeadDimVPad = round_up(kHeadDimV, 16);
    static constexpr int kKSlices = kHeadDimPad / 16;  // k16 steps of Q K^T
    static constexpr int kNTilesS = kBlockN / 8;       // 8-key n-tiles of S
    static constexpr int kNTilesO = kHeadDimVPad / 8;  // 8-column n-tiles of O

    using LayoutQ = memory::SmemLayout<kBlockM, kHeadDimPad>;   // [kBlockM, d]
    using LayoutK = memory::SmemLayout<kBlockN, kHeadDimPad>;   // [kBlockN, d]
    using LayoutV = memory::SmemLayout<kBlockN, kHeadDimVPad>;  // [kBlockN, dv]
    using LayoutO = memory::SmemLayout<kBlockM, kHeadDimVPad>;  // [kBlockM, dv], epilogue
    using LoaderQ = memory::TileLoader<LayoutQ, kHeadDim / kElemsPerChunk, kThreads>;
    using LoaderK = memory::TileLoader<LayoutK, kHeadDim / kElemsPerChunk, kThreads>;
    using LoaderV = memory::TileLoader<LayoutV, kHeadDimV / kElemsPerChunk, kThreads>;

    static constexpr int kSmemQ = LayoutQ::kBytes;
    static constexpr int kSmemK = LayoutK::kBytes;  // one stage
    static constexpr int kSmemV = LayoutV::kBytes;  // one stage
    // Auto: double-buffer only while two CTAs still fit on an SM80 (164 KB, 1 KB per CTA
    // reserved). On H100 both schedules measured within noise at d <= 64, and the single
    // buffer was as fast or faster at d >= 128 (tests/kernel_dev/NOTES.md).
    static constexpr int kSmemTwoStagesMax = 81 * 1024;
    static constexpr int kStages =
        kStages_ != 0 ? kStages_ : (kSmemQ + 2 * (kSmemK + kSmemV) <= kSmemTwoStagesMax ? 2 : 1);
    // The epilogue's staging tile reuses the main loop's space.
    static constexpr int kSmemBytes = max_int(kSmemQ + kStages * (kSmemK + kSmemV), LayoutO::kBytes);
    static constexpr int kMaxSmemBytes = kMaxSmemPerCta;
    static constexpr int kAccRegs = kMmaM * (kNTilesS + kNTilesO) * 4;
    // Skip the O rescale when no row max grew: measured to pay from 128 O registers on.
    static constexpr bool kSkipRescale = kMmaM * kNTilesO * 4 >= 128;
    static constexpr int kMaxAccRegs = 192;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(!kAccFp16 || !ElementTraits<Element>::kIsBf16, "f16 accumulation needs f16 inputs");
    static_assert(kHeadDim % 8 == 0 && kHeadDim >= 16 && kHeadDim <= 256, "d: multiple of 8 in [16, 256]");
    static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 16 && kHeadDimV <= 256, "dv: multiple of 8 in [16, 256]");
    static_assert(kWarpsN == 1, "warps split query rows only");
    static_assert(kStages == 1 || kStages == 2, "kStages: 0 (auto), 1 or 2");
    static_assert(kWarpsM >= 1 && kBlockM % (16 * kWarpsM) == 0, "each warp owns whole 16-row m-tiles");
    static_assert(kBlockN % 16 == 0 && kBlockN >= 16, "kBlockN: multiple of 16");
    static_assert(kSmemBytes <= kMaxSmemBytes, "tiles exceed shared memory");
    static_assert(kAccRegs <= kMaxAccRegs, "O + S accumulators would spill: smaller tiles or more warps");
};

// kDropout: P V takes the probabilities that fmha/dropout.h keeps (zero for the others), the
// row sums and the LSE all of them, and O the rescale (with kMod == kNone only).
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone, bool kDropout = false>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel(const __grid_constant__ Params p) {
    using Element = typename Tr::Element;
    extern __shared__ __align__(128) char smem[];

    const int tid = threadIdx.x;
    const int lane = tid % kWarpSize;
    const int warp = tid / kWarpSize;
    kernel::RowTile t = kernel::row_tile<Tr::kBlockM, kMask == mask::Kind::kCausal>(p);
    if (t.m0 >= t.q_len) return;
    t.locate<Tr::kBlockM>(p);

    const Element* q = t.q<Element>(p);
    const auto k_rows = memory::key_rows<Element>(p, t.tile.batch, t.kv_head);
    const auto v_rows = memory::value_rows<Element>(p, t.tile.batch, t.kv_head);
    Element* o = static_cast<Element*>(p.o) + static_cast<int64_t>(t.q_off + t.m0) * p.o_row_stride +
                 static_cast<int64_t>(t.tile.head) * p.o_head_stride;

    // Key blocks some row of this tile sees, and those every row sees whole (no mask).
    const auto rows = mask::Rows<kMask>::make(p, t.q_len, t.kv_len);
    const mask::Blocks blk = mask::blocks(rows, t.m0, t.m0 + t.q_rows - 1, Tr::kBlockN);

    const uint32_t smem_q = smem_u32(smem);
    const uint32_t smem_k = smem_q + Tr::kSmemQ;                  // kStages x [kBlockN, d]
    const uint32_t smem_v = smem_k + Tr::kStages * Tr::kSmemK;    // kStages x [kBlockN, dv]
    memory::LdsmAddr<typename Tr::LayoutQ> q_addr;
    memory::LdsmAddr<typename Tr::LayoutK> k_addr;
    memory::LdsmAddr<typename Tr::LayoutV> v_addr;
    q_addr.init(smem_q, warp * Tr::kWarpRows + mma::lane_row_a(lane), mma::lane_chunk_a(lane));
    k_addr.init(smem_k, mma::lane_row_b(lane), mma::lane_chunk_b(lane));
    v_addr.init(smem_v, mma::lane_row_a(lane), mma::lane_chunk_a(lane));

    float acc_o[Tr::kMmaM][Tr::kNTilesO][4];  // [warp rows, dv] f32
#pragma unroll
    for (int mi = 0; mi < Tr::kMmaM; ++mi) {
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;
        }
    }
    softmax::OnlineSoftmax<Tr::kMmaM> softmax;
    softmax.init();

    if (blk.count() > 0) {
        const float scale_log2 = p.scale_bmm1 * kLog2e;
        // A custom mask may hide any key: every block takes the masked path of the softmax.
        constexpr bool kHidesKeys = softmax::hides_keys(kMod);
        const int row0 = t.m0 + warp * Tr::kWarpRows + lane / 4;  // this lane's first query row
        const int col0 = 2 * (lane % 4);                        // this lane's first key in an n-tile
        // ALiBi: the head's slope in raw-score units (the softmax scales by scale_bmm1 later).
        const float alibi_slope =
            kMod == softmax::ScoreMod::kAlibi ? __fdividef(p.alibi_slopes[t.tile.head], p.scale_bmm1) : 0.f;
        // Key block nb's rows; only the top block can hold the key tail (zero-filled), and
        // the blocks below it are whole (a local mask's first block starts at key >= 0).
        const auto load_k = [&](uint32_t dst, int nb, auto check_rows) {
            const int n0 = nb * Tr::kBlockN;
            Tr::LoaderK::template load_keys<decltype(check_rows)::value, memory::PagedCopies::kCall>(dst, p, k_rows, n0, t.kv_len - n0, tid);
        };
        const auto load_v = [&](uint32_t dst, int nb, auto check_rows) {
            const int n0 = nb * Tr::kBlockN;
            Tr::LoaderV::template load_keys<decltype(check_rows)::value, memory::PagedCopies::kCall>(dst, p, v_rows, n0, t.kv_len - n0, tid);
        };
        const int top = blk.end - 1;

        Tr::LoaderQ::template load<true>(smem_q, q, p.q_row_stride, t.q_rows, tid);
        load_k(smem_k, top, std::true_type{});
        if constexpr (Tr::kStages == 2) load_v(smem_v, top, std::true_type{});
        memory::cp_async_commit();

        // S = Q K^T for the K tile at k_off bytes past stage 0, masked on boundary blocks.
        const auto scores = [&](float (&acc_s)[Tr::kMmaM][Tr::kNTilesS][4], uint32_t k_off, int nb,
                                auto masked) {
#pragma unroll
            for (int mi = 0; mi < Tr::kMmaM; ++mi) {
#pragma unroll
                for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_s[mi][ni][e] = 0.f;
                }
            }
            memory::LdsmAddr<typename Tr::LayoutK> ka = k_addr;
            ka.base += k_off;
            mma::gemm_qk<Element, Tr::kMmaM, Tr::kNTilesS, Tr::kKSlices>(acc_s, q_addr, ka);
            if constexpr (kMod == softmax::ScoreMod::kSoftcap) {
                softmax::apply_softcap(acc_s, softmax::Softcap::for_raw_scores(p.softcap, p.scale_bmm1));
            }
            if constexpr (kMod == softmax::ScoreMod::kAlibi) {
                softmax::apply_alibi(acc_s, alibi_slope, row0 + rows.shift - (nb * Tr::kBlockN + col0));
            }
            if constexpr (kMod == softmax::ScoreMod::kBias) {
                softmax::apply_bias<Element>(
                    acc_s,
                    [&](int mi, int h) {
                        const int r = row0 + 16 * mi + 8 * h;
                        return r < t.q_len ? softmax::bias_row<Element>(p, t.tile.batch, t.tile.head, r) : nullptr;
                    },
                    nb * Tr::kBlockN + col0, t.kv_len, __frcp_rn(p.scale_bmm1));
            }
            if constexpr (kMod == softmax::ScoreMod::kCustomMask) {
                softmax::apply_custom_mask(
                    acc_s,
                    [&](int mi, int h) {
                        const int r = row0 + 16 * mi + 8 * h;
                        return r < t.q_len ? softmax::custom_mask_row(p, t.tile.batch, r) : nullptr;
                    },
                    nb * Tr::kBlockN + col0, t.kv_len);
            }
            if constexpr (decltype(masked)::value || kHidesKeys) {
                mask::apply(acc_s, rows, row0, nb * Tr::kBlockN + col0);
            }
        };
        // O = O * rescale + softmax(S) V for the V tile at v_off bytes past stage 0 (key block nb).
        const auto accumulate = [&](float (&acc_s)[Tr::kMmaM][Tr::kNTilesS][4], uint32_t v_off, int nb, auto masked) {
            softmax.template update<decltype(masked)::value || kHidesKeys, Tr::kSkipRescale, Tr::kNTilesS, Tr::kNTilesO,
                                    /*kWideLogits=*/true>(acc_s, acc_o, scale_log2);
            uint32_t p_frag[Tr::kMmaM][Tr::kNTilesS / 2][4];  // P as A operand, [warp rows, kBlockN]
            mma::s_to_p<Element>(p_frag, acc_s);
            if constexpr (kDropout) {
                // A lane's rows row0 + 16 mi + {0, 8} and keys col0 + {0, 1, 8, 9} of a k16 slice
                // are one group of the mask: one Philox call each.
                const uint32_t bh = uint32_t(t.tile.batch) * uint32_t(p.h) + uint32_t(t.tile.head);
#pragma unroll
                for (int mi = 0; mi < Tr::kMmaM; ++mi) {
#pragma unroll
                    for (int kk = 0; kk < Tr::kNTilesS / 2; ++kk)
                        dropout::drop_fragment(p_frag[mi][kk], p.dropout, bh, row0 + 16 * mi,
                                               nb * Tr::kBlockN + 16 * kk + col0);
                }
            }
            memory::LdsmAddr<typename Tr::LayoutV> va = v_addr;
            va.base += v_off;
            mma::gemm_pv<Element, Tr::kAccFp16>(acc_o, p_frag, va);
        };

        const auto step = [&](auto masked, int nb) {
            float acc_s[Tr::kMmaM][Tr::kNTilesS][4];  // [warp rows, kBlockN] f32
            if constexpr (Tr::kStages == 2) {
                const uint32_t stage = static_cast<uint32_t>((top - nb) & 1);
                memory::cp_async_wait<0>();
                __syncthreads();  // K[nb], V[nb] landed; every warp is done with the other stage
                if (nb > blk.begin) {  // blocks below the top one are whole
                    load_k(smem_k + (stage ^ 1) * Tr::kSmemK, nb - 1, std::false_type{});
                    load_v(smem_v + (stage ^ 1) * Tr::kSmemV, nb - 1, std::false_type{});
                    memory::cp_async_commit();
                }
                scores(acc_s, stage * Tr::kSmemK, nb, masked);
                accumulate(acc_s, stage * Tr::kSmemV, nb, masked);
            } else {
                memory::cp_async_wait<0>();
                __syncthreads();  // K[nb] landed; every warp is done with the previous V
                // P == 0 times uninitialised shared memory could still be NaN: the tail is zero-filled.
                load_v(smem_v, nb, masked);
                memory::cp_async_commit();
                scores(acc_s, 0u, nb, masked);
                memory::cp_async_wait<0>();
                __syncthreads();  // V[nb] landed; every warp is done with K[nb]
                if (nb > blk.begin) {
                    load_k(smem_k, nb - 1, std::false_type{});
                    memory::cp_async_commit();
                }
                accumulate(acc_s, 0u, nb, masked);
            }
        };

        // Masked blocks at the top (key tail, diagonal, a window's right edge), the whole
        // ones, then masked ones at the bottom (a window's left edge or a chunk start).
        int nb = top;
        for (; nb >= blk.full_end; --nb) step(std::true_type{}, nb);
        for (; nb >= blk.full_begin; --nb) step(std::false_type{}, nb);
        if constexpr (kMask == mask::Kind::kLocal) {
            for (; nb >= blk.begin; --nb) step(std::true_type{}, nb);
        }
    }

    float inv[Tr::kMmaM][2];
    softmax.finalize(inv, p.scale_softmax * p.scale_bmm2 * (kDropout ? p.dropout.rescale : 1.f), p, t.tile.head);
    softmax.store_lse(p, t.tile.batch, t.tile.head, t.m0 + warp * Tr::kWarpRows + lane / 4, t.q_len, lane);
    epilogue::store_o<typename Tr::LayoutO, Tr::kHeadDimV / kElemsPerChunk, Tr::kThreads>(
        acc_o, inv, smem, warp * Tr::kWarpRows, lane, o, p.o_row_stride, t.q_rows, tid);
}

// The __global__ for a mask, as the registry's EntryFn returns it.
template <class Tr>
const void* entry(MaskType m) {
    return kernel::entry_for(m, [](auto kind) { return &fwd_kernel<Tr, decltype(kind)::value>; });
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit this
// instantiation or the contract of kernel::params_fit (launch_checks.h); else the launch's
// own error.
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV, false, /*dropout=*/true)) return cudaErrorInvalidValue;
    if (entry<Tr>(p.mask) == nullptr) return cudaErrorInvalidValue;  // a mask the family does not implement
    const dim3 grid = sched::static_grid(ceil_div(p.s_q_max, Tr::kBlockM), p.h, p.b);
    return kernel::with_variant(
        p,
        [&](auto kind, auto mod) {
            constexpr mask::Kind kMask = decltype(kind)::value;
            constexpr softmax::ScoreMod kMod = decltype(mod)::value;
            const auto run = [&](auto drops) {
                constexpr bool kDropout = decltype(drops)::value;
                const void* fn = reinterpret_cast<const void*>(&fwd_kernel<Tr, kMask, kMod, kDropout>);
                if (Tr::kSmemBytes > 48 * 1024) {
                    cudaError_t err =
                        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
                    // Ask for the largest carveout so that several CTAs of this size share an SM.
                    if (err == cudaSuccess) {
                        err = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                   cudaSharedmemCarveoutMaxShared);
                    }
                    if (err != cudaSuccess) return err;
                }
                fwd_kernel<Tr, kMask, kMod, kDropout><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
                return cudaGetLastError();
            };
            if constexpr (kMod == softmax::ScoreMod::kNone) {
                if (p.dropout.threshold != 0) return run(std::true_type{});
            }
            return run(std::false_type{});
        },
        cudaErrorInvalidValue);
}

}  // namespace flash_sm80
}  // namespace fmha
