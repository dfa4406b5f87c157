// src/fmha/memory/smem_layout.h: SmemLayout::offset on the host (every logical chunk has its
// own slot, ldmatrix phases and row writes are bank-conflict free, whatever the swizzle), and
// LdsmAddr on the device (its per-lane address is offset() of the lane's row and chunk, for
// the A and B lane maps of warp_gemm.h).
#include <set>
#include <string>
#include <vector>

#include "fmha/memory/smem_layout.h"
#include "fmha/mma/warp_gemm.h"
#include "unit_test.h"

namespace {

using fmha::memory::LdsmAddr;
using fmha::memory::SmemLayout;

constexpr int kChunk = 16;            // bytes
constexpr int kBankGroups = 8;        // 16-byte groups of banks in a 128-byte line
constexpr uint32_t kBase = 0x400;     // any shared base: LdsmAddr only adds to it

int bank_group(uint32_t offset) { return static_cast<int>(offset / kChunk) % kBankGroups; }

// Lane -> (row, chunk) in a 16x16 block, from the matrix order warp_gemm.h documents:
//   A (and V): (rows 0-7, c0) (rows 8-15, c0) (rows 0-7, c1) (rows 8-15, c1)
//   B (K):     (n 0-7, c0) (n 0-7, c1) (n 8-15, c0) (n 8-15, c1)
int a_row(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
int a_chunk(int lane) { return lane / 16; }
int b_row(int lane) { return lane % 8 + 8 * (lane / 16); }
int b_chunk(int lane) { return (lane / 8) % 2; }

// out[map][lane][block]: LdsmAddr(r0, c0) - base for map 0 = A, 1 = B; blocks r0 = 0, 16, ..
// (rows), c0 = 0, 2, .. (chunks), r0-major.
template <class Layout>
__global__ void ldsm_addr_kernel(uint32_t* out) {
    constexpr int kBlocksR = Layout::kRows / 16, kBlocksC = Layout::kChunks / 2;
    const int lane = threadIdx.x;
    LdsmAddr<Layout> addr[2];
    addr[0].init(kBase, fmha::mma::lane_row_a(lane), fmha::mma::lane_chunk_a(lane));
    addr[1].init(kBase, fmha::mma::lane_row_b(lane), fmha::mma::lane_chunk_b(lane));
    for (int m = 0; m < 2; ++m)
        for (int br = 0; br < kBlocksR; ++br)
            for (int bc = 0; bc < kBlocksC; ++bc)
                out[((m * 32 + lane) * kBlocksR + br) * kBlocksC + bc] = addr[m](br * 16, bc * 2) - kBase;
}

template <class Layout>
void run_ldsm_addr() {
    constexpr int kBlocksR = Layout::kRows / 16, kBlocksC = Layout::kChunks / 2;
    unit::DeviceBuffer<uint32_t> out;
    CUDA_ASSERT(out.alloc(2 * 32 * kBlocksR * kBlocksC));
    ldsm_addr_kernel<Layout><<<1, 32>>>(out.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<uint32_t> got;
    CUDA_ASSERT(out.download(&got));
    for (int m = 0; m < 2; ++m) {
        for (int lane = 0; lane < 32; ++lane) {
            const int row = m == 0 ? a_row(lane) : b_row(lane);
            const int chunk = m == 0 ? a_chunk(lane) : b_chunk(lane);
            for (int br = 0; br < kBlocksR; ++br) {
                for (int bc = 0; bc < kBlocksC; ++bc) {
                    ASSERT_EQ(got[((m * 32 + lane) * kBlocksR + br) * kBlocksC + bc],
                              Layout::offset(br * 16 + row, bc * 2 + chunk))
                        << (m == 0 ? "A" : "B") << " map, lane " << lane << ", block (" << br * 16 << ", "
                        << bc * 2 << ")";
                }
            }
        }
    }
}

// A layout as values, so one parametrised suite covers every instantiation.
struct LayoutCase {
    const char* name;
    int rows, chunks, pitch, bytes;
    uint32_t (*offset)(int row, int chunk);
    void (*run_ldsm_addr)();
};

void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

template <int kRows, int kCols>
LayoutCase layout_case(const char* name) {
    using L = SmemLayout<kRows, kCols>;
    return {name, kRows, L::kChunks, L::kPitch, L::kBytes, &L::offset, &run_ldsm_addr<L>};
}

class SmemLayoutTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(SmemLayoutTest, EveryChunkHasItsOwnAlignedSlotInItsRow) {
    const LayoutCase& c = GetParam();
    std::set<uint32_t> seen;
    for (int row = 0; row < c.rows; ++row) {
        for (int chunk = 0; chunk < c.chunks; ++chunk) {
            const uint32_t off = c.offset(row, chunk);
            ASSERT_EQ(off % kChunk, 0u) << "row " << row << " chunk " << chunk;
            ASSERT_GE(off, static_cast<uint32_t>(row * c.pitch * kChunk)) << "row " << row << " chunk " << chunk;
            ASSERT_LT(off, static_cast<uint32_t>((row + 1) * c.pitch * kChunk)) << "row " << row << " chunk " << chunk;
            ASSERT_TRUE(seen.insert(off).second) << "row " << row << " chunk " << chunk << " collides";
        }
    }
    EXPECT_EQ(c.bytes, c.rows * c.pitch * kChunk);
}

// ldmatrix reads one chunk column of 8 consecutive rows (from a multiple of 8) per phase.
TEST_P(SmemLayoutTest, LdmatrixPhasesAreBankConflictFree) {
    const LayoutCase& c = GetParam();
    for (int r0 = 0; r0 < c.rows; r0 += 8) {
        for (int chunk = 0; chunk < c.chunks; ++chunk) {
            std::set<int> groups;
            for (int r = r0; r < r0 + 8; ++r) groups.insert(bank_group(c.offset(r, chunk)));
            EXPECT_EQ(groups.size(), 8u) << "rows " << r0 << "..+7, chunk " << chunk;
        }
    }
}

// cp.async and the epilogue move up to 8 consecutive chunks of one row per phase.
TEST_P(SmemLayoutTest, RowWritesAreBankConflictFree) {
    const LayoutCase& c = GetParam();
    for (int row = 0; row < c.rows; ++row) {
        for (int c0 = 0; c0 < c.chunks; c0 += kBankGroups) {
            const int n = fmha::min_int(kBankGroups, c.chunks - c0);
            std::set<int> groups;
            for (int chunk = c0; chunk < c0 + n; ++chunk) groups.insert(bank_group(c.offset(row, chunk)));
            EXPECT_EQ(groups.size(), static_cast<size_t>(n)) << "row " << row << ", chunks " << c0 << "..";
        }
    }
}

using LdsmAddrTest = unit::DeviceTestP<LayoutCase>;

TEST_P(LdsmAddrTest, LaneAddressIsTheLayoutOffsetOfItsRowAndChunk) {
    ASSERT_NO_FATAL_FAILURE(GetParam().run_ldsm_addr());
}

// One of each swizzle: chunks % 8 == 0 (one or more groups), 4, 2, and the padded odd pitch.
const auto kLayouts = ::testing::Values(
    layout_case<64, 16>("r64_c16_swizzle2"), layout_case<64, 32>("r64_c32_swizzle4"),
    layout_case<64, 48>("r64_c48_padded"), layout_case<64, 64>("r64_c64_swizzle8"),
    layout_case<64, 80>("r64_c80_padded"), layout_case<64, 96>("r64_c96_padded"),
    layout_case<128, 128>("r128_c128_swizzle8x2"), layout_case<32, 256>("r32_c256_swizzle8x4"));

std::string layout_name(const ::testing::TestParamInfo<LayoutCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Layouts, SmemLayoutTest, kLayouts, layout_name);
INSTANTIATE_TEST_SUITE_P(Layouts, LdsmAddrTest, kLayouts, layout_name);

}  // namespace
