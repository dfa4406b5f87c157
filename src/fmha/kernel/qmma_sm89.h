// The "qmma" family: FP8 (e4m3) attention on mma.sync m16n8k32 with e4m3 operands, the SM89
// (Ada) instruction, built for sm_89 and every later arch (on sm_90 ptxas lowers it to
// F2FP unpacks and HMMA: mma/mma_sm89.h). The flash family's schedule (flash_sm80.h): one CTA
// of 4 warps a 64-row query tile of one (batch, head), 16 rows a warp, key blocks of 64 from
// the last one down, K and V double-buffered by cp.async. Design: bench/NOTES.md §79.
//
// Operands. Q and K rows (e4m3, SmemLayout as 16-bit pairs) give QMMA's A and B fragments by
// plain ldmatrix. P is rounded to e4m3 in registers without lane exchange (mma/fp8_sm90.h
// p_to_e4m3: its k slots in key_of_slot order), so V is transposed once a block into a K-major
// [dv, 64 slots] tile in the same key order (transpose_v below), whose rows ldmatrix reads as
// P V's B fragments.
//
// Softmax: the e4m3 rule of the ws-fp8 family and of FlashAttention-3 (online_softmax_sm90.h
// OnlineSoftmaxScaled<8, true>): the exact running max of the blocks visited, last block
// first, P = 2^8 exp2(x - M) rounded to e4m3, so the driver's reference (p_block_keys = the
// key block) replays it. q_descale * k_descale fold into the scale, v_descale into O's.
// O in bf16, or in e4m3 (Params::o_e4m3). Masks: all but the custom one; variants: sinks,
// the LSE, a paged KV cache.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fmha/descale.h"
#include "fmha/epilogue/store_o.h"
#include "fmha/kernel/launch_checks.h"
#include "fmha/kernel/row_tile.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/gmem_tile.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/mma/fp8_sm90.h"
#include "fmha/mma/mma_sm89.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/sched/tile_scheduler.h"
#include "fmha/seq_lens.h"
#include "fmha/softmax/online_softmax_sm90.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace qmma {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_,
          bool kAccFp16_>
struct Traits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarpsM = kWarpsM_;
    static constexpr int kThreads = kWarpsM * kWarpSize;
    static constexpr int kNTilesS = kBlockN / 8;       // 8-key n-tiles of S
    static constexpr int kNTilesO = kHeadDimV / 8;     // 8-column n-tiles of O
    static constexpr int kKSlices = kHeadDim / 32;     // k32 steps of Q K^T
    static constexpr int kPSlices = kBlockN / 32;      // k32 steps of P V

    // e4m3 rows as 16-bit pairs: a row of n bytes is n / 2 of them (cp.async, ldmatrix).
    using LayoutQ = memory::SmemLayout<kBlockM, kHeadDim / 2>;
    using LayoutK = memory::SmemLayout<kBlockN, kHeadDim / 2>;
    using LayoutV = memory::SmemLayout<kBlockN, kHeadDimV / 2>;
    using LayoutVt = memory::SmemLayout<kHeadDimV, kBlockN / 2>;  // [dv, key slots]
    using LayoutO = memory::SmemLayout<kBlockM, kHeadDimV>;      // bf16 O, the epilogue's staging
    using LoaderQ = memory::TileLoader<LayoutQ, kHeadDim / kChunkBytes, kThreads>;
    using LoaderK = memory::TileLoader<LayoutK, kHeadDim / kChunkBytes, kThreads>;
    using LoaderV = memory::TileLoader<LayoutV, kHeadDimV / kChunkBytes, kThreads>;

    static constexpr int kSmemQ = LayoutQ::kBytes;
    static constexpr int kSmemK = LayoutK::kBytes;  // one stage
    static constexpr int kSmemV = LayoutV::kBytes;  // one stage
    static constexpr int kSmemVt = LayoutVt::kBytes;
    static constexpr int kSmemBytes = max_int(kSmemQ + 2 * (kSmemK + kSmemV) + kSmemVt, LayoutO::kBytes);

    static_assert(std::is_same_v<Element, __nv_fp8_e4m3>, "qmma: e4m3 inputs");
    static_assert(!kAccFp16_, "qmma: fp32 accumulation");
    // d = 256: O's 128 registers and sm_90's unpacked fragments spill (bench/NOTES.md §79).
    static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0 && kHeadDim <= 128 && kHeadDimV <= 128,
                  "qmma: d and dv multiples of 32 up to 128 (k32 slices, 32-column transposes)");
    static_assert(kWarpsN_ == 1 && kBlockM == 16 * kWarpsM, "qmma: 16 query rows a warp");
    static_assert(kBlockN == 64, "qmma: 64-key blocks (the transpose's and the reference's block)");
    static_assert(kSmemBytes <= 99 * 1024, "qmma: the tiles fit sm_89's 99 KB");
};

