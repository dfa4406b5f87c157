// The m64nN wgmma accumulator as the unit tests read it back (mma/wgmma_sm90.h: warp w of the
// warpgroup holds rows 16w .. 16w + 15 in the mma.sync C layout), for the SM90 tests.
#pragma once

#include "fmha/mma/wgmma_sm90.h"

namespace unit {

// Element e of accumulator n8 tile nt of this thread: row and column of a [64, N] result.
__device__ inline int acc_row(int e) { return (threadIdx.x / 32) * 16 + (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ inline int acc_col(int nt, int e) { return nt * 8 + 2 * (threadIdx.x % 4) + e % 2; }

// Waits for the committed wgmma group that writes acc, then stores acc row-major into out [64, kN].
template <int kN>
__device__ void wait_and_store(float (&acc)[1][kN / 8][4], float* out) {
    fmha::mma::wgmma_commit();
    fmha::mma::wgmma_wait<0>();
    fmha::mma::fence_operands(acc);
    for (int nt = 0; nt < kN / 8; ++nt)
        for (int e = 0; e < 4; ++e) out[acc_row(e) * kN + acc_col(nt, e)] = acc[0][nt][e];
}

}  // namespace unit
