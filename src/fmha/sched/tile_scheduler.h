// Block index -> work tile. The grid is (m-blocks, heads, batch) with the m-block the
// fastest-varying index, so the CTAs resident at one time share a head's K and V in L2.
// Causal: m-blocks are handed out in reverse, so each head's heaviest blocks (the most
// keys under the diagonal) start first and the light ones fill the tail of the wave.
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

inline dim3 static_grid(int m_blocks, int heads, int batch) {
    return dim3(static_cast<unsigned>(m_blocks), static_cast<unsigned>(heads), static_cast<unsigned>(batch));
}

}  // namespace sched
}  // namespace fmha
