// Command line -> Problem. parse_cli() either returns a fully validated Problem or exits:
// 0 after -help, 2 with one line on stderr for anything wrong (SPEC.md, exit codes).
#pragma once

#include <cstdint>
#include <string>

#include "params.h"

namespace fmha {

constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;
constexpr int kExitBadArgs = 2;

// Limits that keep every count the kernels index with in 32 bits (see usage text).
constexpr int kMaxHeadSize = 512;
constexpr int kMaxSeqLen = 1 << 20;
constexpr int kMaxBatchOrHeads = 65535;  // grid dimensions y and z

struct Problem {
    // Sizes. s_q == s unless -s-q; per-sequence q_len = min(s_q, kv_len).
    int b = 4;
    int h = 16;
    int h_kv = 16;
    int d = 128;
    int dv = 128;
    int s = 1024;
    int min_s = 1024;
    int s_q = 1024;
    bool fix_s = false;
    bool pad_s = false;

    DataType dtype = DataType::kFp16;
    DataType acc = DataType::kFp16;  // P·V accumulation; -fp16-fp32 makes it kFp32
    DataType out_dtype = DataType::kFp16;  // resolved: O's dtype (dtype, or -bf16-output with -e4m3)
    DataType kv_dtype = DataType::kFp16;   // resolved: K and V's (dtype, or e4m3 with -kv-e4m3)
    MaskType mask = MaskType::kPadding;  // -custom-mask: kCustom, random bits from -seed
    int sliding_window_size = 0;     // -sliding-window-size W (kSlidingWindow, kBidirectionalWindow)
    int chunked_attention_size = 0;  // -chunked-attention-size C (kChunked)
    Layout layout = Layout::kPackedQkv;
    int tokens_per_block = 64;  // -tokens-per-block N (-paged-kv): 16, 32, 64 or 128

    bool force_non_warp_specialized = false;
    bool use_tma = false;  // only kernels that load through TMA
    bool list_kernels = false;
    std::string kernel_name;  // -kernel NAME; empty = dispatch

    float scale_bmm1 = 0.f;  // resolved: 1/sqrt(d) unless -scale-bmm1
    float scale_softmax = 1.f;
    float scale_bmm2 = 1.f;
    float softcapping_scale_bmm1 = 0.f;  // -softcapping-scale-bmm1 c > 0; 0: no softcapping
    bool wide_logits = false;            // resolved: logits may reach 2^24 in log2 units (logit_bound)
    bool attention_sinks = false;        // -use-attention-sinks: a random logit per query head
    bool alibi = false;                  // -alibi: ALiBi slopes per query head (the paper's)
    bool save_softmax = false;           // -save-softmax: the kernel writes each row's LSE (checked)
    bool bwd = false;                    // -bwd: the backward pass after the forward (issue #33)
    bool deterministic = false;          // -deterministic: -bwd's dQ in a fixed order
    float dropout_p = 0.f;               // -dropout P in [0, 1): the mask keyed by -seed (fmha/dropout.h)
    // -attention-bias: an additive [b or 1, h or 1, s_q, s] bias, random from -seed;
    // -attention-bias-shape picks which of b and h it has (both by default).
    bool attention_bias = false;
    bool bias_per_batch = true, bias_per_head = true;

    bool ones = false;
    bool randn = false;
    float range_q = 1.f, range_k = 1.f, range_v = 1.f;
    float scale_q = 1.f, scale_k = 1.f, scale_v = 1.f;
    uint64_t seed = 1234;

    float epsilon = 0.f;  // resolved: per-dtype default unless -epsilon
    bool skip_checks = false;
    std::string save_dir;
    std::string bias_shape;  // -attention-bias-shape as given (resolved into the two flags above)

    int runs = 10;
    int warm_up_runs = 10;
    int verbose = 0;
};

// Parses and validates argv. Exits the process on -help (0) and on any error (2).
Problem parse_cli(int argc, char** argv);

// Prints a one-line error to stderr and exits with code 2.
[[noreturn]] void fail_args(const std::string& message);

// Names used by the console output and meta.json.
const char* dtype_label(const Problem& p);   // FP16, FP16_FP32, BF16, E4M3
const char* output_dtype_label(const Problem& p);
const char* mask_label(MaskType m);          // padding, causal, sliding_window, ...
const char* layout_label(Layout l);          // packed_qkv, contiguous_q_kv, separate_q_k_v
const char* attn_label(const Problem& p);    // mha, gqa, mqa
const char* dtype_name(DataType t);          // fp16, bf16, fp32, e4m3

}  // namespace fmha
