// The backward pass's five products on wgmma (bench/NOTES.md §65), one warpgroup, d = 64 (one
// SW128 panel of 16-bit elements), 64 keys as M and 64 queries: S^T = K Q^T and dP^T = V dO^T
// (SS, both K-major), dV = P^T dO with P^T converted from the S^T accumulator (RS, dO
// MN-major), dQ = dS K with dS written transposed from an accumulator into a K-major tile
// and K read MN-major (wgmma_ss with kTransB). Inputs are small dyadic values, exact in fp16 and bf16
// and in every product and sum, so results are compared bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

#include "fmha/memory/tma_sm90.h"
#include "fmha/mma/fp8_sm90.h"
#include "fmha/mma/warp_gemm.h"
#include "fmha/mma/wgmma_sm90.h"
#include "unit_test.h"
#include "wgmma_fragments.h"

namespace {

using fmha::mma::sw128_offset;
using unit::acc_col;
using unit::acc_row;
using unit::wait_and_store;

constexpr int kN = 64;  // keys, queries and head size alike: every tile [64, 64], one 128-byte panel

template <typename Element>
__device__ void fill(char* smem, const Element* src) {  // row-major [64, 64] into an SW128 tile
    for (int i = threadIdx.x; i < kN * kN; i += blockDim.x)
        *reinterpret_cast<Element*>(smem + sw128_offset(i / kN, 2 * (i % kN), kN)) = src[i];
}

template <typename Element>
__device__ Element from_f32(float x) {
    if constexpr (fmha::ElementTraits<Element>::kIsBf16) return __float2bfloat16_rn(x);
    else return __float2half_rn(x);
}


// k, v [keys, d], q, d_o [queries, d] row-major in; out: s_t, dp_t [keys, queries], dv [keys,
// d] = S^T dO (S^T standing in for P^T), dq [queries, d] = (dP^T)^T K (dP standing in for dS).
template <typename Element>
__global__ void bwd_products(const Element* k, const Element* v, const Element* q, const Element* d_o, float* s_t,
                             float* dp_t, float* dv, float* dq) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool kBf16 = fmha::ElementTraits<Element>::kIsBf16;
    constexpr int kTile = kN * kN * 2;
    __shared__ __align__(1024) char smem[5 * kTile];
    char *sk = smem, *sv = smem + kTile, *sq = smem + 2 * kTile, *sdo = smem + 3 * kTile, *sds = smem + 4 * kTile;
    fill(sk, k);
    fill(sv, v);
    fill(sq, q);
    fill(sdo, d_o);
    fmha::memory::fence_proxy_async_smem();
    __syncthreads();
    using fmha::mma::kSw128AtomBytes;
    using fmha::mma::make_smem_desc_sw128;
    // K-major operands: a k16 step is 32 bytes along the row. MN-major (dO and K as B of the
    // d-wide products): a k16 step is 16 rows, 2048 bytes.
    const auto kmajor = [](const char* t) { return make_smem_desc_sw128(fmha::smem_u32(t), 16, kSw128AtomBytes); };
    const auto mnmajor = [](const char* t) {
        return make_smem_desc_sw128(fmha::smem_u32(t), kN * 128, kSw128AtomBytes);
    };

    float acc_s[1][kN / 8][4], acc_dp[1][kN / 8][4];
    fmha::mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
        fmha::mma::wgmma_ss<kBf16, kN>(fmha::mma::flat(acc_s), kmajor(sk) + (kk * 32 >> 4), kmajor(sq) + (kk * 32 >> 4),
                                       kk > 0);
        fmha::mma::wgmma_ss<kBf16, kN>(fmha::mma::flat(acc_dp), kmajor(sv) + (kk * 32 >> 4),
                                       kmajor(sdo) + (kk * 32 >> 4), kk > 0);
    }
    fmha::mma::wgmma_commit();
    fmha::mma::wgmma_wait<0>();
    fmha::mma::fence_operands(acc_s);
    fmha::mma::fence_operands(acc_dp);
    for (int nt = 0; nt < kN / 8; ++nt)
        for (int e = 0; e < 4; ++e) {
            s_t[acc_row(e) * kN + acc_col(nt, e)] = acc_s[0][nt][e];
            dp_t[acc_row(e) * kN + acc_col(nt, e)] = acc_dp[0][nt][e];
        }

    // dV = P^T dO: P^T from the accumulator, the A layout after packing (k16 slices over queries).
    uint32_t p_t[1][kN / 16][4];
    fmha::mma::s_to_p<Element>(p_t, acc_s);
    float acc_dv[1][kN / 8][4];
    fmha::mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
        fmha::mma::wgmma_rs<kBf16, kN>(fmha::mma::flat(acc_dv), p_t[0][kk], mnmajor(sdo) + (kk * 2048 >> 4), kk > 0);
    wait_and_store<kN>(acc_dv, dv);

    // dQ = dS K: dS^T (here dP^T) written transposed, [queries, keys] K-major; K read MN-major.
    for (int nt = 0; nt < kN / 8; ++nt)
        for (int e = 0; e < 4; ++e)
            *reinterpret_cast<Element*>(sds + sw128_offset(acc_col(nt, e), 2 * acc_row(e), kN)) =
                from_f32<Element>(acc_dp[0][nt][e]);
    fmha::memory::fence_proxy_async_smem();
    __syncthreads();
    float acc_dq[1][kN / 8][4];
    fmha::mma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
        fmha::mma::wgmma_ss<kBf16, kN, true>(fmha::mma::flat(acc_dq), kmajor(sds) + (kk * 32 >> 4),
                                          mnmajor(sk) + (kk * 2048 >> 4), kk > 0);
    wait_and_store<kN>(acc_dq, dq);
