// The two per-warp products of the attention main loop, on tiles in shared memory:
//   S = Q K^T   (A: Q rows of this warp, B: K rows as columns, f32 accumulate)
//   O += P V    (A: P straight from the S registers, B: V through ldmatrix.trans)
// Every loop is fully unrolled so fragment indices are compile-time (registers, never
// local memory) and the block offsets fold into ldmatrix's immediate.
#pragma once

#include "fmha/memory/smem_layout.h"
#include "fmha/mma/mma_sm80.h"

namespace fmha {
namespace mma {

// Lane -> (row, chunk) inside a 16x16 block for the three ldmatrix.x4 uses.
// A operand (and V via .trans): matrices (rows 0-7, c0) (rows 8-15, c0) (rows 0-7, c1) (rows 8-15, c1)
FMHA_DEVICE int lane_row_a(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
FMHA_DEVICE int lane_chunk_a(int lane) { return lane >> 4; }
// B operand stored n-major (K rows): (n 0-7, c0) (n 0-7, c1) (n 8-15, c0) (n 8-15, c1),
// i.e. r[0..1] is n-tile 0's {b0, b1} and r[2..3] is n-tile 1's.
FMHA_DEVICE int lane_row_b(int lane) { return (lane & 7) + (lane >> 4) * 8; }
FMHA_DEVICE int lane_chunk_b(int lane) { return (lane >> 3) & 1; }

// s[kMmaM][kNTiles] (+)= Q[warp rows, 0:16*kKSlices] * K[0:8*kNTiles, same]^T
template <typename Element, int kMmaM, int kNTiles, int kKSlices, class LayoutQ, class LayoutK>
FMHA_DEVICE void gemm_qk(float (&s)[kMmaM][kNTiles][4], const memory::LdsmAddr<LayoutQ>& q_addr,
                         const memory::LdsmAddr<LayoutK>& k_addr) {
    static_assert(kNTiles % 2 == 0, "K is read 16 keys at a time");
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk) {
        uint32_t a[kMmaM][4];  // [16 rows, 16 of d] per m-tile
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) ldmatrix_x4(a[mi], q_addr(mi * 16, 2 * kk));
        uint32_t b[kNTiles / 2][4];  // [16 keys, 16 of d] per pair of n-tiles
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) ldmatrix_x4(b[np], k_addr(np * 16, 2 * kk));
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
#pragma unroll
            for (int mi = 0; mi < kMmaM; ++mi) {
                const uint32_t b0[2] = {b[np][0], b[np][1]};
                const uint32_t b1[2] = {b[np][2], b[np][3]};
                mma_16816<Element>(s[mi][2 * np], a[mi], b0);
                mma_16816<Element>(s[mi][2 * np + 1], a[mi], b1);
            }
        }
    }
}

// One key slice's A operand from the S accumulators of its two n-tiles.
template <typename Element>
FMHA_DEVICE void s_slice_to_p(uint32_t (&p)[4], const float (&t0)[4], const float (&t1)[4]) {
    p[0] = ElementTraits<Element>::pack(t0[0], t0[1]);
    p[1] = ElementTraits<Element>::pack(t0[2], t0[3]);
    p[2] = ElementTraits<Element>::pack(t1[0], t1[1]);
    p[3] = ElementTraits<Element>::pack(t1[2], t1[3]);
}

// The S accumulators of n-tiles (2kk, 2kk+1) as the A operand of key slice kk.
template <typename Element, int kMmaM, int kNTiles>
FMHA_DEVICE void s_to_p(uint32_t (&p)[kMmaM][kNTiles / 2][4], const float (&s)[kMmaM][kNTiles][4]) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int kk = 0; kk < kNTiles / 2; ++kk) s_slice_to_p<Element>(p[mi][kk], s[mi][2 * kk], s[mi][2 * kk + 1]);
    }
}

// o[kMmaM][kNTilesO] += P[warp rows, 0:16*kKSlices] * V[same keys, 0:8*kNTilesO]
// kAccFp16: each 16-column slab of O is accumulated over kF16Slices key slices (32 keys)
// in f16 registers (2 per m-tile and n-tile), then added into the f32 accumulator.
// A partial over a whole 64-key block left near-zero outputs (randn V) ~5 % past fp16's
// epsilon on one element in a million; halving the partial halves its rounding error.
constexpr int kF16Slices = 2;

template <typename Element, bool kAccFp16, int kMmaM, int kKSlices, int kNTilesO, class LayoutV>
FMHA_DEVICE void gemm_pv(float (&o)[kMmaM][kNTilesO][4], const uint32_t (&p)[kMmaM][kKSlices][4],
                         const memory::LdsmAddr<LayoutV>& v_addr) {
    static_assert(kNTilesO % 2 == 0, "V is read 16 columns at a time");
    if constexpr (kAccFp16) {
#pragma unroll
        for (int dp = 0; dp < kNTilesO / 2; ++dp) {
#pragma unroll
            for (int k0 = 0; k0 < kKSlices; k0 += kF16Slices) {
                uint32_t acc[kMmaM][2][2];  // [m-tile][n-tile of the slab][f16x2 rows g, g+8]
#pragma unroll
                for (int mi = 0; mi < kMmaM; ++mi) {
                    acc[mi][0][0] = acc[mi][0][1] = acc[mi][1][0] = acc[mi][1][1] = 0u;
                }
#pragma unroll
                for (int kk = k0; kk < k0 + kF16Slices && kk < kKSlices; ++kk) {
                    uint32_t b[4];  // [16 keys, 16 columns of dv]
                    ldmatrix_x4_trans(b, v_addr(kk * 16, 2 * dp));
                    const uint32_t b0[2] = {b[0], b[1]};
                    const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
                    for (int mi = 0; mi < kMmaM; ++mi) {
                        mma_16816_f16acc(acc[mi][0], p[mi][kk], b0);
                        mma_16816_f16acc(acc[mi][1], p[mi][kk], b1);
                    }
                }
#pragma unroll
                for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const float2 top = unpack_half2(acc[mi][j][0]);
                        const float2 bot = unpack_half2(acc[mi][j][1]);
                        float* c = o[mi][2 * dp + j];
                        c[0] += top.x;
                        c[1] += top.y;
                        c[2] += bot.x;
                        c[3] += bot.y;
                    }
                }
            }
        }
    } else {
#pragma unroll
        for (int kk = 0; kk < kKSlices; ++kk) {
#pragma unroll
            for (int dp = 0; dp < kNTilesO / 2; ++dp) {
                uint32_t b[4];  // [16 keys, 16 columns of dv]
                ldmatrix_x4_trans(b, v_addr(kk * 16, 2 * dp));
                const uint32_t b0[2] = {b[0], b[1]};
                const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
                for (int mi = 0; mi < kMmaM; ++mi) {
                    mma_16816<Element>(o[mi][2 * dp], p[mi][kk], b0);
                    mma_16816<Element>(o[mi][2 * dp + 1], p[mi][kk], b1);
                }
            }
        }
    }
}

}  // namespace mma
}  // namespace fmha
