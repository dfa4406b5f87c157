// The registry lookup (generated/registry.cpp's kKernels), shared by the C API (api.cpp) and
// fmha.exe's messages: which rows fit a request, and why the others do not, as bits that
// each caller words in its own terms (the C API names fields, the driver its flags).
#pragma once

#include <cstdint>
#include <string>

#include "kernel_meta.h"
#include "params.h"

namespace fmha {
namespace api {

// What a problem asks of a kernel, without its tensors.
struct Request {
    DataType dtype = DataType::kFp16;
    DataType kv_dtype = DataType::kFp16;  // K and V's: dtype, or e4m3 under fp16/bf16 queries
    DataType acc = DataType::kFp32;
    int d = 0, dv = 0;
    MaskType mask = MaskType::kPadding;
    uint32_t variants = 0;     // VariantBit bits the problem needs
    int s_q = 0;               // longest query sequence
    int rows_per_kv_head = 0;  // h / h_kv * s_q
    int s_kv = 0;              // longest key sequence (KernelMeta::min_s_kv is a preference)
    bool non_warp_specialized = false;  // only kernels that are not warp-specialised
    bool tma_only = false;              // only kernels that load through TMA
};

// Why a row does not fit a request, one bit a reason (0: it fits, whatever the device).
enum Mismatch : uint32_t {
    kMismatchDtype = 1u << 0,
    kMismatchAcc = 1u << 1,
    kMismatchD = 1u << 2,
    kMismatchDv = 1u << 3,
    kMismatchMask = 1u << 4,
    kMismatchVariants = 1u << 5,  // (k.variants & request.variants) lacks some: which, below
    kMismatchSq = 1u << 6,
    kMismatchRows = 1u << 7,
    kMismatchWarpSpecialized = 1u << 8,
    kMismatchTma = 1u << 9,
    kMismatchKvDtype = 1u << 10,
};

uint32_t mismatch(const KernelMeta& k, const Request& r);

// The VariantBit bits a request needs and the row lacks.
inline uint32_t missing_variants(const KernelMeta& k, const Request& r) { return r.variants & ~k.variants; }

// How near a row comes to a request, for "closest kernels" messages: dtype and d weigh most,
// then dv, then the mask.
int closeness(const KernelMeta& k, const Request& r);

// Whether the row has SASS for a device of arch sm (e.g. 90): an entry of KernelMeta::archs
// of the same major at or below it ("sm_90a": that arch only). No PTX is built, so nothing
// else runs.
bool has_image(const KernelMeta& k, int sm);

// The first row (dispatch order) that fits the request and has an image for sm, taking
// rows whose min_s_kv the request reaches; -1 when none does.
int select(const Request& r, int sm);

// The kernel a launch of `kernel` runs for this problem: its own name, or the sibling its
// TileFn picks (KernelMeta::siblings).
std::string tile_that_runs(const KernelMeta& kernel, const Params& params);
// ... and its key block (block_n), which sets an e4m3 kernel's P rounding grid (reference.h).
int block_n_that_runs(const KernelMeta& kernel, const Params& params);

// Comma-separated labels of a mask bitmask, e.g. "padding,causal".
std::string masks_text(uint32_t masks);
const char* mask_name(MaskType m);     // padding, causal, sliding_window, ...
const char* dtype_text(DataType t);    // fp16, bf16, fp32, e4m3

}  // namespace api
}  // namespace fmha
