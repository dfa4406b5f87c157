// src/fmha/mma/mma_sm80.h: one m16n8k16 mma.sync and one ldmatrix.x4 (plain and .trans) per
// test, with every register filled and read back through the lane layouts the header's
// comment documents. Inputs are small integers, so products and sums are exact and each
// result is compared bit for bit: a swapped register or a wrong lane mapping cannot hide.
#include <cstdint>
#include <string>
#include <vector>

#include "fmha/mma/mma_sm80.h"
#include "unit_test.h"

namespace {

constexpr int kM = 16, kN = 8, kK = 16;

// Two 16-bit elements as one register, the first in the low half (lower column or k).
template <typename Element>
__device__ uint32_t pack2(Element lo, Element hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// Loads A [16, 16] (row-major), B [16 k, 8 n] (row-major in k), C [16, 8] into lane l's
// fragments (g = l / 4, q = l % 4) exactly as mma_sm80.h documents them.
template <typename Element>
__device__ void load_ab(const Element* a, const Element* b, uint32_t (&fa)[4], uint32_t (&fb)[2]) {
    const int g = threadIdx.x / 4, q = threadIdx.x % 4;
    const auto at = [&](int r, int c) { return pack2(a[r * kK + c], a[r * kK + c + 1]); };
    fa[0] = at(g, 2 * q);
    fa[1] = at(g + 8, 2 * q);
    fa[2] = at(g, 8 + 2 * q);
    fa[3] = at(g + 8, 8 + 2 * q);
    fb[0] = pack2(b[(2 * q) * kN + g], b[(2 * q + 1) * kN + g]);
    fb[1] = pack2(b[(8 + 2 * q) * kN + g], b[(9 + 2 * q) * kN + g]);
}

// c: [16, 8] f32 in and out, D = A * B + C.
template <typename Element>
__global__ void mma_f32_kernel(const Element* a, const Element* b, float* c) {
    const int g = threadIdx.x / 4, q = threadIdx.x % 4;
    uint32_t fa[4], fb[2];
    load_ab(a, b, fa, fb);
    float d[4] = {c[g * kN + 2 * q], c[g * kN + 2 * q + 1], c[(g + 8) * kN + 2 * q], c[(g + 8) * kN + 2 * q + 1]};
    fmha::mma::mma_16816<Element>(d, fa, fb);
    c[g * kN + 2 * q] = d[0];
    c[g * kN + 2 * q + 1] = d[1];
    c[(g + 8) * kN + 2 * q] = d[2];
    c[(g + 8) * kN + 2 * q + 1] = d[3];
}

// c: [16, 8] f16 in and out, D = A * B + C accumulated in f16.
__global__ void mma_f16acc_kernel(const __half* a, const __half* b, __half* c) {
    const int g = threadIdx.x / 4, q = threadIdx.x % 4;
    uint32_t fa[4], fb[2];
    load_ab(a, b, fa, fb);
    uint32_t d[2] = {pack2(c[g * kN + 2 * q], c[g * kN + 2 * q + 1]),
                     pack2(c[(g + 8) * kN + 2 * q], c[(g + 8) * kN + 2 * q + 1])};
    fmha::mma::mma_16816_f16acc(d, fa, fb);
    memcpy(&c[g * kN + 2 * q], &d[0], 4);
    memcpy(&c[(g + 8) * kN + 2 * q], &d[1], 4);
}

struct MmaInputs {
    std::vector<float> a, b, c;  // [16, 16], [16, 8], [16, 8]: integers
    std::vector<double> want;    // A * B + C
};

MmaInputs mma_inputs(uint32_t seed) {
    MmaInputs in{unit::random_ints(kM * kK, -4, 4, seed), unit::random_ints(kK * kN, -4, 4, seed + 1),
                 unit::random_ints(kM * kN, -8, 8, seed + 2), {}};
    in.want = unit::matmul(in.a, in.b, kM, kN, kK);
    for (int i = 0; i < kM * kN; ++i) in.want[i] += in.c[i];
    return in;
}

template <typename Element>
void run_mma_f32() {
    const MmaInputs in = mma_inputs(3);
    unit::DeviceBuffer<Element> a, b;
    unit::DeviceBuffer<float> c;
    CUDA_ASSERT(a.upload(unit::to_elements<Element>(in.a)));
    CUDA_ASSERT(b.upload(unit::to_elements<Element>(in.b)));
    CUDA_ASSERT(c.upload(in.c));
    mma_f32_kernel<Element><<<1, 32>>>(a.get(), b.get(), c.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<float> got;
    CUDA_ASSERT(c.download(&got));
    for (int i = 0; i < kM * kN; ++i) EXPECT_EQ(got[i], in.want[i]) << "row " << i / kN << " column " << i % kN;
}

using MmaSm80 = unit::DeviceTest;

TEST_F(MmaSm80, Fp16InputsF32AccumulatorMatchTheMatrixProduct) { run_mma_f32<__half>(); }

TEST_F(MmaSm80, Bf16InputsF32AccumulatorMatchTheMatrixProduct) { run_mma_f32<__nv_bfloat16>(); }

TEST_F(MmaSm80, Fp16InputsF16AccumulatorMatchTheMatrixProduct) {
    const MmaInputs in = mma_inputs(5);
    unit::DeviceBuffer<__half> a, b, c;
    CUDA_ASSERT(a.upload(unit::to_elements<__half>(in.a)));
    CUDA_ASSERT(b.upload(unit::to_elements<__half>(in.b)));
    CUDA_ASSERT(c.upload(unit::to_elements<__half>(in.c)));
    mma_f16acc_kernel<<<1, 32>>>(a.get(), b.get(), c.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<__half> got;
    CUDA_ASSERT(c.download(&got));
    for (int i = 0; i < kM * kN; ++i) {
        EXPECT_EQ(unit::to_float(got[i]), in.want[i]) << "row " << i / kN << " column " << i % kN;
    }
}

// ---- ldmatrix.x4 ----------------------------------------------------------------------------

// Four 8x8 matrices of 16-bit codes in shared memory, matrix i in rows 8i..8i+7 of a
// [32, 8] row-major tile (one 16-byte row each); lane l gives the address of row l, i.e.
// row l % 8 of matrix l / 8. out[l][i] = r[i] of lane l.
template <bool kTrans>
__global__ void ldmatrix_kernel(const uint16_t* tile, uint32_t* out) {
    __shared__ __align__(16) uint16_t smem[32 * 8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 32 * 8; i += 32) smem[i] = tile[i];
    __syncwarp();
    uint32_t r[4];
    const uint32_t addr = fmha::smem_u32(&smem[lane * 8]);
    if (kTrans) {
        fmha::mma::ldmatrix_x4_trans(r, addr);
    } else {
        fmha::mma::ldmatrix_x4(r, addr);
    }
    for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

template <bool kTrans>
void run_ldmatrix() {
    std::vector<uint16_t> tile(32 * 8);
    for (int i = 0; i < 32 * 8; ++i) tile[i] = static_cast<uint16_t>(0x1000 + i);  // code = position
    unit::DeviceBuffer<uint16_t> d_tile;
    unit::DeviceBuffer<uint32_t> out;
    CUDA_ASSERT(d_tile.upload(tile));
    CUDA_ASSERT(out.alloc(32 * 4));
    ldmatrix_kernel<kTrans><<<1, 32>>>(d_tile.get(), out.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<uint32_t> got;
    CUDA_ASSERT(out.download(&got));
    const auto element = [&](int m, int row, int col) { return tile[(m * 8 + row) * 8 + col]; };
    for (int lane = 0; lane < 32; ++lane) {
        for (int m = 0; m < 4; ++m) {
            // Plain: (row l/4, columns 2(l%4), +1). Trans: (rows 2(l%4), +1, column l/4).
            const int r0 = kTrans ? 2 * (lane % 4) : lane / 4;
            const int c0 = kTrans ? lane / 4 : 2 * (lane % 4);
            const uint16_t lo = element(m, r0, c0);
            const uint16_t hi = kTrans ? element(m, r0 + 1, c0) : element(m, r0, c0 + 1);
            const uint32_t reg = got[lane * 4 + m];
            EXPECT_EQ(reg & 0xffffu, lo) << "lane " << lane << " r[" << m << "] low half";
            EXPECT_EQ(reg >> 16, hi) << "lane " << lane << " r[" << m << "] high half";
        }
    }
}

using Ldmatrix = unit::DeviceTest;

TEST_F(Ldmatrix, X4GivesEachLaneItsRowPairOfEveryMatrix) { run_ldmatrix<false>(); }

TEST_F(Ldmatrix, X4TransGivesEachLaneItsColumnPairOfEveryMatrix) { run_ldmatrix<true>(); }

}  // namespace
