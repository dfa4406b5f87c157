// The "decode" family: attention for a few query rows per sequence (s_q <= Config::kMaxSq) against a
// KV cache of any length, at the memory-bandwidth limit; SM80 and newer. The rows that read
// one KV head (its G query heads times the sequence's positions) are packed into one unit, so
// K and V are read once per KV head. The tile picks the path: WarpTraits (CUDA cores, caches
// under 64 keys) or MmaTraits (mma.sync split-KV). Design: docs/ARCHITECTURE.md, "The decode
// family"; measurements: bench/NOTES.md §7, §8 and §26-§36. The generated kernels include
// this header; the pieces:
#pragma once

#include "fmha/kernel/decode/traits.h"       // constants, WarpTraits, MmaTraits, Traits
#include "fmha/kernel/decode/shape.h"        // the unit grid and the workspace layout
#include "fmha/kernel/decode/plan.h"         // host choices: splits, pairing, siblings, clusters
#include "fmha/kernel/decode/store.h"        // a row's O and LSE, or its split partial
#include "fmha/kernel/decode/merge.h"        // the split merge and combine_kernel
#include "fmha/kernel/decode/warp_unit.h"    // warp path: units and their loads
#include "fmha/kernel/decode/warp_kernel.h"  // warp path: decode_kernel, decode_short_kernel
#include "fmha/kernel/decode/mma_tile.h"     // mma path: a CTA's tile, Q, masks, one block
#include "fmha/kernel/decode/mma_kernel.h"   // mma path: decode_mma_kernel and its merges
#include "fmha/kernel/decode/launch.h"       // launch, entry, workspace_bytes
