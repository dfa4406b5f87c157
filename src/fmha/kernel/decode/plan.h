// The decode launch's host-side choices, pure functions of the problem and the device's
// counts (unit-tested in tests/unit/kernel/test_decode.cu): the key splits of either path,
// and on the mma path whether two CTAs share an SM, which sibling tile runs, whether a tile's
// splits merge in a cluster, and whether the launch overlaps the grid ahead.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fmha/kernel/cluster_launch.h"
#include "fmha/kernel/decode/shape.h"
#include "fmha/kernel/decode/traits.h"
#include "fmha/mask/mask.h"
#include "params.h"

namespace fmha {
namespace decode {

// Warp path: enough warps for the memory system (about 64 per SM in flight), and no split
// shorter than kMinKeysPerSplit keys; at most what `workspace_bytes` holds (0: one split).
template <class Tr>
inline int choose_splits_warp(const Params& p, int num_sms, size_t workspace_bytes) {
    const Shape one = make_shape<Tr>(p, 1);
    const int64_t target = int64_t(std::max(num_sms, 1)) * 64;
    int splits = static_cast<int>(std::min<int64_t>(kMaxSplits, (target + one.units - 1) / one.units));
    splits = std::min(splits, std::max(1, mask::key_span_max(p) / kMinKeysPerSplit));
    while (splits > 1 && partial_bytes<Tr>(p, splits) > workspace_bytes) --splits;
    return std::max(splits, 1);
}

// Mma path: CTAs resident at once, one wave, on num_sms SMs of ctas_per_sm each (at least one
// of each, where the device or the kernel cannot say).
inline int64_t wave_slots(int num_sms, int ctas_per_sm) {
    return int64_t(std::max(num_sms, 1)) * std::max(ctas_per_sm, 1);
}

// Mma path: as many splits as fit the CTAs into one wave of resident CTAs (num_sms *
// ctas_per_sm) without exceeding it, so no CTA streams alone at the end; none shorter than
// kMmaMinKeysPerSplit keys; at most what `workspace_bytes` holds. Problems with more units
// than one wave holds take the fewest splits (often none) that keep kMmaMinWaveEighths of
// their waves' slots busy (192 units on 132 slots: 2 splits, 384 CTAs in 3 waves, not 1.45),
// none shorter than kMmaMinKeysPerWaveSplit keys.
template <class Tr>
inline int choose_splits_mma(const Params& p, int num_sms, int ctas_per_sm, size_t workspace_bytes) {
    const Shape one = make_shape<Tr>(p, 1);
    const int64_t slots = wave_slots(num_sms, ctas_per_sm);
    const int span = mask::key_span_max(p);
    int splits = static_cast<int>(std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, slots / one.units)));
    if (one.units > slots) {
        const auto busy_enough = [&](int s) {
            const int64_t ctas = one.units * s;
            return ctas * 8 >= (ctas + slots - 1) / slots * slots * kMmaMinWaveEighths;
        };
        const int most = std::min(kMaxSplits, std::max(1, span / kMmaMinKeysPerWaveSplit));
        while (splits < most && !busy_enough(splits)) ++splits;
    }
    splits = std::min(splits, std::max(1, span / kMmaMinKeysPerSplit));
    while (splits > 1 && partial_bytes<Tr>(p, splits) > workspace_bytes) --splits;
    return std::max(splits, 1);
}

// Mma path: whether the launch asks for kSmemBytes, which lets two CTAs share an SM, rather
// than kSoloSmemBytes. Where the CTAs are more than one wave at ctas_per_sm (kSoloSmemBytes')
// and read at most kMmaPairMaxKeys keys each, an SM's CTAs hand over often, all at once (the
// units are alike): paired, one streams while the other starts or ends. Longer CTAs stream
// faster alone.
template <class Tr>
inline bool pair_up(const Params& p, int splits, int num_sms, int ctas_per_sm) {
    const Shape s = make_shape<Tr>(p, splits);
    return s.units > wave_slots(num_sms, ctas_per_sm) && s.keys_per_split <= kMmaPairMaxKeys;
}

// Mma path, several KV heads a CTA (kHeads > 1): whether the launch runs Tr::OneHead instead,
// where the problem's one-head units (b * h_kv * row tiles) fit one wave of OneHead's
// resident CTAs: then the wave is filled by key splits, and twice the units of one head split
// half as often (b = 8: 2 splits, not 4; b = 1 at 4k: 128 CTAs of 256 keys, not 64).
template <class Tr>
inline bool one_head_fits(const Params& p, int num_sms, int ctas_per_sm) {
    return make_shape<typename Tr::OneHead>(p, 1).units <= wave_slots(num_sms, ctas_per_sm);
}

