// The ws family's host side: the registry's entry and LaunchFn, the grid, the TMA maps.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fmha/kernel/launch_checks.h"
#include "fmha/kernel/ws/kernel.h"
#include "fmha/kernel/ws/traits.h"
#include "fmha/memory/tma_sm90.h"
#include "params.h"

namespace fmha {
namespace ws {

// The __global__ for a mask, as the registry's EntryFn returns it; nullptr for a mask kind
// the tile does not compile (Traits::kHasMask).
template <class Tr>
const void* entry(MaskType m) {
    return kernel::entry_for(m, [](auto kind) -> const void* {
        constexpr mask::Kind kMask = decltype(kind)::value;
        if constexpr (Tr::template kHasMask<kMask>) {
            return reinterpret_cast<const void*>(&fwd_kernel<Tr, kMask>);
        } else {
            return nullptr;
        }
    });
}

// Grid of a launch: one CTA per tile, or min(tiles, SMs) persistent CTAs. 0 when the tile
// count does not fit an int.
template <class Tr>
int grid_size(const Params& p, int num_sms) {
    const int64_t tiles = static_cast<int64_t>(ceil_div(p.s_q_max, Tr::kBlockM)) * p.h * p.b;
    if (tiles > INT32_MAX) return 0;
    return static_cast<int>(Tr::kPersistent ? std::min<int64_t>(tiles, num_sms) : tiles);
}

// cudaFuncSetAttribute once per kernel and process (the first launch pays it).
template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod, bool kPagedOnly, bool kDropout>
cudaError_t allow_smem() {
    static const cudaError_t err =
        cudaFuncSetAttribute(reinterpret_cast<const void*>(&fwd_kernel<Tr, kMask, kMod, kPagedOnly, kDropout>),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    return err;
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit this
// instantiation (d, dv, b, h, h_kv, alignment and strides as flash_sm80; persistent: a
// tile counter), or when an extent is not in [1, INT32_MAX] (TMA coordinates are 32-bit),
// and cudaErrorNotSupported when the driver offers no tensor-map encoder.
// kCausalOnly: instantiate the causal kernels only (a sibling that runs no other mask);
// kDropoutOnly: the dropout kernels only (a sibling that runs its row's dropout).
template <class Tr, bool kCausalOnly = false, bool kDropoutOnly = false>
cudaError_t launch_with_extents(const Params& p, int64_t q_tokens, int64_t kv_tokens, cudaStream_t stream) {
    // TMA moves e4m3 as 16-bit pairs (Traits::TmaElement): head sizes and strides in pairs.
    using Element = typename Tr::TmaElement;
    constexpr int kUnit = 2 / Tr::kElemBytes;
    if (q_tokens < 1 || kv_tokens < 1 || q_tokens > INT32_MAX || kv_tokens > INT32_MAX) return cudaErrorInvalidValue;
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV, Tr::kFp8, Tr::kHasDropout)) return cudaErrorInvalidValue;
    if constexpr (Tr::kFp8) {  // 16-byte strides for TMA, of e4m3 bytes
        for (int64_t stride : {p.q_row_stride, p.q_head_stride, p.k_row_stride, p.k_head_stride, p.v_row_stride,
                               p.v_head_stride, p.k_block_stride, p.v_block_stride})
            if (stride % 16 != 0) return cudaErrorInvalidValue;
    }
    if constexpr (!kCausalOnly && !kDropoutOnly) {  // (entry() would instantiate every mask's kernel)
        if (entry<Tr>(p.mask) == nullptr) return cudaErrorInvalidValue;  // a mask the family does not implement
    }
    if (p.wide_logits) return cudaErrorInvalidValue;  // one FFMA a score: no kVariantWideLogits
    if (Tr::kPersistent && p.tile_counter == nullptr) return cudaErrorInvalidValue;
    if (!Tr::kHasPaged && p.kv_block_table != nullptr) return cudaErrorInvalidValue;
    int num_sms = 0;
    if (Tr::kPersistent) {
        const cudaError_t err = kernel::sm_count(p, &num_sms);
        if (err != cudaSuccess) return err;
    }
    const int grid = grid_size<Tr>(p, num_sms);
    if (grid < 1) return cudaErrorInvalidValue;

    TmaMaps maps;
    cudaError_t err = memory::make_head_tile_map<Element>(&maps.q, p.q, q_tokens, p.h, Tr::kTmaHeadDim,
                                                          p.q_row_stride / kUnit, p.q_head_stride / kUnit, Tr::kBlockM);
    if (err == cudaSuccess && p.kv_block_table != nullptr) {
        const int box_rows = std::min(p.tokens_per_block, kPagedMaxBox<Tr>);
        err = memory::make_paged_tile_map<Element>(&maps.k, p.k, p.kv_pool_blocks, p.tokens_per_block, p.h_kv,
                                                   Tr::kTmaHeadDim, p.k_row_stride / kUnit, p.k_head_stride / kUnit,
                                                   p.k_block_stride / kUnit, box_rows);
        if (err == cudaSuccess) {
            err = memory::make_paged_tile_map<Element>(&maps.v, p.v, p.kv_pool_blocks, p.tokens_per_block, p.h_kv,
                                                       Tr::kTmaHeadDimV, p.v_row_stride / kUnit,
                                                       p.v_head_stride / kUnit, p.v_block_stride / kUnit, box_rows);
        }
    } else if (err == cudaSuccess) {
        err = memory::make_head_tile_map<Element>(&maps.k, p.k, kv_tokens, p.h_kv, Tr::kTmaHeadDim,
                                                  p.k_row_stride / kUnit, p.k_head_stride / kUnit, Tr::kBlockN);
        if (err == cudaSuccess) {
            err = memory::make_head_tile_map<Element>(&maps.v, p.v, kv_tokens, p.h_kv, Tr::kTmaHeadDimV,
                                                      p.v_row_stride / kUnit, p.v_head_stride / kUnit, Tr::kBlockN);
        }
    }
    if (err == cudaSuccess && Tr::kStoreOTma && !p.o_e4m3) {  // e4m3 O leaves from registers
        err = memory::make_head_tile_map<typename Tr::OutElement>(&maps.o, p.o, q_tokens, p.h, Tr::kHeadDimV,
                                                                  p.o_row_stride, p.o_head_stride, kWarpgroupRows);
    }
    if (err != cudaSuccess) return err;
    err = kernel::with_variant(
        p,
        [&](auto kind, auto mod) {
            constexpr mask::Kind kMask = decltype(kind)::value;
            constexpr softmax::ScoreMod kMod = decltype(mod)::value;
            if constexpr (!Tr::template kHasMod<kMod> || !Tr::template kHasMask<kMask> ||
                          (kCausalOnly && kMask != mask::Kind::kCausal) ||
                          (kDropoutOnly && kMod != softmax::ScoreMod::kNone)) {
                return cudaErrorInvalidValue;  // not a variant of this kernel (Traits::kHasMod, kHasMask)
            } else {
                const auto go = [&](auto paged_only, auto drops) {
                    constexpr bool kPagedOnly = decltype(paged_only)::value, kDropout = decltype(drops)::value;
                    const cudaError_t e = allow_smem<Tr, kMask, kMod, kPagedOnly, kDropout>();
                    if (e == cudaSuccess) {
                        fwd_kernel<Tr, kMask, kMod, kPagedOnly, kDropout>
                            <<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, maps);
                    }
                    return e;
                };
                if constexpr (kDropoutOnly) {
                    return go(std::false_type{}, std::true_type{});
                } else {
                    if constexpr (Tr::kSeparatePaged) {
                        if (p.kv_block_table != nullptr) return go(std::true_type{}, std::false_type{});
                    }
                    if constexpr (Tr::kHasDropout && kMod == softmax::ScoreMod::kNone) {  // (params_fit: no mod with it)
                        if (p.dropout.threshold != 0) return go(std::false_type{}, std::true_type{});
                    }
                    return go(std::false_type{}, std::false_type{});
                }
            }
        },
        cudaErrorInvalidValue);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
}

// Problems of at most Config::kShortMaxKeys keys (generator/families/ws.py short_max_keys) run
// the tile's sibling (Tr::Short): causal ones on a 192-row tile, 0.89x the time at s = 512 and
// 1k, d = 64, and 1.07x at 2k (bench/NOTES.md §55, §57); all of them on a kWideKeys tile, up to
// 1024 keys at d = 64 and 128 (0.89-0.94x at 512 at d = 128, §87), up to 384 on the
// kLeanProducer one (d = 256, §92).
template <class Tr>
bool runs_short(const Params& p) {
    constexpr int kShortMaxKeys = Tr::Config::kShortMaxKeys;
    if constexpr (Tr::kWideKeys) {  // ... and what its kernel lacks: softcapping, kLeanProducer a paged cache
        return p.s_kv_max <= kShortMaxKeys || p.softcap > 0.f || (Tr::kLeanProducer && p.kv_block_table != nullptr);
    } else if constexpr (Tr::kHasShort) {
        return p.mask == MaskType::kCausal && p.s_kv_max <= kShortMaxKeys;
    }
    return false;
}

// The registry's TileFn: 0 the row's own tile, 1 its sibling Short.
template <class Tr>
int sibling_index(const Params& p) {
    return runs_short<Tr>(p) ? 1 : 0;
}

// The registry's LaunchFn: the storage extents come from Params (q_tokens, kv_tokens).
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (p.q_tokens < 1 || p.kv_tokens < 1) return cudaErrorInvalidValue;
    if constexpr (Tr::kHasShort && !Tr::kHasDropout) {  // dropout: on the sibling, where it has it
        // (Nested: Tr::Short is a tile only where kHasShort; named elsewhere it may not fit.)
        if constexpr (Tr::Short::kHasDropout) {
            if (p.dropout.threshold != 0)
                return launch_with_extents<typename Tr::Short, false, true>(p, p.q_tokens, p.kv_tokens, stream);
        }
    }
    if constexpr (Tr::kHasShort) {
        if (runs_short<Tr>(p)) {  // a 192-row tile's sibling runs its causal problems only
            return launch_with_extents<typename Tr::Short, !Tr::kWideKeys>(p, p.q_tokens, p.kv_tokens, stream);
        }
    }
    return launch_with_extents<Tr>(p, p.q_tokens, p.kv_tokens, stream);
}


}  // namespace ws
}  // namespace fmha
