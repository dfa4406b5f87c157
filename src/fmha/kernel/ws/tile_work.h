// A tile's bounds (TileWork), computed from the schedule, and the persistent CTA's two-slot
// ring through which the producer hands them to the consumers.
#pragma once

#include "fmha/mask/mask.h"
#include "fmha/memory/mbarrier_sm90.h"
#include "fmha/sched/tile_scheduler.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace ws {

// The launch's tiles, m_blocks x heads x batch, and the causal order's sections: heaviest
// first inside sections of heads whose K and V share L2 (sched::l2_section).
struct Schedule {
    int m_blocks, num_tiles, section;
};

// s_q_max: p.s_q_max, or a copy of it the compiler cannot see through (producer.h).
template <class Tr>
FMHA_DEVICE Schedule schedule(const Params& p, int s_q_max) {
    Schedule s;
    s.m_blocks = ceil_div(s_q_max, Tr::kBlockM);
    s.num_tiles = s.m_blocks * p.h * p.b;
    s.section = sched::l2_section(
        int64_t(p.s_kv_max) * (Tr::kHeadDim + Tr::kHeadDimV) * sizeof(typename Tr::Element), p.h * p.b);
    return s;
}

template <class Tr>
FMHA_DEVICE Schedule schedule(const Params& p) {
    return schedule<Tr>(p, p.s_q_max);
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
    w.q_len = seq_q_len(p, tile.batch);
    w.active = w.m0 < w.q_len;
    w.kv_len = seq_kv_len(p, tile.batch);
    w.q_off = seq_q_offset(p, tile.batch);
    w.kv_off = seq_kv_offset(p, tile.batch);
    // Blocks no row of the tile sees (above the diagonal, outside a window) are skipped.
    const mask::Blocks blk =
        w.active ? mask::blocks(mask::Rows<kMask>::make(p, w.q_len, w.kv_len), w.m0,
                                w.m0 + min_int(w.q_len - w.m0, Tr::kBlockM) - 1, Tr::kBlockN)
                 : mask::Blocks{0, 0, 0, 0};
    w.blk_end = blk.end;
    w.n_blocks = blk.count();
    return w;
}

// What the producer leaves in the slot after the last tile: n_blocks = -1 tells the
// transposing warps, which read no tile index (next_tile_blocks), that the work is done.
constexpr TileWork kNoTileWork{0, 0, 0, 0, 0, 0, 0, 0, 0, -1, false};

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

// The slot's n_blocks alone (store_tile_slot's third vector, third word).
FMHA_DEVICE int load_tile_slot_blocks(uint32_t slot) {
    int n_blocks;
    asm volatile("ld.shared.b32 %0, [%1 + 40];\n" : "=r"(n_blocks) : "r"(slot) : "memory");
    return n_blocks;
}

// A consumer thread's next tile, its tile_iter-th: the index, sched.num_tiles when there is
// none left, and its bounds in w. Persistent: from the producer's slot ring; every thread that
// read the slot arrives (not one per warp after __syncwarp), so the producer's next write is
// ordered after each read by the mbarrier itself. Static grid: blockIdx.x's one tile.
template <class Tr, mask::Kind kMask, class SmemT>
FMHA_DEVICE int next_tile(const Params& p, const SmemT& smem, const Schedule& sched, int tile_iter, TileWork& w) {
    if constexpr (Tr::kPersistent) {
        const int slot = tile_iter & 1;
        memory::mbar_wait(smem.tile_full(slot), (tile_iter >> 1) & 1);
        const int t = load_tile_slot(smem.tile_slot(slot), w);
        memory::mbar_arrive(smem.tile_empty(slot));
        return t;
    } else {
        const int t = tile_iter == 0 ? int(blockIdx.x) : sched.num_tiles;
        if (t < sched.num_tiles) w = tile_work<Tr, kMask>(p, t, sched.m_blocks, sched.section);
        return t;
    }
}

// A transposing warp thread's next tile (e4m3): only its number of key blocks, -1 when there
// is none left. It keeps no Schedule: the 24-register producer of a kLeanProducer tile spilled
// the tile count (bench/NOTES.md §86).
template <class Tr, mask::Kind kMask, class SmemT>
FMHA_DEVICE int next_tile_blocks(const Params& p, const SmemT& smem, int tile_iter) {
    if constexpr (Tr::kPersistent) {  // (the slot's wait and arrival as next_tile's)
        const int slot = tile_iter & 1;
        memory::mbar_wait(smem.tile_full(slot), (tile_iter >> 1) & 1);
        const int n_blocks = load_tile_slot_blocks(smem.tile_slot(slot));
        memory::mbar_arrive(smem.tile_empty(slot));
        return n_blocks;
    } else {
        if (tile_iter > 0) return -1;
        const Schedule sched = schedule<Tr>(p, opaque_int(p.s_q_max));
        return tile_work<Tr, kMask>(p, int(blockIdx.x), sched.m_blocks, sched.section).n_blocks;
    }
}

}  // namespace ws
}  // namespace fmha
