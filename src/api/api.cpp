// The C API (include/fmha.h) over the registry: checks a problem field by field, turns it
// into Params, chooses the kernel and launches it. Failures are a status and a thread-local
// one-line reason; nothing here prints, exits or allocates device memory.
#include "fmha.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "api/backward.h"
#include "api/select.h"
#include "format.h"
#include "kernel_meta.h"
#include "params.h"

namespace fmha {
namespace api {
namespace {

thread_local std::string t_error;

fmha_status_t fail(fmha_status_t status, const std::string& why) {
    t_error = why;
    return status;
}

// The workspace: a tile counter (persistent kernels), then the family's own (decode's split
// partials), 256-byte aligned. The sequences' lengths need none: kernels read cu_seqlens and
// seqused_k themselves (fmha/seq_lens.h), so a call is one launch.
constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
constexpr size_t kFamilyOffset = kAlign;

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

std::string field(const char* name, int64_t value) { return std::string(name) + " = " + std::to_string(value); }

// A tensor's address and strides: set, 16-byte aligned, a positive token stride and both
// strides multiples of `step` elements.
fmha_status_t check_tensor(const fmha_tensor_t& t, const char* name, int64_t step) {
    if (t.data == nullptr) return fail(FMHA_ERROR_INVALID_VALUE, std::string(name) + ".data is NULL");
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
        return fail(FMHA_ERROR_INVALID_VALUE, std::string(name) + ".data is not 16-byte aligned");
    if (t.token_stride <= 0 || t.token_stride % step != 0 || t.head_stride < 0 || t.head_stride % step != 0)
        return fail(FMHA_ERROR_INVALID_VALUE, std::string(name) + ": token_stride " + std::to_string(t.token_stride) +
                                                  ", head_stride " + std::to_string(t.head_stride) +
                                                  ": positive token stride, both multiples of " +
                                                  std::to_string(step) + " elements");
    return FMHA_SUCCESS;
}

// Tokens from one sequence to the next of fixed-length storage; -1 when not whole tokens.
int64_t token_step(const fmha_tensor_t& t) {
    if (t.token_stride <= 0 || t.batch_stride < 0 || t.batch_stride % t.token_stride != 0) return -1;
    return t.batch_stride / t.token_stride;
}

// Fixed-length storage of a tensor pair (q and o, k and v): the same whole number of tokens
// from one sequence to the next (*step), room for max_s of them; *tokens, when 0, becomes the
// storage's token count.
fmha_status_t fixed_storage(const fmha_tensor_t& a, const fmha_tensor_t& b, const char* a_name, const char* b_name,
                            int batch, int max_s, const char* max_name, int64_t* step, int64_t* tokens) {
    const int64_t sa = token_step(a), sb = token_step(b);
    if (sa < 0 || sb != sa)
        return fail(FMHA_ERROR_INVALID_VALUE, std::string(a_name) + " and " + b_name +
                                                  ": batch_stride must be the same whole number of tokens (" +
                                                  std::to_string(sa) + " vs " + std::to_string(sb) + ")");
    if (batch > 1 && sa < max_s)
        return fail(FMHA_ERROR_INVALID_VALUE, std::string(a_name) + ".batch_stride holds " + std::to_string(sa) +
                                                  " tokens, fewer than " + max_name + " = " + std::to_string(max_s));
    *step = sa;
    if (*tokens == 0) *tokens = (batch - 1) * sa + max_s;
    return FMHA_SUCCESS;
}

// Everything that can be checked without the device; fills params (no workspace yet) and
// the request.
fmha_status_t check(const fmha_problem_t* pr, Params& p, Request& r) {
    if (pr == nullptr) return fail(FMHA_ERROR_INVALID_VALUE, "problem is NULL");
    if (pr->struct_size != sizeof(fmha_problem_t))
        return fail(FMHA_ERROR_INVALID_VALUE, "problem.struct_size = " + std::to_string(pr->struct_size) +
                                                  ", this library's fmha_problem_t has " +
                                                  std::to_string(sizeof(fmha_problem_t)) + " (call fmha_problem_init)");
    if (pr->dtype != FMHA_DTYPE_FP16 && pr->dtype != FMHA_DTYPE_BF16 && pr->dtype != FMHA_DTYPE_E4M3)
        return fail(FMHA_ERROR_INVALID_VALUE, "dtype must be FMHA_DTYPE_FP16, FMHA_DTYPE_BF16 or FMHA_DTYPE_E4M3");
    const bool fp8 = pr->dtype == FMHA_DTYPE_E4M3;
    const bool kv8 = pr->kv_e4m3 != 0;  // an e4m3 KV cache under 16-bit queries
    if (kv8 && fp8)
        return fail(FMHA_ERROR_INVALID_VALUE, "kv_e4m3: for FMHA_DTYPE_FP16 or FMHA_DTYPE_BF16 queries (with "
                                              "FMHA_DTYPE_E4M3 every input is e4m3)");
    if (!fp8 && (pr->q_descale != nullptr || ((pr->k_descale != nullptr || pr->v_descale != nullptr) && !kv8)))
        return fail(FMHA_ERROR_INVALID_VALUE, "q_descale, k_descale, v_descale: for FMHA_DTYPE_E4M3 inputs only "
                                              "(k_descale and v_descale also with kv_e4m3)");
    if (fp8 && pr->acc != FMHA_DTYPE_FP32) return fail(FMHA_ERROR_INVALID_VALUE, "e4m3: acc must be FMHA_DTYPE_FP32");
    if (!fp8 && pr->o_e4m3 != 0)
        return fail(FMHA_ERROR_INVALID_VALUE, "o_e4m3: for FMHA_DTYPE_E4M3 inputs only (16-bit inputs write O in their dtype)");
    if (pr->acc != FMHA_DTYPE_FP32 && pr->acc != FMHA_DTYPE_FP16)
        return fail(FMHA_ERROR_INVALID_VALUE, "acc must be FMHA_DTYPE_FP32 or FMHA_DTYPE_FP16");
    if (pr->b < 1 || pr->b > 65535) return fail(FMHA_ERROR_INVALID_VALUE, field("b", pr->b) + ": must be in [1, 65535]");
    if (pr->h < 1 || pr->h > 65535) return fail(FMHA_ERROR_INVALID_VALUE, field("h", pr->h) + ": must be in [1, 65535]");
    if (pr->h_kv < 1 || pr->h % pr->h_kv != 0)
        return fail(FMHA_ERROR_INVALID_VALUE, field("h_kv", pr->h_kv) + ": must divide h = " + std::to_string(pr->h));
    if (pr->d < 8 || pr->d % 8 != 0 || pr->dv < 8 || pr->dv % 8 != 0)
        return fail(FMHA_ERROR_INVALID_VALUE, "d = " + std::to_string(pr->d) + ", dv = " + std::to_string(pr->dv) +
                                                  ": head sizes are multiples of 8");
    constexpr int kMaxLen = 1 << 24;
    if (pr->max_s_q < 1 || pr->max_s_q > kMaxLen || pr->max_s_kv < 1 || pr->max_s_kv > kMaxLen)
        return fail(FMHA_ERROR_INVALID_VALUE, "max_s_q = " + std::to_string(pr->max_s_q) + ", max_s_kv = " +
                                                  std::to_string(pr->max_s_kv) + ": must be in [1, 2^24]");
    const fmha_tensor_t* tensors[] = {&pr->q, &pr->k, &pr->v, &pr->o};
    const char* names[] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; ++i) {
        // 16 bytes: 8 16-bit elements; e4m3's Q, K and V 16 (TMA), its O 8 (bf16; e4m3 O: 8
        // bytes, which its 4-byte stores need).
        const fmha_status_t st = check_tensor(*tensors[i], names[i], (fp8 && i < 3) || (kv8 && (i == 1 || i == 2)) ? 16 : 8);
        if (st != FMHA_SUCCESS) return st;
    }
    const bool paged = pr->block_table != nullptr;

