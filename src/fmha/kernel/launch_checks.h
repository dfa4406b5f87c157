// The contract every family's launch() checks before touching the device: a problem that
// breaks it gets cudaErrorInvalidValue and no launch, never a wrong answer.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace kernel {

//   d == kHeadDim, dv == kHeadDimV; b, h, h_kv >= 1, h % h_kv == 0; s_q_max >= 1
//   b, h <= 65535 (grid y and z limits)
//   scale_bmm1 finite and > 0 (the softmax tracks the max of the unscaled scores)
//   q/k/v/o 16-byte aligned, every stride a multiple of 8 elements (16-byte chunks)
inline bool params_fit(const Params& p, int head_dim, int head_dim_v) {
    if (p.d != head_dim || p.dv != head_dim_v) return false;
    if (p.b < 1 || p.h < 1 || p.h_kv < 1 || p.h % p.h_kv != 0 || p.s_q_max < 1) return false;
    if (p.h > 65535 || p.b > 65535) return false;
    if (!(p.scale_bmm1 > 0.f) || !std::isfinite(p.scale_bmm1)) return false;
    const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kChunkBytes != 0; };
    if (misaligned(p.q) || misaligned(p.k) || misaligned(p.v) || misaligned(p.o)) return false;
    const int64_t strides[] = {p.q_row_stride, p.q_head_stride, p.k_row_stride, p.k_head_stride,
                               p.v_row_stride, p.v_head_stride, p.o_row_stride, p.o_head_stride};
    for (const int64_t s : strides) {
        if (s % kElemsPerChunk != 0) return false;
    }
    return true;
}

// The one place a run-time MaskType becomes the kernels' compile-time kCausal: returns
// f(std::bool_constant<causal>) for the masks the families implement, `otherwise` for any
// other. Families write their entry() and launch branches through it.
template <class F, class R>
R with_causal(MaskType m, F&& f, R otherwise) {
    switch (m) {
        case MaskType::kPadding: return f(std::false_type{});
        case MaskType::kCausal: return f(std::true_type{});
    }
    return otherwise;
}

// Logit softcapping is a run-time parameter (Params::softcap) compiled both ways: a kernel
// template's kSoftcap, chosen here, so that the kernels without it carry no tanh code and
// no registers for it. Returns f(std::bool_constant<softcap on>).
template <class F>
auto with_softcap(const Params& p, F&& f) {
    return p.softcap > 0.f ? f(std::true_type{}) : f(std::false_type{});
}

// SMs of the device the launch goes to: Params::num_sms when the driver filled it, else
// asked of the current device.
inline cudaError_t sm_count(const Params& p, int* sms) {
    *sms = p.num_sms;
    if (*sms > 0) return cudaSuccess;
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
    return err;
}

}  // namespace kernel
}  // namespace fmha
