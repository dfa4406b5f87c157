// The flash-bwd family (issue #33; bench/NOTES.md §59, §63): the attention backward pass on
// SM80+ tensor cores (mma.sync m16n8k16), FlashAttention-2's schedule.
//
// Three launches:
//   preprocess: D = rowsum(dO * O) per query row (fp32), the dQ accumulator zeroed (prepare);
//   main:       one CTA per (64-key block, query head, batch) keeps dK and dV of its keys in
//               fp32 registers and walks the 64-query blocks that see them; per block it
//               recomputes S^T = K Q^T, P^T = exp(logit(S^T) - LSE) (the forward's
//               logit: scale, softcap, ALiBi; its LSE, sinks included), dP^T = V dO^T,
//               dS^T = P^T (dP^T - D) logit'; dV += P^T dO, dK += dS^T Q, and adds
//               dQ = dS K into the fp32 accumulator (atomics); at the end dK (times the
//               scale) and dV of its query head go to fp32 workspace rows;
//               deterministic: the CTAs of a head add into a query block's dQ rows in the
//               order of their key blocks, last first (a counter per query block), plain adds;
//   postprocess: dQ (times the scale) to the input dtype; dK and dV summed over the query
//               heads of each KV head (GQA) and converted.
// The next query block's Q and dO load (cp.async, two buffers) under the current one's
// products.
// Warps: 4 * kSplit (kSplit = kHeadDim / 64, the tile's head size: 64, 128 or 256; d and dv
// at or below it are zero-padded up to it). For S^T and dP^T warp w owns keys 16 (w % 4) .. + 15
// and queries (64 / kSplit) (w / 4) ..; P^T and dS^T go through shared memory, from which the
// dV / dK products take 16 keys x 64 columns (w / 4) per warp and the dQ product 16 queries
// (w % 4) x 64 columns (w / 4).
//
// What it serves (launch refuses the rest): __half or __nv_bfloat16; d, dv multiples of 8 up
// to the tile's head size (MLA's 192 / 128 on 256); no
// mask, causal, sliding and bidirectional windows, chunks (bottom-right aligned); softcap,
// ALiBi, sinks (their logit's gradient is the caller's: -sum P_sink D); fixed or var-len
// sequences (seq_lens.h); GQA/MQA; token storage (no paged cache); dropout (kDropout: the
// forward's mask regenerated, fmha/dropout.h; D = rowsum(dO O) holds as it is); no bias or
// custom mask; the LSE's gradient (d_lse) folded into D.
//
// Its parts: flash_bwd/traits.h (the tile), flash_bwd/rows.h (preprocess, postprocess and
// their launches), flash_bwd/mask.h (the masks and the query-block walk); here the main
// kernel and the three launches.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fmha/dropout.h"
#include "fmha/kernel/flash_bwd/mask.h"
#include "fmha/kernel/flash_bwd/rows.h"
#include "fmha/kernel/flash_bwd/traits.h"
#include "fmha/kernel/flash_bwd_params.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace flash_bwd {