    // Sequences: packed by cu_seqlens, or fixed lengths batch_stride apart.
    int64_t q_step = 0, kv_step = 0;  // fixed lengths: tokens from one sequence to the next
    int64_t q_tokens = pr->q_tokens, kv_tokens = pr->kv_tokens;
    if (pr->cu_seqlens_q == nullptr) {
        const fmha_status_t st = fixed_storage(pr->q, pr->o, "q", "o", pr->b, pr->max_s_q, "max_s_q", &q_step,
                                               &q_tokens);
        if (st != FMHA_SUCCESS) return st;
    } else if (q_tokens < 1) {
        return fail(FMHA_ERROR_INVALID_VALUE, "q_tokens: the token count of q's storage is needed with cu_seqlens_q");
    }
    if (paged) {
        if (!is_pow2(pr->block_size) || pr->block_size < 16)
            return fail(FMHA_ERROR_INVALID_VALUE, field("block_size", pr->block_size) + ": a power of two >= 16");
        if (pr->num_blocks < 1) return fail(FMHA_ERROR_INVALID_VALUE, field("num_blocks", pr->num_blocks) + ": >= 1");
        if (int64_t(pr->block_table_stride) * pr->block_size < pr->max_s_kv)
            return fail(FMHA_ERROR_INVALID_VALUE, "block_table_stride = " + std::to_string(pr->block_table_stride) +
                                                      " blocks of " + std::to_string(pr->block_size) +
                                                      " tokens cannot hold max_s_kv = " + std::to_string(pr->max_s_kv));
        const int64_t step = fp8 || kv8 ? 16 : 8;
        if (pr->k_block_stride <= 0 || pr->k_block_stride % step != 0 || pr->v_block_stride <= 0 ||
            pr->v_block_stride % step != 0)
            return fail(FMHA_ERROR_INVALID_VALUE, "k_block_stride, v_block_stride: positive multiples of " +
                                                      std::to_string(step) + " elements");
        kv_tokens = pr->num_blocks;  // the paged maps span the pool (Params::kv_pool_blocks)
    } else if (pr->cu_seqlens_k == nullptr) {
        const fmha_status_t st = fixed_storage(pr->k, pr->v, "k", "v", pr->b, pr->max_s_kv, "max_s_kv", &kv_step,
                                               &kv_tokens);
        if (st != FMHA_SUCCESS) return st;
    } else if (kv_tokens < 1) {
        return fail(FMHA_ERROR_INVALID_VALUE, "kv_tokens: the token count of k's storage is needed with cu_seqlens_k");
    }
    if (q_tokens > INT32_MAX || kv_tokens > INT32_MAX)
        return fail(FMHA_ERROR_INVALID_VALUE, "q_tokens, kv_tokens: at most 2^31 - 1");

