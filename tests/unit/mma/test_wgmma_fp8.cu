// src/fmha/mma/wgmma_sm90.h's e4m3 forms and src/fmha/mma/fp8_sm90.h on an SM90 GPU (one
// warpgroup): S = Q K^T from SW128 shared tiles (QGMMA SS), V made K-major by
// transpose_v_e4m3 (checked byte for byte against key_of_slot), and O = P V with P converted
// from the f32 accumulator layout by p_to_e4m3 (QGMMA RS). Inputs are small dyadic values,
// exact in e4m3 and in every product and sum, so results are compared bit for bit. Also, on
// the host, that key_of_slot permutes each 16 keys.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "fmha/mma/fp8_sm90.h"
#include "fmha/mma/wgmma_sm90.h"
#include "fmha/memory/tma_sm90.h"
#include "unit_test.h"
#include "wgmma_fragments.h"

namespace {

using fmha::mma::key_of_slot;
using fmha::mma::sw128_offset;
using unit::acc_col;
using unit::acc_row;
using unit::wait_and_store;

constexpr int kRows = 64;   // one warpgroup's wgmma M
constexpr int kD = 128;     // head size: one 128-byte panel of e4m3
constexpr int kKeys = 128;  // keys of S, and of P V

__device__ void fill_sw128(uint8_t* smem, const uint8_t* src, int rows, int cols) {
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) smem[sw128_offset(i / cols, i % cols, rows)] = src[i];
}

// q [64, kPad], k [128, kPad] e4m3 row-major (kPad = kDim rounded up to whole 128-byte
// panels); s [64, 128] = Q K^T over the first kDim columns (kDim / 32 chained QGMMA k-steps).
template <int kDim, int kPad = (kDim + 127) / 128 * 128>
__global__ void qk_kernel(const uint8_t* q, const uint8_t* k, float* s) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(1024) uint8_t smem[kRows * kPad + kKeys * kPad];
    fill_sw128(smem, q, kRows, kPad);
    fill_sw128(smem + kRows * kPad, k, kKeys, kPad);
    fmha::memory::fence_proxy_async_smem();
    __syncthreads();
    const uint64_t desc_q = fmha::mma::make_smem_desc_sw128(fmha::smem_u32(smem), 16, fmha::mma::kSw128AtomBytes);
    const uint64_t desc_k =
        fmha::mma::make_smem_desc_sw128(fmha::smem_u32(smem + kRows * kPad), 16, fmha::mma::kSw128AtomBytes);
    float acc[1][kKeys / 8][4];
    fmha::mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDim / 32; ++kk) {
        // k-step kk: panel kk / 4 (rows x 128 bytes each), 32 bytes further per step inside it.
        const int panel = kk * 32 / fmha::mma::kE4m3PanelCols, at = kk * 32 % fmha::mma::kE4m3PanelCols;
        fmha::mma::wgmma_ss_e4m3<kKeys>(fmha::mma::flat(acc), desc_q + ((panel * kRows * 128 + at) >> 4),
                                        desc_k + ((panel * kKeys * 128 + at) >> 4), kk > 0);
    }
    wait_and_store<kKeys>(acc, s);
#endif
}

// s = qk_kernel<kDim>(q8, k8) on the device ([64, kPad] and [128, kPad] e4m3 bytes in, [64, 128] out).
template <int kDim>
void run_qk(const std::vector<uint8_t>& q8, const std::vector<uint8_t>& k8, std::vector<float>* s) {
    unit::DeviceBuffer<uint8_t> dq, dk;
    unit::DeviceBuffer<float> ds;
    CUDA_ASSERT(dq.upload(q8));
    CUDA_ASSERT(dk.upload(k8));
    CUDA_ASSERT(ds.alloc(kRows * kKeys, 0xff));
    qk_kernel<kDim><<<1, 128>>>(dq.get(), dk.get(), ds.get());
    CUDA_ASSERT_LAUNCH();
    CUDA_ASSERT(ds.download(s));
}

