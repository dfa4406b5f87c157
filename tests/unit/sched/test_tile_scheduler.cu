// src/fmha/sched/tile_scheduler.h: the grid static_grid builds, and the tile static_tile
// gives each CTA. Every CTA records its tile; the host checks that each (m_block, head, batch)
// is handed out exactly once, that neighbouring CTAs share a head (m-block fastest), and the
// order: ascending m-blocks, or for causal heaviest first (most keys under the diagonal).
#include <string>
#include <vector>

#include "fmha/mask/mask.h"
#include "fmha/sched/tile_scheduler.h"
#include "unit_test.h"

namespace {

using fmha::sched::Tile;

// out[linear CTA id] = its tile; linear ids in launch order (x fastest, then y, then z).
template <bool kHeaviestFirst>
__global__ void record_kernel(Tile* out) {
    const int id = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[id] = fmha::sched::static_tile<kHeaviestFirst>();
}

struct Shape {
    const char* name;
    int m_blocks, heads, batch;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

TEST(StaticGrid, IsMBlocksByHeadsByBatch) {
    const dim3 grid = fmha::sched::static_grid(7, 3, 2);
    EXPECT_EQ(grid.x, 7u);
    EXPECT_EQ(grid.y, 3u);
    EXPECT_EQ(grid.z, 2u);
}

class TileScheduler : public unit::DeviceTestP<Shape> {
  protected:
    // tiles[linear CTA id] for the whole grid.
    void record(bool heaviest_first, std::vector<Tile>* tiles) {
        const Shape& s = GetParam();
        const dim3 grid = fmha::sched::static_grid(s.m_blocks, s.heads, s.batch);
        unit::DeviceBuffer<Tile> out;
        CUDA_ASSERT(out.alloc(static_cast<size_t>(s.m_blocks) * s.heads * s.batch, 0xff));
        if (heaviest_first) {
            record_kernel<true><<<grid, 1>>>(out.get());
        } else {
            record_kernel<false><<<grid, 1>>>(out.get());
        }
        CUDA_ASSERT_LAUNCH();
        CUDA_ASSERT(out.download(tiles));
    }

