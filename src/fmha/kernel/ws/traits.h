// The ws family's compile-time facts: the generator's Config, the tile Traits that derive
// shared-memory and register budgets from it (static_asserts guard what Config gave), and
// the TMA descriptors a launch passes.
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "fmha/mask/mask.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/utils.h"

namespace fmha {
namespace ws {

constexpr int kWarpgroupThreads = 128;
constexpr int kWarpgroupRows = 64;  // wgmma M

// What generator/families/ws.py decides for a kernel (its constants()), rendered into the
// translation unit. Traits read these and static_assert that what they compute agrees.
template <int kSmemLimit_, int kSmemReserve_, int kPanelCols_, int kDimQK_, int kDimV_, bool kSoftcap_,
          int kShortBlockM_ = 0, int kShortBlockN_ = 0, int kShortMaxKeys_ = 0, int kMaskKinds_ = 7,
          bool kIsShort_ = false>
struct Config {
    static constexpr int kSmemLimit = kSmemLimit_;      // dynamic shared memory a CTA may take
    static constexpr int kSmemReserve = kSmemReserve_;  // ... beside Q and the K/V stages
    static constexpr int kPanelCols = kPanelCols_;      // columns of a TMA panel
    static constexpr int kDimQK = kDimQK_;              // columns of d in shared memory: whole panels
    static constexpr int kDimV = kDimV_;                // ... of dv
    static constexpr bool kSoftcap = kSoftcap_;         // logit softcapping compiled (kVariantSoftcap)
    // The tile's sibling (Traits::Short), which problems of at most kShortMaxKeys keys run
    // (launch.h runs_short); 0: none. The sibling's own Config has none.
    static constexpr int kShortBlockM = kShortBlockM_;
    static constexpr int kShortBlockN = kShortBlockN_;
    static constexpr int kShortMaxKeys = kShortMaxKeys_;
    // The mask kinds compiled, a bit per mask::Kind (the registry row's masks); the sibling's
    // are every kind, launch.h narrowing them (kCausalOnly).
    static constexpr int kMaskKinds = kMaskKinds_;
    // This Config is a tile's sibling's (ShortConfig).
    static constexpr bool kIsShort = kIsShort_;
    using ShortConfig = Config<kSmemLimit_, kSmemReserve_, kPanelCols_, kDimQK_, kDimV_, kSoftcap_, 0, 0, 0, 7, true>;
};

template <class Config_, typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_,
          int kWarpsN_, bool kAccFp16_, bool kPersistent_ = false, int kStages_ = 0, bool kPingPong_ = true>
struct Traits {
    using Config = Config_;
    using Element = Element_;
    // e4m3 inputs (QGMMA, mma/fp8_sm90.h): V made K-major in shared memory by the producer
    // warpgroup's other warps, P quantised at a power-of-two scale, O written in bf16. TMA
    // moves e4m3 as 16-bit pairs (TmaElement): the same 128-byte swizzled panels, half the
    // columns.
    static constexpr bool kFp8 = std::is_same<Element, __nv_fp8_e4m3>::value;
    static constexpr bool kBf16 = std::is_same<Element, __nv_bfloat16>::value;
    using TmaElement = std::conditional_t<kFp8, __half, Element>;
    using OutElement = std::conditional_t<kFp8, __nv_bfloat16, Element>;
    static constexpr int kElemBytes = kFp8 ? 1 : 2;
    static constexpr int kMmaK = 32 / kElemBytes;  // k of one wgmma: 16, or 32 for e4m3
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarpsM = kWarpsM_;
    static constexpr int kWarpsN = kWarpsN_;
    static constexpr bool kAccFp16 = kAccFp16_;
    static constexpr bool kPersistent = kPersistent_;

