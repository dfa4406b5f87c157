// The backward pass in the library (issue #33): what it serves, the workspace it needs and
// its launch, shared by the C API (fmha_plan_backward, fmha_backward) and fmha.exe -bwd.
// Its kernels: flash-bwd (fmha/kernel/flash_bwd_sm80.h, SM80+) and, on sm_90, the wgmma kernels
// (fmha/kernel/wgmma_bwd_launch.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "fmha/kernel/flash_bwd_params.h"
#include "params.h"

namespace fmha {
namespace api {

// A backward problem's traits that decide whether a kernel serves it.
struct BackwardAsk {
    DataType dtype = DataType::kFp16;
    int d = 0, dv = 0;
    MaskType mask = MaskType::kPadding;
    bool bias = false;
    bool paged = false;
    bool seqused_k = false;
    // Softcap, ALiBi or dropout: the wgmma kernels serve them at d = dv = 64 or 128 only.
    bool score_extras = false;
    // Q, K, V and dO within the wgmma kernel's TMA maps (backward_tma_ready); else flash-bwd.
    bool tma_ready = true;
};

// Why no backward kernel serves the ask, in the words of its fields ("" where one does).
std::string backward_refusal(const BackwardAsk& a);

// Why the kernel the ask gets on arch sm cannot run there ("" where it can): sm_80 or later,
// and its shared memory within what a block may opt into on that arch.
std::string backward_arch_refusal(const BackwardAsk& a, int sm);

// Whether the wgmma kernel's TMA maps can address bp's Q, K, V and dO (16-byte aligned bases
// and strides, rows within int32 coordinates): the ask's tma_ready.
bool backward_tma_ready(const flash_bwd::BwdParams& bp);

// The kernel that runs the ask on a device of arch sm, on the tile of the next head size of
// 64, 128, 256 at or above d and dv (zero-padded up to it): the wgmma kernels
// ("wgmma_bwd_bf16_d128_sm90", "wgmma_bwd_bf16_d256_sm90" for MLA's 192 / 128) on sm_90 where
// this build has their image, the ask is tma_ready and has no score_extras unless d = dv = 64
// or 128; else flash-bwd ("flash_bwd_bf16_d256_sm80"). The ask must be served.
std::string backward_kernel_name(const BackwardAsk& a, int sm);

// Bytes of workspace (256-byte aligned, any content: the launch clears what it uses).
size_t backward_workspace_bytes(const Params& p);

// The launches (preprocess, main, postprocess) of backward_kernel_name's kernel for a device
// of arch sm, on stream; bp's pointers and strides set except its workspace, carved here
// from `workspace`. cudaErrorInvalidValue for a problem no kernel serves or a workspace too
// small.
cudaError_t backward_launch(const BackwardAsk& a, flash_bwd::BwdParams& bp, void* workspace, size_t workspace_bytes,
                            int sm, cudaStream_t stream);

}  // namespace api
}  // namespace fmha
