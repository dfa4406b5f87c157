// The ws family: FlashAttention-3-style forward for Hopper (sm_90a: wgmma, TMA,
// setmaxnreg). Build with -gencode arch=compute_90a,code=sm_90a.
//
// A CTA works on tiles of kBlockM query rows of one (batch, head) with 1 + kBlockM / 64
// warpgroups: warpgroup 0 produces (TMA loads of Q and a kStages ring of K and V, under
// mbarriers: ws/producer.h), each other one consumes 64 rows (S, P and O in registers, the
// softmax of one key block overlapping the other block's P V, ping-pong turns between the
// warpgroups: ws/consumer.h, composed per tile in ws/kernel.h) and stores its O and LSE.
// Causal and local masks skip the key blocks no row of the tile sees.
//
// Tile order: sched::tile_at over m_blocks x heads x batch (causal: heaviest first inside
// sections of heads whose K and V fit in L2 together).
//   kPersistent == false (SCHEDULING_MODE 0): a 1-D grid of one CTA per tile.
//   kPersistent == true  (SCHEDULING_MODE 1): min(tiles, SMs) CTAs; CTA i starts with tile
//     i and the producer pulls each next tile from Params::tile_counter (atomicAdd), passes
//     it with its bounds (TileWork) to the consumers through a 2-slot shared-memory ring
//     (mbarriers) and starts its loads while the consumers finish the tile before
//     (normalise, store O). The CTA that draws the launch's last index puts the counter
//     back to 0, so it needs no reset between launches (launches that share a counter must
//     not overlap in time).
//
// What an instantiation supports (static_asserted in Traits; launch checks the rest):
//   Element      __half or __nv_bfloat16, f32 accumulation only (kAccFp16 == false)
//   kHeadDim(V)  multiples of 8 up to 256; dv may differ from d (MLA: d = 192, dv = 128).
//                Shared memory holds whole 64-column TMA panels: a head size that ends inside
//                one (32, 40, 72, 80, 96, 104, 160) pads it with the zeros TMA reads past the
//                tensor's d columns. Q K^T then runs ceil(d / 16) k16 steps and P V a wgmma N
//                of whole panels (64 per panel: the N of an MN-major SW128 operand), whose
//                extra columns are never stored; so d = 72 costs about what d = 80 does in
//                Q K^T and d = 128 in P V.
//   kBlockM      128 or 192 (two or three consumer warpgroups), kWarpsM = kBlockM / 16, kWarpsN 1
//   kBlockN      64 or 128 (a wgmma N), shared memory <= Config::kSmemLimit (227 KB)
//   Config       what generator/families/ws.py decided: the limit, panels, softcapping
//   run time     every MaskType (padding, causal, sliding/bidirectional window, chunked;
//                bottom-right aligned), var-len packed or padded
//                storage via offsets/lens, GQA/MQA, s_q != s_kv, any row/head strides
//                that are multiples of 8 elements, 16-byte aligned bases; a paged KV cache
//                (Params::kv_block_table): the maps of K and V then span the pool, and the
//                producer issues one copy per (min(tokens_per_block, kBlockN) keys, panel)
// Storage extent: the TMA maps need the number of tokens each tensor holds (O: as many as Q,
// Params::q_tokens says so for both). launch() takes
// them from Params::q_tokens / kv_tokens (the driver fills them; 0 is refused with
// cudaErrorInvalidValue, never guessed); launch_with_extents() takes them as arguments.
// Neither synchronises: both are capturable in a CUDA graph.
// K/V rows between a sequence's end and its last key block's end are read (masked to
// P = 0) and must hold finite values (padding rows zeroed, or the next sequence).
#pragma once

#include "fmha/kernel/ws/traits.h"     // Config, Traits, TmaMaps
#include "fmha/kernel/ws/warpgroup.h"  // shared-memory layout, barriers, setmaxnreg
#include "fmha/kernel/ws/tile_work.h"  // the schedule, a tile's bounds, the tile slots
#include "fmha/kernel/ws/producer.h"   // warpgroup 0: TMA loads of Q, K, V
#include "fmha/kernel/ws/consumer.h"   // a consumer warpgroup: wgmma issue, releases, turns
#include "fmha/kernel/ws/kernel.h"     // fwd_kernel: the tiles, softmax, O and LSE stores
#include "fmha/kernel/ws/launch.h"     // entry, grid_size, launch
