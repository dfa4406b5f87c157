// The wgmma backward's shared parts (wgmma_bwd_sm90.h's kernel and wgmma_bwd_wide_sm90.h's):
// the tile's Traits, the main kernel's parameter and its TMA loads of head tiles, the
// deterministic mode's turns, a CTA's key block and the query blocks it walks, the dQ tile's
// staging, and the dK / dV rows left for the postprocess.
#pragma once

#include <cuda_runtime.h>

#include "fmha/dropout.h"
#include "fmha/kernel/flash_bwd/mask.h"
#include "fmha/kernel/flash_bwd/rows.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/named_barrier.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/mma/fp8_sm90.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/mma/wgmma_sm90.h"

namespace fmha {
namespace wgmma_bwd {

using flash_bwd::BwdMask;
using flash_bwd::BwdParams;

template <typename Element_, int kHeadDim_>
struct Traits {
    using Element = Element_;
    static constexpr bool kWide = false;  // (the d = 256 kernel's traits: WideTraits)
    static constexpr int kHeadDim = kHeadDim_;
    // Queries a step: 64 at d = 128 (dK, dV and S^T, dP^T of 64 x 64 fill the registers), 128
    // at d = 64 (FA3's tile: the N = 128 products of S^T and dP^T, half the steps).
    static constexpr int kBlockM = kHeadDim == 64 ? 128 : 64;
    static constexpr int kBlockN = 128;  // keys a CTA: two warpgroups of 64
    static constexpr int kThreads = 256;
    // dQ = dS K [kBlockM, d] as two m64 n64 tiles, one a warpgroup: split by rows at d = 64,
    // by columns at d = 128.
    static constexpr bool kDqByRows = kBlockM == 128;
    static constexpr int kStages = kBlockM == 128 ? 2 : 3;  // Q, dO and the rows in flight
    static constexpr int kTileK = kBlockN * kHeadDim * 2;  // K or V [128, d]
    static constexpr int kTileQ = kBlockM * kHeadDim * 2;  // Q or dO [kBlockM, d]
    static constexpr int kTileS = kBlockM * kBlockN * 2;   // dS [kBlockM, 128]
    static constexpr int kSmemK = 0;
    static constexpr int kSmemV = kSmemK + kTileK;
    static constexpr int kSmemQ = kSmemV + kTileK;             // [kStages]
    static constexpr int kSmemDO = kSmemQ + kStages * kTileQ;  // [kStages]
    static constexpr int kSmemDS = kSmemDO + kStages * kTileQ;  // [2]: block i's in i % 2
    // dQ's fp32 staging: panels of 32 columns (128-byte rows, the 128-byte swizzle) x 64 rows,
    // one TMA reduce-add box each; warpgroup g's m64 n64 tile is panels 2 g, 2 g + 1.
    static constexpr int kDqPanelCols = 32;
    static constexpr int kDqPanelBytes = 64 * 128;
    static constexpr int kSmemDQ = kSmemDS + 2 * kTileS;
    static constexpr int kSmemRows = kSmemDQ + 4 * kDqPanelBytes;  // [kStages][LSE, D][kBlockM]
    static constexpr int kRowBytes = kBlockM * 4;
    // mbarriers: K and V, then one a stage (Q, dO and the rows' LSE and D).
    static constexpr int kSmemBars = kSmemRows + kStages * 2 * kRowBytes;
    static constexpr int kStageBytes = 2 * kTileQ + 2 * kRowBytes;
    static constexpr int kSmemBytes = kSmemBars + 8 * (1 + kStages) + 1024;  // + alignment slack
    static_assert(kSmemBytes <= 227 * 1024, "sm_90's shared memory a block");
    static_assert(kHeadDim == 64 || kHeadDim == 128, "wgmma-bwd: d = 64 or 128");
    static_assert(kBlockM % flash_bwd::kBwdBlockM == 0 && kBlockM <= flash_bwd::kBwdRowsAlign,
                  "whole blocks of the workspace's rows (the rows' TMA boxes stay in their head's)");
};

FMHA_DEVICE void st_shared_v2(uint32_t addr, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// Barrier over warpgroup g's 128 threads (ids 1 and 2; 0 is __syncthreads').
FMHA_DEVICE void warpgroup_sync(int g) { memory::bar_sync<128>(1 + g); }

// The main kernel's parameter: flash-bwd's and the TMA maps: Q and dO (head tiles of kBlockM
// rows), K and V (kBlockN rows), the LSE (log2) and D rows (1D over the workspace's [b h
// rows_pitch] arrays, boxes of kBlockM: every box starts 256-byte aligned, as TMA needs), the
// fp32 dQ accumulator ([q_tokens, h, d], box {32 columns, 1 head, kBlockM rows}, 128-byte
// swizzle).
struct MainArgs {
    BwdParams bp;
    CUtensorMap q_map, do_map, k_map, v_map, lse_map, dsum_map, dq_map;
    // A head narrower than the tile (d or dv under kHeadDim, zero-padded up to it): the 64-column
    // panels of d (Q, K) and dv (V, dO) a load copies, one a panel (maps made with parts); the
    // rest of each tile is zeroed once. 0: the tile's own head size, one copy a tile.
    int panels_k = 0, panels_v = 0;
};

// The loads of a [kRows, kD] head tile: whole (panels 0) or the first `panels` panels of a
// narrower head, and the bytes either brings.
template <int kD, int kRows>
FMHA_DEVICE void load_head(uint32_t dst, const CUtensorMap* map, uint32_t bar, int token, int head, int panels) {
    if (panels == 0) memory::tma_load_head_tile<kD, kRows * 128>(dst, map, bar, token, head);
    else memory::tma_load_head_parts<kRows * 128>(dst, map, bar, token, head, panels);
}
template <int kD, int kRows>
FMHA_DEVICE uint32_t head_bytes(int panels) {
    return uint32_t((panels == 0 ? kD / 64 : panels) * kRows * 128);
}

// A padded problem: panels `from` .. of the [kRows, kD] tiles at tile, tile + stride, ...
// (count tiles) are never loaded; zeroed once, by every thread, before the CTA barrier that
// precedes the first product (the async proxy fence makes them visible to wgmma).
template <int kD, int kRows>
FMHA_DEVICE void zero_panels(uint32_t tile, int stride, int count, int from, int tid, int threads) {
    if (from == 0 || from * 64 >= kD) return;
    const int per_tile = (kD / 64 - from) * kRows * 128 / 16;
    for (int i = tid; i < count * per_tile; i += threads) {
        const uint32_t at = tile + uint32_t((i / per_tile) * stride + from * kRows * 128 + 16 * (i % per_tile));
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
    }
}

// Deterministic mode (flash-bwd's order: the key blocks that see a query block add into its
// dQ rows from the last down, a counter a query block; each warpgroup adds once a turn, so a
// CTA's turn k is when the counter reads 2 k). poll_turn reads the counter relaxed (early, its
// latency under the block's products): an acquire is an L1 invalidation (CCTL.IVALL) at every
// reading, which slowed the whole CTA by up to 10 % while one thread spun (bench/NOTES.md
// §110). wait_turn spins on such readings until it is `value`, then reads it once with acquire
// (what orders this CTA's adds after those counted). release_turn waits for this thread's adds
// to be done and visible, then counts one. A warpgroup releases a query block's turn in its
// next block: in the dQ section (late), or at the block's top, under its products (§77, §109).
FMHA_DEVICE int poll_turn(const int* counter) {
    int seen;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    return seen;
}
FMHA_DEVICE void wait_turn(const int* counter, int value, int seen = -1) {
    while (seen != value) seen = poll_turn(counter);
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
}
FMHA_DEVICE void release_turn(int* counter) {
    memory::bulk_wait<0>();
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// Where the wide kernel releases a turn at a query block (the narrow one decides per tile,
// kLateRelease). Late, in its next block's dQ section (the adds long done, nothing stalls),
// where each key block's walk reaches every query block one or two steps after the key block
// above it, so that the later release still comes before the next turn is due: the causal
// mask with s_q = s_kv (query block m's first key block is the one whose walk starts there)
// and tiles with kBlockN >= kBlockM. Elsewhere (no mask, windows, s_q != s_kv) many key blocks
// reach a query block at once and each turn waits on the one above it: there the release
// comes at the top of the next block, under its square products, a shorter link.
template <BwdMask kMask>
FMHA_DEVICE bool late_release(int q_len, int kv_len) {
    return kMask == BwdMask::kCausal && q_len == kv_len;
}

// A CTA's key block and the query blocks it walks (both wgmma kernels): grid (key blocks,
// query heads, batch); deterministic, the key blocks from the last (flash-bwd's order,
// flash_bwd_sm80.h), so that those a turn waits on were launched first. Two steps, so that a
// CTA past its sequence's keys leaves before the rest is computed:
//   KeyBlock cta = key_block<...>(p); if (cta.n0 >= cta.kv_len) return; cta.walk<...>(p);
struct KeyBlock {
    int n_block, head, batch, q_len, kv_len, n0;
    int q_off = 0, kv_off = 0, kv_head = 0, shift = 0, m_begin = 0, m_end = 0;  // walk()
    template <class Tr, BwdMask kMask>
    FMHA_DEVICE void walk(const Params& p) {
        q_off = seq_q_offset(p, batch), kv_off = seq_kv_offset(p, batch);
        kv_head = head / (p.h / p.h_kv);
        shift = kv_len - q_len;
        flash_bwd::bwd_query_blocks<kMask, Tr::kBlockM>(p, n0, min(n0 + Tr::kBlockN, kv_len) - 1, shift, q_len, &m_begin,
                                                        &m_end);
    }
    // Query block m's deterministic-order counter.
    FMHA_DEVICE int* order(const BwdParams& bp, int m, int block_m) const {
        return bp.dq_order + (int64_t(batch) * bp.p.h + head) * ceil_div(bp.p.s_q_max, block_m) + m;
    }
};
template <class Tr, bool kDeterministic>
FMHA_DEVICE KeyBlock key_block(const Params& p) {
    KeyBlock c;
    c.n_block = kDeterministic ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
    c.head = blockIdx.y, c.batch = blockIdx.z;
    c.q_len = seq_q_len(p, c.batch), c.kv_len = seq_kv_len(p, c.batch);
    c.n0 = c.n_block * Tr::kBlockN;
    return c;
}

// An m64 n64 dQ tile (the accumulator layout) into two staging panels of 32 fp32 columns x 64
// rows, the 128-byte swizzle: element (row, column c) at row * 128 + 16 (chunk ^ row % 8) + 4
// (c % 4), chunk = c / 4. This thread's rows are 16 warp + lane / 4 (+ 8), so row % 8 = lane /
// 4, and its columns 8 t + 2 (lane % 4) (+ 1) of panel t / 4. row_at(i, offset): the address
// of byte `offset` of panel i (the narrow kernel's two panels are adjacent, the wide one's
// slots of a ring).
template <class RowAt>
FMHA_DEVICE void stage_dq(const float (&acc)[1][8][4], RowAt&& row_at, int warp, int lane) {
    const int r8 = lane / 4, a = (lane % 4) / 2;
    const uint32_t row0 = (16 * warp + r8) * 128 + 8 * (lane % 2);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const uint32_t at = row_at(t / 4, row0) + 16 * ((2 * (t % 4) + a) ^ r8);
#pragma unroll
        for (int h = 0; h < 2; ++h) st_shared_v2(at + 8 * h * 128, acc[0][t][2 * h], acc[0][t][2 * h + 1]);
    }
}

// dK (scaled) and dV of this thread's keys key_base, key_base + 8 over columns col0 ..
// col0 + 8 kNTiles - 1: MHA straight to the outputs, else this query head's workspace rows
// (the postprocess sums a GQA group's). A padded head's columns past d (dK) or dv (dV) are not
// stored.
template <typename Element, int kNTiles>
FMHA_DEVICE void store_dkv(const BwdParams& bp, const float (&acc_dk)[1][kNTiles][4], const float (&acc_dv)[1][kNTiles][4],
                           int head, int kv_off, int kv_len, int key_base, int col0, int lane) {
    const Params& p = bp.p;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = key_base + 8 * h;
        if (key >= kv_len) continue;
        const int64_t token = kv_off + key;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
            const int c = col0 + 8 * nt + 2 * (lane % 4);
            const float dk0 = acc_dk[0][nt][2 * h] * p.scale_bmm1, dk1 = acc_dk[0][nt][2 * h + 1] * p.scale_bmm1;
            const float dv0 = acc_dv[0][nt][2 * h], dv1 = acc_dv[0][nt][2 * h + 1];
            if (bp.dkv_direct) {
                Element* dk = static_cast<Element*>(bp.dk) + token * bp.dk_row_stride + int64_t(head) * bp.dk_head_stride;
                Element* dv = static_cast<Element*>(bp.dv) + token * bp.dv_row_stride + int64_t(head) * bp.dv_head_stride;
                if (c < p.d) *reinterpret_cast<uint32_t*>(dk + c) = ElementTraits<Element>::pack(dk0, dk1);
                if (c < p.dv) *reinterpret_cast<uint32_t*>(dv + c) = ElementTraits<Element>::pack(dv0, dv1);
            } else {
                const int64_t row = token * p.h + head;
                if (c < p.d) *reinterpret_cast<float2*>(bp.dk_accum + row * p.d + c) = make_float2(dk0, dk1);
                if (c < p.dv) *reinterpret_cast<float2*>(bp.dv_accum + row * p.dv + c) = make_float2(dv0, dv1);
            }
        }
    }
}

}  // namespace wgmma_bwd
}  // namespace fmha
