// The decode launch: the per-process setup of each kernel, the plan (plan.h's choices from
// one SM count), the sibling tile that runs (with_sibling), the launches of either path and
// of the combine kernel, and the registry's entry points (launch, entry, workspace_bytes).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "fmha/kernel/cluster_launch.h"
#include "fmha/kernel/decode/merge.h"
#include "fmha/kernel/decode/mma_kernel.h"
#include "fmha/kernel/decode/plan.h"
#include "fmha/kernel/decode/shape.h"
#include "fmha/kernel/decode/traits.h"
#include "fmha/kernel/decode/warp_kernel.h"
#include "fmha/kernel/dependent_launch.h"
#include "fmha/kernel/launch_checks.h"
#include "fmha/mask/mask.h"
#include "fmha/softmax/score_mod.h"
#include "params.h"

namespace fmha {
namespace decode {

template <class Tr, mask::Kind kMask, softmax::ScoreMod kMod>
const void* mma_fn() {
    return reinterpret_cast<const void*>(&decode_mma_kernel<Tr, kMask, kMod>);
}

// MmaSetup (plan.h) for Tr, once per process.
template <class Tr>
const MmaSetup& mma_setup() {
    static const MmaSetup setup = [] {
        MmaSetup s{cudaSuccess, 1, 1, {}, false};
        const void* padding = mma_fn<Tr, mask::Kind::kPadding, softmax::ScoreMod::kNone>();
        s.sm90 = kernel::compiled_for_sm90(padding);
        const bool clusters = Tr::kFusedMerge && s.sm90;
        const auto set_up = [&](const void* fn) {
            if (s.err == cudaSuccess && Tr::kSoloSmemBytes > 48 * 1024)
                s.err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSoloSmemBytes);
            if (s.err == cudaSuccess)
                s.err = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared);
        };
        kernel::for_each_variant([&](auto kind, auto mod) {
            constexpr mask::Kind kKind = decltype(kind)::value;
            constexpr softmax::ScoreMod kMod = decltype(mod)::value;
            set_up(mma_fn<Tr, kKind, kMod>());
            if constexpr (Tr::kKvE4m3) set_up(reinterpret_cast<const void*>(&decode_mma_kernel<Tr, kKind, kMod, true>));
        });
        if (s.err == cudaSuccess)
            s.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.ctas_per_sm, padding, Tr::kThreads, Tr::kSoloSmemBytes);
        if (s.err == cudaSuccess)
            s.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.paired_ctas_per_sm, padding, Tr::kThreads,
                                                                  Tr::kSmemBytes);
        s.ctas_per_sm = std::max(s.ctas_per_sm, 1);
        s.paired_ctas_per_sm = std::max(s.paired_ctas_per_sm, 1);
        for (int n = 2; clusters && s.err == cudaSuccess && n <= kernel::kMaxCluster; ++n) {
            s.clusters[0][n] = kernel::max_active_clusters(padding, Tr::kThreads, Tr::kSoloSmemBytes, n);
            s.clusters[1][n] = kernel::max_active_clusters(padding, Tr::kThreads, Tr::kSmemBytes, n);
        }
        return s;
    }();
    return setup;
}

// Resident CTAs per SM of the warp path's persistent kernel (decode_short_kernel), once.
template <class Tr, int kPasses>
cudaError_t short_ctas_per_sm(int* ctas) {
    static int cached = 0;
    static cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &cached, &decode_short_kernel<Tr, mask::Kind::kPadding, kPasses>, Tr::kThreads, 0);
    *ctas = std::max(cached, 1);
    return err;
}

// The persistent one-step launch for kPasses passes of keys.
template <class Tr, int kPasses>
cudaError_t launch_short(const Params& p, const Shape& shape, cudaStream_t stream) {
    int sms = 0, ctas_per_sm = 0;
    cudaError_t err = kernel::sm_count(p, &sms);
    if (err == cudaSuccess) err = short_ctas_per_sm<Tr, kPasses>(&ctas_per_sm);
    if (err != cudaSuccess) return err;
    const int64_t units_per_cta = int64_t(Tr::kWarps) * Tr::kKeysPerPass;  // a unit per lane group
    const int64_t blocks = std::min<int64_t>((shape.units + units_per_cta - 1) / units_per_cta, int64_t(sms) * ctas_per_sm);
    const UnitDivs divs = unit_divs(p, shape);
    kernel::with_variant(
        p,
        [&](auto kind, auto mod) {
            decode_short_kernel<Tr, decltype(kind)::value, kPasses, decltype(mod)::value>
                <<<static_cast<unsigned>(blocks), Tr::kThreads, 0, stream>>>(p, divs);
            return 0;
        },
        0);
    return cudaSuccess;
}

