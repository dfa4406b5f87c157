// src/fmha/mask/mask.h: key_limit on the host, mask::apply on two warps' score fragments
// against the mask written out as a predicate, and the key-block schedule flash_sm80.h
// derives from key_limit (which blocks it skips, masks, or runs mask-free).
#include <cmath>
#include <string>
#include <vector>

#include "fmha/mask/mask.h"
#include "unit_test.h"

namespace {

using fmha::mask::key_limit;

// The masks' definition (mask.h, Params): may query row r of a sequence see key j?
bool allowed(bool causal, int r, int j, int q_len, int kv_len) {
    return j < kv_len && (!causal || j <= r + (kv_len - q_len));
}

int limit(bool causal, int r, int kv_len, int q_len) {
    return causal ? key_limit<true>(r, kv_len, q_len) : key_limit<false>(r, kv_len, q_len);
}

// ---- key_limit (host only) ---------------------------------------------------------------

TEST(KeyLimit, PaddingIsTheKeyLengthOnEveryRow) {
    for (int r : {0, 1, 63, 1000}) EXPECT_EQ(key_limit<false>(r, 77, 100), 77) << "row " << r;
}

TEST(KeyLimit, CausalIsBottomRightAligned) {
    EXPECT_EQ(key_limit<true>(0, 64, 64), 1);      // s_q == s_kv: row r sees keys 0..r
    EXPECT_EQ(key_limit<true>(63, 64, 64), 64);
    EXPECT_EQ(key_limit<true>(0, 100, 40), 61);    // s_q < s_kv: row r sees keys 0..r+60
    EXPECT_EQ(key_limit<true>(39, 100, 40), 100);  // the last query row sees every key
    EXPECT_EQ(key_limit<true>(0, 77, 1), 77);      // decode: the one query row sees everything
    EXPECT_LE(key_limit<true>(0, 10, 20), 0);      // a row above the diagonal's start sees nothing
}

// key_limit is "one past the last visible key": the visible keys are exactly [0, limit).
TEST(KeyLimit, VisibleKeysAreThePrefixBelowTheLimit) {
    for (bool causal : {false, true}) {
        for (int q_len : {1, 5, 16, 33}) {
            for (int kv_len : {1, 7, 33, 64}) {
                for (int r = 0; r < q_len; ++r) {
                    const int lim = limit(causal, r, kv_len, q_len);
                    for (int j = 0; j < kv_len + 2; ++j) {
                        ASSERT_EQ(allowed(causal, r, j, q_len, kv_len), j < lim)
                            << (causal ? "causal" : "padding") << " q_len " << q_len << " kv_len " << kv_len
                            << " row " << r << " key " << j;
                    }
                }
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
template <bool kCausal>
__global__ void apply_kernel(float* out, int m0, int n0, int kv_len, int q_len) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    float s[kMmaM][kNTiles][4];  // [32 rows, 32 keys] of this warp
    for (int mi = 0; mi < kMmaM; ++mi)
        for (int ni = 0; ni < kNTiles; ++ni)
            for (int e = 0; e < 4; ++e) s[mi][ni][e] = 1.f;
    const int row0 = m0 + warp * kMmaM * 16 + lane / 4;
    const int col0 = n0 + 2 * (lane % 4);
    fmha::mask::apply<kCausal>(s, row0, col0, kv_len, q_len);
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
    bool causal;
    int q_len, kv_len;
    int m0, n0;  // first query row and first key of the tile
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

class MaskApply : public unit::DeviceTestP<MaskCase> {};

TEST_P(MaskApply, MatchesThePredicate) {
    const MaskCase c = GetParam();
    unit::DeviceBuffer<float> out;
    CUDA_ASSERT(out.alloc(kRows * kKeys));
    if (c.causal) {
        apply_kernel<true><<<1, kWarps * 32>>>(out.get(), c.m0, c.n0, c.kv_len, c.q_len);
    } else {
        apply_kernel<false><<<1, kWarps * 32>>>(out.get(), c.m0, c.n0, c.kv_len, c.q_len);
    }
    CUDA_ASSERT_LAUNCH();
    std::vector<float> got;
    CUDA_ASSERT(out.download(&got));
    int masked = 0;
    for (int r = 0; r < kRows; ++r) {
        for (int j = 0; j < kKeys; ++j) {
            const bool ok = allowed(c.causal, c.m0 + r, c.n0 + j, c.q_len, c.kv_len);
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
    ::testing::Values(MaskCase{"padding_tail_inside_block", false, 100, 77, 0, 64},
                      MaskCase{"padding_whole_block_visible", false, 100, 128, 0, 64},
                      MaskCase{"padding_block_past_the_end", false, 100, 50, 0, 64},
                      MaskCase{"causal_square_on_diagonal", true, 128, 128, 64, 64},
                      MaskCase{"causal_square_below_diagonal", true, 128, 128, 64, 0},
                      MaskCase{"causal_q_shorter_on_diagonal", true, 40, 100, 0, 64},
                      MaskCase{"causal_decode_row", true, 1, 77, 0, 64},
                      MaskCase{"causal_diagonal_and_tail", true, 77, 77, 64, 64}),
    [](const ::testing::TestParamInfo<MaskCase>& info) { return std::string(info.param.name); });

// ---- the key-block schedule (host only) ----------------------------------------------------
//
// fwd_kernel walks key blocks [0, n_blocks) of each m-block: [n_unmasked, n_blocks) with
// mask::apply, [0, n_unmasked) without it, none past n_blocks. This is its arithmetic, copied
// (keep in sync with flash_sm80.h): skipping must never drop a visible key, running a block
// mask-free must never let a hidden key through, and no block is masked needlessly.

struct BlockRange {
    int n_blocks, n_unmasked;
};

BlockRange kernel_block_range(bool causal, int m0, int q_rows, int kv_len, int q_len, int block_n) {
    const int key_end = limit(causal, m0 + q_rows - 1, kv_len, q_len);
    const int n_blocks = key_end > 0 ? fmha::ceil_div(key_end, block_n) : 0;
    const int n_unmasked = fmha::max_int(0, limit(causal, m0, kv_len, q_len)) / block_n;
    return {n_blocks, n_unmasked};
}

enum class BlockClass { kNone, kPartial, kFull };  // visible (row, key) pairs: none, some, all

void PrintTo(BlockClass c, std::ostream* os) {
    *os << (c == BlockClass::kNone ? "none visible (skip)" : c == BlockClass::kFull ? "all visible (mask-free)"
                                                                                    : "partly visible (masked)");
}

BlockClass classify(bool causal, int m0, int q_rows, int n0, int block_n, int q_len, int kv_len) {
    int visible = 0;
    for (int r = m0; r < m0 + q_rows; ++r)
        for (int j = n0; j < n0 + block_n; ++j) visible += allowed(causal, r, j, q_len, kv_len);
    return visible == 0 ? BlockClass::kNone : (visible == q_rows * block_n ? BlockClass::kFull : BlockClass::kPartial);
}

struct ScheduleCase {
    const char* name;
    bool causal;
    int q_len, kv_len, block_m, block_n;
};

void PrintTo(const ScheduleCase& c, std::ostream* os) { *os << c.name; }

class BlockSchedule : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(BlockSchedule, SkippedMaskedAndFreeBlocksAreTheBruteForceClasses) {
    const ScheduleCase c = GetParam();
    for (int m0 = 0; m0 < c.q_len; m0 += c.block_m) {
        const int q_rows = fmha::min_int(c.q_len - m0, c.block_m);
        const BlockRange range = kernel_block_range(c.causal, m0, q_rows, c.kv_len, c.q_len, c.block_n);
        ASSERT_LE(range.n_unmasked, range.n_blocks) << "m0 " << m0;
        const int all_blocks = fmha::ceil_div(c.kv_len, c.block_n) + 1;  // one past the keys, too
        for (int nb = 0; nb < fmha::max_int(all_blocks, range.n_blocks); ++nb) {
            const BlockClass want = nb >= range.n_blocks     ? BlockClass::kNone
                                    : nb < range.n_unmasked ? BlockClass::kFull
                                                            : BlockClass::kPartial;
            EXPECT_EQ(classify(c.causal, m0, q_rows, nb * c.block_n, c.block_n, c.q_len, c.kv_len), want)
                << "m-block at row " << m0 << ", key block " << nb << " (n_blocks " << range.n_blocks
                << ", n_unmasked " << range.n_unmasked << ")";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Mask, BlockSchedule,
    ::testing::Values(ScheduleCase{"padding_tail", false, 77, 77, 128, 64},
                      ScheduleCase{"padding_whole_blocks", false, 200, 128, 64, 64},
                      ScheduleCase{"causal_square", true, 300, 300, 128, 64},
                      ScheduleCase{"causal_square_exact_blocks", true, 128, 128, 64, 64},
                      ScheduleCase{"causal_q_shorter", true, 100, 1000, 64, 64},
                      ScheduleCase{"causal_decode", true, 1, 257, 128, 64},
                      ScheduleCase{"causal_block_m_below_block_n", true, 200, 200, 64, 128}),
    [](const ::testing::TestParamInfo<ScheduleCase>& info) { return std::string(info.param.name); });

}  // namespace