template <class Tr, BwdMask kMask, bool kDeterministic, bool kDropout = false>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_kernel(const __grid_constant__ BwdParams bp) {
    using Element = typename Tr::Element;
    const Params& p = bp.p;
    extern __shared__ __align__(128) char smem[];
    const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
    // Deterministic: the key blocks from the last, so that a CTA waits only on CTAs started
    // before it (the order below).
    const int n_block = kDeterministic ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
    const int head = blockIdx.y, batch = blockIdx.z;
    const int q_len = seq_q_len(p, batch), kv_len = seq_kv_len(p, batch);
    const int n0 = n_block * Tr::kBlockN;
    if (n0 >= kv_len) return;  // the whole CTA: no barrier is skipped by part of it
    const int q_off = seq_q_offset(p, batch), kv_off = seq_kv_offset(p, batch);
    const int kv_head = head / (p.h / p.h_kv);
    const int shift = kv_len - q_len;  // query row i sits at key position i + shift
    // Query blocks that see a key of this block.
    int m_begin, m_end;
    bwd_query_blocks<kMask, Tr::kBlockM>(p, n0, min(n0 + Tr::kBlockN, kv_len) - 1, shift, q_len, &m_begin, &m_end);

    const uint32_t base = smem_u32(smem);
    const uint32_t smem_k = base + Tr::kSmemK, smem_v = base + Tr::kSmemV, smem_q = base + Tr::kSmemQ,
                   smem_do = base + Tr::kSmemDO, smem_p = base + Tr::kSmemP, smem_ds = base + Tr::kSmemDS;
    float* rows_s = reinterpret_cast<float*>(smem + Tr::kSmemRows);  // [2][LSE in log2 units, D][kBlockM]

    const Element* k = static_cast<const Element*>(p.k) + int64_t(kv_off + n0) * p.k_row_stride +
                       int64_t(kv_head) * p.k_head_stride;
    const Element* v = static_cast<const Element*>(p.v) + int64_t(kv_off + n0) * p.v_row_stride +
                       int64_t(kv_head) * p.v_head_stride;
    // Columns past d (dv for V, dO) read as zeros: the tile's kHeadDim may exceed them.
    const int d_chunks = p.d / kElemsPerChunk, dv_chunks = p.dv / kElemsPerChunk;
    Tr::LoaderKV::template load<true>(smem_k, k, p.k_row_stride, kv_len - n0, tid, 0, 1, d_chunks);
    Tr::LoaderKV::template load<true>(smem_v, v, p.v_row_stride, kv_len - n0, tid, 0, 1, dv_chunks);
    memory::cp_async_commit();

    const int kr = warp % 4;    // key rows 16 kr .. (S^T, dP^T, dK, dV); query rows 16 kr .. (dQ)
    const int part = warp / 4;  // queries kQueriesS part .. (S^T, dP^T); columns 64 part .. (dK, dV, dQ)
    // The ldmatrix addresses of lane ln of warp wp. d = 256 makes them again each block from an
    // opaque lane and warp: held across the loop at 128 registers a thread, they spilled
    // (40-64 bytes, bench/NOTES.md §104).
    struct Addrs {
        memory::LdsmAddr<typename Tr::LayoutKV> k_a, v_a, k_t;
        memory::LdsmAddr<typename Tr::LayoutQ> q_b, do_b, do_t, q_t;
        memory::LdsmAddr<typename Tr::LayoutP> p_a, ds_a, ds_t;
    };
    const auto addresses = [&](int ln, int wp) {
        const int r = wp % 4, c = wp / 4;  // kr and part of warp wp
        Addrs a;
        // A operands over d: K and V rows of this warp's keys.
        a.k_a.init(smem_k, 16 * r + mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        a.v_a.init(smem_v, 16 * r + mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        // B operands over d: Q and dO rows (queries) as columns.
        a.q_b.init(smem_q, Tr::kQueriesS * c + mma::lane_row_b(ln), mma::lane_chunk_b(ln));
        a.do_b.init(smem_do, Tr::kQueriesS * c + mma::lane_row_b(ln), mma::lane_chunk_b(ln));
        // A operands over a block's queries: P^T and dS^T rows of this warp's keys.
        a.p_a.init(smem_p, 16 * r + mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        a.ds_a.init(smem_ds, 16 * r + mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        // B operands through ldmatrix.trans, this warp's 64 columns: dO, Q ([queries, d]) and K
        // ([keys, d]). 64 columns are whole swizzle groups of 8 chunks at d = 128, so the column
        // offset is a plain add to the base (d = 64 has part 0 only).
        a.do_t.init(smem_do, mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        a.q_t.init(smem_q, mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        a.k_t.init(smem_k, mma::lane_row_a(ln), mma::lane_chunk_a(ln));
        a.do_t.base += c * 64 * 2;
        a.q_t.base += c * 64 * 2;
        a.k_t.base += c * 64 * 2;
        // The dQ product's A operand, dS (queries x keys), read transposed from dS^T ([keys,
        // queries]): the B-operand lane pattern over the stored rows.
        a.ds_t.init(smem_ds, mma::lane_row_b(ln), mma::lane_chunk_b(ln));
        return a;
    };
    constexpr bool kRemake = Tr::kHeadDim == 256;
    const Addrs hoisted = addresses(lane, warp);  // (kRemake: unused)
    const int lane_held = lane, warp_held = warp;

    float acc_dk[1][Tr::kNTilesW][4], acc_dv[1][Tr::kNTilesW][4];  // [16 keys, 64 columns]
#pragma unroll
    for (int nt = 0; nt < Tr::kNTilesW; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[0][nt][e] = acc_dv[0][nt][e] = 0.f;
    }
    const float alibi = p.alibi_slopes != nullptr ? p.alibi_slopes[head] : 0.f;
    const float cap_in = p.softcap > 0.f ? 2.f * kLog2e / p.softcap : 0.f;
    const int key0 = n0 + 16 * kr + lane / 4;  // this lane's first key (rows g, g + 8)
    const dropout::Dropout& drop = p.dropout;

    // Query block m's Q and dO into buffer `buf` (cp.async, one group), and its LSE and D into
    // registers of threads 0 .. kBlockM - 1, stored to shared memory once consumed there.
    float row_lse = 0.f, row_d = 0.f;
    const auto issue = [&](int m_block, int buf) {
        const int m0 = m_block * Tr::kBlockM;
        const Element* q = static_cast<const Element*>(p.q) + int64_t(q_off + m0) * p.q_row_stride +
                           int64_t(head) * p.q_head_stride;
        const Element* d_o = static_cast<const Element*>(bp.d_o) + int64_t(q_off + m0) * bp.do_row_stride +
                             int64_t(head) * bp.do_head_stride;
        Tr::LoaderQ::template load<true>(smem_q + buf * Tr::LayoutQ::kBytes, q, p.q_row_stride, q_len - m0, tid, 0, 1,
                                         d_chunks);
        Tr::LoaderQ::template load<true>(smem_do + buf * Tr::LayoutQ::kBytes, d_o, bp.do_row_stride, q_len - m0, tid,
                                         0, 1, dv_chunks);
        if constexpr (kRemake) {  // the rows straight to shared memory: no registers held through the block
            if (tid < Tr::kBlockM) {
                const int64_t at = (int64_t(batch) * p.h + head) * rows_pitch(p) + m0 + tid;
                const uint32_t rows = base + Tr::kSmemRows + (buf * 2 * Tr::kBlockM + tid) * 4;
                memory::cp_async_4(rows, bp.lse2 + at);
                memory::cp_async_4(rows + Tr::kBlockM * 4, bp.d_sum + at);
            }
            memory::cp_async_commit();
        } else {
            memory::cp_async_commit();
            if (tid < Tr::kBlockM) {
                const int row = m0 + tid;
                const int64_t at = (int64_t(batch) * p.h + head) * rows_pitch(p) + row;
                row_lse = bp.lse2[at];  // +inf past q_len: P reads 0 there (the preprocess)
                row_d = bp.d_sum[at];
            }
        }
    };
    const auto keep_rows = [&](int buf) {
        if (!kRemake && tid < Tr::kBlockM) {
            rows_s[buf * 2 * Tr::kBlockM + tid] = row_lse;
            rows_s[buf * 2 * Tr::kBlockM + Tr::kBlockM + tid] = row_d;
        }
    };
    if (m_begin < m_end) {
        issue(m_begin, 0);
        keep_rows(0);
    }

    for (int m_block = m_begin; m_block < m_end; ++m_block) {
        const int m0 = m_block * Tr::kBlockM;
        const int buf = (m_block - m_begin) & 1;
        memory::cp_async_wait<0>();
        __syncthreads();  // this block's Q, dO, rows landed; the previous block's buffers are consumed
        if (m_block + 1 < m_end) issue(m_block + 1, buf ^ 1);
        const float* lse_s = rows_s + buf * 2 * Tr::kBlockM;
        const float* dsum_s = lse_s + Tr::kBlockM;
        // (kRemake: every lane- and warp-derived value of the loop made again here.)
        const int lane = kRemake ? opaque_int(lane_held) : lane_held, warp = kRemake ? opaque_int(warp_held) : warp_held;
        const int kr = warp % 4, part = warp / 4, key0 = n0 + 16 * kr + lane / 4;
        const Addrs at = kRemake ? addresses(lane, warp) : hoisted;
        const auto &k_a = at.k_a, &v_a = at.v_a, &k_t = at.k_t;
        const auto &p_a = at.p_a, &ds_a = at.ds_a, &ds_t = at.ds_t;
        const uint32_t q_off_b = buf * Tr::LayoutQ::kBytes;
        auto q_b_ = at.q_b, do_b_ = at.do_b, q_t_ = at.q_t, do_t_ = at.do_t;
        q_b_.base += q_off_b, do_b_.base += q_off_b, q_t_.base += q_off_b, do_t_.base += q_off_b;

        // S^T = K Q^T and dP^T = V dO^T: [16 keys, kQueriesS queries] of this warp.
        float s[1][Tr::kNTilesS][4], dp[1][Tr::kNTilesS][4];
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesS; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][nt][e] = dp[0][nt][e] = 0.f;
        }
        mma::gemm_qk<Element, 1, Tr::kNTilesS, Tr::kKSlicesD>(s, k_a, q_b_);
        mma::gemm_qk<Element, 1, Tr::kNTilesS, Tr::kKSlicesD>(dp, v_a, do_b_);
        // Dropout: a lane's queries q + {0, 1, 8, 9} (n-tiles 2 i, 2 i + 1) and keys key0 + {0, 8}
        // lie in two groups of the mask (fmha/dropout.h transposed_bits), drawn at the pair's
        // first n-tile.
        [[maybe_unused]] uint32_t keep[2];
        [[maybe_unused]] const uint32_t bh = uint32_t(batch) * uint32_t(p.h) + uint32_t(head);
        // P^T = exp2(S^T scale log2(e) - LSE log2(e)) where the key is visible to the query,
        // dS^T = P^T (dP^T - D); both into shared memory in the input dtype. Dropout: dV takes
        // P^T Z / (1 - p), and dS^T = P^T (dP^T Z / (1 - p) - D) (Z the kept ones).
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesS; ++nt) {
            if constexpr (kDropout) {
                if (nt % 2 == 0)
                    dropout::transposed_bits(drop, bh, m0 + Tr::kQueriesS * part + 8 * nt + 2 * (lane % 4), key0, keep);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int key = key0 + 8 * h;
                float pv[2], dsv[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = Tr::kQueriesS * part + 8 * nt + 2 * (lane % 4) + e;  // query in the block
                    const int row = m0 + col;
                    const bool visible = key < kv_len && bwd_visible<kMask>(p, row + shift, key);
                    const float lse2 = lse_s[col];
                    // The logit as the forward made it: scaled, capped, ALiBi's distance
                    // penalty; dS is taken through the cap's tanh (1 - tanh^2).
                    // (Run-time branches: compiled in, they left the registers under 255 where
                    // the plain path alone spilled, bench/NOTES.md §63. tanh as the forward's
                    // softcap.h takes it, on ex2: tanh(x) = 1 - 2 / (1 + 2^(2 x log2 e)).)
                    float logit = s[0][nt][2 * h + e] * p.scale_bmm1, slope = 1.f;
                    if (p.softcap > 0.f) {
                        const float t = 1.f - __fdividef(2.f, 1.f + fast_exp2(fminf(logit * cap_in, 64.f)));
                        logit = p.softcap * t, slope = 1.f - t * t;
                    }
                    if (p.alibi_slopes != nullptr) logit -= alibi * fabsf(float(row + shift - key));
                    pv[e] = visible ? exp2f(fmaf(logit, kLog2e, -lse2)) : 0.f;
                    if constexpr (kDropout) {
                        const bool kept = (keep[e] >> (4 * (nt % 2) + 2 * h + (key0 & 1)) & 1u) != 0;
                        const float dpv = kept ? dp[0][nt][2 * h + e] * drop.rescale : 0.f;
                        dsv[e] = pv[e] * (dpv - dsum_s[col]) * slope;
                        pv[e] = kept ? pv[e] * drop.rescale : 0.f;
                    } else {
                        dsv[e] = pv[e] * (dp[0][nt][2 * h + e] - dsum_s[col]) * slope;
                    }
                }
                const int srow = 16 * kr + lane / 4 + 8 * h, scol = Tr::kQueriesS * part + 8 * nt + 2 * (lane % 4);
                store_pair<typename Tr::LayoutP, Element>(smem_p, srow, scol, pv[0], pv[1]);
                store_pair<typename Tr::LayoutP, Element>(smem_ds, srow, scol, dsv[0], dsv[1]);
            }
        }
        __syncthreads();  // P^T and dS^T of every warp are in shared memory

        // dV += P^T dO and dK += dS^T Q: [16 keys, this warp's 64 columns], over the block's queries.
        {
            uint32_t pa[1][Tr::kKSlicesM][4];
#pragma unroll
            for (int kk = 0; kk < Tr::kKSlicesM; ++kk) mma::ldmatrix_x4(pa[0][kk], p_a(0, 2 * kk));
            mma::gemm_pv<Element, false>(acc_dv, pa, do_t_);
        }
        {
            uint32_t dsa[1][Tr::kKSlicesM][4];
#pragma unroll
            for (int kk = 0; kk < Tr::kKSlicesM; ++kk) mma::ldmatrix_x4(dsa[0][kk], ds_a(0, 2 * kk));
            mma::gemm_pv<Element, false>(acc_dk, dsa, q_t_);
        }

        // dQ += dS K: [16 queries (kr), this warp's 64 columns], over the 64 keys; added into
        // the fp32 accumulator (scaled in postprocess).
        {
            float dq[1][Tr::kNTilesW][4];
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesW; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) dq[0][nt][e] = 0.f;
            }
#pragma unroll 1
            for (int kk = 0; kk < Tr::kKSlicesN; ++kk) {
                uint32_t a[4];  // dS [16 queries of kr, keys 16 kk ..]
                mma::ldmatrix_x4_trans(a, ds_t(16 * kk, 2 * kr));
#pragma unroll
                for (int cp = 0; cp < Tr::kNTilesW / 2; ++cp) {
                    uint32_t b[4];  // K [keys 16 kk .., 16 columns]
                    mma::ldmatrix_x4_trans(b, k_t(16 * kk, 2 * cp));
                    const uint32_t b0[2] = {b[0], b[1]};
                    const uint32_t b1[2] = {b[2], b[3]};
                    mma::mma_16816<Element>(dq[0][2 * cp], a, b0);
                    mma::mma_16816<Element>(dq[0][2 * cp + 1], a, b1);
                }
            }
            // Deterministic: the key blocks that see this query block are a range [first,
            // last] (both bounds of bwd_query_blocks grow with the key block); they add from
            // the last down, each after the ones above it, counted in the query block's
            // counter. Walking its query blocks upwards, a CTA then finds the key blocks above
            // it a step ahead (causal and local masks: no wait but the first), and it waits
            // only on CTAs started before it (n_block above).
            [[maybe_unused]] int* order =
                bp.dq_order + (int64_t(batch) * p.h + head) * ceil_div(p.s_q_max, Tr::kBlockM) + m_block;
            [[maybe_unused]] int turn = 0;
            if constexpr (kDeterministic) {
                turn = dq_turn<kMask, Tr::kBlockM, Tr::kBlockN>(p, n_block, m_block, kv_len, q_len, shift);
                if (tid == 0) {
                    int seen = -1;
                    do {
                        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(order) : "memory");
                    } while (seen != turn);
                }
                __syncthreads();
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + 16 * kr + lane / 4 + 8 * h;
                if (row >= q_len) continue;
                float* acc = bp.dq_accum + (int64_t(q_off + row) * p.h + head) * p.d + 64 * part + 2 * (lane % 4);
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesW; ++nt) {
                    if (64 * part + 8 * nt >= p.d) break;  // the tile's columns past d
                    if constexpr (kDeterministic) {  // L2 only: the adds before came from other SMs
                        float2 x = __ldcg(reinterpret_cast<const float2*>(acc + 8 * nt));
                        x.x += dq[0][nt][2 * h], x.y += dq[0][nt][2 * h + 1];
                        __stcg(reinterpret_cast<float2*>(acc + 8 * nt), x);
                    } else {
                        atomicAdd(acc + 8 * nt, dq[0][nt][2 * h]);
                        atomicAdd(acc + 8 * nt + 1, dq[0][nt][2 * h + 1]);
                    }
                }
            }
            if constexpr (kDeterministic) {
                __threadfence();
                __syncthreads();
                if (tid == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(order), "r"(turn + 1) : "memory");
            }
        }
        if (m_block + 1 < m_end) keep_rows(buf ^ 1);  // the next block's rows, loaded under this one
    }
    memory::cp_async_wait<0>();  // a CTA whose keys no query block sees loaded K and V all the same

    // dK (scaled) and dV of this query head, to the workspace rows of its keys.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = key0 + 8 * h;
        if (key >= kv_len) continue;
        const int c0 = 64 * part + 2 * (lane % 4);
        const int64_t row = int64_t(kv_off + key) * p.h + head;
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesW; ++nt) {
            if (c0 + 8 * nt < p.d)
                *reinterpret_cast<float2*>(bp.dk_accum + row * p.d + c0 + 8 * nt) =
                    make_float2(acc_dk[0][nt][2 * h] * p.scale_bmm1, acc_dk[0][nt][2 * h + 1] * p.scale_bmm1);
            if (c0 + 8 * nt < p.dv)
                *reinterpret_cast<float2*>(bp.dv_accum + row * p.dv + c0 + 8 * nt) =
                    make_float2(acc_dv[0][nt][2 * h], acc_dv[0][nt][2 * h + 1]);
        }
    }
}

