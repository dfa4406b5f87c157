// Host-side comparison of the kernel's output with the fp32 reference, and the check
// that O rows outside the real sequence lengths were left untouched (still poisoned).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"
#include "inputs.h"
#include "layouts.h"

namespace fmha {

struct CheckResult {
    int64_t checked = 0;           // elements compared with the reference
    int64_t failures = 0;          // of those, elements outside epsilon (or NaN / inf)
    int64_t non_finite = 0;        // of the failures, NaN or inf in the kernel's output
    int64_t ambiguous = 0;         // elements compared with a point of the reference's ambiguity
    double max_abs_err = 0.0;
    double max_rel_err = 0.0;      // over elements with |a| + |b| > epsilon (where it is used)
    int64_t untouched_checked = 0; // elements outside the sequences (padding and guard rows)
    int64_t touched = 0;           // of those, elements that no longer hold kPoisonBits
    // -save-softmax: the rows' LSE against the reference's (check_lse).
    int64_t lse_checked = 0;       // rows compared
    int64_t lse_failures = 0;      // of those, off by more than kLseTolerance (or NaN / wrong inf)
    double lse_max_abs_err = 0.0;  // over the finite ones
    double lse_max_amb = 0.0;      // the largest of the rows' lse_amb (e4m3; 0 otherwise)
    int64_t lse_untouched_checked = 0, lse_touched = 0;  // rows past q_len, and those written
    std::vector<std::string> report;  // the first few mismatches and touched elements
    bool passed() const { return failures == 0 && touched == 0 && lse_failures == 0 && lse_touched == 0; }
};

// Absolute tolerance of a row's LSE (natural log): 1e-3 is a 0.1 % error in the row's sum.
// The kernels' sums differ from the reference's float64 ones by fp32 rounding over the keys
// (about 1e-6 relative) and the exp2 approximation, far below it; a dropped key block, a
// missed sink or a wrong scale moves the LSE by much more on the tested shapes. e4m3 adds
// each row's lse_amb (reference.h): its S, from a QGMMA, is itself that inexact.
constexpr double kLseTolerance = 1e-3;

// o_raw: the whole O allocation (kGuardRows before and after), fp16/bf16 bits; e4m3 O
//        (Problem::out_dtype) one byte an element from its start.
// o_ref: the reference, dense [q storage tokens, h, dv].
// o_amb: the reference's rounding ambiguity, laid out as o_ref (reference.h): the kernel's
//        value is compared with the point of [o_ref - o_amb, o_ref + o_amb] nearest to it.
CheckResult check_output(const Problem& p, const SeqLens& lens, const std::vector<uint16_t>& o_raw,
                         const std::vector<float>& o_ref, const std::vector<float>& o_amb);

// -save-softmax: lse, lse_ref and lse_amb are [b, h, s_q_max] (Params::softmax_lse). A row
// within q_len fails when |lse - lse_ref| > kLseTolerance + lse_amb, either is NaN, or one
// is -inf and the other not; a row past q_len must still hold kPoisonLseBits. Adds to `r`.
void check_lse(const Problem& p, const SeqLens& lens, const std::vector<float>& lse,
               const std::vector<float>& lse_ref, const std::vector<float>& lse_amb, CheckResult& r);

// "0.001", or "0.001 + up to X" where the rows' lse_amb added to it.
std::string lse_tolerance_text(const CheckResult& r);

// One line with the failure count and the error statistics.
std::string check_summary(const Problem& p, const CheckResult& r);

// fp16 / bf16 bit patterns to float, on the host.
float half_bits_to_float(uint16_t bits);
float bf16_bits_to_float(uint16_t bits);
float e4m3_bits_to_float(uint8_t bits);  // OCP e4m3 ("fn": no infinities, 0x7f / 0xff NaN)
using BitsToFloat = float (*)(uint16_t);
inline BitsToFloat bits_to_float(DataType type) {
    return type == DataType::kBf16 ? bf16_bits_to_float : half_bits_to_float;
}

}  // namespace fmha
