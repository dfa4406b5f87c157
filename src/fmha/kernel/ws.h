// The ws family: FlashAttention-3-style forward for Hopper (sm_90a: wgmma, TMA,
// setmaxnreg). Build with -gencode arch=compute_90a,code=sm_90a.
//
// A CTA works on tiles of kBlockM query rows of one (batch, head) with 1 + kBlockM / 64
// warpgroups:
//   warpgroup 0, producer (setmaxnreg down to kProducerRegs): one thread issues TMA loads,
//     per tile Q once, then K[j] and V[j] for every key block into a kStages-deep ring (a
//     paged KV cache: one warp, each lane copying one box of a block's keys);
//     "full" mbarriers complete on the TMA bytes, "empty" ones on one arrival per consumer
//     warp. Q has its own full/empty pair, so the next tile's Q loads as soon as every
//     consumer has issued its last Q K^T of this one.
//   warpgroups 1.., consumers (setmaxnreg up to kConsumerRegs): each owns 64 query rows
//     and keeps S, P and O in registers. Per key block j, walked from the last one down
//     (the masked blocks, key tail and causal diagonal, come first, as in flash_sm80):
//       issue S[j] = Q K[j]^T (wgmma SS); issue O += P[j+1] V[j+1] (wgmma RS, P from
//       registers); wait for S[j] -> release K[j], mask, softmax; wait for the P.V ->
//       release V[j+1], rescale O; pack P[j]. Softmax of one block thus runs while the
//       tensor cores do the other block's P.V (FA3's intra-warpgroup overlap). At the tile's
//       end O is normalised and staged in shared memory (stmatrix), and one thread stores
//       each warpgroup's 64 rows with TMA (Traits::kStoreOTma).
// Ping-pong (kPingPong, default on): the consumer warpgroups take turns issuing their
// wgmmas, round robin through named barriers, so one's softmax overlaps another's GEMMs.
// Causal and local masks: key blocks no row of the tile sees are never loaded (block
// skipping, mask::blocks); the producer walks the tile's blocks [begin, end) from the top.
//
// Tile order: sched::tile_at over m_blocks x heads x batch (causal: heaviest first inside
// sections of heads whose K and V fit in L2 together).
//   kPersistent == false (SCHEDULING_MODE 0): a 1-D grid of one CTA per tile.
//   kPersistent == true  (SCHEDULING_MODE 1): min(tiles, SMs) CTAs; CTA i starts with tile
//     i and the producer pulls each next tile from Params::tile_counter (atomicAdd), passes
//     it with its bounds (TileWork) to the consumers through a 2-slot shared-memory ring
//     (mbarriers) and starts its loads while the consumers finish the tile before
//     (normalise, store O). The CTA that draws the launch's last index puts the counter
//     back to 0, so it needs no reset between launches (launches that share a counter must
//     not overlap in time).
//
// What an instantiation supports (static_asserted in Traits; launch checks the rest):
//   Element      __half or __nv_bfloat16, f32 accumulation only (kAccFp16 == false)
//   kHeadDim(V)  multiples of 8 up to 256; dv may differ from d (MLA: d = 192, dv = 128).
//                Shared memory holds whole 64-column TMA panels: a head size that ends inside
//                one (32, 40, 72, 80, 96, 104, 160) pads it with the zeros TMA reads past the
//                tensor's d columns. Q K^T then runs ceil(d / 16) k16 steps and P V a wgmma N
//                of whole panels (64 per panel: the N of an MN-major SW128 operand), whose
//                extra columns are never stored; so d = 72 costs about what d = 80 does in
//                Q K^T and d = 128 in P V.
//   kBlockM      128 or 192 (two or three consumer warpgroups), kWarpsM = kBlockM / 16, kWarpsN 1
//   kBlockN      64 or 128 (a wgmma N), shared memory <= Config::kSmemLimit (227 KB)
//   Config       what generator/families/ws.py decided: the limit, panels, softcapping
//   run time     every MaskType (padding, causal, sliding/bidirectional window, chunked;
//                bottom-right aligned), var-len packed or padded
//                storage via offsets/lens, GQA/MQA, s_q != s_kv, any row/head strides
//                that are multiples of 8 elements, 16-byte aligned bases; a paged KV cache
//                (Params::kv_block_table): the maps of K and V then span the pool, and the
//                producer issues one copy per (min(tokens_per_block, kBlockN) keys, panel)
// Storage extent: the TMA maps need the number of tokens each tensor holds (O: as many as Q,
// Params::q_tokens says so for both). launch() takes
// them from Params::q_tokens / kv_tokens (the driver fills them; 0 is refused with
// cudaErrorInvalidValue, never guessed); launch_with_extents() takes them as arguments.
// Neither synchronises: both are capturable in a CUDA graph.
// K/V rows between a sequence's end and its last key block's end are read (masked to
// P = 0) and must hold finite values (padding rows zeroed, or the next sequence).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fmha/epilogue/store_o_sm90.h"
#include "fmha/kernel/launch_checks.h"
#include "fmha/mask/mask.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/mma/wgmma_sm90.h"
#include "fmha/sched/tile_scheduler.h"
#include "fmha/softmax/online_softmax_sm90.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/softmax/score_tensor.h"
#include "fmha/softmax/softcap.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace ws {

constexpr int kWarpgroupThreads = 128;
constexpr int kWarpgroupRows = 64;  // wgmma M