#endif
}

using WgmmaBwd = unit::ArchTest<90, 90>;  // wgmma: sm_90a

template <typename Element>
void check_products() {
    const std::vector<float> k = unit::dyadic(kN * kN, true, 21), v = unit::dyadic(kN * kN, true, 22),
                             q = unit::dyadic(kN * kN, true, 23), d_o = unit::dyadic(kN * kN, true, 24);
    unit::DeviceBuffer<Element> dk, dv_in, dq_in, ddo;
    CUDA_ASSERT(dk.upload(unit::to_elements<Element>(k)));
    CUDA_ASSERT(dv_in.upload(unit::to_elements<Element>(v)));
    CUDA_ASSERT(dq_in.upload(unit::to_elements<Element>(q)));
    CUDA_ASSERT(ddo.upload(unit::to_elements<Element>(d_o)));
    unit::DeviceBuffer<float> s_t, dp_t, dv, dq;
    for (unit::DeviceBuffer<float>* b : {&s_t, &dp_t, &dv, &dq}) CUDA_ASSERT(b->alloc(kN * kN, 0xff));
    bwd_products<Element><<<1, 128>>>(dk.get(), dv_in.get(), dq_in.get(), ddo.get(), s_t.get(), dp_t.get(), dv.get(),
                                      dq.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<float> got_s, got_dp, got_dv, got_dq;
    CUDA_ASSERT(s_t.download(&got_s));
    CUDA_ASSERT(dp_t.download(&got_dp));
    CUDA_ASSERT(dv.download(&got_dv));
    CUDA_ASSERT(dq.download(&got_dq));
    const auto dot = [](const std::vector<float>& a, int i, const std::vector<float>& b, int j) {
        float x = 0.f;
        for (int c = 0; c < kN; ++c) x += a[i * kN + c] * b[j * kN + c];
        return x;
    };
    for (int key = 0; key < kN; ++key)
        for (int row = 0; row < kN; ++row) {
            ASSERT_EQ(got_s[key * kN + row], dot(k, key, q, row)) << "S^T key " << key << ", query " << row;
            ASSERT_EQ(got_dp[key * kN + row], dot(v, key, d_o, row)) << "dP^T key " << key << ", query " << row;
        }
    for (int key = 0; key < kN; ++key)
        for (int c = 0; c < kN; ++c) {
            float want = 0.f;  // sum over queries of S^T[key, query] dO[query, c]
            for (int row = 0; row < kN; ++row) want += got_s[key * kN + row] * d_o[row * kN + c];
            ASSERT_EQ(got_dv[key * kN + c], want) << "dV key " << key << ", column " << c;
        }
    for (int row = 0; row < kN; ++row)
        for (int c = 0; c < kN; ++c) {
            float want = 0.f;  // sum over keys of dP^T[key, query] K[key, c]
            for (int key = 0; key < kN; ++key) want += got_dp[key * kN + row] * k[key * kN + c];
            ASSERT_EQ(got_dq[row * kN + c], want) << "dQ query " << row << ", column " << c;
        }
}

TEST_F(WgmmaBwd, ProductsBf16) { check_products<__nv_bfloat16>(); }
TEST_F(WgmmaBwd, ProductsFp16) { check_products<__half>(); }

}  // namespace
