// Flag parsing and validation. Flags keep fmha_v2's single-dash spelling (SPEC.md).
// Every option lives in one of the tables below; validation that involves several
// flags runs after the whole command line has been read.
#include "cli.h"

#include "backward.h"
#include "format.h"

#include "api/select.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

namespace fmha {
namespace {

constexpr int kMaxRuns = 1000000;
constexpr float kDefaultEpsilonFp16 = 0.015f;
constexpr float kDefaultEpsilonBf16 = 0.025f;
// e4m3 (SPEC.md): against a reference that rounds P as the kernel does, what is left is O's
// rounding to 16 bits, fp32 sums and the P that the QGMMA's inexact S rounds the other way
// (the reference's ambiguity covers those: bench/NOTES.md §54); the bound is fmha_v2's, kept
// for runs checked against exact attention (§53).
constexpr float kDefaultEpsilonE4m3 = 0.15f;

const char kUsage[] = R"(usage: fmha.exe [flags]      (single-dash flags, fmha_v2 spelling)

Runs one fused multi-head-attention kernel from the generated registry on a random
problem, checks it against an fp32 GPU reference and prints its time.

sizes
  -b N              batch (default 4)
  -h N              query heads (default 16)
  -d N              head size of Q and K, 1..512 (default 128); also sets dv unless -dv
  -dv N             head size of V and O, 1..512 (default: d)
  -s N              max sequence length of K/V, 1..1048576 (default 1024)
  -min-s N          lengths are uniform in [min-s, s], drawn from -seed (default: s)
  -fix-s            every length is s
  -s-q N            query length: q_len = min(N, kv_len), the last q_len positions
                    (causal masks are bottom-right aligned) (default: s)
  -pad-s            padded storage: sequence i starts at token i*s (default: packed)
dtype
  -fp16             fp16 in/out, P*V accumulated in fp16 (default)
  -fp16-fp32        fp16 in/out, P*V accumulated in fp32
  -bf16             bf16 in/out (fp32 accumulation)
  -e4m3             FP8 e4m3 Q, K, V, fp32 accumulation, P rounded to e4m3 at a power-of-two
                    scale; O in e4m3 by default (-scale-bmm2 scales it into range; rounded to
                    nearest, saturating at +-448)
  -e4m3-fp32        the same (Hopper's QGMMA accumulates in fp32 either way)
  -bf16-output      O in bf16 (with -e4m3)
  -fp16-output      O in fp16 (with -e4m3; refused: no kernel writes it yet)
  -kv-e4m3          K and V in FP8 e4m3 under fp16/bf16 Q and O (an e4m3 KV cache, the
                    decode family: s_q <= 16; -separate-q-k-v or -paged-kv); -scale-k/-scale-v
                    scale the values before they are rounded to e4m3
mask              (p = r + kv_len - q_len: query row r's position among the keys)
  (default)         padding: key j is visible iff j < kv_len
  -causal-mask      also j <= p (bottom-right aligned)
  -sliding-window-size W   causal, and p - W < j: W keys up to the row's own (Mistral);
                    1..s; -causal-mask may be given with it
  -bidirectional-sliding-window-mask   with -sliding-window-size W: p - W < j < p + W
  -chunked-attention-size C   causal inside chunks of C keys: j <= p and j/C == p/C
                    (Llama-4); C a power of two
  -custom-mask      a random bit per (sequence, query row, key) from -seed decides: j < kv_len
                    and the bit is set (half of them); not with another mask flag
heads and layout
  -mqa              one KV head
  -gqa N            N KV heads; h must be a multiple of N
  (default)         packed QKV [tokens, h + 2*h_kv, d] (needs s_q == s and dv == d)
  -contiguous-q-kv  Q [tokens, h, d] and KV [tokens, 2*h_kv, d] (needs dv == d)
  -separate-q-k-v   Q [tokens, h, d], K [tokens, h_kv, d], V [tokens, h_kv, dv]
  -paged-kv         Q [tokens, h, d] and a paged KV cache: a pool of blocks of N tokens,
                    [block][K: h_kv, N, d][V: h_kv, N, dv] (TensorRT-LLM's), and a block
                    table per sequence; the driver places the blocks in a random order
  -tokens-per-block N   N for -paged-kv: 16, 32, 64 or 128 (default 64)
  -packed-qkv       names the default layout (one of the four layout flags at most)
kernel choice
  -list-kernels     print the kernel registry and exit (no GPU needed)
  -kernel NAME      run this registry row (exit 2 if it does not exist or does not fit)
  -force-non-warp-specialization   only consider kernels that are not warp-specialised
  -use-tma                         only consider kernels that load tiles with TMA (ws family)
numerics
  -scale-bmm1 X     S = X * Q K^T, X > 0 (default 1/sqrt(d))
  -scale-softmax X  O = scale_softmax * scale_bmm2 * softmax(S) V (default 1)
  -scale-bmm2 X     (default 1)
  -softcapping-scale-bmm1 C   S = C * tanh(S / C) before the softmax (Gemma-2), C > 0
  -alibi            ALiBi: S -= m_h * |p - j|, slopes m_h per query head as in the ALiBi paper
                    (geometric, any head count); not with -softcapping-scale-bmm1
  -attention-bias   S += bias[b, h, r, j]: an additive bias, uniform in [-2, 2] from -seed
  -attention-bias-shape bh|b1|1h|11   which of batch and heads the bias has ('1': broadcast;
                    default bh); implies -attention-bias
  (one score modifier at a time: -softcapping-scale-bmm1, -alibi, -attention-bias, -custom-mask)
  -use-attention-sinks        a logit per query head joins every row's softmax denominator
                    (gpt-oss); drawn from -seed, uniform in [-1, 3]
  -save-softmax     the kernel also writes each row's log-sum-exp of its logits (sinks
                    included), checked against the reference; lse.npy with -save-tensors
  -bwd              then the backward pass on dO from -seed (fp16/bf16, d and dv multiples
                    of 8 up to 256; not with -custom-mask, -attention-bias or -paged-kv;
                    implies -save-softmax): dQ, dK, dV checked against the GPU reference,
                    a Backward line with its time (Tflop/s at 2.5x the forward's FLOPs)
  -deterministic    with -bwd: dQ added in a fixed order (bitwise reproducible); the timed
                    runs' dQ, dK, dV are compared bit for bit with the checked run's
  -dropout P        drop each probability of P V with probability P in [0, 1) (the kept
                    ones scaled by 1/(1-P)); the mask is a function of -seed and the
                    (sequence, head, row, key), the same in -bwd and in the reference;
                    fp16/bf16, the flash family, no score modifier
inputs and checks
  -range-q/-range-k/-range-v R   uniform in [-R, R] (default 1); std R with -randn
  -scale-q/-scale-k/-scale-v X   multiply the inputs by X (default 1)
  -randn            normal instead of uniform inputs (Box-Muller)
  -1s               every input element is its -scale-q/-k/-v (1 by default)
  -seed N           seed of the inputs and of the sequence lengths (default 1234)
  -epsilon E        an element fails when |a-b|/(|a|+|b|) > E, or |a-b| > E when
                    |a|+|b| <= E, or either is NaN (default fp16 0.015, bf16 0.025, e4m3 0.15)
  -skip-checks      Checks is DISABLED; the reference is not run (unless -save-tensors),
                    so the speed-up in the Elapsed line reads (n/a)
  -save-tensors DIR write q, k, v, o, o_ref (float32 .npy, logical padded layout),
                    seqlens_q, seqlens_kv (int32), sinks, lse and lse_ref, bias,
                    custom_mask (int32 0/1), k_pool, v_pool, block_table (when used)
                    and meta.json into DIR
timing and output
  -runs N           timed launches, averaged (default 10)
  -warm-up-runs N   untimed launches before them (default 10)
  -v 0|1            1 adds labelled details before the summary (default 0)
  -help, --help     this text

limits: b and h <= 65535; b*s*(h + 2*h_kv) (token, head) rows must fit in int32;
element offsets are 64-bit.
exit codes: 0 passed or checks disabled, 1 check failed, 2 bad arguments or no kernel
fits, 3 no CUDA device, CUDA error or out of memory.
)";

struct IntOption {
    const char* flag;
    int Problem::*field;
    int lo, hi;
};
const IntOption kIntOptions[] = {
    {"-b", &Problem::b, 1, kMaxBatchOrHeads},
    {"-h", &Problem::h, 1, kMaxBatchOrHeads},
    {"-d", &Problem::d, 1, kMaxHeadSize},
    {"-dv", &Problem::dv, 1, kMaxHeadSize},
    {"-s", &Problem::s, 1, kMaxSeqLen},
    {"-min-s", &Problem::min_s, 1, kMaxSeqLen},
    {"-s-q", &Problem::s_q, 1, kMaxSeqLen},
    {"-gqa", &Problem::h_kv, 1, kMaxBatchOrHeads},
    {"-sliding-window-size", &Problem::sliding_window_size, 1, kMaxSeqLen},
    {"-chunked-attention-size", &Problem::chunked_attention_size, 1, 1 << 30},
    {"-tokens-per-block", &Problem::tokens_per_block, 1, 1 << 20},
    {"-runs", &Problem::runs, 1, kMaxRuns},
    {"-warm-up-runs", &Problem::warm_up_runs, 0, kMaxRuns},
    {"-v", &Problem::verbose, 0, 1},
};

struct FloatOption {
    const char* flag;
    float Problem::*field;
    bool positive;  // must be > 0 (else: any finite value)
};
const FloatOption kFloatOptions[] = {
    {"-scale-bmm1", &Problem::scale_bmm1, true},  // the softmax takes max(S) * scale as the max
    {"-scale-softmax", &Problem::scale_softmax, false},
    {"-scale-bmm2", &Problem::scale_bmm2, false},
    {"-range-q", &Problem::range_q, true},
    {"-range-k", &Problem::range_k, true},
    {"-range-v", &Problem::range_v, true},
    {"-scale-q", &Problem::scale_q, false},
    {"-scale-k", &Problem::scale_k, false},
    {"-scale-v", &Problem::scale_v, false},
    {"-epsilon", &Problem::epsilon, true},
    {"-softcapping-scale-bmm1", &Problem::softcapping_scale_bmm1, true},
    {"-dropout", &Problem::dropout_p, false},
};

struct StringOption {
    const char* flag;
    std::string Problem::*field;
};
const StringOption kStringOptions[] = {
    {"-kernel", &Problem::kernel_name},
    {"-save-tensors", &Problem::save_dir},
    {"-attention-bias-shape", &Problem::bias_shape},
};

struct Switch {
    const char* flag;
    void (*apply)(Problem&);
};
const Switch kSwitches[] = {
    {"-fix-s", [](Problem& p) { p.fix_s = true; }},
    {"-pad-s", [](Problem& p) { p.pad_s = true; }},
    {"-fp16", [](Problem& p) { p.dtype = DataType::kFp16; p.acc = DataType::kFp16; }},
    {"-fp16-fp32", [](Problem& p) { p.dtype = DataType::kFp16; p.acc = DataType::kFp32; }},
    {"-bf16", [](Problem& p) { p.dtype = DataType::kBf16; p.acc = DataType::kFp32; }},
    {"-e4m3", [](Problem& p) { p.dtype = DataType::kE4m3; p.acc = DataType::kFp32; }},
    {"-e4m3-fp32", [](Problem& p) { p.dtype = DataType::kE4m3; p.acc = DataType::kFp32; }},
    {"-bf16-output", [](Problem& p) { p.out_dtype = DataType::kBf16; }},
    {"-kv-e4m3", [](Problem& p) { p.kv_dtype = DataType::kE4m3; }},
    {"-fp16-output", [](Problem& p) { p.out_dtype = DataType::kFp16; }},
    {"-causal-mask", [](Problem& p) { p.mask = MaskType::kCausal; }},
    {"-bidirectional-sliding-window-mask", [](Problem& p) { p.mask = MaskType::kBidirectionalWindow; }},
    {"-mqa", [](Problem& p) { p.h_kv = 1; }},
    {"-contiguous-q-kv", [](Problem& p) { p.layout = Layout::kContiguousQKv; }},
    {"-separate-q-k-v", [](Problem& p) { p.layout = Layout::kSeparateQKv; }},
    {"-paged-kv", [](Problem& p) { p.layout = Layout::kPagedKv; }},
    {"-packed-qkv", [](Problem& p) { p.layout = Layout::kPackedQkv; }},
    {"-force-non-warp-specialization", [](Problem& p) { p.force_non_warp_specialized = true; }},
    {"-use-tma", [](Problem& p) { p.use_tma = true; }},
    {"-list-kernels", [](Problem& p) { p.list_kernels = true; }},
    {"-1s", [](Problem& p) { p.ones = true; }},
    {"-randn", [](Problem& p) { p.randn = true; }},
    {"-use-attention-sinks", [](Problem& p) { p.attention_sinks = true; }},
    {"-save-softmax", [](Problem& p) { p.save_softmax = true; }},
    {"-bwd", [](Problem& p) { p.bwd = true; }},
    {"-deterministic", [](Problem& p) { p.deterministic = true; }},
    {"-alibi", [](Problem& p) { p.alibi = true; }},
    {"-attention-bias", [](Problem& p) { p.attention_bias = true; }},
    {"-custom-mask", [](Problem& p) { p.mask = MaskType::kCustom; }},
    {"-skip-checks", [](Problem& p) { p.skip_checks = true; }},
};

// Groups of flags of which at most one may be given.
const char* const kExclusive[][5] = {
    {"-fp16", "-fp16-fp32", "-bf16", "-e4m3", "-e4m3-fp32"},
    {"-bf16-output", "-fp16-output", nullptr, nullptr, nullptr},
    {"-packed-qkv", "-contiguous-q-kv", "-separate-q-k-v", "-paged-kv", nullptr},
    {"-mqa", "-gqa", nullptr, nullptr, nullptr},
    {"-1s", "-randn", nullptr, nullptr, nullptr},
    {"-sliding-window-size", "-chunked-attention-size", "-custom-mask", nullptr, nullptr},
    {"-bidirectional-sliding-window-mask", "-causal-mask", "-custom-mask", nullptr, nullptr},
    {"-bidirectional-sliding-window-mask", "-chunked-attention-size", nullptr, nullptr, nullptr},
    {"-causal-mask", "-custom-mask", nullptr, nullptr, nullptr},
    // One score modifier per kernel (softmax/score_mod.h); the custom mask is one.
    // (-attention-bias-shape counts as -attention-bias: kImplies.)
    {"-alibi", "-softcapping-scale-bmm1", "-attention-bias", "-custom-mask", nullptr},
};

// Flags that stand for another in kExclusive's groups: given the first, the group sees the
// second, under the name that was typed.
const char* const kImplies[][2] = {
    {"-attention-bias-shape", "-attention-bias"},
};

template <class T, size_t N>
const T* find_option(const T (&table)[N], const std::string& flag) {
    for (const T& o : table)
        if (flag == o.flag) return &o;
    return nullptr;
}

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s, &end, 10);
    if (text.empty() || *end != '\0' || std::isspace(static_cast<unsigned char>(s[0])))
        fail_args(flag + " expects an integer, got '" + text + "'");
    if (errno == ERANGE || v < lo || v > hi)
        fail_args(flag + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                  ", got " + text);
    return static_cast<int>(v);
}

uint64_t parse_u64(const std::string& flag, const std::string& text) {
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (text.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(s[0])))
        fail_args(flag + " expects a non-negative integer, got '" + text + "'");
    if (errno == ERANGE) fail_args(flag + " does not fit in 64 bits: " + text);
    return v;
}

float parse_float(const std::string& flag, const std::string& text, bool positive) {
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(s, &end);
    if (text.empty() || *end != '\0' || std::isspace(static_cast<unsigned char>(s[0])) ||
        !std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
        fail_args(flag + " expects a finite number, got '" + text + "'");
    if (positive && !(v > 0.0)) fail_args(flag + " must be > 0, got " + text);
    return static_cast<float>(v);
}

// The largest |logit| the run's inputs can give, in log2 units: |S| <= d * max|q| * max|k|,
// each max from its fill (uniform: range * scale; normal: 5.8 std, the most Box-Muller makes
// of 24-bit uniforms; 1 % for rounding to 16 bits); softcapping bounds it by the cap, ALiBi
// adds at most a slope (< 1) times s, the bias its largest entry (2, or 5.8 std of 2).
constexpr double kLog2e = 1.4426950408889634;  // the kernels' logits are S * scale_bmm1 * log2(e)

double logit_bound_log2(const Problem& p) {
    constexpr double kNormalMax = 5.8, kRounding = 1.01;
    auto most = [&](float range, float scale) {
        return (p.ones ? 1.0 : (p.randn ? kNormalMax : 1.0) * range) * std::fabs(double(scale)) * kRounding;
    };
    double logit = double(p.scale_bmm1) * p.d * most(p.range_q, p.scale_q) * most(p.range_k, p.scale_k);
    if (p.softcapping_scale_bmm1 > 0.f) logit = p.softcapping_scale_bmm1;
    if (p.alibi) logit += p.s;
    if (p.attention_bias) logit += 2.0 * (p.randn ? kNormalMax : 1.0);
    return logit * kLog2e;
}

// Cross-flag rules and defaults that depend on other flags.
void resolve_and_validate(Problem& p, const std::set<std::string>& seen) {
    auto given = [&](const char* f) { return seen.count(f) != 0; };

    // The flag as typed that stands for f (f itself, or one that implies it); "" if none.
    auto typed = [&](const char* f) -> std::string {
        if (given(f)) return f;
        for (const auto& imp : kImplies)
            if (std::string(imp[1]) == f && given(imp[0])) return imp[0];
        return "";
    };
    for (const auto& group : kExclusive) {
        std::string first;
        for (const char* f : group) {
            if (f == nullptr) continue;
            const std::string name = typed(f);
            if (name.empty()) continue;
            if (!first.empty()) fail_args(first + " and " + name + " cannot be combined");
            first = name;
        }
    }

    // O's dtype: the inputs' for fp16 and bf16; e4m3 by default for e4m3 inputs (fmha_v2's),
    // or what -bf16-output / -fp16-output ask. The e4m3 kernels write e4m3 or bf16.
    const bool fp8 = p.dtype == DataType::kE4m3;
    if (!given("-bf16-output") && !given("-fp16-output")) p.out_dtype = p.dtype;
    if (!fp8 && p.out_dtype != p.dtype)
        fail_args(std::string(given("-bf16-output") ? "-bf16-output" : "-fp16-output") +
                  " is for e4m3 inputs (-e4m3): fp16 and bf16 runs write O in their own dtype");
    if (fp8 && p.out_dtype == DataType::kFp16)
        fail_args("-e4m3 -fp16-output: no kernel writes O in fp16 yet; the e4m3 kernels write e4m3 (the default) "
                  "or bf16 (-bf16-output)");
    if (fp8 && (given("-attention-bias") || given("-attention-bias-shape")))
        fail_args("-attention-bias with -e4m3: the bias is in the inputs' dtype, and no e4m3 kernel takes one");
    // An e4m3 KV cache under 16-bit queries: K and V in tensors of their own.
    if (!given("-kv-e4m3")) p.kv_dtype = p.dtype;
    if (given("-kv-e4m3") && fp8) fail_args("-kv-e4m3 is for fp16/bf16 queries: with -e4m3 every input is e4m3 already");
    if (given("-kv-e4m3") && p.layout != Layout::kSeparateQKv && p.layout != Layout::kPagedKv)
        fail_args("-kv-e4m3 needs -separate-q-k-v or -paged-kv: Q and the e4m3 K and V are tensors of their own");
    if (given("-kv-e4m3") && given("-bwd")) fail_args("-kv-e4m3: forward only (an inference KV cache); drop -bwd");

    if (!given("-mqa") && !given("-gqa")) p.h_kv = p.h;
    if (!given("-dv")) p.dv = p.d;
    if (!given("-min-s")) p.min_s = p.s;
    if (!given("-s-q")) p.s_q = p.s;
    if (p.min_s > p.s)
        fail_args("-min-s " + std::to_string(p.min_s) + " is larger than -s " + std::to_string(p.s));
    if (p.fix_s && p.min_s != p.s)
        fail_args("-fix-s makes every length -s " + std::to_string(p.s) + "; drop -min-s " +
                  std::to_string(p.min_s));
    if (p.fix_s) p.min_s = p.s;
    if (p.s_q > p.s)
        fail_args("-s-q " + std::to_string(p.s_q) + " is larger than -s " + std::to_string(p.s));

    // The local masks (params.h): the window or chunk flag picks the mask; -causal-mask may
    // come with the causal ones.
    if (given("-bidirectional-sliding-window-mask") && !given("-sliding-window-size"))
        fail_args("-bidirectional-sliding-window-mask needs -sliding-window-size W");
    if (given("-sliding-window-size")) {
        if (p.sliding_window_size > p.s)
            fail_args("-sliding-window-size " + std::to_string(p.sliding_window_size) + " is larger than -s " +
                      std::to_string(p.s));
        if (p.mask != MaskType::kBidirectionalWindow) p.mask = MaskType::kSlidingWindow;
    }
    if (given("-chunked-attention-size")) {
        const int c = p.chunked_attention_size;
        if ((c & (c - 1)) != 0)
            fail_args("-chunked-attention-size must be a power of two, got " + std::to_string(c));
        p.mask = MaskType::kChunked;
    }

    if (given("-attention-bias-shape")) {
        const std::string& b = p.bias_shape;
        if (b != "bh" && b != "b1" && b != "1h" && b != "11")
            fail_args("-attention-bias-shape must be bh, b1, 1h or 11 (batch, heads; 1: broadcast), got '" + b + "'");
        p.attention_bias = true;
        p.bias_per_batch = b[0] == 'b';
        p.bias_per_head = b[1] == 'h';
    }

    if (given("-tokens-per-block")) {
        const int t = p.tokens_per_block;
        if (t != 16 && t != 32 && t != 64 && t != 128)
            fail_args("-tokens-per-block must be 16, 32, 64 or 128, got " + std::to_string(t));
        if (p.layout != Layout::kPagedKv) fail_args("-tokens-per-block needs -paged-kv");
    }

    if (p.h % p.h_kv != 0)
        fail_args("-h " + std::to_string(p.h) + " is not a multiple of the KV head count " +
                  std::to_string(p.h_kv) + " (-gqa)");

    if (p.layout == Layout::kPackedQkv && (p.s_q != p.s || p.dv != p.d))
        fail_args("packed QKV needs s_q == s and dv == d; use -contiguous-q-kv or -separate-q-k-v");
    if (p.layout == Layout::kContiguousQKv && p.dv != p.d)
        fail_args("contiguous Q + KV needs dv == d; use -separate-q-k-v");

    // Every (token, head) row of every tensor must be addressable with an int32 index.
    const int64_t rows = int64_t(p.b) * p.s * (int64_t(p.h) + 2 * int64_t(p.h_kv));
    if (rows > std::numeric_limits<int32_t>::max())
        fail_args("problem too large: b*s*(h + 2*h_kv) = " + std::to_string(rows) +
                  " (token, head) rows overflow 32-bit indexing");

    if (!given("-scale-bmm1")) p.scale_bmm1 = 1.f / std::sqrt(static_cast<float>(p.d));
    // The kernels scale logits by scale_bmm1 * log2(e) in fp32 (softmax/exp2_row.h).
    if (!std::isfinite(p.scale_bmm1 * static_cast<float>(kLog2e)))
        fail_args("-scale-bmm1 is too large: times log2(e) it overflows fp32");
    // Half of 2^24: a row max rounded up stays below it (softmax/exp2_row.h).
    p.wide_logits = logit_bound_log2(p) >= 0x1p23;
    if (!given("-epsilon"))
        p.epsilon = p.dtype == DataType::kE4m3   ? kDefaultEpsilonE4m3
                    : p.dtype == DataType::kBf16 ? kDefaultEpsilonBf16
                                                 : kDefaultEpsilonFp16;
    if (p.deterministic && !p.bwd) fail_args("-deterministic applies to the backward pass: add -bwd");
    if (!(p.dropout_p >= 0.f && p.dropout_p < 1.f))
        fail_args(format("-dropout must be in [0, 1), got %g", double(p.dropout_p)));
    if (p.dropout_p > 0.f && p.dtype == DataType::kE4m3) fail_args("-dropout: fp16 and bf16 inputs only");
    if (p.dropout_p > 0.f && (p.alibi || p.softcapping_scale_bmm1 > 0.f || p.attention_bias || p.mask == MaskType::kCustom))
        fail_args("-dropout: not with a score modifier (-alibi, -softcapping-scale-bmm1, -attention-bias, -custom-mask)");
    if (p.bwd) {  // the forward's LSE is the backward's input
        const std::string why = backward_refusal(p);
        if (!why.empty()) fail_args(why);
        p.save_softmax = true;
    }
}

}  // namespace

[[noreturn]] void fail_args(const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::exit(kExitBadArgs);
}

Problem parse_cli(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "-help") == 0 || std::strcmp(argv[i], "--help") == 0) {
            std::fputs(kUsage, stdout);
            std::exit(kExitOk);
        }
    }

    Problem p;
    std::set<std::string> seen;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail_args(flag + " needs a value");
            return argv[++i];
        };
        seen.insert(flag);

        if (const Switch* o = find_option(kSwitches, flag)) {
            o->apply(p);
        } else if (const IntOption* o = find_option(kIntOptions, flag)) {
            p.*(o->field) = parse_int(flag, value(), o->lo, o->hi);
        } else if (const FloatOption* o = find_option(kFloatOptions, flag)) {
            p.*(o->field) = parse_float(flag, value(), o->positive);
        } else if (const StringOption* o = find_option(kStringOptions, flag)) {
            p.*(o->field) = value();
            if ((p.*(o->field)).empty()) fail_args(flag + " needs a non-empty value");
        } else if (flag == "-seed") {
            p.seed = parse_u64(flag, value());
        } else {
            fail_args("unknown flag '" + flag + "' (see -help)");
        }
    }
    resolve_and_validate(p, seen);
    return p;
}

const char* dtype_name(DataType t) { return api::dtype_text(t); }

const char* dtype_label(const Problem& p) {
    if (p.dtype == DataType::kE4m3) return "E4M3";
    if (p.dtype == DataType::kBf16) return "BF16";
    return p.acc == DataType::kFp32 ? "FP16_FP32" : "FP16";
}

const char* output_dtype_label(const Problem& p) {
    return p.out_dtype == DataType::kE4m3 ? "E4M3" : p.out_dtype == DataType::kBf16 ? "BF16" : "FP16";
}

const char* mask_label(MaskType m) { return api::mask_name(m); }

const char* layout_label(Layout l) {
    switch (l) {
        case Layout::kPackedQkv: return "packed_qkv";
        case Layout::kContiguousQKv: return "contiguous_q_kv";
        case Layout::kSeparateQKv: return "separate_q_k_v";
        case Layout::kPagedKv: return "q_paged_kv";
    }
    return "?";
}

const char* attn_label(const Problem& p) {
    if (p.h_kv == p.h) return "mha";
    return p.h_kv == 1 ? "mqa" : "gqa";
}

}  // namespace fmha
