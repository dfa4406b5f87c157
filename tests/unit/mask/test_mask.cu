// src/fmha/mask/mask.h: mask::Rows (each row's visible key range) on the host against the
// masks written out as a predicate, mask::apply on two warps' score fragments, and the
// key-block schedule mask::blocks gives the kernels (which blocks they skip, mask, or run
// mask-free), for every MaskType.
#include <cmath>
#include <string>
#include <vector>

#include "fmha/kernel/launch_checks.h"
#include "fmha/mask/mask.h"
#include "unit_test.h"

namespace {

using fmha::MaskType;
using fmha::mask::Kind;

// The masks' definition (params.h), written out: may query row r of a sequence see key j?
struct MaskDef {
    MaskType mask;
    int window = 0, chunk = 0;
};

bool allowed(const MaskDef& m, int r, int j, int q_len, int kv_len) {
    if (j < 0 || j >= kv_len) return false;
    const int pos = r + (kv_len - q_len);
    switch (m.mask) {
        case MaskType::kPadding: return true;
        case MaskType::kCausal: return j <= pos;
        case MaskType::kSlidingWindow: return j <= pos && j > pos - m.window;
        case MaskType::kBidirectionalWindow: return j > pos - m.window && j < pos + m.window;
        case MaskType::kChunked: return j <= pos && j / m.chunk == pos / m.chunk;
    }
    return false;
}

fmha::Params params_of(const MaskDef& m) {
    fmha::Params p;
    p.mask = m.mask;
    p.window = m.window;
    p.chunk = m.chunk;
    return p;
}

// [begin(r), end(r)) through the kernels' compile-time kind (kernel::with_mask, the launchers'
// own MaskType -> mask::Kind switch).
struct Range {
    int begin, end;
};
Range row_range(const MaskDef& m, int r, int q_len, int kv_len) {
    const fmha::Params p = params_of(m);
    return fmha::kernel::with_mask(
        m.mask,
        [&](auto kind) {
            const auto rows = fmha::mask::Rows<decltype(kind)::value>::make(p, q_len, kv_len);
            return Range{rows.begin(r), rows.end(r)};
        },
        Range{0, 0});
}

fmha::mask::Blocks block_range(const MaskDef& m, int r_first, int r_last, int q_len, int kv_len, int block_n) {
    const fmha::Params p = params_of(m);
    return fmha::kernel::with_mask(
        m.mask,
        [&](auto kind) {
            return fmha::mask::blocks(fmha::mask::Rows<decltype(kind)::value>::make(p, q_len, kv_len), r_first,
                                      r_last, block_n);
        },
        fmha::mask::Blocks{0, 0, 0, 0});
}

const MaskDef kMasks[] = {
    {MaskType::kPadding},
    {MaskType::kCausal},
    {MaskType::kSlidingWindow, 1},
    {MaskType::kSlidingWindow, 5},
    {MaskType::kSlidingWindow, 64},
    {MaskType::kSlidingWindow, 100},
    {MaskType::kBidirectionalWindow, 1},
    {MaskType::kBidirectionalWindow, 7},
    {MaskType::kBidirectionalWindow, 70},
    {MaskType::kChunked, 0, 1},
    {MaskType::kChunked, 0, 4},
    {MaskType::kChunked, 0, 64},
    {MaskType::kChunked, 0, 128},
};

std::string label(const MaskDef& m) {
    const char* names[] = {"padding", "causal", "sliding", "bidirectional", "chunked"};
    return std::string(names[static_cast<int>(m.mask)]) + " w" + std::to_string(m.window) + " c" +
           std::to_string(m.chunk);
}

// ---- Rows (host only) ---------------------------------------------------------------------

TEST(MaskRows, CausalIsBottomRightAligned) {
    const MaskDef causal{MaskType::kCausal};
    EXPECT_EQ(row_range(causal, 0, 64, 64).end, 1);      // s_q == s_kv: row r sees keys 0..r
    EXPECT_EQ(row_range(causal, 63, 64, 64).end, 64);
    EXPECT_EQ(row_range(causal, 0, 40, 100).end, 61);    // s_q < s_kv: row r sees keys 0..r+60
    EXPECT_EQ(row_range(causal, 39, 40, 100).end, 100);  // the last query row sees every key
    EXPECT_EQ(row_range(causal, 0, 1, 77).end, 77);      // decode: the one query row sees everything
    EXPECT_LE(row_range(causal, 0, 20, 10).end, 0);      // a row above the diagonal's start sees nothing
}

TEST(MaskRows, LocalRangesOfOneExample) {
    // 10 keys, 4 queries at positions 6..9.
    EXPECT_EQ(row_range({MaskType::kSlidingWindow, 3}, 0, 4, 10).begin, 4);  // keys 4, 5, 6
    EXPECT_EQ(row_range({MaskType::kSlidingWindow, 3}, 0, 4, 10).end, 7);
    EXPECT_EQ(row_range({MaskType::kBidirectionalWindow, 3}, 0, 4, 10).begin, 4);  // keys 4..8
    EXPECT_EQ(row_range({MaskType::kBidirectionalWindow, 3}, 0, 4, 10).end, 9);
    EXPECT_EQ(row_range({MaskType::kChunked, 0, 4}, 1, 4, 10).begin, 4);  // position 7: keys 4..7
    EXPECT_EQ(row_range({MaskType::kChunked, 0, 4}, 2, 4, 10).begin, 8);  // position 8 starts a chunk
    EXPECT_EQ(row_range({MaskType::kChunked, 0, 4}, 2, 4, 10).end, 9);
}

// The visible keys of a row are exactly [begin, end), and the range never moves left.
TEST(MaskRows, VisibleKeysAreTheRange) {
    for (const MaskDef& m : kMasks) {
        for (int q_len : {1, 5, 16, 33, 130}) {
            for (int kv_len : {1, 7, 33, 64, 130, 300}) {
                if (q_len > kv_len) continue;
                Range prev{0, 0};
                for (int r = 0; r < q_len; ++r) {
                    const Range range = row_range(m, r, q_len, kv_len);
                    ASSERT_GE(range.begin, 0);
                    ASSERT_GE(range.begin, prev.begin) << label(m);
                    ASSERT_GE(range.end, prev.end) << label(m);
                    prev = range;
                    for (int j = -1; j < kv_len + 2; ++j) {
                        ASSERT_EQ(allowed(m, r, j, q_len, kv_len), j >= range.begin && j < range.end)
                            << label(m) << " q_len " << q_len << " kv_len " << kv_len << " row " << r << " key " << j;
                    }
                }
            }
        }
    }
}

// sequence_keys is the union of the rows' ranges, and key_span_max bounds its length.
TEST(MaskRows, SequenceKeysAndTheirSpan) {
    for (const MaskDef& m : kMasks) {
        for (int q_len : {1, 4, 16}) {
            for (int kv_len : {16, 77, 300, 4097}) {
                int first = kv_len, last = 0;
                for (int r = 0; r < q_len; ++r) {
                    for (int j = 0; j < kv_len; ++j) {
                        if (!allowed(m, r, j, q_len, kv_len)) continue;
                        first = std::min(first, j);
                        last = std::max(last, j + 1);
                    }
                }
                fmha::Params p = params_of(m);
                const fmha::mask::KeyRange keys = fmha::mask::sequence_keys(p, q_len, kv_len);
                EXPECT_EQ(keys.first, first) << label(m) << " q_len " << q_len << " kv_len " << kv_len;
                EXPECT_EQ(keys.last, last) << label(m) << " q_len " << q_len << " kv_len " << kv_len;
                p.s_q_max = q_len;
                p.s_kv_max = kv_len;
                EXPECT_GE(fmha::mask::key_span_max(p), last - first) << label(m);
                EXPECT_LE(fmha::mask::key_span_max(p), kv_len) << label(m);
            }
        }
    }
}

// ---- mask::apply on the device -----------------------------------------------------------

constexpr int kWarps = 2;
constexpr int kMmaM = 2;                        // 32 rows per warp
constexpr int kNTiles = 4;                      // 32 keys
constexpr int kRows = kWarps * kMmaM * 16;      // 64
constexpr int kKeys = kNTiles * 8;              // 32

// Scores of 1 go in; out[r][c] is what apply left at tile row r, tile key c. Rows and
// columns come from the mma C layout exactly as fwd_kernel computes row0 and col0.
template <Kind K>
__global__ void apply_kernel(float* out, fmha::Params p, int m0, int n0, int kv_len, int q_len) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    float s[kMmaM][kNTiles][4];  // [32 rows, 32 keys] of this warp
    for (int mi = 0; mi < kMmaM; ++mi)
        for (int ni = 0; ni < kNTiles; ++ni)
            for (int e = 0; e < 4; ++e) s[mi][ni][e] = 1.f;
    const int row0 = m0 + warp * kMmaM * 16 + lane / 4;
    const int col0 = n0 + 2 * (lane % 4);
    fmha::mask::apply(s, fmha::mask::Rows<K>::make(p, q_len, kv_len), row0, col0);
    for (int mi = 0; mi < kMmaM; ++mi) {
        for (int h = 0; h < 2; ++h) {
            const int r = warp * kMmaM * 16 + mi * 16 + h * 8 + lane / 4;
            for (int ni = 0; ni < kNTiles; ++ni) {
                for (int e = 0; e < 2; ++e) out[r * kKeys + ni * 8 + 2 * (lane % 4) + e] = s[mi][ni][2 * h + e];
            }
        }
    }
}

