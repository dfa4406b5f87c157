// The backward pass's main kernel on wgmma (sm_90a; issue #33, bench/NOTES.md §65-§69),
// keys as the M side. Preprocess, postprocess, workspace and the mask helpers are flash-bwd's
// (flash_bwd/rows.h, flash_bwd/mask.h); only the main kernel differs.
//
// One CTA per (128-key block, query head, batch): two warpgroups, warpgroup g owning keys
// 64 g .. 64 g + 63 with their dK and dV (m64 x d fp32 each) in registers. Per block of
// kBlockM queries (64 at d = 128, 128 at d = 64):
//   S^T = K Q^T, dP^T = V dO^T      SS, A = K or V [keys, d] K-major, B = Q or dO [queries, d]
//   P^T, dS^T in registers          (the accumulator layout, packed as the RS A operand)
//   dV += P^T dO, dK += dS^T Q      RS, B = dO or Q read MN-major
//   dS written transposed to smem   [queries, keys] K-major
//   dQ = dS K                       SS with an MN-major B, an m64 n64 tile a warpgroup (d
//                                   columns 64 g .. at d = 128, queries 64 g .. at d = 64);
//                                   staged in smem and added to the fp32 accumulator by TMA
//                                   reduce-adds (asynchronous)
// P's exps run while dP^T's product does, and (d = 128) block j + 1's S^T while block j's dQ
// is staged. Tiles are SW128 panels of 64 columns that TMA fills
// (one thread issues; mbarriers count the bytes): K and V once, Q, dO and the rows' LSE and D
// in kStages stages, block j + kStages - 1's loads issued once block j's dS barrier has passed
// (the one CTA barrier a block; dS has two buffers). MHA stores dK and dV itself; GQA leaves
// fp32 rows per query head for the postprocess. Deterministic: flash-bwd's order of the dQ
// adds, each CTA's turn released in its next block (kLateRelease: bench/NOTES.md §77, §109).
// Heads narrower than the tile are zero-padded (MainArgs::panels_k, §76). No warp
// specialisation yet (§65's plan). The parts the wide kernel shares: wgmma_bwd/common.h.
#pragma once

#include <cuda_runtime.h>

#include "fmha/dropout.h"
#include "fmha/kernel/wgmma_bwd/common.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/mma/wgmma_sm90.h"