FMHA_DEVICE void st_shared_b32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// V^T of one stage: raw [kBlockN keys, dv] into vt [dv, kBlockN slots], slots in key_of_slot
// order (fp8_sm90.h's transpose with SmemLayout addresses: one ldmatrix.x4.trans of 16 keys x
// 32 columns and two byte permutes; then each lane's 4 words, as stmatrix.x4 would place them,
// by plain stores: sm_89 has no stmatrix). The warps take every kWarpsM-th step.
template <class Tr>
FMHA_DEVICE void transpose_v(uint32_t raw, uint32_t vt, int warp, int lane) {
    constexpr int kKeyGroups = Tr::kBlockN / 16;
    constexpr int kSteps = kKeyGroups * (Tr::kHeadDimV / 32);
    const int m = lane >> 3;  // the matrix this lane addresses: keys + 8 * (m & 1), columns + 16 * (m >> 1)
#pragma unroll
    for (int step = warp; step < kSteps; step += Tr::kWarpsM) {
        const int kg = step % kKeyGroups, d0 = 32 * (step / kKeyGroups);
        const int key = 16 * kg + 8 * (m & 1) + (lane & 7);
        uint32_t r[4];
        mma::ldmatrix_x4_trans(r, raw + Tr::LayoutV::offset(key, d0 / 16 + (m >> 1)));
        // word i: row d0 + 16 (i / 2) + 2 (lane / 4) + i % 2 of V^T, slots 16 kg + 4 (lane % 4) ..
        const uint32_t w[4] = {__byte_perm(r[0], r[1], 0x6420), __byte_perm(r[0], r[1], 0x7531),
                               __byte_perm(r[2], r[3], 0x6420), __byte_perm(r[2], r[3], 0x7531)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = d0 + 16 * (i >> 1) + 2 * (lane >> 2) + (i & 1);
            st_shared_b32(vt + Tr::LayoutVt::offset(row, kg) + 4 * (lane & 3), w[i]);
        }
    }
}

// c0, c1 (n-tiles n, n + 1) += a x the B fragments of one ldmatrix.x4 at `b_addr` (rows 0-7 |
// 8-15 of the pair x k bytes 0-15 | 16-31 of the k32 slice).
FMHA_DEVICE void qmma_pair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4], uint32_t b_addr) {
    uint32_t b[4];
    mma::ldmatrix_x4(b, b_addr);
    const uint32_t b0[2] = {b[0], b[1]};
    const uint32_t b1[2] = {b[2], b[3]};
    mma::mma_e4m3_16832(c0, a, b0);
    mma::mma_e4m3_16832(c1, a, b1);
}

