// src/fmha/epilogue/store_o.h: O fragments (mma C layout) times the per-row 1/l, converted,
// staged through the swizzled shared tile and stored as 16-byte vectors. The global buffer
// starts poisoned: rows < valid_rows and columns < dv must hold exactly the converted values,
// everything else (row tail, dv padding, the rest of a wider row, rows past the tile) must
// keep the poison.
#include <cstdint>
#include <string>
#include <vector>

#include "fmha/epilogue/store_o.h"
#include "unit_test.h"

namespace {

constexpr uint16_t kPoison = 0xffff;  // NaN in f16 and bf16
constexpr int kStrideExtra = 16;      // global columns past dv (the next head, say)
constexpr int kRowsPast = 2;          // global rows past the tile

// O and 1/l are exact in f16 and bf16 (small integers, powers of two), so the check is bitwise.
__host__ __device__ float o_value(int row, int col) { return static_cast<float>((row * 7 + col * 3) % 29 - 14); }
__host__ __device__ float inv_value(int row) { return 1.f / static_cast<float>(1 << (row % 3)); }

template <class Layout, int kValidChunks, int kWarps, typename Element, int kMmaM>
__global__ void store_kernel(Element* gmem, int64_t row_stride, int valid_rows) {
    constexpr int kNTilesO = Layout::kChunks;
    __shared__ __align__(128) char smem[Layout::kBytes];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int warp_row0 = warp * kMmaM * 16;
    float o[kMmaM][kNTilesO][4];  // this warp's [kMmaM * 16 rows, padded dv]
    float inv[kMmaM][2];
    for (int mi = 0; mi < kMmaM; ++mi) {
        for (int h = 0; h < 2; ++h) {
            const int row = warp_row0 + mi * 16 + h * 8 + lane / 4;
            inv[mi][h] = inv_value(row);
            for (int nt = 0; nt < kNTilesO; ++nt)
                for (int e = 0; e < 2; ++e) o[mi][nt][2 * h + e] = o_value(row, nt * 8 + 2 * (lane % 4) + e);
        }
    }
    fmha::epilogue::store_o<Layout, kValidChunks, kWarps * 32>(o, inv, smem, warp_row0, lane, gmem, row_stride,
                                                               valid_rows, static_cast<int>(threadIdx.x));
}

template <typename Element, int kRows, int kCols, int kValidChunks, int kWarps>
void run_store(int valid_rows) {
    using Layout = fmha::memory::SmemLayout<kRows, kCols>;
    constexpr int kMmaM = kRows / (kWarps * 16);
    static_assert(kMmaM * kWarps * 16 == kRows, "each warp owns whole 16-row m-tiles");
    const int dv = kValidChunks * 8;
    const int64_t stride = dv + kStrideExtra;
    const size_t n = static_cast<size_t>(kRows + kRowsPast) * stride;
    unit::DeviceBuffer<Element> out;
    CUDA_ASSERT(out.alloc(n, 0xff));
    store_kernel<Layout, kValidChunks, kWarps, Element, kMmaM><<<1, kWarps * 32>>>(out.get(), stride, valid_rows);
    CUDA_ASSERT_LAUNCH();
    std::vector<Element> got;
    CUDA_ASSERT(out.download(&got));
    for (int r = 0; r < kRows + kRowsPast; ++r) {
        for (int c = 0; c < stride; ++c) {
            const bool written = r < valid_rows && c < dv;
            const uint16_t want = written ? unit::bits_of(unit::to_element<Element>(o_value(r, c) * inv_value(r))) : kPoison;
            ASSERT_EQ(unit::bits_of(got[r * stride + c]), want)
                << "row " << r << " column " << c << (written ? " (stored)" : " (must stay poisoned)");
        }
    }
}

struct StoreCase {
    const char* name;
    void (*run)(int valid_rows);
    int valid_rows;
};

void PrintTo(const StoreCase& c, std::ostream* os) { *os << c.name; }

class StoreO : public unit::DeviceTestP<StoreCase> {};

TEST_P(StoreO, WritesExactlyTheValidRowsAndColumns) {
    ASSERT_NO_FATAL_FAILURE(GetParam().run(GetParam().valid_rows));
}

// <Element, tile rows, padded dv, dv / 8, warps>
INSTANTIATE_TEST_SUITE_P(
    Epilogue, StoreO,
    ::testing::Values(StoreCase{"fp16_dv64_full_tile", run_store<__half, 64, 64, 8, 4>, 64},
                      StoreCase{"fp16_dv40_row_tail", run_store<__half, 64, 48, 5, 4>, 37},
                      StoreCase{"bf16_dv128_two_mtiles_per_warp", run_store<__nv_bfloat16, 128, 128, 16, 4>, 100},
                      StoreCase{"fp16_dv16_no_valid_rows", run_store<__half, 64, 16, 2, 4>, 0},
                      StoreCase{"bf16_dv24_swizzle4", run_store<__nv_bfloat16, 32, 32, 3, 2>, 32},
                      StoreCase{"fp16_dv80_odd_pitch", run_store<__half, 64, 80, 10, 4>, 61}),
    [](const ::testing::TestParamInfo<StoreCase>& info) { return std::string(info.param.name); });

}  // namespace
