// src/fmha/mma/warp_gemm.h: the main loop's two warp products on swizzled shared tiles,
//   S (+)= Q K^T  (gemm_qk: ldmatrix A and B, f32 accumulate)
//   O += P V      (s_to_p, then gemm_pv: ldmatrix.trans B, f32 or f16 partials)
// with the lane address setup fwd_kernel uses (LdsmAddr + lane_row/chunk), over head sizes
// that exercise every swizzle of smem_layout.h. Integer-valued inputs keep every product and
// sum exact, so results are compared bit for bit with the CPU product.
#include <string>
#include <vector>

#include "fmha/memory/smem_layout.h"
#include "fmha/mma/warp_gemm.h"
#include "unit_test.h"

namespace {

using fmha::memory::LdsmAddr;
using fmha::memory::SmemLayout;

constexpr int kWarps = 2;

// Writes the row-major [Layout::kRows, Layout::kCols] tile `src` into `smem` where the layout
// puts each element (all threads of the CTA; the caller syncs).
template <class Layout, typename Element>
__device__ void fill_tile(char* smem, const Element* src) {
    for (int i = threadIdx.x; i < Layout::kRows * Layout::kCols; i += blockDim.x) {
        const int row = i / Layout::kCols, col = i % Layout::kCols;
        *reinterpret_cast<Element*>(smem + Layout::offset(row, col / 8) + (col % 8) * sizeof(Element)) = src[i];
    }
}

// ---- S = S0 + Q K^T ----------------------------------------------------------------------

constexpr int kQkMmaM = 2;                    // 32 query rows per warp
constexpr int kQkNTiles = 4;                  // 32 keys
constexpr int kQRows = kWarps * kQkMmaM * 16;  // 64
constexpr int kKRows = kQkNTiles * 8;         // 32

// q [64, D], k [32, D], s [64, 32] f32: S0 in, S0 + Q K^T out.
template <typename Element, int D>
__global__ void qk_kernel(const Element* q, const Element* k, float* s_io) {
    using LayoutQ = SmemLayout<kQRows, D>;
    using LayoutK = SmemLayout<kKRows, D>;
    __shared__ __align__(128) char smem[LayoutQ::kBytes + LayoutK::kBytes];
    fill_tile<LayoutQ>(smem, q);
    fill_tile<LayoutK>(smem + LayoutQ::kBytes, k);
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    LdsmAddr<LayoutQ> q_addr;
    LdsmAddr<LayoutK> k_addr;
    q_addr.init(fmha::smem_u32(smem), warp * kQkMmaM * 16 + fmha::mma::lane_row_a(lane), fmha::mma::lane_chunk_a(lane));
    k_addr.init(fmha::smem_u32(smem + LayoutQ::kBytes), fmha::mma::lane_row_b(lane), fmha::mma::lane_chunk_b(lane));
    float s[kQkMmaM][kQkNTiles][4];  // this warp's [32 rows, 32 keys]
    const auto at = [&](int mi, int ni, int e) {
        const int row = warp * kQkMmaM * 16 + mi * 16 + (e / 2) * 8 + lane / 4;
        return row * kKRows + ni * 8 + 2 * (lane % 4) + e % 2;
    };
    for (int mi = 0; mi < kQkMmaM; ++mi)
        for (int ni = 0; ni < kQkNTiles; ++ni)
            for (int e = 0; e < 4; ++e) s[mi][ni][e] = s_io[at(mi, ni, e)];
    fmha::mma::gemm_qk<Element, kQkMmaM, kQkNTiles, D / 16>(s, q_addr, k_addr);
    for (int mi = 0; mi < kQkMmaM; ++mi)
        for (int ni = 0; ni < kQkNTiles; ++ni)
            for (int e = 0; e < 4; ++e) s_io[at(mi, ni, e)] = s[mi][ni][e];
}

template <typename Element, int D>
void run_qk() {
    const std::vector<float> q = unit::random_ints(kQRows * D, -3, 3, 100 + D);
    const std::vector<float> k = unit::random_ints(kKRows * D, -3, 3, 200 + D);
    const std::vector<float> s0 = unit::random_ints(kQRows * kKRows, -5, 5, 300 + D);
    std::vector<float> kt(D * kKRows);  // K^T [D, 32] for the reference
    for (int j = 0; j < kKRows; ++j)
        for (int c = 0; c < D; ++c) kt[c * kKRows + j] = k[j * D + c];
    const std::vector<double> qk = unit::matmul(q, kt, kQRows, kKRows, D);

    unit::DeviceBuffer<Element> d_q, d_k;
    unit::DeviceBuffer<float> d_s;
    CUDA_ASSERT(d_q.upload(unit::to_elements<Element>(q)));
    CUDA_ASSERT(d_k.upload(unit::to_elements<Element>(k)));
    CUDA_ASSERT(d_s.upload(s0));
    qk_kernel<Element, D><<<1, kWarps * 32>>>(d_q.get(), d_k.get(), d_s.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<float> got;
    CUDA_ASSERT(d_s.download(&got));
    for (int i = 0; i < kQRows * kKRows; ++i) {
        ASSERT_EQ(got[i], s0[i] + qk[i]) << "S row " << i / kKRows << " key " << i % kKRows;
    }
}

// ---- O = O0 + P V ------------------------------------------------------------------------

constexpr int kPvMmaM = 1;                     // 16 query rows per warp
constexpr int kPvKSlices = 4;                  // 64 keys
constexpr int kPvRows = kWarps * kPvMmaM * 16;  // 32
constexpr int kPvKeys = kPvKSlices * 16;        // 64

// p [32, 64] f32 scores-shaped (converted by s_to_p), v [64, DV], o [32, DV]: O0 in, O0 + P V out.
template <typename Element, bool kAccFp16, int DV>
__global__ void pv_kernel(const float* p, const Element* v, float* o_io) {
    using LayoutV = SmemLayout<kPvKeys, DV>;
    constexpr int kNTilesS = kPvKeys / 8, kNTilesO = DV / 8;
    __shared__ __align__(128) char smem[LayoutV::kBytes];
    fill_tile<LayoutV>(smem, v);
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const auto row = [&](int e) { return warp * kPvMmaM * 16 + (e / 2) * 8 + lane / 4; };
    const auto col = [&](int ni, int e) { return ni * 8 + 2 * (lane % 4) + e % 2; };
    float s[kPvMmaM][kNTilesS][4];
    for (int ni = 0; ni < kNTilesS; ++ni)
        for (int e = 0; e < 4; ++e) s[0][ni][e] = p[row(e) * kPvKeys + col(ni, e)];
    uint32_t p_frag[kPvMmaM][kPvKSlices][4];
    fmha::mma::s_to_p<Element>(p_frag, s);
    float o[kPvMmaM][kNTilesO][4];
    for (int nt = 0; nt < kNTilesO; ++nt)
        for (int e = 0; e < 4; ++e) o[0][nt][e] = o_io[row(e) * DV + col(nt, e)];
    LdsmAddr<LayoutV> v_addr;
    v_addr.init(fmha::smem_u32(smem), fmha::mma::lane_row_a(lane), fmha::mma::lane_chunk_a(lane));
    fmha::mma::gemm_pv<Element, kAccFp16>(o, p_frag, v_addr);
    for (int nt = 0; nt < kNTilesO; ++nt)
        for (int e = 0; e < 4; ++e) o_io[row(e) * DV + col(nt, e)] = o[0][nt][e];
}

template <typename Element, bool kAccFp16, int DV>
void run_pv() {
    // P in {0, 1/4, .., 1}, V in [-2, 2]: every partial sum over 64 keys is exact even in f16.
    std::vector<float> p = unit::random_ints(kPvRows * kPvKeys, 0, 4, 400 + DV);
    for (float& x : p) x /= 4;
    const std::vector<float> v = unit::random_ints(kPvKeys * DV, -2, 2, 500 + DV);
    const std::vector<float> o0 = unit::random_ints(kPvRows * DV, -5, 5, 600 + DV);
    const std::vector<double> pv = unit::matmul(p, v, kPvRows, DV, kPvKeys);

    unit::DeviceBuffer<float> d_p, d_o;
    unit::DeviceBuffer<Element> d_v;
    CUDA_ASSERT(d_p.upload(p));
    CUDA_ASSERT(d_v.upload(unit::to_elements<Element>(v)));
    CUDA_ASSERT(d_o.upload(o0));
    pv_kernel<Element, kAccFp16, DV><<<1, kWarps * 32>>>(d_p.get(), d_v.get(), d_o.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<float> got;
    CUDA_ASSERT(d_o.download(&got));
    for (int i = 0; i < kPvRows * DV; ++i) {
        ASSERT_EQ(got[i], o0[i] + pv[i]) << "O row " << i / DV << " column " << i % DV;
    }
}

// ---- the cases: one instantiation each ---------------------------------------------------

struct GemmCase {
    const char* name;
    void (*run)();
};

void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.name; }

std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) { return info.param.name; }

class WarpGemm : public unit::DeviceTestP<GemmCase> {};

TEST_P(WarpGemm, MatchesTheCpuProduct) { ASSERT_NO_FATAL_FAILURE(GetParam().run()); }

// Head sizes by swizzle (smem_layout.h): 16 -> 2 chunks, 32 -> 4, 48 and 80 -> none (odd
// pitch), 64 -> one 8-chunk group, 128 -> two groups.
INSTANTIATE_TEST_SUITE_P(QK, WarpGemm,
                         ::testing::Values(GemmCase{"fp16_d16", run_qk<__half, 16>},
                                           GemmCase{"fp16_d32", run_qk<__half, 32>},
                                           GemmCase{"fp16_d48", run_qk<__half, 48>},
                                           GemmCase{"fp16_d64", run_qk<__half, 64>},
                                           GemmCase{"fp16_d80", run_qk<__half, 80>},
                                           GemmCase{"fp16_d128", run_qk<__half, 128>},
                                           GemmCase{"bf16_d64", run_qk<__nv_bfloat16, 64>},
                                           GemmCase{"bf16_d128", run_qk<__nv_bfloat16, 128>}),
                         case_name);

INSTANTIATE_TEST_SUITE_P(PV, WarpGemm,
                         ::testing::Values(GemmCase{"fp16_fp32acc_dv16", run_pv<__half, false, 16>},
                                           GemmCase{"fp16_fp32acc_dv48", run_pv<__half, false, 48>},
                                           GemmCase{"fp16_fp32acc_dv64", run_pv<__half, false, 64>},
                                           GemmCase{"fp16_fp32acc_dv128", run_pv<__half, false, 128>},
                                           GemmCase{"fp16_fp16acc_dv48", run_pv<__half, true, 48>},
                                           GemmCase{"fp16_fp16acc_dv128", run_pv<__half, true, 128>},
                                           GemmCase{"bf16_dv64", run_pv<__nv_bfloat16, false, 64>},
                                           GemmCase{"bf16_dv128", run_pv<__nv_bfloat16, false, 128>}),
                         case_name);

}  // namespace
