// src/fmha/memory/gmem_tile.h (+ cp_async.h): TileLoader copies a global tile into its
// swizzled shared layout. The whole shared buffer is read back and checked byte by byte:
// every logical element lands where SmemLayout::offset says, rows past valid_rows and
// chunks past the head size are zero-filled, and nothing else is written (padding bytes
// keep a sentinel). Covers both thread walks (fixed column and general), partial last
// iterations, every swizzle, and global rows wider than the tile (row_stride).
#include <cstdint>
#include <string>
#include <vector>

#include "fmha/memory/gmem_tile.h"
#include "unit_test.h"

namespace {

using fmha::memory::SmemLayout;
using fmha::memory::TileLoader;

constexpr uint8_t kSentinel = 0xa5;
constexpr int kStrideExtra = 24;  // global columns past the head size (another head, say)

// Fills shared memory with the sentinel, loads, waits, and dumps all Layout::kBytes.
template <class Layout, int kValidChunks, int kThreads, bool kCheckRows>
__global__ void load_kernel(const __half* gmem, int64_t row_stride, int valid_rows, uint8_t* dump) {
    __shared__ __align__(128) uint8_t smem[Layout::kBytes];
    for (int i = threadIdx.x; i < Layout::kBytes; i += kThreads) smem[i] = kSentinel;
    __syncthreads();
    TileLoader<Layout, kValidChunks, kThreads>::template load<kCheckRows>(fmha::smem_u32(smem), gmem, row_stride,
                                                                           valid_rows, threadIdx.x);
    fmha::memory::cp_async_commit();
    fmha::memory::cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < Layout::kBytes; i += kThreads) dump[i] = smem[i];
}

// The global element (row, col): a code no other element has, never 0 and never the sentinel.
uint16_t code(int row, int col) { return static_cast<uint16_t>(0x8000 | (row << 8) | col); }

template <int kRows, int kCols, int kValidChunks, int kThreads, bool kCheckRows>
void run_load(int valid_rows) {
    using Layout = SmemLayout<kRows, kCols>;
    using Loader = TileLoader<Layout, kValidChunks, kThreads>;
    static_assert(kRows <= 128 && kCols <= 256, "code() has 7 row bits and 8 column bits");
    const int head = kValidChunks * 8;
    const int64_t stride = head + kStrideExtra;
    // The tile's rows only: past them (or past valid_rows) there is nothing to read.
    const int g_rows = kCheckRows ? fmha::min_int(valid_rows, kRows) : kRows;
    std::vector<uint16_t> gmem(static_cast<size_t>(fmha::max_int(g_rows, 1)) * stride, 0xdead);
    for (int r = 0; r < g_rows; ++r)
        for (int c = 0; c < head; ++c) gmem[r * stride + c] = code(r, c);

    unit::DeviceBuffer<uint16_t> d_gmem;
    unit::DeviceBuffer<uint8_t> dump;
    CUDA_ASSERT(d_gmem.upload(gmem));
    CUDA_ASSERT(dump.alloc(Layout::kBytes));
    load_kernel<Layout, kValidChunks, kThreads, kCheckRows><<<1, kThreads>>>(
        reinterpret_cast<const __half*>(d_gmem.get()), stride, valid_rows, dump.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<uint8_t> smem;
    CUDA_ASSERT(dump.download(&smem));

    ::testing::Test::RecordProperty("path", Loader::kFixedColumn ? "fixed column" : "general");
    std::vector<bool> owned(Layout::kBytes, false);
    for (int r = 0; r < kRows; ++r) {
        for (int c = 0; c < kCols; ++c) {
            const uint32_t at = Layout::offset(r, c / 8) + (c % 8) * 2;
            const uint16_t got = static_cast<uint16_t>(smem[at] | (smem[at + 1] << 8));
            const bool loaded = c < head && (!kCheckRows || r < valid_rows);
            ASSERT_EQ(got, loaded ? code(r, c) : 0) << "row " << r << " column " << c
                                                   << (loaded ? " (copied)" : " (zero-filled)");
            owned[at] = owned[at + 1] = true;
        }
    }
    for (int i = 0; i < Layout::kBytes; ++i) {
        if (!owned[i]) ASSERT_EQ(smem[i], kSentinel) << "padding byte " << i << " was written";
    }
}

struct LoadCase {
    const char* name;
    void (*run)(int valid_rows);
    int valid_rows;
};

void PrintTo(const LoadCase& c, std::ostream* os) { *os << c.name; }

class TileLoaderTest : public unit::DeviceTestP<LoadCase> {};

TEST_P(TileLoaderTest, EveryElementLandsWhereTheLayoutSays) {
    ASSERT_NO_FATAL_FAILURE(GetParam().run(GetParam().valid_rows));
}

// <rows, padded cols, head size / 8, threads, kCheckRows>: what Traits builds for Q, K, V.
INSTANTIATE_TEST_SUITE_P(
    Loads, TileLoaderTest,
    ::testing::Values(
        LoadCase{"d64_full_tile", run_load<64, 64, 8, 128, true>, 64},
        LoadCase{"d64_key_tail", run_load<64, 64, 8, 128, true>, 37},
        LoadCase{"d64_unchecked_rows", run_load<64, 64, 8, 128, false>, 0},
        LoadCase{"d40_padded_chunk_general_walk_partial", run_load<32, 48, 5, 128, true>, 20},
        LoadCase{"d24_swizzle4_padded_chunk", run_load<32, 32, 3, 128, true>, 5},
        LoadCase{"d16_swizzle2_fewer_chunks_than_threads", run_load<16, 16, 2, 128, true>, 9},
        LoadCase{"d80_odd_pitch_general_walk", run_load<64, 80, 10, 128, true>, 64},
        LoadCase{"d256_no_valid_rows", run_load<64, 256, 32, 128, true>, 0},
        LoadCase{"d128_valid_rows_past_tile", run_load<128, 128, 16, 256, true>, 1000}),
    [](const ::testing::TestParamInfo<LoadCase>& info) { return std::string(info.param.name); });

}  // namespace