namespace fmha {
namespace wgmma_bwd {

// What the elementwise step between the products does beyond the plain softmax gradient, each
// its own instance so that the plain one keeps the registers the others take: softcap and
// ALiBi (kMods, run-time parameters there), or dropout (the forward's mask, fmha/dropout.h).
enum class Extra { kNone, kMods, kDropout };

template <class Tr, BwdMask kMask, bool kDeterministic, Extra kExtra>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_kernel(const __grid_constant__ MainArgs args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Tr::Element;
    constexpr bool kBf16 = ElementTraits<Element>::kIsBf16;
    const BwdParams& bp = args.bp;
    const Params& p = bp.p;
    extern __shared__ char smem_raw[];
    // SW128 tiles want 1024-byte alignment (an offset from smem_raw keeps the shared space
    // visible to the compiler: LDS, not generic loads).
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

    const uint32_t base = smem_u32(smem);
    const uint32_t sk = base + Tr::kSmemK, sv = base + Tr::kSmemV, sq = base + Tr::kSmemQ, sdo = base + Tr::kSmemDO,
                   sds = base + Tr::kSmemDS, bars = base + Tr::kSmemBars;
    // Padded heads in the plain instance only (the launch refuses them with softcap, ALiBi or
    // dropout), so that the others' registers are as before.
    const int panels_k = kExtra == Extra::kNone ? args.panels_k : 0, panels_v = kExtra == Extra::kNone ? args.panels_v : 0;
    const float* rows_s = reinterpret_cast<const float*>(smem + Tr::kSmemRows);

    // One thread issues every load (TMA): K and V once, then block j of the walk into stage j %
    // kStages, the stage's mbarrier counting its bytes. Rows past a sequence's end are the next
    // sequence's (finite, and masked) or zeros past the tensors' extents.
    const int blocks = m_end - m_begin;
    const auto load_stage = [&](int j) {
        const int st = j % Tr::kStages, m0 = (m_begin + j) * Tr::kBlockM;
        const uint32_t bar = bars + 8 * (1 + st);
        memory::mbar_arrive_expect_tx(bar, head_bytes<Tr::kHeadDim, Tr::kBlockM>(panels_k) +
                                               head_bytes<Tr::kHeadDim, Tr::kBlockM>(panels_v) + 2 * Tr::kRowBytes);
        load_head<Tr::kHeadDim, Tr::kBlockM>(sq + st * Tr::kTileQ, &args.q_map, bar, q_off + m0, head, panels_k);
        load_head<Tr::kHeadDim, Tr::kBlockM>(sdo + st * Tr::kTileQ, &args.do_map, bar, q_off + m0, head, panels_v);
        const int row = int((int64_t(batch) * p.h + head) * flash_bwd::rows_pitch(p)) + m0;
        const uint32_t rows = base + Tr::kSmemRows + st * 2 * Tr::kRowBytes;
        memory::tma_load_1d(rows, &args.lse_map, bar, row);
        memory::tma_load_1d(rows + Tr::kRowBytes, &args.dsum_map, bar, row);
    };
    if (tid == 0) {
#pragma unroll
        for (int b = 0; b < 1 + Tr::kStages; ++b) memory::mbar_init(bars + 8 * b, 1);
        memory::mbar_fence_init();
    }
    if (panels_k != 0) {
        zero_panels<Tr::kHeadDim, Tr::kBlockN>(sk, 0, 1, panels_k, tid, Tr::kThreads);
        zero_panels<Tr::kHeadDim, Tr::kBlockN>(sv, 0, 1, panels_v, tid, Tr::kThreads);
        zero_panels<Tr::kHeadDim, Tr::kBlockM>(sq, Tr::kTileQ, Tr::kStages, panels_k, tid, Tr::kThreads);
        zero_panels<Tr::kHeadDim, Tr::kBlockM>(sdo, Tr::kTileQ, Tr::kStages, panels_v, tid, Tr::kThreads);
        memory::fence_proxy_async_smem();
    }
    __syncthreads();
    if (tid == 0) {
        memory::mbar_arrive_expect_tx(bars, head_bytes<Tr::kHeadDim, Tr::kBlockN>(panels_k) +
                                                head_bytes<Tr::kHeadDim, Tr::kBlockN>(panels_v));
        load_head<Tr::kHeadDim, Tr::kBlockN>(sk, &args.k_map, bars, kv_off + n0, kv_head, panels_k);
        load_head<Tr::kHeadDim, Tr::kBlockN>(sv, &args.v_map, bars, kv_off + n0, kv_head, panels_v);
        for (int j = 0; j < min(blocks, Tr::kStages); ++j) load_stage(j);
    }

    // Descriptors of the tiles' first bytes; a k16 step, a stage or a panel adds (bytes >> 4)
    // to the address field (one base register each, not one descriptor per step). K-major
    // tiles step 32 bytes a k16 inside a panel; MN-major ones 16 rows (2048 bytes).
    const auto kmajor = [](uint32_t addr) { return mma::make_smem_desc_sw128(addr, 16, mma::kSw128AtomBytes); };
    const auto mnmajor = [](uint32_t addr, uint32_t panel_bytes) {
        return mma::make_smem_desc_sw128(addr, panel_bytes, mma::kSw128AtomBytes);
    };
    const uint64_t desc_k = kmajor(sk + 64 * wg * 128), desc_v = kmajor(sv + 64 * wg * 128);
    const uint64_t desc_q = kmajor(sq), desc_do = kmajor(sdo), desc_ds = kmajor(sds);
    const uint64_t desc_q_mn = mnmajor(sq, Tr::kBlockM * 128), desc_do_mn = mnmajor(sdo, Tr::kBlockM * 128);
    // dQ's tile of this warpgroup: rows (queries) dq_row .., columns dq_col .. (64 each).
    const int dq_row = Tr::kDqByRows ? 64 * wg : 0, dq_col = Tr::kDqByRows ? 0 : 64 * wg;
    const uint64_t desc_k_mn = mnmajor(sk + (dq_col / 64) * Tr::kBlockN * 128, Tr::kBlockN * 128);
    const uint64_t desc_ds_wg = desc_ds + (uint64_t(dq_row * 128) >> 4);
    constexpr int kKSteps = Tr::kHeadDim / 16;
    // k16 step kk's offset (>> 4) in a [128 keys, d] or [64 queries, d] tile of 64-column panels.
    const auto in_k = [](int kk) { return uint64_t(((kk / 4) * Tr::kBlockN * 128 + 32 * (kk % 4)) >> 4); };
    const auto in_q = [](int kk) { return uint64_t(((kk / 4) * Tr::kBlockM * 128 + 32 * (kk % 4)) >> 4); };

    float acc_dk[1][Tr::kHeadDim / 8][4], acc_dv[1][Tr::kHeadDim / 8][4];
#pragma unroll
    for (int nt = 0; nt < Tr::kHeadDim / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[0][nt][e] = acc_dv[0][nt][e] = 0.f;
    const float alibi = p.alibi_slopes != nullptr ? p.alibi_slopes[head] : 0.f;
    const float cap_in = p.softcap > 0.f ? 2.f * kLog2e / p.softcap : 0.f;
    const float scale_log2 = p.scale_bmm1 * kLog2e;
    const int key_base = n0 + 64 * wg + 16 * warp + lane / 4;  // this thread's first key (rows +0, +8)
    const dropout::Dropout& drop = p.dropout;

    // S^T, dP^T of block j: [64 keys of this warpgroup, kBlockM queries], a commit group each,
    // S^T once the block's stage has landed. kEarlyS: block j + 1's S^T is issued right after
    // block j's dQ product, so that the tensor cores run it while this warpgroup stages dQ
    // (bench/NOTES.md §71). Not dP^T too (32 more registers, which d = 128 does not have), not
    // with two stages (d = 64: block j + 1 lands only during block j), not for softcap/ALiBi
    // (no registers to spare) nor the local masks (ptxas then serialises the products, C7514).
    constexpr bool kMods = kExtra == Extra::kMods, kDropout = kExtra == Extra::kDropout;
    constexpr bool kEarlyS = Tr::kStages >= 3 && kExtra == Extra::kNone && kMask != BwdMask::kLocal;
    float acc_s[1][Tr::kBlockM / 8][4], acc_dp[1][Tr::kBlockM / 8][4];
    const auto stage_of = [](int j) { return uint64_t(j % Tr::kStages * Tr::kTileQ) >> 4; };  // Q, dO buffers
    // acc = A B^T over d, one commit group: A = K or V (this warpgroup's keys), B = Q or dO.
    const auto issue = [&](float(&acc)[1][Tr::kBlockM / 8][4], uint64_t desc_a, uint64_t desc_b) {
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk)
            mma::wgmma_ss<kBf16, Tr::kBlockM>(mma::flat(acc), desc_a + in_k(kk), desc_b + in_q(kk), kk > 0);
        mma::wgmma_commit();
    };
    const auto issue_s = [&](int j) {
        memory::mbar_wait(bars + 8 * (1 + j % Tr::kStages), (j / Tr::kStages) & 1);  // block j's stage landed
        issue(acc_s, desc_k, desc_q + stage_of(j));
    };
    const auto issue_dp = [&](int j) { issue(acc_dp, desc_v, desc_do + stage_of(j)); };

    memory::mbar_wait(bars, 0);  // K and V
    const auto order = [&](int m) { return cta.order(bp, m, Tr::kBlockM); };
    // Deterministic: where a warpgroup releases its turn at a query block, per tile and for
    // every mask (bench/NOTES.md §109; late_release is the wide kernel's rule): d = 128 (three
    // stages) in its next block's dQ section, when the adds are long done; d = 64 at its next
    // block's top, under that block's products (after both; softcap/ALiBi's instance after
    // S^T's alone, which keeps it off the stack).
    constexpr bool kLateRelease = Tr::kStages >= 3;
    constexpr bool kReleaseUnderS = !kLateRelease && kMods;
    // Block j of the walk. kTop: issue its own S^T first (else block j - 1 did); kNext: issue
    // block j + 1's behind dQ's product. Compile-time, with the last block peeled: a product
    // issued on one run-time path only makes ptxas wait for all of them where the paths meet
    // (C7517).
    const auto block = [&](int j, auto top, auto next) {
        constexpr bool kTop = decltype(top)::value, kNext = decltype(next)::value;
        const int m_block = m_begin + j, m0 = m_block * Tr::kBlockM;
        const int buf = j % Tr::kStages;
        if constexpr (kTop) issue_s(j);
        // Deterministic: the last block's turn released (at the top: kLateRelease off) and this
        // block's read while the products run (wait_turn below; the counter only grows: an early
        // reading is valid).
        if constexpr (kDeterministic && kReleaseUnderS)
            if (wg_tid == 0 && j > 0) release_turn(order(m_block - 1));
        issue_dp(j);
        [[maybe_unused]] int seen = -1;
        if constexpr (kDeterministic)
            if (wg_tid == 0) {
                if (!kLateRelease && !kReleaseUnderS && j > 0) release_turn(order(m_block - 1));
                seen = poll_turn(order(m_block));
            }
        const float* lse_s = rows_s + buf * 2 * Tr::kBlockM;
        const float* dsum_s = lse_s + Tr::kBlockM;
        const uint64_t stage = stage_of(j);  // this block's Q, dO buffers

        // P^T in place of S^T, dS^T in place of dP^T. The plain instance makes P while dP^T's
        // product runs; the softcap/ALiBi one waits for it first and makes both in one pass,
        // so that softcap's slope never needs registers of its own. The LSE is +inf for rows
        // past q_len or that see no key (the preprocess), so P is 0 there without a test, and a
        // block whose keys are all valid and visible to all its rows (kFull) tests nothing.
        // Dropout runs the plain two passes: the first keeps a dropped P as -P (P >= 0: the sign
        // is the mask, no registers of its own across the dP wait), the second makes dS^T =
        // P (dP^T Z - D) and the dV operand P Z (Z: 1 / (1 - p) or 0). The mask is drawn first,
        // while the products still run, 16 bits an n-tile pair (drawn pair by pair inside the
        // pass it took more registers: bench/NOTES.md §74).
        uint32_t p_frag[1][Tr::kBlockM / 16][4], ds_frag[1][Tr::kBlockM / 16][4];
        const auto gradients = [&](auto full) {
            constexpr bool kFull = decltype(full)::value;
            // Dropout: a thread's queries q + {0, 1, 8, 9} (n-tiles 2 i, 2 i + 1) and keys key_base
            // + {0, 8} lie in two groups of the mask (fmha/dropout.h transposed_bits): pair i's
            // 16 bits at 16 (i % 2) of word i / 2, query q + 1's group in the upper byte.
            [[maybe_unused]] uint32_t keep[Tr::kBlockM / 32] = {};
            if constexpr (kDropout) {
                const uint32_t bh = uint32_t(batch) * uint32_t(p.h) + uint32_t(head);
#pragma unroll
                for (int i = 0; i < Tr::kBlockM / 16; ++i) {
                    uint32_t bits[2];
                    dropout::transposed_bits(drop, bh, m0 + 16 * i + 2 * (lane % 4), key_base, bits);
                    const uint32_t pair = bits[0] | bits[1] << 8;
                    keep[i / 2] = i % 2 == 0 ? pair : keep[i / 2] | pair << 16;
                }
            }
            const auto kept = [&](int nt, int e) {
                return (keep[nt / 4] >> (16 * (nt / 2 % 2) + 8 * (e % 2) + 4 * (nt % 2) + 2 * (e / 2) + (key_base & 1)) &
                        1u) != 0;
            };
            if constexpr (kMods) mma::wgmma_wait<0>();
            else mma::wgmma_wait<1>();
            mma::fence_operands(acc_s);
            if constexpr (kMods) mma::fence_operands(acc_dp);
#pragma unroll
            for (int nt = 0; nt < Tr::kBlockM / 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = key_base + 8 * (e / 2), col = nt * 8 + 2 * (lane % 4) + e % 2, row = m0 + col;
                    const bool visible =
                        kFull || (key < kv_len && flash_bwd::bwd_visible<kMask>(p, row + shift, key));
                    const float lse2 = lse_s[col];
                    if constexpr (kMods) {
                        float logit = acc_s[0][nt][e] * p.scale_bmm1, slope = 1.f;
                        if (p.softcap > 0.f) {
                            const float t = 1.f - __fdividef(2.f, 1.f + fast_exp2(fminf(logit * cap_in, 64.f)));
                            logit = p.softcap * t, slope = 1.f - t * t;
                        }
                        if (p.alibi_slopes != nullptr) logit -= alibi * fabsf(float(row + shift - key));
                        const float pv = visible ? fast_exp2(fmaf(logit, kLog2e, -lse2)) : 0.f;
                        acc_s[0][nt][e] = pv;
                        acc_dp[0][nt][e] = pv * (acc_dp[0][nt][e] - dsum_s[col]) * slope;
                    } else {
                        const float pv = fast_exp2(fmaf(acc_s[0][nt][e], scale_log2, -lse2));
                        float x = visible ? pv : 0.f;
                        if constexpr (kDropout)
                            if (!kept(nt, e)) x = -x;
                        acc_s[0][nt][e] = x;
                    }
                }
            }
            if constexpr (!kMods) {
                mma::wgmma_wait<0>();
                mma::fence_operands(acc_dp);
#pragma unroll
                for (int nt = 0; nt < Tr::kBlockM / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = nt * 8 + 2 * (lane % 4) + e % 2;
                        if constexpr (kDropout) {
                            const float x = acc_s[0][nt][e];
                            const bool kept = x > 0.f;
                            acc_dp[0][nt][e] = fabsf(x) * ((kept ? acc_dp[0][nt][e] * drop.rescale : 0.f) - dsum_s[col]);
                            acc_s[0][nt][e] = kept ? x * drop.rescale : 0.f;
                        } else {
                            acc_dp[0][nt][e] = acc_s[0][nt][e] * (acc_dp[0][nt][e] - dsum_s[col]);
                        }
                    }
            }
            mma::s_to_p<Element>(p_frag, acc_s);
            mma::s_to_p<Element>(ds_frag, acc_dp);
        };
        // Whole-block visibility: every key valid, and (causal) the block's first row at or
        // past its last key.
        bool full = n0 + Tr::kBlockN <= kv_len;
        if constexpr (kMask == BwdMask::kCausal) full = full && m0 + shift >= n0 + Tr::kBlockN - 1;
        else if constexpr (kMask == BwdMask::kLocal) full = false;
        if (!kMods && full) gradients(std::true_type{});
        else gradients(std::false_type{});
        // dS to smem as [queries, keys] (K-major for dQ = dS K): the four 8 x 8 matrices of
        // each 16-query slice (s_to_p's order: keys +0/+8, then queries +0/+8), transposed
        // by stmatrix; lane l addresses row l % 8 (a query) of matrix l / 8.
        // Dropout at d = 64: the lane's shared addresses made again each block (an opaque lane
        // and warp), not held across the loop, where the mask leaves no registers for them
        // (they spilled 8-16 bytes).
        constexpr bool kRemake = kDropout && Tr::kHeadDim == 64;
        const int lane_b = kRemake ? opaque_int(lane) : lane, warp_b = kRemake ? opaque_int(warp) : warp;
        {
            const int m = lane_b / 8, key0 = 64 * wg + 16 * warp_b + 8 * (m % 2);  // within the CTA
            const uint32_t panel = sds + (j & 1) * Tr::kTileS + (key0 / 64) * Tr::kBlockM * 128;
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                mma::stmatrix_x4_trans(panel + mma::sw128_offset(16 * kk + 8 * (m / 2) + lane_b % 8, 2 * (key0 % 64),
                                                            Tr::kBlockM),
                                  ds_frag[0][kk]);
        }

        // dV += P^T dO, dK += dS^T Q: B [queries, d] MN-major, d's panels LBO apart.
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) {
            mma::wgmma_rs<kBf16, Tr::kHeadDim>(mma::flat(acc_dv), p_frag[0][kk],
                                               desc_do_mn + stage + kk * 128, true);
            mma::wgmma_rs<kBf16, Tr::kHeadDim>(mma::flat(acc_dk), ds_frag[0][kk],
                                               desc_q_mn + stage + kk * 128, true);
        }
        mma::wgmma_commit();  // waited with dQ's product: their fragments stay live till then