    void expect_each_tile_once(const std::vector<Tile>& tiles) {
        const Shape& s = GetParam();
        std::vector<int> seen(tiles.size(), 0);
        for (const Tile& t : tiles) {
            ASSERT_TRUE(t.m_block >= 0 && t.m_block < s.m_blocks && t.head >= 0 && t.head < s.heads && t.batch >= 0 &&
                        t.batch < s.batch)
                << "tile (" << t.m_block << ", " << t.head << ", " << t.batch << ") is outside the problem";
            ++seen[(static_cast<size_t>(t.batch) * s.heads + t.head) * s.m_blocks + t.m_block];
        }
        for (size_t i = 0; i < seen.size(); ++i) {
            EXPECT_EQ(seen[i], 1) << "tile (m_block " << i % s.m_blocks << ", head " << (i / s.m_blocks) % s.heads
                                  << ", batch " << i / (s.m_blocks * s.heads) << ")";
        }
    }
};

TEST_P(TileScheduler, AscendingOrderCoversEveryTileOnce) {
    std::vector<Tile> tiles;
    ASSERT_NO_FATAL_FAILURE(record(false, &tiles));
    ASSERT_NO_FATAL_FAILURE(expect_each_tile_once(tiles));
    const Shape& s = GetParam();
    for (size_t id = 0; id < tiles.size(); ++id) {
        // m-block fastest: consecutive CTAs work on one (head, batch) and share its K and V.
        EXPECT_EQ(tiles[id].m_block, static_cast<int>(id % s.m_blocks)) << "CTA " << id;
        EXPECT_EQ(tiles[id].head, static_cast<int>(id / s.m_blocks % s.heads)) << "CTA " << id;
        EXPECT_EQ(tiles[id].batch, static_cast<int>(id / (s.m_blocks * s.heads))) << "CTA " << id;
    }
}

// Causal (bottom-right aligned): a higher m-block sees more keys. Within each (head, batch)
// the CTAs must start with the most work and never go up.
TEST_P(TileScheduler, CausalHeaviestFirstCoversEveryTileOnce) {
    std::vector<Tile> tiles;
    ASSERT_NO_FATAL_FAILURE(record(true, &tiles));
    ASSERT_NO_FATAL_FAILURE(expect_each_tile_once(tiles));
    const Shape& s = GetParam();
    constexpr int kBlockM = 128;
    const int q_len = s.m_blocks * kBlockM - 5, kv_len = q_len + 300;
    fmha::Params causal;
    causal.mask = fmha::MaskType::kCausal;
    const auto rows = fmha::mask::Rows<fmha::mask::Kind::kCausal>::make(causal, q_len, kv_len);
    const auto work = [&](int m_block) {  // (row, key) pairs the causal mask leaves
        long keys = 0;
        for (int r = m_block * kBlockM; r < fmha::min_int((m_block + 1) * kBlockM, q_len); ++r)
            keys += fmha::max_int(0, rows.end(r) - rows.begin(r));
        return keys;
    };
    for (size_t id = 0; id < tiles.size(); ++id) {
        if (id % s.m_blocks == 0) {
            EXPECT_EQ(tiles[id].m_block, s.m_blocks - 1) << "CTA " << id << " starts its head on the heaviest block";
        } else {
            EXPECT_EQ(tiles[id].m_block, tiles[id - 1].m_block - 1) << "CTA " << id;
            // Among full blocks the work never goes up. The last block holds q_len's tail
            // (123 of 128 rows here) and can hold a little less than the one below it; it
            // still goes first, since it is the one whose rows see the most keys.
            if ((tiles[id - 1].m_block + 1) * kBlockM <= q_len)
                EXPECT_LE(work(tiles[id].m_block), work(tiles[id - 1].m_block)) << "CTA " << id;
        }
        EXPECT_EQ(tiles[id].head, static_cast<int>(id / s.m_blocks % s.heads)) << "CTA " << id;
    }
}

// tile_at (host and device): the linear tile order of the ws family's 1-D and persistent
// grids. Checked on the host over the same shapes.
class TileAt : public ::testing::TestWithParam<Shape> {};

TEST_P(TileAt, AscendingCoversEveryTileOnceMBlockFastest) {
    const Shape& s = GetParam();
    const int n = s.m_blocks * s.heads * s.batch;
    std::vector<int> seen(n, 0);
    for (int t = 0; t < n; ++t) {
        const Tile tile = fmha::sched::tile_at(t, s.m_blocks, s.heads, s.batch, false);
        ASSERT_TRUE(tile.m_block >= 0 && tile.m_block < s.m_blocks && tile.head >= 0 && tile.head < s.heads &&
                    tile.batch >= 0 && tile.batch < s.batch) << "tile " << t;
        ++seen[(tile.batch * s.heads + tile.head) * s.m_blocks + tile.m_block];
        EXPECT_EQ(tile.m_block, t % s.m_blocks) << "tile " << t;
        EXPECT_EQ(tile.head, t / s.m_blocks % s.heads) << "tile " << t;
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "tile " << i;
}

// Heaviest first inside sections of `section` (head, batch) pairs: every tile once; inside
// a section the m-block (a causal tile's work) never goes up and the pairs stay inside it;
// sections come in (head, batch) order. Sections of 1, 2, 3 (a narrower last section with
// most shapes) and all pairs (the whole launch heaviest first).
TEST_P(TileAt, HeaviestFirstBySectionCoversEveryTileOnce) {
    const Shape& s = GetParam();
    const int hb_count = s.heads * s.batch;
    const int n = s.m_blocks * hb_count;
    for (const int section : {1, 2, 3, hb_count}) {
        std::vector<int> seen(n, 0);
        int prev_m = s.m_blocks - 1, prev_section = 0;
        for (int t = 0; t < n; ++t) {
            const Tile tile = fmha::sched::tile_at(t, s.m_blocks, s.heads, s.batch, true, section);
            ASSERT_TRUE(tile.m_block >= 0 && tile.m_block < s.m_blocks && tile.head >= 0 && tile.head < s.heads &&
                        tile.batch >= 0 && tile.batch < s.batch) << "tile " << t << " section " << section;
            ++seen[(tile.batch * s.heads + tile.head) * s.m_blocks + tile.m_block];
            const int sec = (tile.batch * s.heads + tile.head) / section;
            if (sec != prev_section) {
                EXPECT_EQ(sec, prev_section + 1) << "tile " << t << " section " << section;
                EXPECT_EQ(tile.m_block, s.m_blocks - 1) << "a section starts on its heaviest blocks";
                prev_section = sec;
            } else {
                EXPECT_LE(tile.m_block, prev_m) << "tile " << t << " section " << section;
            }
            prev_m = tile.m_block;
        }
        for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "tile " << i << " section " << section;
    }
}

TEST(L2Section, HoldsAsManyHeadsAsFitBetweenOneAndAll) {
    using fmha::sched::kL2SectionBytes;
    using fmha::sched::l2_section;
    EXPECT_EQ(l2_section(kL2SectionBytes / 4, 100), 4);
    EXPECT_EQ(l2_section(kL2SectionBytes / 4 + 1, 100), 3);
    EXPECT_EQ(l2_section(kL2SectionBytes * 2, 100), 1);   // one head's K/V exceeds the budget
    EXPECT_EQ(l2_section(1024, 7), 7);                    // never more than the pairs there are
    EXPECT_EQ(l2_section(0, 7), 7);
}

INSTANTIATE_TEST_SUITE_P(Grids, TileAt,
                         ::testing::Values(Shape{"one_tile", 1, 1, 1}, Shape{"m7_h3_b2", 7, 3, 2},
                                           Shape{"m33_h5_b4", 33, 5, 4}, Shape{"m2_h1_b300", 2, 1, 300}),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(Grids, TileScheduler,
                         ::testing::Values(Shape{"one_tile", 1, 1, 1}, Shape{"m7_h3_b2", 7, 3, 2},
                                           Shape{"m33_h5_b4", 33, 5, 4}, Shape{"m2_h1_b300", 2, 1, 300}),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

}  // namespace
