// src/fmha/softmax/online_softmax.h: OnlineSoftmax::update over several key blocks, then
// finalize, on one warp, against the softmax computed on the host.
//
// The test kernel keeps the flash main loop's shape: after each update it adds P * V[block]
// into the O accumulator (plain FMAs through shared memory: the softmax algebra is under test
// here, not the mma). O has one extra n-tile, the probe, set to 1 before every update, so
// what update leaves there is the rescale factor alpha it applied to that row.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fmha/softmax/online_softmax.h"
#include "unit_test.h"

namespace {

constexpr int kMmaM = 2;     // one warp, 32 query rows
constexpr int kNTilesS = 2;  // 16 keys per block
constexpr int kNTilesV = 2;  // 16 columns of V and O
constexpr int kProbe = kNTilesV;
constexpr int kRows = kMmaM * 16;
constexpr int kKeys = kNTilesS * 8;
constexpr int kCols = kNTilesV * 8;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Fragment position -> (row, column) in the mma C layout (mma_sm80.h).
__device__ int frag_row(int lane, int mi, int h) { return mi * 16 + h * 8 + lane / 4; }
__device__ int frag_col(int lane, int ni, int e) { return ni * 8 + 2 * (lane % 4) + e; }

// scores [blocks][kRows][kKeys], v [blocks * kKeys][kCols]. Per block b: p_out[b] the
// probabilities update left in s, m_out[b] / alpha_out[b] each row's running max and rescale
// factor. Then inv_out = finalize()'s factor and o_out = O * inv. row_scales [kRows] (nullptr:
// none): update takes one scale a row, scale_log2 * row_scales[r].
template <bool kCheckInf, bool kSkipRescale, int kHalves>
__global__ void softmax_kernel(const float* scores, const float* v, int blocks, float scale_log2, float out_scale,
                               const float* row_scales, float* p_out, float* m_out, float* alpha_out, float* inv_out,
                               float* o_out) {
    __shared__ float p_smem[kRows][kKeys];
    const int lane = threadIdx.x;
    fmha::softmax::OnlineSoftmax<kMmaM> softmax;
    softmax.init();
    float o[kMmaM][kNTilesV + 1][4] = {};  // [32 rows, 16 columns + the probe]
    for (int b = 0; b < blocks; ++b) {
        const float* sb = scores + b * kRows * kKeys;
        float s[kMmaM][kNTilesS][4];  // [32 rows, 16 keys]
        for (int mi = 0; mi < kMmaM; ++mi)
            for (int h = 0; h < 2; ++h)
                for (int ni = 0; ni < kNTilesS; ++ni)
                    for (int e = 0; e < 2; ++e)
                        s[mi][ni][2 * h + e] = sb[frag_row(lane, mi, h) * kKeys + frag_col(lane, ni, e)];
        for (int mi = 0; mi < kMmaM; ++mi)
            for (int e = 0; e < 4; ++e) o[mi][kProbe][e] = 1.f;

        if (row_scales != nullptr) {
            float scale[kMmaM][2];
            for (int mi = 0; mi < kMmaM; ++mi)
                for (int h = 0; h < 2; ++h) scale[mi][h] = scale_log2 * row_scales[frag_row(lane, mi, h)];
            softmax.template update<kCheckInf, kSkipRescale, kNTilesS, kNTilesV + 1, false, kHalves>(s, o, scale);
        } else {
            softmax.template update<kCheckInf, kSkipRescale, kNTilesS, kNTilesV + 1, false, kHalves>(s, o, scale_log2);
        }

        for (int mi = 0; mi < kMmaM; ++mi) {
            for (int h = 0; h < 2; ++h) {
                const int r = frag_row(lane, mi, h);
                for (int ni = 0; ni < kNTilesS; ++ni) {
                    for (int e = 0; e < 2; ++e) {
                        const int c = frag_col(lane, ni, e);
                        p_out[(b * kRows + r) * kKeys + c] = s[mi][ni][2 * h + e];
                        p_smem[r][c] = s[mi][ni][2 * h + e];
                    }
                }
                if (lane % 4 == 0) {
                    m_out[b * kRows + r] = softmax.row_max[mi][h];
                    alpha_out[b * kRows + r] = o[mi][kProbe][2 * h];
                }
            }
        }
        __syncwarp();
        for (int mi = 0; mi < kMmaM; ++mi)
            for (int h = 0; h < 2; ++h)
                for (int nd = 0; nd < kNTilesV; ++nd)
                    for (int e = 0; e < 2; ++e) {
                        const int r = frag_row(lane, mi, h);
                        const int c = frag_col(lane, nd, e);
                        for (int k = 0; k < kKeys; ++k) {
                            o[mi][nd][2 * h + e] += p_smem[r][k] * v[(b * kKeys + k) * kCols + c];
                        }
                    }
        __syncwarp();
    }
    float inv[kMmaM][2];
    softmax.finalize(inv, out_scale, fmha::Params{}, 0);  // no attention sinks
    for (int mi = 0; mi < kMmaM; ++mi)
        for (int h = 0; h < 2; ++h) {
            const int r = frag_row(lane, mi, h);
            if (lane % 4 == 0) inv_out[r] = inv[mi][h];
            for (int nd = 0; nd < kNTilesV; ++nd)
                for (int e = 0; e < 2; ++e) o_out[r * kCols + frag_col(lane, nd, e)] = o[mi][nd][2 * h + e] * inv[mi][h];
        }
}

struct Variant {
    const char* name;
    bool check_inf, skip_rescale;
    int halves = 2;  // update's kHalves (1: with kCheckInf only)
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

struct Problem {
    int blocks;
    float scale_log2, out_scale;
    std::vector<float> scores;  // [blocks][kRows][kKeys]
    std::vector<float> v;       // [blocks * kKeys][kCols]
    std::vector<float> row_scales = {};  // [kRows], or empty: one scale for every row
};

struct Result {
    std::vector<float> p, m, alpha;  // per block: [kRows][kKeys], [kRows], [kRows]
    std::vector<float> inv, o;       // [kRows], [kRows][kCols]
};

template <bool kCheckInf, bool kSkip, int kHalves = 2>
void launch(const Problem& pr, float* const* d_out, const float* d_scores, const float* d_v, const float* d_rows) {
    softmax_kernel<kCheckInf, kSkip, kHalves><<<1, 32>>>(d_scores, d_v, pr.blocks, pr.scale_log2, pr.out_scale, d_rows,
                                                d_out[0], d_out[1], d_out[2], d_out[3], d_out[4]);
}

void run(const Variant& variant, const Problem& pr, Result* res) {
    unit::DeviceBuffer<float> scores, v, rows, p, m, alpha, inv, o;
    CUDA_ASSERT(scores.upload(pr.scores));
    if (!pr.row_scales.empty()) CUDA_ASSERT(rows.upload(pr.row_scales));
    const float* d_rows = pr.row_scales.empty() ? nullptr : rows.get();
    CUDA_ASSERT(v.upload(pr.v));
    CUDA_ASSERT(p.alloc(pr.scores.size()));
    CUDA_ASSERT(m.alloc(pr.blocks * kRows));
    CUDA_ASSERT(alpha.alloc(pr.blocks * kRows));
    CUDA_ASSERT(inv.alloc(kRows));
    CUDA_ASSERT(o.alloc(kRows * kCols));
    float* const outs[] = {p.get(), m.get(), alpha.get(), inv.get(), o.get()};
    if (variant.halves == 1) {
        variant.skip_rescale ? launch<true, true, 1>(pr, outs, scores.get(), v.get(), d_rows)
                             : launch<true, false, 1>(pr, outs, scores.get(), v.get(), d_rows);
    } else if (variant.check_inf) {
        variant.skip_rescale ? launch<true, true>(pr, outs, scores.get(), v.get(), d_rows)
                             : launch<true, false>(pr, outs, scores.get(), v.get(), d_rows);
    } else {
        variant.skip_rescale ? launch<false, true>(pr, outs, scores.get(), v.get(), d_rows)
                             : launch<false, false>(pr, outs, scores.get(), v.get(), d_rows);
    }
    CUDA_ASSERT_LAUNCH();
    CUDA_ASSERT(p.download(&res->p));
    CUDA_ASSERT(m.download(&res->m));
    CUDA_ASSERT(alpha.download(&res->alpha));
    CUDA_ASSERT(inv.download(&res->inv));
    CUDA_ASSERT(o.download(&res->o));
}

// The header's algorithm, per row, in float where the kernel's rounding is part of the
// contract (the running max M = ceil(scale_log2 * max), exact) and double elsewhere; the
// final O is the plain softmax over all keys, independent of the blocking.
Result reference(const Problem& pr) {
    Result ref;
    ref.p.resize(pr.scores.size());
    ref.m.resize(pr.blocks * kRows);
    ref.alpha.resize(pr.blocks * kRows);
    ref.inv.resize(kRows);
    ref.o.assign(kRows * kCols, 0.f);
    for (int r = 0; r < kRows; ++r) {
        float m = -kInf;
        for (int b = 0; b < pr.blocks; ++b) {
            const float* s = &pr.scores[(b * kRows + r) * kKeys];
            float mx = -kInf;
            for (int k = 0; k < kKeys; ++k) mx = std::fmax(mx, s[k]);
            const float m_new = std::fmax(m, std::ceil(mx * pr.scale_log2));
            const float sub = m_new == -kInf ? 0.f : m_new;
            ref.alpha[b * kRows + r] = m_new != m ? static_cast<float>(std::exp2(static_cast<double>(m) - sub)) : 1.f;
            for (int k = 0; k < kKeys; ++k) {
                ref.p[(b * kRows + r) * kKeys + k] = static_cast<float>(std::exp2(std::fma(s[k], pr.scale_log2, -sub)));
            }
            m = m_new;
            ref.m[b * kRows + r] = m;
        }
        double l = 0.0;
        std::vector<double> acc(kCols, 0.0);
        for (int j = 0; j < pr.blocks * kKeys; ++j) {
            const float s = pr.scores[((j / kKeys) * kRows + r) * kKeys + j % kKeys];
            if (s == -kInf) continue;
            const double w = std::exp2(static_cast<double>(s) * pr.scale_log2 - m);
            l += w;
            for (int c = 0; c < kCols; ++c) acc[c] += w * pr.v[j * kCols + c];
        }
        ref.inv[r] = l > 0 ? static_cast<float>(pr.out_scale / l) : 0.f;
        for (int c = 0; c < kCols; ++c) ref.o[r * kCols + c] = l > 0 ? static_cast<float>(pr.out_scale * acc[c] / l) : 0.f;
    }
    return ref;
}

// ex2.approx is within a few ulp; every other rounding is shared with the reference.
constexpr double kRelTolP = 2e-6;
constexpr double kTolO = 5e-5;  // float sums over 80 keys, out_scale 1.5

void expect_matches_reference(const Problem& pr, const Result& got) {
    const Result ref = reference(pr);
    for (int b = 0; b < pr.blocks; ++b) {
        for (int r = 0; r < kRows; ++r) {
            const int i = b * kRows + r;
            EXPECT_EQ(got.m[i], ref.m[i]) << "running max, block " << b << " row " << r;
            EXPECT_EQ(got.alpha[i], ref.alpha[i]) << "rescale factor, block " << b << " row " << r;
            for (int k = 0; k < kKeys; ++k) {
                const float want = ref.p[i * kKeys + k], have = got.p[i * kKeys + k];
                EXPECT_NEAR(have, want, kRelTolP * want + 1e-30) << "P, block " << b << " row " << r << " key " << k;
            }
        }
    }
    for (int r = 0; r < kRows; ++r) {
        EXPECT_NEAR(got.inv[r], ref.inv[r], 3e-5 * ref.inv[r]) << "out_scale / l, row " << r;
        for (int c = 0; c < kCols; ++c) {
            EXPECT_NEAR(got.o[r * kCols + c], ref.o[r * kCols + c], kTolO) << "O, row " << r << " column " << c;
        }
    }
}

// Scores whose row maxima move between blocks: rows drift up (the max grows every block),
// down (it never grows after block 0) or not at all.
Problem drifting_problem(int blocks, uint32_t seed) {
    Problem pr{blocks, 0.3f * fmha::kLog2e, 1.5f, unit::random_floats(blocks * kRows * kKeys, -8.f, 8.f, seed),
               unit::random_floats(blocks * kKeys * kCols, -1.f, 1.f, seed + 1)};
    const float drift[] = {0.f, 5.f, -4.f, 1.f};
    for (int b = 0; b < blocks; ++b)
        for (int r = 0; r < kRows; ++r)
            for (int k = 0; k < kKeys; ++k) pr.scores[(b * kRows + r) * kKeys + k] += drift[r % 4] * b;
    return pr;
}

float& score(Problem& pr, int block, int row, int key) { return pr.scores[(block * kRows + row) * kKeys + key]; }

// ---- every variant of update<kCheckInf, kSkipRescale> ------------------------------------

class OnlineSoftmaxTest : public unit::DeviceTestP<Variant> {};

TEST_P(OnlineSoftmaxTest, MatchesTheSoftmaxOverSeveralBlocks) {
    const Problem pr = drifting_problem(5, 7);
    Result got;
    ASSERT_NO_FATAL_FAILURE(run(GetParam(), pr, &got));
    expect_matches_reference(pr, got);
}

// M = ceil(scale_log2 * max S): integer-valued, P of the max element is exp2 of minus the
// rounding, and a max that grows inside the same integer rescales nothing.
TEST_P(OnlineSoftmaxTest, RunningMaxRoundsUpToAnIntegerInLog2Units) {
    Problem pr{2, 1.f, 1.f, unit::random_floats(2 * kRows * kKeys, -10.f, -6.f, 11),
               unit::random_floats(2 * kKeys * kCols, -1.f, 1.f, 12)};
    score(pr, 0, 0, 3) = 3.f;     // integer max: M = 3, P = 1 exactly
    score(pr, 0, 1, 9) = 2.25f;   // M = 3, P = exp2(-0.75)
    score(pr, 0, 2, 0) = -2.5f;   // M = -2, P = exp2(-0.5)
    score(pr, 1, 0, 5) = 3.5f;    // grows to M = 4: alpha = 1/2
    score(pr, 1, 1, 15) = 2.9f;   // grows, but M stays 3: alpha = 1
    Result got;
    ASSERT_NO_FATAL_FAILURE(run(GetParam(), pr, &got));
    EXPECT_EQ(got.m[0], 3.f);
    EXPECT_EQ(got.m[1], 3.f);
    EXPECT_EQ(got.m[2], -2.f);
    EXPECT_EQ(got.p[0 * kKeys + 3], 1.f);
    EXPECT_NEAR(got.p[1 * kKeys + 9], std::exp2(-0.75), 1e-6);
    EXPECT_NEAR(got.p[2 * kKeys + 0], std::exp2(-0.5), 1e-6);
    EXPECT_EQ(got.m[kRows + 0], 4.f);
    EXPECT_EQ(got.alpha[kRows + 0], 0.5f);
    EXPECT_EQ(got.m[kRows + 1], 3.f);
    EXPECT_EQ(got.alpha[kRows + 1], 1.f);
    for (size_t i = 0; i < got.m.size(); ++i) EXPECT_EQ(got.m[i], std::ceil(got.m[i])) << "M is an integer";
    expect_matches_reference(pr, got);
}

INSTANTIATE_TEST_SUITE_P(Softmax, OnlineSoftmaxTest,
                         ::testing::Values(Variant{"plain", false, false}, Variant{"skip_rescale", false, true},
                                           Variant{"check_inf", true, false},
                                           Variant{"check_inf_skip_rescale", true, true}),
                         [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

// ---- masked rows and the rescale-skip path -------------------------------------------------

using OnlineSoftmax = unit::DeviceTest;

// kCheckInf: a row whose keys are all masked so far keeps M = -inf, P = 0 (never NaN) and
// alpha = 1; its first visible key rescales by exp2(-inf) = 0. A row that never sees a key
// finishes with inv = 0 and O = 0.
TEST_F(OnlineSoftmax, RowWithNoAllowedKeyYetGivesZerosNotNaN) {
    Problem pr = drifting_problem(3, 21);
    for (int b = 0; b < 3; ++b) {
        for (int k = 0; k < kKeys; ++k) {
            if (b < 2) score(pr, b, 0, k) = -kInf;  // row 0: first key in block 2
            score(pr, b, 1, k) = -kInf;             // row 1: never a key
            if (k >= 5) score(pr, b, 2, k) = -kInf; // row 2: a key tail in every block
        }
    }
    for (bool skip : {false, true}) {
        SCOPED_TRACE(skip ? "skip_rescale" : "always rescale");
        Result got;
        ASSERT_NO_FATAL_FAILURE(run(Variant{"", true, skip}, pr, &got));
        for (int b = 0; b < 2; ++b) {
            EXPECT_EQ(got.m[b * kRows], -kInf);
            EXPECT_EQ(got.alpha[b * kRows], 1.f);
            for (int k = 0; k < kKeys; ++k) EXPECT_EQ(got.p[b * kRows * kKeys + k], 0.f);
        }
        EXPECT_EQ(got.alpha[2 * kRows], 0.f) << "first visible key: exp2(-inf - M) == 0";
        EXPECT_EQ(got.inv[1], 0.f);
        for (int c = 0; c < kCols; ++c) EXPECT_EQ(got.o[kCols + c], 0.f) << "row without keys, column " << c;
        for (float x : got.o) ASSERT_FALSE(std::isnan(x));
        expect_matches_reference(pr, got);
    }
}

// kSkipRescale: when no row max of the warp grows, update skips O's rescale (a warp vote).
// That must be invisible: rows whose max held keep alpha = 1, the one row that grew is still
// rescaled, and O is bit for bit what always rescaling gives.
TEST_F(OnlineSoftmax, RescaleSkipIsInvisibleInTheResult) {
    Problem pr = drifting_problem(3, 31);
    for (int r = 0; r < kRows; ++r) {
        for (int k = 0; k < kKeys; ++k) {
            score(pr, 0, r, k) = std::fabs(score(pr, 0, r, k)) + 10.f;
            score(pr, 1, r, k) = score(pr, 0, r, k) - 20.f;  // block 1: no row max grows
            score(pr, 2, r, k) = score(pr, 1, r, k);         // block 2: only row 5 grows
        }
    }
    score(pr, 2, 5, 7) = 60.f;
    Result skip, always;
    ASSERT_NO_FATAL_FAILURE(run(Variant{"", false, true}, pr, &skip));
    ASSERT_NO_FATAL_FAILURE(run(Variant{"", false, false}, pr, &always));
    for (int r = 0; r < kRows; ++r) {
        EXPECT_EQ(skip.alpha[kRows + r], 1.f) << "block 1 row " << r;
        if (r != 5) EXPECT_EQ(skip.alpha[2 * kRows + r], 1.f) << "block 2 row " << r;
    }
    EXPECT_LT(skip.alpha[2 * kRows + 5], 1.f) << "row 5's max grew in block 2";
    for (size_t i = 0; i < skip.o.size(); ++i) ASSERT_EQ(skip.o[i], always.o[i]) << "O element " << i;
    expect_matches_reference(pr, skip);
}

// One scale a row (the e4m3-cache decode folds each row's dequantisation into it): with
// power-of-two row scales, the same bits as scaling each row's scores first, masked keys too.
TEST_F(OnlineSoftmax, AScaleARowIsTheRowsScoresScaled) {
    Problem folded = drifting_problem(3, 41);
    folded.row_scales.resize(kRows);
    for (int r = 0; r < kRows; ++r) folded.row_scales[r] = std::ldexp(1.f, r % 5 - 2);
    score(folded, 0, 3, 2) = -kInf;
    for (int k = 0; k < kKeys; ++k) score(folded, 0, 6, k) = -kInf;  // row 6: no key in block 0
    Problem scaled = folded;
    scaled.row_scales.clear();
    for (int b = 0; b < scaled.blocks; ++b)
        for (int r = 0; r < kRows; ++r)
            for (int k = 0; k < kKeys; ++k) score(scaled, b, r, k) *= folded.row_scales[r];
    for (bool skip : {false, true}) {
        SCOPED_TRACE(skip ? "skip_rescale" : "always rescale");
        Result a, b;
        ASSERT_NO_FATAL_FAILURE(run(Variant{"", true, skip}, folded, &a));
        ASSERT_NO_FATAL_FAILURE(run(Variant{"", true, skip}, scaled, &b));
        for (size_t i = 0; i < a.p.size(); ++i) ASSERT_EQ(a.p[i], b.p[i]) << "P element " << i;
        for (size_t i = 0; i < a.m.size(); ++i) ASSERT_EQ(a.m[i], b.m[i]) << "running max " << i;
        for (size_t i = 0; i < a.alpha.size(); ++i) ASSERT_EQ(a.alpha[i], b.alpha[i]) << "rescale factor " << i;
        for (size_t i = 0; i < a.inv.size(); ++i) ASSERT_EQ(a.inv[i], b.inv[i]) << "out_scale / l, row " << i;
        for (size_t i = 0; i < a.o.size(); ++i) ASSERT_EQ(a.o[i], b.o[i]) << "O element " << i;
        expect_matches_reference(scaled, a);
    }
}

// kHalves 1 (a decode tile of at most 8 query rows): rows g of every m-tile come out as with
// both halves, bit for bit; rows g + 8 have P = 0, M = -inf, alpha = 1 and O = 0.
TEST_F(OnlineSoftmax, OneHalfLeavesEachMTilesRowsFrom8Out) {
    Problem pr = drifting_problem(3, 51);
    for (bool skip : {false, true}) {
        SCOPED_TRACE(skip ? "skip_rescale" : "always rescale");
        Result both, one;
        ASSERT_NO_FATAL_FAILURE(run(Variant{"", true, skip}, pr, &both));
        ASSERT_NO_FATAL_FAILURE(run(Variant{"", true, skip, 1}, pr, &one));
        for (int b = 0; b < pr.blocks; ++b) {
            for (int r = 0; r < kRows; ++r) {
                const int i = b * kRows + r;
                if (r % 16 < 8) {
                    ASSERT_EQ(one.m[i], both.m[i]) << "running max, block " << b << " row " << r;
                    ASSERT_EQ(one.alpha[i], both.alpha[i]) << "rescale factor, block " << b << " row " << r;
                    for (int k = 0; k < kKeys; ++k) ASSERT_EQ(one.p[i * kKeys + k], both.p[i * kKeys + k]);
                } else {
                    ASSERT_EQ(one.m[i], -kInf) << "block " << b << " row " << r;
                    ASSERT_EQ(one.alpha[i], 1.f) << "block " << b << " row " << r;
                    for (int k = 0; k < kKeys; ++k) ASSERT_EQ(one.p[i * kKeys + k], 0.f);
                }
            }
        }
        for (int r = 0; r < kRows; ++r) {
            for (int c = 0; c < kCols; ++c) {
                const float want = r % 16 < 8 ? both.o[r * kCols + c] : 0.f;
                ASSERT_EQ(one.o[r * kCols + c], want) << "O, row " << r << " column " << c;
            }
        }
    }
}

}  // namespace
