// src/fmha/kernel/decode/plan.h, host side: the mma path's split choice (one wave of resident
// CTAs, never more; beyond one wave, a last wave mostly busy; no split under
// kMmaMinKeysPerSplit keys; within the workspace), when short CTAs beyond one wave share an
// SM (pair_up), when a tile's splits merge in a cluster (cluster_splits), when a launch
// overlaps the grid ahead (depend_on_previous), the units' KV head groups, and the workspace
// layout (arrival counters first, 256-byte aligned, then the partials).
#include "fmha/kernel/decode/plan.h"
#include "unit_test.h"

namespace {

// The Configs generator/families/decode.py renders for these tiles: s_q <= 16, the path, KV
// heads a CTA, the OneHead and Quad siblings' keys a stage.
using OneHeadConfig = fmha::decode::Config<16, true, 1, 0, 0>;
using Mma = fmha::decode::MmaTraits<OneHeadConfig, __nv_bfloat16, 128, 128, 16, 64, 1, 4, false>;
using Warp = fmha::decode::WarpTraits<fmha::decode::Config<16, false, 1, 0, 0>, __nv_bfloat16, 128, 128, 4, 4, 4, 1,
                                      false>;
using Mma64 = fmha::decode::MmaTraits<fmha::decode::Config<16, true, 2, 128, 64>, __nv_bfloat16, 64, 64, 32, 64, 1, 4,
                                      false>;  // two KV heads a CTA
using Mma32 = fmha::decode::MmaTraits<fmha::decode::Config<16, true, 4, 256, 0>, __nv_bfloat16, 32, 32, 64, 64, 1, 4,
                                      false>;  // four

// b sequences, h = 32 query heads over h_kv KV heads, s_q rows, s_kv keys.
fmha::Params problem(int b, int h_kv, int s_q, int s_kv) {
    fmha::Params p;
    p.b = b;
    p.h = 32;
    p.h_kv = h_kv;
    p.d = p.dv = 128;
    p.s_q_max = s_q;
    p.s_kv_max = s_kv;
    return p;
}

int mma_splits(const fmha::Params& p, int sms, int ctas_per_sm, size_t workspace = SIZE_MAX) {
    return fmha::decode::choose_splits_mma<Mma>(p, sms, ctas_per_sm, workspace);
}

TEST(DecodeSplits, FillOneWaveOfResidentCtas) {
    EXPECT_EQ(mma_splits(problem(8, 8, 1, 4096), 132, 1), 2);    // 64 tiles -> 128 CTAs of 132
    EXPECT_EQ(mma_splits(problem(8, 8, 1, 4096), 132, 2), 4);    // 256 of 264
    EXPECT_EQ(mma_splits(problem(64, 8, 1, 4096), 132, 1), 1);   // 512 tiles: more than a wave
    // 16 rows x 4 query heads per KV head -> 4 row tiles per (b, KV head): 32 tiles -> 4 splits
    EXPECT_EQ(mma_splits(problem(1, 8, 16, 65536), 132, 1), 4);
}

TEST(DecodeSplits, BeyondOneWaveFillTheLastWave) {
    EXPECT_EQ(mma_splits(problem(64, 8, 1, 65536), 132, 1), 1);  // 512 of 528 slots (4 waves) busy
    EXPECT_EQ(mma_splits(problem(32, 8, 1, 65536), 132, 1), 1);  // 256 of 264
    EXPECT_EQ(mma_splits(problem(24, 8, 1, 65536), 132, 1), 2);  // 192 of 264: 384 of 396
    EXPECT_EQ(mma_splits(problem(20, 8, 1, 65536), 132, 1), 3);  // 160 / 264, 320 / 396, 480 / 528
    EXPECT_EQ(mma_splits(problem(24, 8, 1, 8192), 132, 1), 2);
    EXPECT_EQ(mma_splits(problem(24, 8, 1, 8191), 132, 1), 1);    // none under kMmaMinKeysPerWaveSplit
    EXPECT_EQ(mma_splits(problem(20, 8, 1, 8192), 132, 1), 2);    // 3 would be busier, but too short
    const fmha::Params p = problem(20, 8, 1, 65536);
    EXPECT_EQ(mma_splits(p, 132, 1, fmha::decode::partial_bytes<Mma>(p, 3) - 1), 2);  // the workspace
}

TEST(DecodeSplits, ShortCtasBeyondOneWaveShareAnSm) {
    const auto pair = [](const fmha::Params& p, int sms, int ctas_per_sm) {
        return fmha::decode::pair_up<Mma>(p, mma_splits(p, sms, ctas_per_sm), sms, ctas_per_sm);
    };
    EXPECT_TRUE(pair(problem(64, 8, 1, 4096), 132, 1));    // 512 CTAs of 4096 keys
    EXPECT_TRUE(pair(problem(20, 8, 1, 4096), 132, 1));    // 160 of 132: one wave paired
    EXPECT_TRUE(pair(problem(64, 8, 1, 1000), 132, 1));
    EXPECT_FALSE(pair(problem(64, 8, 1, 4097), 132, 1));   // 4160 keys: longer CTAs stream alone
    EXPECT_FALSE(pair(problem(20, 8, 1, 16384), 132, 1));  // 3 splits of 5504 keys
    EXPECT_FALSE(pair(problem(8, 8, 1, 4096), 132, 1));    // 2 splits, 128 CTAs: one wave
    EXPECT_FALSE(pair(problem(64, 8, 1, 4096), 132, 4));   // within a wave of 4 per SM
    // The footprints: two CTAs to an SM at kSmemBytes, one at kSoloSmemBytes (228 KB an SM,
    // 1 KB each CTA).
    EXPECT_LE(2 * (Mma::kSmemBytes + 1024), 228 * 1024);
    EXPECT_GT(2 * (Mma::kSoloSmemBytes + 1024), 228 * 1024);
    // d = 32 and 64 take 4 and 2 KV heads a CTA: the same 32 KB stages, three to the ring.
    EXPECT_EQ(Mma32::kStageBytes, 32 * 1024);
    EXPECT_EQ(Mma64::kStageBytes, 32 * 1024);
    EXPECT_EQ(Mma64::kStages, 3);
    EXPECT_LE(2 * (Mma64::kSmemBytes + 1024), 228 * 1024);
    EXPECT_GT(2 * (Mma64::kSoloSmemBytes + 1024), 228 * 1024);
    EXPECT_LE(2 * (Mma32::kSmemBytes + 1024), 228 * 1024);
}

TEST(DecodeLaunch, DependentBeyondOneWaveOrInANearlyFullPairedWaveOfWholeUnitsOfSm90Code) {
    using fmha::decode::depend_on_previous;
    for (bool whole : {false, true}) {
        for (bool paired : {false, true}) {
            EXPECT_TRUE(depend_on_previous(512, 264, true, whole, paired));  // b = 64 at 4k: two paired waves
            EXPECT_TRUE(depend_on_previous(265, 264, true, whole, paired));
            EXPECT_TRUE(depend_on_previous(133, 132, true, whole, paired));
            EXPECT_FALSE(depend_on_previous(160, 264, true, whole, paired));   // b = 20 at 4k: free slots
            EXPECT_FALSE(depend_on_previous(512, 264, false, whole, paired));  // before SM90: no such launch
            EXPECT_FALSE(depend_on_previous(256, 264, false, whole, paired));
        }
    }
    // One wave of whole units two to an SM, at most a sixteenth of its slots free: d = 64,
    // b = 62-66 at h_kv = 8.
    EXPECT_TRUE(depend_on_previous(264, 264, true, true, true));
    EXPECT_TRUE(depend_on_previous(256, 264, true, true, true));
    EXPECT_TRUE(depend_on_previous(248, 264, true, true, true));
    EXPECT_FALSE(depend_on_previous(244, 264, true, true, true));  // b = 61: slower on the H200
    EXPECT_FALSE(depend_on_previous(240, 264, true, true, true));
    // The same wave in splits stays a plain launch, and so does one CTA an SM (d = 256, b = 16).
    EXPECT_FALSE(depend_on_previous(264, 264, true, false, true));
    EXPECT_FALSE(depend_on_previous(256, 264, true, false, true));
    EXPECT_FALSE(depend_on_previous(128, 132, true, true, false));
    EXPECT_FALSE(depend_on_previous(132, 132, true, true, false));
}

TEST(DecodeHeads, QuadRunsWhereOneHeadUnitsFillHalfToThreeQuartersOfAWaveOfFour) {
    // d = 64: a one-head sibling of 16 KB stages, four CTAs to an SM (at most 128 registers:
    // __launch_bounds__ min blocks), the quarter of an SM's shared memory each.
    using Quad = Mma64::Quad;
    static_assert(Mma64::kHasQuad && !Mma::kHasQuad && !Mma32::kHasQuad && !Quad::kHasQuad);
    static_assert(Quad::kHeads == 1 && Quad::kBlockN == 64 && Quad::kStageBytes == 16 * 1024);
    static_assert(Quad::kQuad && Quad::kMinCtas == 4 && !Mma64::kQuad && Mma64::kMinCtas == 1);
    EXPECT_LE(4 * (Quad::kSoloSmemBytes + 1024), 228 * 1024);
    const auto quad = [](int b, int s_kv) {
        fmha::Params p = problem(b, 8, 1, s_kv);
        p.d = p.dv = 64;
        return fmha::decode::quad_fits<Mma64>(p, 132, 1, 4);
    };
    EXPECT_TRUE(quad(34, 4096));    // 272 one-head units on 528 slots
    EXPECT_TRUE(quad(40, 4096));    // 320
    EXPECT_TRUE(quad(48, 1024));    // 384
    EXPECT_TRUE(quad(49, 8192));    // 392: at most three quarters, at most 8k keys
    EXPECT_FALSE(quad(48, 8193));   // past 8k keys the two-head tile streams as fast or faster
    EXPECT_FALSE(quad(34, 65536));
    EXPECT_FALSE(quad(50, 4096));   // 400: more than three quarters, the two-head pairs even out
    EXPECT_FALSE(quad(64, 4096));   // 512
    EXPECT_FALSE(quad(33, 4096));   // 264: half a wave, where the two-head tile splits
    EXPECT_FALSE(quad(16, 4096));   // 128: OneHead's wave
}

TEST(DecodeHeads, UnitsCoverTheKvHeadsInGroups) {
    // d = 64: two KV heads a unit, d = 32: four; a last group with fewer heads (h_kv = 5, 1).
    EXPECT_EQ(Mma64::kHeads, 2);
    EXPECT_EQ(Mma32::kHeads, 4);
    EXPECT_EQ(Mma::kHeads, 1);
    fmha::Params p = problem(64, 8, 1, 4096);
    p.d = p.dv = 64;
    EXPECT_EQ(fmha::decode::make_shape<Mma64>(p, 1).units, 64 * 4);
    EXPECT_EQ(fmha::decode::make_shape<Mma32>(p, 3).units, 64 * 2 * 3);
    EXPECT_EQ(fmha::decode::make_shape<Mma>(p, 1).units, 64 * 8);
    p.h = 20;
    p.h_kv = 5;
    EXPECT_EQ(fmha::decode::make_shape<Mma64>(p, 1).units, 64 * 3);
    EXPECT_EQ(fmha::decode::make_shape<Mma32>(p, 1).units, 64 * 2);
    p.h_kv = 1;  // MQA: one group, its 20 rows two row tiles
    EXPECT_EQ(fmha::decode::make_shape<Mma32>(p, 1).units, 64 * 2);
    // fewer units, more splits to fill a wave: b = 8, 4k at d = 64 is 32 units of two heads
    p = problem(8, 8, 1, 4096);
    p.d = p.dv = 64;
    EXPECT_EQ(fmha::decode::choose_splits_mma<Mma64>(p, 132, 1, SIZE_MAX), 4);
    // ... so where the one-head units fit a wave (b = 8: 64 of 132) the launch runs OneHead,
    // the same 32 KB stages of one head
    using OneHead64 = fmha::decode::MmaTraits<OneHeadConfig, __nv_bfloat16, 64, 64, 16, 128, 1, 4, false>;
    using OneHead32 = fmha::decode::MmaTraits<OneHeadConfig, __nv_bfloat16, 32, 32, 16, 256, 1, 4, false>;
    static_assert(std::is_same_v<Mma64::OneHead, OneHead64> && std::is_same_v<Mma32::OneHead, OneHead32>);
    EXPECT_TRUE(fmha::decode::one_head_fits<Mma64>(p, 132, 1));
    EXPECT_TRUE(fmha::decode::one_head_fits<Mma64>(problem(16, 8, 1, 4096), 132, 1));     // 128 units
    EXPECT_FALSE(fmha::decode::one_head_fits<Mma64>(problem(20, 8, 1, 4096), 132, 1));    // 160
    EXPECT_FALSE(fmha::decode::one_head_fits<Mma64>(problem(64, 8, 1, 65536), 132, 1));
    EXPECT_TRUE(fmha::decode::one_head_fits<Mma64>(problem(64, 8, 1, 65536), 132, 4));    // 512 of 528
    // the workspace still holds a counter per (sequence, KV head, row tile) and each head's
    // partials: the same bytes as one head a unit
    EXPECT_EQ(fmha::decode::partial_bytes<Mma64>(p, 4),
              fmha::decode::counter_bytes<Mma64>(p, fmha::decode::make_shape<Mma64>(p, 4)) +
                  size_t(8) * 8 * 16 * 4 * (64 + 2) * sizeof(float));
}

TEST(DecodeClusters, SplitsMergeInAClusterWhereTheClustersHoldTheWave) {
    // An H100 at one CTA an SM (kSoloSmemBytes): 66 clusters of 2 (132 CTAs), 15 of 8 (120).
    fmha::decode::MmaSetup setup{cudaSuccess, 1, 2, {}};
    setup.clusters[0][2] = 66;
    setup.clusters[0][8] = 15;
    setup.clusters[1][2] = 132;
    const auto clustered = [&](const fmha::Params& p, bool paired) {
        return fmha::decode::cluster_splits<Mma>(p, setup, mma_splits(p, 132, 1), paired, 132);
    };
    EXPECT_TRUE(clustered(problem(8, 8, 1, 4096), false));    // 64 tiles x 2 splits: 64 clusters of 66
    EXPECT_FALSE(clustered(problem(1, 8, 1, 4096), false));   // 8 tiles x 16: more than a cluster holds
    EXPECT_FALSE(clustered(problem(64, 8, 1, 4096), false));  // one split: nothing to merge
    // ... so b = 1 runs 8 splits, in clusters, rather than 16 through L2; 2 sequences (16
    // tiles) find no size from 4 to 7 that fits in this setup (2 would: not under half)
    EXPECT_EQ(fmha::decode::cluster_fallback<Mma>(problem(1, 8, 1, 4096), setup, 16, 132), 8);
    EXPECT_EQ(fmha::decode::cluster_fallback<Mma>(problem(1, 8, 1, 8192), setup, 16, 132), 8);   // 1024 keys
    EXPECT_EQ(fmha::decode::cluster_fallback<Mma>(problem(1, 8, 1, 16384), setup, 16, 132), 16);  // 2048: no
    EXPECT_EQ(fmha::decode::cluster_fallback<Mma>(problem(2, 8, 1, 4096), setup, 8, 132), 8);
    setup.clusters[0][5] = 24;
    EXPECT_EQ(fmha::decode::cluster_fallback<Mma>(problem(2, 8, 1, 4096), setup, 8, 132), 5);
    EXPECT_EQ(fmha::decode::cluster_fallback<Mma>(problem(8, 8, 1, 4096), setup, 2, 132), 2);
    EXPECT_TRUE(clustered(problem(8, 8, 1, 8192), false));    // 2 splits of 4096 keys
    EXPECT_FALSE(clustered(problem(24, 8, 1, 8192), false));  // 384 CTAs of 4096 keys: three waves
    EXPECT_FALSE(clustered(problem(8, 8, 1, 8193), false));   // longer: the merge is a small share
    setup.clusters[0][2] = 60;                                // a part with fewer whole pairs of SMs
    EXPECT_FALSE(clustered(problem(8, 8, 1, 4096), false));
    EXPECT_TRUE(clustered(problem(8, 8, 1, 4096), true));     // paired: 132 of 2 hold 264 CTAs
    setup.clusters[0][2] = 0;                                 // code before SM90: no clusters
    EXPECT_FALSE(clustered(problem(8, 8, 1, 4096), false));
    // the cluster's partials sit after the warps' merge, inside the smallest footprint
    EXPECT_LE(Mma::kSmemMerge + Mma::kSmemPartial, Mma::kSmemBytes);
    EXPECT_LE(Mma64::kSmemMerge + Mma64::kSmemPartial, Mma64::kSmemBytes);
}

TEST(DecodeSplits, NoSplitUnderTheMinimumKeys) {
    EXPECT_EQ(mma_splits(problem(1, 8, 1, 4096), 132, 1), 4096 / fmha::decode::kMmaMinKeysPerSplit);
    EXPECT_EQ(mma_splits(problem(1, 8, 1, 300), 132, 1), 1);
    EXPECT_EQ(mma_splits(problem(1, 1, 1, 1 << 20), 132, 8), fmha::decode::kMaxSplits);
}

TEST(DecodeSplits, StayWithinTheWorkspace) {
    const fmha::Params p = problem(8, 8, 1, 4096);
    const size_t two = fmha::decode::partial_bytes<Mma>(p, 2);
    EXPECT_EQ(mma_splits(p, 132, 1, two), 2);
    EXPECT_EQ(mma_splits(p, 132, 1, two - 1), 1);
    EXPECT_EQ(mma_splits(p, 132, 1, 0), 1);
}

TEST(DecodeWorkspace, CountersThenPartials) {
    const fmha::Params p = problem(8, 8, 1, 4096);
    const fmha::decode::Shape one = fmha::decode::make_shape<Mma>(p, 1);
    const size_t counters = fmha::decode::counter_bytes<Mma>(p, one);
    EXPECT_EQ(counters % 256, 0u);
    EXPECT_GE(counters, size_t(8) * 8 * one.row_tiles * sizeof(int));
    // partials: item rows x splits x (dv + max, sum) floats after the counters
    const size_t rows = size_t(8) * 8 * one.row_tiles * Mma::kRows;
    EXPECT_EQ(fmha::decode::partial_bytes<Mma>(p, 3), counters + rows * 3 * (128 + 2) * sizeof(float));
    // the warp path keeps no counters
    EXPECT_EQ(fmha::decode::counter_bytes<Warp>(p, fmha::decode::make_shape<Warp>(p, 1)), 0u);
}

}  // namespace