// What generator/families/ws.py decides for a kernel (its constants()), rendered into the
// translation unit. Traits read these and static_assert that what they compute agrees.
template <int kSmemLimit_, int kSmemReserve_, int kPanelCols_, int kDimQK_, int kDimV_, bool kSoftcap_>
struct Config {
    static constexpr int kSmemLimit = kSmemLimit_;      // dynamic shared memory a CTA may take
    static constexpr int kSmemReserve = kSmemReserve_;  // ... beside Q and the K/V stages
    static constexpr int kPanelCols = kPanelCols_;      // columns of a TMA panel
    static constexpr int kDimQK = kDimQK_;              // columns of d in shared memory: whole panels
    static constexpr int kDimV = kDimV_;                // ... of dv
    static constexpr bool kSoftcap = kSoftcap_;         // logit softcapping compiled (kVariantSoftcap)
};

template <class Config_, typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kWarpsM_,
          int kWarpsN_, bool kAccFp16_, bool kPersistent_ = false, int kStages_ = 0, bool kPingPong_ = true>
struct Traits {
    using Config = Config_;
    using Element = Element_;
    static constexpr bool kBf16 = ElementTraits<Element>::kIsBf16;
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
    // so that one's softmax runs while another's GEMMs own the tensor cores.
    static constexpr bool kPingPong = kPingPong_ && kConsumerWarpgroups >= 2;

    // Columns in shared memory: whole 64-column panels (zero fill past d, dv).
    static constexpr int kDimQK = Config::kDimQK;
    static constexpr int kDimV = Config::kDimV;
    static constexpr int kNTilesS = kBlockN / 8;                   // n8 tiles of S per thread row pair
    static constexpr int kNTilesO = kDimV / 8;                     // n8 tiles of the P V accumulator
    static constexpr int kNTilesOut = kHeadDimV / 8;               // ... of them stored (dv columns)
    static constexpr int kKSlicesQK = (kHeadDim + 15) / 16;        // k16 steps of Q K^T
    static constexpr int kKSlicesPV = kBlockN / 16;                // k16 steps of P V

    static constexpr int kRowBytes = memory::kTmaPanelRowBytes;
    static constexpr int kPanelBytesQ = kBlockM * kRowBytes;   // one 64-column panel of Q
    static constexpr int kPanelBytesKV = kBlockN * kRowBytes;  // ... of a K or V stage
    static constexpr int kSmemQ = kBlockM * kDimQK * 2;        // [kBlockM, d]
    static constexpr int kSmemK = kBlockN * kDimQK * 2;        // [kBlockN, d], one stage
    static constexpr int kSmemV = kBlockN * kDimV * 2;         // [kBlockN, dv], one stage
    // Q full/empty; K full/empty, V full/empty per stage; tile slot full/empty x 2; O free.
    static constexpr int kNumBarriers = 2 + 4 * kStages + 4 + 1;
    // Persistent tiles: two slots, each the next tile's index and TileWork (tile_slot_*).
    static constexpr int kTileSlotBytes = 48;
    static constexpr int kTileSlotsOffset = (8 * kNumBarriers + 15) / 16 * 16;
    static constexpr int kSmemAlign = 1024;                    // SW128 tiles: one swizzle period
    static constexpr int kMaxSmemBytes = Config::kSmemLimit;
    static constexpr int kSmemMain =
        kSmemAlign + kSmemQ + kStages * (kSmemK + kSmemV) + kTileSlotsOffset + 2 * kTileSlotBytes;
    // The two-consumer tiles' O leaves through shared memory and a TMA store: staging a
    // 64-row slab there takes 8 stmatrix per warp (d = 128), where storing it from registers
    // took 32 4-byte stores of 8 rows each (bench/NOTES.md §23). Its [kBlockM, dv] buffer sits
    // beside the rest where it fits (kOBeside), else over the V ring (kOInV: d = 256, MLA), which
    // every consumer's last P V of the tile must have read (a barrier of all consumers) and
    // whose next V loads wait for the stores to have read it (the O-free mbarrier; not in every
    // kernel: kOInVFor). A slab with rows past its sequence's end is stored from registers (a
    // TMA store would write the next sequence's rows), and so are the three-consumer tiles'
    // (d <= 64): there the staging measured 1 % slower.
    static constexpr int kSmemO = kBlockM * kDimV * 2;
    static constexpr int kPanelBytesO = kWarpgroupRows * kRowBytes;  // one panel of a warpgroup's slab
    static constexpr bool kOBeside = kConsumerWarpgroups == 2 && kSmemMain + kSmemO <= kMaxSmemBytes;
    static constexpr bool kOInV = kConsumerWarpgroups == 2 && !kOBeside && kSmemO <= kStages * kSmemV;
    static constexpr bool kStoreOTma = kOBeside || kOInV;
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
    static constexpr int kProducerRegs = kConsumerWarpgroups == 2 ? 40 : 32;
    static constexpr int kConsumerRegs = kConsumerWarpgroups == 2 ? 232 : 160;
    // The score modifiers this tile compiles: logit softcapping where Config says so (the
    // generator leaves it out at 160 consumer registers, where its tanh spilled: bench/NOTES.md
    // §12; the row then lacks kVariantSoftcap and the launch refuses it).
    template <softmax::ScoreMod M>
    static constexpr bool kHasMod = M != softmax::ScoreMod::kSoftcap || Config::kSoftcap;
    // A paged KV cache's producer loop in a kernel of its own (fwd_kernel's kPagedOnly): the
    // three-consumer tile's producer has no register headroom (128 -> 32), and a second loop
    // beside the token-storage one cost its dense path 2-5 % (bench/NOTES.md §16). The
    // two-consumer tiles carry both loops in one kernel, chosen at run time.
    static constexpr bool kSeparatePaged = kConsumerWarpgroups == 3;