    // Mask and score modifiers.
    if (pr->mask < FMHA_MASK_NONE || pr->mask > FMHA_MASK_CUSTOM)
        return fail(FMHA_ERROR_INVALID_VALUE, field("mask", pr->mask) + ": not an fmha_mask_t");
    const MaskType mask = static_cast<MaskType>(pr->mask);
    if ((mask == MaskType::kSlidingWindow || mask == MaskType::kBidirectionalWindow) && pr->window < 1)
        return fail(FMHA_ERROR_INVALID_VALUE, field("window", pr->window) + ": a window mask needs window >= 1");
    if (mask == MaskType::kChunked && (!is_pow2(pr->chunk) || pr->chunk > (1 << 30)))
        return fail(FMHA_ERROR_INVALID_VALUE, field("chunk", pr->chunk) + ": a power of two");
    if (mask == MaskType::kCustom &&
        (pr->custom_mask == nullptr || int64_t(pr->custom_mask_row_words) * 32 < pr->max_s_kv))
        return fail(FMHA_ERROR_INVALID_VALUE, "custom mask: custom_mask set and custom_mask_row_words >= ceil(max_s_kv / 32)");
    const float scale = pr->scale == 0.f ? 1.f / std::sqrt(float(pr->d)) : pr->scale;
    if (!(scale > 0.f) || !std::isfinite(scale * 1.4426950408889634f))
        return fail(FMHA_ERROR_INVALID_VALUE, "scale must be > 0 and finite (times log2(e))");
    if (!(pr->softcap >= 0.f) || !std::isfinite(pr->softcap))
        return fail(FMHA_ERROR_INVALID_VALUE, "softcap must be >= 0 and finite");
    const int mods = (pr->softcap > 0.f) + (pr->alibi_slopes != nullptr) + (pr->bias != nullptr) +
                     (mask == MaskType::kCustom);
    if (mods > 1)
        return fail(FMHA_ERROR_NOT_SUPPORTED, "softcap, alibi_slopes, bias and a custom mask: one at a time");
    if (pr->bias != nullptr && (pr->bias_row_stride < pr->max_s_kv || pr->bias_batch_stride < 0 || pr->bias_head_stride < 0))
        return fail(FMHA_ERROR_INVALID_VALUE, "bias: bias_row_stride >= max_s_kv, other strides >= 0");
    if (!(pr->dropout_p >= 0.f && pr->dropout_p < 1.f))
        return fail(FMHA_ERROR_INVALID_VALUE, format("dropout_p = %g: must be in [0, 1)", double(pr->dropout_p)));
    if (pr->dropout_p > 0.f && fp8) return fail(FMHA_ERROR_NOT_SUPPORTED, "dropout: fp16 and bf16 inputs only");
    if (pr->dropout_p > 0.f && mods > 0)
        return fail(FMHA_ERROR_NOT_SUPPORTED, "dropout: not with softcap, alibi_slopes, bias or a custom mask");

