#include "check.h"

#include <cuda_fp8.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "format.h"

namespace fmha {
namespace {

constexpr int kMaxReported = 10;  // mismatches (and touched elements) printed

struct Verdict {
    bool fail;
    double error;  // relative, or absolute where |a| + |b| <= eps
};

// SPEC.md: fails when |a-b|/(|a|+|b|) > eps, |a-b| > eps where |a|+|b| <= eps, or NaN.
Verdict compare(float a, float b, double eps) {
    if (!std::isfinite(a) || !std::isfinite(b)) return {true, INFINITY};
    const double diff = std::fabs(double(a) - double(b));
    const double mag = std::fabs(double(a)) + std::fabs(double(b));
    if (mag <= eps) return {diff > eps, diff};
    return {diff / mag > eps, diff / mag};
}

std::string describe_row(const Problem& p, const SeqLens& lens, int64_t storage_row) {
    if (storage_row < 0) return "guard row before the first token";
    if (storage_row >= lens.q_storage_tokens) return "guard row after the last token";
    const int64_t seq = storage_row / p.s_q;  // only padded storage has rows between sequences
    return "padding row of sequence " + std::to_string(seq) + " (position " +
           std::to_string(storage_row % p.s_q) + ", length " + std::to_string(lens.q_lens[seq]) + ")";
}

// x rounded to e4m3 as the kernels round O (cvt.rn.satfinite: CUDA's own conversion, on the host).
float round_e4m3(float x) { return e4m3_bits_to_float(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); }

// O as the driver stores it: 16-bit elements, or bytes for e4m3 O.
struct OutputBits {
    const std::vector<uint16_t>& raw;
    bool e4m3;
    uint32_t bits(int64_t i) const {
        return e4m3 ? reinterpret_cast<const uint8_t*>(raw.data())[i] : raw[size_t(i)];
    }
    uint32_t poison() const { return e4m3 ? kPoisonBitsE4m3 : kPoisonBits; }
};

}  // namespace

float half_bits_to_float(uint16_t bits) {
    const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    uint32_t out;
    if (exponent == 0x1fu) {
        out = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN
    } else if (exponent == 0) {
        const float f = std::ldexp(static_cast<float>(mantissa), -24);  // zero / subnormal
        return sign ? -f : f;
    } else {
        out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &out, sizeof(f));
    return f;
}

float bf16_bits_to_float(uint16_t bits) {
    const uint32_t out = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &out, sizeof(f));
    return f;
}

float e4m3_bits_to_float(uint8_t bits) {
    const bool negative = bits & 0x80u;
    const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
    if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
    const float magnitude = exponent == 0 ? std::ldexp(float(mantissa), -9)  // zero / subnormal
                                          : std::ldexp(float(8 + mantissa), exponent - 10);
    return negative ? -magnitude : magnitude;
}

CheckResult check_output(const Problem& p, const SeqLens& lens, const std::vector<uint16_t>& o_raw,
                         const std::vector<float>& o_ref, const std::vector<float>& o_amb) {
    CheckResult r;
    const int64_t row = int64_t(p.h) * p.dv;  // elements per token
    const bool e4m3 = p.out_dtype == DataType::kE4m3;
    const OutputBits out{o_raw, e4m3};
    const BitsToFloat to_float = e4m3 ? nullptr : bits_to_float(p.out_dtype);
    const auto value = [&](int64_t i) {
        return e4m3 ? e4m3_bits_to_float(uint8_t(out.bits(i))) : to_float(uint16_t(out.bits(i)));
    };
    int reported = 0;

    std::vector<char> covered(static_cast<size_t>(lens.q_storage_tokens), 0);
    for (int seq = 0; seq < p.b; ++seq) {
        for (int pos = 0; pos < lens.q_lens[seq]; ++pos) {
            const int64_t token = int64_t(lens.q_offsets[seq]) + pos;
            covered[token] = 1;
            const int64_t got = (token + kGuardRows) * row;
            const float* want = o_ref.data() + token * row;
            const float* amb = o_amb.data() + token * row;
            for (int64_t e = 0; e < row; ++e) {
                // The reference's value nearest the kernel's within its rounding ambiguity
                // (0 for most elements: only P within 2^-16 of a rounding edge count); e4m3 O:
                // that value rounded as the kernel rounds O (it is the kernel's own where the
                // kernel's O is the rounding of any point of the interval).
                const float a = value(got + e);
                float b = std::isfinite(a) ? std::fmin(std::fmax(a, want[e] - amb[e]), want[e] + amb[e]) : want[e];
                r.ambiguous += b != want[e];
                if (e4m3) b = round_e4m3(b);
                const Verdict v = compare(a, b, p.epsilon);
                ++r.checked;
                if (std::isfinite(a)) {
                    const double diff = std::fabs(double(a) - double(b));
                    const double mag = std::fabs(double(a)) + std::fabs(double(b));
                    r.max_abs_err = std::fmax(r.max_abs_err, diff);
                    if (mag > p.epsilon) r.max_rel_err = std::fmax(r.max_rel_err, diff / mag);
                } else {
                    ++r.non_finite;
                }
                if (!v.fail) continue;
                ++r.failures;
                if (reported++ < kMaxReported)
                    r.report.push_back(format(
                        "mismatch at (b=%d, s=%d, h=%d, d=%d): found %.6g, expected %.6g, error %.3g",
                        seq, pos, static_cast<int>(e / p.dv), static_cast<int>(e % p.dv), a, b,
                        v.error));
            }
        }
    }

    // Everything else in the allocation must still hold the poison pattern, bit for bit.
    int touched_reported = 0;
    const int64_t rows_total = lens.q_storage_tokens + 2 * kGuardRows;
    for (int64_t a = 0; a < rows_total; ++a) {
        const int64_t token = a - kGuardRows;
        if (token >= 0 && token < lens.q_storage_tokens && covered[token]) continue;
        for (int64_t e = 0; e < row; ++e) {
            ++r.untouched_checked;
            const uint32_t bits = out.bits(a * row + e);
            if (bits == out.poison()) continue;
            ++r.touched;
            if (touched_reported++ < kMaxReported)
                r.report.push_back(format(
                    "written outside the sequences: %s, h=%d, d=%d: bits 0x%04x (poison 0x%04x)",
                    describe_row(p, lens, token).c_str(), static_cast<int>(e / p.dv),
                    static_cast<int>(e % p.dv), bits, out.poison()));
        }
    }
    return r;
}

