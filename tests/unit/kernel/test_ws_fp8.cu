// The ws family's e4m3 kernel (src/fmha/kernel/ws, Element __nv_fp8_e4m3; d = 128, 128 x 128
// tile, persistent) launched directly through ws::launch on an SM90 GPU, before the
// generator, the C API and fmha.exe serve it: fixed-length sequences, GQA, causal and not,
// s_q < s_kv, FA3's descales, against a float64 reference on the dequantised inputs with P rounded to e4m3
// as the kernel rounds it (against the exact running max of its key blocks, in its order), and
// against exact attention. O is bf16.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fmha/kernel/ws.h"
#include "fmha/mma/fp8_sm90.h"
#include "unit_test.h"

namespace {

using Config = fmha::ws::Config<232448, 7168, 64, 128, 128, false>;
using Traits = fmha::ws::Traits<Config, __nv_fp8_e4m3, 128, 128, 128, 128, 8, 1, false, true>;
constexpr int kD = 128;

struct Case {
    const char* name;
    int b, h, h_kv, s_q, s_kv;
    bool causal;
    bool descale;  // FA3's q/k/v_descale per (batch, KV head)
};

class WsFp8 : public unit::DeviceTestP<Case> {
  protected:
    void SetUp() override {
        unit::DeviceTestP<Case>::SetUp();
        if (IsSkipped()) return;
        cudaDeviceProp prop{};
        ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
        if (prop.major != 9) GTEST_SKIP() << "the ws family needs sm_90a, found sm_" << prop.major << prop.minor;
        num_sms_ = prop.multiProcessorCount;
    }
    int num_sms_ = 0;
};

using unit::from_e4m3;
using unit::round_e4m3;

double from_bf16(uint16_t x) {
    uint32_t u = uint32_t(x) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST_P(WsFp8, MatchesTheQuantisedReference) {
    const Case c = GetParam();
    const int64_t q_elems = int64_t(c.b) * c.s_q * c.h * kD, kv_elems = int64_t(c.b) * c.s_kv * c.h_kv * kD;
    const std::vector<float> qf = unit::random_floats(q_elems, -2.f, 2.f, 11);
    const std::vector<float> kf = unit::random_floats(kv_elems, -2.f, 2.f, 12);
    const std::vector<float> vf = unit::random_floats(kv_elems, -2.f, 2.f, 13);
    const std::vector<uint8_t> q8 = unit::to_e4m3(qf), k8 = unit::to_e4m3(kf), v8 = unit::to_e4m3(vf);

    unit::DeviceBuffer<uint8_t> dq, dk, dv;
    unit::DeviceBuffer<uint16_t> dout;
    unit::DeviceBuffer<int> counter;
    CUDA_ASSERT(dq.upload(q8));
    CUDA_ASSERT(dk.upload(k8));
    CUDA_ASSERT(dv.upload(v8));
    CUDA_ASSERT(dout.alloc(size_t(q_elems), 0xff));  // NaN bits: a row left unwritten fails
    CUDA_ASSERT(counter.alloc(1));
    // Descales: powers of two in [1/4, 4], one per (batch, KV head) and tensor.
    std::vector<float> qd(c.b * c.h_kv, 1.f), kd(qd), vd(qd);
    if (c.descale) {
        const std::vector<float> e = unit::random_ints(3 * qd.size(), -2, 2, 14);
        for (size_t i = 0; i < qd.size(); ++i)
            qd[i] = std::ldexp(1.f, int(e[i])), kd[i] = std::ldexp(1.f, int(e[qd.size() + i])),
            vd[i] = std::ldexp(1.f, int(e[2 * qd.size() + i]));
    }
    unit::DeviceBuffer<float> dqd, dkd, dvd;
    CUDA_ASSERT(dqd.upload(qd));
    CUDA_ASSERT(dkd.upload(kd));
    CUDA_ASSERT(dvd.upload(vd));

    fmha::Params p;
    p.q = dq.get(), p.k = dk.get(), p.v = dv.get(), p.o = dout.get();
    p.q_row_stride = int64_t(c.h) * kD, p.q_head_stride = kD;
    p.k_row_stride = p.v_row_stride = int64_t(c.h_kv) * kD, p.k_head_stride = p.v_head_stride = kD;
    p.o_row_stride = int64_t(c.h) * kD, p.o_head_stride = kD;
    p.q_tokens = int64_t(c.b) * c.s_q, p.kv_tokens = int64_t(c.b) * c.s_kv;
    p.b = c.b, p.h = c.h, p.h_kv = c.h_kv, p.d = p.dv = kD;
    p.s_q_max = c.s_q, p.s_kv_max = c.s_kv, p.q_step = c.s_q, p.kv_step = c.s_kv;
    p.mask = c.causal ? fmha::MaskType::kCausal : fmha::MaskType::kPadding;
    p.scale_bmm1 = 1.f / std::sqrt(float(kD));
    p.tile_counter = counter.get();
    if (c.descale) p.q_descale = dqd.get(), p.k_descale = dkd.get(), p.v_descale = dvd.get();
    p.num_sms = num_sms_;
    CUDA_ASSERT(fmha::ws::launch<Traits>(p, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    std::vector<uint16_t> out;
    CUDA_ASSERT(dout.download(&out));

    // Reference per (sequence, head, row) in float64. The quantised one rounds P as the kernel
    // does (bench/NOTES.md §56): keys in blocks of kBlockN, visited last block first, each P
    // 2^(8 + log2(e) S - M) against M, the exact max of the blocks visited so far, then brought
    // to the row's max. Each P may still round the other way where the QGMMA's S of its key or
    // of the key that set M lies within kQgmmaSumError of an edge: amb bounds what that moves.
    double err_q = 0, err_x = 0, err_ref = 0, norm = 0, worst_q = 0;
    const int group = c.h / c.h_kv;
    const double log2e = 1.4426950408889634;
    constexpr int kBlockN = Traits::kBlockN;
    std::vector<double> s(c.s_kv), rel(c.s_kv), m_key(c.s_kv), m_rel(c.s_kv), o_q(kD), o_x(kD), amb(kD);
    for (int bi = 0; bi < c.b; ++bi)
        for (int hi = 0; hi < c.h; ++hi)
            for (int r = 0; r < c.s_q; ++r) {
                const int kvh = hi / group, last = c.causal ? r + c.s_kv - c.s_q : c.s_kv - 1;
                const int at = bi * c.h_kv + kvh;
                const double scale = p.scale_bmm1 * qd[at] * kd[at];
                const uint8_t* qr = &q8[((int64_t(bi) * c.s_q + r) * c.h + hi) * kD];
                for (int j = 0; j <= last; ++j) {
                    const uint8_t* kr = &k8[((int64_t(bi) * c.s_kv + j) * c.h_kv + kvh) * kD];
                    double dot = 0, size = 0;
                    for (int t = 0; t < kD; ++t) {
                        const double prod = from_e4m3(qr[t]) * from_e4m3(kr[t]);
                        dot += prod, size += std::abs(prod);
                    }
                    s[j] = dot * scale * log2e;                         // log2 units
                    rel[j] = fmha::mma::kQgmmaSumError * size * scale;  // |dP| / P, to first order
                }
                double mx = -INFINITY, mx_rel = 0;  // the running max and its key's rel
                for (int blk = last / kBlockN; blk >= 0; --blk) {
                    const int end = std::min(last + 1, (blk + 1) * kBlockN);
                    for (int j = blk * kBlockN; j < end; ++j)
                        if (s[j] > mx) mx = s[j], mx_rel = rel[j];
                    for (int j = blk * kBlockN; j < end; ++j) m_key[j] = mx, m_rel[j] = mx_rel;
                }
                double l = 0;
                std::fill(o_q.begin(), o_q.end(), 0.0);
                std::fill(o_x.begin(), o_x.end(), 0.0);
                std::fill(amb.begin(), amb.end(), 0.0);
                for (int j = 0; j <= last; ++j) {
                    const double pj = std::exp2(s[j] - mx), pb = std::exp2(s[j] - m_key[j]);
                    const double to_top = std::exp2(m_key[j] - mx), a = rel[j] + m_rel[j];
                    const double pq = round_e4m3(pb * 256.0) / 256.0 * to_top;
                    const double edge =
                        (round_e4m3(pb * 256.0 * (1 + a)) - round_e4m3(pb * 256.0 * (1 - a))) / 256.0 * to_top;
                    l += pj;
                    const uint8_t* vr = &v8[((int64_t(bi) * c.s_kv + j) * c.h_kv + kvh) * kD];
                    for (int t = 0; t < kD; ++t) {
                        o_q[t] += pq * from_e4m3(vr[t]);
                        o_x[t] += pj * from_e4m3(vr[t]);
                        amb[t] += edge * std::abs(from_e4m3(vr[t]));
                    }
                }
                const uint16_t* got = &out[((int64_t(bi) * c.s_q + r) * c.h + hi) * kD];
                for (int t = 0; t < kD; ++t) {
                    const double g = from_bf16(got[t]);
                    ASSERT_TRUE(std::isfinite(g)) << "seq " << bi << " head " << hi << " row " << r << " col " << t;
                    const double want_q = o_q[t] / l * vd[at], want_x = o_x[t] / l * vd[at];
                    const double dq_ = g - want_q, dx = g - want_x, dr = want_q - want_x;
                    err_q += dq_ * dq_, err_x += dx * dx, err_ref += dr * dr, norm += want_x * want_x;
                    worst_q = std::max(worst_q, std::abs(dq_) - amb[t] / l * vd[at]);
                }
            }
    const double rms_q = std::sqrt(err_q / norm), rms_x = std::sqrt(err_x / norm), rms_ref = std::sqrt(err_ref / norm);
    std::printf("%s: relative RMS against the quantised reference %.3g, against exact %.3g (the reference's own %.3g); "
                "largest past the edges %.3g\n", c.name, rms_q, rms_x, rms_ref, worst_q);
    // e4m3's P (3 mantissa bits) dominates the error against exact attention. The kernel's RMS
    // error is within 1.1x the quantised reference's own (issue #32's bar is 1.5x), and it is
    // closer to that reference than exact attention is: a P rounded on another grid than the
    // kernel's, or a wrong key order, fails that. Past what P's rounding edges allow (the
    // QGMMA's S error included), no output is off by more than 2 % of the largest V scale.
    EXPECT_LE(rms_x, 1.1 * rms_ref + 1e-3) << "relative RMS against exact attention; the quantised "
                                              "reference's own: " << rms_ref;
    EXPECT_LT(rms_q, rms_ref) << "relative RMS against the quantised-P reference";
    EXPECT_LT(worst_q, 0.02 * *std::max_element(vd.begin(), vd.end()))
        << "largest error against the quantised-P reference, past what P's rounding edges allow";
}

INSTANTIATE_TEST_SUITE_P(Shapes, WsFp8,
                         ::testing::Values(Case{"b2_h4_s256", 2, 4, 4, 256, 256, false, false},
                                           Case{"b2_h4_s256_causal", 2, 4, 4, 256, 256, true, false},
                                           Case{"b1_h8_gqa2_sq77_s300_causal_descale", 1, 8, 2, 77, 300, true, true},
                                           Case{"b3_h2_mqa_s1000_descale", 3, 2, 1, 1000, 1000, false, true},
                                           Case{"b1_h2_s129_causal", 1, 2, 2, 129, 129, true, false},
                                           Case{"b1_h2_sq128_s16384", 1, 2, 2, 128, 16384, false, false},
                                           Case{"b2_h2_s1000", 2, 2, 2, 1000, 1000, false, false}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
