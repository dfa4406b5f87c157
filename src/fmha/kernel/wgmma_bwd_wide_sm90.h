// The backward pass's main kernel on wgmma for the 256 tile (sm_90a; issue #33, bench/NOTES.md
// §75, §76: d = 256, and the heads between 128 and 256 zero-padded up to it, MLA's 192 / 128
// among them): the wide sibling of wgmma_bwd_sm90.h, which holds dK and dV of 64 keys x d a
// warpgroup and so ends at d = 128 (d = 256 would take 256 registers a thread for them).
//
// One CTA per (64-key block, query head, batch), two warpgroups splitting d: warpgroup g
// keeps dK, dV of the 64 keys x columns 128 g .. + 127 (64 + 64 registers). Per block of 64
// queries the two square products are split by role, so that each is one m64 n64 product
// (half of S^T by queries would be two m64 n32 ones, which read shared memory faster than
// the tensor cores use it):
//   warpgroup 0: S^T = K Q^T, P^T = exp2(S^T scale - LSE), P^T to smem (bar P)
//   warpgroup 1: dP^T = V dO^T; reads P^T; dS^T = P^T (dP^T - D) to smem twice: [keys,
//                queries] in P^T's place (each warp rewrites only the rows it read) for
//                warpgroup 0's dK, and [queries, keys] for dQ (bar dS)
//   both:        dV += P^T dO, dK += dS^T Q over their columns (RS: A from registers,
//                warpgroup 1's P^T and warpgroup 0's dS^T through ldmatrix), dQ = dS K over
//                their columns in two m64 n64 products, staged in smem (a ring of three
//                32-column panels a warpgroup, so that chunk 1 need not wait for chunk 0's adds
//                to read theirs) and added to the fp32 accumulator by TMA reduce-adds.
// P for dS is the 16-bit P^T that dV uses (one rounding, as dS itself is rounded after).
// Q and the rows' LSE, D in two stages; dO in one (shared memory: K, V, Q x 2, dO are 160 of
// the 227 KB), reloaded once both dV products have read it. The deterministic mode's turns,
// the padding and the launch (wgmma_bwd_launch.h) are the narrow kernel's. Not here: softcap,
// ALiBi, dropout (flash-bwd serves them on the 256 tile).
#pragma once

#include "fmha/kernel/wgmma_bwd/common.h"