// Mma path, d = 64 (Tr::kHasQuad): whether the launch runs Tr::Quad, where the one-head units
// do not fit a wave of OneHead, fill more than half and at most three quarters of a wave of
// Quad's resident CTAs (quad_ctas_per_sm an SM) without a split, and read at most
// kMmaQuadMaxKeys keys: b = 34 to 49 at h_kv = 8, s_q = 1 (132 SMs, four an SM), to 8k keys.
template <class Tr>
inline bool quad_fits(const Params& p, int num_sms, int one_head_ctas_per_sm, int quad_ctas_per_sm) {
    const int64_t units = make_shape<typename Tr::OneHead>(p, 1).units;
    const int64_t slots = wave_slots(num_sms, quad_ctas_per_sm);
    return !one_head_fits<Tr>(p, num_sms, one_head_ctas_per_sm) && 2 * units > slots &&
           4 * units <= kMmaQuadMaxFillQuarters * slots && mask::key_span_max(p) <= kMmaQuadMaxKeys;
}

// Mma path: whether every tile's packed query rows (a KV head's query heads times s_q) fit the
// first 8 rows of its m-tile, so each lane's second row (g + 8) is padding and the kernel
// skips its softmax (decode_mma_kernel's kHalf). The e4m3-cache tiles only: their softmax
// bounds them (bench/NOTES.md §83).
template <class Tr>
inline bool half_rows(const Params& p) {
    return Tr::kKvE4m3 && int64_t(p.h / p.h_kv) * p.s_q_max <= Tr::kRows / 2;
}

// The mma path's per-process setup, once per instantiation (launch.h's mma_setup): shared
// memory beyond 48 KB for the mask x score modifier variants and the resident CTAs per SM that
// choose_splits_mma fills (at kSoloSmemBytes).
struct MmaSetup {
    cudaError_t err;
    int ctas_per_sm;
    int paired_ctas_per_sm;  // at kSmemBytes
    // Clusters of n CTAs resident at once, solo ([0]: kSoloSmemBytes) and paired ([1]:
    // kSmemBytes); all 0 where the kernel's code has no clusters (before SM90).
    int clusters[2][kernel::kMaxCluster + 1];
    bool sm90;  // the kernel's code is SM90's: programmatic dependent launch is real

    // CTAs resident at once on `sms` SMs, paired (kSmemBytes) or solo (kSoloSmemBytes).
    int64_t resident(int sms, bool paired) const {
        return wave_slots(sms, paired ? paired_ctas_per_sm : ctas_per_sm);
    }
};

// Mma path with fused merging: whether the launch groups each tile's splits into one
// cluster (SM90), which merges them through distributed shared memory: no partials through
// L2, no fence, no arrival counter (bench/NOTES.md §29, §31). Only for a launch of one wave
// whose clusters the device holds all at once (a GPC holds a cluster whole; beyond one wave a
// cluster would wait for SMs of one GPC to free together: not measured), and splits short
// enough for the merge to count (kMmaClusterMaxKeys).
template <class Tr>
inline bool cluster_splits(const Params& p, const MmaSetup& setup, int splits, bool paired, int sms) {
    if (!Tr::kFusedMerge || splits < 2 || splits > kernel::kMaxCluster) return false;
    const Shape shape = make_shape<Tr>(p, splits);
    if (shape.keys_per_split > kMmaClusterMaxKeys) return false;
    return shape.units <= setup.resident(sms, paired) &&
           int64_t(setup.clusters[paired ? 1 : 0][splits]) * splits >= shape.units;
}

// Mma path: where a wave's splits cannot merge in clusters (more than a cluster holds, or
// the clusters do not fit), the most splits below that count, down to half of it, that can,
// of at most kMmaFallbackMaxKeys keys each: fewer CTAs merged in clusters beat more merged
// through L2 (b = 1 at 4k: 8 splits of 512 keys, not 16; §31). Fewer than half: not measured.
template <class Tr>
inline int cluster_fallback(const Params& p, const MmaSetup& setup, int splits, int sms) {
    if constexpr (Tr::kFusedMerge) {  // (else no clusters; a plain `if` leaves the loop unreachable: a warning)
        if (splits < 2 || cluster_splits<Tr>(p, setup, splits, false, sms)) return splits;
        for (int s = std::min(splits - 1, kernel::kMaxCluster); s >= std::max(2, (splits + 1) / 2); --s) {
            if (make_shape<Tr>(p, s).keys_per_split > kMmaFallbackMaxKeys) break;  // fewer splits: longer
            if (cluster_splits<Tr>(p, setup, s, false, sms)) return s;
        }
    }
    return splits;
}

// Mma path: whether the launch is a dependent one (kernel::launch_dependent; SM90 code).
// Every CTA allows the grid behind at its start, so the next grid's CTAs take the slots this
// one frees and wait there: its launch and start overlap this grid's drain. Two cases:
// - more than one wave of resident CTAs, once the last wave has started (§33);
// - one wave of whole units (no split, `whole`) two to an SM (`paired`) with at most a
//   sixteenth of its slots free (§36). With more free slots the next grid's first CTAs take
//   them from the start and its later ones land two to an SM where a fresh launch spreads
//   them; one CTA an SM ran slower with it.
// A split launch stays plain: its last CTAs merge the tile, slower with the next grid's CTAs
// waiting beside them (§36).
inline bool depend_on_previous(int64_t ctas, int64_t resident, bool sm90, bool whole, bool paired) {
    return sm90 && (ctas > resident || (whole && paired && 16 * ctas >= 15 * resident));
}

}  // namespace decode
}  // namespace fmha