        memory::fence_proxy_async_smem();
        // dS of both warpgroups in smem; block j - 1's stage and the other dS buffer read (each
        // warpgroup waited for all its products at the end of block j - 1): block j + 2 loads
        // into that stage.
        __syncthreads();
        if (tid == 0 && j >= 1 && j + Tr::kStages - 1 < blocks) load_stage(j + Tr::kStages - 1);
        // dQ = dS K: this warpgroup's m64 n64 tile, over the 128 keys.
        float acc_dq[1][8][4];
        const uint64_t desc_ds_j = desc_ds_wg + (uint64_t((j & 1) * Tr::kTileS) >> 4);  // block j's dS buffer
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
            mma::wgmma_ss<kBf16, 64, true>(mma::flat(acc_dq), desc_ds_j + in_q(kk), desc_k_mn + kk * 128, kk > 0);
        mma::wgmma_commit();
        // kNext: dV and dK done (their fragments free), then block j + 1's S^T behind dQ's
        // product.
        if constexpr (kNext) {
            mma::wgmma_wait<1>();
            mma::fence_operands(p_frag);
            mma::fence_operands(ds_frag);
            mma::fence_operands(acc_dk);
            mma::fence_operands(acc_dv);
            issue_s(j + 1);
        }
        // Deterministic: wait for this CTA's turn, after releasing the last block's (kLateRelease;
        // the staging's last adds were done at the release). (The counter's address is made
        // where it is used: one thread, few live registers.)
        if constexpr (kDeterministic) {
            if (wg_tid == 0) {
                if (kLateRelease && j > 0) release_turn(order(m_block - 1));
                wait_turn(order(m_block),
                          2 * flash_bwd::dq_turn<kMask, Tr::kBlockM, Tr::kBlockN>(p, n_block, m_block, kv_len, q_len, shift),
                          seen);
            }
        } else if (wg_tid == 0) {
            memory::bulk_wait_read<0>();  // the staging's last reduce-adds (a block ago) have read it
        }
        if constexpr (kNext) mma::wgmma_wait<1>();  // dQ's product (S^T of j + 1 may run on)
        else mma::wgmma_wait<0>();
        mma::fence_operands(p_frag);
        mma::fence_operands(ds_frag);
        mma::fence_operands(acc_dq);
        mma::fence_operands(acc_dk);
        mma::fence_operands(acc_dv);
        warpgroup_sync(wg);
        // dQ to this warpgroup's staging panels 2 wg, 2 wg + 1.
        {
            const uint32_t panel = base + Tr::kSmemDQ + 2 * wg * Tr::kDqPanelBytes;
            const auto row_at = [&](int i, uint32_t offset) { return panel + offset + i * Tr::kDqPanelBytes; };
            stage_dq(acc_dq, row_at, warp_b, lane_b);
        }
        memory::fence_proxy_async_smem();
        warpgroup_sync(wg);
        // Two boxes a warpgroup, added in the L2 while the next block runs. Rows past q_len add
        // zeros (their dS is 0) to the next sequence's rows or fall past the map's extent.
        if (wg_tid == 0) {
#pragma unroll
            for (int c = 0; c < 2; ++c)
                if (dq_col + 32 * c < p.d)  // (a padded head's columns past d: none to add)
                    memory::tma_reduce_add_3d(&args.dq_map, base + Tr::kSmemDQ + (2 * wg + c) * Tr::kDqPanelBytes,
                                              dq_col + 32 * c, head, q_off + m0 + dq_row);
            memory::bulk_commit();
        }
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if constexpr (kEarlyS) {
        if (blocks > 0) {
            issue_s(0);
            for (int j = 0; j + 1 < blocks; ++j) block(j, No{}, Yes{});
            block(blocks - 1, No{}, No{});
        }
    } else {
        for (int j = 0; j < blocks; ++j) block(j, Yes{}, No{});
    }
    if constexpr (kDeterministic)
        if (wg_tid == 0 && blocks > 0) release_turn(order(m_end - 1));
    if (wg_tid == 0) memory::bulk_wait<0>();  // the adds done before the postprocess reads

    // (Dropout at d = 64: the sequence's offset read again, not held across the loop: it spilled.)
    constexpr bool kRemakeOffset = kExtra == Extra::kDropout && Tr::kHeadDim == 64;
    store_dkv<Element>(bp, acc_dk, acc_dv, head, kRemakeOffset ? seq_kv_offset(p, opaque_int(batch)) : kv_off, kv_len,
                       key_base, 0, lane);
#endif
}

}  // namespace wgmma_bwd
}  // namespace fmha