    p = Params{};
    p.q = pr->q.data;
    p.k = pr->k.data;
    p.v = pr->v.data;
    p.o = pr->o.data;
    p.q_row_stride = pr->q.token_stride;
    p.q_head_stride = pr->q.head_stride;
    p.k_row_stride = pr->k.token_stride;
    p.k_head_stride = pr->k.head_stride;
    p.v_row_stride = pr->v.token_stride;
    p.v_head_stride = pr->v.head_stride;
    p.o_row_stride = pr->o.token_stride;
    p.o_head_stride = pr->o.head_stride;
    p.q_tokens = q_tokens;
    p.kv_tokens = kv_tokens;
    p.b = pr->b;
    p.h = pr->h;
    p.h_kv = pr->h_kv;
    p.d = pr->d;
    p.dv = pr->dv;
    p.s_q_max = pr->max_s_q;
    p.s_kv_max = pr->max_s_kv;
    p.mask = mask;
    p.window = pr->window;
    p.chunk = pr->chunk;
    p.scale_bmm1 = scale;
    p.softcap = pr->softcap;
    p.wide_logits = pr->wide_logits != 0;
    p.sinks = pr->sinks;
    p.alibi_slopes = pr->alibi_slopes;
    p.softmax_lse = pr->lse;
    p.attention_bias = pr->bias;
    p.bias_batch_stride = pr->bias_batch_stride;
    p.bias_head_stride = pr->bias_head_stride;
    p.bias_row_stride = pr->bias_row_stride;
    p.custom_mask = pr->custom_mask;
    p.custom_mask_row_words = pr->custom_mask_row_words;
    p.q_descale = pr->q_descale;
    p.k_descale = pr->k_descale;
    p.v_descale = pr->v_descale;
    p.o_e4m3 = pr->o_e4m3 != 0;
    if (pr->dropout_p > 0.f) p.dropout = dropout::make(pr->dropout_p, pr->dropout_seed, pr->dropout_offset);
    if (paged) {
        p.kv_block_table = pr->block_table;
        p.kv_table_stride = pr->block_table_stride;
        p.tokens_per_block = pr->block_size;
        p.kv_pool_blocks = pr->num_blocks;
        p.k_block_stride = pr->k_block_stride;
        p.v_block_stride = pr->v_block_stride;
    }
    // Where each sequence starts and how long it is, read by the kernels (fmha/seq_lens.h):
    // cu_seqlens are the offsets (their differences the lengths), else sequence i starts at
    // i * step; seqused_k, where given, are the key lengths. A paged cache has no offsets.
    p.q_offsets = pr->cu_seqlens_q;
    p.q_step = static_cast<int>(q_step);
    p.kv_offsets = paged ? nullptr : pr->cu_seqlens_k;
    p.kv_step = static_cast<int>(kv_step);
    p.kv_lens = pr->seqused_k;

