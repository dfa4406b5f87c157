// flash-bwd's tile (flash_bwd_sm80.h): the Traits of a head size, the shared memory map, and
// the 16-bit conversions its kernels share with the wgmma backward's.
#pragma once

#include <cstdint>

#include "fmha/kernel/flash_bwd_params.h"
#include "fmha/memory/gmem_tile.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace flash_bwd {

template <typename Element>
FMHA_DEVICE float to_f32(Element x) {
    if constexpr (ElementTraits<Element>::kIsBf16) return __bfloat162float(x);
    else return __half2float(x);
}
template <typename Element>
FMHA_DEVICE Element from_f32(float x) {
    if constexpr (ElementTraits<Element>::kIsBf16) return __float2bfloat16_rn(x);
    else return __float2half_rn(x);
}

template <typename Element_, int kHeadDim_>
struct Traits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;  // the tile's head size (d, dv <= it)
    static constexpr int kBlockM = kBwdBlockM;  // queries a step
    static constexpr int kBlockN = 64;          // keys a CTA
    static constexpr int kSplit = kHeadDim / 64;
    static constexpr int kWarps = 4 * kSplit;
    static constexpr int kThreads = kWarps * kWarpSize;
    static constexpr int kQueriesS = kBlockM / kSplit;  // queries of a warp's S^T, dP^T
    static constexpr int kNTilesS = kQueriesS / 8;
    static constexpr int kKSlicesD = kHeadDim / 16;     // k16 steps over d
    static constexpr int kKSlicesM = kBlockM / 16;      // ... over a block's queries
    static constexpr int kKSlicesN = kBlockN / 16;      // ... over the keys
    static constexpr int kNTilesW = 64 / 8;             // a warp's 64 columns of dK, dV, dQ

    using LayoutKV = memory::SmemLayout<kBlockN, kHeadDim>;  // K, V: [keys, d]
    using LayoutQ = memory::SmemLayout<kBlockM, kHeadDim>;   // Q, dO: [queries, d]
    using LayoutP = memory::SmemLayout<kBlockN, kBlockM>;    // P^T, dS^T: [keys, queries]
    using LoaderKV = memory::TileLoader<LayoutKV, kHeadDim / kElemsPerChunk, kThreads>;
    using LoaderQ = memory::TileLoader<LayoutQ, kHeadDim / kElemsPerChunk, kThreads>;

    // Q and dO in two buffers: the next query block's load runs under this one's products
    // (one measured slower at d = 64 too, bench/NOTES.md §63).
    static constexpr int kStages = 2;
    static constexpr int kSmemK = 0;
    static constexpr int kSmemV = kSmemK + LayoutKV::kBytes;
    static constexpr int kSmemQ = kSmemV + LayoutKV::kBytes;  // [kStages] buffers
    static constexpr int kSmemDO = kSmemQ + kStages * LayoutQ::kBytes;
    static constexpr int kSmemP = kSmemDO + kStages * LayoutQ::kBytes;
    static constexpr int kSmemDS = kSmemP + LayoutP::kBytes;
    static constexpr int kSmemRows = kSmemDS + LayoutP::kBytes;  // [kStages] x LSE (log2 units), D of the block's queries
    static constexpr int kSmemBytes = kSmemRows + kStages * 2 * kBlockM * 4;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "flash-bwd tiles: 64, 128 or 256");
    static_assert(kNTilesS % 2 == 0, "S^T is read 16 queries at a time");
    static_assert(kSmemBytes <= kMaxSmemPerCta, "tiles exceed shared memory");
};

// An [rows, cols] f32 accumulator pair of this thread, packed, into a 16-bit [rows, cols]
// shared tile at (row, col) (col even).
template <class Layout, typename Element>
FMHA_DEVICE void store_pair(uint32_t smem_base, int row, int col, float x0, float x1) {
    const uint32_t addr =
        smem_base + Layout::offset(row, col / kElemsPerChunk) + static_cast<uint32_t>((col % kElemsPerChunk) * 2);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(ElementTraits<Element>::pack(x0, x1)) : "memory");
}

}  // namespace flash_bwd
}  // namespace fmha