void check_lse(const Problem& p, const SeqLens& lens, const std::vector<float>& lse,
               const std::vector<float>& lse_ref, const std::vector<float>& lse_amb, CheckResult& r) {
    int reported = 0;
    for (int seq = 0; seq < p.b; ++seq) {
        for (int head = 0; head < p.h; ++head) {
            for (int row = 0; row < lens.s_q_max; ++row) {
                const size_t i = (size_t(seq) * p.h + head) * lens.s_q_max + row;
                const float a = lse[i], b = lse_ref[i];
                if (row >= lens.q_lens[seq]) {
                    uint32_t bits;
                    std::memcpy(&bits, &a, sizeof(bits));
                    ++r.lse_untouched_checked;
                    if (bits == kPoisonLseBits) continue;
                    ++r.lse_touched;
                    if (reported++ < kMaxReported)
                        r.report.push_back(format("softmax stats written past the sequence: (b=%d, h=%d, s=%d, "
                                                  "length %d): %.6g", seq, head, row, lens.q_lens[seq], a));
                    continue;
                }
                ++r.lse_checked;
                bool fail;
                if (std::isinf(a) || std::isinf(b)) {
                    fail = a != b;  // -inf (a row without keys) on both sides, nothing else
                } else {
                    const double diff = std::fabs(double(a) - double(b));
                    fail = !(diff <= kLseTolerance + double(lse_amb[i]));  // NaN fails
                    r.lse_max_amb = std::fmax(r.lse_max_amb, double(lse_amb[i]));
                    if (std::isfinite(diff)) r.lse_max_abs_err = std::fmax(r.lse_max_abs_err, diff);
                }
                if (!fail) continue;
                ++r.lse_failures;
                if (reported++ < kMaxReported)
                    r.report.push_back(format("softmax stats mismatch at (b=%d, h=%d, s=%d): LSE %.7g, expected %.7g",
                                              seq, head, row, a, b));
            }
        }
    }
}

std::string lse_tolerance_text(const CheckResult& r) {
    return r.lse_max_amb > 0.0 ? format("%g + up to %.3g", kLseTolerance, r.lse_max_amb) : format("%g", kLseTolerance);
}

std::string check_summary(const Problem& p, const CheckResult& r) {
    return format("errors: %lld of %lld elements fail (epsilon %g; %lld NaN/inf), max abs err %.6g, "
                  "max rel err %.6g (%lld within the reference's rounding ambiguity); %lld of %lld elements "
                  "outside the sequences were written",
                  static_cast<long long>(r.failures), static_cast<long long>(r.checked), p.epsilon,
                  static_cast<long long>(r.non_finite), r.max_abs_err, r.max_rel_err,
                  static_cast<long long>(r.ambiguous), static_cast<long long>(r.touched),
                  static_cast<long long>(r.untouched_checked)) +
           (p.save_softmax ? format("; softmax stats: %lld of %lld rows fail (tolerance %s), max abs err %.3g, "
                                    "%lld of %lld rows past the sequences written",
                                    static_cast<long long>(r.lse_failures), static_cast<long long>(r.lse_checked),
                                    lse_tolerance_text(r).c_str(), r.lse_max_abs_err, static_cast<long long>(r.lse_touched),
                                    static_cast<long long>(r.lse_untouched_checked))
                           : std::string());
}

}  // namespace fmha
