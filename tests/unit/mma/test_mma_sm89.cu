// src/fmha/mma/mma_sm89.h on an sm_89+ GPU (one warp): S = Q K^T with e4m3 fragments read
// from row-major Q and K-major K as the PTX ISA lays them out, and O = P V with P converted
// from the f32 accumulator layout by fp8_sm90.h's p_to_e4m3 (the same A layout) and V's
// B fragment in key_of_slot order. Dyadic inputs: every product and sum is exact, so the
// results are compared bit for bit with the CPU.
#include <cuda_fp8.h>

#include <vector>

#include "fmha/mma/fp8_sm90.h"
#include "fmha/mma/mma_sm89.h"
#include "unit_test.h"

namespace {

using fmha::mma::key_of_slot;

// Four e4m3 bytes of row `row` starting at column `col` of a row-major [*, cols] array.
__device__ uint32_t word(const uint8_t* m, int cols, int row, int col) {
    return uint32_t(m[row * cols + col]) | uint32_t(m[row * cols + col + 1]) << 8 |
           uint32_t(m[row * cols + col + 2]) << 16 | uint32_t(m[row * cols + col + 3]) << 24;
}

// q [16, 32], k [8, 32] e4m3 row-major; s [16, 8] = Q K^T. p [16, 32] f32 (exact in e4m3),
// vt [8, 32] e4m3: row n holds V[key_of_slot(slot)][n] at slot; o [16, 8] = P V.
__global__ void qmma_kernel(const uint8_t* q, const uint8_t* k, float* s, const float* p, const uint8_t* vt,
                            float* o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const uint32_t a[4] = {word(q, 32, g, 4 * t), word(q, 32, g + 8, 4 * t), word(q, 32, g, 16 + 4 * t),
                           word(q, 32, g + 8, 16 + 4 * t)};
    const uint32_t b[2] = {word(k, 32, g, 4 * t), word(k, 32, g, 16 + 4 * t)};
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    fmha::mma::mma_e4m3_16832(acc, a, b);
    for (int e = 0; e < 4; ++e) s[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = acc[e];

    float acc_s[1][4][4];  // P as S's accumulator: 4 n8 tiles of 8 keys
    for (int nt = 0; nt < 4; ++nt)
        for (int e = 0; e < 4; ++e) acc_s[0][nt][e] = p[(g + 8 * (e / 2)) * 32 + nt * 8 + 2 * t + e % 2];
    uint32_t frag[1][4];
    fmha::mma::p_to_e4m3<4>(frag, acc_s);
    const uint32_t bv[2] = {word(vt, 32, g, 4 * t), word(vt, 32, g, 16 + 4 * t)};
    float acc_o[4] = {0.f, 0.f, 0.f, 0.f};
    fmha::mma::mma_e4m3_16832(acc_o, frag[0], bv);
    for (int e = 0; e < 4; ++e) o[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = acc_o[e];
#endif
}

using QmmaE4m3 = unit::ArchTest<89>;  // mma.sync e4m3

TEST_F(QmmaE4m3, QKtAndPV) {
    const std::vector<float> q = unit::dyadic(16 * 32, true, 21), k = unit::dyadic(8 * 32, true, 22);
    const std::vector<float> p = unit::dyadic(16 * 32, false, 23), v = unit::dyadic(32 * 8, true, 24);
    std::vector<float> vt(8 * 32);  // [d, slot]: V's key for each slot
    for (int n = 0; n < 8; ++n)
        for (int slot = 0; slot < 32; ++slot) vt[n * 32 + slot] = v[key_of_slot(slot) * 8 + n];
    unit::DeviceBuffer<uint8_t> dq, dk, dvt;
    unit::DeviceBuffer<float> dp, ds, dout;
    CUDA_ASSERT(dq.upload(unit::to_e4m3(q)));
    CUDA_ASSERT(dk.upload(unit::to_e4m3(k)));
    CUDA_ASSERT(dvt.upload(unit::to_e4m3(vt)));
    CUDA_ASSERT(dp.upload(p));
    CUDA_ASSERT(ds.alloc(16 * 8, 0xff));
    CUDA_ASSERT(dout.alloc(16 * 8, 0xff));
    qmma_kernel<<<1, 32>>>(dq.get(), dk.get(), ds.get(), dp.get(), dvt.get(), dout.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<float> s, o;
    CUDA_ASSERT(ds.download(&s));
    CUDA_ASSERT(dout.download(&o));
    for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n) {
            float want_s = 0.f, want_o = 0.f;
            for (int c = 0; c < 32; ++c) want_s += q[r * 32 + c] * k[n * 32 + c];
            for (int j = 0; j < 32; ++j) want_o += p[r * 32 + j] * v[j * 8 + n];
            ASSERT_EQ(s[r * 8 + n], want_s) << "S row " << r << ", key " << n;
            ASSERT_EQ(o[r * 8 + n], want_o) << "O row " << r << ", column " << n;
        }
}

}  // namespace