template <class Tr, mask::Kind kMask>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel(const __grid_constant__ Params p) {
    using Element = typename Tr::Element;
    using Softmax = softmax::OnlineSoftmaxScaled<8, true>;
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

    const auto rows = mask::Rows<kMask>::make(p, t.q_len, t.kv_len);
    const mask::Blocks blk = mask::blocks(rows, t.m0, t.m0 + t.q_rows - 1, Tr::kBlockN);

    const uint32_t smem_q = smem_u32(smem);
    const uint32_t smem_k = smem_q + Tr::kSmemQ;             // 2 x [kBlockN, d]
    const uint32_t smem_v = smem_k + 2 * Tr::kSmemK;         // 2 x [kBlockN, dv]
    const uint32_t smem_vt = smem_v + 2 * Tr::kSmemV;        // [dv, kBlockN]
    memory::LdsmAddr<typename Tr::LayoutQ> q_addr;
    memory::LdsmAddr<typename Tr::LayoutK> k_addr;
    memory::LdsmAddr<typename Tr::LayoutVt> vt_addr;
    q_addr.init(smem_q, warp * 16 + mma::lane_row_a(lane), mma::lane_chunk_a(lane));
    k_addr.init(smem_k, mma::lane_row_b(lane), mma::lane_chunk_b(lane));
    vt_addr.init(smem_vt, mma::lane_row_b(lane), mma::lane_chunk_b(lane));

    float acc_o[1][Tr::kNTilesO][4];
#pragma unroll
    for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_o[0][nt][e] = 0.f;
    }
    Softmax softmax;
    softmax.init();

    if (blk.count() > 0) {
        const float scale_log2 = p.scale_bmm1 * kLog2e * descale(p.q_descale, p, t.tile.batch, t.kv_head) *
                                 descale(p.k_descale, p, t.tile.batch, t.kv_head);
        const int row0 = t.m0 + warp * 16 + lane / 4;  // this lane's first query row
        const int col0 = 2 * (lane % 4);             // this lane's first key in an n-tile
        const auto load_kv = [&](int stage, int nb, auto check_rows) {
            const int n0 = nb * Tr::kBlockN;
            Tr::LoaderK::template load_keys<decltype(check_rows)::value, memory::PagedCopies::kCall>(
                smem_k + stage * Tr::kSmemK, p, k_rows, n0, t.kv_len - n0, tid);
            Tr::LoaderV::template load_keys<decltype(check_rows)::value, memory::PagedCopies::kCall>(
                smem_v + stage * Tr::kSmemV, p, v_rows, n0, t.kv_len - n0, tid);
        };
        const int top = blk.end - 1;
        Tr::LoaderQ::template load<true>(smem_q, q, p.q_row_stride, t.q_rows, tid);
        load_kv(0, top, std::true_type{});
        memory::cp_async_commit();

        const auto step = [&](auto masked, int nb) {
            const int stage = (top - nb) & 1;
            memory::cp_async_wait<0>();
            __syncthreads();  // K[nb], V[nb] landed; every warp is done with the other stage and with V^T
            transpose_v<Tr>(smem_v + stage * Tr::kSmemV, smem_vt, warp, lane);
            if (nb > blk.begin) {  // blocks below the top one are whole
                load_kv(stage ^ 1, nb - 1, std::false_type{});
                memory::cp_async_commit();
            }
            float acc_s[1][Tr::kNTilesS][4];
#pragma unroll
            for (int ni = 0; ni < Tr::kNTilesS; ++ni) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[0][ni][e] = 0.f;
            }
            memory::LdsmAddr<typename Tr::LayoutK> ka = k_addr;
            ka.base += stage * Tr::kSmemK;
            // Rolled: on sm_90, where each QMMA becomes F2FP unpacks and HMMAs, the unrolled
            // slices' unpacked fragments took d = 128's causal and local kernels past 255 registers.
#pragma unroll 1
            for (int kk = 0; kk < Tr::kKSlices; ++kk) {
                uint32_t a[4];  // rows g, g + 8 x d 32 kk + 4q .., + 16
                mma::ldmatrix_x4(a, q_addr(0, 2 * kk));
#pragma unroll
                for (int np = 0; np < Tr::kNTilesS / 2; ++np)  // keys 16 np .., d 32 kk ..
                    qmma_pair(acc_s[0][2 * np], acc_s[0][2 * np + 1], a, ka(np * 16, 2 * kk));
            }
            if constexpr (decltype(masked)::value) mask::apply(acc_s, rows, row0, nb * Tr::kBlockN + col0);
            float alpha[2];
            softmax.template scale<decltype(masked)::value>(acc_s, alpha, scale_log2);
            Softmax::rescale(acc_o, alpha);
            uint32_t p_frag[Tr::kPSlices][4];  // P (x 2^8) in e4m3, keys in key_of_slot order
            mma::p_to_e4m3<Tr::kNTilesS>(p_frag, acc_s);
            __syncthreads();  // V^T of this block written by every warp
#pragma unroll
            for (int kk = 0; kk < Tr::kPSlices; ++kk) {
#pragma unroll
                for (int np = 0; np < Tr::kNTilesO / 2; ++np)  // columns 16 np .., key slots 32 kk ..
                    qmma_pair(acc_o[0][2 * np], acc_o[0][2 * np + 1], p_frag[kk], vt_addr(np * 16, 2 * kk));
            }
        };

        // Masked blocks at the top (key tail, diagonal, a window's right edge), the whole ones,
        // then masked ones at the bottom (a window's left edge or a chunk start).
        int nb = top;
        for (; nb >= blk.full_end; --nb) step(std::true_type{}, nb);
        for (; nb >= blk.full_begin; --nb) step(std::false_type{}, nb);
        if constexpr (kMask == mask::Kind::kLocal) {
            for (; nb >= blk.begin; --nb) step(std::true_type{}, nb);
        }
    }

    float inv[2];
    softmax.finalize(inv, p.scale_softmax * p.scale_bmm2 * descale(p.v_descale, p, t.tile.batch, t.kv_head), p,
                     t.tile.head);
    softmax.store_lse(p, t.tile.batch, t.tile.head, t.m0 + warp * 16 + lane / 4, t.q_len, lane);
    if (p.o_e4m3) {  // O rounded to e4m3 (saturating) from registers; o strides in e4m3 elements
        uint8_t* o = static_cast<uint8_t*>(p.o) + static_cast<int64_t>(t.q_off + t.m0) * p.o_row_stride +
                     static_cast<int64_t>(t.tile.head) * p.o_head_stride;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = warp * 16 + lane / 4 + 8 * h;
            if (r >= t.q_rows) continue;
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
                const __nv_fp8x2_storage_t v = __nv_cvt_float2_to_fp8x2(
                    make_float2(acc_o[0][nt][2 * h] * inv[h], acc_o[0][nt][2 * h + 1] * inv[h]), __NV_SATFINITE,
                    __NV_E4M3);
                *reinterpret_cast<__nv_fp8x2_storage_t*>(o + r * p.o_row_stride + 8 * nt + 2 * (lane % 4)) = v;
            }
        }
    } else {
        __nv_bfloat16* o = static_cast<__nv_bfloat16*>(p.o) + static_cast<int64_t>(t.q_off + t.m0) * p.o_row_stride +
                           static_cast<int64_t>(t.tile.head) * p.o_head_stride;
        const float(&inv1)[1][2] = *reinterpret_cast<const float(*)[1][2]>(&inv);
        epilogue::store_o<typename Tr::LayoutO, Tr::kHeadDimV / kElemsPerChunk, Tr::kThreads>(
            acc_o, inv1, smem, warp * 16, lane, o, p.o_row_stride, t.q_rows, tid);
    }
}