// p [64, 128] f32 (values exact in e4m3), v [128 keys, 128] e4m3; o [64, 128] = P V, and vt
// [128, 128] V^T as transpose_v_e4m3 left it, read back in logical (row, slot) order.
__global__ void pv_kernel(const float* p, const uint8_t* v, float* o, uint8_t* vt_out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(1024) uint8_t smem[2 * kKeys * kD];
    uint8_t* raw = smem;
    uint8_t* vt = smem + kKeys * kD;
    fill_sw128(raw, v, kKeys, kD);
    __syncthreads();
    fmha::mma::transpose_v_e4m3<kKeys, kD, 4>(fmha::smem_u32(raw), fmha::smem_u32(vt), threadIdx.x / 32);
    fmha::memory::fence_proxy_async_smem();
    __syncthreads();
    for (int i = threadIdx.x; i < kD * kKeys; i += blockDim.x) vt_out[i] = vt[sw128_offset(i / kKeys, i % kKeys, kD)];

    float acc_s[1][kKeys / 8][4];
    for (int nt = 0; nt < kKeys / 8; ++nt)
        for (int e = 0; e < 4; ++e) acc_s[0][nt][e] = p[acc_row(e) * kKeys + acc_col(nt, e)];
    uint32_t frag[kKeys / 32][4];
    fmha::mma::p_to_e4m3<kKeys / 8>(frag, acc_s);
    const uint64_t desc_v = fmha::mma::make_smem_desc_sw128(fmha::smem_u32(vt), 16, fmha::mma::kSw128AtomBytes);
    float acc_o[1][kD / 8][4];
    fmha::mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 32; ++kk)
        fmha::mma::wgmma_rs_e4m3<kD>(fmha::mma::flat(acc_o), frag[kk], desc_v + (kk * 32 >> 4), kk > 0);
    wait_and_store<kD>(acc_o, o);
#endif
}

// v [kKeysT, kDvT] e4m3 row-major into raw V (SW128 panels of 128 columns, as TMA lands it);
// vt_out [kDvT, kKeysT] = V^T as transpose_v_e4m3 left it over kWarps warps (the ws family's
// producer uses 3, or 4 where its TMA warp transposes too), read back in logical (row, slot) order.
// Raw V's bytes: rows of whole 128-byte panels (dv = 64 fills half of each, as in the kernel).
template <int kKeysT, int kDvT>
constexpr int kRawBytes = kKeysT * ((kDvT + 127) / 128 * 128);

template <int kKeysT, int kDvT, int kWarps>
__global__ void transpose_kernel(const uint8_t* v, uint8_t* vt_out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) uint8_t dyn[];
    uint8_t* raw = dyn;
    uint8_t* vt = dyn + kRawBytes<kKeysT, kDvT>;
    fill_sw128(raw, v, kKeysT, kDvT);
    __syncthreads();
    if (int(threadIdx.x) / 32 < kWarps)
        fmha::mma::transpose_v_e4m3<kKeysT, kDvT, kWarps>(fmha::smem_u32(raw), fmha::smem_u32(vt), threadIdx.x / 32);
    __syncthreads();
    for (int i = threadIdx.x; i < kDvT * kKeysT; i += blockDim.x) vt_out[i] = vt[sw128_offset(i / kKeysT, i % kKeysT, kDvT)];
#endif
}