    static_assert(kIsSupportedElement<Element>, "Element must be __half or __nv_bfloat16");
    static_assert(!kAccFp16, "ws: f32 accumulation only");
    static_assert(kHeadDim % 8 == 0 && kHeadDim >= 8 && kHeadDim <= 256,
                  "ws: d a multiple of 8 up to 256 (16-byte TMA rows)");
    static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 8 && kHeadDimV <= 256,
                  "ws: dv a multiple of 8 up to 256 (16-byte TMA rows)");
    static_assert((kBlockM == 128 || kBlockM == 192) && kWarpsM == kBlockM / 16,
                  "ws: 128 or 192 rows over two or three consumer warpgroups");
    static_assert(kBlockM == kConsumerWarpgroups * kWarpgroupRows, "one 64-row slab per consumer warpgroup");
    static_assert(kWarpsN == 1, "warps split query rows only");
    static_assert(kBlockN == 64 || kBlockN == 128, "ws: kBlockN in {64, 128}");
    static_assert(kStages >= 2 && kStages <= 4, "kStages: 0 (auto = 2) .. 4");
    static_assert(kSmemBytes <= kMaxSmemBytes, "tiles exceed shared memory");
    static_assert(Config::kPanelCols == memory::kTmaPanelCols, "ws: Config's panels are the TMA panels");
    static_assert(kDimQK == memory::tma_panels(kHeadDim) * memory::kTmaPanelCols &&
                      kDimV == memory::tma_panels(kHeadDimV) * memory::kTmaPanelCols,
                  "ws: Config's kDimQK, kDimV are d, dv in whole panels");
    static_assert(kSmemMain - kSmemQ - kStages * (kSmemK + kSmemV) <= Config::kSmemReserve,
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

// Named barriers 1.. (0 is __syncthreads): consumer c waits on barrier 1 + c for its turn
// and hands the turn over with an arrival on the next consumer's (round robin).
constexpr int kPingPongBarrier0 = 1;
constexpr int kPingPongThreads = 2 * kWarpgroupThreads;
// Named barriers of the O epilogue: kWarpgroupBarrier0, every consumer thread; + 1 + c,
// consumer c's four warps alone.
constexpr int kWarpgroupBarrier0 = 4;
FMHA_DEVICE void named_barrier_sync(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kPingPongThreads) : "memory");
}
FMHA_DEVICE void named_barrier_arrive(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kPingPongThreads) : "memory");
}

template <int kRegs>
FMHA_DEVICE void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
FMHA_DEVICE void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// One tile's bounds, the same on the producer and consumer sides.
struct TileWork {
    int batch, head, kv_head, m0, q_len, kv_len, q_off, kv_off;
    int blk_end;   // key blocks blk_end - 1 down to blk_end - n_blocks are visited
    int n_blocks;  // 0 when the tile has no visible key
    bool active;   // the tile has query rows (m0 < q_len)
};

template <class Tr, mask::Kind kMask>
FMHA_DEVICE TileWork tile_work(const Params& p, int t, int m_blocks, int section) {
    const sched::Tile tile = sched::tile_at(t, m_blocks, p.h, p.b, kMask == mask::Kind::kCausal, section);
    TileWork w;
    w.batch = tile.batch;
    w.head = tile.head;
    w.kv_head = tile.head / (p.h / p.h_kv);
    w.m0 = tile.m_block * Tr::kBlockM;
    w.q_len = p.q_lens[tile.batch];
    w.active = w.m0 < w.q_len;
    w.kv_len = p.kv_lens[tile.batch];
    w.q_off = p.q_offsets[tile.batch];
    w.kv_off = p.kv_block_table != nullptr ? 0 : p.kv_offsets[tile.batch];  // paged: not read
    // Blocks no row of the tile sees (above the diagonal, outside a window) are skipped.
    const mask::Blocks blk =
        w.active ? mask::blocks(mask::Rows<kMask>::make(p, w.q_len, w.kv_len), w.m0,
                                w.m0 + min_int(w.q_len - w.m0, Tr::kBlockM) - 1, Tr::kBlockN)
                 : mask::Blocks{0, 0, 0, 0};
    w.blk_end = blk.end;
    w.n_blocks = blk.count();
    return w;
}

// A persistent CTA's tile slot (Traits::kTileSlotBytes): the tile index and its TileWork,
// which the producer has computed a tile ahead, so that the consumers start a tile without
// loading its sequence's lengths and offsets again (bench/NOTES.md §25).
FMHA_DEVICE void store_tile_slot(uint32_t slot, int t, const TileWork& w) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
                 ::"r"(slot), "r"(t), "r"(w.batch), "r"(w.head), "r"(w.kv_head) : "memory");
    asm volatile("st.shared.v4.b32 [%0 + 16], {%1, %2, %3, %4};\n"
                 ::"r"(slot), "r"(w.m0), "r"(w.q_len), "r"(w.kv_len), "r"(w.q_off) : "memory");
    asm volatile("st.shared.v4.b32 [%0 + 32], {%1, %2, %3, %4};\n"
                 ::"r"(slot), "r"(w.kv_off), "r"(w.blk_end), "r"(w.n_blocks), "r"(int(w.active)) : "memory");
}

