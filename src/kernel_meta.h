// The registry entry of one generated kernel. generated/registry.cpp defines the table
// (rendered from templates/registry.cpp.j2, one row per KernelSpec) inside lib/libfmha.so; the
// library's lookup (src/api/select.h), the C API and `fmha.exe -list-kernels` read it.
// Nothing else lists kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "params.h"

namespace fmha {

using LaunchFn = cudaError_t (*)(const Params&, cudaStream_t);
// Returns the kernel's __global__ entry for a mask (nullptr: the family does not implement
// it). Whether SASS exists for a device is KernelMeta::archs' answer (api::has_image): the
// library's runtime registered the entries, another runtime in the process cannot ask.
using EntryFn = const void* (*)(MaskType);
// Bytes of Params::workspace a launch of this problem uses at most (0: none).
using WorkspaceFn = size_t (*)(const Params&);
// Which tile a launch of this problem runs: 0 the row's own, i the i-th of its siblings.
using TileFn = int (*)(const Params&);
// Siblings a row may have (decode: OneHead and Quad; ws: Short).
constexpr int kMaxSiblings = 2;

struct KernelMeta {
    const char* name;     // KernelSpec.name: also the file name and the FMHA_FILTER key
    const char* family;   // "ws" (wgmma + TMA, warp-specialised, sm_90a) or "flash" (mma.sync, SM80+)
    int sm;               // family's base arch (90, 80): binary runs on sm >= this where built
                          // (ws: sm_90a SASS, on sm_90 only; the entry check finds no image elsewhere)
    DataType dtype;       // input/output element type
    DataType acc;         // accumulation of P·V (Q·K^T and softmax are always fp32)
    DataType kv_dtype;    // K and V's element type: dtype, or e4m3 (decode: an e4m3 KV cache)
    int d;                // head size of Q, K
    int dv;               // head size of V, O
    int block_m;          // query rows per CTA
    int block_n;          // keys per main-loop step
    int warps_m;          // warps along M (each owns block_m / warps_m rows); ws: consumer
                          // warps (2 warpgroups), its producer warpgroup is not counted
    int warps_n;          // warps along N
    uint32_t masks;       // bitmask of mask_bit(MaskType)
    uint32_t variants;    // VariantBit bits: the run-time variants its launch implements
    bool warp_specialized;
    bool uses_tma;        // loads Q/K/V tiles with TMA (cp.async.bulk.tensor): -use-tma
    bool persistent;      // one CTA per SM pulling tiles from Params::tile_counter
                          // (SCHEDULING_MODE=1); false: one CTA per tile
    int max_s_q;          // query rows per sequence it serves (decode: 16); 0 = any
    int max_rows;         // query rows per KV head (h / h_kv * s_q) it holds; 0 = any
    int min_s_kv;         // dispatch takes it only for caches of at least this many keys
                          // (max over the batch); 0 = any. A preference, not a limit:
                          // `-kernel NAME` runs it on any length
    const char* archs;    // the SASS targets it was compiled for, e.g. "sm_80,sm_90,sm_100"
    const char* siblings; // kernels (tiles) its launch may run instead of its own, comma-separated,
                          // e.g. decode's one-head tiles (generator/families/decode.py); "" = none
    int sibling_block_n[kMaxSiblings];  // their key blocks, in that order (0 past the last)
    LaunchFn launch;
    EntryFn entry;
    WorkspaceFn workspace;  // nullptr: the family needs no workspace
    TileFn tile;            // nullptr: the row has no siblings, its own tile always runs
};

extern const KernelMeta kKernels[];
extern const int kNumKernels;

}  // namespace fmha