    static constexpr int kConsumerWarpgroups = kWarpsM / 4;
    static constexpr int kConsumerWarps = kWarpsM;
    static constexpr int kThreads = (kConsumerWarpgroups + 1) * kWarpgroupThreads;
    static constexpr int kStages = kStages_ != 0 ? kStages_ : 2;
    // Ping-pong: the consumer warpgroups take turns issuing their wgmmas (named barriers),
    // so that one's softmax runs while another's GEMMs own the tensor cores. Not for e4m3 at
    // d <= 128, whose consumers measured faster each on its own (x0.90-0.91 at d = 64 causal,
    // x0.98 at d = 128 causal; d = 256 level or slower: bench/NOTES.md §93).
    static constexpr bool kPingPong =
        kPingPong_ && kConsumerWarpgroups >= 2 && !(std::is_same<Element_, __nv_fp8_e4m3>::value && kHeadDim_ <= 128);
    // e4m3 with dv > 128 on 128-key blocks (d = 256): a consumer thread holds 128 O, 64 S
    // and 16 P registers, which fit without spilling at 240 registers only, so the producer
    // warpgroup keeps 24 (kProducerRegs). Its paged-KV loop does not fit those: paged problems
    // run on Short (bench/NOTES.md §86).
    static constexpr bool kLeanProducer =
        std::is_same<Element_, __nv_fp8_e4m3>::value && kBlockN_ == 128 && kHeadDimV_ > 128;
    // e4m3 tiles whose key blocks pay off on long problems only: kLeanProducer's, and those
    // past 128 keys (d = 128 on 192, d = 64 on 256, bench/NOTES.md §87). They leave
    // softcapping to Short.
    static constexpr bool kWideKeys = std::is_same<Element_, __nv_fp8_e4m3>::value && (kLeanProducer || kBlockN_ > 128);
    // The tile's sibling (KernelMeta::siblings), which short problems run instead (launch.h
    // runs_short), as the generator chose it (Config::kShortBlockM/N, generator/families/ws.py
    // siblings): of the 192-row tile, the same kernel on two consumer warpgroups (its diagonal
    // blocks waste less, bench/NOTES.md §55, §57); of a kWideKeys tile, 128 x 128, or 128 x 64
    // for kLeanProducer (a shorter pipeline to fill, room to stage O, §86). Those tiles leave
    // work to it (the 16-bit 192-row one dropout, the kWideKeys ones softcapping, kLeanProducer
    // a paged cache), so they must have one. The e4m3 192-row tile runs the padding mask alone
    // and leaves nothing (generator/families/ws.py FP8_PADDING_TILE).
    static constexpr bool kHasShort = Config::kShortBlockN != 0;
    static_assert(kHasShort || ((kBlockM_ != 192 || kFp8) && !kWideKeys),
                  "ws: a 16-bit 192-row or a kWideKeys tile needs a Short sibling");
    // (Named for every tile, a tile only where kHasShort: launch.h reads it under that alone.)
    static constexpr int kShortBlockM = kHasShort ? Config::kShortBlockM : 128;
    using Short = Traits<typename Config::ShortConfig, Element_, kHeadDim_, kHeadDimV_, kShortBlockM,
                         kHasShort ? Config::kShortBlockN : kBlockN_, kShortBlockM / 16, kWarpsN_, kAccFp16_,
                         kPersistent_, kStages_, kPingPong_>;

    // Columns in shared memory: whole 64-column panels (zero fill past d, dv).
    static constexpr int kDimQK = Config::kDimQK;
    static constexpr int kDimV = Config::kDimV;
    static constexpr int kNTilesS = kBlockN / 8;                   // n8 tiles of S per thread row pair
    // Columns of O that P V computes: dv in whole panels of the 16-bit ring's V; e4m3 reads
    // V^T, whose rows are columns of V: dv in whole 64-column panels of the bf16 O it stages
    // (d = 64: 64, not the 128 of V's 128-byte panel, whose upper half is zero fill).
    static constexpr int kDimO = kFp8 ? round_up(kHeadDimV, 64) : kDimV;
    static constexpr int kNTilesO = kDimO / 8;                     // n8 tiles of the P V accumulator
    static constexpr int kNTilesOut = kHeadDimV / 8;               // ... of them stored (dv columns)
    static constexpr int kKSlicesQK = (kHeadDim + kMmaK - 1) / kMmaK;  // k steps of Q K^T
    static constexpr int kKSlicesPV = kBlockN / kMmaK;                 // k steps of P V
    // Head sizes in TMA elements (e4m3: pairs).
    static constexpr int kTmaHeadDim = kHeadDim * kElemBytes / 2;
    static constexpr int kTmaHeadDimV = kHeadDimV * kElemBytes / 2;

