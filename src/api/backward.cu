#include "api/backward.h"

#include <algorithm>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fmha/kernel/flash_bwd_sm80.h"
#include "fmha/kernel/wgmma_bwd_launch.h"

namespace fmha {
namespace api {

std::string backward_refusal(const BackwardAsk& a) {
    if (a.dtype != DataType::kFp16 && a.dtype != DataType::kBf16) return "fp16 or bf16 inputs only";
    const auto size_ok = [](int d) { return d >= 8 && d <= 256 && d % 8 == 0; };
    if (!size_ok(a.d) || !size_ok(a.dv))
        return "d and dv multiples of 8 up to 256 only (got d " + std::to_string(a.d) + ", dv " + std::to_string(a.dv) +
               ")";
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

// The tile head size for the ask: 64, 128 or 256, d and dv zero-padded up to it (both families).
int tile_d(const BackwardAsk& a) {
    const int d = std::max(a.d, a.dv);
    return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

// Softcap, ALiBi and dropout only on the 64 and 128 tiles' own head sizes (wgmma_bwd_launch.h).
bool takes_wgmma(const BackwardAsk& a, int sm) {
    const int tile = tile_d(a);
    return kWgmmaImage && sm == 90 && a.tma_ready &&
           !(a.score_extras && !wgmma_bwd::serves_score_extras(/*wide=*/tile == 256, tile, a.d, a.dv));
}

// Shared memory a block may opt into (CUDA's per-arch table): 163 KB on sm_80/87, 99 KB on
// sm_86/89 and sm_12x, 227 KB on sm_90 and sm_10x.
int smem_optin_bytes(int sm) {
    if (sm == 80 || sm == 87) return 163 * 1024;
    if (sm == 86 || sm == 89 || sm >= 120) return 99 * 1024;
    return 227 * 1024;
}

// fn(Traits{}, is_wgmma) for the main kernel the ask gets on arch sm (an fp16 or bf16 ask):
// the one dispatch the launch and the shared-memory check share.
template <class Fn>
auto with_kernel(const BackwardAsk& a, int sm, Fn&& fn) {
    using Yes = std::true_type;
    using No = std::false_type;
    const auto by_dtype = [&](auto element) {
        using Element = decltype(element);
        const int tile = tile_d(a);
        if (takes_wgmma(a, sm))
            return tile == 64    ? fn(wgmma_bwd::Traits<Element, 64>{}, Yes{})
                   : tile == 128 ? fn(wgmma_bwd::Traits<Element, 128>{}, Yes{})
                                 : fn(wgmma_bwd::WideTraits<Element, 256>{}, Yes{});
        return tile == 64    ? fn(flash_bwd::Traits<Element, 64>{}, No{})
               : tile == 128 ? fn(flash_bwd::Traits<Element, 128>{}, No{})
                             : fn(flash_bwd::Traits<Element, 256>{}, No{});
    };
    return a.dtype == DataType::kBf16 ? by_dtype(__nv_bfloat16{}) : by_dtype(__half{});
}

// The shared memory of the main kernel the ask gets on arch sm.
int backward_smem_bytes(const BackwardAsk& a, int sm) {
    return with_kernel(a, sm, [](auto tr, auto) { return int(decltype(tr)::kSmemBytes); });
}

}  // namespace

std::string backward_arch_refusal(const BackwardAsk& a, int sm) {
    if (sm < 80) return "the backward kernels need sm_80 or later, not sm_" + std::to_string(sm);
    const int need = backward_smem_bytes(a, sm), have = smem_optin_bytes(sm);
    if (need > have)
        return backward_kernel_name(a, sm) + " needs " + std::to_string(need / 1024) +
               " KB of shared memory a block; sm_" + std::to_string(sm) + " offers " + std::to_string(have / 1024) +
               " KB";
    return "";
}

bool backward_tma_ready(const flash_bwd::BwdParams& bp) { return wgmma_bwd::tma_ready(bp); }

std::string backward_kernel_name(const BackwardAsk& a, int sm) {
    const std::string dtype = a.dtype == DataType::kBf16 ? "bf16" : "fp16";
    const std::string tile = "_d" + std::to_string(tile_d(a));
    return takes_wgmma(a, sm) ? "wgmma_bwd_" + dtype + tile + "_sm90" : "flash_bwd_" + dtype + tile + "_sm80";
}

size_t backward_workspace_bytes(const Params& p) {
    constexpr size_t kAlign = 256;
    return (flash_bwd::workspace_bytes(p) + kAlign - 1) / kAlign * kAlign;
}

cudaError_t backward_launch(const BackwardAsk& a, flash_bwd::BwdParams& bp, void* workspace, size_t workspace_bytes,
                            int sm, cudaStream_t stream) {
    if (workspace == nullptr || workspace_bytes < flash_bwd::workspace_bytes(bp.p)) return cudaErrorInvalidValue;
    flash_bwd::carve_workspace(bp, workspace);
    if (a.dtype != DataType::kFp16 && a.dtype != DataType::kBf16) return cudaErrorInvalidValue;
    return with_kernel(a, sm, [&](auto tr, auto wgmma) {
        using Tr = decltype(tr);
        if constexpr (decltype(wgmma)::value) return wgmma_bwd::launch<Tr>(bp, stream);
        else return flash_bwd::launch<Tr>(bp, stream);
    });
}

}  // namespace api
}  // namespace fmha
