// The "ws" family: FlashAttention-3-style warp-specialised forward for Hopper (sm_90a: wgmma,
// TMA, setmaxnreg). Build with -gencode arch=compute_90a,code=sm_90a.
//
// A CTA works on tiles of kBlockM query rows of one (batch, head) with 1 + kBlockM / 64
// warpgroups: warpgroup 0 produces (TMA loads of Q and a K/V ring), the others consume (64
// query rows each: S, P and O in registers, wgmma), taking turns at the tensor cores
// (ping-pong). The kernel composes, as FA3's does:
//   ws/traits.h     Config (the generator's facts) and Traits: tile constants, what an
//                   instantiation supports, shared memory
//   ws/smem.h       the shared-memory layout and its mbarriers
//   ws/warpgroup.h  named barriers, ping-pong turns, setmaxnreg
//   ws/tile_work.h  tile order and the persistent scheduler's tile slots
//   ws/producer.h   the producer warpgroup's TMA loads
//   ws/consumer.h   the consumers' Q K^T / softmax / P V main loop
//   ws/epilogue.h   O and the LSE
//   ws/kernel.h     the __global__
//   ws/launch.h     host: entry, launch, TMA maps, grid
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
// K/V rows between a sequence's end and its last key block's end are read (masked to
// P = 0) and must hold finite values (padding rows zeroed, or the next sequence).
#pragma once

#include "fmha/kernel/ws/kernel.h"
#include "fmha/kernel/ws/launch.h"
#include "fmha/kernel/ws/traits.h"