// The main kernel's launch: one CTA per (key block, head, batch).
template <class Tr, BwdMask kMask, bool kDeterministic, bool kDropout>
cudaError_t launch_main(const BwdParams& bp, cudaStream_t stream) {
    const Params& p = bp.p;
    const void* fn = reinterpret_cast<const void*>(&bwd_kernel<Tr, kMask, kDeterministic, kDropout>);
    const cudaError_t err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return err;
    // blockIdx.x is the key block (deterministic: counted from the last).
    bwd_kernel<Tr, kMask, kDeterministic, kDropout>
        <<<dim3(ceil_div(p.s_kv_max, Tr::kBlockN), p.h, p.b), Tr::kThreads, Tr::kSmemBytes, stream>>>(bp);
    return cudaGetLastError();
}

// The three launches on `stream`; bp's workspace carved (carve_workspace) from at least
// workspace_bytes(bp.p) bytes. cudaErrorInvalidValue without launching for a problem
// outside what the draft serves (the header comment).
template <class Tr>
cudaError_t launch(const BwdParams& bp, cudaStream_t stream) {
    const Params& p = bp.p;
    // d and dv whole 16-byte chunks up to the tile's head size (the loads zero the rest).
    const auto fits = [](int d) { return d >= kElemsPerChunk && d <= Tr::kHeadDim && d % kElemsPerChunk == 0; };
    if (!fits(p.d) || !fits(p.dv) || p.b < 1 || p.h < 1 || p.h_kv < 1 || p.h % p.h_kv != 0)
        return cudaErrorInvalidValue;
    if (p.mask == MaskType::kCustom || p.kv_block_table != nullptr || p.attention_bias != nullptr ||
        p.custom_mask != nullptr)
        return cudaErrorInvalidValue;
    if ((p.mask == MaskType::kSlidingWindow || p.mask == MaskType::kBidirectionalWindow) && p.window < 1)
        return cudaErrorInvalidValue;
    if (p.mask == MaskType::kChunked && p.chunk < 1) return cudaErrorInvalidValue;
    if (p.dropout.threshold > 0xffffu) return cudaErrorInvalidValue;
    if (bp.d_o == nullptr || bp.lse == nullptr || bp.dq == nullptr || bp.dk == nullptr || bp.dv == nullptr ||
        bp.dq_accum == nullptr || bp.dq_order == nullptr)
        return cudaErrorInvalidValue;
    if (p.q_tokens < 1 || p.kv_tokens < 1 || p.s_q_max < 1 || p.s_kv_max < 1) return cudaErrorInvalidValue;

    // dQ's accumulator at zero (it takes atomics). Rows of no sequence (tokens past a
    // sequence's length in a padded batch) come out as zeros in dQ; their dK and dV rows are
    // left as they were (as FlashAttention leaves them).
    cudaError_t err = prepare<Tr>(bp, stream);
    if (err != cudaSuccess) return err;
    const auto main = [&](auto mask, auto deterministic) {
        constexpr BwdMask kMask = decltype(mask)::value;
        constexpr bool kDet = decltype(deterministic)::value;
        return p.dropout.threshold != 0 ? launch_main<Tr, kMask, kDet, true>(bp, stream)
                                 : launch_main<Tr, kMask, kDet, false>(bp, stream);
    };
    const auto with_order = [&](auto mask) {
        return bp.deterministic ? main(mask, std::true_type{}) : main(mask, std::false_type{});
    };
    using None = std::integral_constant<BwdMask, BwdMask::kNone>;
    using Causal = std::integral_constant<BwdMask, BwdMask::kCausal>;
    using Local = std::integral_constant<BwdMask, BwdMask::kLocal>;
    err = p.mask == MaskType::kPadding ? with_order(None{}) : p.mask == MaskType::kCausal ? with_order(Causal{})
                                                                                       : with_order(Local{});
    if (err != cudaSuccess) return err;
    return finish<Tr>(bp, stream);
}

}  // namespace flash_bwd
}  // namespace fmha