    static constexpr int kRowBytes = memory::kTmaPanelRowBytes;
    static constexpr int kPanelBytesQ = kBlockM * kRowBytes;   // one 128-byte-wide panel of Q
    static constexpr int kPanelBytesKV = kBlockN * kRowBytes;  // ... of a K or V stage
    static constexpr int kSmemQ = kBlockM * kDimQK * kElemBytes;  // [kBlockM, d]
    static constexpr int kSmemK = kBlockN * kDimQK * kElemBytes;  // [kBlockN, d], one stage
    static constexpr int kSmemV = kBlockN * kDimV * kElemBytes;   // [kBlockN, dv], one stage
    // e4m3: V^T [kDimO, kBlockN] K-major, one stage: rows of whole 128-byte panels of key
    // slots (a 64-key block fills half of each row; the QGMMA reads its k32 steps from the start).
    static constexpr int kSmemVt = kFp8 ? kDimO * kRowBytes * ((kBlockN + kRowBytes - 1) / kRowBytes) : 0;
    // Q full/empty; K full/empty, V full/empty per stage; tile slot full/empty x 2; O free;
    // e4m3: V^T full/empty per stage.
    static constexpr int kNumBarriers = 2 + 4 * kStages + 4 + 1 + (kFp8 ? 2 * kStages : 0);
    // e4m3: the producer warpgroup's warps that transpose V. On the wide tiles past d = 64 the
    // TMA warp takes a share too (kTmaWarpTransposes: one block behind its loads, producer.h):
    // the others are bound by their ldmatrix latency, one load in flight a warp, and the
    // consumers waited on V^T (bench/NOTES.md §90, §91). On short blocks or d = 64's light
    // transposes it only delayed the loads (§91).
    static constexpr bool kTmaWarpTransposes = kWideKeys && kHeadDim > 64;
    static constexpr int kTransposeWarps = kFp8 ? (kTmaWarpTransposes ? 4 : 3) : 0;
    // ... and those of them that read the tile slots (all but the TMA warp, which writes them).
    static constexpr int kSlotReaderWarps = kFp8 ? 3 : 0;
    // log2 of P's scale before it is rounded to e4m3, and the running max's slack, which
    // together keep P <= 2^8 = 256 < 448 (bench/NOTES.md §53); 16-bit P: no scale, slack 8.
    // e4m3 subtracts the exact running max (no slack): a row's top P is 256 exactly (§56).
    static constexpr int kPOffset = kFp8 ? 8 : 0;
    static constexpr bool kExactMax = kFp8;
    // e4m3: whether the padding-mask kernel waits for the previous block's P V before its
    // exp2s (fwd_kernel's kSplitSoftmax; the causal and local kernels always do). Measured per
    // tile (bench/NOTES.md §89, §101): faster on d = 64's 256-key tile and on the 128-key tiles
    // past d = 64 (d = 256's since its epilogue lost the consumers' barrier), slower on d = 128's
    // 192 keys and d = 64's 128.
    static constexpr bool kSplitPadding = kFp8 && (kHeadDim <= 64 ? kBlockN == 256 : kBlockN <= 128);
    // Persistent tiles: two slots, each the next tile's index and TileWork (tile_slot_*).
    static constexpr int kTileSlotBytes = 48;
    static constexpr int kTileSlotsOffset = (8 * kNumBarriers + 15) / 16 * 16;
    static constexpr int kSmemAlign = 1024;                    // SW128 tiles: one swizzle period
    static constexpr int kMaxSmemBytes = Config::kSmemLimit;
    static constexpr int kSmemMain =
        kSmemAlign + kSmemQ + kStages * (kSmemK + kSmemV + kSmemVt) + kTileSlotsOffset + 2 * kTileSlotBytes;
    // The two-consumer tiles' O leaves through shared memory and a TMA store: staging a
    // 64-row slab there takes 8 stmatrix per warp (d = 128), where storing it from registers
    // took 32 4-byte stores of 8 rows each (bench/NOTES.md §23). Its [kBlockM, dv] buffer sits
    // beside the rest where it fits (kOBeside), else over the V ring (kOInV: d = 256, MLA),
    // which every consumer's last P V of the tile must have read (a barrier of all consumers;
    // e4m3 stages over its raw V ring, which the transposes have read by then: no barrier,
    // bench/NOTES.md §88, §101) and whose next V loads wait for the stores to have read it (the
    // O-free mbarrier; not in every kernel: kOInVFor). A slab with rows past its sequence's end
    // is stored from registers (a TMA store would write the next sequence's rows), and so are
    // the three-consumer tiles' (d <= 64): there the staging measured 1 % slower.
    static constexpr int kSmemO = kBlockM * kDimO * 2;  // O is 16-bit (e4m3 inputs: bf16)
    static constexpr int kPanelBytesO = kWarpgroupRows * kRowBytes;  // one panel of a warpgroup's slab
    static constexpr bool kOBeside = kConsumerWarpgroups == 2 && kSmemMain + kSmemO <= kMaxSmemBytes;
    static constexpr bool kOInV = kConsumerWarpgroups == 2 && !kOBeside && kSmemO <= kStages * kSmemV;
    static constexpr bool kStoreOTma = kOBeside || kOInV;
    // Whether the ring O is staged over (kOInV) is one the consumers' P V reads, so that the
    // staging waits for every consumer's last P V (16-bit: V itself). e4m3's P V reads V^T;
    // the raw V ring under O is read only by the transposes, done with it by the warpgroup's
    // last V^T full (bench/NOTES.md §101).
    static constexpr bool kOverPvOperand = !kFp8;
    // Whether the kernel of score modifier M stages O over the V ring (kOInV but for the bias
    // and custom-mask kernels: their consumers had no registers to spare for it and spilled).
    template <softmax::ScoreMod M>
    static constexpr bool kOInVFor = kOInV && M != softmax::ScoreMod::kBias && M != softmax::ScoreMod::kCustomMask;
    static constexpr int kSmemBytes = kSmemMain + (kOBeside ? kSmemO : 0);

