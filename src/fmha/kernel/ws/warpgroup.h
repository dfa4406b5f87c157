// How the ws kernel's warpgroups coordinate: the shared-memory layout and its mbarriers,
// named barriers (the consumers' ping-pong and their epilogue) and setmaxnreg (the
// producer's registers go to the consumers).
#pragma once

#include <cstdint>

#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/memory/named_barrier.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/utils.h"

namespace fmha {
namespace ws {

// Named barriers 1.. (0 is __syncthreads): consumer c waits on barrier 1 + c for its turn
// and hands the turn over with an arrival on the next consumer's (round robin).
constexpr int kPingPongBarrier0 = 1;
constexpr int kPingPongThreads = 2 * kWarpgroupThreads;
// Named barriers of the O epilogue: kWarpgroupBarrier0, every consumer thread; + 1 + c,
// consumer c's four warps alone.
constexpr int kWarpgroupBarrier0 = 4;
FMHA_DEVICE void named_barrier_sync(int id) { memory::bar_sync<kPingPongThreads>(id); }
FMHA_DEVICE void named_barrier_arrive(int id) { memory::bar_arrive<kPingPongThreads>(id); }

template <int kRegs>
FMHA_DEVICE void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
FMHA_DEVICE void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// A consumer thread's place: its warpgroup (consumer 0..), lane, first row in the warpgroup's
// 64-row slab (wgmma's accumulator layout: rows row_g and row_g + 8), index in the warpgroup.
template <class Tr>
struct ConsumerThread {
    int lane, consumer, row_g, wg_tid;

    FMHA_DEVICE ConsumerThread(int tid, int warpgroup)
        : lane(tid % kWarpSize),
          consumer(warpgroup - 1),
          row_g((tid / kWarpSize) % 4 * 16 + tid % kWarpSize / 4),
          wg_tid(tid % kWarpgroupThreads) {}
    FMHA_DEVICE void wg_barrier() const {  // this consumer warpgroup's own named barrier
        memory::bar_sync<kWarpgroupThreads>(kWarpgroupBarrier0 + 1 + consumer);
    }
    FMHA_DEVICE static void consumers_barrier() {  // every consumer thread
        memory::bar_sync<kWarpgroupBarrier0, Tr::kConsumerWarpgroups * kWarpgroupThreads>();
    }
};

// The CTA's shared memory: Q, the K and V rings of kStages, O's staging, then the mbarriers
// and the persistent tile slots. Addresses are 32-bit shared-window offsets.
template <class Tr>
struct Smem {
    static constexpr int S = Tr::kStages;
    uint32_t q;    // [kBlockM, d]
    uint32_t k;    // S x [kBlockN, d]
    uint32_t v;    // S x [kBlockN, dv]
    uint32_t vt;   // e4m3: S x [dv, kBlockN], V made K-major (mma/fp8_sm90.h)
    uint32_t o;    // [kBlockM, dv] staging of O (kStoreOTma): after the V rings, or over them (kOInV)
    uint32_t bar;  // the mbarriers, then the tile slots

    FMHA_DEVICE explicit Smem(const char* raw) {
        q = (smem_u32(raw) + Tr::kSmemAlign - 1) & ~uint32_t(Tr::kSmemAlign - 1);
        k = q + Tr::kSmemQ;
        v = k + S * Tr::kSmemK;
        vt = v + S * Tr::kSmemV;
        o = Tr::kOInV ? v : vt + S * Tr::kSmemVt;
        bar = vt + S * Tr::kSmemVt + (Tr::kOBeside ? Tr::kSmemO : 0);
    }
    FMHA_DEVICE uint32_t q_full() const { return bar; }
    FMHA_DEVICE uint32_t q_empty() const { return bar + 8u; }
    FMHA_DEVICE uint32_t k_full(int st) const { return bar + 8u * (2 + st); }
    FMHA_DEVICE uint32_t k_empty(int st) const { return bar + 8u * (2 + S + st); }
    FMHA_DEVICE uint32_t v_full(int st) const { return bar + 8u * (2 + 2 * S + st); }
    FMHA_DEVICE uint32_t v_empty(int st) const { return bar + 8u * (2 + 3 * S + st); }
    FMHA_DEVICE uint32_t tile_full(int slot) const { return bar + 8u * (2 + 4 * S + slot); }
    FMHA_DEVICE uint32_t tile_empty(int slot) const { return bar + 8u * (2 + 4 * S + 2 + slot); }
    FMHA_DEVICE uint32_t vt_full(int st) const { return bar + 8u * (2 + 4 * S + 4 + st); }
    FMHA_DEVICE uint32_t vt_empty(int st) const { return bar + 8u * (2 + 5 * S + 4 + st); }
    // The V stage the consumers' P V reads and frees: e4m3 reads the transposed copy.
    FMHA_DEVICE uint32_t pv_full(int st) const {
        if constexpr (Tr::kFp8) return vt_full(st);
        else return v_full(st);
    }
    FMHA_DEVICE uint32_t pv_empty(int st) const {
        if constexpr (Tr::kFp8) return vt_empty(st);
        else return v_empty(st);
    }
    // O staged over the V ring (Traits::kOInVFor): completes once per tile with key blocks,
    // when every consumer warpgroup is done with the ring (its O stored from there and read,
    // or stored from registers). The last barrier.
    FMHA_DEVICE uint32_t o_free() const { return bar + 8u * (Tr::kNumBarriers - 1); }
    FMHA_DEVICE uint32_t tile_slot(int slot) const {
        return bar + uint32_t(Tr::kTileSlotsOffset + slot * Tr::kTileSlotBytes);
    }

    // One thread: every barrier's arrival count (empty: one per consumer warp; a tile slot's:
    // every consumer thread, each of which reads it). e4m3: the transposing warps free V and
    // fill V^T (one arrival per warp), read the tile slots, and the consumers free V^T.
    FMHA_DEVICE void init_barriers() const {
        memory::mbar_init(q_full(), 1);
        memory::mbar_init(q_empty(), Tr::kConsumerWarps);
        for (int st = 0; st < S; ++st) {
            memory::mbar_init(k_full(st), 1);
            memory::mbar_init(v_full(st), 1);
            memory::mbar_init(k_empty(st), Tr::kConsumerWarps);
            memory::mbar_init(v_empty(st), Tr::kFp8 ? Tr::kTransposeWarps : Tr::kConsumerWarps);
            if constexpr (Tr::kFp8) {
                memory::mbar_init(vt_full(st), Tr::kTransposeWarps);
                memory::mbar_init(vt_empty(st), Tr::kConsumerWarps);
            }
        }
        for (int slot = 0; slot < 2; ++slot) {
            memory::mbar_init(tile_full(slot), 1);
            memory::mbar_init(tile_empty(slot), (Tr::kConsumerWarps + Tr::kSlotReaderWarps) * kWarpSize);
        }
        memory::mbar_init(o_free(), Tr::kConsumerWarpgroups);
        memory::mbar_fence_init();
    }
};

}  // namespace ws
}  // namespace fmha