namespace fmha {
namespace wgmma_bwd {

template <typename Element_, int kHeadDim_>
struct WideTraits {
    using Element = Element_;
    static constexpr bool kWide = true;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHalf = kHeadDim / 2;  // dK, dV, dQ columns a warpgroup
    static constexpr int kBlockM = 64;          // queries a step
    static constexpr int kBlockN = 64;          // keys a CTA
    static constexpr int kThreads = 256;
    static constexpr int kStages = 2;          // Q and the rows; dO has one buffer
    static constexpr int kTileK = kBlockN * kHeadDim * 2;  // K or V [64, d]
    static constexpr int kTileQ = kBlockM * kHeadDim * 2;  // Q or dO [64, d]
    static constexpr int kTileP = kBlockN * kBlockM * 2;   // P^T then dS^T, dS: one 64-column panel each
    static constexpr int kDqChunk = 64;                    // dQ columns a product
    static constexpr int kDqChunks = kHalf / kDqChunk;
    static constexpr int kDqPanelCols = 32;  // the staging: 32 fp32 columns x 64 rows a TMA box
    static constexpr int kDqPanelBytes = 64 * 128;
    static constexpr int kDqSlots = 3;  // a warpgroup's staging ring: a chunk's 2 panels + 1
    static constexpr int kSmemK = 0;
    static constexpr int kSmemV = kSmemK + kTileK;
    static constexpr int kSmemQ = kSmemV + kTileK;  // [kStages]
    static constexpr int kSmemDO = kSmemQ + kStages * kTileQ;
    static constexpr int kSmemPT = kSmemDO + kTileQ;   // P^T, then dS^T in its place [keys, queries]
    static constexpr int kSmemDS = kSmemPT + kTileP;   // dS [queries, keys]
    static constexpr int kSmemDQ = kSmemDS + kTileP;   // [warpgroup][kDqSlots panels]
    static constexpr int kSmemRows = kSmemDQ + 2 * kDqSlots * kDqPanelBytes;  // [kStages][LSE, D][64]
    static constexpr int kRowBytes = kBlockM * 4;
    static constexpr int kSmemBars = kSmemRows + kStages * 2 * kRowBytes;  // K/V, Q [kStages], dO
    static constexpr int kSmemBytes = kSmemBars + 8 * (2 + kStages) + 1024;  // + alignment slack
    static_assert(kHeadDim == 256, "wide wgmma-bwd: d = 256");
    static_assert(kSmemBytes <= 227 * 1024, "sm_90's shared memory a block");
};

namespace wide {

// Named barriers (0 is __syncthreads'): P^T stored (warpgroup 0 arrives, 1 waits), dS stored
// (1 arrives, 0 waits), and one a warpgroup for its dQ staging.
constexpr int kBarP = 1, kBarDS = 2, kBarGroup0 = 3;

// Byte address, in a [64 keys, 64 queries] K-major SW128 tile, of the row this lane names for
// the 8 x 8 matrices of k slice kk of warp `warp`'s A fragment (matrix m = lane / 8: keys + 8
// (m % 2), queries + 8 (m / 2)): stmatrix and ldmatrix move the fragment as wgmma's RS A takes it.
FMHA_DEVICE uint32_t frag_row(uint32_t tile, int warp, int lane, int kk) {
    const int m = lane / 8;
    return tile + mma::sw128_offset(16 * warp + 8 * (m % 2) + lane % 8, 2 * (16 * kk + 8 * (m / 2)), 64);
}

}  // namespace wide

template <class Tr, BwdMask kMask, bool kDeterministic>
__global__ void __launch_bounds__(Tr::kThreads, 1) wide_kernel(const __grid_constant__ MainArgs args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Tr::Element;
    constexpr bool kBf16 = ElementTraits<Element>::kIsBf16;
    const BwdParams& bp = args.bp;
    const Params& p = bp.p;
    extern __shared__ char smem_raw[];
    char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid % kWarpSize, warp = (tid / kWarpSize) % 4, wg = tid / 128,
              wg_tid = tid % 128;
    KeyBlock cta = key_block<Tr, kDeterministic>(p);
    if (cta.n0 >= cta.kv_len) return;
    cta.walk<Tr, kMask>(p);
    // (Named copies: C++17 lambdas cannot capture structured bindings.)
    const int n_block = cta.n_block, head = cta.head, batch = cta.batch, q_len = cta.q_len, kv_len = cta.kv_len,
              n0 = cta.n0, q_off = cta.q_off, kv_off = cta.kv_off, kv_head = cta.kv_head, shift = cta.shift,
              m_begin = cta.m_begin, m_end = cta.m_end;
    const int blocks = m_end - m_begin;

    const uint32_t base = smem_u32(smem);
    const uint32_t sk = base + Tr::kSmemK, sv = base + Tr::kSmemV, sq = base + Tr::kSmemQ, sdo = base + Tr::kSmemDO,
                   spt = base + Tr::kSmemPT, sds = base + Tr::kSmemDS,
                   bars = base + Tr::kSmemBars;
    const uint32_t bar_kv = bars, bar_do = bars + 8 * (1 + Tr::kStages);
    const auto bar_q = [&](int j) { return bars + 8 * (1 + j % Tr::kStages); };
    const float* rows_s = reinterpret_cast<const float*>(smem + Tr::kSmemRows);

    // Loads (TMA, one issuing thread, mbarriers counting bytes): K, V once; Q and the rows of
    // block j into stage j % 2; dO of block j into its one buffer.
    const auto load_q = [&](int j) {
        const int st = j % Tr::kStages, m0 = (m_begin + j) * Tr::kBlockM;
        memory::mbar_arrive_expect_tx(bar_q(j), head_bytes<Tr::kHeadDim, Tr::kBlockM>(args.panels_k) + 2 * Tr::kRowBytes);
        load_head<Tr::kHeadDim, Tr::kBlockM>(sq + st * Tr::kTileQ, &args.q_map, bar_q(j), q_off + m0, head, args.panels_k);
        const int row = int((int64_t(batch) * p.h + head) * flash_bwd::rows_pitch(p)) + m0;
        const uint32_t rows = base + Tr::kSmemRows + st * 2 * Tr::kRowBytes;
        memory::tma_load_1d(rows, &args.lse_map, bar_q(j), row);
        memory::tma_load_1d(rows + Tr::kRowBytes, &args.dsum_map, bar_q(j), row);
    };
    const auto load_do = [&](int j) {
        memory::mbar_arrive_expect_tx(bar_do, head_bytes<Tr::kHeadDim, Tr::kBlockM>(args.panels_v));
        load_head<Tr::kHeadDim, Tr::kBlockM>(sdo, &args.do_map, bar_do, q_off + (m_begin + j) * Tr::kBlockM, head,
                                             args.panels_v);
    };
    if (tid == 0) {
#pragma unroll
        for (int b = 0; b < 2 + Tr::kStages; ++b) memory::mbar_init(bars + 8 * b, 1);
        memory::mbar_fence_init();
    }
    if (args.panels_k != 0) {  // a narrower head (MLA's 192 / 128, d = 192), zero-padded
        zero_panels<Tr::kHeadDim, Tr::kBlockN>(sk, 0, 1, args.panels_k, tid, Tr::kThreads);
        zero_panels<Tr::kHeadDim, Tr::kBlockN>(sv, 0, 1, args.panels_v, tid, Tr::kThreads);
        zero_panels<Tr::kHeadDim, Tr::kBlockM>(sq, Tr::kTileQ, Tr::kStages, args.panels_k, tid, Tr::kThreads);
        zero_panels<Tr::kHeadDim, Tr::kBlockM>(sdo, 0, 1, args.panels_v, tid, Tr::kThreads);
        memory::fence_proxy_async_smem();
    }
    __syncthreads();
    if (tid == 0) {
        memory::mbar_arrive_expect_tx(bar_kv, head_bytes<Tr::kHeadDim, Tr::kBlockN>(args.panels_k) +
                                                  head_bytes<Tr::kHeadDim, Tr::kBlockN>(args.panels_v));
        load_head<Tr::kHeadDim, Tr::kBlockN>(sk, &args.k_map, bar_kv, kv_off + n0, kv_head, args.panels_k);
        load_head<Tr::kHeadDim, Tr::kBlockN>(sv, &args.v_map, bar_kv, kv_off + n0, kv_head, args.panels_v);
        for (int j = 0; j < min(blocks, Tr::kStages); ++j) load_q(j);
        if (blocks > 0) load_do(0);
    }

    // Descriptors (wgmma_bwd_sm90.h's conventions): K, V, Q, dO are [64 rows, d] in 64-column
    // panels of 8 KB; a k16 step over d adds 32 bytes inside a panel.
    const auto kmajor = [](uint32_t addr) { return mma::make_smem_desc_sw128(addr, 16, mma::kSw128AtomBytes); };
    const auto mnmajor = [](uint32_t addr) { return mma::make_smem_desc_sw128(addr, 64 * 128, mma::kSw128AtomBytes); };
    constexpr int kPanel = 64 * 128;
    const auto in_d = [](int kk) { return uint64_t(((kk / 4) * kPanel + 32 * (kk % 4)) >> 4); };
    const int col0 = Tr::kHalf * wg;  // this warpgroup's columns of dK, dV, dQ
    const uint64_t desc_k = kmajor(sk), desc_v = kmajor(sv), desc_q = kmajor(sq), desc_do = kmajor(sdo),
                   desc_ds = kmajor(sds);
    const uint64_t desc_q_mn = mnmajor(sq + (col0 / 64) * kPanel), desc_do_mn = mnmajor(sdo + (col0 / 64) * kPanel),
                   desc_k_mn = mnmajor(sk + (col0 / 64) * kPanel);

    float acc_dk[1][Tr::kHalf / 8][4], acc_dv[1][Tr::kHalf / 8][4];
#pragma unroll
    for (int nt = 0; nt < Tr::kHalf / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[0][nt][e] = acc_dv[0][nt][e] = 0.f;
    const float scale_log2 = p.scale_bmm1 * kLog2e;
    const int key_base = n0 + 16 * warp + lane / 4;  // this thread's first key (rows +0, +8)

    const auto order = [&](int m) { return cta.order(bp, m, Tr::kBlockM); };
    int panel = 0;  // dQ panels this warpgroup has staged
    memory::mbar_wait(bar_kv, 0);
    for (int j = 0; j < blocks; ++j) {
        const int m_block = m_begin + j, m0 = m_block * Tr::kBlockM, st = j % Tr::kStages;
        const uint64_t stage = uint64_t(st * Tr::kTileQ) >> 4;
        const float* lse_s = rows_s + st * 2 * Tr::kBlockM;
        const float* dsum_s = lse_s + Tr::kBlockM;
        float acc[1][Tr::kBlockM / 8][4];  // S^T (warpgroup 0) or dP^T (1): [64 keys, 64 queries]
        uint32_t p_frag[1][Tr::kBlockM / 16][4], ds_frag[1][Tr::kBlockM / 16][4];
        const auto square = [&](uint64_t desc_a, uint64_t desc_b) {
            mma::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                mma::wgmma_ss<kBf16, Tr::kBlockM>(mma::flat(acc), desc_a + in_d(kk), desc_b + in_d(kk), kk > 0);
            mma::wgmma_commit();
        };
        // dV += P^T dO over this warpgroup's columns, A = P^T from registers.
        const auto issue_dv = [&] {
            mma::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                mma::wgmma_rs<kBf16, Tr::kHalf>(mma::flat(acc_dv), p_frag[0][kk], desc_do_mn + kk * 128, true);
            mma::wgmma_commit();
        };
        // Deterministic: the last block's turn released (unless late_release) and this block's
        // read while the square products run (wait_turn below).
        [[maybe_unused]] int seen = -1;
        const auto poll = [&] {
            if constexpr (kDeterministic)
                if (wg_tid == 0) {
                    if (j > 0 && !late_release<kMask>(q_len, kv_len)) release_turn(order(m_block - 1));
                    seen = poll_turn(order(m_block));
                }
        };
        if (wg == 0) {
            memory::mbar_wait(bar_q(j), (j / Tr::kStages) & 1);
            square(desc_k, desc_q + stage);
            poll();
            mma::wgmma_wait<0>();
            mma::fence_operands(acc);
            // P^T; the LSE is +inf for rows past q_len or that see no key (P = 0 without a test),
            // and a block whose keys are all valid and visible to all its rows tests nothing.
            const auto softmax = [&](auto full) {
                constexpr bool kFull = decltype(full)::value;
#pragma unroll
                for (int nt = 0; nt < Tr::kBlockM / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = key_base + 8 * (e / 2), col = nt * 8 + 2 * (lane % 4) + e % 2;
                        const bool visible =
                            kFull || (key < kv_len && flash_bwd::bwd_visible<kMask>(p, m0 + col + shift, key));
                        const float pv = fast_exp2(fmaf(acc[0][nt][e], scale_log2, -lse_s[col]));
                        acc[0][nt][e] = visible ? pv : 0.f;
                    }
            };
            bool full = n0 + Tr::kBlockN <= kv_len;
            if constexpr (kMask == BwdMask::kCausal) full = full && m0 + shift >= n0 + Tr::kBlockN - 1;
            else if constexpr (kMask == BwdMask::kLocal) full = false;
            if (full) softmax(std::true_type{});
            else softmax(std::false_type{});
            mma::s_to_p<Element>(p_frag, acc);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) {
                const uint32_t(&f)[4] = p_frag[0][kk];
                mma::stmatrix_x4(wide::frag_row(spt, warp, lane, kk), f[0], f[1], f[2], f[3]);
            }
            memory::bar_arrive<256>(wide::kBarP);
            memory::mbar_wait(bar_do, j & 1);
            issue_dv();
            // dS stored, and warpgroup 1 done with P^T and dO (its dP^T and dV waited).
            memory::bar_sync<256>(wide::kBarDS);
            mma::wgmma_wait<0>();
            mma::fence_operands(p_frag);
            mma::fence_operands(acc_dv);
            if (tid == 0 && j + 1 < blocks) load_do(j + 1);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) mma::ldmatrix_x4(ds_frag[0][kk], wide::frag_row(spt, warp, lane, kk));
        } else {
            memory::mbar_wait(bar_do, j & 1);
            square(desc_v, desc_do);
            poll();
            // P^T stored; warpgroup 0 is done with block j - 1, whose Q stage takes block j + 1.
            memory::bar_sync<256>(wide::kBarP);
            if (wg_tid == 0 && j >= 1 && j + 1 < blocks) load_q(j + 1);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) mma::ldmatrix_x4(p_frag[0][kk], wide::frag_row(spt, warp, lane, kk));
            issue_dv();
            memory::mbar_wait(bar_q(j), (j / Tr::kStages) & 1);  // the rows' D
            mma::wgmma_wait<1>();
            mma::fence_operands(acc);
#pragma unroll
            for (int nt = 0; nt < Tr::kBlockM / 8; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // s_to_p's pairs: n-tile nt's elements 2 h, 2 h + 1
                    const float2 pv = ElementTraits<Element>::unpack(p_frag[0][nt / 2][2 * (nt % 2) + h]);
                    const int col = nt * 8 + 2 * (lane % 4);
                    acc[0][nt][2 * h] = pv.x * (acc[0][nt][2 * h] - dsum_s[col]);
                    acc[0][nt][2 * h + 1] = pv.y * (acc[0][nt][2 * h + 1] - dsum_s[col + 1]);
                }
            mma::s_to_p<Element>(ds_frag, acc);
            // dS^T for warpgroup 0's dK; dS transposed ([queries, keys], K-major) for dQ: the
            // four 8 x 8 matrices of each 16-query slice, transposed by stmatrix.
            const int m = lane / 8, key0 = 16 * warp + 8 * (m % 2);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) {
                const uint32_t(&f)[4] = ds_frag[0][kk];
                mma::stmatrix_x4(wide::frag_row(spt, warp, lane, kk), f[0], f[1], f[2], f[3]);
                mma::stmatrix_x4_trans(sds + mma::sw128_offset(16 * kk + 8 * (m / 2) + lane % 8, 2 * key0, 64), f);
            }
            memory::fence_proxy_async_smem();  // dS is read by wgmma
            mma::wgmma_wait<0>();
            mma::fence_operands(p_frag);
            mma::fence_operands(acc_dv);
            memory::bar_arrive<256>(wide::kBarDS);
        }

