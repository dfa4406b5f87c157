// ws family: where a CTA's buffers and mbarriers sit in its dynamic shared memory.
//
//   Q [kBlockM, d] | K ring S x [kBlockN, d] | V ring S x [kBlockN, dv] | O [kBlockM, dv]
//   (kOBeside only; kOInV stages O over the V ring) | mbarriers | two tile slots
//
// Q starts 1024-byte aligned (one SW128 swizzle period) and every tile before the barriers
// is whole 1024-byte periods: 64-column TMA panels of 128-byte rows.
#pragma once

#include <cstdint>

#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/utils.h"

namespace fmha {
namespace ws {

template <class Tr>
struct Smem {
    static constexpr int S = Tr::kStages;
    uint32_t q;    // [kBlockM, d]
    uint32_t k;    // S x [kBlockN, d]
    uint32_t v;    // S x [kBlockN, dv]
    uint32_t o;    // [kBlockM, dv] staging of O (Traits::kStoreOTma): after the V ring or over it
    uint32_t bar;  // Traits::kNumBarriers mbarriers, then the tile slots

    FMHA_DEVICE explicit Smem(char* raw) {
        q = (smem_u32(raw) + Tr::kSmemAlign - 1) & ~uint32_t(Tr::kSmemAlign - 1);
        k = q + Tr::kSmemQ;
        v = k + S * Tr::kSmemK;
        o = Tr::kOInV ? v : v + S * Tr::kSmemV;
        bar = v + S * Tr::kSmemV + (Tr::kOBeside ? Tr::kSmemO : 0);
    }

    // Full: the TMA bytes landed (one producer arrival + tx); empty: one arrival per consumer warp.
    FMHA_DEVICE uint32_t q_full() const { return bar; }
    FMHA_DEVICE uint32_t q_empty() const { return bar + 8u; }
    FMHA_DEVICE uint32_t k_full(int st) const { return bar + 8u * (2 + st); }
    FMHA_DEVICE uint32_t k_empty(int st) const { return bar + 8u * (2 + S + st); }
    FMHA_DEVICE uint32_t v_full(int st) const { return bar + 8u * (2 + 2 * S + st); }
    FMHA_DEVICE uint32_t v_empty(int st) const { return bar + 8u * (2 + 3 * S + st); }
    // Persistent tiles: slot written (producer), slot read (every consumer thread).
    FMHA_DEVICE uint32_t tile_full(int slot) const { return bar + 8u * (2 + 4 * S + slot); }
    FMHA_DEVICE uint32_t tile_empty(int slot) const { return bar + 8u * (2 + 4 * S + 2 + slot); }
    // O staged over the V ring (Traits::kOInVFor): completes once per tile with key blocks, when
    // every consumer warpgroup is done with the ring (its O stored from there and read, or
    // stored from registers).
    FMHA_DEVICE uint32_t o_free() const { return bar + 8u * (Tr::kNumBarriers - 1); }  // the last barrier
    FMHA_DEVICE uint32_t tile_slot(int slot) const {
        return bar + uint32_t(Tr::kTileSlotsOffset + slot * Tr::kTileSlotBytes);
    }

    // By one thread, before the CTA's __syncthreads.
    FMHA_DEVICE void init_barriers() const {
        memory::mbar_init(q_full(), 1);
        memory::mbar_init(q_empty(), Tr::kConsumerWarps);
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
        memory::mbar_init(o_free(), Tr::kConsumerWarpgroups);
        memory::mbar_fence_init();
    }
};

}  // namespace ws
}  // namespace fmha
