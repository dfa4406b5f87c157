// fmha.exe's side of kernel choice: the library's lookup (api/select.h) worded in the
// driver's flags, and the messages and exits when nothing fits.
#include "dispatch.h"

#include "api/select.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace fmha {
namespace {

constexpr int kClosestShown = 5;

using api::masks_text;

api::Request request_of(const Problem& p) {
    api::Request r;
    r.dtype = p.dtype;
    r.kv_dtype = p.kv_dtype;
    r.acc = p.acc;
    r.d = p.d;
    r.dv = p.dv;
    r.mask = p.mask;
    if (p.softcapping_scale_bmm1 > 0.f) r.variants |= kVariantSoftcap;
    if (p.alibi) r.variants |= kVariantAlibi;
    if (p.attention_bias) r.variants |= kVariantBias;
    if (p.attention_sinks) r.variants |= kVariantSinks;
    if (p.save_softmax) r.variants |= kVariantSoftmaxStats;
    if (p.layout == Layout::kPagedKv) r.variants |= kVariantPagedKv;
    if (p.wide_logits) r.variants |= kVariantWideLogits;
    if (p.dropout_p > 0.f) r.variants |= kVariantDropout;
    r.s_q = std::min(p.s_q, p.s);
    r.rows_per_kv_head = p.h / std::max(p.h_kv, 1) * r.s_q;
    r.s_kv = p.s;
    r.non_warp_specialized = p.force_non_warp_specialized;
    r.tma_only = p.use_tma;
    return r;
}

// Everything that disqualifies a row without asking the device, in the driver's flags;
// empty = fits.
std::string static_mismatch(const KernelMeta& k, const Problem& p, const api::Request& r) {
    const uint32_t bits = api::mismatch(k, r);
    std::vector<std::string> why;
    auto need = [&](const char* what, const std::string& has, const std::string& wants) {
        why.push_back(std::string(what) + " " + has + " (need " + wants + ")");
    };
    if (bits & api::kMismatchDtype) need("dtype", dtype_name(k.dtype), dtype_name(p.dtype));
    if (bits & api::kMismatchKvDtype) need("KV dtype", dtype_name(k.kv_dtype), dtype_name(p.kv_dtype));
    if (bits & api::kMismatchAcc) need("acc", dtype_name(k.acc), dtype_name(p.acc));
    if (bits & api::kMismatchD) need("d", std::to_string(k.d), std::to_string(p.d));
    if (bits & api::kMismatchDv) need("dv", std::to_string(k.dv), std::to_string(p.dv));
    if (bits & api::kMismatchMask) need("masks", masks_text(k.masks), mask_label(p.mask));
    const uint32_t missing = api::missing_variants(k, r);
    if (missing & kVariantSoftcap) why.push_back("no softcapping (-softcapping-scale-bmm1)");
    if (missing & kVariantAlibi) why.push_back("no ALiBi (-alibi)");
    if (missing & kVariantBias) why.push_back("no attention bias (-attention-bias)");
    if (missing & kVariantSinks) why.push_back("no attention sinks (-use-attention-sinks)");
    if (missing & kVariantSoftmaxStats) why.push_back("no softmax statistics (-save-softmax)");
    if (missing & kVariantPagedKv) why.push_back("no paged KV cache (-paged-kv)");
    if (missing & kVariantWideLogits)
        why.push_back("logits may reach 2^24 in log2 units (-scale-bmm1, input ranges): one FFMA a score cannot hold them");
    if (missing & kVariantDropout) why.push_back("no dropout (-dropout)");
    if (bits & api::kMismatchSq) need("s_q", std::to_string(r.s_q), "<= " + std::to_string(k.max_s_q));
    if (bits & api::kMismatchRows)
        need("query rows per KV head", std::to_string(r.rows_per_kv_head), "<= " + std::to_string(k.max_rows));
    if (bits & api::kMismatchWarpSpecialized) why.push_back("warp-specialised (-force-non-warp-specialization)");
    if (bits & api::kMismatchTma) why.push_back("no TMA loads (-use-tma)");
    std::string s;
    for (const std::string& w : why) s += (s.empty() ? "" : ", ") + w;
    return s;
}

// Whether the row can run on the current device: arch, and SASS built for it.
std::string device_mismatch(const KernelMeta& k, int device_sm) {
    if (k.sm > device_sm)
        return "needs sm_" + std::to_string(k.sm) + ", device is sm_" + std::to_string(device_sm);
    if (k.launch == nullptr) return "no entry point in the registry";
    if (!api::has_image(k, device_sm))
        return "no image for sm_" + std::to_string(device_sm) + " (built for " + k.archs + ")";
    return "";
}

std::string problem_text(const Problem& p) {
    const std::string kv = p.kv_dtype != p.dtype ? std::string(" kv=") + dtype_name(p.kv_dtype) : "";
    return std::string("dtype=") + dtype_name(p.dtype) + kv + " acc=" + dtype_name(p.acc) +
           " d=" + std::to_string(p.d) + " dv=" + std::to_string(p.dv) +
           " mask=" + mask_label(p.mask) +
           (p.force_non_warp_specialized ? " non-warp-specialised" : "") + (p.use_tma ? " tma" : "") +
           (p.softcapping_scale_bmm1 > 0.f ? " softcap" : "") + (p.alibi ? " alibi" : "") +
           (p.attention_bias ? " bias" : "") + (p.attention_sinks ? " sinks" : "") +
           (p.save_softmax ? " softmax-stats" : "");
}

// No row fits: one line of reason, then the rows that come closest and why each fails.
[[noreturn]] void fail_no_kernel(const Problem& p, int device_sm) {
    const api::Request r = request_of(p);
    std::vector<std::pair<int, int>> ranked;  // (score, row)
    for (int i = 0; i < kNumKernels; ++i) {
        const KernelMeta& k = kKernels[i];
        ranked.push_back({-(api::closeness(k, r) + (k.acc == p.acc)), i});
    }
    std::stable_sort(ranked.begin(), ranked.end());

    std::fflush(stdout);
    const std::string where = device_sm > 0 ? " on sm_" + std::to_string(device_sm) : "";
    std::fprintf(stderr, "error: no kernel fits %s%s (%d kernels in the registry%s)\n",
                 problem_text(p).c_str(), where.c_str(), kNumKernels,
                 kNumKernels == 0 ? "; check TORCH_CUDA_ARCH_LIST and FMHA_FILTER" : "");
    const int shown = std::min<int>(kClosestShown, static_cast<int>(ranked.size()));
    if (shown > 0) std::fprintf(stderr, "closest kernels:\n");
    for (int i = 0; i < shown; ++i) {
        const KernelMeta& k = kKernels[ranked[i].second];
        std::string why = static_mismatch(k, p, r);
        if (why.empty() && device_sm > 0) why = device_mismatch(k, device_sm);
        if (why.empty() && p.s < k.min_s_kv)
            why = "dispatch takes it for s >= " + std::to_string(k.min_s_kv) + " only (-kernel runs it)";
        std::fprintf(stderr, "  %s: %s\n", k.name, why.c_str());
    }
    std::exit(kExitBadArgs);
}

}  // namespace