        // dK += dS^T Q (RS), then dQ = dS K over this warpgroup's columns, one commit group a
        // chunk so that chunk 0 is staged while chunk 1 runs.
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
            mma::wgmma_rs<kBf16, Tr::kHalf>(mma::flat(acc_dk), ds_frag[0][kk], desc_q_mn + stage + kk * 128, true);
        mma::wgmma_commit();
        float acc_dq[Tr::kDqChunks][1][8][4];
#pragma unroll
        for (int c = 0; c < Tr::kDqChunks; ++c) {
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                mma::wgmma_ss<kBf16, 64, true>(mma::flat(acc_dq[c]), desc_ds + 2 * kk,
                                               desc_k_mn + c * (kPanel >> 4) + kk * 128, kk > 0);
            mma::wgmma_commit();
        }
        if constexpr (kDeterministic) {  // the narrow kernel's order and release
            if (wg_tid == 0) {
                if (j > 0 && late_release<kMask>(q_len, kv_len)) release_turn(order(m_block - 1));
                wait_turn(order(m_block),
                          2 * flash_bwd::dq_turn<kMask, Tr::kBlockM, Tr::kBlockN>(p, n_block, m_block, kv_len, q_len, shift),
                          seen);
            }
        }
        const uint32_t staging = base + Tr::kSmemDQ + wg * Tr::kDqSlots * Tr::kDqPanelBytes;
#pragma unroll
        for (int c = 0; c < Tr::kDqChunks; ++c) {
            // Panels `panel`, + 1 go to ring slots of panels panel - 3, - 2: their adds (one bulk
            // group a panel) have read them once at most one group is pending.
            if (wg_tid == 0) memory::bulk_wait_read<1>();
            const uint32_t slot[2] = {staging + (panel % Tr::kDqSlots) * Tr::kDqPanelBytes,
                                      staging + ((panel + 1) % Tr::kDqSlots) * Tr::kDqPanelBytes};
            if (c + 1 < Tr::kDqChunks) mma::wgmma_wait<Tr::kDqChunks - 1>();
            else mma::wgmma_wait<0>();
            mma::fence_operands(ds_frag);
            mma::fence_operands(acc_dk);
            mma::fence_operands(acc_dq[c]);
            memory::bar_sync<128>(wide::kBarGroup0 + wg);
            stage_dq(acc_dq[c], [&](int i, uint32_t offset) { return slot[i] + offset; }, warp, lane);
            memory::fence_proxy_async_smem();
            memory::bar_sync<128>(wide::kBarGroup0 + wg);
            if (wg_tid == 0) {
#pragma unroll
                for (int b = 0; b < 2; ++b) {
                    const int col = col0 + Tr::kDqChunk * c + Tr::kDqPanelCols * b;
                    if (col < p.d)  // (a padded head's columns past d: an empty group)
                        memory::tma_reduce_add_3d(&args.dq_map, slot[b], col, head, q_off + m0);
                    memory::bulk_commit();
                }
            }
            panel += 2;
        }
    }
    if constexpr (kDeterministic)
        if (wg_tid == 0 && blocks > 0) release_turn(order(m_end - 1));
    if (wg_tid == 0) memory::bulk_wait<0>();  // the adds done before the postprocess reads

    store_dkv<Element>(bp, acc_dk, acc_dv, head, kv_off, kv_len, key_base, col0, lane);  // this warpgroup's columns
#endif
}

}  // namespace wgmma_bwd
}  // namespace fmha
