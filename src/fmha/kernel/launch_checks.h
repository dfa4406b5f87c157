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
        case MaskType::kCustom:
            return p.custom_mask != nullptr && int64_t(p.custom_mask_row_words) * 32 >= p.s_kv_max;
    }
    return false;
}

// The score modifiers a problem asks for (softmax/score_mod.h); at most one may be.
inline int score_mods(const Params& p) {
    return (p.softcap > 0.f) + (p.alibi_slopes != nullptr) + (p.attention_bias != nullptr) +
           (p.mask == MaskType::kCustom);
}

// The bias tensor's contract (Params::attention_bias): element-aligned, a row stride that
// covers the keys, no negative stride.
inline bool bias_fits(const Params& p) {
    if (p.attention_bias == nullptr) return true;
    if (reinterpret_cast<uintptr_t>(p.attention_bias) % 2 != 0) return false;
    return p.bias_row_stride >= p.s_kv_max && p.bias_batch_stride >= 0 && p.bias_head_stride >= 0;
}

// A paged KV cache's contract (Params::kv_block_table): blocks of a power of two >= 16
// tokens, a table row long enough for the longest sequence and a table of < 2^32 entries, a
// pool of at least one block, block strides in whole 16-byte chunks.
inline bool paged_fits(const Params& p) {
    if (p.kv_block_table == nullptr) return true;
    const int t = p.tokens_per_block;
    if (t < 16 || (t & (t - 1)) != 0) return false;
    if (int64_t(p.kv_table_stride) * t < p.s_kv_max || p.kv_pool_blocks < 1) return false;
    if (int64_t(p.b) * p.kv_table_stride > int64_t(UINT32_MAX)) return false;  // ws: a 32-bit table index
    return p.k_block_stride > 0 && p.v_block_stride > 0 && p.k_block_stride % kElemsPerChunk == 0 &&
           p.v_block_stride % kElemsPerChunk == 0;
}

//   d == kHeadDim, dv == kHeadDimV; b, h, h_kv >= 1, h % h_kv == 0; s_q_max >= 1
//   b, h <= 65535 (grid y and z limits)
//   scale_bmm1 finite and > 0 (the softmax tracks the max of the unscaled scores)
//   a local mask's window or chunk as mask_fits says
//   at most one score modifier: softcapping, ALiBi, a bias, a custom mask (softmax/score_mod.h)
//   a bias as bias_fits says
//   a paged KV cache as paged_fits says
//   q/k/v/o 16-byte aligned, every stride a multiple of 8 elements (16-byte chunks)
//   dropout off unless the kernel drops (`dropout`), and then without a score modifier
// e4m3_out: the kernel can write O in e4m3 (Params::o_e4m3).
inline bool params_fit(const Params& p, int head_dim, int head_dim_v, bool e4m3_out = false, bool dropout = false) {
    if (p.d != head_dim || p.dv != head_dim_v) return false;
    if (p.o_e4m3 && !e4m3_out) return false;
    if (p.dropout.threshold > 0xffffu || (p.dropout.threshold != 0 && (!dropout || score_mods(p) > 0))) return false;
    if (p.b < 1 || p.h < 1 || p.h_kv < 1 || p.h % p.h_kv != 0 || p.s_q_max < 1) return false;
    if (p.h > 65535 || p.b > 65535) return false;
    if (!(p.scale_bmm1 > 0.f) || !std::isfinite(p.scale_bmm1)) return false;
    if (!mask_fits(p)) return false;
    if (score_mods(p) > 1 || !bias_fits(p) || !paged_fits(p)) return false;
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
        case MaskType::kCustom: return f(MaskConstant<mask::Kind::kPadding>{});  // + ScoreMod::kCustomMask
    }
    return otherwise;
}

// A family's entry() (the registry's EntryFn): the __global__ serving mask m, where
// kernel_of(kind) is the address of the kernel for a compile-time mask kind; nullptr for a
// mask no family implements.
template <class F>
const void* entry_for(MaskType m, F&& kernel_of) {
    const auto address = [&](auto kind) { return reinterpret_cast<const void*>(kernel_of(kind)); };
    return with_mask(m, address, static_cast<const void*>(nullptr));
}

// The score modifier a problem asks for (softmax/score_mod.h), as the kernels' compile-time
// kMod: returns f(std::integral_constant<softmax::ScoreMod, mod>). Softcapping and ALiBi are
// run-time parameters (Params::softcap, Params::alibi_slopes) for which the kernels are
// compiled each way, so that the kernels without them carry no code and no registers for them.
template <softmax::ScoreMod M>
using ScoreModConstant = std::integral_constant<softmax::ScoreMod, M>;

template <class F>
auto with_score_mod(const Params& p, F&& f) {
    if (p.mask == MaskType::kCustom) return f(ScoreModConstant<softmax::ScoreMod::kCustomMask>{});
    if (p.softcap > 0.f) return f(ScoreModConstant<softmax::ScoreMod::kSoftcap>{});
    if (p.alibi_slopes != nullptr) return f(ScoreModConstant<softmax::ScoreMod::kAlibi>{});
    if (p.attention_bias != nullptr) return f(ScoreModConstant<softmax::ScoreMod::kBias>{});
    return f(ScoreModConstant<softmax::ScoreMod::kNone>{});
}

// The (mask kind, score modifier) pairs the families compile: every pair but the custom
// mask's modifier with a mask kind other than padding (MaskType::kCustom is that pair).
constexpr bool variant_exists(mask::Kind k, softmax::ScoreMod m) {
    return m != softmax::ScoreMod::kCustomMask || k == mask::Kind::kPadding;
}

// with_mask and with_score_mod together: f(kind, mod) for the problem's pair, `otherwise`
// (without instantiating f) for a pair that does not exist.
template <class F, class R>
R with_variant(const Params& p, F&& f, R otherwise) {
    return with_mask(
        p.mask,
        [&](auto kind) {
            constexpr mask::Kind kKind = decltype(kind)::value;
            return with_score_mod(p, [&](auto mod) -> R {
                if constexpr (variant_exists(kKind, decltype(mod)::value)) {
                    return f(MaskConstant<kKind>{}, mod);
                } else {
                    return otherwise;
                }
            });
        },
        otherwise);
}

// f(kind, mod) for every pair that exists (per-instantiation setup: shared memory limits).
template <class F>
void for_each_variant(F&& f) {
    using mask::Kind;
    using softmax::ScoreMod;
    const auto for_mods = [&](auto kind) {
        f(kind, ScoreModConstant<ScoreMod::kNone>{});
        f(kind, ScoreModConstant<ScoreMod::kSoftcap>{});
        f(kind, ScoreModConstant<ScoreMod::kAlibi>{});
        f(kind, ScoreModConstant<ScoreMod::kBias>{});
        constexpr mask::Kind kKind = decltype(kind)::value;
        if constexpr (variant_exists(kKind, ScoreMod::kCustomMask)) {
            f(kind, ScoreModConstant<ScoreMod::kCustomMask>{});
        }
    };
    for_mods(MaskConstant<Kind::kPadding>{});
    for_mods(MaskConstant<Kind::kCausal>{});
    for_mods(MaskConstant<Kind::kLocal>{});
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