    r = Request{};
    r.dtype = static_cast<DataType>(pr->dtype);
    r.kv_dtype = kv8 ? DataType::kE4m3 : r.dtype;
    r.acc = static_cast<DataType>(pr->acc);
    r.d = pr->d;
    r.dv = pr->dv;
    r.mask = mask;
    if (pr->softcap > 0.f) r.variants |= kVariantSoftcap;
    if (pr->alibi_slopes != nullptr) r.variants |= kVariantAlibi;
    if (pr->bias != nullptr) r.variants |= kVariantBias;
    if (pr->sinks != nullptr) r.variants |= kVariantSinks;
    if (pr->lse != nullptr) r.variants |= kVariantSoftmaxStats;
    if (paged) r.variants |= kVariantPagedKv;
    if (pr->wide_logits) r.variants |= kVariantWideLogits;
    if (p.dropout.threshold != 0) r.variants |= kVariantDropout;
    r.s_q = pr->max_s_q;
    r.rows_per_kv_head = pr->h / pr->h_kv * pr->max_s_q;
    r.s_kv = pr->max_s_kv;
    return FMHA_SUCCESS;
}

// The reason no row serves the request: the row that comes closest (same dtype and head
// sizes first), in the API's words.
std::string no_kernel(const Request& r, int sm) {
    std::string text = std::string("no kernel of this build serves dtype ") + dtype_text(r.dtype) +
                       (r.kv_dtype != r.dtype ? std::string(" (K, V ") + dtype_text(r.kv_dtype) + ")" : "") + ", d " +
                       std::to_string(r.d) + ", dv " + std::to_string(r.dv) + ", mask " + mask_name(r.mask);
    if (r.variants & kVariantSoftcap) text += ", softcap";
    if (r.variants & kVariantAlibi) text += ", alibi";
    if (r.variants & kVariantBias) text += ", bias";
    if (r.variants & kVariantSinks) text += ", sinks";
    if (r.variants & kVariantSoftmaxStats) text += ", lse";
    if (r.variants & kVariantPagedKv) text += ", paged KV";
    if (r.variants & kVariantWideLogits) text += ", wide logits";
    if (r.variants & kVariantDropout) text += ", dropout";
    text += " on sm_" + std::to_string(sm) + " (" + std::to_string(kNumKernels) + " kernels";
    int best = -1, best_score = -1;
    for (int i = 0; i < kNumKernels; ++i) {
        const KernelMeta& k = kKernels[i];
        const int score = closeness(k, r) + has_image(k, sm);
        if (score > best_score) best = i, best_score = score;
    }
    if (best >= 0) {
        const KernelMeta& k = kKernels[best];
        const uint32_t bits = mismatch(k, r);
        std::string why;
        const auto add = [&](const std::string& w) { why += (why.empty() ? "" : ", ") + w; };
        if (bits & kMismatchDtype) add(std::string("dtype ") + dtype_text(k.dtype));
        if (bits & kMismatchKvDtype) add(std::string("KV dtype ") + dtype_text(k.kv_dtype));
        if (bits & kMismatchAcc) add(std::string("acc ") + dtype_text(k.acc));
        if (bits & kMismatchD) add("d " + std::to_string(k.d));
        if (bits & kMismatchDv) add("dv " + std::to_string(k.dv));
        if (bits & kMismatchMask) add("masks " + masks_text(k.masks));
        if (bits & kMismatchVariants) add("lacks a variant asked for");
        if (bits & kMismatchSq) add("max_s_q <= " + std::to_string(k.max_s_q));
        if (bits & kMismatchRows) add("query rows per KV head <= " + std::to_string(k.max_rows));
        if (!has_image(k, sm)) add(std::string("built for ") + k.archs);
        text += "; closest " + std::string(k.name) + ": " + (why.empty() ? "fits" : why);
    }
    return text + ")";
}

fmha_status_t device_of(int* sm, int* num_sms) {
    if (*sm > 0 && *num_sms > 0) return FMHA_SUCCESS;
    int dev = 0, major = 0, minor = 0, count = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return fail(FMHA_ERROR_CUDA, std::string("no current CUDA device to plan for: ") + cudaGetErrorString(err));
    }
    if (*sm <= 0) *sm = major * 10 + minor;
    if (*num_sms <= 0) *num_sms = count;
    return FMHA_SUCCESS;
}

fmha_status_t plan_checked(const Params& params, const Request& r, int sm, int num_sms, fmha_plan_t* plan) {
    const int row = select(r, sm);
    if (row < 0) return fail(FMHA_ERROR_NOT_SUPPORTED, no_kernel(r, sm));
    const KernelMeta& k = kKernels[row];
    Params p = params;
    p.num_sms = num_sms;
    size_t family = k.workspace != nullptr ? k.workspace(p) : 0;
    *plan = fmha_plan_t{};
    const std::string tile = tile_that_runs(k, p);
    std::snprintf(plan->kernel, sizeof(plan->kernel), "%s", tile.c_str());
    plan->workspace_bytes = kFamilyOffset + align_up(family);
    plan->sm = sm;
    plan->num_sms = num_sms;
    plan->index = row;
    return FMHA_SUCCESS;
}

// The backward pass's checks on top of the forward problem's (check): fills bp (all but
// its workspace) and the ask.
fmha_status_t check_backward(const fmha_problem_t* pr, const fmha_backward_args_t* g, flash_bwd::BwdParams& bp,
                             BackwardAsk& a) {
    Params p;
    Request r;
    fmha_status_t s = check(pr, p, r);
    if (s != FMHA_SUCCESS) return s;
    if (g == nullptr) return fail(FMHA_ERROR_INVALID_VALUE, "args is NULL");
    if (g->struct_size != sizeof(fmha_backward_args_t))
        return fail(FMHA_ERROR_INVALID_VALUE, "args.struct_size = " + std::to_string(g->struct_size) +
                                                  ", this library's fmha_backward_args_t has " +
                                                  std::to_string(sizeof(fmha_backward_args_t)) +
                                                  " (call fmha_backward_args_init)");
    a = BackwardAsk{};
    a.dtype = r.dtype, a.d = pr->d, a.dv = pr->dv, a.mask = r.mask;
    a.bias = pr->bias != nullptr;
    a.paged = pr->block_table != nullptr;
    a.seqused_k = pr->seqused_k != nullptr;
    a.score_extras = pr->softcap > 0.f || pr->alibi_slopes != nullptr || pr->dropout_p > 0.f;
    if (pr->kv_e4m3 != 0) return fail(FMHA_ERROR_NOT_SUPPORTED, "backward: kv_e4m3 (an e4m3 KV cache) is forward only");
    const std::string why = backward_refusal(a);
    if (!why.empty()) return fail(FMHA_ERROR_NOT_SUPPORTED, "backward: " + why);
    if (pr->lse == nullptr) return fail(FMHA_ERROR_INVALID_VALUE, "backward: lse (the forward's) is NULL");

    // Each gradient over its forward tensor's token storage: its own strides, the same
    // tokens from one sequence to the next.
    const struct {
        const char* name;
        const fmha_tensor_t& t;
        const fmha_tensor_t& like;
        const char* like_name;
        bool queries;
    } grads[] = {{"d_o", g->d_o, pr->o, "o", true},
                 {"dq", g->dq, pr->q, "q", true},
                 {"dk", g->dk, pr->k, "k", false},
                 {"dv", g->dv, pr->v, "v", false}};
    for (const auto& x : grads) {
        const fmha_status_t st = check_tensor(x.t, x.name, 8);
        if (st != FMHA_SUCCESS) return st;
        const bool fixed = x.queries ? pr->cu_seqlens_q == nullptr : pr->cu_seqlens_k == nullptr;
        if (fixed && pr->b > 1 && token_step(x.t) != token_step(x.like))
            return fail(FMHA_ERROR_INVALID_VALUE, std::string(x.name) + ".batch_stride holds " +
                                                      std::to_string(token_step(x.t)) + " tokens, " + x.like_name +
                                                      "'s " + std::to_string(token_step(x.like)));
    }
    bp = flash_bwd::BwdParams{};
    bp.p = p;
    bp.d_o = g->d_o.data;
    bp.do_row_stride = g->d_o.token_stride, bp.do_head_stride = g->d_o.head_stride;
    bp.lse = pr->lse;
    bp.d_lse = g->d_lse;
    bp.dq = g->dq.data, bp.dk = g->dk.data, bp.dv = g->dv.data;
    bp.dq_row_stride = g->dq.token_stride, bp.dq_head_stride = g->dq.head_stride;
    bp.dk_row_stride = g->dk.token_stride, bp.dk_head_stride = g->dk.head_stride;
    bp.dv_row_stride = g->dv.token_stride, bp.dv_head_stride = g->dv.head_stride;
    bp.deterministic = g->deterministic != 0;
    a.tma_ready = backward_tma_ready(bp);
    return FMHA_SUCCESS;
}

fmha_status_t plan_backward_checked(const flash_bwd::BwdParams& bp, const BackwardAsk& a, int sm, int num_sms,
                                    fmha_plan_t* plan) {
    const std::string why = backward_arch_refusal(a, sm);
    if (!why.empty()) return fail(FMHA_ERROR_NOT_SUPPORTED, "backward: " + why);
    *plan = fmha_plan_t{};
    std::snprintf(plan->kernel, sizeof(plan->kernel), "%s", backward_kernel_name(a, sm).c_str());
    plan->workspace_bytes = backward_workspace_bytes(bp.p);
    plan->sm = sm;
    plan->num_sms = num_sms;
    plan->index = -1;  // no registry row (yet)
    return FMHA_SUCCESS;
}

// The plan a call runs: `plan` where it belongs to the problem (`belongs`), else
// FMHA_ERROR_INVALID_VALUE naming `again`; NULL: one made here into *here by plan_here(sm,
// num_sms, here) for the current device.
template <class Belongs, class PlanHere>
fmha_status_t plan_for_call(const fmha_plan_t** plan, fmha_plan_t* here, Belongs&& belongs, PlanHere&& plan_here,
                            const char* again) {
    if (*plan != nullptr) {
        if (!belongs(**plan))
            return fail(FMHA_ERROR_INVALID_VALUE, std::string("plan does not belong to this problem (call ") + again +
                                                      " again)");
        return FMHA_SUCCESS;
    }
    int sm = 0, num_sms = 0;
    fmha_status_t s = device_of(&sm, &num_sms);
    if (s == FMHA_SUCCESS) s = plan_here(sm, num_sms, here);
    if (s == FMHA_SUCCESS) *plan = here;
    return s;
}

// FMHA_ERROR_WORKSPACE unless the workspace holds `needed` bytes, 256-byte aligned.
fmha_status_t check_workspace(const void* workspace, size_t workspace_bytes, size_t needed) {
    if (workspace != nullptr && workspace_bytes >= needed && reinterpret_cast<uintptr_t>(workspace) % kAlign == 0)
        return FMHA_SUCCESS;
    return fail(FMHA_ERROR_WORKSPACE, "workspace: " + std::to_string(needed) + " bytes, 256-byte aligned, needed; got " +
                                          std::to_string(workspace_bytes) + (workspace ? "" : " at NULL"));
}

// A launch's status: cudaErrorInvalidValue is the kernel refusing the problem (its launch
// checks; `why` says which), any other error the CUDA call's.
fmha_status_t launched(cudaError_t err, const std::string& kernel, const char* why) {
    if (err == cudaErrorInvalidValue) {
        cudaGetLastError();
        return fail(FMHA_ERROR_INVALID_VALUE, kernel + " refused the problem" + why);
    }
    if (err != cudaSuccess) return fail(FMHA_ERROR_CUDA, "launch of " + kernel + ": " + cudaGetErrorString(err));
    return FMHA_SUCCESS;
}

}  // namespace
}  // namespace api
}  // namespace fmha