template <int kKeysT, int kDvT, int kWarps>
void check_transpose() {
    const std::vector<uint8_t> v8 = unit::to_e4m3(unit::dyadic(kKeysT * kDvT, true, 4));
    const int bytes = kRawBytes<kKeysT, kDvT> + kDvT * (kKeysT + 127) / 128 * 128;
    CUDA_ASSERT(cudaFuncSetAttribute(transpose_kernel<kKeysT, kDvT, kWarps>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     bytes));
    unit::DeviceBuffer<uint8_t> dv, dvt;
    CUDA_ASSERT(dv.upload(v8));
    CUDA_ASSERT(dvt.alloc(kDvT * kKeysT));
    transpose_kernel<kKeysT, kDvT, kWarps><<<1, 128, bytes>>>(dv.get(), dvt.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<uint8_t> vt;
    CUDA_ASSERT(dvt.download(&vt));
    for (int d = 0; d < kDvT; ++d)
        for (int s = 0; s < kKeysT; ++s)
            ASSERT_EQ(vt[d * kKeysT + s], v8[key_of_slot(s) * kDvT + d])
                << kKeysT << " keys, dv " << kDvT << ", " << kWarps << " warps: V^T row " << d << ", slot " << s;
}

using WgmmaFp8 = unit::ArchTest<90, 90>;  // QGMMA: sm_90a

TEST(KeyOfSlot, PermutesEverySixteenKeys) {
    for (int base = 0; base < 64; base += 16) {
        std::vector<int> seen(16, 0);
        for (int s = base; s < base + 16; ++s) {
            const int key = key_of_slot(s);
            ASSERT_GE(key, base);
            ASSERT_LT(key, base + 16);
            ++seen[key - base];
        }
        for (int n : seen) EXPECT_EQ(n, 1);
    }
    EXPECT_EQ(key_of_slot(0), 0);
    EXPECT_EQ(key_of_slot(2), 8);   // thread 0's second n8 tile
    EXPECT_EQ(key_of_slot(5), 3);   // thread 1: keys 2, 3, 10, 11
    EXPECT_EQ(key_of_slot(31), 31);
}

TEST_F(WgmmaFp8, QKt) {
    const std::vector<float> q = unit::dyadic(kRows * kD, true, 1), k = unit::dyadic(kKeys * kD, true, 2);
    std::vector<float> s;
    ASSERT_NO_FATAL_FAILURE(run_qk<kD>(unit::to_e4m3(q), unit::to_e4m3(k), &s));
    for (int r = 0; r < kRows; ++r)
        for (int j = 0; j < kKeys; ++j) {
            float want = 0.f;
            for (int c = 0; c < kD; ++c) want += q[r * kD + c] * k[j * kD + c];
            ASSERT_EQ(s[r * kKeys + j], want) << "row " << r << ", key " << j;
        }
}

// The QGMMA's sum is not an f32 sum of exact products: Hopper's FP8 tensor cores keep a
// limited number of bits of it. On random normal inputs, plain and with outlier channels (x16
// in every 16th), |S - exact| / sum_c |q_c k_c| stays within kQgmmaSumError, which the
// driver's reference and the oracle allow each score (a P that close to an e4m3 rounding edge
// may round either way). The worst seen, per k-steps, is printed for bench/NOTES.md.
struct SumError {
    double of_sum = 0.0;  // |S - exact| / sum |q_c k_c|
    double of_max = 0.0;  // |S - exact| / max |q_c k_c|
};

template <int kDim, int kPad = (kDim + 127) / 128 * 128>
void measure_sum_error(uint32_t seed, bool outliers, SumError* worst) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> q(kRows * kPad, 0.f), k(kKeys * kPad, 0.f);
    for (std::vector<float>* t : {&q, &k})
        for (size_t i = 0; i < t->size(); ++i)
            if (int(i % kPad) < kDim) (*t)[i] = normal(gen) * (outliers && i % kPad % 16 == 5 ? 16.f : 1.f);
    const std::vector<uint8_t> q8 = unit::to_e4m3(q), k8 = unit::to_e4m3(k);
    std::vector<float> s;
    ASSERT_NO_FATAL_FAILURE(run_qk<kDim>(q8, k8, &s));
    for (int r = 0; r < kRows; ++r)
        for (int j = 0; j < kKeys; ++j) {
            double want = 0.0, size = 0.0, top = 0.0;
            for (int c = 0; c < kDim; ++c) {
                const double prod = unit::from_e4m3(q8[r * kPad + c]) * unit::from_e4m3(k8[j * kPad + c]);
                want += prod, size += std::fabs(prod), top = std::max(top, std::fabs(prod));
            }
            const double err = std::fabs(double(s[r * kKeys + j]) - want);
            ASSERT_TRUE(std::isfinite(s[r * kKeys + j])) << "row " << r << ", key " << j;
            worst->of_sum = std::max(worst->of_sum, err / size);
            worst->of_max = std::max(worst->of_max, err / top);
        }
}