struct MaskCase {
    const char* name;
    MaskDef mask;
    int q_len, kv_len;
    int m0, n0;  // first query row and first key of the tile
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

class MaskApply : public unit::DeviceTestP<MaskCase> {};

TEST_P(MaskApply, MatchesThePredicate) {
    const MaskCase c = GetParam();
    unit::DeviceBuffer<float> out;
    CUDA_ASSERT(out.alloc(kRows * kKeys));
    const fmha::Params p = params_of(c.mask);
    fmha::kernel::with_mask(
        c.mask.mask,
        [&](auto kind) {
            apply_kernel<decltype(kind)::value><<<1, kWarps * 32>>>(out.get(), p, c.m0, c.n0, c.kv_len, c.q_len);
            return 0;
        },
        0);
    CUDA_ASSERT_LAUNCH();
    std::vector<float> got;
    CUDA_ASSERT(out.download(&got));
    int masked = 0;
    for (int r = 0; r < kRows; ++r) {
        for (int j = 0; j < kKeys; ++j) {
            const bool ok = allowed(c.mask, c.m0 + r, c.n0 + j, c.q_len, c.kv_len);
            const float v = got[r * kKeys + j];
            masked += !ok;
            if (ok) {
                ASSERT_EQ(v, 1.f) << "row " << c.m0 + r << " key " << c.n0 + j << " is visible but was masked";
            } else {
                ASSERT_TRUE(std::isinf(v) && v < 0) << "row " << c.m0 + r << " key " << c.n0 + j
                                                    << " must be -inf, got " << v;
            }
        }
    }
    RecordProperty("masked", masked);
}

INSTANTIATE_TEST_SUITE_P(
    Mask, MaskApply,
    ::testing::Values(MaskCase{"padding_tail_inside_block", {MaskType::kPadding}, 100, 77, 0, 64},
                      MaskCase{"padding_whole_block_visible", {MaskType::kPadding}, 100, 128, 0, 64},
                      MaskCase{"padding_block_past_the_end", {MaskType::kPadding}, 100, 50, 0, 64},
                      MaskCase{"causal_square_on_diagonal", {MaskType::kCausal}, 128, 128, 64, 64},
                      MaskCase{"causal_square_below_diagonal", {MaskType::kCausal}, 128, 128, 64, 0},
                      MaskCase{"causal_q_shorter_on_diagonal", {MaskType::kCausal}, 40, 100, 0, 64},
                      MaskCase{"causal_decode_row", {MaskType::kCausal}, 1, 77, 0, 64},
                      MaskCase{"causal_diagonal_and_tail", {MaskType::kCausal}, 77, 77, 64, 64},
                      MaskCase{"sliding_window_both_edges", {MaskType::kSlidingWindow, 20}, 128, 128, 64, 48},
                      MaskCase{"sliding_window_left_edge", {MaskType::kSlidingWindow, 40}, 128, 128, 64, 32},
                      MaskCase{"sliding_window_of_one", {MaskType::kSlidingWindow, 1}, 128, 128, 64, 64},
                      MaskCase{"bidirectional_window", {MaskType::kBidirectionalWindow, 9}, 100, 100, 0, 16},
                      MaskCase{"bidirectional_window_tail", {MaskType::kBidirectionalWindow, 30}, 77, 77, 32, 64},
                      MaskCase{"chunked_small_chunks", {MaskType::kChunked, 0, 8}, 128, 128, 64, 64},
                      MaskCase{"chunked_q_shorter", {MaskType::kChunked, 0, 16}, 40, 100, 0, 64}),
    [](const ::testing::TestParamInfo<MaskCase>& info) { return std::string(info.param.name); });

// ---- the key-block schedule (host only) ----------------------------------------------------
//
// The kernels walk key blocks [begin, end) of each tile: [full_begin, full_end) without the
// mask, the rest with it, none outside. Skipping must never drop a visible key, running a
// block mask-free must never let a hidden key through, and a masked block must have hidden
// pairs, except that a local mask with no whole block masks all it visits.

enum class BlockClass { kNone, kPartial, kFull };  // visible (row, key) pairs: none, some, all

void PrintTo(BlockClass c, std::ostream* os) {
    *os << (c == BlockClass::kNone ? "none visible (skip)" : c == BlockClass::kFull ? "all visible (mask-free)"
                                                                                    : "partly visible (masked)");
}

BlockClass classify(const MaskDef& m, int m0, int q_rows, int n0, int block_n, int q_len, int kv_len) {
    int visible = 0;
    for (int r = m0; r < m0 + q_rows; ++r)
        for (int j = n0; j < n0 + block_n; ++j) visible += allowed(m, r, j, q_len, kv_len);
    return visible == 0 ? BlockClass::kNone : (visible == q_rows * block_n ? BlockClass::kFull : BlockClass::kPartial);
}

struct ScheduleCase {
    const char* name;
    MaskDef mask;
    int q_len, kv_len, block_m, block_n;
};

void PrintTo(const ScheduleCase& c, std::ostream* os) { *os << c.name; }

class BlockSchedule : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(BlockSchedule, SkippedMaskedAndFreeBlocksAreTheBruteForceClasses) {
    const ScheduleCase c = GetParam();
    for (int m0 = 0; m0 < c.q_len; m0 += c.block_m) {
        const int q_rows = fmha::min_int(c.q_len - m0, c.block_m);
        const fmha::mask::Blocks blk = block_range(c.mask, m0, m0 + q_rows - 1, c.q_len, c.kv_len, c.block_n);
        ASSERT_LE(blk.begin, blk.full_begin) << "m0 " << m0;
        ASSERT_LE(blk.full_begin, blk.full_end) << "m0 " << m0;
        ASSERT_LE(blk.full_end, blk.end) << "m0 " << m0;
        const int all_blocks = fmha::ceil_div(c.kv_len, c.block_n) + 1;  // one past the keys, too
        const bool any_full = blk.full_end > blk.full_begin;
        for (int nb = 0; nb < fmha::max_int(all_blocks, blk.end); ++nb) {
            const BlockClass got = classify(c.mask, m0, q_rows, nb * c.block_n, c.block_n, c.q_len, c.kv_len);
            const bool visited = nb >= blk.begin && nb < blk.end;
            const std::string where = "m-block at row " + std::to_string(m0) + ", key block " + std::to_string(nb) +
                                      " (blocks [" + std::to_string(blk.begin) + ", " + std::to_string(blk.end) +
                                      "), whole [" + std::to_string(blk.full_begin) + ", " +
                                      std::to_string(blk.full_end) + "))";
            if (!visited) {
                // Skipped blocks hold no visible pair; the range has no gaps at its ends.
                EXPECT_EQ(got, BlockClass::kNone) << where;
            } else if (!blk.masked(nb)) {
                EXPECT_EQ(got, BlockClass::kFull) << where;
            } else if (any_full || c.mask.mask == MaskType::kPadding || c.mask.mask == MaskType::kCausal) {
                EXPECT_EQ(got, BlockClass::kPartial) << where;
            } else {
                // No whole block: visited blocks are masked; only the ends must see something.
                if (nb == blk.begin || nb == blk.end - 1) EXPECT_NE(got, BlockClass::kNone) << where;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Mask, BlockSchedule,
    ::testing::Values(ScheduleCase{"padding_tail", {MaskType::kPadding}, 77, 77, 128, 64},
                      ScheduleCase{"padding_whole_blocks", {MaskType::kPadding}, 200, 128, 64, 64},
                      ScheduleCase{"causal_square", {MaskType::kCausal}, 300, 300, 128, 64},
                      ScheduleCase{"causal_square_exact_blocks", {MaskType::kCausal}, 128, 128, 64, 64},
                      ScheduleCase{"causal_q_shorter", {MaskType::kCausal}, 100, 1000, 64, 64},
                      ScheduleCase{"causal_decode", {MaskType::kCausal}, 1, 257, 128, 64},
                      ScheduleCase{"causal_block_m_below_block_n", {MaskType::kCausal}, 200, 200, 64, 128},
                      ScheduleCase{"sliding_window_wide", {MaskType::kSlidingWindow, 300}, 1000, 1000, 128, 64},
                      ScheduleCase{"sliding_window_narrow", {MaskType::kSlidingWindow, 20}, 500, 500, 128, 64},
                      ScheduleCase{"sliding_window_q_shorter", {MaskType::kSlidingWindow, 100}, 77, 1000, 64, 128},
                      ScheduleCase{"bidirectional_wide", {MaskType::kBidirectionalWindow, 200}, 1000, 1000, 128, 64},
                      ScheduleCase{"bidirectional_narrow", {MaskType::kBidirectionalWindow, 5}, 300, 300, 64, 64},
                      ScheduleCase{"chunked_big_chunks", {MaskType::kChunked, 0, 256}, 1000, 1000, 128, 64},
                      ScheduleCase{"chunked_small_chunks", {MaskType::kChunked, 0, 32}, 300, 300, 128, 64},
                      ScheduleCase{"chunked_decode", {MaskType::kChunked, 0, 64}, 1, 1000, 128, 64}),
    [](const ::testing::TestParamInfo<ScheduleCase>& info) { return std::string(info.param.name); });

}  // namespace
