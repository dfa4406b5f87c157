// The registry lookup: the first row that fits wins, so the generator's row order is the
// preference order.
#include "api/select.h"

#include <cstdlib>
#include <cstring>

namespace fmha {
namespace api {

const char* dtype_text(DataType t) {
    switch (t) {
        case DataType::kFp16: return "fp16";
        case DataType::kBf16: return "bf16";
        case DataType::kFp32: return "fp32";
        case DataType::kE4m3: return "e4m3";
    }
    return "?";
}

const char* mask_name(MaskType m) {
    switch (m) {
        case MaskType::kPadding: return "padding";
        case MaskType::kCausal: return "causal";
        case MaskType::kSlidingWindow: return "sliding_window";
        case MaskType::kBidirectionalWindow: return "bidirectional_sliding_window";
        case MaskType::kChunked: return "chunked";
        case MaskType::kCustom: return "custom";
    }
    return "?";
}

std::string masks_text(uint32_t masks) {
    std::string s;
    for (MaskType m : kMaskTypes) {
        if (!(masks & mask_bit(m))) continue;
        if (!s.empty()) s += ",";
        s += mask_name(m);
    }
    return s.empty() ? "-" : s;
}

uint32_t mismatch(const KernelMeta& k, const Request& r) {
    uint32_t why = 0;
    if (k.dtype != r.dtype) why |= kMismatchDtype;
    if (k.kv_dtype != r.kv_dtype) why |= kMismatchKvDtype;
    // fp32 accumulation serves a request for fp16 (it is at least as accurate): that is how
    // fp16 problems reach the wgmma families, which accumulate in fp32 only.
    if (!(k.acc == r.acc || (r.acc == DataType::kFp16 && k.acc == DataType::kFp32))) why |= kMismatchAcc;
    if (k.d != r.d) why |= kMismatchD;
    if (k.dv != r.dv) why |= kMismatchDv;
    if (!(k.masks & mask_bit(r.mask))) why |= kMismatchMask;
    if (missing_variants(k, r) != 0) why |= kMismatchVariants;
    // Decode: at most max_s_q query rows per sequence, and max_rows rows per KV head.
    if (k.max_s_q > 0 && r.s_q > k.max_s_q) why |= kMismatchSq;
    if (k.max_rows > 0 && r.rows_per_kv_head > k.max_rows) why |= kMismatchRows;
    if (r.non_warp_specialized && k.warp_specialized) why |= kMismatchWarpSpecialized;
    if (r.tma_only && !k.uses_tma) why |= kMismatchTma;
    return why;
}

int closeness(const KernelMeta& k, const Request& r) {
    return 4 * (k.dtype == r.dtype) + 4 * (k.kv_dtype == r.kv_dtype) + 4 * (k.d == r.d) + 2 * (k.dv == r.dv) + ((k.masks & mask_bit(r.mask)) != 0);
}

bool has_image(const KernelMeta& k, int sm) {
    for (const char* a = std::strstr(k.archs, "sm_"); a != nullptr; a = std::strstr(a + 3, "sm_")) {
        char* end = nullptr;
        const long arch = std::strtol(a + 3, &end, 10);
        const bool specific = end != nullptr && *end == 'a';
        if (specific ? arch == sm : (arch / 10 == sm / 10 && arch <= sm)) return true;
    }
    return false;
}

int select(const Request& r, int sm) {
    for (int i = 0; i < kNumKernels; ++i) {
        const KernelMeta& k = kKernels[i];
        if (r.s_kv < k.min_s_kv) continue;  // a row for longer caches; a later one serves this
        if (mismatch(k, r) == 0 && has_image(k, sm) && k.launch != nullptr) return i;
    }
    return -1;
}

namespace {

// Which tile a launch of this problem runs: 0 the row's own, i the i-th of its siblings.
int tile_index(const KernelMeta& kernel, const Params& params) {
    return kernel.tile != nullptr ? kernel.tile(params) : 0;
}

}  // namespace

std::string tile_that_runs(const KernelMeta& kernel, const Params& params) {
    int index = tile_index(kernel, params);  // 1-based among the siblings
    const std::string siblings = kernel.siblings;
    size_t begin = 0;
    for (; index > 1 && begin != std::string::npos; --index) {
        begin = siblings.find(',', begin);
        if (begin != std::string::npos) ++begin;
    }
    if (index < 1 || begin == std::string::npos) return kernel.name;
    return siblings.substr(begin, siblings.find(',', begin) - begin);
}

int block_n_that_runs(const KernelMeta& kernel, const Params& params) {
    const int index = tile_index(kernel, params);
    return index >= 1 && index <= kMaxSiblings && kernel.sibling_block_n[index - 1] > 0
               ? kernel.sibling_block_n[index - 1]
               : kernel.block_n;
}

}  // namespace api
}  // namespace fmha
