// The decode family's tuning constants, Config (the facts the generator decides for one
// kernel) and its two tile traits: WarpTraits (CUDA cores, one warp a unit) and MmaTraits
// (mma.sync, one CTA a unit). The generated kernels name Traits, which picks one as Config
// says. Design: docs/ARCHITECTURE.md, "The decode family".
#pragma once

#include <cuda_fp8.h>

#include <type_traits>

#include "fmha/memory/gmem_tile.h"
#include "fmha/memory/smem_layout.h"
#include "fmha/utils.h"

namespace fmha {
namespace decode {

constexpr int kMaxSplits = 128;       // key splits per unit at most
constexpr int kMinKeysPerSplit = 128; // fewer keys per warp do not pay for the partial write
constexpr int kMmaMinKeysPerSplit = 256;  // a CTA's pipeline fill is worth it
// Beyond one wave of CTAs, at least this share (in eighths) of the slots of the waves the CTAs
// take are busy: a last wave that leaves most SMs idle for a whole unit is split finer.
constexpr int kMmaMinWaveEighths = 7;
// ... but no such split under this many keys: shorter splits ran slower (bench/NOTES.md §26).
constexpr int kMmaMinKeysPerWaveSplit = 4096;
// Beyond one wave, CTAs of at most this many keys share an SM two at a time (pair_up): short
// CTAs hand over often, and a paired one streams while the other starts or ends (§27).
constexpr int kMmaPairMaxKeys = 4096;
// Splits of at most this many keys merge in a cluster (cluster_splits): on longer ones the
// merge is too small a share to gain, and clustered CTAs streamed slower (§31).
constexpr int kMmaClusterMaxKeys = 4096;
// ... and a wave's splits are cut to fewer that merge in clusters (cluster_fallback) only where
// those are at most this many keys: fewer, longer CTAs cannot draw the H200's bandwidth (§31).
constexpr int kMmaFallbackMaxKeys = 1024;
// d = 64: the four-an-SM Quad runs where its one-head units fill more than half and at most
// kMmaQuadMaxFillQuarters quarters of its wave, over at most kMmaQuadMaxKeys keys. Fuller
// waves even out the two-head tile's pairs, and over longer keys an SM left with one two-head
// CTA streams at nearly two CTAs' rate (§35).
constexpr int kMmaQuadMaxFillQuarters = 3;
constexpr int kMmaQuadMaxKeys = 8192;

// What generator/families/decode.py decides for a kernel (its constants()), rendered into the
// translation unit. The traits read these and static_assert that the tile agrees.
template <int kMaxSq_, bool kMma_, int kHeads_, int kOneHeadBlockN_, int kQuadBlockN_, bool kKvE4m3_ = false>
struct Config {
    static constexpr int kMaxSq = kMaxSq_;                  // query rows per sequence served
    static constexpr bool kMma = kMma_;                     // MmaTraits, else WarpTraits
    static constexpr int kHeads = kHeads_;                  // KV heads per unit
    static constexpr int kOneHeadBlockN = kOneHeadBlockN_;  // the OneHead sibling's keys a stage (0: none)
    static constexpr int kQuadBlockN = kQuadBlockN_;        // the Quad sibling's (0: none)
    static constexpr bool kKvE4m3 = kKvE4m3_;               // K and V in e4m3 (kv_e4m3.h), Q and O 16-bit
    using Sibling = Config<kMaxSq_, kMma_, 1, 0, 0, kKvE4m3_>;  // a sibling's: one head, no siblings
};

template <class Config_, typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_,
          int kWarpsM_, int kWarpsN_, bool kAccFp16_>
struct WarpTraits {
    using Config = Config_;
    using Element = Element_;
    static constexpr bool kMma = false;
    static constexpr bool kFusedMerge = false;  // splits merge in combine_kernel
    static constexpr bool kBf16 = ElementTraits<Element>::kIsBf16;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kRows = kBlockM_;
    static constexpr int kMaxSq = Config::kMaxSq;
    static constexpr int kHeads = Config::kHeads;  // KV heads per unit
    static constexpr bool kHasOneHead = false;
    static constexpr bool kHasQuad = false;
    static constexpr bool kKvE4m3 = false;  // 16-bit K and V (static_assert below)
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarps = kWarpsM_;
    static constexpr int kThreads = kWarps * kWarpSize;
    static constexpr int kLanesPerKey = kHeadDim / kElemsPerChunk;
    static constexpr int kKeysPerPass = kWarpSize / kLanesPerKey;
    static constexpr int kUnroll = kBlockN / kKeysPerPass;
    // CTAs per SM the register budget is cut for (__launch_bounds__): few rows leave room for
    // more warps in flight, which a bandwidth-bound kernel needs.
    static constexpr int kMinBlocks = kRows == 1 ? 8 : 1;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(!kAccFp16_, "decode: fp32 accumulation only");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                  "decode: d in {32, 64, 128, 256}");
    static_assert(kHeadDimV == kHeadDim, "decode: dv == d");
    static_assert(kRows == 1 || kRows == 4 || kRows == 8, "decode: kBlockM (rows per warp) in {1, 4, 8}");
    static_assert(kBlockN % kKeysPerPass == 0 && kUnroll >= 1 && kUnroll <= 8, "decode: kBlockN = (256 / d) * 1..8");
    static_assert(kWarpsN_ == 1 && kWarps >= 1 && kWarps <= 8, "decode: 1..8 independent warps");
    static_assert(!Config::kMma && kHeads == 1 && Config::kOneHeadBlockN == 0 && Config::kQuadBlockN == 0,
                  "decode warp path: Config of one head a unit, no siblings");
    static_assert(!Config::kKvE4m3, "decode warp path: 16-bit K and V (e4m3 caches take the mma path)");
};

template <class Config_, typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_,
          int kWarpsM_, int kWarpsN_, bool kAccFp16_>
struct MmaTraits {
    using Config = Config_;
    using Element = Element_;
    static constexpr bool kMma = true;
    // The tile's last CTA merges the splits (no combine launch). Not at d = 256, where the
    // merge's live values pushed the 255-register main loop into spills: combine_kernel.
    static constexpr bool kFusedMerge = kHeadDimV_ <= 128;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kMaxSq = Config::kMaxSq;
    // An e4m3 cache (kv_e4m3.h): the ring holds K and V as they are in memory, one byte an
    // element, and the warps widen each fragment to f16 after its ldmatrix; Q (in shared memory)
    // and P are f16 whatever Element is. Element stays the type of Q, O and the bias.
    static constexpr bool kKvE4m3 = Config::kKvE4m3;
    using KvElement = std::conditional_t<kKvE4m3, __nv_fp8_e4m3, Element>;
    using MmaElement = std::conditional_t<kKvE4m3, __half, Element>;
    static constexpr int kKvBytes = kKvE4m3 ? 1 : 2;
    // KV heads per CTA (Config), each with its own 16-row m-tile of packed query rows (kRows), so the
    // CTA reads kHeads * d contiguous columns of a token where its heads are adjacent: 256
    // bytes from d = 32 to 128 (kBlockM = 16 * kHeads); one head's 64 or 128 bytes a token
    // cost bandwidth (bench/NOTES.md §30). Where the (sequence, KV head) tiles fit one wave,
    // fewer units would mean more splits, which cost more: there the launch runs OneHead, the
    // same 32 KB stages of one head (with_sibling).
    static constexpr int kHeads = Config::kHeads;
    static constexpr bool kHasOneHead = Config::kOneHeadBlockN != 0;  // (not the e4m3 tiles of d = 32)
    using OneHead = MmaTraits<typename Config::Sibling, Element_, kHeadDim_, kHeadDimV_, 16, Config::kOneHeadBlockN,
                              kWarpsM_, kWarpsN_, kAccFp16_>;
    // d = 64: also one head in 16 KB stages (64 keys), four CTAs to an SM, as cuDNN runs d = 64
    // (§30, §34, §35), where the one-head units fill half to three quarters of a wave of those
    // (quad_fits, with_sibling).
    static constexpr bool kHasQuad = Config::kQuadBlockN != 0;
    using Quad = MmaTraits<typename Config::Sibling, Element_, kHeadDim_, kHeadDimV_, 16, Config::kQuadBlockN, kWarpsM_,
                           kWarpsN_, kAccFp16_>;
    static constexpr int kRows = 16;           // packed query rows per head: one m-tile
    static constexpr int kBlockN = kBlockN_;   // keys per pipeline stage
    static constexpr int kWarps = kWarpsN_;    // each takes kWarpKeys keys of every stage
    static constexpr int kThreads = kWarps * kWarpSize;
    static constexpr int kWarpKeys = kBlockN / kWarps;
    static constexpr int kKSlices = kHeadDim / 16;     // k16 steps of Q K^T
    static constexpr int kNTilesS = kWarpKeys / 8;     // 8-key n-tiles of a warp's S
    static constexpr int kNTilesO = kHeadDimV / 8;     // 8-column n-tiles of O
    // Skip the O rescale when no row max grew (as flash_sm80): pays from 128 O registers.
    static constexpr bool kSkipRescale = kHeads * kNTilesO * 4 >= 128;