using namespace fmha;

extern "C" {

int fmha_version(void) { return FMHA_API_VERSION; }

const char* fmha_last_error(void) { return api::t_error.c_str(); }

void fmha_problem_init(fmha_problem_t* problem) {
    if (problem == nullptr) return;
    std::memset(problem, 0, sizeof(*problem));
    problem->struct_size = sizeof(*problem);
    problem->dtype = FMHA_DTYPE_FP16;
    problem->acc = FMHA_DTYPE_FP32;
    problem->mask = FMHA_MASK_NONE;
}

fmha_status_t fmha_plan(const fmha_problem_t* problem, int sm, int num_sms, fmha_plan_t* plan) {
    api::t_error.clear();
    if (plan == nullptr) return api::fail(FMHA_ERROR_INVALID_VALUE, "plan is NULL");
    Params p;
    api::Request r;
    fmha_status_t s = api::check(problem, p, r);
    if (s == FMHA_SUCCESS) s = api::device_of(&sm, &num_sms);
    if (s == FMHA_SUCCESS) s = api::plan_checked(p, r, sm, num_sms, plan);
    return s;
}

fmha_status_t fmha_forward(const fmha_problem_t* problem, const fmha_plan_t* plan, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
    api::t_error.clear();
    Params p;
    api::Request r;
    fmha_status_t s = api::check(problem, p, r);
    fmha_plan_t here;
    if (s == FMHA_SUCCESS)
        s = api::plan_for_call(
            &plan, &here,
            [&](const fmha_plan_t& pl) {
                return pl.index >= 0 && pl.index < kNumKernels && api::mismatch(kKernels[pl.index], r) == 0;
            },
            [&](int sm, int num_sms, fmha_plan_t* out) { return api::plan_checked(p, r, sm, num_sms, out); },
            "fmha_plan");
    if (s != FMHA_SUCCESS) return s;
    const KernelMeta& k = kKernels[plan->index];
    p.num_sms = plan->num_sms;
    // What this problem needs (a plan made for another batch size would under-count it).
    const size_t family = k.workspace != nullptr ? k.workspace(p) : 0;
    s = api::check_workspace(workspace, workspace_bytes, api::kFamilyOffset + api::align_up(family));
    if (s != FMHA_SUCCESS) return s;
    char* ws = static_cast<char*>(workspace);
    p.tile_counter = reinterpret_cast<int*>(ws);
    if (family > 0) {
        p.workspace = ws + api::kFamilyOffset;
        p.workspace_bytes = workspace_bytes - api::kFamilyOffset;
    }
    return api::launched(k.launch(p, stream), k.name, " (alignment, strides or sizes out of its range)");
}

void fmha_backward_args_init(fmha_backward_args_t* args) {
    if (args == nullptr) return;
    std::memset(args, 0, sizeof(*args));
    args->struct_size = sizeof(*args);
}

fmha_status_t fmha_plan_backward(const fmha_problem_t* problem, const fmha_backward_args_t* args, int sm,
                                 int num_sms, fmha_plan_t* plan) {
    api::t_error.clear();
    if (plan == nullptr) return api::fail(FMHA_ERROR_INVALID_VALUE, "plan is NULL");
    flash_bwd::BwdParams bp;
    api::BackwardAsk a;
    fmha_status_t s = api::check_backward(problem, args, bp, a);
    if (s == FMHA_SUCCESS) s = api::device_of(&sm, &num_sms);
    if (s == FMHA_SUCCESS) s = api::plan_backward_checked(bp, a, sm, num_sms, plan);
    return s;
}

fmha_status_t fmha_backward(const fmha_problem_t* problem, const fmha_backward_args_t* args, const fmha_plan_t* plan,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    api::t_error.clear();
    flash_bwd::BwdParams bp;
    api::BackwardAsk a;
    fmha_status_t s = api::check_backward(problem, args, bp, a);
    fmha_plan_t here;
    if (s == FMHA_SUCCESS)
        s = api::plan_for_call(
            &plan, &here,
            [&](const fmha_plan_t& pl) { return pl.index == -1 && api::backward_kernel_name(a, pl.sm) == pl.kernel; },
            [&](int sm, int num_sms, fmha_plan_t* out) { return api::plan_backward_checked(bp, a, sm, num_sms, out); },
            "fmha_plan_backward");
    if (s == FMHA_SUCCESS) s = api::check_workspace(workspace, workspace_bytes, api::backward_workspace_bytes(bp.p));
    if (s != FMHA_SUCCESS) return s;
    return api::launched(api::backward_launch(a, bp, workspace, workspace_bytes, plan->sm, stream), plan->kernel, "");
}

int fmha_num_kernels(void) { return kNumKernels; }

const char* fmha_kernel_name(int i) { return i >= 0 && i < kNumKernels ? kKernels[i].name : nullptr; }

}  // extern "C"
