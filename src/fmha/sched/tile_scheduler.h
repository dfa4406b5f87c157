// Work tile = (m-block, head, batch). Two ways to hand tiles to CTAs:
//
// static_tile / static_grid (the SM80 family): the grid is (m-blocks, heads, batch) with the
// m-block the fastest-varying index, so the CTAs resident at one time share a head's K and
// V in L2. Causal: m-blocks are handed out in reverse, so each head's heaviest blocks (the
// most keys under the diagonal) start first and the light ones fill the tail of the wave.
//
// tile_at (the SM90 family, 1-D static grid or persistent CTAs pulling linear tile indices
// from a counter): tile t of m_blocks * heads * batch. Ascending: the m-block varies
// fastest (L2 sharing, as above). Heaviest first (causal): every head's last m-block, then
// every head's second last, ...: over the whole launch the longest tiles go first, so the
// short ones even out the end of a persistent run.
#pragma once

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

FMHA_HOST_DEVICE Tile tile_at(int t, int m_blocks, int heads, int batch, bool heaviest_first) {
    if (heaviest_first) {
        const int hb_count = heads * batch;
        const int hb = t % hb_count;
        return Tile{m_blocks - 1 - t / hb_count, hb % heads, hb / heads};
    }
    const int hb = t / m_blocks;
    return Tile{t % m_blocks, hb % heads, hb / heads};
}

inline dim3 static_grid(int m_blocks, int heads, int batch) {
    return dim3(static_cast<unsigned>(m_blocks), static_cast<unsigned>(heads), static_cast<unsigned>(batch));
}

}  // namespace sched
}  // namespace fmha
