#include "api/backward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fmha/kernel/flash_bwd_sm80.h"
#include "fmha/kernel/wgmma_bwd_sm90.h"

namespace fmha {
namespace api {

std::string backward_refusal(const BackwardAsk& a) {
    if (a.dtype != DataType::kFp16 && a.dtype != DataType::kBf16) return "fp16 or bf16 inputs only";
    if (a.d != a.dv || (a.d != 64 && a.d != 128))
        return "d = dv = 64 or 128 only (got d " + std::to_string(a.d) + ", dv " + std::to_string(a.dv) + ")";
    if (a.mask == MaskType::kCustom) return "no custom mask yet";
    if (a.bias) return "no bias yet";
    if (a.paged) return "not over a paged KV cache";
    if (a.seqused_k) return "not with seqused_k";
    return "";
}

namespace {

// Whether this build carries the wgmma kernels' sm_90a image (the Makefile's define).
#ifdef FMHA_WGMMA_BWD_IMAGE
constexpr bool kWgmmaImage = true;
#else
constexpr bool kWgmmaImage = false;
#endif

bool takes_wgmma(const BackwardAsk& a, int sm) {
    return kWgmmaImage && sm == 90 && (a.d == 64 || a.d == 128) && a.tma_ready;
}

}  // namespace

bool backward_tma_ready(const flash_bwd::BwdParams& bp) { return wgmma_bwd::tma_ready(bp); }

std::string backward_kernel_name(const BackwardAsk& a, int sm) {
    const std::string dtype = a.dtype == DataType::kBf16 ? "bf16" : "fp16";
    if (takes_wgmma(a, sm)) return "wgmma_bwd_" + dtype + "_d" + std::to_string(a.d) + "_sm90";
    return "flash_bwd_" + dtype + "_d" + std::to_string(a.d) + "_sm80";
}

size_t backward_workspace_bytes(const Params& p) {
    constexpr size_t kAlign = 256;
    return (flash_bwd::workspace_bytes(p) + kAlign - 1) / kAlign * kAlign;
}

cudaError_t backward_launch(const BackwardAsk& a, flash_bwd::BwdParams& bp, void* workspace, size_t workspace_bytes,
                            int sm, cudaStream_t stream) {
    const DataType dtype = a.dtype;
    const Params& p = bp.p;
    if (workspace == nullptr || workspace_bytes < flash_bwd::workspace_bytes(p)) return cudaErrorInvalidValue;
    flash_bwd::carve_workspace(bp, workspace);
    if (takes_wgmma(a, sm)) {
        using wgmma_bwd::Traits;
        if (dtype == DataType::kBf16) {
            if (p.d == 64) return wgmma_bwd::launch<Traits<__nv_bfloat16, 64>>(bp, stream);
            if (p.d == 128) return wgmma_bwd::launch<Traits<__nv_bfloat16, 128>>(bp, stream);
        } else if (dtype == DataType::kFp16) {
            if (p.d == 64) return wgmma_bwd::launch<Traits<__half, 64>>(bp, stream);
            if (p.d == 128) return wgmma_bwd::launch<Traits<__half, 128>>(bp, stream);
        }
    }
    using flash_bwd::Traits;
    if (dtype == DataType::kBf16) {
        if (p.d == 64) return flash_bwd::launch<Traits<__nv_bfloat16, 64>>(bp, stream);
        if (p.d == 128) return flash_bwd::launch<Traits<__nv_bfloat16, 128>>(bp, stream);
    } else if (dtype == DataType::kFp16) {
        if (p.d == 64) return flash_bwd::launch<Traits<__half, 64>>(bp, stream);
        if (p.d == 128) return flash_bwd::launch<Traits<__half, 128>>(bp, stream);
    }
    return cudaErrorInvalidValue;
}

}  // namespace api
}  // namespace fmha