    // K and V rows in 16-bit units: an e4m3 row of d bytes is d / 2 of them, which is how
    // cp.async and ldmatrix see it.
    using LayoutQ = memory::SmemLayout<kRows, kHeadDim>;
    using LayoutK = memory::SmemLayout<kBlockN, kHeadDim * kKvBytes / 2>;
    using LayoutV = memory::SmemLayout<kBlockN, kHeadDimV * kKvBytes / 2>;
    using LoaderK = memory::TileLoader<LayoutK, kHeadDim * kKvBytes / kChunkBytes, kThreads, kHeads>;
    using LoaderV = memory::TileLoader<LayoutV, kHeadDimV * kKvBytes / kChunkBytes, kThreads, kHeads>;
    // e4m3: each Q row's scale inverse after the Q tiles (kv8::load_q_tile), 128-byte aligned.
    static constexpr int kSmemQScale = kKvE4m3 ? round_up(kHeads * kRows * 4, 128) : 0;
    // Per stage (and Q): kHeads head tiles, one after the other.
    static constexpr int kSmemQ = kHeads * LayoutQ::kBytes + kSmemQScale;
    static constexpr int kSmemK = kHeads * LayoutK::kBytes;
    static constexpr int kSmemV = kHeads * LayoutV::kBytes;
    // Three stages, a 96 KB ring of 32 KB blocks (d = 256: 192 KB of 64 KB blocks), so two CTAs
    // fit on an SM up to d = 128. A launch runs them two to an SM only where its CTAs are more
    // than one wave and short (kMmaPairMaxKeys); elsewhere it asks for kSoloSmemBytes, which
    // leaves room for one, and the rest is unused (§8, §27).
    static constexpr int kStageBytes = kSmemK + kSmemV;
    static constexpr int kStages = 3;
    // The quarter footprint (Quad): 16 KB stages, four CTAs to an SM at most 128 registers.
    static constexpr bool kQuad = kStageBytes == 16 * 1024;
    static constexpr int kMinCtas = kQuad ? 4 : 1;
    // The warps' merge reuses the ring: [kWarps][kHeads * kRows][kMergePitch] O, then
    // [kWarps][kHeads * kRows][2].
    static constexpr int kMergePitch = kHeadDimV + 4;  // floats; staggers the rows' banks
    static constexpr int kSmemMerge = kWarps * kHeads * kRows * (kMergePitch + 2) * 4;
    // Clustered splits (SM90) leave the CTA's partial after it: [kHeads * kRows][dv] O, then
    // [kHeads * kRows] (max, sum), for the cluster's merge to read.
    static constexpr int kSmemPartial = kHeads * kRows * (kHeadDimV + 2) * 4;
    static constexpr int kSmemBytes = max_int(kSmemQ + kStages * kStageBytes, kSmemMerge + kSmemPartial);
    // One CTA per SM: more than half an SM's 228 KB less the 1 KB each CTA holds back.
    static constexpr int kSoloSmemBytes = kQuad ? kSmemBytes : max_int(kSmemBytes, 115 * 1024);
    static constexpr int kMaxSmemBytes = kMaxSmemPerCta;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(!kAccFp16_, "decode: fp32 accumulation only");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                  "decode: d in {32, 64, 128, 256}");
    static_assert(kHeadDimV == kHeadDim, "decode: dv == d");
    static_assert(kBlockM_ == 16 * kHeads && kWarpsM_ == 1 &&
                      (kHeads == 1 || (kKvE4m3 ? kHeads <= 4 && kHeads * kHeadDim <= 256 : kHeads == 128 / kHeadDim)),
                  "decode mma: kBlockM 16 rows per KV head, 1 or 128 / d heads (e4m3: up to 4, 256 bytes of a token); "
                  "kWarpsM 1");
    // Keys per stage: a 32 KB block of K and V (d = 256: 64 keys, 64 KB). Less leaves a CTA's
    // per-block cost (wait, barrier, softmax) on half or a quarter of the bytes (§29). e4m3:
    // 32 KB stages of 16 KB K at every d.
    static_assert(kWarps == 4 && (kKvE4m3 ? kBlockN * kHeads * kHeadDim == 16384
                                          : (kBlockN * kHeads == (kHeadDim == 256 ? 64 : 8192 / kHeadDim) ||
                                             (kHeads == 1 && kBlockN * kHeadDim == 4096))),
                  "decode mma: kWarpsN 4, kBlockN * heads = 8192 / d keys (64 at d = 256), or one head's 4096 / d; "
                  "e4m3 K and V: kBlockN * heads * d = 16384");
    static_assert(!kKvE4m3 || (kHeadDim % 32 == 0 && kHeadDimV % 32 == 0 && kWarpKeys % 16 == 0),
                  "decode mma e4m3: d and dv multiples of 32, 16 keys a warp's slice");
    static_assert(Config::kMma, "decode mma: Config of the mma path");
    static_assert((Config::kOneHeadBlockN == 0 || Config::kOneHeadBlockN == kBlockN * kHeads) &&
                      (kHeads > 1 || (Config::kOneHeadBlockN == 0 && Config::kQuadBlockN == 0)),
                  "decode mma: OneHead takes a several-head tile's stage bytes in one head");
    static_assert(kSoloSmemBytes <= kMaxSmemBytes, "decode mma: ring exceeds shared memory");
    static_assert(kSmemMerge % 16 == 0, "decode mma: the partial's float4s are 16-byte aligned");
};

// The generated kernels name one Traits; Config says which path it is.
template <class Config, typename Element, int kHeadDim, int kHeadDimV, int kBlockM, int kBlockN, int kWarpsM,
          int kWarpsN, bool kAccFp16>
using Traits = std::conditional_t<
    Config::kMma, MmaTraits<Config, Element, kHeadDim, kHeadDimV, kBlockM, kBlockN, kWarpsM, kWarpsN, kAccFp16>,
    WarpTraits<Config, Element, kHeadDim, kHeadDimV, kBlockM, kBlockN, kWarpsM, kWarpsN, kAccFp16>>;

}  // namespace decode
}  // namespace fmha
