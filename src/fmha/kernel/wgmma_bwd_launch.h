// The launch of the wgmma backward kernels (wgmma_bwd_sm90.h for the 64 and 128 tiles; the
// wide one, wgmma_bwd_wide_sm90.h, for the 256 tile): TMA maps, then flash-bwd's preprocess,
// the main kernel, flash-bwd's postprocess.
#pragma once

#include "fmha/kernel/wgmma_bwd_sm90.h"
#include "fmha/kernel/wgmma_bwd_wide_sm90.h"

namespace fmha {
namespace wgmma_bwd {

// Whether the TMA maps can address the tensors: 16-byte aligned bases and strides, rows within
// int32 coordinates.
inline bool tma_ready(const BwdParams& bp) {
    const Params& p = bp.p;
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const auto strides = [](int64_t row, int64_t head) { return row % 8 == 0 && head % 8 == 0; };  // 16-bit
    // The rows' 1D maps take int32 coordinates.
    if (int64_t(p.b) * p.h * flash_bwd::rows_pitch(p) > INT32_MAX) return false;
    return aligned(p.q) && aligned(p.k) && aligned(p.v) && aligned(bp.d_o) &&
           strides(p.q_row_stride, p.q_head_stride) && strides(p.k_row_stride, p.k_head_stride) &&
           strides(p.v_row_stride, p.v_head_stride) && strides(bp.do_row_stride, bp.do_head_stride);
}

// Softcap, ALiBi and dropout ("score extras"): the narrow kernel at its own head size only,
// not the wide tile nor zero-padded heads (flash-bwd serves those). The one rule, read by the
// launch below and by the library's choice of kernel (api/backward.cu takes_wgmma).
constexpr bool serves_score_extras(bool wide, int tile_d, int d, int dv) {
    return !wide && d == tile_d && dv == tile_d;
}

// The three launches (flash-bwd's preprocess and postprocess around this main kernel).
// d and dv multiples of 8 up to the tile's head size, zero-padded up to it (MainArgs::panels_k,
// panels_v). cudaErrorInvalidValue for what it does not serve (larger heads, custom masks,
// bias, paged caches).
template <class Tr>
cudaError_t launch(const BwdParams& bp, cudaStream_t stream) {
    const Params& p = bp.p;
    const auto fits = [](int d) { return d >= 8 && d <= Tr::kHeadDim && d % 8 == 0; };
    if (!fits(p.d) || !fits(p.dv) || p.h % p.h_kv != 0 || !tma_ready(bp)) return cudaErrorInvalidValue;
    if (p.mask == MaskType::kCustom || p.kv_block_table != nullptr || p.attention_bias != nullptr)
        return cudaErrorInvalidValue;
    if (bp.d_o == nullptr || bp.lse == nullptr || bp.dq_accum == nullptr) return cudaErrorInvalidValue;
    if (p.dropout.threshold > 0xffffu) return cudaErrorInvalidValue;
    const bool padded = p.d != Tr::kHeadDim || p.dv != Tr::kHeadDim;
    if (!serves_score_extras(Tr::kWide, Tr::kHeadDim, p.d, p.dv) &&
        (p.dropout.threshold != 0 || p.softcap > 0.f || p.alibi_slopes != nullptr))
        return cudaErrorInvalidValue;  // (flash-bwd serves them)
    MainArgs args;
    args.bp = bp;
    if (padded) args.panels_k = ceil_div(p.d, 64), args.panels_v = ceil_div(p.dv, 64);
    // MHA: the main kernel stores dK and dV itself (packed pairs: 4-byte aligned rows).
    const auto even = [](const void* ptr, int64_t row, int64_t head) {
        return reinterpret_cast<uintptr_t>(ptr) % 4 == 0 && row % 2 == 0 && head % 2 == 0;
    };
    args.bp.dkv_direct = p.h == p.h_kv && even(bp.dk, bp.dk_row_stride, bp.dk_head_stride) &&
                         even(bp.dv, bp.dv_row_stride, bp.dv_head_stride);
    using Element = typename Tr::Element;
    const auto head_map = [&](CUtensorMap* map, const void* ptr, int64_t tokens, int heads, int d, int64_t row_stride,
                              int64_t head_stride, int rows) {
        return memory::make_head_tile_map<Element>(map, ptr, tokens, heads, d, row_stride, head_stride, rows, padded);
    };
    const auto rows_map = [&](CUtensorMap* map, const float* ptr) {
        const cuuint64_t dims[1] = {cuuint64_t(p.b) * p.h * flash_bwd::rows_pitch(p)};
        const cuuint32_t box[1] = {Tr::kBlockM};
        const cuuint64_t unused[1] = {4};  // rank 1 has no stride, but the encoder wants the array
        return memory::encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, ptr, dims, unused, box,
                                    CU_TENSOR_MAP_SWIZZLE_NONE);
    };
    for (const cudaError_t e :
         {head_map(&args.q_map, p.q, p.q_tokens, p.h, p.d, p.q_row_stride, p.q_head_stride, Tr::kBlockM),
          head_map(&args.do_map, bp.d_o, p.q_tokens, p.h, p.dv, bp.do_row_stride, bp.do_head_stride, Tr::kBlockM),
          head_map(&args.k_map, p.k, p.kv_tokens, p.h_kv, p.d, p.k_row_stride, p.k_head_stride, Tr::kBlockN),
          head_map(&args.v_map, p.v, p.kv_tokens, p.h_kv, p.dv, p.v_row_stride, p.v_head_stride, Tr::kBlockN),
          rows_map(&args.lse_map, bp.lse2), rows_map(&args.dsum_map, bp.d_sum)})
        if (e != cudaSuccess) return e;
    {
        const cuuint64_t dims[3] = {cuuint64_t(p.d), cuuint64_t(p.h), cuuint64_t(p.q_tokens)};
        const cuuint64_t strides[2] = {cuuint64_t(p.d) * 4, cuuint64_t(p.h) * p.d * 4};
        const cuuint32_t box[3] = {Tr::kDqPanelCols, 1, 64};
        cudaError_t e = memory::encode_tiled(&args.dq_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, bp.dq_accum, dims, strides,
                                             box, CU_TENSOR_MAP_SWIZZLE_128B);
        if (e != cudaSuccess) return e;
    }
    cudaError_t err = flash_bwd::prepare<Tr>(bp, stream);
    if (err != cudaSuccess) return err;
    const auto main = [&](auto mask) {
        const auto run = [&](auto deterministic, auto extra) {
            constexpr BwdMask kMask = decltype(mask)::value;
            constexpr bool kDet = decltype(deterministic)::value;
            constexpr auto kernel = [] {
                if constexpr (Tr::kWide) return &wide_kernel<Tr, kMask, kDet>;
                else return &bwd_kernel<Tr, kMask, kDet, decltype(extra)::value>;
            }();
            cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
            if (e != cudaSuccess) return e;
            // blockIdx.x is the key block (deterministic: counted from the last).
            kernel<<<dim3(ceil_div(p.s_kv_max, Tr::kBlockN), p.h, p.b), Tr::kThreads, Tr::kSmemBytes, stream>>>(args);
            return cudaGetLastError();
        };
        const auto with_mods = [&](auto deterministic) {
            using E = Extra;
            if constexpr (Tr::kWide) return run(deterministic, std::integral_constant<E, E::kNone>{});
            if (p.dropout.threshold != 0)  // (the forward refuses dropout with softcap or ALiBi)
                return run(deterministic, std::integral_constant<E, E::kDropout>{});
            return p.softcap > 0.f || p.alibi_slopes != nullptr ? run(deterministic, std::integral_constant<E, E::kMods>{})
                                                                : run(deterministic, std::integral_constant<E, E::kNone>{});
        };
        return bp.deterministic ? with_mods(std::true_type{}) : with_mods(std::false_type{});
    };
    using None = std::integral_constant<BwdMask, BwdMask::kNone>;
    using Causal = std::integral_constant<BwdMask, BwdMask::kCausal>;
    using Local = std::integral_constant<BwdMask, BwdMask::kLocal>;
    err = p.mask == MaskType::kPadding ? main(None{}) : p.mask == MaskType::kCausal ? main(Causal{}) : main(Local{});
    if (err != cudaSuccess) return err;
    return flash_bwd::finish<Tr>(args.bp, stream);
}

}  // namespace wgmma_bwd
}  // namespace fmha