// The __global__ for a mask, as the registry's EntryFn returns it (no custom mask).
template <class Tr>
const void* entry(MaskType m) {
    if (m == MaskType::kCustom) return nullptr;
    return kernel::entry_for(m, [](auto kind) { return &fwd_kernel<Tr, decltype(kind)::value>; });
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit: the
// contract of kernel::params_fit, no score modifier (softcap, ALiBi, bias, custom mask), no
// wide logits, e4m3 strides of whole 16-byte chunks.
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV, /*e4m3_out=*/true)) return cudaErrorInvalidValue;
    if (entry<Tr>(p.mask) == nullptr || kernel::score_mods(p) > 0 || p.wide_logits) return cudaErrorInvalidValue;
    const int64_t strides[] = {p.q_row_stride, p.q_head_stride, p.k_row_stride, p.k_head_stride,
                               p.v_row_stride, p.v_head_stride, p.k_block_stride, p.v_block_stride};
    for (const int64_t s : strides) {
        if (s % kChunkBytes != 0) return cudaErrorInvalidValue;
    }
    const dim3 grid = sched::static_grid(ceil_div(p.s_q_max, Tr::kBlockM), p.h, p.b);
    return kernel::with_mask(
        p.mask,
        [&](auto kind) {
            const void* fn = reinterpret_cast<const void*>(&fwd_kernel<Tr, decltype(kind)::value>);
            if (Tr::kSmemBytes > 48 * 1024) {
                const cudaError_t err =
                    cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
                if (err != cudaSuccess) return err;
            }
            fwd_kernel<Tr, decltype(kind)::value><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
            return cudaGetLastError();
        },
        cudaErrorInvalidValue);
}

}  // namespace qmma
}  // namespace fmha