    // setmaxnreg moves registers between the warpgroups of the CTA's launch allocation
    // (kLaunchRegs per thread, what __launch_bounds__ leaves): the producer gives up what the
    // consumers take. Two consumers: 168 -> 40 frees 16384, 168 -> 232 takes 16384; three:
    // 128 -> 32 frees 12288, 128 -> 160 takes 12288. (At 24 registers the producer's tile
    // loop spilled; with a paged KV cache's loop, so did d = 256 at 32.)
    static constexpr int kLaunchRegs = (65536 / kThreads) / 8 * 8 > 255 ? 255 : (65536 / kThreads) / 8 * 8;
    // kLeanProducer: 168 -> 24 frees 18432, 168 -> 240 takes 18432.
    static constexpr int kProducerRegs = kConsumerWarpgroups == 3 ? 32 : kLeanProducer ? 24 : 40;
    static constexpr int kConsumerRegs = kConsumerWarpgroups == 3 ? 160 : kLeanProducer ? 240 : 232;
    // The score modifiers this tile compiles: logit softcapping where Config says so (the
    // generator leaves it out at 160 consumer registers, where its tanh spilled: bench/NOTES.md
    // §12; the row then lacks kVariantSoftcap and the launch refuses it).
    // e4m3: no additive bias (a bias tensor in the inputs' dtype has no use at 8 bits).
    // kWideKeys: softcapping runs on Short (launch.h); its tanh over the wide S spilled.
    template <softmax::ScoreMod M>
    static constexpr bool kHasMod = (M != softmax::ScoreMod::kSoftcap || (Config::kSoftcap && !kWideKeys)) &&
                                    !(kFp8 && M == softmax::ScoreMod::kBias);
    // The mask kinds this tile compiles (Config::kMaskKinds): a kernel its row cannot reach is
    // not instantiated (launch.h).
    template <mask::Kind K>
    static constexpr bool kHasMask = ((Config::kMaskKinds >> static_cast<int>(K)) & 1) != 0;
    // A paged KV cache's producer loop in a kernel of its own (fwd_kernel's kPagedOnly): the
    // three-consumer tile's producer has no register headroom (128 -> 32), and a second loop
    // beside the token-storage one cost its dense path 2-5 % (bench/NOTES.md §16). The
    // two-consumer tiles carry both loops in one kernel, chosen at run time.
    static constexpr bool kSeparatePaged = kConsumerWarpgroups == 3;
    // Whether the kernel serves a paged KV cache at all (kLeanProducer: on Short instead).
    static constexpr bool kHasPaged = !kLeanProducer;
    // Dropout (fwd_kernel's kDropout, an instance of its own): 16-bit inputs on the
    // two-consumer tiles up to d = 192. The three-consumer tile's 160 registers leave no room
    // for the Philox rounds: its launch runs dropout on its 128-row sibling (launch.h). d = 256's
    // 128 O registers spilled 40-64 bytes with them: that row lacks kVariantDropout and such
    // problems run on flash.
    static constexpr bool kHasDropout = !kFp8 && kConsumerWarpgroups == 2 && kHeadDim <= 192 && kHeadDimV <= 192;