void print_kernel_table(std::FILE* out) {
    int name_w = 4, masks_w = 5, archs_w = 5;
    for (int i = 0; i < kNumKernels; ++i) {
        name_w = std::max(name_w, static_cast<int>(std::strlen(kKernels[i].name)));
        masks_w = std::max(masks_w, static_cast<int>(masks_text(kKernels[i].masks).size()));
        archs_w = std::max(archs_w, static_cast<int>(std::strlen(kKernels[i].archs)));
    }
    std::fprintf(out,
                 "%-*s  %-6s  %-4s  %-5s  %-4s  %4s  %4s  %-9s  %-5s  %-*s  %-9s  %-5s  %-10s  %-7s  %-8s  "
                 "%-*s  %s\n",
                 name_w, "name", "family", "sm", "dtype", "acc", "d", "dv", "tile", "warps", masks_w, "masks",
                 "warp_spec", "tma", "sched", "max_s_q", "min_s_kv", archs_w, "archs", "siblings");
    for (int i = 0; i < kNumKernels; ++i) {
        const KernelMeta& k = kKernels[i];
        const std::string tile = std::to_string(k.block_m) + "x" + std::to_string(k.block_n);
        const std::string warps = std::to_string(k.warps_m) + "x" + std::to_string(k.warps_n);
        const std::string max_s_q = k.max_s_q > 0 ? std::to_string(k.max_s_q) : "-";
        const std::string min_s_kv = k.min_s_kv > 0 ? std::to_string(k.min_s_kv) : "-";
        const char* siblings = k.siblings[0] != '\0' ? k.siblings : "-";
        // K and V of another type: the name's token (bf16_kve4m3: an e4m3 cache under bf16 queries)
        const std::string dtype =
            std::string(dtype_name(k.dtype)) + (k.kv_dtype != k.dtype ? std::string("_kv") + dtype_name(k.kv_dtype) : "");
        std::fprintf(out,
                     "%-*s  %-6s  %-4d  %-5s  %-4s  %4d  %4d  %-9s  %-5s  %-*s  %-9s  %-5s  %-10s  %-7s  %-8s  "
                     "%-*s  %s\n",
                     name_w, k.name, k.family, k.sm, dtype.c_str(), dtype_name(k.acc), k.d, k.dv,
                     tile.c_str(), warps.c_str(), masks_w, masks_text(k.masks).c_str(),
                     k.warp_specialized ? "true" : "false", k.uses_tma ? "true" : "false",
                     k.persistent ? "persistent" : "grid", max_s_q.c_str(), min_s_kv.c_str(), archs_w, k.archs,
                     siblings);
    }
    std::fprintf(out, "%d kernels\n", kNumKernels);
}

std::string tile_that_runs(const KernelMeta& kernel, const Params& params) { return api::tile_that_runs(kernel, params); }
int block_n_that_runs(const KernelMeta& kernel, const Params& params) { return api::block_n_that_runs(kernel, params); }

const KernelMeta* find_forced_kernel(const Problem& p) {
    if (p.kernel_name.empty()) return nullptr;
    for (int i = 0; i < kNumKernels; ++i) {
        const KernelMeta& k = kKernels[i];
        if (p.kernel_name != k.name) continue;
        const std::string why = static_mismatch(k, p, request_of(p));
        if (!why.empty())
            fail_args("-kernel " + p.kernel_name + " does not fit " + problem_text(p) + ": " + why);
        return &k;
    }
    fail_args("-kernel " + p.kernel_name + ": no such kernel in the registry (see -list-kernels)");
}

void require_static_fit(const Problem& p) {
    const api::Request r = request_of(p);
    for (int i = 0; i < kNumKernels; ++i)
        if (api::mismatch(kKernels[i], r) == 0) return;
    fail_no_kernel(p, 0);
}

const KernelMeta& select_kernel(const Problem& p, const KernelMeta* forced, int device_sm) {
    if (forced != nullptr) {
        const std::string why = device_mismatch(*forced, device_sm);
        if (!why.empty()) fail_args("-kernel " + p.kernel_name + " cannot run here: " + why);
        return *forced;
    }
    const int row = api::select(request_of(p), device_sm);
    if (row >= 0) return kKernels[row];
    fail_no_kernel(p, device_sm);
}

}  // namespace fmha
