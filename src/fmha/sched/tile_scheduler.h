// Work tile = (m-block, head, batch). Two ways to hand tiles to CTAs:
//
// static_tile / static_grid (the SM80 family): the grid is (m-blocks, heads, batch) with the
// m-block the fastest-varying index, so the CTAs resident at one time share a head's K and
// V in L2. Causal: m-blocks are handed out in reverse, so each head's heaviest blocks (the
// most keys under the diagonal) start first and the light ones fill the tail of the wave.
//
// tile_at (the ws family, 1-D static grid or persistent CTAs pulling linear tile indices
// from a counter): tile t of m_blocks * heads * batch. Ascending: the m-block varies
// fastest (L2 sharing, as above). Heaviest first (causal): the (head, batch) pairs are cut
// into sections of `section` pairs whose K and V fit in L2 together (l2_section); within a
// section every pair's last m-block comes first, then every pair's second last, and so on.
// The longest tiles of a section go first, so its short ones even out the load, while the
// CTAs running at one time read the K/V of one section's heads, from L2. section ==
// heads * batch orders the whole launch heaviest first (and streams every head's K/V from
// memory at once: measured 10 % slower at s = 2k); section == 1 is static_tile's order.
#pragma once

#include <cstdint>

#include "fmha/utils.h"

namespace fmha {
namespace sched {

struct Tile {
    int m_block;
    int head;
    int batch;
};

template <bool kHeaviestFirst>
FMHA_DEVICE Tile static_tile() {
    const int m = kHeaviestFirst ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    return Tile{m, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
}

// K/V bytes a section may hold in L2 (50 MB on H100 / H200; the rest is Q, O and churn).
constexpr int64_t kL2SectionBytes = int64_t(32) << 20;

// (head, batch) pairs per heaviest-first section: as many as fit their K and V
// (kv_bytes_per_head each) in kL2SectionBytes, at least 1, at most hb_count.
FMHA_HOST_DEVICE int l2_section(int64_t kv_bytes_per_head, int hb_count) {
    const int64_t fit = kv_bytes_per_head > 0 ? kL2SectionBytes / kv_bytes_per_head : hb_count;
    return static_cast<int>(fit < 1 ? 1 : (fit > hb_count ? hb_count : fit));
}

FMHA_HOST_DEVICE Tile tile_at(int t, int m_blocks, int heads, int batch, bool heaviest_first, int section = 1) {
    if (heaviest_first) {
        const int hb_count = heads * batch;
        const int per_section = section * m_blocks;
        const int first_hb = t / per_section * section;
        const int r = t - first_hb * m_blocks;                  // index inside the section
        const int width = min_int(section, hb_count - first_hb);  // the last one may be narrower
        const int hb = first_hb + r % width;
        return Tile{m_blocks - 1 - r / width, hb % heads, hb / heads};
    }
    const int hb = t / m_blocks;
    return Tile{t % m_blocks, hb % heads, hb / heads};
}

inline dim3 static_grid(int m_blocks, int heads, int batch) {
    return dim3(static_cast<unsigned>(m_blocks), static_cast<unsigned>(heads), static_cast<unsigned>(batch));
}

}  // namespace sched
}  // namespace fmha