    static_assert(kIsSupportedElement<Element> || kFp8, "Element must be __half, __nv_bfloat16 or __nv_fp8_e4m3");
    static_assert(!kFp8 || (kHeadDim % 32 == 0 && kHeadDimV % 32 == 0 && kBlockN % 32 == 0),
                  "ws e4m3: d, dv and kBlockN multiples of 32 (k32 steps, 32-column transposes)");
    static_assert(!kAccFp16, "ws: f32 accumulation only");
    static_assert(kHeadDim % 8 == 0 && kHeadDim >= 8 && kHeadDim <= 256,
                  "ws: d a multiple of 8 up to 256 (16-byte TMA rows)");
    static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 8 && kHeadDimV <= 256,
                  "ws: dv a multiple of 8 up to 256 (16-byte TMA rows)");
    static_assert((kBlockM == 128 || kBlockM == 192) && kWarpsM == kBlockM / 16,
                  "ws: 128 or 192 rows over two or three consumer warpgroups");
    static_assert(kBlockM == kConsumerWarpgroups * kWarpgroupRows, "one 64-row slab per consumer warpgroup");
    static_assert(kWarpsN == 1, "warps split query rows only");
    static_assert(kBlockN == 64 || kBlockN == 128 || (kFp8 && (kBlockN == 192 || kBlockN == 256)),
                  "ws: kBlockN in {64, 128}, e4m3 192 and 256");
    static_assert(kStages >= 2 && kStages <= 4, "kStages: 0 (auto = 2) .. 4");
    static_assert(kSmemBytes <= kMaxSmemBytes, "tiles exceed shared memory");
    static_assert(Config::kPanelCols == memory::kTmaPanelCols, "ws: Config's panels are the TMA panels");
    static_assert(kDimQK * kElemBytes == memory::tma_panels(kTmaHeadDim) * kRowBytes &&
                      kDimV * kElemBytes == memory::tma_panels(kTmaHeadDimV) * kRowBytes,
                  "ws: Config's kDimQK, kDimV are d, dv in whole 128-byte panels");
    static_assert(kSmemMain - kSmemQ - kStages * (kSmemK + kSmemV + kSmemVt) <= Config::kSmemReserve,
                  "ws: alignment, barriers and tile slots exceed the generator's reserve");
    static_assert(!Config::kSoftcap || kConsumerWarpgroups == 2,
                  "ws: softcapping only at two consumer warpgroups (its tanh spills at 160 registers)");
    static_assert((kLaunchRegs - kProducerRegs) * kWarpgroupThreads >=
                      (kConsumerRegs - kLaunchRegs) * kConsumerWarpgroups * kWarpgroupThreads,
                  "the consumers take more registers than the producer gives up");
};

// The kernel's TMA descriptors, by value in parameter space.
// k and v: head-tile maps over token storage, or paged-tile maps over a paged KV cache's
// pool (memory/tma_sm90.h).
struct TmaMaps {
    CUtensorMap q, k, v, o;  // o: boxes of one warpgroup's 64 rows (Traits::kStoreOTma)
};

// Keys per TMA copy from a paged KV cache: min(tokens_per_block, kPagedMaxBox), the largest
// power of two dividing both the block and the key tile, so a copy never straddles either.
template <class Tr>
constexpr int kPagedMaxBox = Tr::kBlockN & -Tr::kBlockN;

}  // namespace ws
}  // namespace fmha