template <int kDim>
void expect_sum_error_bounded() {
    for (bool outliers : {false, true}) {
        SumError worst;
        for (uint32_t seed = 11; seed < 17; ++seed)
            ASSERT_NO_FATAL_FAILURE(measure_sum_error<kDim>(seed, outliers, &worst));
        std::printf("QGMMA k %3d (%d steps)%s: |S - exact| at most %.3g of sum |q k|, %.3g of max |q k|\n", kDim,
                    kDim / 32, outliers ? ", outliers" : "          ", worst.of_sum, worst.of_max);
        EXPECT_LE(worst.of_sum, fmha::mma::kQgmmaSumError) << "k " << kDim << (outliers ? ", outliers" : "");
    }
}

TEST_F(WgmmaFp8, QKtSumErrorIsBounded) {
    expect_sum_error_bounded<32>();
    expect_sum_error_bounded<64>();
    expect_sum_error_bounded<128>();
    expect_sum_error_bounded<256>();
    std::printf("bound (kQgmmaSumError): %.3g\n", fmha::mma::kQgmmaSumError);
}

TEST_F(WgmmaFp8, TransposedVAndPV) {
    const std::vector<float> p = unit::dyadic(kRows * kKeys, false, 3), v = unit::dyadic(kKeys * kD, true, 4);
    const std::vector<uint8_t> v8 = unit::to_e4m3(v);
    unit::DeviceBuffer<float> dp, dout;
    unit::DeviceBuffer<uint8_t> dv, dvt;
    CUDA_ASSERT(dp.upload(p));
    CUDA_ASSERT(dv.upload(v8));
    CUDA_ASSERT(dout.alloc(kRows * kD, 0xff));
    CUDA_ASSERT(dvt.alloc(kD * kKeys));
    pv_kernel<<<1, 128>>>(dp.get(), dv.get(), dout.get(), dvt.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<uint8_t> vt;
    CUDA_ASSERT(dvt.download(&vt));
    for (int d = 0; d < kD; ++d)
        for (int s = 0; s < kKeys; ++s)
            ASSERT_EQ(vt[d * kKeys + s], v8[key_of_slot(s) * kD + d]) << "V^T row " << d << ", slot " << s;
    std::vector<float> o;
    CUDA_ASSERT(dout.download(&o));
    for (int r = 0; r < kRows; ++r)
        for (int c = 0; c < kD; ++c) {
            float want = 0.f;
            for (int j = 0; j < kKeys; ++j) want += p[r * kKeys + j] * v[j * kD + c];
            ASSERT_EQ(o[r * kD + c], want) << "row " << r << ", column " << c;
        }
}

// Every key block and dv the ws family's e4m3 tiles transpose (fp8_tile and the siblings), on
// three and on four transposing warps (Traits::kTransposeWarps): a block of keys past one
// 128-slot panel (192, 256), and dv past one 128-column panel of raw V (256).
template <int kKeysT, int kDvT>
void check_transpose_3_and_4() {
    check_transpose<kKeysT, kDvT, 3>();
    check_transpose<kKeysT, kDvT, 4>();
}

TEST_F(WgmmaFp8, TransposeEveryTileShape) {
    check_transpose_3_and_4<64, 256>();
    check_transpose_3_and_4<128, 256>();
    check_transpose_3_and_4<128, 64>();
    check_transpose_3_and_4<128, 128>();
    check_transpose_3_and_4<192, 128>();
    check_transpose_3_and_4<256, 64>();
}

}  // namespace