// How a launch runs this problem on this device: the key splits of either path within
// workspace_bytes and, on the mma path, whether two CTAs share an SM (pair_up), whether a
// tile's splits form a cluster (cluster_splits) and whether the launch overlaps the grid
// ahead (depend_on_previous), decided once from one SM count and setup.
struct LaunchPlan {
    int splits = 1;
    bool paired = false;
    bool clustered = false;
    bool dependent = false;
};

template <class Tr>
inline cudaError_t plan_launch(const Params& p, size_t workspace_bytes, LaunchPlan* plan) {
    int sms = 0;
    cudaError_t err = kernel::sm_count(p, &sms);
    if (err != cudaSuccess) return err;
    if constexpr (Tr::kMma) {
        const MmaSetup& setup = mma_setup<Tr>();
        if (setup.err != cudaSuccess) return setup.err;
        plan->splits =
            cluster_fallback<Tr>(p, setup, choose_splits_mma<Tr>(p, sms, setup.ctas_per_sm, workspace_bytes), sms);
        plan->paired = pair_up<Tr>(p, plan->splits, sms, setup.ctas_per_sm);
        plan->clustered = cluster_splits<Tr>(p, setup, plan->splits, plan->paired, sms);
        plan->dependent = !plan->clustered && depend_on_previous(make_shape<Tr>(p, plan->splits).units,
                                                                 setup.resident(sms, plan->paired), setup.sm90,
                                                                 plan->splits == 1, plan->paired);
    } else {
        plan->splits = choose_splits_warp<Tr>(p, sms, workspace_bytes);
    }
    return cudaSuccess;
}

// The __global__ for a mask, as the registry's EntryFn returns it.
template <class Tr>
const void* entry(MaskType m) {
    return kernel::with_mask(
        m,
        [](auto kind) {
            constexpr mask::Kind kMask = decltype(kind)::value;
            if constexpr (Tr::kMma) return reinterpret_cast<const void*>(&decode_mma_kernel<Tr, kMask>);
            else return reinterpret_cast<const void*>(&decode_kernel<Tr, kMask>);
        },
        static_cast<const void*>(nullptr));
}

// A tile traits type as a value, for with_sibling's callback.
template <class T>
struct TileTag {
    using type = T;
};

// Calls f(TileTag<X>{}) with the tile this problem runs on and returns what f returns: on
// the mma path with a OneHead sibling (kHeads > 1; e4m3 K and V: d = 64, 128), Tr::OneHead where
// one_head_fits, else at d = 64 Tr::Quad where quad_fits (on this device); otherwise, or when
// the device cannot say (the launch then reports it), Tr itself. launch() and
// workspace_bytes() both choose through it, so the workspace is sized for the tile that runs.
template <class Tr, class F>
auto with_sibling(const Params& p, F&& f) {
    if constexpr (Tr::kMma && Tr::kHasOneHead) {
        int sms = 0;
        const MmaSetup& one = mma_setup<typename Tr::OneHead>();
        const bool known = kernel::sm_count(p, &sms) == cudaSuccess && one.err == cudaSuccess;
        if (known && one_head_fits<Tr>(p, sms, one.ctas_per_sm)) return f(TileTag<typename Tr::OneHead>{});
        if constexpr (Tr::kHasQuad) {
            const MmaSetup& quad = mma_setup<typename Tr::Quad>();
            if (known && quad.err == cudaSuccess && quad_fits<Tr>(p, sms, one.ctas_per_sm, quad.ctas_per_sm)) {
                return f(TileTag<typename Tr::Quad>{});
            }
        }
    }
    return f(TileTag<Tr>{});
}

// The registry's TileFn: which tile a launch of this problem runs (with_sibling's choice):
// 0 its own, 1 OneHead, 2 Quad, the order of the row's siblings (generator/families/decode.py).
template <class Tr>
int sibling_index(const Params& p) {
    return with_sibling<Tr>(p, [](auto tile) {
        using T = typename decltype(tile)::type;
        if constexpr (std::is_same_v<T, Tr>) return 0;
        else if constexpr (std::is_same_v<T, typename Tr::OneHead>) return 1;
        else return 2;
    });
}

// workspace_bytes for the tile that runs (with_sibling chose it).
template <class Tr>
size_t tile_workspace_bytes(const Params& p) {
    LaunchPlan plan;
    if (plan_launch<Tr>(p, SIZE_MAX, &plan) != cudaSuccess) {  // the launch reports it
        cudaGetLastError();
        return 0;
    }
    return plan.splits > 1 ? partial_bytes<Tr>(p, plan.splits) : 0;
}

// The registry's WorkspaceFn: bytes of Params::workspace the launch uses for this problem
// at most (0 when it runs one split). Launch with less and it runs fewer splits.
template <class Tr>
size_t workspace_bytes(const Params& p) {
    return with_sibling<Tr>(p, [&](auto tile) { return tile_workspace_bytes<typename decltype(tile)::type>(p); });
}