FMHA_DEVICE int load_tile_slot(uint32_t slot, TileWork& w) {
    int t, active;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(t), "=r"(w.batch), "=r"(w.head), "=r"(w.kv_head) : "r"(slot) : "memory");
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4 + 16];\n"
                 : "=r"(w.m0), "=r"(w.q_len), "=r"(w.kv_len), "=r"(w.q_off) : "r"(slot) : "memory");
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4 + 32];\n"
                 : "=r"(w.kv_off), "=r"(w.blk_end), "=r"(w.n_blocks), "=r"(active) : "r"(slot) : "memory");
    w.active = active != 0;
    return t;
}

// kPagedOnly (Traits::kSeparatePaged tiles only): the producer serves a paged KV cache and
// nothing else; without it, token storage only. Other tiles ignore it and pick at run time.
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod = softmax::ScoreMod::kNone, bool kPagedOnly = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    fwd_kernel(const __grid_constant__ Params p, const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Tr::Element;
    constexpr int S = Tr::kStages;
    extern __shared__ char smem_raw[];
    const uint32_t smem_q = (smem_u32(smem_raw) + Tr::kSmemAlign - 1) & ~uint32_t(Tr::kSmemAlign - 1);
    const uint32_t smem_k = smem_q + Tr::kSmemQ;      // S x [kBlockN, d]
    const uint32_t smem_v = smem_k + S * Tr::kSmemK;  // S x [kBlockN, dv]
    // [kBlockM, dv] staging of O (kStoreOTma): after the V ring, or over it (this kernel:
    // kStageOverV).
    const uint32_t smem_o = Tr::kOInV ? smem_v : smem_v + S * Tr::kSmemV;
    constexpr bool kStageOverV = Tr::template kOInVFor<kMod>;
    const uint32_t bar_base = smem_v + S * Tr::kSmemV + (Tr::kOBeside ? Tr::kSmemO : 0);
    const uint32_t q_full = bar_base, q_empty = bar_base + 8u;
    const auto k_full = [&](int st) { return bar_base + 8u * (2 + st); };
    const auto k_empty = [&](int st) { return bar_base + 8u * (2 + S + st); };
    const auto v_full = [&](int st) { return bar_base + 8u * (2 + 2 * S + st); };
    const auto v_empty = [&](int st) { return bar_base + 8u * (2 + 3 * S + st); };
    const auto tile_full = [&](int slot) { return bar_base + 8u * (2 + 4 * S + slot); };
    const auto tile_empty = [&](int slot) { return bar_base + 8u * (2 + 4 * S + 2 + slot); };
    // kStageOverV: completes once per tile with key blocks, when every consumer warpgroup is
    // done with the V ring (its O stored from there and read, or stored from registers).
    const uint32_t o_free = bar_base + 8u * (Tr::kNumBarriers - 1);  // the last barrier
    const auto tile_slot = [&](int slot) {
        return bar_base + uint32_t(Tr::kTileSlotsOffset + slot * Tr::kTileSlotBytes);
    };

    const int m_blocks = ceil_div(p.s_q_max, Tr::kBlockM);
    const int num_tiles = m_blocks * p.h * p.b;
    // Causal order: heaviest first inside sections of heads whose K/V share L2.
    const int section =
        sched::l2_section(int64_t(p.s_kv_max) * (Tr::kHeadDim + Tr::kHeadDimV) * sizeof(Element), p.h * p.b);
    const int tid = threadIdx.x;
    const int warpgroup = __shfl_sync(0xffffffffu, tid / kWarpgroupThreads, 0);
    if (tid == 0) {
        memory::mbar_init(q_full, 1);
        memory::mbar_init(q_empty, Tr::kConsumerWarps);
        for (int st = 0; st < S; ++st) {
            memory::mbar_init(k_full(st), 1);
            memory::mbar_init(v_full(st), 1);
            memory::mbar_init(k_empty(st), Tr::kConsumerWarps);
            memory::mbar_init(v_empty(st), Tr::kConsumerWarps);
        }
        for (int slot = 0; slot < 2; ++slot) {
            memory::mbar_init(tile_full(slot), 1);
            memory::mbar_init(tile_empty(slot), Tr::kConsumerWarps * kWarpSize);  // every reader
        }
        memory::mbar_init(o_free, Tr::kConsumerWarpgroups);
        memory::mbar_fence_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        // Producer: per tile Q, then key blocks from the last one down, the order the
        // consumers take them. The ring position (kv_iter) runs on across tiles.
        setmaxnreg_dec<Tr::kProducerRegs>();
        // Token storage: one thread walks the tiles and issues the copies. A paged KV cache:
        // one warp walks them; lane 0 issues Q's copies, and every lane looks up one box's
        // block and copies that box. Two loops, so that each fits the producer's registers.
        const auto produce = [&](auto paged_c) {
            constexpr bool kPaged = decltype(paged_c)::value;
            const int lane = tid;
            const bool leader = !kPaged || lane == 0;
            if (leader) {
                memory::tma_prefetch_map(&maps.q);
                memory::tma_prefetch_map(&maps.k);
                memory::tma_prefetch_map(&maps.v);
            }
            int kv_iter = 0, q_iter = 0;
            int t = blockIdx.x;
            for (int tile_iter = 0;; ++tile_iter) {
                const TileWork w = t < num_tiles ? tile_work<Tr, kMask>(p, t, m_blocks, section) : TileWork{};
                if constexpr (Tr::kPersistent) {
                    const int slot = tile_iter & 1;
                    memory::mbar_wait(tile_empty(slot), ((tile_iter >> 1) & 1) ^ 1);
                    if (leader) {
                        store_tile_slot(tile_slot(slot), t, w);
                        memory::mbar_arrive(tile_full(slot));
                    }
                }
                if (t >= num_tiles) break;
                if (w.n_blocks > 0) {
                    memory::mbar_wait(q_empty, (q_iter & 1) ^ 1);
                    if (leader) {
                        memory::mbar_arrive_expect_tx(q_full, Tr::kSmemQ);
                        memory::tma_load_head_tile<Tr::kHeadDim, Tr::kPanelBytesQ>(smem_q, &maps.q, q_full,
                                                                                    w.q_off + w.m0, w.head);
                    }
                    ++q_iter;
                    // K and V of each key block into the ring; dim: the tensor's head size.
                    for (int it = 0; it < w.n_blocks; ++it, ++kv_iter) {
                        const int st = kv_iter % S;
                        const uint32_t phase = (kv_iter / S) & 1;
                        const int key0 = (w.blk_end - 1 - it) * Tr::kBlockN;
                        const auto load = [&](uint32_t dst, const CUtensorMap* map, uint32_t bar, auto dim) {
                            constexpr int kD = decltype(dim)::value;
                            if constexpr (kPaged) {
                                memory::tma_load_paged_box<Tr::kBlockN, kD, kPagedMaxBox<Tr>>(
                                    dst, map, bar, p.kv_block_table, uint32_t(w.batch) * uint32_t(p.kv_table_stride),
                                    key0, w.kv_len, p.tokens_per_block, w.kv_head, p.kv_pool_blocks, lane);
                            } else {
                                memory::tma_load_head_tile<kD, Tr::kPanelBytesKV>(dst, map, bar, w.kv_off + key0,
                                                                                  w.kv_head);
                            }
                        };
                        memory::mbar_wait(k_empty(st), phase ^ 1);
                        if (leader) memory::mbar_arrive_expect_tx(k_full(st), Tr::kSmemK);
                        load(smem_k + st * Tr::kSmemK, &maps.k, k_full(st),
                             std::integral_constant<int, Tr::kHeadDim>{});
                        // kStageOverV: the last tile's O may be in the V ring until its stores
                        // read it (q_iter counts this tile; the consumers cannot be a tile
                        // further on, this one needs these loads).
                        if (kStageOverV && it == 0 && q_iter > 1) memory::mbar_wait(o_free, q_iter & 1);
                        memory::mbar_wait(v_empty(st), phase ^ 1);
                        if (leader) memory::mbar_arrive_expect_tx(v_full(st), Tr::kSmemV);
                        load(smem_v + st * Tr::kSmemV, &maps.v, v_full(st),
                             std::integral_constant<int, Tr::kHeadDimV>{});
                    }
                }
                if constexpr (Tr::kPersistent) {
                    // Every CTA draws until it gets an index past the end: num_tiles - gridDim.x
                    // real draws plus one per CTA, so the draw that returns num_tiles - 1 is the
                    // launch's last, and the counter is free to go back to 0.
                    int drawn = 0;
                    if (leader) {
                        drawn = atomicAdd(p.tile_counter, 1);
                        if (drawn == num_tiles - 1) atomicExch(p.tile_counter, 0);
                    }
                    if constexpr (kPaged) drawn = __shfl_sync(0xffffffffu, drawn, 0);
                    t = static_cast<int>(gridDim.x) + drawn;
                } else {
                    t = num_tiles;
                }
            }
        };
        if constexpr (Tr::kSeparatePaged) {
            if constexpr (kPagedOnly) {
                if (tid < kWarpSize) produce(std::true_type{});
            } else if (tid == 0) {
                produce(std::false_type{});
            }
        } else if (p.kv_block_table != nullptr) {
            if (tid < kWarpSize) produce(std::true_type{});
        } else if (tid == 0) {
            produce(std::false_type{});
        }
        return;
    }

    setmaxnreg_inc<Tr::kConsumerRegs>();
    const int lane = tid % kWarpSize;
    const int consumer = warpgroup - 1;
    const int row_g = (tid / kWarpSize) % 4 * 16 + lane / 4;  // this thread's first row in its warpgroup
    const int wg_tid = tid % kWarpgroupThreads;
    const auto wg_barrier = [&] {  // the consumer warpgroup's own named barrier
        asm volatile("bar.sync %0, %1;\n" ::"r"(kWarpgroupBarrier0 + 1 + consumer), "n"(kWarpgroupThreads) : "memory");
    };
    const auto consumers_barrier = [&] {  // every consumer thread
        asm volatile("bar.sync %0, %1;\n" ::"n"(kWarpgroupBarrier0), "n"(Tr::kConsumerWarpgroups * kWarpgroupThreads)
                     : "memory");
    };

    // Descriptors at stage 0 / k-slice 0; slices and stages add (bytes >> 4).
    const uint64_t desc_q = mma::make_smem_desc_sw128(smem_q + consumer * kWarpgroupRows * Tr::kRowBytes, 16,
                                                      mma::kSw128AtomBytes);
    const uint64_t desc_k = mma::make_smem_desc_sw128(smem_k, 16, mma::kSw128AtomBytes);
    const uint64_t desc_v = mma::make_smem_desc_sw128(smem_v, Tr::kPanelBytesKV, mma::kSw128AtomBytes);
    constexpr int kSliceBytesK = 16 * 2;                    // k16 inside a 128-byte row
    constexpr int kSliceBytesV = 16 * Tr::kRowBytes;        // 16 key rows
    constexpr int kSlicesPerPanel = memory::kTmaPanelCols / 16;

    const auto release = [&](uint32_t bar) {
        __syncwarp();
        if (lane == 0) memory::mbar_arrive(bar);
    };
    const auto issue_qk = [&](float (&acc_s)[1][Tr::kNTilesS][4], int st) {
        mma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKSlicesQK; ++kk) {
            const uint32_t off_q = (kk / kSlicesPerPanel) * Tr::kPanelBytesQ + (kk % kSlicesPerPanel) * kSliceBytesK;
            const uint32_t off_k =
                st * Tr::kSmemK + (kk / kSlicesPerPanel) * Tr::kPanelBytesKV + (kk % kSlicesPerPanel) * kSliceBytesK;
            mma::wgmma_ss<Tr::kBf16, Tr::kBlockN>(mma::flat(acc_s), desc_q + (off_q >> 4), desc_k + (off_k >> 4),
                                                  kk > 0);
        }
        mma::wgmma_commit();
    };
    const float scale_log2 = p.scale_bmm1 * kLog2e;

    // Turns: n_blocks + 1 issue phases per warpgroup and tile, round robin from consumer 0,
    // running on across tiles: the last consumer's last hand-over of a tile lets consumer 0
    // start the next one while the others still run their last P V and store O. The last
    // consumer makes one arrival before its first tile and consumer 0 one wait after its last,
    // so every arrival is matched by one wait. Measured against restarting the round robin
    // every tile (bench/NOTES.md §19, §24): 1-4.5 % faster with three consumers and with the
    // causal mask; with the two-consumer tiles' equal tiles 0.7-1.1 % slower while O was
    // stored from registers, 0.5-1 % faster (d = 128) since it goes through TMA.
    constexpr int kLastConsumer = Tr::kConsumerWarpgroups - 1;
    const auto my_turn = [&] {
        if constexpr (Tr::kPingPong) named_barrier_sync(kPingPongBarrier0 + consumer);
    };
    const auto your_turn = [&] {
        if constexpr (Tr::kPingPong) {
            named_barrier_arrive(kPingPongBarrier0 + (consumer == kLastConsumer ? 0 : consumer + 1));
        }
    };

    int kv_iter = 0, q_iter = 0;
    int t = blockIdx.x;
    if (consumer == kLastConsumer) your_turn();
    for (int tile_iter = 0;; ++tile_iter) {
        TileWork w;
        if constexpr (Tr::kPersistent) {
            const int slot = tile_iter & 1;
            memory::mbar_wait(tile_full(slot), (tile_iter >> 1) & 1);
            t = load_tile_slot(tile_slot(slot), w);
            // Every thread that read the slot arrives (not one per warp after __syncwarp): the
            // producer's next write is then ordered after each read by the mbarrier itself.
            memory::mbar_arrive(tile_empty(slot));
        } else if (tile_iter > 0) {
            t = num_tiles;
        }
        if (t >= num_tiles) break;
        if constexpr (!Tr::kPersistent) w = tile_work<Tr, kMask>(p, t, m_blocks, section);
        if (!w.active) continue;
        const int n_blocks = w.n_blocks;
        const int wg_row0 = w.m0 + consumer * kWarpgroupRows;  // first query row of this warpgroup
        // The blocks every row of this warpgroup sees whole run without the mask.
        const auto rows = mask::Rows<kMask>::make(p, w.q_len, w.kv_len);
        const mask::Blocks wg_blk = mask::blocks(rows, wg_row0, wg_row0 + kWarpgroupRows - 1, Tr::kBlockN);
        // ALiBi: the tile's head's slope in raw-score units (the softmax scales by scale_bmm1).
        const float alibi_slope =
            kMod == softmax::ScoreMod::kAlibi ? __fdividef(p.alibi_slopes[w.head], p.scale_bmm1) : 0.f;

        float acc_o[1][Tr::kNTilesO][4];  // [64 rows, dv in whole panels] f32 of this warpgroup
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][nt][e] = 0.f;
        }
        uint32_t p_frag[1][Tr::kKSlicesPV][4];  // P of the previous block as wgmma A, [64 rows, kBlockN]
        softmax::OnlineSoftmaxSm90 softmax;
        softmax.init();

        const auto issue_pv = [&](int st) {
            mma::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kKSlicesPV; ++kk) {
                const uint32_t off_v = st * Tr::kSmemV + kk * kSliceBytesV;
                mma::wgmma_rs<Tr::kBf16, Tr::kDimV>(mma::flat(acc_o), p_frag[0][kk], desc_v + (off_v >> 4), true);
            }
            mma::wgmma_commit();
        };
        // Bias: this thread's first row's entries.
        const Element* bias_tile = kMod == softmax::ScoreMod::kBias
                                       ? softmax::bias_row<Element>(p, w.batch, w.head, wg_row0 + row_g)
                                       : nullptr;
        // Score modifier, mask (boundary blocks only) and softmax of block nb; alpha: the O
        // rescale it needs.
        const auto softmax_block = [&](float (&acc_s)[1][Tr::kNTilesS][4], int nb, float (&alpha)[2]) {
            if constexpr (kMod == softmax::ScoreMod::kSoftcap) {
                softmax::apply_softcap(acc_s, softmax::Softcap::for_raw_scores(p.softcap, p.scale_bmm1));
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
                    nb * Tr::kBlockN + 2 * (lane % 4), w.kv_len, __frcp_rn(p.scale_bmm1));
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
            if (softmax::hides_keys(kMod) || wg_blk.masked(nb)) {
                mask::apply(acc_s, rows, wg_row0 + row_g, nb * Tr::kBlockN + 2 * (lane % 4));
                softmax.template scale<true>(acc_s, alpha, scale_log2);
            } else {
                softmax.template scale<false>(acc_s, alpha, scale_log2);
            }
        };

        if (n_blocks > 0) {
            const int g0 = kv_iter;  // ring position of this tile's first block
            memory::mbar_wait(q_full, q_iter & 1);
            {
                float acc_s[1][Tr::kNTilesS][4];
                float alpha[2];
                const int st = g0 % S;
                memory::mbar_wait(k_full(st), (g0 / S) & 1);
                my_turn();
                issue_qk(acc_s, st);
                your_turn();
                mma::wgmma_wait<0>();
                mma::fence_operands(acc_s);
                release(k_empty(st));
                if (n_blocks == 1) release(q_empty);
                softmax_block(acc_s, w.blk_end - 1, alpha);  // O is still zero: alpha unused
                mma::s_to_p<Element>(p_frag, acc_s);
            }
            for (int it = 1; it < n_blocks; ++it) {
                const int g = g0 + it;
                const int st = g % S, prev = (g - 1) % S;
                float acc_s[1][Tr::kNTilesS][4];
                float alpha[2];
                memory::mbar_wait(k_full(st), (g / S) & 1);
                memory::mbar_wait(v_full(prev), ((g - 1) / S) & 1);
                my_turn();
                issue_qk(acc_s, st);
                mma::fence_operands(acc_o);
                issue_pv(prev);
                your_turn();
                mma::wgmma_wait<1>();  // S done, P.V may still run
                mma::fence_operands(acc_s);
                release(k_empty(st));
                if (it == n_blocks - 1) release(q_empty);  // the tile's last read of Q
                softmax_block(acc_s, w.blk_end - 1 - it, alpha);
                mma::wgmma_wait<0>();
                mma::fence_operands(acc_o);
                mma::fence_operands(p_frag);
                release(v_empty(prev));
                softmax::OnlineSoftmaxSm90::rescale(acc_o, alpha);
                mma::s_to_p<Element>(p_frag, acc_s);
            }
            const int g_last = g0 + n_blocks - 1;
            const int last = g_last % S;
            memory::mbar_wait(v_full(last), (g_last / S) & 1);
            mma::fence_operands(acc_o);
            my_turn();
            issue_pv(last);
            your_turn();
            mma::wgmma_wait<0>();
            mma::fence_operands(acc_o);
            release(v_empty(last));
            kv_iter += n_blocks;
            ++q_iter;
        }

        float inv[2];
        softmax.finalize(inv, p.scale_softmax * p.scale_bmm2, p, w.head);
        softmax.store_lse(p, w.batch, w.head, wg_row0 + row_g, w.q_len, lane);
        // kStageOverV: every consumer's last P V has read the V ring before any O lands there. A
        // tile without key blocks loaded nothing there; its O (zeros) goes from registers.
        const bool o_in_v = kStageOverV && n_blocks > 0;
        if (o_in_v) consumers_barrier();
        if ((Tr::kOBeside || o_in_v) && wg_row0 + kWarpgroupRows <= w.q_len) {
            // The slab's rows are all this sequence's: stage it in shared memory, one thread
            // stores it with TMA. The slab's buffer is free once the last store has read it.
            const uint32_t slab = smem_o + consumer * (Tr::kSmemO / Tr::kConsumerWarpgroups);
            if (Tr::kOBeside && wg_tid == 0) memory::bulk_wait_read<0>();
            if constexpr (Tr::kOBeside) wg_barrier();
            epilogue::stage_o_rows<Element>(acc_o, inv, slab, wg_tid / kWarpSize);
            memory::fence_proxy_async_smem();
            wg_barrier();
            if (wg_tid == 0) {
                memory::tma_store_head_tile<Tr::kHeadDimV, Tr::kPanelBytesO>(slab, &maps.o, w.q_off + wg_row0,
                                                                             w.head);
                memory::bulk_commit();
                if (o_in_v) {
                    memory::bulk_wait_read<0>();
                    memory::mbar_arrive(o_free);
                }
            }
        } else {
            Element* o = static_cast<Element*>(p.o) + static_cast<int64_t>(w.q_off + wg_row0) * p.o_row_stride +
                         static_cast<int64_t>(w.head) * p.o_head_stride;
            epilogue::store_o_rows<Element, Tr::kNTilesOut>(acc_o, inv, o, p.o_row_stride, row_g, lane,
                                                            w.q_len - wg_row0);
            if (o_in_v && wg_tid == 0) memory::mbar_arrive(o_free);
        }
    }
    if (consumer == 0) my_turn();  // the last consumer's last hand-over
    if ((Tr::kOBeside || kStageOverV) && wg_tid == 0) memory::bulk_wait<0>();  // the shared memory outlives the stores
