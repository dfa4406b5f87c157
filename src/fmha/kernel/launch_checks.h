// The contract every family's launch() checks before touching the device: a problem that
// breaks it gets cudaErrorInvalidValue and no launch, never a wrong answer.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fmha/mask/mask.h"
#include "fmha/softmax/score_mod.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace kernel {

// The local masks' sizes: window >= 1 for the windows, chunk a power of two for kChunked.
inline bool mask_fits(const Params& p) {
    switch (p.mask) {
        case MaskType::kPadding:
        case MaskType::kCausal: return true;
        case MaskType::kSlidingWindow:
        case MaskType::kBidirectionalWindow: return p.window >= 1;
        case MaskType::kChunked: return p.chunk >= 1 && (p.chunk & (p.chunk - 1)) == 0 && p.chunk <= (1 << 30);
    }
    return false;
}

//   d == kHeadDim, dv == kHeadDimV; b, h, h_kv >= 1, h % h_kv == 0; s_q_max >= 1
//   b, h <= 65535 (grid y and z limits)
//   scale_bmm1 finite and > 0 (the softmax tracks the max of the unscaled scores)
//   a local mask's window or chunk as mask_fits says
//   not both softcapping and ALiBi (softmax/score_mod.h)
//   q/k/v/o 16-byte aligned, every stride a multiple of 8 elements (16-byte chunks)
inline bool params_fit(const Params& p, int head_dim, int head_dim_v) {
    if (p.d != head_dim || p.dv != head_dim_v) return false;
    if (p.b < 1 || p.h < 1 || p.h_kv < 1 || p.h % p.h_kv != 0 || p.s_q_max < 1) return false;
    if (p.h > 65535 || p.b > 65535) return false;
    if (!(p.scale_bmm1 > 0.f) || !std::isfinite(p.scale_bmm1)) return false;
    if (!mask_fits(p)) return false;
    if (p.softcap > 0.f && p.alibi_slopes != nullptr) return false;  // one score modifier at a time
    const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kChunkBytes != 0; };
    if (misaligned(p.q) || misaligned(p.k) || misaligned(p.v) || misaligned(p.o)) return false;
    const int64_t strides[] = {p.q_row_stride, p.q_head_stride, p.k_row_stride, p.k_head_stride,
                               p.v_row_stride, p.v_head_stride, p.o_row_stride, p.o_head_stride};
    for (const int64_t s : strides) {
        if (s % kElemsPerChunk != 0) return false;
    }
    return true;
}

// The one place a run-time MaskType becomes the kernels' compile-time mask::Kind: returns
// f(std::integral_constant<mask::Kind, kind>) for the masks the families implement (the
// three local masks share mask::Kind::kLocal), `otherwise` for any other. Families write
// their entry() and launch branches through it.
template <mask::Kind K>
using MaskConstant = std::integral_constant<mask::Kind, K>;

template <class F, class R>
R with_mask(MaskType m, F&& f, R otherwise) {
    switch (m) {
        case MaskType::kPadding: return f(MaskConstant<mask::Kind::kPadding>{});
        case MaskType::kCausal: return f(MaskConstant<mask::Kind::kCausal>{});
        case MaskType::kSlidingWindow:
        case MaskType::kBidirectionalWindow:
        case MaskType::kChunked: return f(MaskConstant<mask::Kind::kLocal>{});
    }
    return otherwise;
}

// The score modifier a problem asks for (softmax/score_mod.h), as the kernels' compile-time
// kMod: returns f(std::integral_constant<softmax::ScoreMod, mod>). Softcapping and ALiBi are
// run-time parameters (Params::softcap, Params::alibi_slopes) for which the kernels are
// compiled each way, so that the kernels without them carry no code and no registers for them.
template <softmax::ScoreMod M>
using ScoreModConstant = std::integral_constant<softmax::ScoreMod, M>;

template <class F>
auto with_score_mod(const Params& p, F&& f) {
    if (p.softcap > 0.f) return f(ScoreModConstant<softmax::ScoreMod::kSoftcap>{});
    if (p.alibi_slopes != nullptr) return f(ScoreModConstant<softmax::ScoreMod::kAlibi>{});
    return f(ScoreModConstant<softmax::ScoreMod::kNone>{});
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