// launch() for the tile that runs (with_sibling chose it; launch() checked the problem).
template <class Tr>
cudaError_t launch_tile(const Params& p, cudaStream_t stream) {
    LaunchPlan plan;
    const cudaError_t err = plan_launch<Tr>(p, p.workspace != nullptr ? p.workspace_bytes : 0, &plan);
    if (err != cudaSuccess) return err;
    const int splits = plan.splits;
    const Shape shape = make_shape<Tr>(p, splits);
    const int64_t combine_threads =
        int64_t(p.b) * p.h_kv * shape.row_tiles * Tr::kRows * (Tr::kHeadDimV / kElemsPerChunk);
    // 32-bit indices: the units (CTAs or warps) and the merge's rows x chunks.
    if (combine_threads > INT32_MAX || shape.units > INT32_MAX) return cudaErrorInvalidValue;
    if constexpr (Tr::kMma) {
        const auto blocks = static_cast<unsigned>(shape.units);
        const int smem = plan.paired ? Tr::kSmemBytes : Tr::kSoloSmemBytes;
        const cudaError_t e = kernel::with_variant(
            p,
            [&](auto kind, auto mod) {
                constexpr mask::Kind kKind = decltype(kind)::value;
                constexpr softmax::ScoreMod kMod = decltype(mod)::value;
                const auto run = [&](auto half) {
                    constexpr auto fn = &decode_mma_kernel<Tr, kKind, kMod, decltype(half)::value>;
                    if (plan.clustered) {
                        return kernel::launch_clusters(fn, blocks, Tr::kThreads, smem, splits, stream, p, splits);
                    }
                    if (plan.dependent) {
                        return kernel::launch_dependent(fn, blocks, Tr::kThreads, smem, stream, p, splits);
                    }
                    fn<<<blocks, Tr::kThreads, smem, stream>>>(p, splits);
                    return cudaSuccess;
                };
                if constexpr (Tr::kKvE4m3) {
                    if (half_rows<Tr>(p)) return run(std::true_type{});
                }
                return run(std::false_type{});
            },
            cudaSuccess);
        if (e != cudaSuccess) return e;
    } else if (splits == 1 && mask::key_span_max(p) <= 1) {  // one step per unit: persistent warps
        const cudaError_t e = launch_short<Tr, 1>(p, shape, stream);
        if (e != cudaSuccess) return e;
    } else if (splits == 1 && mask::key_span_max(p) <= 2) {
        const cudaError_t e = launch_short<Tr, 2>(p, shape, stream);
        if (e != cudaSuccess) return e;
    } else {
        const int64_t blocks = (shape.units + Tr::kWarps - 1) / Tr::kWarps;
        const UnitDivs divs = unit_divs(p, shape);
        kernel::with_variant(
            p,
            [&](auto kind, auto mod) {
                decode_kernel<Tr, decltype(kind)::value, decltype(mod)::value>
                    <<<static_cast<unsigned>(blocks), Tr::kThreads, 0, stream>>>(p, splits, divs);
                return 0;
            },
            0);
    }
    // Fused-merge tiles merged their splits in the kernel: no combine_kernel compiled for them.
    if constexpr (!Tr::kFusedMerge) {
        if (splits > 1) {
            combine_kernel<Tr><<<static_cast<unsigned>((combine_threads + 255) / 256), 256, 0, stream>>>(p, splits);
        }
    }
    return cudaGetLastError();
}

// Returns cudaErrorInvalidValue without launching when the problem does not fit this
// instantiation (d, dv, b, h, h_kv, alignment and strides as the other families; s_q_max
// <= kMaxSq; warp path: rows per KV head <= kRows unless kRows is 8, the tiled case; under
// 2^31 units and query rows x 16-byte chunks, the 32-bit indices).
template <class Tr>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    if (!kernel::params_fit(p, Tr::kHeadDim, Tr::kHeadDimV)) return cudaErrorInvalidValue;
    if (p.s_q_max > Tr::kMaxSq) return cudaErrorInvalidValue;
    if (!Tr::kMma && (p.h / p.h_kv) * p.s_q_max > Tr::kRows && Tr::kRows != 8) return cudaErrorInvalidValue;
    // The mma path keeps one FFMA a score (no kVariantWideLogits); the warp path scales Q first.
    if (Tr::kMma && p.wide_logits) return cudaErrorInvalidValue;
    if (entry<Tr>(p.mask) == nullptr) return cudaErrorInvalidValue;  // a mask the family does not implement
    // e4m3 K and V: rows of whole 16-byte chunks (16 elements), as cp.async copies them.
    if (Tr::kKvE4m3 && (p.k_row_stride % 16 != 0 || p.k_head_stride % 16 != 0 || p.v_row_stride % 16 != 0 ||
                        p.v_head_stride % 16 != 0 || p.k_block_stride % 16 != 0 || p.v_block_stride % 16 != 0))
        return cudaErrorInvalidValue;
    return with_sibling<Tr>(p, [&](auto tile) { return launch_tile<typename decltype(tile)::type>(p, stream); });
}

}  // namespace decode
}  // namespace fmha