#endif
}

// The __global__ for a mask, as the registry's EntryFn returns it.
template <class Tr>
const void* entry(MaskType m) {
    return kernel::entry_for(m, [](auto kind) { return &fwd_kernel<Tr, decltype(kind)::value>; });
}

// Grid of a launch: one CTA per tile, or min(tiles, SMs) persistent CTAs. 0 when the tile
// count does not fit an int.
template <class Tr>
int grid_size(const Params& p, int num_sms) {
    const int64_t tiles = static_cast<int64_t>(ceil_div(p.s_q_max, Tr::kBlockM)) * p.h * p.b;
    if (tiles > INT32_MAX) return 0;
    return static_cast<int>(Tr::kPersistent ? std::min<int64_t>(tiles, num_sms) : tiles);
}

// cudaFuncSetAttribute once per kernel and process (the first launch pays it).
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod, bool kPagedOnly>
cudaError_t allow_smem() {
    static const cudaError_t err =
        cudaFuncSetAttribute(reinterpret_cast<const void*>(&fwd_kernel<Tr, kMask, kMod, kPagedOnly>),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    return err;
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit this
// instantiation (d, dv, b, h, h_kv, alignment and strides as flash_sm80; persistent: a
// tile counter), or when an extent is not in [1, INT32_MAX] (TMA coordinates are 32-bit),
// and cudaErrorNotSupported when the driver offers no tensor-map encoder.
template <class Tr>
cudaError_t launch_with_extents(const Params& p, int64_t q_tokens, int64_t kv_tokens, cudaStream_t stream) {
    using Element = typename Tr::Element;
    if (q_tokens < 1 || kv_tokens < 1 || q_tokens > INT32_MAX || kv_tokens > INT32_MAX) return cudaErrorInvalidValue;
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV)) return cudaErrorInvalidValue;
    if (entry<Tr>(p.mask) == nullptr) return cudaErrorInvalidValue;  // a mask the family does not implement
    if (p.wide_logits) return cudaErrorInvalidValue;  // one FFMA a score: no kVariantWideLogits
    if (Tr::kPersistent && p.tile_counter == nullptr) return cudaErrorInvalidValue;
    int num_sms = 0;
    if (Tr::kPersistent) {
        const cudaError_t err = kernel::sm_count(p, &num_sms);
        if (err != cudaSuccess) return err;
    }
    const int grid = grid_size<Tr>(p, num_sms);
    if (grid < 1) return cudaErrorInvalidValue;

    TmaMaps maps;
    cudaError_t err = memory::make_head_tile_map<Element>(&maps.q, p.q, q_tokens, p.h, Tr::kHeadDim, p.q_row_stride,
                                                          p.q_head_stride, Tr::kBlockM);
    if (err == cudaSuccess && p.kv_block_table != nullptr) {
        const int box_rows = std::min(p.tokens_per_block, kPagedMaxBox<Tr>);
        err = memory::make_paged_tile_map<Element>(&maps.k, p.k, p.kv_pool_blocks, p.tokens_per_block, p.h_kv,
                                                   Tr::kHeadDim, p.k_row_stride, p.k_head_stride, p.k_block_stride,
                                                   box_rows);
        if (err == cudaSuccess) {
            err = memory::make_paged_tile_map<Element>(&maps.v, p.v, p.kv_pool_blocks, p.tokens_per_block, p.h_kv,
                                                       Tr::kHeadDimV, p.v_row_stride, p.v_head_stride,
                                                       p.v_block_stride, box_rows);
        }
    } else if (err == cudaSuccess) {
        err = memory::make_head_tile_map<Element>(&maps.k, p.k, kv_tokens, p.h_kv, Tr::kHeadDim, p.k_row_stride,
                                                  p.k_head_stride, Tr::kBlockN);
        if (err == cudaSuccess) {
            err = memory::make_head_tile_map<Element>(&maps.v, p.v, kv_tokens, p.h_kv, Tr::kHeadDimV,
                                                      p.v_row_stride, p.v_head_stride, Tr::kBlockN);
        }
    }
    if (err == cudaSuccess && Tr::kStoreOTma) {
        err = memory::make_head_tile_map<Element>(&maps.o, p.o, q_tokens, p.h, Tr::kHeadDimV, p.o_row_stride,
                                                  p.o_head_stride, kWarpgroupRows);
    }
    if (err != cudaSuccess) return err;
    err = kernel::with_variant(
        p,
        [&](auto kind, auto mod) {
            constexpr mask::Kind kMask = decltype(kind)::value;
            constexpr softmax::ScoreMod kMod = decltype(mod)::value;
            if constexpr (!Tr::template kHasMod<kMod>) {
                return cudaErrorInvalidValue;  // not a variant of this kernel (Traits::kHasMod)
            } else {
                const auto go = [&](auto paged_only) {
                    constexpr bool kPagedOnly = decltype(paged_only)::value;
                    const cudaError_t e = allow_smem<Tr, kMask, kMod, kPagedOnly>();
                    if (e == cudaSuccess) {
                        fwd_kernel<Tr, kMask, kMod, kPagedOnly><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p,
                                                                                                             maps);
                    }
                    return e;
                };
                if constexpr (Tr::kSeparatePaged) {
                    if (p.kv_block_table != nullptr) return go(std::true_type{});
                }
                return go(std::false_type{});
            }
        },
        cudaErrorInvalidValue);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
}

// The registry's LaunchFn: the storage extents come from Params (q_tokens, kv_tokens).
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (p.q_tokens < 1 || p.kv_tokens < 1) return cudaErrorInvalidValue;
    return launch_with_extents<Tr>(p, p.q_tokens, p.kv_tokens, stream);
}

}  // namespace ws
}  // namespace fmha
